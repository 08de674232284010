//! The process tools, handlers of an [`Authorized`] call: `exec_command` (the gateway has decided
//! the command, its sandbox capabilities `process_write` / `process_network` and its `confirm`
//! hold), and `write_stdin`, `read_process`, `process_status`, `process_resize`,
//! `terminate_process` (the gateway has found the process and decided the call with its facts).
//! Every process starts through the runner's process table inside the command sandbox (the
//! `codespace __sandbox-exec` helper), the shape of which comes from those decisions.

use crate::error::{ErrorCode, ToolError};
use crate::gateway::ops::{Begin, fingerprint};
use crate::gateway::{Authorized, WorkspaceRuntime};
use crate::request::{ProcessFacts, Session};
use crate::wire::{ExecCommandParams, ExecCommandResult, ReadProcessResult, StderrMode};
use codespace_runner_fs::{Kind, RelPath};
use codespace_runner_process::{
    ExitHook, InheritedFd, Launcher, ProcState, ReadWindow, SpawnError, SpawnOptions, SpawnSpec,
};
use codespace_runner_sandbox::{
    Handshake, HelperOutcome, NetworkMode, SandboxCommand, SandboxPlan, scrub_env,
};
use codespace_store::ProcessRow;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

use crate::processes::*;

mod handle;
use handle::{fail_operation, release_if_exited};
pub(crate) use handle::{
    process_resize, process_status, read_process, terminate_process, write_stdin,
};

/// Whether `ws`'s commands run in the sandbox (every workspace but one whose operator set
/// `"sandbox": "off"`).
fn requires_sandbox(ws: &WorkspaceRuntime) -> bool {
    ws.facts.workspace_sandbox != crate::config::SandboxMode::Off
}

/// A command [`start`] started.
struct Started {
    id: String,
    pid: u32,
    row: ProcessRow,
    /// The proxy's control task of a `network: proxy` command.
    proxy_control: Option<tokio::task::AbortHandle>,
    /// Its write scope (sandboxed commands).
    write_paths: Option<crate::wire::WritePaths>,
}

/// A fresh egress proxy and control socket pair for a command of `ws` started by `session`.
fn proxy_for(
    auth: &Authorized<'_>,
    ws: &WorkspaceRuntime,
    session: &Session,
) -> Result<ProxySetup, ToolError> {
    let (relay_end, server_end) = codespace_runner_netproxy::control_pair().map_err(|e| {
        ToolError::new(
            ErrorCode::ProcessSpawnFailed,
            format!(
                "cannot create the egress proxy's control socket: {}",
                e.kind()
            ),
        )
    })?;
    let decider = auth.net.process_decider(&ws.facts, session);
    let proxy = codespace_runner_netproxy::ProcessProxy::new(
        Arc::clone(&decider) as Arc<dyn codespace_runner_netproxy::Decider>,
        auth.net.limits,
    );
    Ok(ProxySetup {
        proxy,
        decider,
        relay_end: InheritedFd(Arc::new(relay_end)),
        server_end,
        argv: Vec::new(),
    })
}

/// The read paths and home directory of `workspace`'s commands; creates the home.
fn command_paths(auth: &Authorized<'_>) -> Result<CommandPaths, ToolError> {
    let ws = auth
        .ws_config()
        .ok_or_else(|| ToolError::new(ErrorCode::WorkspaceNotFound, "workspace is gone"))?;
    let home = crate::isolation::home_dir(&auth.config, ws);
    if let Some(h) = &home {
        crate::isolation::ensure_home(h).map_err(|e| {
            ToolError::new(
                ErrorCode::ProcessSpawnFailed,
                format!("cannot create the workspace's home dir: {}", e.kind()),
            )
        })?;
    }
    Ok(CommandPaths {
        read_paths: ws.read_paths.values().cloned().collect(),
        home,
        path: ws.path.clone(),
        env: ws.env.clone(),
    })
}

/// The launcher of a command of `ws` under `plan` and the server's end of its exec
/// handshake, or none for a workspace whose operator set `"sandbox": "off"`. A workspace
/// that requires the sandbox on a host without one fails closed here even if an operator
/// policy let the call through.
fn sandbox_launcher(
    auth: &Authorized<'_>,
    ws: &WorkspaceRuntime,
    plan: SandboxPlan,
    proxy_control: Option<&InheritedFd>,
) -> Result<Option<(Launcher, Handshake)>, ToolError> {
    if !requires_sandbox(ws) {
        return Ok(None);
    }
    if ws.facts.sandbox != crate::facts::SandboxFact::Enforced {
        return Err(ToolError::new(
            ErrorCode::ProcessSpawnFailed,
            "command sandbox unavailable on this host, and this workspace requires it \
             (only \"sandbox\": \"off\" in the operator's config runs commands without it)",
        ));
    }
    let Some(helper) = &auth.processes.helper_exe else {
        return Err(ToolError::new(
            ErrorCode::ProcessSpawnFailed,
            "command sandbox unavailable: this server has no sandbox helper configured",
        ));
    };
    let launch = SandboxCommand {
        helper: helper.clone(),
        plan,
        proxy_control: proxy_control.map(|fd| Arc::clone(&fd.0)),
    }
    .launch()
    .map_err(|e| {
        ToolError::new(
            ErrorCode::ProcessSpawnFailed,
            format!("command sandbox unavailable: {e}"),
        )
    })?;
    let launcher = Launcher {
        program: launch.program,
        args: launch.args,
        env: launch.env,
        inherit_fds: launch.inherit_fds.into_iter().map(InheritedFd).collect(),
    };
    Ok(Some((launcher, launch.handshake)))
}

/// After a sandboxed spawn: waits (no polling) until the helper has exec'd the target or
/// refused, or the process has exited. A refusal becomes the error message, and whatever is
/// left of the process is terminated.
async fn helper_outcome(
    auth: &Authorized<'_>,
    id: &str,
    handshake: Handshake,
) -> Result<(), String> {
    let table = &auth.processes.table;
    let exited = async {
        let _ = table.wait_exit(id).await;
    };
    match handshake.outcome(exited).await {
        HelperOutcome::Executed => Ok(()),
        HelperOutcome::Refused(why) => {
            let _ = table.terminate(id).await;
            Err(why)
        }
    }
}

/// Reads from `cursor` (and stderr from `stderr_cursor`, when kept apart) until output
/// collection ends or `budget` elapses (after an exit).
async fn drain(
    auth: &Authorized<'_>,
    id: &str,
    cursor: u64,
    stderr_cursor: Option<u64>,
    budget: Duration,
) -> ReadProcessResult {
    let deadline = tokio::time::Instant::now() + budget;
    let mut data: Vec<u8> = Vec::new();
    let mut err_data: Vec<u8> = Vec::new();
    let mut next = cursor;
    let mut err_next = stderr_cursor;
    let mut out = ReadProcessResult {
        process_id: id.to_string(),
        cursor,
        chunk: String::new(),
        eof: false,
        output_lost: false,
        retained_from: 0,
        stderr_chunk: None,
        stderr_cursor: None,
    };
    let window = |cursor| ReadWindow {
        cursor,
        ..ReadWindow::default()
    };
    loop {
        let wait = deadline.saturating_duration_since(tokio::time::Instant::now());
        let Ok((c, e)) = auth
            .processes
            .table
            .read_windows(id, window(next), err_next.map(window), Some(wait))
            .await
        else {
            break;
        };
        data.extend_from_slice(&c.data);
        next = c.cursor;
        out.output_lost = c.output_lost;
        out.retained_from = c.retained_from;
        let mut got = !c.data.is_empty();
        let mut eof = c.eof;
        if let Some(e) = &e {
            err_data.extend_from_slice(&e.data);
            err_next = Some(e.cursor);
            got |= !e.data.is_empty();
            eof &= e.eof;
        }
        out.eof = eof;
        if eof || wait.is_zero() || !got {
            break;
        }
    }
    out.cursor = next;
    out.chunk = String::from_utf8_lossy(&data).into_owned();
    if let Some(n) = err_next.filter(|_| stderr_cursor.is_some()) {
        out.stderr_cursor = Some(n);
        out.stderr_chunk = Some(String::from_utf8_lossy(&err_data).into_owned());
    }
    out
}

/// Serves `exec_command`; `resumed` is the granted hold `operation_resume` runs it under
/// (then it is not held again).
pub(crate) async fn exec_command(
    auth: &Authorized<'_>,
    p: &ExecCommandParams,
) -> Result<ExecCommandResult, ToolError> {
    let (ws, session) = (auth.ws(), auth.session());
    if p.timeout_ms == Some(0) {
        return Err(ToolError::new(
            ErrorCode::InvalidArguments,
            "timeout_ms must be at least 1",
        ));
    }
    let cwd = exec_cwd(ws, auth.target()?)?;
    let tty = p.tty.unwrap_or(false);
    let separate = p.stderr == Some(StderrMode::Separate);
    if tty && separate {
        return Err(ToolError::new(
            ErrorCode::InvalidArguments,
            "stderr: \"separate\" needs pipes: a terminal (tty: true) has one stream",
        ));
    }
    // A background process (a service) takes no lease at all: patches and other commands
    // run beside it.
    let background = p.background.unwrap_or(false);
    let mut fp_args = json!({
        "workspace_id": p.workspace_id,
        "command": p.command,
        "tty": tty,
        "timeout_ms": p.timeout_ms,
    });
    if let Value::Object(m) = &mut fp_args {
        if let Some(env) = &p.env {
            m.insert("env".into(), json!(env));
        }
        if !cwd.is_root() {
            m.insert("cwd".into(), json!(cwd.as_str()));
        }
        if background {
            m.insert("background".into(), json!(true));
        }
        if separate {
            m.insert("stderr".into(), json!("separate"));
        }
    }
    let fp = fingerprint(&fp_args);
    let key = p.operation_key.as_deref().filter(|k| !k.is_empty());
    // A retry of a keyed exec replays without taking the lease (its own process may hold it).
    let known_key = match key {
        Some(k) => auth
            .keyed_operations(k, Some(auth.action()))?
            .iter()
            .any(|r| r.workspace == ws.facts.id),
        None => false,
    };
    let lease = if known_key || background {
        None
    } else {
        Some(auth.lease().await?)
    };
    let op_id = match auth.begin_operation(key, &fp)? {
        Begin::New(id) => id,
        Begin::Replay(row) => return replay(&row),
    };
    let lease = match lease {
        Some(l) => Some(l),
        None if background => None,
        None => match auth.lease().await {
            Ok(l) => Some(l),
            Err(e) => {
                let e = e.with_operation(op_id.clone());
                fail_operation(auth, &op_id, &e);
                return Err(e);
            }
        },
    };
    // Frees the lease before the exit is observable (status, eof, wait): a next exec right
    // after a caller saw the exit never finds the workspace busy.
    let on_exit: Option<ExitHook> = lease.as_ref().map(|lease| {
        let leases = Arc::clone(&auth.leases);
        let workspace = ws.facts.id.clone();
        let ticket = lease.ticket();
        Box::new(move |id: &str| leases.release_exited(&workspace, id, ticket)) as ExitHook
    });
    // The operation ledger (issue 31): the files the watcher sees change while it runs.
    let ledger = crate::command_ledger::CommandLedger::start(&ws.versions, &ws.index, &op_id);
    let started = start(auth, p, &cwd, &op_id, on_exit).await;
    let Started {
        id,
        pid,
        row,
        proxy_control,
        write_paths,
    } = match started {
        Ok(s) => s,
        Err(e) => {
            let e = e.with_operation(op_id.clone());
            fail_operation(auth, &op_id, &e);
            return Err(e);
        }
    };
    if let Some(lease) = lease {
        lease.into_process_of(&id, &session.client);
    }
    let result = ExecCommandResult {
        process_id: id.clone(),
        dispatch_status: "confirmed".into(),
        operation_id: Some(op_id.clone()),
        replayed: false,
        chunk: None,
        cursor: None,
        state: None,
        exit_code: None,
        termination: None,
        eof: None,
        stderr_chunk: None,
        stderr_cursor: None,
        write_paths,
    };
    auth.finish_operation(
        &op_id,
        crate::facts::OperationStatus::Started,
        &to_value(&result)?,
        None,
    );
    if let Some(s) = &auth.store
        && let Err(e) = s.upsert_process(&row)
    {
        tracing::error!(process_id = %id, error = %e, "cannot record process");
    }
    let tmp_dir = auth.processes.entry(&id).ok().and_then(|e| e.tmp_dir);
    tokio::spawn(
        ExitWatch {
            table: auth.processes.table.clone(),
            leases: Arc::clone(&auth.leases),
            store: auth.store.clone(),
            row,
            tmp_dir,
            proxy_control,
            ledger: Some(ledger),
        }
        .run(),
    );
    tracing::debug!(process_id = %id, pid, "process started");
    let Some(yield_ms) = p.yield_ms else {
        return Ok(result);
    };
    let budget = capped(yield_ms);
    let table = &auth.processes.table;
    let exited = tokio::time::timeout(budget, table.wait_exit(&id))
        .await
        .is_ok();
    let err_from = separate.then_some(0);
    let read = if exited {
        drain(auth, &id, 0, err_from, Duration::from_secs(1)).await
    } else {
        drain(auth, &id, 0, err_from, Duration::ZERO).await
    };
    let info = table.status(&id).await.map_err(|e| proc_error(&e))?;
    release_if_exited(auth, &ws.facts.id, &id, &info);
    let mut result = result;
    result.chunk = Some(read.chunk);
    result.cursor = Some(read.cursor);
    result.state = Some(info.state.as_str().to_string());
    result.exit_code = info.exit_code;
    result.termination = info.termination.map(|t| t.as_str().to_string());
    result.eof = Some(read.eof);
    result.stderr_chunk = read.stderr_chunk;
    result.stderr_cursor = read.stderr_cursor;
    Ok(result)
}

/// `WORKSPACE_BUSY` for the live-process limit, naming what holds it: the caller's own live
/// processes (id, program, workspace, background or not) and how many other clients hold.
async fn live_limit_error(auth: &Authorized<'_>, session: &Session) -> ToolError {
    let entries: Vec<(String, Entry)> = auth.processes.entries();
    let mut own = Vec::new();
    let mut others = 0usize;
    for (id, e) in entries {
        let live = matches!(
            auth.processes.table.status(&id).await,
            Ok(info) if info.state == ProcState::Running
        );
        if !live {
            continue;
        }
        if e.client == session.client {
            let program = e
                .argv
                .first()
                .map(|a| a.rsplit('/').next().unwrap_or(a).to_string())
                .unwrap_or_default();
            let kind = if e.background { ", background" } else { "" };
            own.push(format!("{id} (`{program}` in `{}`{kind})", e.workspace));
        } else {
            others += 1;
        }
    }
    own.sort();
    let max = auth.config.limits.max_live_processes;
    let mut holders = own.join(", ");
    if others > 0 {
        if !holders.is_empty() {
            holders.push_str("; ");
        }
        holders.push_str(&format!("{others} of other clients"));
    }
    if holders.is_empty() {
        holders = "processes that are exiting".into();
    }
    ToolError::new(
        ErrorCode::WorkspaceBusy,
        format!(
            "the server already runs its maximum number of live processes ({max}, \
             limits.max_live_processes), held by: {holders}; wait for one to exit or \
             terminate one"
        ),
    )
}

/// The working directory of an exec, as the request builder parsed it: workspace-relative, an
/// existing directory reached without any symlink.
fn exec_cwd(ws: &WorkspaceRuntime, rel: &RelPath) -> Result<RelPath, ToolError> {
    if rel.is_root() {
        return Ok(RelPath::root());
    }
    let rel = rel.clone();
    match ws.root.stat(&rel).map_err(ToolError::from)? {
        None => Err(ToolError::new(
            ErrorCode::FileNotFound,
            format!("cwd `{}` does not exist", rel.as_str()),
        )),
        Some(m) if m.kind == Kind::Symlink => Err(ToolError::new(
            ErrorCode::SymlinkRejected,
            format!("cwd `{}` is a symlink", rel.as_str()),
        )),
        Some(m) if m.kind != Kind::Dir => Err(ToolError::new(
            ErrorCode::PathNotDirectory,
            format!("cwd `{}` is not a directory", rel.as_str()),
        )),
        Some(_) => Ok(rel),
    }
}

/// Spawns under the sandbox and registers the process. Nothing is running on error.
async fn start(
    auth: &Authorized<'_>,
    p: &ExecCommandParams,
    cwd: &RelPath,
    op_id: &str,
    on_exit: Option<ExitHook>,
) -> Result<Started, ToolError> {
    let (ws, session, decision) = (auth.ws(), auth.session(), auth.decision());
    let root = auth
        .ws_config()
        .map(|w| w.root.clone())
        .ok_or_else(|| ToolError::new(ErrorCode::WorkspaceNotFound, "workspace is gone"))?;
    let tty = p.tty.unwrap_or(false);
    let sandboxed = requires_sandbox(ws);
    let paths = command_paths(auth)?;
    // Where the command may write: `process_write` decided per candidate directory.
    let scope = if sandboxed {
        let exec = crate::request::exec_facts(p, session)?;
        Some(auth.write_scope(&exec).await?)
    } else {
        None
    };
    // Paths policy withholds from `read` are masked from the command too (fail closed).
    let masks = if sandboxed {
        auth.secret_masks().await?
    } else {
        Vec::new()
    };
    let tmp_dir = if sandboxed {
        Some(make_tmp_dir()?)
    } else {
        None
    };
    // The network: the whole network when policy grants `process_network`; else, on a
    // `network: proxy` workspace, only the egress proxy (one decision per connection);
    // else none.
    let network = if decision.allows(crate::policy::Action::ProcessNetwork) {
        NetworkMode::Enabled
    } else if sandboxed && ws.facts.network == crate::config::Network::Proxy {
        NetworkMode::Proxy
    } else {
        NetworkMode::Restricted
    };
    let proxy = match network {
        NetworkMode::Proxy => {
            let mut setup = proxy_for(auth, ws, session)?;
            setup.argv.clone_from(&p.command);
            Some(setup)
        }
        _ => None,
    };
    let scope_view = scope.clone().unwrap_or_default();
    let plan = SandboxPlan {
        workspace_root: root.clone(),
        write_workspace: scope_view.root_writable,
        write_paths: scope_view
            .writable
            .iter()
            .map(|p| root.join(p.as_str()))
            .collect(),
        read_only: scope_view
            .read_only_mounts
            .iter()
            .map(|p| root.join(p.as_str()))
            .collect(),
        network,
        tmp_dir: tmp_dir.as_ref().map(|t| t.path().to_path_buf()),
        extra_read: paths.read_paths.clone(),
        home_dir: paths.home.clone(),
        force_landlock_unavailable: auth.processes.force_no_landlock,
        masks: masks
            .iter()
            .filter(|m| m.path != crate::masks::NON_UTF8_TOP_LEVEL)
            .map(|m| root.join(&m.path))
            .collect(),
        mask_non_utf8_top_level: masks
            .iter()
            .any(|m| m.path == crate::masks::NON_UTF8_TOP_LEVEL),
        proxy_control_fd: None,
        mount_ns_fd: None,
    };
    // The sandbox's decisions (write scope, masks) are queued for the log before the command
    // starts; the decision that allowed it is already written ahead.
    auth.audit_masks(decision, scope_view.rows, &masks, session);
    // On any error from here on, `tmp_dir` is dropped and so removed.
    let (launcher, handshake) =
        match sandbox_launcher(auth, ws, plan, proxy.as_ref().map(|p| &p.relay_end))? {
            Some((launcher, handshake)) => (Some(launcher), Some(handshake)),
            None => (None, None),
        };
    // HOME: the workspace's home dir; without one (no store location known), the private
    // temp dir, else (unsandboxed) the workspace root.
    let home = paths
        .home
        .as_deref()
        .or(tmp_dir.as_ref().map(TmpDir::path))
        .unwrap_or(&root);
    let mut base: Vec<(String, String)> = vec![
        ("PATH".into(), CHILD_PATH.into()),
        ("HOME".into(), home.to_string_lossy().into_owned()),
        ("LANG".into(), "C.UTF-8".into()),
    ];
    if tty {
        base.push(("TERM".into(), "xterm".into()));
    }
    if let Some(t) = &tmp_dir {
        base.push(("TMPDIR".into(), t.path().to_string_lossy().into_owned()));
    }
    let mut env = child_env(base, p.env.as_ref(), &paths.env, &paths.path);
    if proxy.is_some() {
        let url = format!("http://{}", crate::gateway::net::proxy_address());
        for name in PROXY_ENV_NAMES {
            env.push(((*name).into(), url.clone()));
        }
    }
    scrub_env(&mut env);
    // For the remedy of a program the command cannot find or run.
    let remedy = ExecRemedy::new(&env, &paths.path);
    let spec = SpawnSpec {
        argv: p.command.clone(),
        cwd: if cwd.is_root() {
            root.clone()
        } else {
            root.join(cwd.as_str())
        },
        env,
        tty,
        timeout: p.timeout_ms.map(Duration::from_millis),
        launcher,
        owner: session.client.clone(),
    };
    let separate = p.stderr == Some(StderrMode::Separate);
    let options = SpawnOptions {
        on_exit,
        separate_stderr: separate,
    };
    let tmp_path = tmp_dir.as_ref().map(|t| t.path().to_path_buf());
    // Registered with the process: dropped (the temp dir removed) if the spawn fails.
    let owner = Owner {
        workspace: ws.facts.id.clone(),
        env_names: crate::request::exec_env_names(p.env.as_ref())?,
        background: p.background.unwrap_or(false),
        proxy: proxy.as_ref().map(|s| Arc::clone(&s.proxy)),
        tmp: tmp_dir,
    };
    // The spec (and with it the server's copy of the handshake's write end) is consumed
    // here: from now on only the helper holds that end.
    let spawned = match auth.processes.table.spawn_owned(spec, options, owner).await {
        Ok(s) => s,
        Err(e) => {
            if e == SpawnError::LimitReached {
                return Err(live_limit_error(auth, session).await);
            }
            return Err(remedy.apply(spawn_error(&e)));
        }
    };
    // The command is registered with its proxy before the first connection is decided
    // (connections queue on the control socket until then).
    let proxy = proxy.map(|setup| {
        let _ = setup.decider.process.set(ProcessFacts {
            id: spawned.id.clone(),
            same_client: true,
            argv: setup.argv.clone(),
            tty,
            env_names: crate::request::exec_env_names(p.env.as_ref()).unwrap_or_default(),
            background: p.background.unwrap_or(false),
        });
        let control = tokio::spawn(Arc::clone(&setup.proxy).serve_control(setup.server_end));
        (setup.proxy, control)
    });
    if let Some(handshake) = handshake
        && let Err(why) = helper_outcome(auth, &spawned.id, handshake).await
    {
        if let Some((_, control)) = &proxy {
            control.abort();
        }
        remove_tmp(tmp_path.as_deref());
        return Err(remedy.apply(ToolError::new(
            ErrorCode::ProcessSpawnFailed,
            format!("command sandbox refused to start the command: {why}"),
        )));
    }
    let program = p
        .command
        .first()
        .map(|a| a.rsplit('/').next().unwrap_or(a).to_string())
        .unwrap_or_default();
    let row = ProcessRow {
        process_id: spawned.id.clone(),
        workspace: ws.facts.id.clone(),
        operation_id: op_id.to_string(),
        argv_sha256: argv_sha256(&p.command),
        program,
        tty,
        pid: Some(i64::from(spawned.pid)),
        state: "running".into(),
        exit_code: None,
        termination: None,
        started_ms: codespace_store::now_ms(),
        ended_ms: None,
    };
    Ok(Started {
        id: spawned.id,
        pid: spawned.pid,
        row,
        proxy_control: proxy.map(|(_, control)| control.abort_handle()),
        write_paths: scope.map(|s| s.paths),
    })
}

/// The replayed result of a stored exec: the stored result, the stored error, or
/// `dispatch_status: unknown` when the call never finished (do not start a duplicate).
fn replay(row: &codespace_store::OperationRow) -> Result<ExecCommandResult, ToolError> {
    use serde::Deserialize as _;
    if let Some(err) = crate::gateway::ops::replayed_error(row) {
        return Err(err);
    }
    let finished = row.finished_ms.is_some();
    let mut out = match (&row.result, finished) {
        (Some(r), true) if r.is_object() && r.get("process_id").is_some() => {
            ExecCommandResult::deserialize(r)
                .map_err(|e| internal(format!("stored result: {e}")))?
        }
        _ => ExecCommandResult {
            process_id: String::new(),
            dispatch_status: "unknown".into(),
            operation_id: None,
            replayed: true,
            chunk: None,
            cursor: None,
            state: None,
            exit_code: None,
            termination: None,
            eof: None,
            stderr_chunk: None,
            stderr_cursor: None,
            write_paths: None,
        },
    };
    out.replayed = true;
    out.operation_id = Some(row.operation_id.clone());
    Ok(out)
}
