//! The `operations` and `operation_events` tables: every mutating call and its timeline.

use rusqlite::{Connection, OptionalExtension, Row, TransactionBehavior, params};
use serde::{Deserialize, Serialize};

use crate::codec::opt_json_col;
use crate::error::StoreError;
use crate::store::{Store, now_ms};

/// One mutating call (apply_patch, exec_command, write_stdin, terminate_process).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OperationRow {
    /// Server-minted id.
    pub operation_id: String,
    /// Client-chosen idempotency key (a label here; claims live in `operation_keys`).
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
    /// An unexpired key with the same scope, tool and key already existed; nothing was
    /// inserted. The caller compares fingerprints.
    Existing(Box<OperationRow>),
}

/// Where an operation key is valid: one client, one workspace registration, until a time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyScope {
    /// The client that chose the key.
    pub client: String,
    /// The workspace registration (root identity) it was used in.
    pub registration: String,
    /// When the key expires (unix ms); from then on the key is unknown.
    pub expires_ms: i64,
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

pub(crate) const COLUMNS: &str = "operation_id, operation_key, fingerprint, tool, workspace, client, status, \
     created_ms, finished_ms, result";

/// [`COLUMNS`] qualified with a table alias.
fn prefixed_columns(alias: &str) -> String {
    COLUMNS
        .split(',')
        .map(|c| format!("{alias}.{}", c.trim()))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(crate) fn from_row(row: &Row<'_>) -> rusqlite::Result<OperationRow> {
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

/// Sets an operation's status, finish time and result; `OperationNotFound` when there is none.
fn update_finished(
    conn: &Connection,
    id: &str,
    status: &str,
    result: Option<&str>,
) -> Result<(), StoreError> {
    let changed = conn
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

/// Appends a timeline step (stamped now) to an existing operation; `OperationNotFound` when
/// there is none.
fn insert_event(
    conn: &Connection,
    id: &str,
    name: &str,
    status: Option<&str>,
    reason: Option<&str>,
) -> Result<(), StoreError> {
    let inserted = conn
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

impl Store {
    /// Inserts `row`. With a key (`row.operation_key`) and a `scope`, the key is claimed in
    /// that scope for `row.tool` unless an unexpired claim exists, in which case nothing is
    /// inserted and the claimed operation is returned. An expired claim is replaced. Without a
    /// scope the key is only a label.
    ///
    /// Atomic: the check and the inserts run in one immediate transaction. A duplicate
    /// `operation_id` is an error, not a claim.
    pub fn create_operation(
        &self,
        row: &OperationRow,
        scope: Option<&KeyScope>,
    ) -> Result<KeyClaim, StoreError> {
        self.create_owned_operation(row, scope, None)
    }

    /// [`Store::create_operation`], recording in the same transaction the server instance
    /// that owns the operation (and so its journal and its processes): another server starting
    /// on this store leaves it alone while that instance runs.
    pub fn create_owned_operation(
        &self,
        row: &OperationRow,
        scope: Option<&KeyScope>,
        instance_id: Option<&str>,
    ) -> Result<KeyClaim, StoreError> {
        self.mint(row, scope, instance_id, None)
    }

    /// [`Store::create_owned_operation`] that, when the operation is created, also appends its
    /// first timeline step `event` in the same transaction (one commit on a call's path
    /// instead of two).
    pub fn create_owned_operation_with_event(
        &self,
        row: &OperationRow,
        scope: Option<&KeyScope>,
        instance_id: Option<&str>,
        event: &str,
    ) -> Result<KeyClaim, StoreError> {
        self.mint(row, scope, instance_id, Some(event))
    }

    fn mint(
        &self,
        row: &OperationRow,
        scope: Option<&KeyScope>,
        instance_id: Option<&str>,
        event: Option<&str>,
    ) -> Result<KeyClaim, StoreError> {
        let result = json_text(row.result.as_ref())?;
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let claim = match (&row.operation_key, scope) {
            (Some(key), Some(scope)) => tx
                .prepare_cached(&format!(
                    "SELECT {} FROM operation_keys k JOIN operations o \
                     ON o.operation_id = k.operation_id \
                     WHERE k.client = ?1 AND k.registration = ?2 AND k.tool = ?3 \
                     AND k.operation_key = ?4 AND k.expires_ms > ?5",
                    prefixed_columns("o")
                ))?
                .query_row(
                    params![scope.client, scope.registration, row.tool, key, now_ms()],
                    from_row,
                )
                .optional()?,
            _ => None,
        };
        if let Some(existing) = claim {
            tx.commit()?;
            return Ok(KeyClaim::Existing(Box::new(existing)));
        }
        tx.prepare_cached(
            "INSERT INTO operations (operation_id, operation_key, fingerprint, tool, \
             workspace, client, status, created_ms, finished_ms, result, instance_id) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
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
            instance_id,
        ])?;
        if let (Some(key), Some(scope)) = (&row.operation_key, scope) {
            tx.prepare_cached(
                "INSERT INTO operation_keys (client, registration, tool, operation_key, \
                 operation_id, created_ms, expires_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) \
                 ON CONFLICT (client, registration, tool, operation_key) DO UPDATE SET \
                 operation_id = excluded.operation_id, created_ms = excluded.created_ms, \
                 expires_ms = excluded.expires_ms",
            )?
            .execute(params![
                scope.client,
                scope.registration,
                row.tool,
                key,
                row.operation_id,
                row.created_ms,
                scope.expires_ms,
            ])?;
        }
        if let Some(name) = event {
            insert_event(&tx, &row.operation_id, name, None, None)?;
        }
        tx.commit()?;
        Ok(KeyClaim::Created)
    }

    /// Marks an operation finished now with `status` and an optional result summary.
    pub fn finish_operation(
        &self,
        id: &str,
        status: &str,
        result: Option<&serde_json::Value>,
    ) -> Result<(), StoreError> {
        let result = json_text(result)?;
        update_finished(&self.conn(), id, status, result.as_deref())
    }

    /// [`Store::finish_operation`] and its `finished` timeline step (with `status` and
    /// `reason`) in one transaction: both or neither.
    pub fn finish_operation_with_event(
        &self,
        id: &str,
        status: &str,
        result: Option<&serde_json::Value>,
        reason: Option<&str>,
    ) -> Result<(), StoreError> {
        let result = json_text(result)?;
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        update_finished(&tx, id, status, result.as_deref())?;
        insert_event(&tx, id, "finished", Some(status), reason)?;
        tx.commit()?;
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

    /// The operations `client` claimed `key` for that have not expired at `now_ms`, with the
    /// registration each claim is scoped to, oldest first (a key may be claimed in several
    /// workspaces or tools).
    pub fn keyed_operations(
        &self,
        client: &str,
        key: &str,
        now_ms: i64,
    ) -> Result<Vec<(String, OperationRow)>, StoreError> {
        let conn = self.conn();
        let mut st = conn.prepare_cached(&format!(
            "SELECT {}, k.registration FROM operation_keys k JOIN operations o \
             ON o.operation_id = k.operation_id \
             WHERE k.client = ?1 AND k.operation_key = ?2 AND k.expires_ms > ?3 \
             ORDER BY k.created_ms, o.operation_id",
            prefixed_columns("o")
        ))?;
        let rows = st
            .query_map(params![client, key, now_ms], |r| {
                Ok((r.get::<_, String>(10)?, from_row(r)?))
            })?
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
        insert_event(&self.conn(), id, name, status, reason)
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

    /// [`Store::unfinished_operations`], each with the server instance that owns it (`None`:
    /// created without an owner, e.g. before schema version 6).
    pub fn unfinished_operations_with_owner(
        &self,
    ) -> Result<Vec<(OperationRow, Option<String>)>, StoreError> {
        let conn = self.conn();
        let mut st = conn.prepare_cached(&format!(
            "SELECT {COLUMNS}, instance_id FROM operations WHERE finished_ms IS NULL \
             ORDER BY created_ms, operation_id"
        ))?;
        let rows = st
            .query_map([], |r| Ok((from_row(r)?, r.get(10)?)))?
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
