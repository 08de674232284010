//! `apply_patch`, a handler of an [`Authorized`] call: parse and plan the whole patch (the gateway
//! has decided every touched path), check versions, then commit all or nothing under the
//! workspace lease with a rollback journal in the store.

use crate::error::{ErrorCode, ToolError};
use crate::gateway::Authorized;
use crate::gateway::ops::{Begin, fingerprint};
use crate::tools::patch_runner::Applied;
use crate::versions::Known;
use crate::wire::{ApplyPatchParams, ApplyPatchResult, FileChange};
use codespace_runner_fs::txn::{Backup, Change, CommitError, Journal, commit, restore};
use codespace_runner_fs::{FsError, Kind, RelPath, Root, Version};
use codespace_runner_patch::{FileState, PlanError, PlannedChange, plan};
use codespace_store::{JournalEntry, Store};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The rollback journal: backups go to the store before the first write. `finish` leaves the
/// journal open; the caller clears it once the outcome is final (so a crash in between is
/// rolled back at start-up).
struct StoreJournal<'a> {
    store: &'a Store,
    operation_id: &'a str,
    workspace: &'a str,
    registration: &'a str,
    backups: Vec<Backup>,
}

impl Journal for StoreJournal<'_> {
    fn record(&mut self, backups: &[Backup]) -> Result<(), String> {
        let entries: Vec<JournalEntry> = backups
            .iter()
            .map(|b| JournalEntry {
                path: b.path.as_str().to_string(),
                before: b.before.as_ref().map(|(d, _)| d.clone()),
                mode: b.before.as_ref().map(|(_, m)| *m),
                created_dirs: Vec::new(),
            })
            .collect();
        self.store
            .journal_begin(
                self.operation_id,
                self.workspace,
                self.registration,
                &entries,
            )
            .map_err(|e| e.to_string())?;
        self.backups = backups.to_vec();
        Ok(())
    }

    fn finish(&mut self) -> Result<(), String> {
        Ok(())
    }
}

fn plan_error(e: PlanError<FsError>) -> ToolError {
    match e {
        PlanError::Lookup(fs) => crate::file_versions::fs_error(fs, "limits.max_patch_file_bytes"),
        other => ToolError::new(ErrorCode::from(&other), other.to_string()),
    }
}

/// The Change and the wire change record of a planned change.
fn to_change(c: &PlannedChange) -> Result<(Change, FileChange, Vec<String>), ToolError> {
    let rel = |p: &str| RelPath::parse(p).map_err(ToolError::from);
    let ver = |d: &[u8]| Version::from_bytes(d).as_str().to_string();
    Ok(match c {
        PlannedChange::Add { path, new } => {
            let p = rel(path)?;
            (
                Change::Write {
                    path: p.clone(),
                    data: new.clone(),
                    mode: 0o644,
                },
                FileChange {
                    path: p.as_str().into(),
                    kind: "add".into(),
                    from: None,
                    before_version: None,
                    after_version: Some(ver(new)),
                },
                vec![p.as_str().into()],
            )
        }
        PlannedChange::Update {
            path,
            old,
            new,
            mode,
        } => {
            let p = rel(path)?;
            (
                Change::Write {
                    path: p.clone(),
                    data: new.clone(),
                    mode: *mode,
                },
                FileChange {
                    path: p.as_str().into(),
                    kind: "update".into(),
                    from: None,
                    before_version: Some(ver(old)),
                    after_version: Some(ver(new)),
                },
                vec![p.as_str().into()],
            )
        }
        PlannedChange::Delete { path, old, .. } => {
            let p = rel(path)?;
            (
                Change::Delete { path: p.clone() },
                FileChange {
                    path: p.as_str().into(),
                    kind: "delete".into(),
                    from: None,
                    before_version: Some(ver(old)),
                    after_version: None,
                },
                vec![p.as_str().into()],
            )
        }
        PlannedChange::Move {
            from,
            to,
            old,
            new,
            mode,
        } => {
            let f = rel(from)?;
            let t = rel(to)?;
            (
                Change::Move {
                    from: f.clone(),
                    to: t.clone(),
                    data: new.clone(),
                    mode: *mode,
                },
                FileChange {
                    path: t.as_str().into(),
                    kind: "move".into(),
                    from: Some(f.as_str().into()),
                    before_version: Some(ver(old)),
                    after_version: Some(ver(new)),
                },
                vec![f.as_str().into(), t.as_str().into()],
            )
        }
    })
}

/// The `VERSION_CONFLICT` of the first path in `expected` (the caller's `expected_versions`)
/// or `pinned` (versions a granted approval pinned) whose version on disk differs, if any.
async fn stale_version(
    auth: &Authorized<'_>,
    expected: &BTreeMap<String, String>,
    pinned: &BTreeMap<String, String>,
) -> Option<ToolError> {
    let ws = auth.ws();
    for (path, want, resumed) in expected
        .iter()
        .map(|(p, w)| (p, w, false))
        .chain(pinned.iter().map(|(p, w)| (p, w, true)))
    {
        let Ok(rel) = RelPath::parse(path) else {
            continue;
        };
        // From disk, not the version table: an outside edit may not have reached it yet.
        // A path that cannot be hashed (too large, unreadable) says nothing here.
        let Ok(on_disk) = ws
            .runner
            .version(codespace_runner_api::VersionRequest {
                workspace: ws.facts.id.clone(),
                path: rel.as_str().to_string(),
                max_hash_bytes: auth.config.limits.max_hash_bytes,
            })
            .await
        else {
            continue;
        };
        let have = on_disk.as_ref().map_or("absent", |v| v.as_str());
        if have == want {
            continue;
        }

        let message = if resumed {
            format!(
                "`{path}` changed since the approval was requested; nothing was written, ask for a new approval"
            )
        } else {
            format!("`{path}` is at version {have} but the patch expected {want}; read it again")
        };
        return Some(ToolError::new(ErrorCode::VersionConflict, message));
    }
    None
}

/// Where the planner reads a workspace's files: beneath the host root, or through the runner of
/// a worker's workspace.
enum Source {
    Host(Arc<Root>),
    Runner(Arc<dyn codespace_runner_api::Runner>, String),
}

impl Source {
    /// [`lookup`] of one path (blocking: a runner's answer is waited for on this thread).
    fn lookup(&self, path: &str, max_bytes: u64) -> Result<FileState, FsError> {
        match self {
            Source::Host(root) => lookup(root, path, max_bytes),
            Source::Runner(runner, workspace) => {
                let handle = tokio::runtime::Handle::try_current().map_err(|_| FsError::Io {
                    path: path.to_string(),
                    message: "no runtime to reach the runner from".into(),
                })?;
                handle.block_on(crate::tools::patch_runner::lookup_remote(
                    runner.as_ref(),
                    workspace,
                    path,
                    max_bytes,
                ))
            }
        }
    }
}

/// Reads one path for the planner, no-follow; a file above `max_bytes`
/// (`limits.max_patch_file_bytes`) is `FILE_TOO_LARGE` and is never read whole.
fn lookup(root: &Root, path: &str, max_bytes: u64) -> Result<FileState, FsError> {
    let rel = RelPath::parse(path)?;
    Ok(match root.stat(&rel)? {
        None => FileState::Absent,
        Some(m) => match m.kind {
            Kind::Dir => FileState::Directory,
            Kind::Symlink => FileState::Symlink,
            Kind::Other => FileState::Special,
            Kind::File => {
                let f = root.open_for_read(&rel)?;
                FileState::File {
                    data: f.read_all_bounded(max_bytes)?,
                    mode: f.mode,
                }
            }
        },
    })
}

/// Serves `apply_patch` (the gateway has decided every touched path and, unless this runs a
/// granted hold (`resumed`), asked `confirm`); `resumed`'s file versions pinned at hold time
/// must still hold.
pub(crate) async fn apply_patch(
    auth: &Authorized<'_>,
    p: &ApplyPatchParams,
    resumed: Option<&crate::gateway::approvals::Resumed>,
) -> Result<ApplyPatchResult, ToolError> {
    let ws = auth.ws();
    let pinned = resumed.map(|r| r.pinned.clone()).unwrap_or_default();
    // Normalize expected_versions keys (a malformed key is PATH_ESCAPE, like any path).
    let mut expected: BTreeMap<String, String> = BTreeMap::new();
    for (k, v) in &p.expected_versions {
        let rel = RelPath::parse(k)?;
        if v != "absent" && Version::parse(v).is_err() {
            return Err(ToolError::new(
                ErrorCode::InvalidArguments,
                format!(
                    "expected_versions[`{}`]: expected \"sha256:<64 hex>\" or \"absent\"",
                    rel.as_str()
                ),
            ));
        }
        expected.insert(rel.as_str().to_string(), v.clone());
    }
    let fp = fingerprint(&json!({
        "workspace_id": p.workspace_id,
        "patch": p.patch,
        "expected_versions": p.expected_versions,
        "check_only": p.check_only.unwrap_or(false),
    }));
    let lease = auth.lease().await?;
    let op_id = match auth.begin_operation(p.operation_key.as_deref(), &fp)? {
        Begin::New(id) => id,
        Begin::Replay(row) => return replay(&row),
    };
    ws.versions.ensure_watching();
    // The hooks that ran (issue 31), for the result and the operation record.
    let mut hooks = Vec::new();
    let mut out = apply_locked(auth, p, &expected, &pinned, &op_id, &mut hooks).await;
    // after_patch hooks run on the committed patch, still under the lease.
    if let Ok((result, changes)) = &mut out
        && result.status == crate::facts::OperationStatus::Applied
    {
        crate::tools::patch_hooks::after_patch(auth, changes, &result.files, &op_id, &mut hooks)
            .await;
    }
    drop(lease);
    let out = out.map(|(mut result, _)| {
        result.hooks = std::mem::take(&mut hooks);
        result
    });
    match out {
        Ok(result) => {
            // The ledger records the result as the wire shows it (a replay reads it back).
            let v = serde_json::to_value(&result)
                .map_err(|e| ToolError::new(ErrorCode::Internal, e.to_string()))?;
            auth.finish_operation(&op_id, result.status, &v, None);
            Ok(result)
        }
        Err((status, err)) => {
            let err = err.with_operation(op_id.clone());
            let mut record = json!({"error": {"code": err.code, "message": err.message}});
            if !hooks.is_empty()
                && let Some(m) = record.as_object_mut()
            {
                m.insert("hooks".into(), json!(hooks));
            }
            auth.finish_operation(&op_id, status, &record, Some(err.code.as_str()));
            Err(err)
        }
    }
}

/// Plan, check, run the `before_patch` hooks (into `hooks`) and commit under the lease; the
/// result with the planned changes. Errors carry the operation status to record.
async fn apply_locked(
    auth: &Authorized<'_>,
    p: &ApplyPatchParams,
    expected: &BTreeMap<String, String>,
    pinned: &BTreeMap<String, String>,
    op_id: &str,
    hooks: &mut Vec<crate::wire::HookRun>,
) -> Result<(ApplyPatchResult, Vec<PlannedChange>), (crate::facts::OperationStatus, ToolError)> {
    let ws = auth.ws();
    let rejected = |e: ToolError| (crate::facts::OperationStatus::Rejected, e);
    let patch = auth.patch().map_err(rejected)?.clone();
    let root = ws.root.clone();
    let seq0 = ws.versions.seq();
    let planned = {
        let max = auth.config.limits.max_patch_file_bytes;
        // A worker's workspace is read through its runner (no host root).
        let source = match &root {
            Some(root) => Source::Host(Arc::clone(root)),
            None => Source::Runner(Arc::clone(&ws.runner), ws.facts.id.clone()),
        };
        match tokio::task::spawn_blocking(move || plan(&patch, |path| source.lookup(path, max)))
            .await
            .map_err(|e| rejected(ToolError::new(ErrorCode::Internal, e.to_string())))?
        {
            Ok(planned) => planned,
            // Hunks that no longer match a file the caller pinned to an older version: the
            // stale version is the useful answer (read it again), not the hunk.
            Err(e) => {
                let err = match stale_version(auth, expected, pinned).await {
                    Some(conflict) => conflict,
                    None => plan_error(e),
                };
                return Err(rejected(err));
            }
        }
    };
    let mut changes = Vec::new();
    let mut wire = Vec::new();
    let mut files: Vec<String> = Vec::new();
    // What each touched path was at plan time (the disk truth the patch was planned on).
    let mut at_plan: BTreeMap<String, Known> = BTreeMap::new();
    for c in &planned.changes {
        let (change, fc, paths) = to_change(c).map_err(rejected)?;
        match c {
            PlannedChange::Add { path, .. } => {
                at_plan.insert(rel_str(path), Known::Absent);
            }
            PlannedChange::Update { path, old, .. } | PlannedChange::Delete { path, old, .. } => {
                at_plan.insert(
                    rel_str(path),
                    Known::Version(Version::from_bytes(old).as_str().into()),
                );
            }
            PlannedChange::Move { from, to, old, .. } => {
                at_plan.insert(
                    rel_str(from),
                    Known::Version(Version::from_bytes(old).as_str().into()),
                );
                at_plan.insert(rel_str(to), Known::Absent);
            }
        }
        changes.push(change);
        wire.push(fc);
        files.extend(paths);
    }
    for (path, k) in &at_plan {
        ws.versions.record(path, k.clone());
    }
    // expected_versions against what the plan read from disk (and, for paths the patch does
    // not touch, against the version table).
    for (path, want) in expected {
        let have = match at_plan.get(path) {
            Some(k) => k.clone(),
            None => {
                let rel = RelPath::parse(path).map_err(|e| rejected(e.into()))?;
                auth.current_version(ws, &rel).await.map_err(rejected)?
            }
        };
        if crate::gateway::patches::known_str(&have) != want {
            return Err(rejected(ToolError::new(
                ErrorCode::VersionConflict,
                format!(
                    "`{path}` is at version {} but the patch expected {want}; read it again",
                    crate::gateway::patches::known_str(&have)
                ),
            )));
        }
    }
    // A resumed patch runs only on the files the human approved.
    for (path, want) in pinned {
        let have = at_plan
            .get(path)
            .map_or("absent", crate::gateway::patches::known_str);
        if have != want {
            return Err(rejected(ToolError::new(
                ErrorCode::VersionConflict,
                format!(
                    "`{path}` changed since the approval was requested; nothing was written, ask for a new approval"
                ),
            )));
        }
    }
    if p.check_only.unwrap_or(false) {
        let result = ApplyPatchResult {
            status: crate::facts::OperationStatus::Checked,
            operation_id: op_id.into(),
            replayed: false,
            files,
            changes: wire,
            // The preview (issue 31's ledger: secret files named, never shown).
            diff: Some(
                crate::tools::ledger::preview(auth, &planned.changes)
                    .await
                    .map_err(rejected)?,
            ),
            hooks: Vec::new(),
        };
        return Ok((result, planned.changes));
    }
    // The operator's before_patch hooks on the staged patched tree: a failure writes nothing.
    let touched: Vec<String> = at_plan.keys().cloned().collect();
    crate::tools::patch_hooks::before_patch(auth, &planned.changes, &touched, hooks)
        .await
        .map_err(|e| (crate::facts::OperationStatus::Failed, e))?;
    if let Some(h) = &auth.patch_hooks.before_commit {
        h();
    }
    let store = auth.require_store().map_err(rejected)?.clone();
    let workspace = ws.facts.id.clone();
    let registration = ws.registration.clone();
    let op = op_id.to_string();
    let versions_changed = ws.versions.changed_since(seq0, &touched);
    let hooks = Arc::clone(&auth.patch_hooks);
    let at_plan_c = at_plan.clone();
    let Some(root) = root else {
        let applying = |on: bool| {
            let mut set = ws
                .applying
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if on {
                set.insert(op.clone());
            } else {
                set.remove(&op);
            }
        };
        applying(true);
        let applied = crate::tools::patch_runner::commit_remote(
            ws.runner.as_ref(),
            &store,
            &workspace,
            &registration,
            &op,
            &changes,
            &at_plan,
            &hooks,
        )
        .await;
        applying(false);
        let out = finish_applied(ws, applied, op_id, files, wire);
        if out.is_ok() {
            // The operation ledger (issue 31): before/after of every file, once committed.
            crate::tools::ledger::record_patch(auth, op_id, &planned.changes).await;
        }
        return out.map(|r| (r, planned.changes));
    };
    let applied = tokio::task::spawn_blocking(move || {
        commit_checked(
            &root,
            &store,
            &workspace,
            &registration,
            &op,
            &changes,
            &at_plan_c,
            &versions_changed,
            &hooks,
        )
    })
    .await
    .map_err(|e| {
        (
            crate::facts::OperationStatus::Unknown,
            ToolError::new(ErrorCode::Internal, e.to_string()),
        )
    })?;
    let out = finish_applied(ws, applied, op_id, files, wire);
    if out.is_ok() {
        // The operation ledger (issue 31): before/after of every file, once committed.
        crate::tools::ledger::record_patch(auth, op_id, &planned.changes).await;
    }
    out.map(|r| (r, planned.changes))
}

/// The result of a commit (host or runner): versions recorded, the wire result or the error
/// with the status to record.
fn finish_applied(
    ws: &crate::gateway::WorkspaceRuntime,
    applied: Applied,
    op_id: &str,
    files: Vec<String>,
    wire: Vec<FileChange>,
) -> Result<ApplyPatchResult, (crate::facts::OperationStatus, ToolError)> {
    match applied {
        Applied::Done => {
            for fc in &wire {
                if let Some(from) = &fc.from {
                    ws.versions.record(from, Known::Absent);
                }
                let k = fc
                    .after_version
                    .clone()
                    .map_or(Known::Absent, Known::Version);
                ws.versions.record(&fc.path, k);
            }
            Ok(ApplyPatchResult {
                status: crate::facts::OperationStatus::Applied,
                operation_id: op_id.into(),
                replayed: false,
                files,
                changes: wire,
                diff: None,
                hooks: Vec::new(),
            })
        }
        Applied::Stale(paths) => Err((
            crate::facts::OperationStatus::Rejected,
            ToolError::new(
                ErrorCode::StaleRead,
                format!(
                    "changed outside the server while the patch was being applied: {}; nothing was written, read again",
                    paths.join(", ")
                ),
            ),
        )),
        Applied::Failed { status, err } => Err((status, err)),
    }
}

fn rel_str(p: &str) -> String {
    RelPath::parse(p).map_or_else(|_| p.to_string(), |r| r.as_str().to_string())
}

/// The replayed result of a stored operation: the stored result, the stored error (with the
/// operation id), or `unknown` when it never finished. Nothing is applied again.
fn replay(row: &codespace_store::OperationRow) -> Result<ApplyPatchResult, ToolError> {
    use crate::facts::OperationStatus;
    use serde::Deserialize as _;
    if let Some(err) = crate::gateway::ops::replayed_error(row) {
        return Err(err);
    }
    let stored = match (&row.result, row.finished_ms) {
        (Some(r), Some(_)) if r.is_object() && r.get("status").is_some() => Some(
            ApplyPatchResult::deserialize(r)
                .map_err(|e| ToolError::new(ErrorCode::Internal, format!("stored result: {e}")))?,
        ),
        _ => None,
    };
    let mut out = stored.unwrap_or_else(|| {
        let recorded = || {
            OperationStatus::deserialize(
                serde::de::value::StrDeserializer::<serde::de::value::Error>::new(&row.status),
            )
            .unwrap_or(OperationStatus::Unknown)
        };
        ApplyPatchResult {
            status: if row.finished_ms.is_some() {
                recorded()
            } else {
                OperationStatus::Unknown
            },
            operation_id: row.operation_id.clone(),
            replayed: true,
            files: Vec::new(),
            changes: Vec::new(),
            diff: None,
            hooks: Vec::new(),
        }
    });
    out.replayed = true;
    out.operation_id = row.operation_id.clone();
    Ok(out)
}

/// Commits with the journal, then verifies that what was replaced is what the plan read; any
/// difference (a change in the apply window) rolls the commit back and reports the paths.
#[allow(clippy::too_many_arguments)]
fn commit_checked(
    root: &Root,
    store: &Store,
    workspace: &str,
    registration: &str,
    op: &str,
    changes: &[Change],
    at_plan: &BTreeMap<String, Known>,
    watcher_changed: &[String],
    hooks: &crate::gateway::patches::PatchHooks,
) -> Applied {
    // Changes the watcher saw in the window, confirmed on disk before anything is written.
    let mut stale: Vec<String> = Vec::new();
    for path in watcher_changed.iter().chain(at_plan.keys()) {
        if stale.contains(path) {
            continue;
        }
        let Ok(rel) = RelPath::parse(path) else {
            continue;
        };
        let now = match root.version(&rel) {
            Ok(Some(v)) => Known::Version(v.as_str().to_string()),
            Ok(None) => Known::Absent,
            Err(_) => continue,
        };
        if at_plan.get(path).is_some_and(|k| *k != now) {
            stale.push(path.clone());
        }
    }
    if !stale.is_empty() {
        return Applied::Stale(stale);
    }
    let mut journal = StoreJournal {
        store,
        operation_id: op,
        workspace,
        registration,
        backups: Vec::new(),
    };
    let mut fault = |step: usize| match &hooks.fault {
        Some(f) => f(step),
        None => Ok(()),
    };
    let result = commit(root, changes, &mut journal, &mut fault);
    let clear = |store: &Store| {
        if let Err(e) = store.journal_clear(op) {
            tracing::error!(operation_id = op, error = %e, "cannot clear the journal");
        }
    };
    match result {
        Ok(report) => {
            // What the commit replaced must be what the plan read.
            let mut changed: Vec<String> = Vec::new();
            for f in &report.files {
                let before = f
                    .before
                    .as_ref()
                    .map_or(Known::Absent, |v| Known::Version(v.as_str().to_string()));
                if at_plan.get(f.path.as_str()).is_some_and(|k| *k != before) {
                    changed.push(f.path.as_str().to_string());
                }
            }
            if changed.is_empty() {
                clear(store);
                return Applied::Done;
            }
            match restore(root, &journal.backups) {
                Ok(()) => {
                    clear(store);
                    Applied::Failed {
                        status: crate::facts::OperationStatus::FailedRolledBack,
                        err: ToolError::new(
                            ErrorCode::StaleRead,
                            format!(
                                "changed outside the server during the apply: {}; the patch was rolled back and the outside edit kept",
                                changed.join(", ")
                            ),
                        ),
                    }
                }
                Err(files) => Applied::Failed {
                    status: crate::facts::OperationStatus::FailedPartial,
                    err: ToolError::new(
                        ErrorCode::StaleRead,
                        format!(
                            "changed outside the server during the apply, and restoring failed for: {}",
                            files.join(", ")
                        ),
                    ),
                },
            }
        }
        Err(CommitError::Refused { cause }) => {
            clear(store);
            Applied::Failed {
                status: crate::facts::OperationStatus::Rejected,
                err: ToolError::from(cause),
            }
        }
        Err(CommitError::Journal { message }) => Applied::Failed {
            status: crate::facts::OperationStatus::Rejected,
            err: ToolError::new(
                ErrorCode::Internal,
                format!("cannot write the rollback journal; nothing was written ({message})"),
            ),
        },
        Err(CommitError::RolledBack { cause }) => {
            clear(store);
            Applied::Failed {
                status: crate::facts::OperationStatus::FailedRolledBack,
                err: ToolError::new(
                    ErrorCode::from(&cause),
                    format!(
                        "the patch failed and every touched file was restored (failed_rolled_back): {cause}"
                    ),
                ),
            }
        }
        Err(CommitError::Partial { cause, files }) => Applied::Failed {
            status: crate::facts::OperationStatus::FailedPartial,
            err: ToolError::new(
                ErrorCode::FileOperationFailed,
                format!(
                    "the patch failed ({cause}) and these files could not be restored (failed_partial): {}",
                    files.join(", ")
                ),
            ),
        },
        Err(CommitError::JournalFinish { message, .. }) => Applied::Failed {
            status: crate::facts::OperationStatus::Unknown,
            err: ToolError::new(ErrorCode::Internal, format!("journal: {message}")),
        },
    }
}
