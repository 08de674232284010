//! The `workspace_registrations` table: which root a workspace id was bound to. The registration
//! id is the workspace identity operation keys and patch journals are scoped to.

use rusqlite::{OptionalExtension, TransactionBehavior, params};

use crate::error::StoreError;
use crate::store::{Store, now_ms};

impl Store {
    /// The registration of `workspace` bound to the root `root_id` (`"<dev>:<inode>"`): the
    /// existing one, or `fresh_id` recorded as a new one. Atomic across processes.
    pub fn register_workspace(
        &self,
        workspace: &str,
        root_id: &str,
        fresh_id: &str,
    ) -> Result<String, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let now = now_ms();
        let existing: Option<String> = tx
            .prepare_cached(
                "SELECT registration_id FROM workspace_registrations \
                 WHERE workspace = ?1 AND root_id = ?2",
            )?
            .query_row(params![workspace, root_id], |r| r.get(0))
            .optional()?;
        let id = match existing {
            Some(id) => {
                tx.prepare_cached(
                    "UPDATE workspace_registrations SET last_seen_ms = ?2 \
                     WHERE registration_id = ?1",
                )?
                .execute(params![id, now])?;
                id
            }
            None => {
                tx.prepare_cached(
                    "INSERT INTO workspace_registrations \
                     (registration_id, workspace, root_id, created_ms, last_seen_ms) \
                     VALUES (?1, ?2, ?3, ?4, ?4)",
                )?
                .execute(params![fresh_id, workspace, root_id, now])?;
                fresh_id.to_owned()
            }
        };
        tx.commit()?;
        Ok(id)
    }
}
