//! The operator's hooks around `apply_patch` (issue 31), run by the patch handler under the
//! workspace lease: each hook whose `paths` match a touched file is decided by Cedar (action
//! `hook` with `context.hook = {stage, command}`, plus its command's exec sub-requests, all
//! audited), then started through the workspace's runner (so a worker's workspace runs it in the
//! worker) inside the command sandbox, waited for, and its exit code and the end of its output
//! kept for the result and the operation record.
//!
//! `before_patch` runs on a staged view: the patch's new contents overlaid read-only on the
//! workspace in the hook's own mount namespace (`runner/sandbox/src/stage.rs`), beneath the
//! secret masks; no write scope. A deny, a spawn failure or a non-zero exit refuses the patch
//! with `HOOK_FAILED` before anything is written. `after_patch` runs after the commit with
//! write access to the directories the patch wrote (each decided as `process_write`); what it
//! changes reaches the version table through the watcher like any command's writes and is
//! recorded in the ledger as the operation's best-effort changed files; its failure is reported
//! in the result, the patch stays.

use crate::error::{ErrorCode, ToolError};
use crate::gateway::Authorized;
use crate::request::{HookStage, hook_exec_params, hook_facts, hook_requests, with_hook_context};
use crate::wire::HookRun;
use codespace_runner_api::{self as api, Runner};
use codespace_runner_fs::RelPath;
use codespace_runner_patch::PlannedChange;
use codespace_runner_sandbox::scrub_env;
use std::sync::Arc;

/// The most output a hook run keeps (its end).
const OUTPUT_CAP: usize = 8 * 1024;

/// How long a hook may run before it is killed (and fails).
const HOOK_TIMEOUT_MS: u64 = 120_000;

/// The hooks of `stage` of the call's workspace whose `paths` match one of `touched`.
fn selected(auth: &Authorized<'_>, stage: HookStage, touched: &[String]) -> Vec<Vec<String>> {
    let Some(ws) = auth.ws_config() else {
        return Vec::new();
    };
    let list = match stage {
        HookStage::BeforePatch => &ws.hooks.before_patch,
        HookStage::AfterPatch => &ws.hooks.after_patch,
    };
    list.iter()
        .filter(|h| h.applies_to(touched.iter().map(String::as_str)))
        .map(|h| h.command.clone())
        .collect()
}

/// The staged view of `changes`: every written path with its new content, every deleted (or
/// moved-away) path as a deletion.
fn staged(changes: &[PlannedChange]) -> Vec<api::StagedFile> {
    let file = |path: &str, data: Option<&Vec<u8>>, mode: u32| api::StagedFile {
        path: RelPath::parse(path).map_or_else(|_| path.to_string(), |r| r.as_str().to_string()),
        data: data.cloned(),
        mode,
    };
    let mut out = Vec::new();
    for c in changes {
        match c {
            PlannedChange::Add { path, new } => out.push(file(path, Some(new), 0o644)),
            PlannedChange::Update {
                path, new, mode, ..
            } => out.push(file(path, Some(new), *mode)),
            PlannedChange::Delete { path, .. } => out.push(file(path, None, 0)),
            PlannedChange::Move {
                from,
                to,
                new,
                mode,
                ..
            } => {
                out.push(file(from, None, 0));
                out.push(file(to, Some(new), *mode));
            }
        }
    }
    out
}

/// The directories of the paths `changes` writes (the `after_patch` write scope's candidates).
fn written_dirs(changes: &[PlannedChange]) -> Vec<RelPath> {
    let mut out: Vec<RelPath> = Vec::new();
    for c in changes {
        let path = match c {
            PlannedChange::Add { path, .. } | PlannedChange::Update { path, .. } => path,
            PlannedChange::Move { to, .. } => to,
            PlannedChange::Delete { .. } => continue,
        };
        let dir = match path.rsplit_once('/') {
            Some((d, _)) => RelPath::parse(d),
            None => Ok(RelPath::root()),
        };
        if let Ok(d) = dir
            && !out.contains(&d)
        {
            out.push(d);
        }
    }
    out
}

/// A run that never started (denied, no sandbox, spawn refused).
fn not_run(stage: HookStage, argv: &[String], error: &str, message: String) -> HookRun {
    HookRun {
        stage: stage.as_str().into(),
        command: argv.to_vec(),
        exit_code: None,
        output: message,
        output_truncated: false,
        error: Some(error.into()),
    }
}

/// Whether a run passed (exit code 0).
fn passed(run: &HookRun) -> bool {
    run.exit_code == Some(0) && run.error.is_none()
}

/// Runs the `before_patch` hooks matching `touched` on the staged view of `changes`, in order,
/// appending each run to `runs`; stops at the first that does not pass and returns its
/// `HOOK_FAILED` (nothing has been written).
pub(crate) async fn before_patch(
    auth: &Authorized<'_>,
    changes: &[PlannedChange],
    touched: &[String],
    runs: &mut Vec<HookRun>,
) -> Result<(), ToolError> {
    let hooks = selected(auth, HookStage::BeforePatch, touched);
    if hooks.is_empty() {
        return Ok(());
    }
    let files = staged(changes);
    for argv in hooks {
        let run = run_hook(auth, HookStage::BeforePatch, &argv, Some(&files), &[], None).await;
        let ok = passed(&run);
        let err = (!ok).then(|| failure(&run));
        runs.push(run);
        if let Some(err) = err {
            return Err(err);
        }
    }
    Ok(())
}

/// Runs the `after_patch` hooks matching `touched` once `changes` are committed (operation
/// `op_id`), appending each run to `runs`; a failure is only reported.
pub(crate) async fn after_patch(
    auth: &Authorized<'_>,
    changes: &[PlannedChange],
    touched: &[String],
    op_id: &str,
    runs: &mut Vec<HookRun>,
) {
    let hooks = selected(auth, HookStage::AfterPatch, touched);
    if hooks.is_empty() {
        return;
    }
    let dirs = written_dirs(changes);
    for argv in hooks {
        runs.push(run_hook(auth, HookStage::AfterPatch, &argv, None, &dirs, Some(op_id)).await);
    }
}

/// The `HOOK_FAILED` of a `before_patch` run that did not pass: its command, exit code and
/// the end of its output.
fn failure(run: &HookRun) -> ToolError {
    let line = run.command.join(" ");
    let how = match (&run.error, run.exit_code) {
        (Some(e), _) if e == "denied" => "was denied by policy".to_string(),
        (Some(e), _) if e == "spawn_failed" => "could not start".to_string(),
        (Some(e), _) if e == "timed_out" => {
            format!("did not finish within {} s", HOOK_TIMEOUT_MS / 1000)
        }
        (_, Some(code)) => format!("exited with {code}"),
        (_, None) => "was killed".to_string(),
    };
    let cut = if run.output_truncated {
        format!(" (its last {OUTPUT_CAP} bytes)")
    } else {
        String::new()
    };
    ToolError::new(
        ErrorCode::HookFailed,
        format!(
            "before_patch hook `{line}` {how}; nothing was written. Output{cut}:\n{}",
            run.output
        ),
    )
}

/// Decides and runs one hook; never fails (a failure is the run's `error`).
async fn run_hook(
    auth: &Authorized<'_>,
    stage: HookStage,
    argv: &[String],
    stage_files: Option<&Vec<api::StagedFile>>,
    write_dirs: &[RelPath],
    op_id: Option<&str>,
) -> HookRun {
    let (ws, session) = (auth.ws(), auth.session());
    let reqs = match hook_requests(&ws.facts.id, session, stage, argv) {
        Ok(r) => r,
        Err(e) => return not_run(stage, argv, "spawn_failed", e.message),
    };
    // Fail closed: a deny of the hook or of its command runs nothing.
    let decision = match auth.decide_more(crate::policy::Action::Hook, &reqs) {
        Ok(d) => d,
        Err(e) => return not_run(stage, argv, "denied", e.message),
    };
    // The change sequence is read before the spawn: a hook started warm can write (and exit)
    // before the spawn returns, and a change before `since` would not be its.
    let ledger =
        op_id.map(|op| crate::command_ledger::CommandLedger::start(&ws.versions, &ws.index, op));
    match start(auth, stage, argv, stage_files, write_dirs, &decision).await {
        Ok(id) => {
            let run = finish(&ws.runner, stage, argv, &id).await;
            if let (Some(ledger), Some(store)) = (ledger, auth.store.clone()) {
                ledger.record(store, id).await;
            }
            run
        }
        Err(e) => not_run(stage, argv, "spawn_failed", e.message),
    }
}

/// Starts a hook's command in the sandbox through the workspace's runner; its process id.
async fn start(
    auth: &Authorized<'_>,
    stage: HookStage,
    argv: &[String],
    stage_files: Option<&Vec<api::StagedFile>>,
    write_dirs: &[RelPath],
    decision: &crate::policy::decide::Decision,
) -> Result<String, ToolError> {
    use crate::tools::process::{
        command_paths, kernel_sandboxes, on_host, requires_sandbox, sandbox_check,
    };
    let (ws, session) = (auth.ws(), auth.session());
    if !requires_sandbox(ws) {
        return Err(ToolError::new(
            ErrorCode::ProcessSpawnFailed,
            "hooks run only in the command sandbox, and this workspace has it off",
        ));
    }
    sandbox_check(auth, ws)?;
    let root = auth
        .ws_config()
        .map(|w| w.root.clone())
        .ok_or_else(|| ToolError::new(ErrorCode::WorkspaceNotFound, "workspace is gone"))?;
    let host = on_host(auth, ws);
    if !host {
        let k = ws.runner.probe_sandbox().await.map_err(|e| {
            ToolError::new(
                ErrorCode::ProcessSpawnFailed,
                format!("command sandbox unavailable: cannot probe the environment: {e}"),
            )
        })?;
        if !kernel_sandboxes(&k) || !k.mount_namespaces {
            return Err(ToolError::new(
                ErrorCode::ProcessSpawnFailed,
                "the environment's kernel cannot hold the hook's sandbox",
            ));
        }
    }
    let paths = command_paths(auth)?;
    // One fenced listing serves the masks and the write scope's nested `.git`.
    let listing = crate::index::start::StartListing::new(&ws.index, &ws.versions);
    let masks = auth.secret_masks(&listing).await?;
    // Only after_patch writes: the patched files' directories, as decided.
    let scope = if stage == HookStage::AfterPatch && !write_dirs.is_empty() {
        let mut exec = crate::request::exec_facts(&hook_exec_params(&ws.facts.id, argv), session)?;
        with_hook_context(&mut exec.ctx, &hook_facts(stage, argv).0);
        Some(
            auth.hook_write_scope(decision, &exec, write_dirs, &listing)
                .await?,
        )
    } else {
        None
    };
    let scope_view = scope.clone().unwrap_or_default();
    let home = paths.home.as_ref().filter(|_| host);
    let network = if decision.allows(crate::policy::Action::ProcessNetwork) {
        api::SandboxNetwork::Enabled
    } else {
        api::SandboxNetwork::Restricted
    };
    let parts = crate::processes::SandboxParts {
        root: &root,
        root_writable: scope_view.root_writable,
        writable: &scope_view.writable,
        read_only_mounts: &scope_view.read_only_mounts,
        masks: &masks,
        network,
    };
    let sandbox = crate::processes::sandbox_spec(&parts, &paths, home, stage_files.cloned());
    auth.audit_masks(decision, scope_view.rows, &masks, session);
    let mut base: Vec<(String, String)> = vec![
        ("PATH".into(), crate::processes::CHILD_PATH.into()),
        ("LANG".into(), "C.UTF-8".into()),
    ];
    if let Some(h) = home {
        base.push(("HOME".into(), h.to_string_lossy().into_owned()));
    }
    let mut env = crate::processes::child_env(base, None, &paths.env, &paths.path);
    scrub_env(&mut env);
    let spawned = ws
        .runner
        .spawn(api::SpawnRequest {
            workspace: ws.facts.id.clone(),
            argv: argv.to_vec(),
            cwd: ".".into(),
            env,
            tty: None,
            timeout_ms: Some(HOOK_TIMEOUT_MS),
            separate_stderr: false,
            owner: session.client.clone(),
            sandbox: Some(sandbox),
        })
        .await
        .map_err(crate::host_runner::to_tool_error)?;
    Ok(spawned.process_id)
}

/// Waits for a started hook and reads the end of its output.
async fn finish(runner: &Arc<dyn Runner>, stage: HookStage, argv: &[String], id: &str) -> HookRun {
    let pref = || api::ProcessRef {
        process_id: id.to_string(),
    };
    let status = runner.wait(pref()).await;
    // The output to its end (collection ends soon after the exit), keeping the last bytes.
    let mut kept: Vec<u8> = Vec::new();
    let mut truncated = false;
    let mut cursor = 0u64;
    for _ in 0..64 {
        let Ok(page) = runner
            .read_output(api::OutputRequest {
                process_id: id.to_string(),
                stream: api::OutputStream::Stdout,
                cursor,
                max_bytes: Some(64 * 1024),
                wait_ms: 1000,
                tail: false,
            })
            .await
        else {
            break;
        };
        truncated |= page.output_lost;
        kept.extend_from_slice(&page.data);
        if kept.len() > OUTPUT_CAP {
            kept.drain(..kept.len() - OUTPUT_CAP);
            truncated = true;
        }
        cursor = page.cursor;
        if page.eof || page.data.is_empty() {
            break;
        }
    }
    let output = String::from_utf8_lossy(&kept).into_owned();
    let (exit_code, error) = match status {
        Ok(s) => {
            let error = match s.termination.as_deref() {
                Some("timeout") => Some("timed_out".to_string()),
                _ if s.exit_code.is_none() => s.termination.clone(),
                _ => None,
            };
            (s.exit_code, error)
        }
        Err(e) => (None, Some(format!("lost: {e}"))),
    };
    HookRun {
        stage: stage.as_str().into(),
        command: argv.to_vec(),
        exit_code,
        output,
        output_truncated: truncated,
        error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_staged_view_and_the_written_dirs_follow_the_plan() {
        let changes = vec![
            PlannedChange::Add {
                path: "src/new.rs".into(),
                new: b"a".to_vec(),
            },
            PlannedChange::Delete {
                path: "old.txt".into(),
                old: b"b".to_vec(),
                mode: 0o644,
            },
            PlannedChange::Move {
                from: "x/a".into(),
                to: "y/a".into(),
                old: b"c".to_vec(),
                new: b"d".to_vec(),
                mode: 0o600,
            },
        ];
        let files = staged(&changes);
        let view: Vec<(&str, bool)> = files
            .iter()
            .map(|f| (f.path.as_str(), f.data.is_some()))
            .collect();
        assert_eq!(
            view,
            vec![
                ("src/new.rs", true),
                ("old.txt", false),
                ("x/a", false),
                ("y/a", true)
            ]
        );
        let dirs: Vec<String> = written_dirs(&changes)
            .iter()
            .map(|d| d.as_str().to_string())
            .collect();
        assert_eq!(dirs, vec!["src", "y"]);
    }
}
