//! The `processes` table: processes started by exec_command and their last known state.

use rusqlite::{OptionalExtension, TransactionBehavior, params};
use serde::{Deserialize, Serialize};

use crate::error::StoreError;
use crate::store::Store;

/// Last known state of one process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessRow {
    /// Server-minted id.
    pub process_id: String,
    /// Workspace id.
    pub workspace: String,
    /// The exec_command operation that started it (must exist).
    pub operation_id: String,
    /// SHA-256 of the argv (the argv itself is not stored).
    pub argv_sha256: String,
    /// Program name (argv\[0\]).
    pub program: String,
    /// Whether it runs on a PTY.
    pub tty: bool,
    /// OS process id, once spawned.
    pub pid: Option<i64>,
    /// `"running"`, `"exited"`, `"lost"` (its worker died while it ran: see
    /// [`Store::mark_processes_lost`]), `"unknown"` (a previous server's), ...
    pub state: String,
    /// Exit code, once exited.
    pub exit_code: Option<i64>,
    /// How it was ended (signal, timeout, ...), if it was.
    pub termination: Option<String>,
    /// When it started (unix ms).
    pub started_ms: i64,
    /// When it ended (unix ms).
    pub ended_ms: Option<i64>,
}

impl Store {
    /// Inserts the process or replaces every field of the row with the same `process_id`.
    pub fn upsert_process(&self, row: &ProcessRow) -> Result<(), StoreError> {
        self.conn()
            .prepare_cached(
                "INSERT INTO processes (process_id, workspace, operation_id, argv_sha256, program, \
                 tty, pid, state, exit_code, termination, started_ms, ended_ms) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12) \
                 ON CONFLICT (process_id) DO UPDATE SET workspace = excluded.workspace, \
                 operation_id = excluded.operation_id, argv_sha256 = excluded.argv_sha256, \
                 program = excluded.program, tty = excluded.tty, pid = excluded.pid, \
                 state = excluded.state, exit_code = excluded.exit_code, \
                 termination = excluded.termination, started_ms = excluded.started_ms, \
                 ended_ms = excluded.ended_ms",
            )?
            .execute(params![
                row.process_id,
                row.workspace,
                row.operation_id,
                row.argv_sha256,
                row.program,
                row.tty,
                row.pid,
                row.state,
                row.exit_code,
                row.termination,
                row.started_ms,
                row.ended_ms,
            ])?;
        Ok(())
    }

    /// The process with this id, if any.
    pub fn process(&self, id: &str) -> Result<Option<ProcessRow>, StoreError> {
        let conn = self.conn();
        let row = conn
            .prepare_cached(
                "SELECT process_id, workspace, operation_id, argv_sha256, program, tty, pid, \
                 state, exit_code, termination, started_ms, ended_ms \
                 FROM processes WHERE process_id = ?1",
            )?
            .query_row(params![id], |r| {
                Ok(ProcessRow {
                    process_id: r.get(0)?,
                    workspace: r.get(1)?,
                    operation_id: r.get(2)?,
                    argv_sha256: r.get(3)?,
                    program: r.get(4)?,
                    tty: r.get(5)?,
                    pid: r.get(6)?,
                    state: r.get(7)?,
                    exit_code: r.get(8)?,
                    termination: r.get(9)?,
                    started_ms: r.get(10)?,
                    ended_ms: r.get(11)?,
                })
            })
            .optional()?;
        Ok(row)
    }

    /// The ids of the processes of `workspace` still recorded as `"running"` (the ones its
    /// worker's death makes `lost`).
    pub fn running_processes(&self, workspace: &str) -> Result<Vec<String>, StoreError> {
        let conn = self.conn();
        let mut st = conn.prepare_cached(
            "SELECT process_id FROM processes WHERE workspace = ?1 AND state = 'running' \
             ORDER BY process_id",
        )?;
        let ids = st
            .query_map(params![workspace], |r| r.get::<_, String>(0))?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ids)
    }

    /// The worker that ran these processes died or disconnected: each of them still recorded as
    /// `"running"` becomes `"lost"` (ended now, no exit code). Returns how many rows changed.
    pub fn mark_processes_lost(&self, process_ids: &[String]) -> Result<usize, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut changed = 0;
        {
            let mut st = tx.prepare_cached(
                "UPDATE processes SET state = 'lost', ended_ms = ?2 \
                 WHERE process_id = ?1 AND state = 'running'",
            )?;
            let now = crate::store::now_ms();
            for id in process_ids {
                changed += st.execute(params![id, now])?;
            }
        }
        tx.commit()?;
        Ok(changed)
    }

    /// At start-up: every process recorded as `"running"` belonged to a previous server, so its
    /// state becomes `"unknown"`. Returns how many rows changed.
    pub fn mark_running_processes_unknown(&self) -> Result<usize, StoreError> {
        self.mark_running_processes_unknown_unless(|_| false)
    }

    /// [`Store::mark_running_processes_unknown`], except the processes for which
    /// `owned_by_live(owner)` holds, `owner` being the server instance that owns the process's
    /// operation (another server still running on this store: those processes are its own).
    pub fn mark_running_processes_unknown_unless(
        &self,
        owned_by_live: impl Fn(Option<&str>) -> bool,
    ) -> Result<usize, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let running = tx
            .prepare_cached(
                "SELECT p.process_id, o.instance_id FROM processes p \
                 LEFT JOIN operations o ON o.operation_id = p.operation_id \
                 WHERE p.state = 'running'",
            )?
            .query_map([], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, Option<String>>(1)?))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        let mut changed = 0;
        {
            let mut st = tx.prepare_cached(
                "UPDATE processes SET state = 'unknown' WHERE process_id = ?1 AND state = 'running'",
            )?;
            for (id, owner) in running {
                if owned_by_live(owner.as_deref()) {
                    continue;
                }
                changed += st.execute(params![id])?;
            }
        }
        tx.commit()?;
        Ok(changed)
    }
}
