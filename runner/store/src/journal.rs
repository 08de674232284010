//! The patch rollback journal: what each touched file looked like before an apply_patch.
//!
//! Written (and committed) before the first rename of a patch, cleared when the patch has
//! either fully applied or fully rolled back. A journal still open at start-up means a crash
//! in between; its entries say how to restore the workspace.

use rusqlite::{OptionalExtension, TransactionBehavior, params};
use serde::{Deserialize, Serialize};

use crate::codec::json_col;
use crate::error::StoreError;
use crate::seal::{JournalKey, hex};
use crate::store::{Store, now_ms};

/// Domain separation of the sealed message (bump on any change of the encoding).
const DOMAIN: &[u8] = b"codespace-patch-journal-v1";

/// The prior state of one file touched by a patch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalEntry {
    /// Workspace-relative path.
    pub path: String,
    /// Previous contents; `None` means the file did not exist.
    pub before: Option<Vec<u8>>,
    /// Previous permission bits, if the file existed.
    pub mode: Option<u32>,
    /// Workspace-relative directories the patch created for this file (to remove on rollback).
    pub created_dirs: Vec<String>,
}

/// Whether an open journal was written by a holder of this store's journal key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JournalSeal {
    /// The seal verifies: this store's writer recorded exactly these rows.
    Valid,
    /// No seal (a row written by something other than [`Store::journal_begin`], or before
    /// schema version 2).
    Missing,
    /// A seal that does not verify: the rows were changed or forged.
    Invalid,
}

/// An open journal, entries in the order they were given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenJournal {
    /// The operation it belongs to.
    pub operation_id: String,
    /// Workspace id.
    pub workspace: String,
    /// The workspace registration (root identity) it was written for.
    pub registration: Option<String>,
    /// What each touched file looked like before.
    pub entries: Vec<JournalEntry>,
    /// Whether the seal verifies under this store's key.
    pub seal: JournalSeal,
    /// The server instance that owns its operation (`None`: written before schema version 6).
    pub instance_id: Option<String>,
}

impl Store {
    /// Records the journal of an operation in one transaction, sealed with the store's journal
    /// key and bound to the workspace registration it will be restored into. The operation must
    /// exist and must not already have a journal.
    pub fn journal_begin(
        &self,
        operation_id: &str,
        workspace: &str,
        registration: &str,
        entries: &[JournalEntry],
    ) -> Result<(), StoreError> {
        let seal = self
            .journal_key()?
            .seal(operation_id, workspace, registration, entries)?;
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let op_exists = tx
            .prepare_cached("SELECT 1 FROM operations WHERE operation_id = ?1")?
            .query_row(params![operation_id], |_| Ok(()))
            .optional()?
            .is_some();
        if !op_exists {
            return Err(StoreError::OperationNotFound(operation_id.to_owned()));
        }
        let inserted = tx
            .prepare_cached(
                "INSERT INTO patch_journals (operation_id, workspace, created_ms, registration, \
                 seal) VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (operation_id) DO NOTHING",
            )?
            .execute(params![
                operation_id,
                workspace,
                now_ms(),
                registration,
                seal
            ])?;
        if inserted == 0 {
            return Err(StoreError::JournalExists(operation_id.to_owned()));
        }
        {
            let mut st = tx.prepare_cached(
                "INSERT INTO patch_journal_entries \
                 (operation_id, seq, path, before, mode, created_dirs) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?;
            for (seq, e) in (0_i64..).zip(entries) {
                st.execute(params![
                    operation_id,
                    seq,
                    e.path,
                    e.before,
                    e.mode,
                    serde_json::to_string(&e.created_dirs)?,
                ])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Drops the journal of an operation (no error if there is none).
    pub fn journal_clear(&self, operation_id: &str) -> Result<(), StoreError> {
        self.conn()
            .prepare_cached("DELETE FROM patch_journals WHERE operation_id = ?1")?
            .execute(params![operation_id])?;
        Ok(())
    }

    /// Every journal not yet cleared, oldest first, each with its entries in order and whether
    /// its seal verifies under this store's journal key.
    pub fn open_journals(&self) -> Result<Vec<OpenJournal>, StoreError> {
        let key = self.journal_key()?;
        let mut conn = self.conn();
        // One read transaction so journals and entries come from the same snapshot.
        let tx = conn.transaction()?;
        type Head = (
            String,
            String,
            Option<String>,
            Option<String>,
            Option<String>,
        );
        let heads = tx
            .prepare_cached(
                "SELECT j.operation_id, j.workspace, j.registration, j.seal, o.instance_id \
                 FROM patch_journals j LEFT JOIN operations o ON o.operation_id = j.operation_id \
                 ORDER BY j.created_ms, j.operation_id",
            )?
            .query_map([], |r| -> rusqlite::Result<Head> {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        let mut out = Vec::with_capacity(heads.len());
        {
            let mut st = tx.prepare_cached(
                "SELECT path, before, mode, created_dirs FROM patch_journal_entries \
                 WHERE operation_id = ?1 ORDER BY seq",
            )?;
            for (op, ws, registration, seal, instance_id) in heads {
                let entries = st
                    .query_map(params![op], |r| {
                        Ok(JournalEntry {
                            path: r.get(0)?,
                            before: r.get(1)?,
                            mode: r.get(2)?,
                            created_dirs: json_col(r, 3)?,
                        })
                    })?
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                let seal = match (&seal, &registration) {
                    (Some(seal), Some(reg)) => {
                        if key.verify(seal, &op, &ws, reg, &entries)? {
                            JournalSeal::Valid
                        } else {
                            JournalSeal::Invalid
                        }
                    }
                    _ => JournalSeal::Missing,
                };
                out.push(OpenJournal {
                    operation_id: op,
                    workspace: ws,
                    registration,
                    entries,
                    seal,
                    instance_id,
                });
            }
        }
        tx.commit()?;
        Ok(out)
    }
}

/// A journal's seal: the key's HMAC over its fields (`seal.rs`), encoded here.
impl JournalKey {
    /// The seal of a journal (hex).
    pub(crate) fn seal(
        &self,
        operation_id: &str,
        workspace: &str,
        registration: &str,
        entries: &[JournalEntry],
    ) -> Result<String, StoreError> {
        let dirs: Vec<String> = entries
            .iter()
            .map(|e| serde_json::to_string(&e.created_dirs))
            .collect::<Result<_, _>>()?;
        let mac = self.mac(|m| {
            m.field(DOMAIN);
            m.field(operation_id.as_bytes());
            m.field(workspace.as_bytes());
            m.field(registration.as_bytes());
            m.field(
                &u64::try_from(entries.len())
                    .unwrap_or(u64::MAX)
                    .to_be_bytes(),
            );
            for (e, dirs) in entries.iter().zip(&dirs) {
                m.field(e.path.as_bytes());
                match &e.before {
                    Some(b) => {
                        m.field(b"some");
                        m.field(b);
                    }
                    None => m.field(b"none"),
                }
                match e.mode {
                    Some(mode) => m.field(&mode.to_be_bytes()),
                    None => m.field(b""),
                }
                m.field(dirs.as_bytes());
            }
        });
        Ok(hex(&mac))
    }

    /// Whether `seal` is the seal of this journal (compared in constant time).
    pub(crate) fn verify(
        &self,
        seal: &str,
        operation_id: &str,
        workspace: &str,
        registration: &str,
        entries: &[JournalEntry],
    ) -> Result<bool, StoreError> {
        let want = self.seal(operation_id, workspace, registration, entries)?;
        let (a, b) = (want.as_bytes(), seal.as_bytes());
        if a.len() != b.len() {
            return Ok(false);
        }
        Ok(a.iter().zip(b).fold(0_u8, |acc, (x, y)| acc | (x ^ y)) == 0)
    }
}
