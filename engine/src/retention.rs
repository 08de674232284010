//! Store retention: the `retention` config block (durations such as `"90d"`), and the background
//! pruner that deletes old audit rows, events, operations, process rows and expired operation
//! keys in small batches on its own thread, off every request path.

use codespace_store::{PruneTarget, Store, StoreStats, now_ms};
use serde::Deserialize;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// Rows deleted per transaction.
pub const PRUNE_BATCH: usize = 500;
/// Pause between two batches, so other writers of the store get their turn.
const BATCH_PAUSE: Duration = Duration::from_millis(20);
/// Time between two prune rounds.
pub const PRUNE_INTERVAL: Duration = Duration::from_secs(600);
/// The longest duration a retention setting may name (about 100 years).
const MAX_DURATION: Duration = Duration::from_secs(100 * 366 * 24 * 3600);

/// A duration that cannot be used; the message says why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DurationError(String);

/// Parses `"<number><unit>"` with unit `ms`, `s`, `m`, `h` or `d` (e.g. `"30m"`, `"24h"`,
/// `"90d"`). Zero and more than about 100 years are refused.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let bad = |why: &str| {
        DurationError(format!(
            "invalid duration `{text}`: {why} (expected a whole number and a unit: ms, s, m, h or d, e.g. \"24h\" or \"90d\")"
        ))
    };
    if num.is_empty() {
        return Err(bad("no number"));
    }
    let n: u64 = num.parse().map_err(|_| bad("number too large"))?;
    let unit_ms: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        "" => return Err(bad("no unit")),
        _ => return Err(bad("unknown unit")),
    };
    let ms = n.checked_mul(unit_ms).ok_or_else(|| bad("too long"))?;
    let d = Duration::from_millis(ms);
    if d.is_zero() {
        return Err(bad("must be greater than zero"));
    }
    if d > MAX_DURATION {
        return Err(bad("longer than 100 years"));
    }
    Ok(d)
}

/// Spells a duration the way the config does (the largest unit that divides it).
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        if ms.is_multiple_of(size) {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

/// How long the store keeps rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Audit rows and server events.
    pub audit: Duration,
    /// Operations (with their timeline) and process rows; `operation_status` by id works this
    /// long.
    pub operations: Duration,
    /// How long an `operation_key` replays; after that the key is unknown and a call with it
    /// runs as new.
    pub operation_keys: Duration,
}

impl Default for Retention {
    fn default() -> Retention {
        Retention {
            audit: Duration::from_secs(90 * 86_400),
            operations: Duration::from_secs(30 * 86_400),
            operation_keys: Duration::from_secs(24 * 3_600),
        }
    }
}

/// The `retention` block as written.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Retention")]
pub(crate) struct RawRetention {
    /// How long audit rows (decisions and events) are kept, e.g. `"90d"` (default).
    #[serde(default)]
    audit: Option<String>,
    /// How long operations and process rows are kept, e.g. `"30d"` (default); `operation_status`
    /// by id works for this long.
    #[serde(default)]
    operations: Option<String>,
    /// How long an `operation_key` is remembered for replay, e.g. `"24h"` (default).
    #[serde(default)]
    operation_keys: Option<String>,
}

impl RawRetention {
    /// Validates every field; the error names it (`retention.audit: invalid duration ...`).
    pub(crate) fn resolve(self) -> Result<Retention, String> {
        let d = Retention::default();
        let field = |name: &str, v: Option<String>, default: Duration| match v {
            None => Ok(default),
            Some(s) => parse_duration(&s).map_err(|e| format!("retention.{name}: {e}")),
        };
        Ok(Retention {
            audit: field("audit", self.audit, d.audit)?,
            operations: field("operations", self.operations, d.operations)?,
            operation_keys: field("operation_keys", self.operation_keys, d.operation_keys)?,
        })
    }
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The latest statistics a prune round computed (shared with `workspace_info`).
#[derive(Debug, Clone, Default)]
pub struct StatsCell(Arc<Mutex<Option<(i64, StoreStats)>>>);

impl StatsCell {
    /// The last statistics and when they were taken (unix ms), if a round has run.
    pub fn get(&self) -> Option<(i64, StoreStats)> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set(&self, at_ms: i64, s: StoreStats) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some((at_ms, s));
    }
}

/// One prune round: every target in batches until a batch comes back short; returns the rows
/// deleted per target. Stops early when `stop` says so.
pub fn prune_round(
    store: &Store,
    retention: &Retention,
    stop: &dyn Fn() -> bool,
) -> Vec<(PruneTarget, usize)> {
    let now = now_ms();
    let mut out = Vec::new();
    for target in PruneTarget::ALL {
        let cutoff = match target {
            PruneTarget::Decisions | PruneTarget::Events => now.saturating_sub(ms(retention.audit)),
            PruneTarget::Processes | PruneTarget::Operations | PruneTarget::Approvals => {
                now.saturating_sub(ms(retention.operations))
            }
            PruneTarget::OperationKeys | PruneTarget::LedgerBlobs => now,
        };
        let mut total = 0_usize;
        loop {
            if stop() {
                return out;
            }
            match store.prune_batch(target, cutoff, PRUNE_BATCH) {
                Ok(n) => {
                    total += n;
                    if n < PRUNE_BATCH {
                        break;
                    }
                }
                Err(e) => {
                    tracing::warn!(table = target.as_str(), error = %e, "retention prune failed");
                    break;
                }
            }
            std::thread::sleep(BATCH_PAUSE);
        }
        out.push((target, total));
    }
    out
}

/// The background pruner; dropping it stops the thread (between two batches).
#[derive(Debug)]
pub struct Pruner {
    stop: Option<Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Pruner {
    /// Starts the pruner thread on `store` (give it its own connection: its transactions then
    /// never hold the connection tool calls use). The first round runs at once, then every
    /// `interval`. After each round the statistics go to `stats`, and a round that deleted
    /// anything is recorded as a `retention_pruned` event.
    pub fn spawn(
        store: Arc<Store>,
        retention: Retention,
        interval: Duration,
        stats: StatsCell,
    ) -> std::io::Result<Pruner> {
        let (tx, rx): (Sender<()>, Receiver<()>) = channel();
        let thread = std::thread::Builder::new()
            .name("codespace-retention".into())
            .spawn(move || {
                loop {
                    let stopped = || {
                        matches!(
                            rx.try_recv(),
                            Ok(()) | Err(std::sync::mpsc::TryRecvError::Disconnected)
                        )
                    };
                    let pruned = prune_round(&store, &retention, &stopped);
                    let deleted: Vec<_> = pruned.iter().filter(|(_, n)| *n > 0).collect();
                    if !deleted.is_empty() {
                        let detail: serde_json::Map<String, serde_json::Value> = deleted
                            .iter()
                            .map(|(t, n)| (t.as_str().to_string(), serde_json::json!(n)))
                            .collect();
                        if let Err(e) = store.insert_event("retention_pruned", &detail.into()) {
                            tracing::warn!(error = %e, "cannot record the prune");
                        }
                    }
                    match store.stats() {
                        Ok(s) => stats.set(now_ms(), s),
                        Err(e) => tracing::warn!(error = %e, "cannot read store statistics"),
                    }
                    match rx.recv_timeout(interval) {
                        Err(RecvTimeoutError::Timeout) => {}
                        Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                    }
                }
            })?;
        Ok(Pruner {
            stop: Some(tx),
            thread: Some(thread),
        })
    }
}

impl Drop for Pruner {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units_and_refuse_nonsense() {
        assert_eq!(
            parse_duration("90d").unwrap(),
            Duration::from_secs(90 * 86_400)
        );
        assert_eq!(parse_duration("24h").unwrap(), Duration::from_secs(86_400));
        assert_eq!(parse_duration("30m").unwrap(), Duration::from_secs(1_800));
        assert_eq!(parse_duration("45s").unwrap(), Duration::from_secs(45));
        assert_eq!(
            parse_duration("1500ms").unwrap(),
            Duration::from_millis(1_500)
        );
        for (bad, why) in [
            ("", "no number"),
            ("d", "no number"),
            ("10", "no unit"),
            ("10 days", "unknown unit"),
            ("10w", "unknown unit"),
            ("-1d", "no number"),
            ("1.5h", "unknown unit"),
            ("0s", "greater than zero"),
            ("99999999999999999999d", "too large"),
            ("40000d", "100 years"),
        ] {
            let e = parse_duration(bad).unwrap_err().to_string();
            assert!(e.contains(why), "`{bad}`: {e}");
            assert!(e.contains(&format!("`{bad}`")), "{e}");
        }
    }

    #[test]
    fn durations_format_back() {
        for s in ["90d", "25h", "30m", "45s", "1500ms"] {
            assert_eq!(format_duration(parse_duration(s).unwrap()), s);
        }
        assert_eq!(format_duration(parse_duration("24h").unwrap()), "1d");
    }

    #[test]
    fn retention_block_names_the_field() {
        let raw: RawRetention =
            serde_json::from_str(r#"{"audit": "90d", "operation_keys": "soon"}"#).unwrap();
        let e = raw.resolve().unwrap_err();
        assert!(
            e.starts_with("retention.operation_keys: invalid duration `soon`"),
            "{e}"
        );
        let raw: RawRetention = serde_json::from_str(r#"{"operations": "7d"}"#).unwrap();
        let r = raw.resolve().unwrap();
        assert_eq!(r.operations, Duration::from_secs(7 * 86_400));
        assert_eq!(r.audit, Retention::default().audit);
        assert_eq!(r.operation_keys, Duration::from_secs(86_400));
    }

    #[test]
    fn a_round_stops_when_asked() {
        let store = Store::open_in_memory().unwrap();
        let out = prune_round(&store, &Retention::default(), &|| true);
        assert!(out.is_empty());
        let out = prune_round(&store, &Retention::default(), &|| false);
        assert_eq!(out.len(), PruneTarget::ALL.len());
    }
}
