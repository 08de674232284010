//! How the gateway hands decision rows to the store's audit writer: read-only calls append and
//! go on (the rows are group-committed within the writer's delay, 50 ms); allowed calls of any
//! other tool wait until their rows are committed before the runner acts (write-ahead). A full
//! queue makes the caller wait for room; nothing is dropped. Waits run as blocking sections, so
//! a multi-threaded runtime moves its other tasks off the waiting worker. The W3C trace context
//! of the MCP request being served ([`with_trace_parent`]) goes into each row it decides.

use crate::ToolName;
use codespace_store::{AuditWriterConfig, DecisionRow, Store, TryAppendError};
use std::sync::Arc;

/// Tools whose decisions need not be on disk before they run: they change nothing. Every other
/// tool (apply_patch, exec_command, write_stdin, process_resize, terminate_process, approvals,
/// and any tool added later) writes its allowed decision ahead of acting.
const READ_ONLY_TOOLS: &[ToolName] = &[
    ToolName::WorkspaceInfo,
    ToolName::Read,
    ToolName::Find,
    ToolName::Grep,
    ToolName::FindFiles,
    ToolName::OperationStatus,
    ToolName::ReadProcess,
    ToolName::ProcessStatus,
    ToolName::ProcessList,
];

tokio::task_local! {
    /// The `traceparent` of the request the current task serves.
    static TRACE_PARENT: Option<Arc<str>>;
}

/// Runs `work` (one MCP request's tool call) with `trace_parent` recorded in the decision rows
/// it writes. The value must already be a valid [`w3c_trace_parent`].
pub async fn with_trace_parent<F: std::future::Future>(
    trace_parent: Option<Arc<str>>,
    work: F,
) -> F::Output {
    TRACE_PARENT.scope(trace_parent, work).await
}

fn current_trace_parent() -> Option<String> {
    TRACE_PARENT
        .try_with(|t| t.as_deref().map(str::to_string))
        .ok()
        .flatten()
}

/// `value` when it is a W3C Trace Context `traceparent` (version 00: `00-<32 hex trace id>-<16
/// hex parent id>-<2 hex flags>`, ids not all zero; lower-case hex), else None: nothing a client
/// sends unchecked reaches the audit log.
pub fn w3c_trace_parent(value: &str) -> Option<&str> {
    let v = value.trim();
    let mut parts = v.split('-');
    let (Some(version), Some(trace), Some(parent), Some(flags), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return None;
    };
    let hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let zero = |s: &str| s.bytes().all(|b| b == b'0');
    (version == "00" && hex(trace, 32) && hex(parent, 16) && hex(flags, 2))
        .then_some(())
        .filter(|()| !zero(trace) && !zero(parent))
        .map(|()| v)
}

/// Whether an allowed call of `tool` must have its decision committed before it acts.
pub(crate) fn writes_ahead(tool: &str) -> bool {
    !ToolName::parse(tool).is_some_and(|t| READ_ONLY_TOOLS.contains(&t))
}

/// Starts the store's audit writer (idempotent; in-memory stores write synchronously).
pub(crate) fn start_writer(store: &Store) {
    let config = AuditWriterConfig {
        // The writer also stores an `audit_write_failed` event for each failed batch.
        on_error: Some(Arc::new(|e, lost| {
            tracing::error!(error = %e, rows = lost, "audit write failed: decision rows lost");
            if lost > 0 {
                crate::telemetry::metrics::count_audit_write_failures(1);
            }
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
            blocking_section(|| store.append_decisions(rows)).inspect_err(|_| refused(store))
        }
        Err(TryAppendError::Store(e)) => {
            refused(store);
            Err(e)
        }
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

/// Rows written at once (no writer running) were refused: counted and stored as an event (the
/// writer thread does both itself for its batches).
fn refused(store: &Store) {
    crate::telemetry::metrics::count_audit_write_failures(1);
    let detail = serde_json::json!({"appends_lost": 1, "writer": false});
    if let Err(e) = store.insert_event(codespace_store::AUDIT_WRITE_FAILED, &detail) {
        tracing::error!(error = %e, "cannot store the audit_write_failed event");
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

/// The engine's audit sink: the store and the operator's live redactor. Call rows of allowed
/// mutations are written ahead; connection and withheld-entry rows are queued; probes write
/// nothing. Without a store it keeps nothing.
#[derive(Debug)]
pub(crate) struct StoreSink {
    store: Option<Arc<Store>>,
    redaction: crate::redact::LiveRedactor,
    /// Append and wait for every batch (the operator CLI, which has no writer running).
    synchronous: bool,
}

impl StoreSink {
    /// A sink over `store` (queued through its audit writer).
    pub(crate) fn new(store: Option<Arc<Store>>, redaction: crate::redact::LiveRedactor) -> Self {
        StoreSink {
            store,
            redaction,
            synchronous: false,
        }
    }

    /// A sink that appends each batch and waits until it is written.
    pub(crate) fn synchronous(store: Arc<Store>, redaction: crate::redact::LiveRedactor) -> Self {
        StoreSink {
            store: Some(store),
            redaction,
            synchronous: true,
        }
    }
}

/// Redacts the texts of one row: its subject, errors, reason, and the recorded request's context
/// strings and subject.
fn redact_row(r: &crate::redact::Redactor, row: &mut DecisionRow) {
    if let std::borrow::Cow::Owned(s) = r.text(&row.subject) {
        row.subject = s;
    }
    for e in &mut row.errors {
        if let std::borrow::Cow::Owned(s) = r.text(e) {
            *e = s;
        }
    }
    if let Some(reason) = &mut row.reason
        && let std::borrow::Cow::Owned(s) = r.text(reason)
    {
        *reason = s;
    }
    if let Some(v) = &mut row.request {
        if let Some(ctx) = v.pointer_mut("/request/context") {
            r.json(ctx);
        }
        if let Some(serde_json::Value::String(s)) = v.pointer_mut("/request/subject")
            && let std::borrow::Cow::Owned(red) = r.text(s)
        {
            *s = red;
        }
    }
}

impl codespace_policy::AuditSink for StoreSink {
    fn keeps(&self, kind: codespace_policy::RowKind<'_>) -> bool {
        self.store.is_some() && kind != codespace_policy::RowKind::Probe
    }

    fn redact(&self, row: &mut DecisionRow) {
        redact_row(&self.redaction.current(), row);
    }

    fn record(
        &self,
        mut rows: Vec<DecisionRow>,
        decision_id: &str,
        kind: codespace_policy::RowKind<'_>,
    ) {
        use codespace_policy::RowKind;
        let Some(store) = &self.store else { return };
        if kind == RowKind::Probe {
            return;
        }
        let redactor = self.redaction.current();
        let trace_parent = current_trace_parent();
        for row in &mut rows {
            redact_row(&redactor, row);
            row.trace_parent.clone_from(&trace_parent);
        }
        crate::telemetry::decided(&rows, kind);
        if self.synchronous {
            if let Err(e) = store.append_decisions(rows).and_then(|t| t.wait()) {
                tracing::error!(error = %e, decision_id, "cannot record the decision");
                crate::telemetry::metrics::count_audit_write_failures(1);
            }
            return;
        }
        let write_ahead =
            matches!(kind, RowKind::Call { tool, allowed } if allowed && writes_ahead(tool));
        append(store, rows, decision_id, write_ahead);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_w3c_traceparent_is_kept() {
        let ok = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(w3c_trace_parent(ok), Some(ok));
        assert_eq!(w3c_trace_parent(&format!(" {ok} ")), Some(ok));
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xx",
            "00-4bf92f3577b34da6a3ce929d0e0e473\n-00f067aa0ba902b7-01",
        ] {
            assert_eq!(w3c_trace_parent(bad), None, "{bad}");
        }
    }

    #[tokio::test]
    async fn the_trace_parent_is_scoped_to_its_request() {
        assert_eq!(current_trace_parent(), None);
        let got = with_trace_parent(Some(Arc::from("t")), async { current_trace_parent() }).await;
        assert_eq!(got.as_deref(), Some("t"));
        assert_eq!(current_trace_parent(), None);
    }
}
