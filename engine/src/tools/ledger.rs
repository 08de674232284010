//! The operation ledger's handlers (issue 31): what an `apply_patch` changed is recorded once it
//! committed (before/after blobs per file, content-addressed in the store; secret files named
//! but never stored), the `check_only` preview, `operation_diff` (a unified diff, decided per
//! path it shows) and the reverse patch `operation_revert` runs as an `apply_patch`.

use crate::error::{ErrorCode, ToolError};
use crate::gateway::Authorized;
use crate::policy::Action;
use crate::redact::LiveRedactor;
use crate::request::path_request;
use crate::wire::{
    ApplyPatchParams, LedgerFileView, OPERATION_DIFF_DEFAULT_LINES, OPERATION_DIFF_MAX_LINES,
    OperationDiffParams, OperationDiffResult, OperationRevertParams, ToolName,
};
use codespace_runner_fs::{RelPath, Version};
use codespace_runner_patch::{FileState, PlannedChange};
use codespace_store::{Blob, LedgerFile, OperationRow, Store};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

fn store_err(e: codespace_store::StoreError) -> ToolError {
    ToolError::new(ErrorCode::Internal, format!("store: {e}"))
}

fn internal(e: impl std::fmt::Display) -> ToolError {
    ToolError::new(ErrorCode::Internal, e.to_string())
}

fn version_of(data: &[u8]) -> String {
    Version::from_bytes(data).as_str().to_string()
}

/// One path of a planned change: `(path, before, after)`.
type Side<'a> = (&'a str, Option<&'a [u8]>, Option<&'a [u8]>);

/// The paths (and contents) one planned change names.
fn sides(c: &PlannedChange) -> Vec<Side<'_>> {
    match c {
        PlannedChange::Add { path, new } => vec![(path.as_str(), None, Some(new.as_slice()))],
        PlannedChange::Update { path, old, new, .. } => {
            vec![(path.as_str(), Some(old.as_slice()), Some(new.as_slice()))]
        }
        PlannedChange::Delete { path, old, .. } => {
            vec![(path.as_str(), Some(old.as_slice()), None)]
        }
        PlannedChange::Move {
            from, to, old, new, ..
        } => vec![
            (from.as_str(), Some(old.as_slice()), None),
            (to.as_str(), None, Some(new.as_slice())),
        ],
    }
}

/// Every path of `changes` policy would not let this caller `read` (the secret-file guardrails,
/// server-owned files, an operator's forbid), asked quietly as the `read` of each path; a move
/// is withheld whole when either of its names is.
fn policy_withheld(auth: &Authorized<'_>, changes: &[PlannedChange]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for c in changes {
        let s = sides(c);
        let refused = s.iter().any(|(path, _, _)| {
            let req = path_request(Action::READ, path, "", auth.session());
            !auth
                .decide_quietly(Action::READ, std::slice::from_ref(&req))
                .allowed()
        });
        if refused {
            out.extend(s.iter().map(|(p, _, _)| p.to_string()));
        }
    }
    out
}

/// Every path of `changes` whose before or after content holds text the configured
/// `redaction` patterns match (CPU work: run it on the blocking pool).
fn redaction_withheld(redactor: &LiveRedactor, changes: &[PlannedChange]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for c in changes {
        let s = sides(c);
        let secret = s
            .iter()
            .flat_map(|(_, b, a)| [*b, *a])
            .flatten()
            .any(|data| {
                matches!(
                    redactor.text(&String::from_utf8_lossy(data)),
                    std::borrow::Cow::Owned(_)
                )
            });
        if secret {
            out.extend(s.iter().map(|(p, _, _)| p.to_string()));
        }
    }
    out
}

/// The ledger rows and blobs of a committed patch.
fn rows_of(
    changes: &[PlannedChange],
    withheld: &BTreeSet<String>,
) -> (Vec<LedgerFile>, Vec<(String, Vec<u8>)>) {
    let mut files = Vec::with_capacity(changes.len());
    let mut blobs: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut keep = |data: &[u8]| {
        let v = version_of(data);
        blobs.entry(v.clone()).or_insert_with(|| data.to_vec());
        v
    };
    for c in changes {
        let (path, from, kind, before, after, mode) = match c {
            PlannedChange::Add { path, new } => (path, None, "add", None, Some(new), None),
            PlannedChange::Update {
                path,
                old,
                new,
                mode,
            } => (path, None, "update", Some(old), Some(new), Some(*mode)),
            PlannedChange::Delete { path, old, mode } => {
                (path, None, "delete", Some(old), None, Some(*mode))
            }
            PlannedChange::Move {
                from,
                to,
                old,
                new,
                mode,
            } => (to, Some(from), "move", Some(old), Some(new), Some(*mode)),
        };
        let hidden =
            withheld.contains(path.as_str()) || from.is_some_and(|f| withheld.contains(f.as_str()));
        let mut row = LedgerFile {
            path: path.clone(),
            from: from.cloned(),
            kind: kind.into(),
            withheld: hidden,
            ..LedgerFile::default()
        };
        if !hidden {
            row.before = before.map(|d| keep(d));
            row.after = after.map(|d| keep(d));
            row.mode = mode;
        }
        files.push(row);
    }
    (files, blobs.into_iter().collect())
}

/// Records what a committed `apply_patch` operation changed. Called once, after the commit; a
/// failure to record is logged (the patch stands; the operation then has no diff or revert).
pub(crate) async fn record_patch(auth: &Authorized<'_>, op_id: &str, changes: &[PlannedChange]) {
    let Some(store) = auth.store.clone() else {
        return;
    };
    let mut withheld = policy_withheld(auth, changes);
    let redactor = auth.config.redaction.clone();
    let changes = changes.to_vec();
    let op = op_id.to_string();
    let done = tokio::task::spawn_blocking(move || {
        withheld.extend(redaction_withheld(&redactor, &changes));
        let (files, blobs) = rows_of(&changes, &withheld);
        let blobs: Vec<Blob<'_>> = blobs
            .iter()
            .map(|(hash, data)| Blob { hash, data })
            .collect();
        store.ledger_record(&op, &files, &blobs)
    })
    .await;
    match done {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::error!(operation_id = op_id, error = %e, "cannot record the operation ledger")
        }
        Err(e) => {
            tracing::error!(operation_id = op_id, error = %e, "cannot record the operation ledger")
        }
    }
}

/// The unified diff of one file between two contents (`None`: the file did not exist).
fn file_diff(
    path: &str,
    from: Option<&str>,
    before: Option<&[u8]>,
    after: Option<&[u8]>,
) -> String {
    let old_name = match (before, from) {
        (None, _) => "/dev/null".to_string(),
        (Some(_), Some(f)) => format!("a/{f}"),
        (Some(_), None) => format!("a/{path}"),
    };
    let new_name = match after {
        None => "/dev/null".to_string(),
        Some(_) => format!("b/{path}"),
    };
    let (Ok(old), Ok(new)) = (
        std::str::from_utf8(before.unwrap_or_default()),
        std::str::from_utf8(after.unwrap_or_default()),
    ) else {
        return format!("Binary files {old_name} and {new_name} differ\n");
    };
    let diff = similar::TextDiff::from_lines(old, new);
    let body = diff
        .unified_diff()
        .context_radius(3)
        .header(&old_name, &new_name)
        .to_string();
    if body.is_empty() {
        // Same content (a mode change or a move without edits).
        return match from {
            Some(f) => format!("rename from {f}\nrename to {path}\n"),
            None => String::new(),
        };
    }
    body
}

fn withheld_line(path: &str, kind: &str) -> String {
    format!("withheld: {path} ({kind}; content not shown)\n")
}

/// `apply_patch` `check_only`: the unified diff the planned changes would apply; paths whose
/// content the ledger would withhold ([`policy_withheld`], [`redaction_withheld`]) are named,
/// never shown. Rendered on the blocking pool.
pub(crate) async fn preview(
    auth: &Authorized<'_>,
    changes: &[PlannedChange],
) -> Result<String, ToolError> {
    let mut withheld = policy_withheld(auth, changes);
    let redactor = auth.config.redaction.clone();
    let changes = changes.to_vec();
    tokio::task::spawn_blocking(move || {
        withheld.extend(redaction_withheld(&redactor, &changes));
        render_preview(&changes, &withheld)
    })
    .await
    .map_err(internal)
}

/// The preview's text (see [`preview`]).
fn render_preview(changes: &[PlannedChange], withheld: &BTreeSet<String>) -> String {
    let mut out = String::new();
    for c in changes {
        let (path, from, kind, before, after) = match c {
            PlannedChange::Add { path, new } => (path, None, "add", None, Some(new)),
            PlannedChange::Update { path, old, new, .. } => {
                (path, None, "update", Some(old), Some(new))
            }
            PlannedChange::Delete { path, old, .. } => (path, None, "delete", Some(old), None),
            PlannedChange::Move {
                from, to, old, new, ..
            } => (to, Some(from), "move", Some(old), Some(new)),
        };
        if withheld.contains(path.as_str()) || from.is_some_and(|f| withheld.contains(f.as_str())) {
            out.push_str(&withheld_line(path, kind));
            continue;
        }
        out.push_str(&file_diff(
            path,
            from.map(String::as_str),
            before.map(Vec::as_slice),
            after.map(Vec::as_slice),
        ));
    }
    out
}

/// The ledger rows of `op` and the blobs they name, read on the blocking pool.
async fn load(
    store: Arc<Store>,
    op: String,
    with_blobs: impl Fn(&LedgerFile) -> bool + Send + 'static,
) -> Result<(Vec<LedgerFile>, BTreeMap<String, Vec<u8>>), ToolError> {
    tokio::task::spawn_blocking(move || {
        let files = store.ledger_files(&op).map_err(store_err)?;
        let mut blobs = BTreeMap::new();
        for f in files.iter().filter(|f| with_blobs(f)) {
            for h in [&f.before, &f.after].into_iter().flatten() {
                if !blobs.contains_key(h)
                    && let Some(d) = store.ledger_blob(h).map_err(store_err)?
                {
                    blobs.insert(h.clone(), d);
                }
            }
        }
        Ok((files, blobs))
    })
    .await
    .map_err(internal)?
}

fn view(f: &LedgerFile, withheld: bool) -> LedgerFileView {
    LedgerFileView {
        path: f.path.clone(),
        kind: f.kind.clone(),
        from: f.from.clone(),
        before_version: if withheld { None } else { f.before.clone() },
        after_version: if withheld { None } else { f.after.clone() },
        withheld,
        process_id: f.process_id.clone(),
        best_effort: f.best_effort,
    }
}

/// `operation_diff` of the operation the gateway resolved (one of the caller's) and decided the
/// call on: each path it would show is decided as `operation_diff` of that path (audited); a
/// path policy refuses, or whose content was never stored, is named as withheld.
pub(crate) async fn operation_diff(
    auth: &Authorized<'_>,
    row: &OperationRow,
    p: &OperationDiffParams,
) -> Result<OperationDiffResult, ToolError> {
    let limit = p.limit.unwrap_or(OPERATION_DIFF_DEFAULT_LINES);
    if limit == 0 || limit > OPERATION_DIFF_MAX_LINES {
        return Err(ToolError::new(
            ErrorCode::InvalidArguments,
            format!("limit must be between 1 and {OPERATION_DIFF_MAX_LINES}"),
        ));
    }
    let offset = p.offset.unwrap_or(0);
    let store = Arc::clone(auth.require_store()?);
    // Decide first, read contents only of the paths the caller may see.
    let (files, _) = load(Arc::clone(&store), row.operation_id.clone(), |_| false).await?;
    let action = Action::Tool(ToolName::OperationDiff);
    let mut shown: BTreeSet<usize> = BTreeSet::new();
    let mut views = Vec::with_capacity(files.len());
    for (i, f) in files.iter().enumerate() {
        let allowed = [Some(&f.path), f.from.as_ref()]
            .into_iter()
            .flatten()
            .all(|path| {
                let req = path_request(action, path, "", auth.session());
                auth.decide_more(action, std::slice::from_ref(&req)).is_ok()
            });
        let withheld = f.withheld || !allowed;
        if !withheld {
            shown.insert(i);
        }
        views.push(view(f, withheld));
    }
    let keep: BTreeSet<(String, Option<String>)> = shown
        .iter()
        .filter_map(|i| files.get(*i))
        .map(|f| (f.path.clone(), f.from.clone()))
        .collect();
    let (files, blobs) = load(store, row.operation_id.clone(), move |f| {
        !f.withheld && keep.contains(&(f.path.clone(), f.from.clone()))
    })
    .await?;
    let mut text = String::new();
    for (i, f) in files.iter().enumerate() {
        if f.process_id.is_some() {
            text.push_str(&format!(
                "changed: {} (while process {} ran; best effort, no content recorded)\n",
                f.path,
                f.process_id.as_deref().unwrap_or("")
            ));
            continue;
        }
        if !shown.contains(&i) {
            text.push_str(&withheld_line(&f.path, &f.kind));
            continue;
        }
        let blob = |h: &Option<String>| h.as_ref().and_then(|h| blobs.get(h)).map(Vec::as_slice);
        text.push_str(&file_diff(
            &f.path,
            f.from.as_deref(),
            blob(&f.before),
            blob(&f.after),
        ));
    }
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let total = u64::try_from(lines.len()).unwrap_or(u64::MAX);
    let start = usize::try_from(offset.min(total)).unwrap_or(usize::MAX);
    let end = usize::try_from(offset.saturating_add(limit).min(total)).unwrap_or(usize::MAX);
    let page: String = lines.get(start..end).unwrap_or_default().concat();
    let shown_lines = u64::try_from(end.saturating_sub(start)).unwrap_or(0);
    let next = offset.saturating_add(shown_lines);
    Ok(OperationDiffResult {
        operation_id: row.operation_id.clone(),
        tool: row.tool.clone(),
        workspace_id: row.workspace.clone(),
        files: views,
        diff: page,
        offset,
        lines: shown_lines,
        total_lines: total,
        next_offset: (next < total).then_some(next),
    })
}

/// An operator's view of an operation's ledger (the web console): the same unified diff
/// `operation_diff` renders, for every file the ledger recorded with content; a path the ledger
/// withheld when it recorded the change (policy or redaction) stays withheld, named only.
/// Blocking (store reads): call it off the async workers.
pub fn operator_diff(
    store: &Store,
    operation_id: &str,
) -> Result<(Vec<LedgerFileView>, String), ToolError> {
    let files = store.ledger_files(operation_id).map_err(store_err)?;
    let mut text = String::new();
    let mut views = Vec::with_capacity(files.len());
    for f in &files {
        views.push(view(f, f.withheld));
        if f.process_id.is_some() {
            text.push_str(&format!(
                "changed: {} (while process {} ran; best effort, no content recorded)\n",
                f.path,
                f.process_id.as_deref().unwrap_or("")
            ));
            continue;
        }
        if f.withheld {
            text.push_str(&withheld_line(&f.path, &f.kind));
            continue;
        }
        let blob = |h: &Option<String>| -> Result<Option<Vec<u8>>, ToolError> {
            match h {
                Some(h) => store.ledger_blob(h).map_err(store_err),
                None => Ok(None),
            }
        };
        let (before, after) = (blob(&f.before)?, blob(&f.after)?);
        if (f.before.is_some() && before.is_none()) || (f.after.is_some() && after.is_none()) {
            // Content pruned or never stored: named, like a withheld path.
            text.push_str(&withheld_line(&f.path, &f.kind));
            continue;
        }
        text.push_str(&file_diff(
            &f.path,
            f.from.as_deref(),
            before.as_deref(),
            after.as_deref(),
        ));
    }
    Ok((views, text))
}

/// The lines of a text without their terminators (a final line without one included).
fn lines_of(text: &str) -> Vec<&str> {
    text.split_inclusive('\n')
        .map(|l| l.trim_end_matches('\n').trim_end_matches('\r'))
        .collect()
}

/// The V4A chunks that turn `old` into `new`: with three lines of context per change when
/// `context`, else one chunk replacing every line.
fn update_chunks(old: &str, new: &str, context: bool) -> String {
    let mut out = String::new();
    if !context {
        out.push_str("@@\n");
        for l in lines_of(old) {
            out.push_str(&format!("-{l}\n"));
        }
        for l in lines_of(new) {
            out.push_str(&format!("+{l}\n"));
        }
        out.push_str("*** End of File\n");
        return out;
    }
    let diff = similar::TextDiff::from_lines(old, new);
    for group in diff.grouped_ops(3) {
        out.push_str("@@\n");
        for op in &group {
            for change in diff.iter_changes(op) {
                let sign = match change.tag() {
                    similar::ChangeTag::Equal => ' ',
                    similar::ChangeTag::Delete => '-',
                    similar::ChangeTag::Insert => '+',
                };
                let v = change.value();
                let v = v.trim_end_matches('\n').trim_end_matches('\r');
                out.push(sign);
                out.push_str(v);
                out.push('\n');
            }
        }
    }
    out
}

fn not_revertible(op: &str, why: String) -> ToolError {
    ToolError::new(
        ErrorCode::InvalidArguments,
        format!("operation {op} cannot be reverted: {why}"),
    )
}

/// One file of the revert: where it must be now, what it must become.
struct RevertFile {
    /// The path now (after the operation).
    now: String,
    /// Its content now (`None`: absent).
    now_data: Option<Vec<u8>>,
    /// The path and content to restore (`None`: the file did not exist).
    back: Option<(String, Vec<u8>)>,
    /// The permission bits to plan the current file with.
    mode: u32,
}

/// The reverse patch of `files` (`context`: chunks with context, else whole-file replacement).
fn reverse_patch(op: &str, files: &[RevertFile], context: bool) -> Result<String, ToolError> {
    let text = |d: &[u8], path: &str| {
        String::from_utf8(d.to_vec())
            .map_err(|_| not_revertible(op, format!("`{path}` is not UTF-8 text")))
    };
    let mut out = String::from("*** Begin Patch\n");
    for f in files {
        match (&f.now_data, &f.back) {
            // Added by the operation: delete it.
            (Some(_), None) => out.push_str(&format!("*** Delete File: {}\n", f.now)),
            // Deleted by the operation: add it back.
            (None, Some((path, data))) => {
                out.push_str(&format!("*** Add File: {path}\n"));
                for l in lines_of(&text(data, path)?) {
                    out.push_str(&format!("+{l}\n"));
                }
            }
            (Some(now), Some((path, data))) => {
                out.push_str(&format!("*** Update File: {}\n", f.now));
                if *path != f.now {
                    out.push_str(&format!("*** Move to: {path}\n"));
                }
                let (old, new) = (text(now, &f.now)?, text(data, path)?);
                if old != new || *path == f.now {
                    out.push_str(&update_chunks(&old, &new, context));
                }
            }
            (None, None) => {}
        }
    }
    out.push_str("*** End Patch\n");
    Ok(out)
}

/// True when `patch`, planned on the files as the operation left them, restores exactly what
/// was there before it (the V4A text cannot say everything: a last line without a newline, a
/// mode, bytes that are not text).
fn restores_exactly(patch: &str, files: &[RevertFile]) -> bool {
    let Ok(parsed) = codespace_runner_patch::parse(patch) else {
        return false;
    };
    let now: BTreeMap<&str, (&[u8], u32)> = files
        .iter()
        .filter_map(|f| {
            f.now_data
                .as_ref()
                .map(|d| (f.now.as_str(), (d.as_slice(), f.mode)))
        })
        .collect();
    let Ok(plan) = codespace_runner_patch::plan(&parsed, |path| {
        Ok::<_, std::convert::Infallible>(match now.get(path) {
            Some((d, mode)) => FileState::File {
                data: d.to_vec(),
                mode: *mode,
            },
            None => FileState::Absent,
        })
    }) else {
        return false;
    };
    let want: BTreeMap<&str, &[u8]> = files
        .iter()
        .filter_map(|f| f.back.as_ref().map(|(p, d)| (p.as_str(), d.as_slice())))
        .collect();
    let mut restored = 0usize;
    for c in &plan.changes {
        let ok = match c {
            PlannedChange::Add { path, new } => want.get(path.as_str()) == Some(&new.as_slice()),
            PlannedChange::Update { path, new, .. } => {
                want.get(path.as_str()) == Some(&new.as_slice())
            }
            PlannedChange::Move { to, new, .. } => want.get(to.as_str()) == Some(&new.as_slice()),
            PlannedChange::Delete { .. } => true,
        };
        if !ok {
            return false;
        }
        if !matches!(c, PlannedChange::Delete { .. }) {
            restored += 1;
        }
    }
    restored == want.len()
}

/// The `apply_patch` that reverts `row` (an applied `apply_patch` operation of the caller): the
/// reverse patch, with `expected_versions` pinning every touched path at the version the
/// operation left (so the commit itself refuses a file changed since). Unless `operation_key`
/// names an earlier revert (a replay), every touched file is checked on disk first and all
/// files changed since are named in one `VERSION_CONFLICT`.
pub(crate) async fn revert_params(
    auth: &Authorized<'_>,
    row: &OperationRow,
    p: &OperationRevertParams,
) -> Result<ApplyPatchParams, ToolError> {
    let op = row.operation_id.as_str();
    if row.tool != ToolName::ApplyPatch.as_str() && row.tool != ToolName::WriteFile.as_str() {
        return Err(not_revertible(
            op,
            format!(
                "only apply_patch and write_file operations can be reverted, not {}",
                row.tool
            ),
        ));
    }
    if row.status != crate::facts::OperationStatus::Applied.as_str() {
        return Err(not_revertible(
            op,
            format!("its status is {}, not applied", row.status),
        ));
    }
    let store = Arc::clone(auth.require_store()?);
    let (files, blobs) = load(store, op.to_string(), |f| !f.withheld).await?;
    if files.is_empty() {
        return Err(not_revertible(
            op,
            "the ledger recorded no files for it".into(),
        ));
    }
    if let Some(f) = files.iter().find(|f| f.withheld) {
        return Err(not_revertible(
            op,
            format!(
                "`{}` is withheld (its content is never stored), so it cannot be restored",
                f.path
            ),
        ));
    }
    let blob = |h: &Option<String>| -> Result<Option<Vec<u8>>, ToolError> {
        match h {
            None => Ok(None),
            Some(h) => blobs
                .get(h)
                .cloned()
                .map(Some)
                .ok_or_else(|| not_revertible(op, format!("its blob {h} is no longer stored"))),
        }
    };
    let mut plan_files = Vec::with_capacity(files.len());
    let mut expected: BTreeMap<String, String> = BTreeMap::new();
    for f in &files {
        let before = blob(&f.before)?;
        let after = blob(&f.after)?;
        let origin = f.from.clone().unwrap_or_else(|| f.path.clone());
        expected.insert(
            f.path.clone(),
            f.after.clone().unwrap_or_else(|| "absent".into()),
        );
        if let Some(from) = &f.from {
            expected.insert(from.clone(), "absent".into());
        }
        plan_files.push(RevertFile {
            now: f.path.clone(),
            now_data: after,
            back: before.map(|d| (origin, d)),
            mode: f.mode.unwrap_or(0o644),
        });
    }
    let replay = match p.operation_key.as_deref() {
        Some(key) => !auth
            .keyed_operations(key, Some(Action::APPLY_PATCH))?
            .is_empty(),
        None => false,
    };
    if !replay {
        let mut changed = Vec::new();
        for (path, want) in &expected {
            let rel = RelPath::parse(path)?;
            let ws = auth.ws();
            let on_disk = ws
                .runner
                .version(codespace_runner_api::VersionRequest {
                    workspace: ws.facts.id.clone(),
                    path: rel.as_str().to_string(),
                    max_hash_bytes: auth.config.limits.max_hash_bytes,
                })
                .await
                .map_err(crate::host_runner::to_tool_error)?;
            if on_disk.as_deref().unwrap_or("absent") != want {
                changed.push(path.clone());
            }
        }
        if !changed.is_empty() {
            return Err(ToolError::new(
                ErrorCode::VersionConflict,
                format!(
                    "changed since operation {op} left them, so it cannot be reverted: {}; nothing was written",
                    changed.join(", ")
                ),
            ));
        }
    }
    let mut patch = reverse_patch(op, &plan_files, true)?;
    if !restores_exactly(&patch, &plan_files) {
        patch = reverse_patch(op, &plan_files, false)?;
        if !restores_exactly(&patch, &plan_files) {
            return Err(not_revertible(
                op,
                "a patch cannot restore its files byte for byte (a last line without a newline, or a deleted file's mode)".into(),
            ));
        }
    }
    Ok(ApplyPatchParams {
        workspace_id: row.workspace.clone(),
        patch,
        expected_versions: expected,
        operation_key: p.operation_key.clone(),
        check_only: None,
    })
}

/// The whole unified diff of `op` as the ledger holds it, for the operator's CLI
/// (`codespace ops diff`): no policy applies there, but withheld files were never stored, so
/// they are named and never shown here either.
pub fn stored_diff(store: &Store, op: &str) -> Result<String, codespace_store::StoreError> {
    let files = store.ledger_files(op)?;
    let mut text = String::new();
    for f in &files {
        if f.process_id.is_some() {
            text.push_str(&format!(
                "changed: {} (while process {} ran; best effort, no content recorded)\n",
                f.path,
                f.process_id.as_deref().unwrap_or("")
            ));
            continue;
        }
        if f.withheld {
            text.push_str(&withheld_line(&f.path, &f.kind));
            continue;
        }
        let get = |h: &Option<String>| -> Result<Option<Vec<u8>>, codespace_store::StoreError> {
            match h {
                Some(h) => store.ledger_blob(h),
                None => Ok(None),
            }
        };
        let (before, after) = (get(&f.before)?, get(&f.after)?);
        text.push_str(&file_diff(
            &f.path,
            f.from.as_deref(),
            before.as_deref(),
            after.as_deref(),
        ));
    }
    Ok(text)
}

/// The ledger's files of `op` as `operation_diff` lists them (nothing withheld by policy: the
/// operator's view).
pub fn stored_files(
    store: &Store,
    op: &str,
) -> Result<Vec<LedgerFileView>, codespace_store::StoreError> {
    Ok(store
        .ledger_files(op)?
        .iter()
        .map(|f| view(f, f.withheld))
        .collect())
}
