//! The store's side of the audit writer (`audit_writer.rs`): starting and stopping it, and
//! appends that go through its queue while it runs and are written at once on the store's own
//! connection otherwise (in-memory stores, before start, after stop), as `insert_decisions` does.

use crate::audit_writer::{AuditTicket, AuditWriter, AuditWriterConfig, NotQueued, TryAppendError};
use crate::decision_rows::DecisionRow;
use crate::error::StoreError;
use crate::store::Store;

impl Store {
    /// Starts the audit writer of a file store (a no-op for an in-memory store, whose appends
    /// stay synchronous, and when a writer was already started).
    pub fn start_audit_writer(&self, config: AuditWriterConfig) -> Result<(), StoreError> {
        if self.audit_writer.get().is_some() {
            return Ok(());
        }
        let path = match self.conn().path() {
            Some(p) if !p.is_empty() => p.to_string(),
            _ => return Ok(()),
        };
        let writer = AuditWriter::start(&path, config)?;
        let checkpoints_aside = writer.checkpointer().is_some();
        match self.audit_writer.set(writer) {
            // The request path's commits leave the log to the writer's checkpoint thread.
            Ok(()) if checkpoints_aside => {
                self.conn().pragma_update(None, "wal_autocheckpoint", 0)?;
            }
            Ok(()) => {}
            // Another thread started one first: this one drains nothing and stops.
            Err(lost) => drop(lost),
        }
        Ok(())
    }

    /// The store connection's `wal_autocheckpoint` (pages of log after which its own commit
    /// checkpoints; 0 while the audit writer's thread does it).
    pub fn wal_autocheckpoint(&self) -> Result<i64, StoreError> {
        Ok(self
            .conn()
            .query_row("PRAGMA wal_autocheckpoint", [], |r| r.get(0))?)
    }

    /// Checkpoints of the log run off the request path so far (0 when no writer runs; see
    /// `checkpointer.rs`).
    pub fn wal_checkpoints(&self) -> u64 {
        self.audit_writer
            .get()
            .and_then(AuditWriter::checkpointer)
            .map_or(0, crate::checkpointer::Checkpointer::runs)
    }

    /// Waits until more than `after` checkpoints ran off the request path, at most `timeout`;
    /// true when they did.
    pub fn wait_wal_checkpoint(&self, after: u64, timeout: std::time::Duration) -> bool {
        self.audit_writer
            .get()
            .and_then(AuditWriter::checkpointer)
            .is_some_and(|c| c.wait_run(after, timeout))
    }

    /// Whether appends go through the writer thread.
    pub fn audit_writer_running(&self) -> bool {
        self.audit_writer.get().is_some_and(AuditWriter::running)
    }

    /// Drains the queue into the store and ends the writer thread; later appends are written at
    /// once. Every ticket handed out before is settled when this returns.
    pub fn stop_audit_writer(&self) {
        if let Some(w) = self.audit_writer.get() {
            w.stop();
            if w.checkpointer().is_some() {
                // Its checkpoint thread is gone: this connection checkpoints itself again (a
                // failure leaves the log to grow until the store is opened again, which resets
                // the setting; no row is at stake).
                let _ = self.conn().pragma_update(
                    None,
                    "wal_autocheckpoint",
                    crate::store::WAL_AUTOCHECKPOINT,
                );
            }
        }
    }

    /// Appends one decision's rows without blocking: queued behind the writer (the ticket
    /// settles at their commit), written at once when no writer runs, or handed back when the
    /// queue is full.
    pub fn try_append_decisions(
        &self,
        rows: Vec<DecisionRow>,
    ) -> Result<AuditTicket, TryAppendError> {
        self.append(rows, false)
    }

    /// Appends one decision's rows, waiting for room when the queue is full (backpressure).
    pub fn append_decisions(&self, rows: Vec<DecisionRow>) -> Result<AuditTicket, StoreError> {
        match self.append(rows, true) {
            Ok(t) => Ok(t),
            Err(TryAppendError::Store(e)) => Err(e),
            // Not reached: a blocking append waits for room instead.
            Err(TryAppendError::Full(_)) => Err(StoreError::AuditWrite("audit queue full".into())),
        }
    }

    fn append(&self, rows: Vec<DecisionRow>, block: bool) -> Result<AuditTicket, TryAppendError> {
        if rows.is_empty() {
            return Ok(AuditTicket::written());
        }
        let rows = match self.audit_writer.get() {
            None => rows,
            Some(w) => match w.append(rows, block) {
                Ok(ticket) => return Ok(ticket),
                Err(NotQueued::Full(rows)) => return Err(TryAppendError::Full(rows)),
                Err(NotQueued::Stopped(rows)) => rows,
            },
        };
        self.insert_decisions(&rows)
            .map(|()| AuditTicket::written())
            .map_err(TryAppendError::Store)
    }

    /// The barrier of readers and tests: returns once every row appended before the call is
    /// committed (failed commits were reported to the writer's error hook).
    pub fn flush_decisions(&self) {
        if let Some(w) = self.audit_writer.get() {
            w.flush();
        }
    }
}
