//! The process tools, handlers of an [`Authorized`] call: `exec_command` (the gateway has decided
//! the command, its sandbox capabilities `process_write` / `process_network` and its `confirm`
//! hold), and `write_stdin`, `read_process`, `process_status`, `process_resize`,
//! `terminate_process` (the gateway has found the process and decided the call with its facts).
//! Every process starts through the workspace's runner (`Runner::spawn`, the one seam: the host
//! runner's table is the only process table) inside the command sandbox, the shape of which
//! comes from those decisions and travels as data (`SandboxSpec`: masks, write scope, network,
//! private temp dir). A `network: proxy` command needs the gateway's egress proxy beside it:
//! only the host runner can be handed the relay, so another environment refuses it.

use crate::error::{ErrorCode, ToolError};
use crate::gateway::ops::{Begin, Minted, fingerprint};
use crate::gateway::{Authorized, WorkspaceRuntime};
use crate::request::{ProcessFacts, Session};
use crate::wire::{ExecCommandParams, ExecCommandResult, StderrMode};
use codespace_runner_api::{self as api, Runner, RunnerError};
use codespace_runner_fs::{Kind, RelPath};
use codespace_runner_process::InheritedFd;
use codespace_runner_sandbox::scrub_env;
use codespace_store::ProcessRow;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

use crate::processes::*;

mod handle;
mod output;
use handle::{fail_operation, status_of};
pub(crate) use handle::{
    process_resize, process_status, read_process, terminate_process, write_stdin,
};
use output::drain;

/// Whether `ws`'s commands run in the sandbox (every workspace but one whose operator set
/// `"sandbox": "off"`).
pub(crate) fn requires_sandbox(ws: &WorkspaceRuntime) -> bool {
    ws.facts.workspace_sandbox != crate::config::SandboxMode::Off
}

/// A command [`start`] started.
struct Started {
    id: String,
    pid: u32,
    runner: Arc<dyn Runner>,
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
pub(crate) fn command_paths(auth: &Authorized<'_>) -> Result<CommandPaths, ToolError> {
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

/// Whether a command of `ws` may start sandboxed here: `Ok(false)` for a workspace whose
/// operator set `"sandbox": "off"`. A workspace that requires the sandbox on a host without
/// one fails closed here even if an operator policy let the call through.
pub(crate) fn sandbox_check(
    auth: &Authorized<'_>,
    ws: &WorkspaceRuntime,
) -> Result<bool, ToolError> {
    if !requires_sandbox(ws) {
        return Ok(false);
    }
    if ws.facts.sandbox != crate::facts::SandboxFact::Enforced {
        return Err(ToolError::new(
            ErrorCode::ProcessSpawnFailed,
            "command sandbox unavailable on this host, and this workspace requires it \
             (only \"sandbox\": \"off\" in the operator's config runs commands without it)",
        ));
    }
    if auth.processes.helper_exe.is_none() {
        return Err(ToolError::new(
            ErrorCode::ProcessSpawnFailed,
            "command sandbox unavailable: this server has no sandbox helper configured",
        ));
    }
    Ok(true)
}

/// Whether a kernel the runner probed can hold the command sandbox (Landlock and seccomp, as
/// the helper requires).
pub(crate) fn kernel_sandboxes(k: &api::SandboxProbe) -> bool {
    k.landlock_abi.is_some_and(|abi| abi >= 1) && k.seccomp
}

/// Whether `ws` runs on this server's host (its runner is the in-process host runner).
pub(crate) fn on_host(auth: &Authorized<'_>, ws: &WorkspaceRuntime) -> bool {
    let host = Arc::clone(&auth.host) as Arc<dyn Runner>;
    crate::processes::same_runner(&ws.runner, &host)
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
    let cwd = exec_cwd(ws, auth.target()?).await?;
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
    // Without a key the call cannot be a replay: its operation row is stored on the blocking
    // pool while the command's sandbox is prepared, and the command starts once it is.
    let (op_id, mut minted) = match key {
        None => {
            let minting = auth.prepare_operation(None, &fp)?;
            (minting.id().to_string(), Minted::start(minting))
        }
        Some(_) => match auth.begin_operation(key, &fp)? {
            Begin::New(id) => (id, Minted::Stored),
            Begin::Replay(row) => return replay(&row),
        },
    };
    let lease = match lease {
        Some(l) => Some(l),
        None if background => None,
        None => match auth.lease().await {
            Ok(l) => Some(l),
            Err(e) => {
                let e = e.with_operation(op_id.clone());
                if minted.ready().await.is_ok() {
                    fail_operation(auth, &op_id, &e);
                }
                return Err(e);
            }
        },
    };
    // The lease is freed before the exit is observable: every handler that sees the exit
    // (status, end of output, wait, terminate) releases it before it answers, and the exit
    // watcher once the runner reports the exit.
    // The operation ledger (issue 31): the files the watcher sees change while it runs.
    let ledger = crate::command_ledger::CommandLedger::start(&ws.versions, &ws.index, &op_id);
    let started = start(auth, p, &cwd, &op_id, &mut minted).await;
    let Started {
        id,
        pid,
        runner,
        row,
        proxy_control,
        write_paths,
    } = match started {
        Ok(s) => s,
        Err(e) => {
            let e = e.with_operation(op_id.clone());
            // No operation to fail when its row could not be stored (the error says why).
            if minted.ready().await.is_ok() {
                fail_operation(auth, &op_id, &e);
            }
            return Err(e);
        }
    };
    if let Some(lease) = lease {
        lease.into_process_of(&id, &session.client);
    }
    // The exit watcher: the store rows (`running`, then the exit), the lease, `lost` when the
    // runner's worker goes away. The reply leaves once the `running` row is written.
    let (recorded, row_written) = tokio::sync::oneshot::channel();
    tokio::spawn(
        ExitWatch {
            runner: Arc::clone(&runner),
            registry: Arc::clone(&auth.processes.registry),
            leases: Arc::clone(&auth.leases),
            store: auth.store.clone(),
            row,
            proxy_control,
            ledger: Some(ledger),
            recorded: Some(recorded),
        }
        .run(),
    );
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
    // The `started` status is committed while the command runs; the reply leaves after it.
    let finished = auth.finish_operation_beside(
        &op_id,
        crate::facts::OperationStatus::Started,
        to_value(&result)?,
    );
    let written = async move {
        if let Some(f) = finished {
            let _ = f.await;
        }
        let _ = row_written.await;
    };
    tracing::debug!(process_id = %id, pid, "process started");
    let Some(yield_ms) = p.yield_ms else {
        written.await;
        return Ok(result);
    };
    let budget = capped(yield_ms);
    let pref = || api::ProcessRef {
        process_id: id.clone(),
    };
    let exited = matches!(
        tokio::time::timeout(budget, runner.wait(pref())).await,
        Ok(Ok(_)) | Ok(Err(RunnerError::Unavailable { .. }))
    );
    let err_from = separate.then_some(0);
    let read = if exited {
        drain(&runner, &id, 0, err_from, Duration::from_secs(1)).await
    } else {
        drain(&runner, &id, 0, err_from, Duration::ZERO).await
    };
    let info = status_of(auth, &id).await?;
    let mut result = result;
    result.chunk = Some(read.chunk);
    result.cursor = Some(read.cursor);
    result.state = Some(state_str(info.state).to_string());
    result.exit_code = info.exit_code;
    result.termination = info.termination;
    result.eof = Some(read.eof);
    result.stderr_chunk = read.stderr_chunk;
    result.stderr_cursor = read.stderr_cursor;
    written.await;
    Ok(result)
}

/// `WORKSPACE_BUSY` for the live-process limit, naming what holds it: the caller's own live
/// processes (id, program, workspace, background or not) and how many other clients hold.
async fn live_limit_error(auth: &Authorized<'_>, session: &Session) -> ToolError {
    let entries: Vec<(String, Entry)> = auth.processes.entries();
    let mut own = Vec::new();
    let mut others = 0usize;
    for (id, e) in entries {
        let live = e.standing == Standing::Live
            && matches!(
                e.runner.status(api::ProcessRef { process_id: id.clone() }).await,
                Ok(info) if info.state == api::ProcessState::Running
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
/// existing directory reached without any symlink (asked of the environment's runner when its
/// files are a worker's).
async fn exec_cwd(ws: &WorkspaceRuntime, rel: &RelPath) -> Result<RelPath, ToolError> {
    if rel.is_root() {
        return Ok(RelPath::root());
    }
    let rel = rel.clone();
    let kind = if ws.is_remote() {
        ws.runner
            .stat(api::PathRequest {
                workspace: ws.facts.id.clone(),
                path: rel.as_str().to_string(),
            })
            .await
            .map_err(crate::host_runner::to_tool_error)?
            .map(|s| match s.kind {
                api::FileKind::Dir => Kind::Dir,
                api::FileKind::Symlink => Kind::Symlink,
                api::FileKind::File => Kind::File,
                api::FileKind::Other => Kind::Other,
            })
    } else {
        ws.host_root()?
            .stat(&rel)
            .map_err(ToolError::from)?
            .map(|m| m.kind)
    };
    match kind {
        None => Err(ToolError::new(
            ErrorCode::FileNotFound,
            format!("cwd `{}` does not exist", rel.as_str()),
        )),
        Some(Kind::Symlink) => Err(ToolError::new(
            ErrorCode::SymlinkRejected,
            format!("cwd `{}` is a symlink", rel.as_str()),
        )),
        Some(k) if k != Kind::Dir => Err(ToolError::new(
            ErrorCode::PathNotDirectory,
            format!("cwd `{}` is not a directory", rel.as_str()),
        )),
        Some(_) => Ok(rel),
    }
}

/// Spawns under the sandbox through the workspace's runner and registers the process.
/// Nothing is running on error.
async fn start(
    auth: &Authorized<'_>,
    p: &ExecCommandParams,
    cwd: &RelPath,
    op_id: &str,
    minted: &mut Minted,
) -> Result<Started, ToolError> {
    let (ws, session, decision) = (auth.ws(), auth.session(), auth.decision());
    let root = auth
        .ws_config()
        .map(|w| w.root.clone())
        .ok_or_else(|| ToolError::new(ErrorCode::WorkspaceNotFound, "workspace is gone"))?;
    let tty = p.tty.unwrap_or(false);
    let sandboxed = requires_sandbox(ws);
    let on_host = on_host(auth, ws);
    let paths = command_paths(auth)?;
    // One fenced listing serves the write scope's nested `.git` and the masks.
    let listing = crate::index::start::StartListing::new(&ws.index, &ws.versions);
    // Where the command may write: `process_write` decided per candidate directory.
    let scope = if sandboxed {
        let exec = crate::request::exec_facts(p, session)?;
        Some(auth.write_scope(&exec, &listing).await?)
    } else {
        None
    };
    // Paths policy withholds from `read` are masked from the command too (fail closed).
    let masks = if sandboxed {
        auth.secret_masks(&listing).await?
    } else {
        Vec::new()
    };
    // The network: the whole network when policy grants `process_network`; else, on a
    // `network: proxy` workspace, only the egress proxy (one decision per connection);
    // else none.
    let network = if decision.allows(crate::policy::Action::ProcessNetwork) {
        api::SandboxNetwork::Enabled
    } else if sandboxed && ws.facts.network == crate::config::Network::Proxy {
        api::SandboxNetwork::Proxy
    } else {
        api::SandboxNetwork::Restricted
    };
    // The egress proxy runs in this server; the relay's control socket reaches only a
    // command on this host. Elsewhere `network: proxy` fails closed (never the open network).
    if network == api::SandboxNetwork::Proxy && !on_host {
        return Err(ToolError::new(
            ErrorCode::ProcessSpawnFailed,
            format!(
                "network: proxy is not available in environment `{}`: the egress proxy runs \
                 on the gateway's host and cannot reach a command in another environment \
                 (use network: none, or a policy granting process_network)",
                ws.facts.environment
            ),
        ));
    }
    let proxy = match network {
        api::SandboxNetwork::Proxy => {
            let mut setup = proxy_for(auth, ws, session)?;
            setup.argv.clone_from(&p.command);
            Some(setup)
        }
        _ => None,
    };
    let scope_view = scope.clone().unwrap_or_default();
    // HOME: the workspace's home dir (on this host only: another environment's home is its
    // own business); without one, the private temp dir, else (unsandboxed) the root.
    let home = paths.home.as_ref().filter(|_| on_host);
    let sandbox = sandboxed.then(|| {
        let parts = SandboxParts {
            root: &root,
            root_writable: scope_view.root_writable,
            writable: &scope_view.writable,
            read_only_mounts: &scope_view.read_only_mounts,
            masks: &masks,
            network,
        };
        sandbox_spec(&parts, &paths, home, None)
    });
    // The sandbox's decisions (write scope, masks) are queued for the log before the command
    // starts; the decision that allowed it is already written ahead.
    auth.audit_masks(decision, scope_view.rows, &masks, session);
    sandbox_check(auth, ws)?;
    // Another environment's kernel is asked, never assumed from this host's.
    if sandboxed && !on_host {
        let k = ws.runner.probe_sandbox().await.map_err(|e| {
            ToolError::new(
                ErrorCode::ProcessSpawnFailed,
                format!("command sandbox unavailable: cannot probe the environment: {e}"),
            )
        })?;
        if !kernel_sandboxes(&k) {
            return Err(ToolError::new(
                ErrorCode::ProcessSpawnFailed,
                format!(
                    "command sandbox unavailable in environment `{}`: its kernel offers no \
                     Landlock and seccomp, and this workspace requires the sandbox",
                    ws.facts.environment
                ),
            ));
        }
        if !masks.is_empty() && !k.mount_namespaces {
            return Err(ToolError::new(
                ErrorCode::ProcessSpawnFailed,
                format!(
                    "secret masks unavailable in environment `{}`: its kernel offers no mount \
                     namespaces",
                    ws.facts.environment
                ),
            ));
        }
    }
    let mut base: Vec<(String, String)> = vec![
        ("PATH".into(), CHILD_PATH.into()),
        ("LANG".into(), "C.UTF-8".into()),
    ];
    match (home, sandboxed) {
        (Some(h), _) => base.push(("HOME".into(), h.to_string_lossy().into_owned())),
        // The runner points HOME at the private temp dir it makes.
        (None, true) => {}
        (None, false) => base.push(("HOME".into(), root.to_string_lossy().into_owned())),
    }
    if tty {
        base.push(("TERM".into(), "xterm".into()));
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
    let mut sandbox = sandbox;
    // The relay's end goes to the host runner in-process; the spec names it.
    let relay = proxy
        .as_ref()
        .map(|setup| auth.host.stash_relay(setup.relay_end.clone()));
    if let Some(s) = sandbox.as_mut() {
        s.proxy_relay.clone_from(&relay);
    }
    let separate = p.stderr == Some(StderrMode::Separate);
    let req = api::SpawnRequest {
        workspace: ws.facts.id.clone(),
        argv: p.command.clone(),
        cwd: if cwd.is_root() {
            ".".to_string()
        } else {
            cwd.as_str().to_string()
        },
        env,
        tty: tty.then_some(api::TermSize { rows: 24, cols: 80 }),
        timeout_ms: p.timeout_ms,
        separate_stderr: separate,
        owner: session.client.clone(),
        sandbox,
    };
    let runner = Arc::clone(&ws.runner);
    let env_names = crate::request::exec_env_names(p.env.as_ref())?;
    // The command is registered with its proxy before the first connection is decided
    // (connections queue on the control socket until then); the runner answers only once the
    // helper exec'd the target or refused.
    // Nothing runs before the operation is stored.
    if let Err(e) = minted.ready().await {
        if let Some(name) = &relay {
            auth.host.drop_relay(name);
        }
        return Err(e);
    }
    let spawned = runner.spawn(req).await;
    if let Some(name) = &relay {
        auth.host.drop_relay(name);
    }
    let spawned = match spawned {
        Ok(s) => s,
        Err(RunnerError::Busy { .. }) => return Err(live_limit_error(auth, session).await),
        Err(e) => return Err(remedy.apply(crate::host_runner::to_tool_error(e))),
    };
    let entry = Entry::live(
        ws.facts.id.clone(),
        ws.facts.environment.clone(),
        session.client.clone(),
        p.command.clone(),
        tty,
        env_names.clone(),
        p.background.unwrap_or(false),
        separate,
        proxy.as_ref().map(|s| Arc::clone(&s.proxy)),
        Arc::clone(&runner),
    );
    if !auth.processes.registry.insert(&spawned.process_id, entry) {
        let _ = runner
            .terminate(api::ProcessRef {
                process_id: spawned.process_id.clone(),
            })
            .await;
        return Err(ToolError::new(
            ErrorCode::ProcessSpawnFailed,
            "the environment's runner answered with a process id already in use",
        ));
    }
    let proxy = proxy.map(|setup| {
        let _ = setup.decider.process.set(ProcessFacts {
            id: spawned.process_id.clone(),
            same_client: true,
            argv: setup.argv.clone(),
            tty,
            env_names,
            background: p.background.unwrap_or(false),
        });
        tokio::spawn(Arc::clone(&setup.proxy).serve_control(setup.server_end))
    });
    let program = p
        .command
        .first()
        .map(|a| a.rsplit('/').next().unwrap_or(a).to_string())
        .unwrap_or_default();
    let row = ProcessRow {
        process_id: spawned.process_id.clone(),
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
        id: spawned.process_id,
        pid: spawned.pid,
        runner,
        row,
        proxy_control: proxy.map(|control| control.abort_handle()),
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
