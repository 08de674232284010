//! Telemetry: the Prometheus metrics of `/metrics` (`metrics.rs`), the OpenTelemetry export of
//! decisions, operation events and tool-call spans (`otlp.rs`), and the OCSF events both the
//! export and `codespace audit --format ocsf` carry (`ocsf.rs`). The hooks the rest of the engine
//! calls are here: each is cheap and never blocks (a counter, a non-blocking queue push).

pub mod metrics;
pub mod ocsf;
pub mod otlp;

pub use otlp::{ExportConfig, OtlpConfig};

use codespace_store::DecisionRow;
use opentelemetry::logs::{AnyValue, Severity};
use std::sync::Arc;
use std::time::{Duration, Instant, UNIX_EPOCH};

/// `workspace_info.telemetry`: present when the export is on or an audit write failed.
pub(crate) fn info() -> Option<crate::wire::TelemetryInfo> {
    let audit_write_failures = metrics::audit_write_failures();
    let otlp = otlp::status();
    (otlp.is_some() || audit_write_failures > 0).then_some(crate::wire::TelemetryInfo {
        audit_write_failures,
        otlp,
    })
}

/// The audit sink's hook: one call decision's (redacted) rows, counted and exported.
pub(crate) fn decided(rows: &[DecisionRow], kind: codespace_policy::RowKind<'_>) {
    if let codespace_policy::RowKind::Call { tool, allowed } = kind {
        let profile = rows.first().map_or("", |r| r.profile.as_str());
        metrics::count_decision(allowed, tool, profile);
    }
    if otlp::export().is_none() {
        return;
    }
    for row in rows {
        // The OCSF event is built on the export thread, from a copy without the recorded
        // request (which the event does not carry).
        let slim = slim(row);
        let severity = if row.decision == "deny" {
            Severity::Warn
        } else {
            Severity::Info
        };
        otlp::emit_log(
            "codespace.decision",
            UNIX_EPOCH + Duration::from_millis(u64::try_from(row.at_ms).unwrap_or(0)),
            severity,
            move || ocsf::decision_event(&slim).to_string(),
            vec![
                (
                    "ocsf.class_uid",
                    AnyValue::Int(ocsf::CLASS_UID.cast_signed()),
                ),
                (
                    "codespace.decision_id",
                    AnyValue::String(row.decision_id.clone().into()),
                ),
                ("codespace.tool", AnyValue::String(row.tool.clone().into())),
                (
                    "codespace.decision",
                    AnyValue::String(row.decision.clone().into()),
                ),
            ],
            row.trace_parent.clone(),
        );
    }
}

/// What [`ocsf::decision_event`] reads of a row (not the recorded request, the largest part).
fn slim(row: &DecisionRow) -> DecisionRow {
    DecisionRow {
        decision_id: row.decision_id.clone(),
        at_ms: row.at_ms,
        policy_set_sha256: row.policy_set_sha256.clone(),
        profile: row.profile.clone(),
        workspace: row.workspace.clone(),
        tool: row.tool.clone(),
        action: row.action.clone(),
        sub_index: row.sub_index,
        subject: row.subject.clone(),
        client: row.client.clone(),
        transport: row.transport.clone(),
        decision: row.decision.clone(),
        policy_ids: row.policy_ids.clone(),
        errors: row.errors.clone(),
        default_deny: row.default_deny,
        duration_us: row.duration_us,
        path: row.path.clone(),
        kind: row.kind.clone(),
        reason: row.reason.clone(),
        shadow_decision: row.shadow_decision.clone(),
        trace_parent: row.trace_parent.clone(),
        ..DecisionRow::default()
    }
}

/// An operation's timeline step, exported as an OCSF event (the reason already redacted).
pub(crate) fn operation_step(
    operation_id: &str,
    step: &str,
    status: Option<&str>,
    reason: Option<&str>,
) {
    if otlp::export().is_none() {
        return;
    }
    let now = codespace_store::now_ms();
    let event = ocsf::operation_event(operation_id, step, status, reason, now).to_string();
    otlp::emit_log(
        "codespace.operation",
        UNIX_EPOCH + Duration::from_millis(u64::try_from(now).unwrap_or(0)),
        Severity::Info,
        move || event,
        vec![
            (
                "ocsf.class_uid",
                AnyValue::Int(ocsf::CLASS_UID.cast_signed()),
            ),
            (
                "codespace.operation_id",
                AnyValue::String(operation_id.to_string().into()),
            ),
        ],
        None,
    );
}

/// Runs one tool call (`work`): its latency goes to the histogram and, with the export on, a
/// span (child of `trace_parent`) records it with the error code of a failed call.
pub async fn observe_call<F, T>(tool: &str, trace_parent: Option<Arc<str>>, work: F) -> F::Output
where
    F: std::future::Future<Output = Result<T, crate::ToolError>>,
{
    let label = metrics::tool_label(tool);
    let span = otlp::start_call_span(label, trace_parent);
    let start = Instant::now();
    let out = work.await;
    metrics::observe_call_seconds(label, start.elapsed().as_secs_f64());
    if let Some(span) = span {
        span.end(out.as_ref().err().map(|e| e.code.as_str()));
    }
    out
}
