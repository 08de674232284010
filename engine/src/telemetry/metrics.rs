//! The server's metrics (one registry per process) and their rendering in the Prometheus text
//! format 0.0.4 for `/metrics`. Counters and histograms are updated where things happen (the
//! audit sink, the tool-call wrapper, the policy reload, the OTLP queue); the gauges (holds
//! pending, live processes) are read from the gateway at each scrape.
//!
//! Labels are bounded sets: `tool` is a known tool name or `other`, `result` is `allow`/`deny`,
//! `profile` is a configured profile id. No label or value carries a path, a command, an argument
//! or a client's token.

use std::sync::LazyLock;

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
    TextEncoder,
};

/// Tool-call latency buckets, in seconds: a cached `read` answers in well under a millisecond, a
/// command may run for minutes.
const CALL_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0, 60.0,
];

/// The metric families of this process.
pub(crate) struct Metrics {
    registry: Registry,
    decisions: IntCounterVec,
    holds_pending: IntGauge,
    processes_live: IntGauge,
    call_seconds: HistogramVec,
    policy_reload_failures: IntCounter,
    audit_write_failures: IntCounter,
    otlp_dropped: IntCounterVec,
    otlp_export_failures: IntCounterVec,
}

impl Metrics {
    fn new() -> Result<Metrics, prometheus::Error> {
        let registry = Registry::new();
        let decisions = IntCounterVec::new(
            Opts::new(
                "codespace_decisions_total",
                "Tool-call decisions by result (allow/deny), tool and profile.",
            ),
            &["result", "tool", "profile"],
        )?;
        let holds_pending = IntGauge::new(
            "codespace_holds_pending",
            "Approval holds waiting for a person (as of the scrape).",
        )?;
        let processes_live = IntGauge::new(
            "codespace_processes_live",
            "Processes started by exec_command that are still running (as of the scrape).",
        )?;
        let call_seconds = HistogramVec::new(
            HistogramOpts::new(
                "codespace_tool_call_duration_seconds",
                "Tool-call latency from the MCP request to its answer, by tool.",
            )
            .buckets(CALL_BUCKETS.to_vec()),
            &["tool"],
        )?;
        let policy_reload_failures = IntCounter::new(
            "codespace_policy_reload_failures_total",
            "Policy reloads refused (the set in force stayed).",
        )?;
        let audit_write_failures = IntCounter::new(
            "codespace_audit_write_failures_total",
            "Decisions whose audit rows the store refused (each also logged and stored as an audit_write_failed event).",
        )?;
        let otlp_dropped = IntCounterVec::new(
            Opts::new(
                "codespace_otlp_dropped_total",
                "OTLP records dropped because the export queue was full, by signal (logs/spans).",
            ),
            &["signal"],
        )?;
        let otlp_export_failures = IntCounterVec::new(
            Opts::new(
                "codespace_otlp_export_failures_total",
                "OTLP records lost because their batch's export failed, by signal (logs/spans).",
            ),
            &["signal"],
        )?;
        registry.register(Box::new(decisions.clone()))?;
        registry.register(Box::new(holds_pending.clone()))?;
        registry.register(Box::new(processes_live.clone()))?;
        registry.register(Box::new(call_seconds.clone()))?;
        registry.register(Box::new(policy_reload_failures.clone()))?;
        registry.register(Box::new(audit_write_failures.clone()))?;
        registry.register(Box::new(otlp_dropped.clone()))?;
        registry.register(Box::new(otlp_export_failures.clone()))?;
        // Every series exists from the start (a scrape sees 0, not an absent series).
        for signal in ["logs", "spans"] {
            otlp_dropped.with_label_values(&[signal]);
            otlp_export_failures.with_label_values(&[signal]);
        }
        Ok(Metrics {
            registry,
            decisions,
            holds_pending,
            processes_live,
            call_seconds,
            policy_reload_failures,
            audit_write_failures,
            otlp_dropped,
            otlp_export_failures,
        })
    }
}

static METRICS: LazyLock<Option<Metrics>> = LazyLock::new(|| match Metrics::new() {
    Ok(m) => Some(m),
    Err(e) => {
        tracing::error!(error = %e, "metrics unavailable");
        None
    }
});

fn metrics() -> Option<&'static Metrics> {
    METRICS.as_ref()
}

/// A tool name as a label: a known tool, else `other` (a label set stays bounded).
pub(crate) fn tool_label(tool: &str) -> &'static str {
    crate::ToolName::parse(tool).map_or("other", crate::ToolName::as_str)
}

/// Counts one tool-call decision.
pub(crate) fn count_decision(allowed: bool, tool: &str, profile: &str) {
    if let Some(m) = metrics() {
        let result = if allowed { "allow" } else { "deny" };
        m.decisions
            .with_label_values(&[result, tool_label(tool), profile])
            .inc();
    }
}

/// Records one tool call's latency.
pub(crate) fn observe_call_seconds(tool: &str, seconds: f64) {
    if let Some(m) = metrics() {
        m.call_seconds
            .with_label_values(&[tool_label(tool)])
            .observe(seconds);
    }
}

/// Counts one refused policy reload.
pub fn count_policy_reload_failure() {
    if let Some(m) = metrics() {
        m.policy_reload_failures.inc();
    }
}

/// Counts decisions whose audit rows were not written.
pub(crate) fn count_audit_write_failures(decisions: u64) {
    if let Some(m) = metrics() {
        m.audit_write_failures.inc_by(decisions);
    }
}

/// Counts OTLP records dropped at a full queue.
pub(crate) fn count_otlp_dropped(signal: &'static str, n: u64) {
    if let Some(m) = metrics() {
        m.otlp_dropped.with_label_values(&[signal]).inc_by(n);
    }
}

/// Counts OTLP records whose export failed.
pub(crate) fn count_otlp_export_failures(signal: &'static str, n: u64) {
    if let Some(m) = metrics() {
        m.otlp_export_failures
            .with_label_values(&[signal])
            .inc_by(n);
    }
}

/// The audit write failures counted so far (the doctor and tests read it).
pub fn audit_write_failures() -> u64 {
    metrics().map_or(0, |m| m.audit_write_failures.get())
}

/// The gauges read at a scrape.
#[derive(Debug, Clone, Copy, Default)]
pub struct Gauges {
    /// Approval holds pending.
    pub holds_pending: usize,
    /// Live processes.
    pub processes_live: usize,
}

/// Every metric in the Prometheus text format 0.0.4, the gauges set to `gauges`.
pub fn render(gauges: Gauges) -> String {
    let Some(m) = metrics() else {
        return String::new();
    };
    m.holds_pending
        .set(i64::try_from(gauges.holds_pending).unwrap_or(i64::MAX));
    m.processes_live
        .set(i64::try_from(gauges.processes_live).unwrap_or(i64::MAX));
    let mut out = Vec::new();
    if let Err(e) = TextEncoder::new().encode(&m.registry.gather(), &mut out) {
        tracing::error!(error = %e, "cannot render the metrics");
    }
    String::from_utf8(out).unwrap_or_default()
}

/// The content type of [`render`]'s text.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_renders_with_help_and_type() {
        count_decision(true, "read", "read-only");
        count_decision(false, "no-such-tool", "read-only");
        observe_call_seconds("read", 0.0002);
        let text = render(Gauges {
            holds_pending: 2,
            processes_live: 1,
        });
        for name in [
            "codespace_decisions_total",
            "codespace_holds_pending",
            "codespace_processes_live",
            "codespace_tool_call_duration_seconds",
            "codespace_policy_reload_failures_total",
            "codespace_audit_write_failures_total",
            "codespace_otlp_dropped_total",
            "codespace_otlp_export_failures_total",
        ] {
            assert!(text.contains(&format!("# TYPE {name} ")), "{name}\n{text}");
            assert!(text.contains(&format!("# HELP {name} ")), "{name}\n{text}");
        }
        assert!(text.contains("codespace_holds_pending 2"), "{text}");
        assert!(
            text.contains(
                r#"codespace_decisions_total{profile="read-only",result="deny",tool="other"}"#
            ),
            "{text}"
        );
    }
}
