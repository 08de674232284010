//! How the gateway hands decision rows to the store's audit writer: read-only calls append and
//! go on (the rows are group-committed within the writer's delay, 50 ms); allowed calls of any
//! other tool wait until their rows are committed before the runner acts (write-ahead). A full
//! queue makes the caller wait for room; nothing is dropped. Waits run as blocking sections, so
//! a multi-threaded runtime moves its other tasks off the waiting worker.

use codespace_store::{AuditWriterConfig, DecisionRow, Store, TryAppendError};
use std::sync::Arc;

/// Tools whose decisions need not be on disk before they run: they change nothing. Every other
/// tool (apply_patch, exec_command, write_stdin, process_resize, terminate_process, approvals,
/// and any tool added later) writes its allowed decision ahead of acting.
const READ_ONLY_TOOLS: &[&str] = &[
    "workspace_info",
    "read",
    "find",
    "grep",
    "find_files",
    "operation_status",
    "read_process",
    "process_status",
];

/// Whether an allowed call of `tool` must have its decision committed before it acts.
pub(crate) fn writes_ahead(tool: &str) -> bool {
    !READ_ONLY_TOOLS.contains(&tool)
}

/// Starts the store's audit writer (idempotent; in-memory stores write synchronously).
pub(crate) fn start_writer(store: &Store) {
    let config = AuditWriterConfig {
        on_error: Some(Arc::new(|e, lost| {
            tracing::error!(error = %e, rows = lost, "audit write failed");
        })),
        ..AuditWriterConfig::default()
    };
    if let Err(e) = store.start_audit_writer(config) {
        tracing::error!(error = %e, "audit writer did not start: decisions are written synchronously");
    }
}

/// Runs `f`, which may block on the audit writer, without stalling a tokio worker's other tasks.
fn blocking_section<R>(f: impl FnOnce() -> R) -> R {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        // A current-thread runtime cannot hand its tasks over; outside a runtime there are none.
        _ => f(),
    }
}

/// Appends one decision's rows; with `write_ahead`, returns once they are committed. A store
/// failure is logged; it never turns a deny into an allow.
pub(crate) fn append(store: &Store, rows: Vec<DecisionRow>, decision_id: &str, write_ahead: bool) {
    if rows.is_empty() {
        return;
    }
    let ticket = match store.try_append_decisions(rows) {
        Ok(t) => Ok(t),
        Err(TryAppendError::Full(rows)) => {
            tracing::debug!(decision_id, "audit queue full: waiting for the writer");
            blocking_section(|| store.append_decisions(rows))
        }
        Err(TryAppendError::Store(e)) => Err(e),
    };
    let written = ticket.and_then(|t| {
        if write_ahead && !t.is_written() {
            blocking_section(|| t.wait())
        } else {
            Ok(())
        }
    });
    if let Err(e) = written {
        tracing::error!(error = %e, decision_id, "audit write failed");
    }
}

/// The barrier of in-process readers: every row appended so far is committed on return.
pub(crate) fn flush(store: &Store) {
    blocking_section(|| store.flush_decisions());
}

/// Stops the writer after draining its queue.
pub(crate) fn stop(store: &Store) {
    blocking_section(|| store.stop_audit_writer());
}
