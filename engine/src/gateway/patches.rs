//! The server side of `apply_patch` outside any call: the start-up recovery of interrupted
//! patches (journals rolled back, unfinished operations marked `unknown`), the journals it keeps
//! for other roots (listed by `doctor`, discarded by `codespace ops journals --discard`), the
//! versions of paths a patch does not touch, and the test hooks of the apply window.

use crate::error::ToolError;
use crate::gateway::{Gateway, Services, WorkspaceRuntime};
use crate::versions::Known;
use codespace_runner_fs::txn::{Backup, restore};
use codespace_runner_fs::{FsError, RelPath};
use codespace_store::{JournalSeal, Store, StoreError};
use serde_json::json;

/// A write-step fault injector: called with the step index before each write step.
pub type FaultHook = Box<dyn Fn(usize) -> Result<(), FsError> + Send + Sync>;

/// Test hooks of the apply window (not reachable from the wire).
#[derive(Default)]
pub struct PatchHooks {
    /// Runs after the plan and before the commit (e.g. an outside edit).
    pub before_commit: Option<Box<dyn Fn() + Send + Sync>>,
    /// Runs before each write step; an error fails that step.
    pub fault: Option<FaultHook>,
}

impl PatchHooks {
    /// Hooks that make every write step of the apply window sleep `ms` milliseconds (crash tests
    /// kill the server mid-apply with them).
    pub fn step_delay(ms: u64) -> PatchHooks {
        PatchHooks {
            before_commit: None,
            fault: Some(Box::new(move |_step: usize| {
                std::thread::sleep(std::time::Duration::from_millis(ms));
                Ok(())
            })),
        }
    }
}

impl PatchHooks {
    /// Hooks that hold every write step after the first until the file `gate` exists (checked
    /// every 10 ms; after two minutes the step fails and the patch rolls back), so a test can act
    /// while an apply is known to be in the middle of its window.
    pub fn gated_after_first_step(gate: std::path::PathBuf) -> PatchHooks {
        PatchHooks {
            before_commit: None,
            fault: Some(Box::new(move |step: usize| {
                if step == 0 {
                    return Ok(());
                }
                let until = std::time::Instant::now() + std::time::Duration::from_secs(120);
                while !gate.exists() {
                    if std::time::Instant::now() > until {
                        return Err(FsError::Io {
                            path: "test gate".into(),
                            message: "never opened".into(),
                        });
                    }
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                Ok(())
            })),
        }
    }
}

impl std::fmt::Debug for PatchHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PatchHooks").finish_non_exhaustive()
    }
}

pub(crate) fn known_str(k: &Known) -> &str {
    match k {
        Known::Version(v) => v,
        Known::Absent => "absent",
    }
}

impl Services {
    /// The version of a path the patch does not touch: from the version table when clean,
    /// else read from disk off the async workers (and recorded).
    pub(crate) async fn current_version(
        &self,
        ws: &WorkspaceRuntime,
        rel: &RelPath,
    ) -> Result<Known, ToolError> {
        if let Some(k) = ws.versions.known(rel.as_str()) {
            return Ok(k);
        }
        let k = match ws
            .runner
            .version(codespace_runner_api::VersionRequest {
                workspace: ws.facts.id.clone(),
                path: rel.as_str().to_string(),
                max_hash_bytes: self.config.limits.max_hash_bytes,
            })
            .await
            .map_err(crate::host_runner::to_tool_error)?
        {
            Some(v) => Known::Version(v),
            None => Known::Absent,
        };
        ws.versions.record(rel.as_str(), k.clone());
        Ok(k)
    }
}

/// A patch journal in the store, as `codespace ops journals` and `doctor` list it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct StoredJournal {
    /// The operation it belongs to.
    pub operation_id: String,
    /// The workspace id it was written for.
    pub workspace: String,
    /// The workspace registration (root identity) it would be restored into.
    pub registration: Option<String>,
    /// The server instance that owns it (`None`: written before owners were recorded).
    pub owner: Option<String>,
    /// Its owner is a server still running on this store: the journal is an apply in flight
    /// (or kept by that server) and is never discarded.
    pub live: bool,
    /// Whether its seal verifies (a journal that does not verify is never applied).
    pub sealed: bool,
    /// The workspace-relative paths it would restore.
    pub paths: Vec<String>,
}

/// Every patch journal in `store`, oldest first, each with whether a running server owns it.
pub fn stored_journals(store: &Store) -> Result<Vec<StoredJournal>, StoreError> {
    let live = crate::gateway::temp_files::owned_by_live(store, None);
    Ok(store
        .open_journals()?
        .into_iter()
        .map(|j| StoredJournal {
            live: live(j.instance_id.as_deref()),
            sealed: j.seal == JournalSeal::Valid,
            paths: j.entries.iter().map(|e| e.path.clone()).collect(),
            operation_id: j.operation_id,
            workspace: j.workspace,
            registration: j.registration,
            owner: j.instance_id,
        })
        .collect())
}

/// Discards every journal of `store` no running server owns (the instance that wrote it is dead
/// or shut down, or unrecorded): the half-applied files it would roll back stay as they are. Each
/// discard is recorded as a `journal_discarded` event naming `by`. Returns the discarded journals;
/// those of running servers are left alone.
pub fn discard_stray_journals(store: &Store, by: &str) -> Result<Vec<StoredJournal>, StoreError> {
    let mut discarded = Vec::new();
    for j in stored_journals(store)? {
        if j.live {
            continue;
        }
        store.journal_clear(&j.operation_id)?;
        store.insert_event(
            "journal_discarded",
            &json!({
                "operation_id": j.operation_id,
                "workspace": j.workspace,
                "registration": j.registration,
                "owner": j.owner,
                "paths": j.paths,
                "by": by,
            }),
        )?;
        discarded.push(j);
    }
    Ok(discarded)
}

/// Start-up recovery: every open journal this server's store wrote for a workspace it
/// serves under the same registration is rolled back and its operation marked `unknown`;
/// operations that never finished are marked `unknown` too. Work owned by another server
/// instance still running on the same store (several MCP hosts may each start a server on
/// the default store) is left alone: its journal is that server's live apply, its
/// operations and processes are running. A journal whose seal does not
/// verify (written around the store API, changed, or from before sealing) or whose paths do
/// not parse as workspace paths is never applied: it is recorded as a `journal_refused`
/// event and dropped. A sealed journal of another root bound to the same workspace id is
/// kept for that root. Then the temporary files crashed server instances left behind are
/// swept ([`crate::gateway::temp_files::sweep_temp_files`]).
pub fn recover(gw: &Gateway) -> Vec<String> {
    let Some(store) = &gw.store else {
        return Vec::new();
    };
    let mut recovered = Vec::new();
    // Journals left alone are counted and reported in one line each kind, not one per journal
    // (a shared default store can hold many of other roots).
    let (mut of_live, mut of_other_roots, mut of_workers) = (0usize, 0usize, 0usize);
    let owned_by_live = gw.owned_by_live_instance(store);
    let refuse = |j: &codespace_store::OpenJournal, reason: &str| {
        tracing::error!(operation_id = %j.operation_id, workspace = %j.workspace, reason, "patch journal refused at start-up; not applied");
        let paths: Vec<&str> = j.entries.iter().map(|e| e.path.as_str()).collect();
        let _ = store.insert_event(
            "journal_refused",
            &json!({
                "operation_id": j.operation_id,
                "workspace": j.workspace,
                "reason": reason,
                "paths": paths,
            }),
        );
        if let Err(e) = store.journal_clear(&j.operation_id) {
            tracing::error!(operation_id = %j.operation_id, error = %e, "cannot drop a refused journal");
        }
    };
    match store.open_journals() {
        Ok(journals) => {
            for j in journals {
                if owned_by_live(j.instance_id.as_deref()) {
                    tracing::debug!(operation_id = %j.operation_id, "journal of a running server on this store left alone");
                    of_live += 1;
                    continue;
                }
                match j.seal {
                    JournalSeal::Valid => {}
                    JournalSeal::Missing => {
                        refuse(&j, "the journal carries no seal of this store");
                        continue;
                    }
                    JournalSeal::Invalid => {
                        refuse(&j, "the journal's seal does not verify");
                        continue;
                    }
                }
                let Some(ws) = gw.workspaces.get(&j.workspace) else {
                    tracing::debug!(operation_id = %j.operation_id, workspace = %j.workspace, "journal of a workspace this server does not serve kept");
                    of_other_roots += 1;
                    continue;
                };
                if j.registration.as_deref() != Some(ws.registration.as_str()) {
                    tracing::debug!(operation_id = %j.operation_id, workspace = %j.workspace, "journal of another root bound to this workspace id kept for that root");
                    of_other_roots += 1;
                    continue;
                }
                let parsed: Result<Vec<Backup>, _> = j
                    .entries
                    .iter()
                    .map(|e| {
                        e.created_dirs
                            .iter()
                            .try_for_each(|d| RelPath::parse(d).map(drop))?;
                        RelPath::parse(&e.path).map(|path| Backup {
                            path,
                            before: e.before.clone().map(|d| (d, e.mode.unwrap_or(0o644))),
                        })
                    })
                    .collect();
                let Ok(backups) = parsed else {
                    refuse(&j, "a journal path lies outside its workspace");
                    continue;
                };
                // A worker's files are restored by its runner once it is attached
                // ([`recover_worker`]), never from this host.
                let Some(root) = &ws.root else {
                    of_workers += 1;
                    continue;
                };
                let op = j.operation_id;
                match restore(root, &backups) {
                    Ok(()) => {
                        let _ = store.journal_clear(&op);
                        gw.finish_operation(
                            &op,
                            crate::facts::OperationStatus::Unknown,
                            &json!({"recovered": "rolled back at start-up"}),
                            Some("unknown"),
                        );
                        recovered.push(op);
                    }
                    Err(files) => {
                        tracing::error!(operation_id = %op, ?files, "start-up rollback incomplete; journal kept");
                    }
                }
            }
        }
        Err(e) => tracing::error!(error = %e, "cannot read open journals"),
    }
    if of_live > 0 {
        tracing::info!(
            journals = of_live,
            "patch journals of servers running on this store left alone"
        );
    }
    if of_workers > 0 {
        tracing::info!(
            journals = of_workers,
            "patch journals of workers' workspaces kept; each is restored through its worker once attached"
        );
    }
    if of_other_roots > 0 {
        tracing::warn!(
            journals = of_other_roots,
            "{of_other_roots} patch journal(s) of other roots or workspaces kept in the store for the server that serves them; list them with `codespace doctor`, discard them with `codespace ops journals --discard`"
        );
    }
    let _ = of_workers;
    if let Ok(rows) = store.unfinished_operations_with_owner() {
        for (row, owner) in rows {
            if owned_by_live(owner.as_deref()) {
                continue;
            }
            gw.finish_operation(
                &row.operation_id,
                crate::facts::OperationStatus::Unknown,
                &json!({"recovered": "unfinished at start-up"}),
                Some("unknown"),
            );
        }
    }
    let _ = store.mark_running_processes_unknown_unless(&owned_by_live);
    crate::gateway::temp_files::sweep_temp_files(gw);
    recovered
}

/// Recovery of a worker's workspace once its runner is attached (at start, or after the worker
/// was started again): every sealed journal of `workspace` under its current registration that
/// no running server owns is restored through the workspace's runner (`Runner::restore`: the
/// runner that owns the files), cleared, and its operation marked `unknown`. Returns the
/// recovered operation ids; a journal whose restore fails is kept for the next attach.
pub async fn recover_worker(gw: &Gateway, workspace: &str) -> Vec<String> {
    let (Some(store), Some(ws)) = (&gw.store, gw.workspaces.get(workspace)) else {
        return Vec::new();
    };
    if ws.root.is_some() {
        return Vec::new();
    }
    let owned_by_live = gw.owned_by_live_instance(store);
    let read = {
        let store = std::sync::Arc::clone(store);
        tokio::task::spawn_blocking(move || store.open_journals()).await
    };
    let applying = ws
        .applying
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let journals = match read {
        Ok(Ok(j)) => j,
        Ok(Err(e)) => {
            tracing::error!(error = %e, "cannot read open journals");
            return Vec::new();
        }
        Err(e) => {
            tracing::error!(error = %e, "cannot read open journals");
            return Vec::new();
        }
    };
    let mut recovered = Vec::new();
    for j in journals {
        if j.workspace != workspace
            || applying.contains(&j.operation_id)
            || j.registration.as_deref() != Some(ws.registration.as_str())
            || owned_by_live(j.instance_id.as_deref())
            || j.seal != JournalSeal::Valid
            || j.entries.iter().any(|e| RelPath::parse(&e.path).is_err())
        {
            continue;
        }
        let backups = j
            .entries
            .iter()
            .map(|e| codespace_runner_api::Backup {
                path: e.path.clone(),
                before: e.before.clone().map(|d| (d, e.mode.unwrap_or(0o644))),
            })
            .collect();
        let restored = ws
            .runner
            .restore(codespace_runner_api::RestoreRequest {
                workspace: workspace.to_string(),
                backups,
            })
            .await;
        match restored {
            Ok(()) => {
                let _ = store.journal_clear(&j.operation_id);
                gw.finish_operation(
                    &j.operation_id,
                    crate::facts::OperationStatus::Unknown,
                    &json!({"recovered": "rolled back by the worker"}),
                    Some("unknown"),
                );
                recovered.push(j.operation_id);
            }
            Err(e) => {
                tracing::error!(operation_id = %j.operation_id, error = %e, "worker rollback failed; journal kept");
            }
        }
    }
    recovered
}

/// Once per worker connection (`connection`: its restart count), before that connection serves
/// a call of `ws`: the journals a dead connection left are restored through the worker
/// ([`recover_worker`]).
pub(crate) async fn recover_on_connect(gw: &Gateway, ws: &WorkspaceRuntime, connection: u64) {
    use std::sync::atomic::Ordering;
    if ws.recovered_for.swap(connection, Ordering::AcqRel) == connection {
        return;
    }
    let recovered = recover_worker(gw, &ws.facts.id).await;
    if !recovered.is_empty() {
        tracing::warn!(workspace = %ws.facts.id, operations = ?recovered, "rolled back interrupted patches through the worker");
    }
}
