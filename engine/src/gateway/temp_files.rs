//! The server's temporary files: this server's instance (recorded in the store at start), the start-up
//! sweep of the files crashed instances left behind, and the seal at shutdown.
//!
//! Every `apply_patch` write goes through a temporary file `.codespace-tmp-<instance>-<n>` beside its
//! target. A `kill -9` between its creation and its rename leaves it behind; the journal knows the
//! touched files, not that name. So each start records a fresh instance id (with the process's boot id
//! and start time, which tell a live instance from a dead one), and a later start removes the temporary
//! files of every recorded instance that is dead and did not shut down cleanly. Nothing else is ever
//! removed: a file whose name does not parse, or whose instance id the store does not know, is a user's.

use std::collections::HashSet;
use std::sync::Arc;

use codespace_runner_fs::{TempNames, WalkLimits};
use codespace_store::{InstanceRow, Store};
use serde_json::json;

use crate::gateway::{Gateway, Services, StartError};

/// Bounds of the start-up sweep walk of one workspace (it only runs after a crash).
const SWEEP_LIMITS: WalkLimits = WalkLimits {
    max_depth: 64,
    max_entries: 1_000_000,
    stat_links: false,
};

/// Instances done with (shut down cleanly, or swept) are forgotten after this long.
const INSTANCE_RETENTION_MS: i64 = 30 * 24 * 3600 * 1000;

/// Records a new server instance in `store` and returns its names, which also hide the temporary files
/// of every instance the store knows (asking the store about ids recorded later). Without a store, the
/// names are [`TempNames::unregistered`].
pub(crate) fn start_instance(store: Option<&Arc<Store>>) -> Result<Arc<TempNames>, StartError> {
    let Some(store) = store else {
        return Ok(TempNames::unregistered());
    };
    let (hi, lo) = uuid::Uuid::new_v4().as_u64_pair();
    let id = format!("{:016x}", hi ^ lo);
    let pid = std::process::id();
    let started = process_start(pid).unwrap_or_default();
    let store_err = |e: codespace_store::StoreError| StartError::Store(e.to_string());
    store
        .insert_instance(&id, i64::from(pid), &started)
        .map_err(store_err)?;
    let lookup_store = Arc::clone(store);
    let names = TempNames::new(&id)
        .map_err(|e| StartError::Store(e.to_string()))?
        .with_lookup(Box::new(move |other| {
            lookup_store.is_instance(other).unwrap_or(false)
        }));
    for row in store.instances().map_err(store_err)? {
        names.remember(&row.instance_id);
    }
    Ok(Arc::new(names))
}

/// `<boot id>:<start time in clock ticks since boot>` of process `pid`, from `/proc`; `None` when it
/// does not exist (or `/proc` cannot be read).
fn process_start(pid: u32) -> Option<String> {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces and parentheses): field 3 (state) first,
    // field 22 (starttime) 19 places later.
    let (_, rest) = stat.rsplit_once(')')?;
    let start = rest.split_whitespace().nth(19)?;
    Some(format!("{}:{start}", boot.trim()))
}

/// Whether the instance's process may still run. An instance without a recorded start (no `/proc` at
/// the time) counts as alive: its files are never removed.
fn maybe_alive(row: &InstanceRow) -> bool {
    if row.process_start.is_empty() {
        return true;
    }
    let Ok(pid) = u32::try_from(row.pid) else {
        return false;
    };
    process_start(pid).is_some_and(|now| now == row.process_start)
}

/// Whether work owned by an instance belongs to a server still running on `store` (the test
/// [`Services::owned_by_live_instance`] makes, for a caller that is no server: `own` = `None`):
/// an instance recorded in the store, not shut down, whose process is alive or cannot be told
/// dead. When the store cannot list its instances, every owned piece of work counts as live.
pub(crate) fn owned_by_live(store: &Store, own: Option<&str>) -> impl Fn(Option<&str>) -> bool {
    let live: Option<HashSet<String>> = match store.instances() {
        Ok(rows) => Some(
            rows.iter()
                .filter(|r| {
                    Some(r.instance_id.as_str()) != own && r.ended_ms.is_none() && maybe_alive(r)
                })
                .map(|r| r.instance_id.clone())
                .collect(),
        ),
        Err(e) => {
            tracing::error!(error = %e, "cannot read server instances; owned work counts as live");
            None
        }
    };
    move |owner: Option<&str>| match (owner, &live) {
        (None, _) => false,
        (Some(o), Some(live)) => live.contains(o),
        (Some(_), None) => true,
    }
}

/// What the start-up sweep did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Dead instances whose files were looked for.
    pub instances: Vec<String>,
    /// Temporary files removed, over every workspace.
    pub removed: usize,
    /// Every workspace was walked completely and every file found removed (the instances are marked
    /// swept and not looked for again).
    pub complete: bool,
}

impl Services {
    /// Whether work owned by `owner` (an operation, its patch journal, its processes) belongs to
    /// another server still running on this store, and so is never recovered by this start: an
    /// instance recorded in the store, not shut down, whose process is alive or cannot be told
    /// dead. When the store cannot list its instances, every owned piece of work counts as live
    /// (only unowned work, written before owners were recorded, is recovered).
    pub(crate) fn owned_by_live_instance(&self, store: &Store) -> impl Fn(Option<&str>) -> bool {
        owned_by_live(store, Some(self.temps.instance()))
    }

    /// The names of this server's temporary files (and the test of any name: `is_server_temp`).
    pub fn temp_names(&self) -> &Arc<TempNames> {
        &self.temps
    }

    /// At shutdown, after serving: refuses every later temporary file and, when none exists, records
    /// that this instance left nothing behind (so the next start need not sweep for it). Returns whether
    /// it could.
    pub fn seal_temp_files(&self) -> bool {
        if !self.temps.seal() {
            return false;
        }
        match &self.store {
            Some(store) => store.instance_ended(self.temps.instance()).is_ok(),
            None => true,
        }
    }
}

/// Start-up sweep: removes, in every workspace, the temporary files of each recorded instance that
/// is dead and neither shut down cleanly nor was swept before; records a `temp_sweep` event per
/// workspace when there was anything to look for. Blocking (a bounded walk per workspace).
pub fn sweep_temp_files(gw: &Gateway) -> SweepReport {
    let mut report = SweepReport::default();
    let Some(store) = &gw.store else {
        return report;
    };
    let rows = match store.instances() {
        Ok(rows) => rows,
        Err(e) => {
            tracing::error!(error = %e, "cannot read server instances; temporary files not swept");
            return report;
        }
    };
    let own = gw.temps.instance();
    let dead: HashSet<String> = rows
        .iter()
        .filter(|r| r.instance_id != own && r.ended_ms.is_none() && r.swept_ms.is_none())
        .filter(|r| !maybe_alive(r))
        .map(|r| r.instance_id.clone())
        .collect();
    report.complete = true;
    if !dead.is_empty() {
        report.instances = dead.iter().cloned().collect();
        report.instances.sort();
        let is_dead = |id: &str| dead.contains(id);
        for (id, ws) in &gw.workspaces {
            // A worker's workspace is swept by its worker, never from this host.
            let Some(root) = &ws.root else { continue };
            let detail = match root.sweep_server_temps(&is_dead, &SWEEP_LIMITS) {
                Ok(s) => {
                    report.removed += s.removed;
                    report.complete &= !s.incomplete && s.failed == 0;
                    json!({"workspace": id, "instances": report.instances,
                        "removed": s.removed, "failed": s.failed, "incomplete": s.incomplete})
                }
                Err(e) => {
                    report.complete = false;
                    json!({"workspace": id, "instances": report.instances, "error": e.to_string()})
                }
            };
            if let Err(e) = store.insert_event("temp_sweep", &detail) {
                tracing::warn!(error = %e, "cannot record the temp_sweep event");
            }
        }
        if report.complete {
            if let Err(e) = store.instances_swept(&report.instances) {
                tracing::warn!(error = %e, "cannot mark instances swept");
            }
        } else {
            tracing::warn!(
                removed = report.removed,
                "temporary files of crashed instances may remain; the next start looks again"
            );
        }
    }
    let cutoff = codespace_store::now_ms().saturating_sub(INSTANCE_RETENTION_MS);
    if let Err(e) = store.prune_instances(cutoff) {
        tracing::warn!(error = %e, "cannot prune old server instances");
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_a_start_token_and_counts_as_alive() {
        let pid = std::process::id();
        let token = process_start(pid).unwrap();
        let (boot, ticks) = token.rsplit_once(':').unwrap();
        assert!(!boot.is_empty());
        assert!(ticks.parse::<u64>().is_ok(), "{token}");
        let row = |pid: i64, start: &str| InstanceRow {
            instance_id: "0123456789abcdef".into(),
            started_ms: 0,
            pid,
            process_start: start.into(),
            ended_ms: None,
            swept_ms: None,
        };
        assert!(maybe_alive(&row(i64::from(pid), &token)));
        assert!(!maybe_alive(&row(i64::from(pid), "other-boot:1")));
        assert!(!maybe_alive(&row(-1, &token)));
        assert!(
            maybe_alive(&row(i64::from(pid), "")),
            "unknown counts as alive"
        );
    }
}
