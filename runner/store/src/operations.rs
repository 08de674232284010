//! The `operations` and `operation_events` tables: every mutating call and its timeline.

use rusqlite::{OptionalExtension, Row, TransactionBehavior, params};
use serde::{Deserialize, Serialize};

use crate::codec::opt_json_col;
use crate::error::StoreError;
use crate::store::{Store, now_ms};

/// One mutating call (apply_patch, exec_command, write_stdin, terminate_process).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OperationRow {
    /// Server-minted id.
    pub operation_id: String,
    /// Client-chosen idempotency key, unique per (workspace, tool).
    pub operation_key: Option<String>,
    /// Digest of the request, compared when a key is reused.
    pub fingerprint: String,
    /// MCP tool name.
    pub tool: String,
    /// Workspace id.
    pub workspace: String,
    /// Client name, when known.
    pub client: Option<String>,
    /// Current status (e.g. `"running"`, `"applied"`, `"unknown"`).
    pub status: String,
    /// When it was created (unix ms).
    pub created_ms: i64,
    /// When it finished (unix ms); `None` while unfinished.
    pub finished_ms: Option<i64>,
    /// Result summary, once finished.
    pub result: Option<serde_json::Value>,
}

/// Outcome of [`Store::create_operation`].
#[derive(Debug, Clone, PartialEq)]
pub enum KeyClaim {
    /// The row was inserted.
    Created,
    /// A row with the same (workspace, tool, operation_key) already existed; nothing was
    /// inserted. The caller compares fingerprints.
    Existing(Box<OperationRow>),
}

/// One step in an operation's timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperationEvent {
    /// When it happened (unix ms).
    pub at_ms: i64,
    /// Step name, e.g. `"planned"` or `"renamed"`.
    pub name: String,
    /// Status after the step, if it changed.
    pub status: Option<String>,
    /// Why, if relevant.
    pub reason: Option<String>,
}

const COLUMNS: &str = "operation_id, operation_key, fingerprint, tool, workspace, client, status, \
     created_ms, finished_ms, result";

fn from_row(row: &Row<'_>) -> rusqlite::Result<OperationRow> {
    Ok(OperationRow {
        operation_id: row.get(0)?,
        operation_key: row.get(1)?,
        fingerprint: row.get(2)?,
        tool: row.get(3)?,
        workspace: row.get(4)?,
        client: row.get(5)?,
        status: row.get(6)?,
        created_ms: row.get(7)?,
        finished_ms: row.get(8)?,
        result: opt_json_col(row, 9)?,
    })
}

fn json_text(value: Option<&serde_json::Value>) -> Result<Option<String>, StoreError> {
    Ok(value.map(serde_json::to_string).transpose()?)
}

impl Store {
    /// Inserts `row` unless its operation key is already taken in the same (workspace, tool).
    ///
    /// Atomic: the check and the insert are one statement inside one immediate transaction.
    /// A duplicate `operation_id` is an error, not a claim.
    pub fn create_operation(&self, row: &OperationRow) -> Result<KeyClaim, StoreError> {
        let result = json_text(row.result.as_ref())?;
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let inserted = tx
            .prepare_cached(
                "INSERT INTO operations (operation_id, operation_key, fingerprint, tool, \
                 workspace, client, status, created_ms, finished_ms, result) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) \
                 ON CONFLICT (workspace, tool, operation_key) DO NOTHING",
            )?
            .execute(params![
                row.operation_id,
                row.operation_key,
                row.fingerprint,
                row.tool,
                row.workspace,
                row.client,
                row.status,
                row.created_ms,
                row.finished_ms,
                result,
            ])?;
        let claim = if inserted == 1 {
            KeyClaim::Created
        } else {
            let existing = tx
                .prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM operations \
                     WHERE workspace = ?1 AND tool = ?2 AND operation_key = ?3"
                ))?
                .query_row(
                    params![row.workspace, row.tool, row.operation_key],
                    from_row,
                )?;
            KeyClaim::Existing(Box::new(existing))
        };
        tx.commit()?;
        Ok(claim)
    }

    /// Marks an operation finished now with `status` and an optional result summary.
    pub fn finish_operation(
        &self,
        id: &str,
        status: &str,
        result: Option<&serde_json::Value>,
    ) -> Result<(), StoreError> {
        let result = json_text(result)?;
        let changed = self
            .conn()
            .prepare_cached(
                "UPDATE operations SET status = ?2, finished_ms = ?3, result = ?4 \
                 WHERE operation_id = ?1",
            )?
            .execute(params![id, status, now_ms(), result])?;
        if changed == 0 {
            return Err(StoreError::OperationNotFound(id.to_owned()));
        }
        Ok(())
    }

    /// The operation with this id, if any.
    pub fn operation_by_id(&self, id: &str) -> Result<Option<OperationRow>, StoreError> {
        let conn = self.conn();
        let row = conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM operations WHERE operation_id = ?1"
            ))?
            .query_row(params![id], from_row)
            .optional()?;
        Ok(row)
    }

    /// Every operation with this key (it may be used in several workspaces or tools), oldest first.
    pub fn operation_by_key(&self, key: &str) -> Result<Vec<OperationRow>, StoreError> {
        let conn = self.conn();
        let mut st = conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM operations WHERE operation_key = ?1 \
             ORDER BY created_ms, operation_id"
        ))?;
        let rows = st
            .query_map(params![key], from_row)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    /// Appends a timeline step (stamped now) to an existing operation.
    pub fn add_operation_event(
        &self,
        id: &str,
        name: &str,
        status: Option<&str>,
        reason: Option<&str>,
    ) -> Result<(), StoreError> {
        let inserted = self
            .conn()
            .prepare_cached(
                "INSERT INTO operation_events (operation_id, at_ms, name, status, reason) \
                 SELECT ?1, ?2, ?3, ?4, ?5 \
                 WHERE EXISTS (SELECT 1 FROM operations WHERE operation_id = ?1)",
            )?
            .execute(params![id, now_ms(), name, status, reason])?;
        if inserted == 0 {
            return Err(StoreError::OperationNotFound(id.to_owned()));
        }
        Ok(())
    }

    /// The timeline of an operation, in the order the steps were added.
    pub fn operation_events(&self, id: &str) -> Result<Vec<OperationEvent>, StoreError> {
        let conn = self.conn();
        let mut st = conn.prepare_cached(
            "SELECT at_ms, name, status, reason FROM operation_events \
             WHERE operation_id = ?1 ORDER BY id",
        )?;
        let rows = st
            .query_map(params![id], |r| {
                Ok(OperationEvent {
                    at_ms: r.get(0)?,
                    name: r.get(1)?,
                    status: r.get(2)?,
                    reason: r.get(3)?,
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    /// Operations that never finished (`finished_ms IS NULL`), oldest first; for start-up recovery.
    pub fn unfinished_operations(&self) -> Result<Vec<OperationRow>, StoreError> {
        let conn = self.conn();
        let mut st = conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM operations WHERE finished_ms IS NULL \
             ORDER BY created_ms, operation_id"
        ))?;
        let rows = st
            .query_map([], from_row)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }
}
