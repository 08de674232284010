//! The `events` table: server-level happenings (start-up probe, policy reloads, ...).

use rusqlite::params;
use serde::{Deserialize, Serialize};

use crate::codec::{json_col, sql_limit};
use crate::error::StoreError;
use crate::store::{Store, now_ms};

/// One stored server event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventRow {
    /// Increasing id, assigned on insert.
    pub id: i64,
    /// When it was stored (unix ms).
    pub at_ms: i64,
    /// Event kind, e.g. `"startup_probe"` or `"policy_reload"`.
    pub kind: String,
    /// Free-form JSON detail.
    pub detail: serde_json::Value,
}

impl Store {
    /// Stores an event stamped with the current time and returns its id.
    pub fn insert_event(&self, kind: &str, detail: &serde_json::Value) -> Result<i64, StoreError> {
        let detail = serde_json::to_string(detail)?;
        let conn = self.conn();
        let id = conn
            .prepare_cached(
                "INSERT INTO events (at_ms, kind, detail) VALUES (?1, ?2, ?3) RETURNING id",
            )?
            .query_row(params![now_ms(), kind, detail], |r| r.get(0))?;
        Ok(id)
    }

    /// The newest `limit` events (of `kind`, if given), returned oldest first (newest last).
    pub fn events(&self, kind: Option<&str>, limit: usize) -> Result<Vec<EventRow>, StoreError> {
        let conn = self.conn();
        let mut st = conn.prepare_cached(
            "SELECT id, at_ms, kind, detail FROM events \
             WHERE ?1 IS NULL OR kind = ?1 ORDER BY id DESC LIMIT ?2",
        )?;
        let mut rows = st
            .query_map(params![kind, sql_limit(limit)], |r| {
                Ok(EventRow {
                    id: r.get(0)?,
                    at_ms: r.get(1)?,
                    kind: r.get(2)?,
                    detail: json_col(r, 3)?,
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        rows.reverse();
        Ok(rows)
    }
}
