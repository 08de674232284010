//! What a `/metrics` scrape reads from the gateway (the gauges), kept out of `telemetry/`,
//! which the gateway itself calls.

use crate::telemetry::metrics;

/// The gauges of a scrape, read from the gateway: pending holds (a store query, run on the
/// blocking pool by the caller) and live processes.
pub fn gauges(gw: &crate::Gateway) -> metrics::Gauges {
    let holds_pending = gw.store().map_or(0, |s| {
        s.approvals(
            Some(codespace_store::ApprovalState::Pending),
            100_000,
            codespace_store::now_ms(),
        )
        .map(|v| v.len())
        .unwrap_or_else(|e| {
            tracing::warn!(error = %e, "metrics: cannot count pending holds");
            0
        })
    });
    metrics::Gauges {
        holds_pending,
        processes_live: gw.live_processes(),
    }
}
