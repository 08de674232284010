//! The gateway's side of an environment served by a worker: [`EnvironmentWorker`] owns a
//! [`Supervisor`] of the worker protocol (`codespace-runner-worker`) carrying the runner's
//! [`Call`]/[`Reply`]/[`Event`], and [`WorkerWire`] is the [`Wire`] a [`RemoteRunner`] sends
//! through. Connecting spawns the kind's argv (`environments::stdio_argv`: ssh, container exec,
//! kubectl exec, the operator's command), connects to a `worker {socket}` (peer uid checked
//! before the secret is sent), or starts `codespace worker --socket` as a `worker {user}`;
//! then it registers every workspace of the environment (`open_workspace`, the root being the
//! worker's path) before the connection serves a call. Every transport failure is
//! [`RunnerError::Unavailable`]: nothing ever falls back to the host.
//!
//! [`RemoteRunner`]: codespace_runner_api::RemoteRunner

use crate::config::{EnvironmentSpec, WorkerSpec};
use crate::environments::ArgvContext;
use codespace_runner_api::{
    BoxFuture, Call, Event, EventSink, OpenWorkspace, Reply, RunnerError, Wire,
};
use codespace_runner_worker::client::{Client, EventReceiver};
use codespace_runner_worker::spawn::SpawnSpec;
use codespace_runner_worker::supervisor::{ConnectFn, DisconnectFn};
use codespace_runner_worker::{Identity, Secret, Supervisor, WorkerError, WorkerState};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

type Conn = (Client<Call, Reply, Event>, EventReceiver<Event>);

/// How long a worker the server starts as another user has to say `listening`.
const LISTEN_TIMEOUT: Duration = Duration::from_secs(10);

/// What a connection attempt needs: the environment, its workspaces and the argv context.
pub(crate) struct ConnectPlan {
    /// The environment id.
    pub(crate) env_id: String,
    /// Its typed config.
    pub(crate) spec: EnvironmentSpec,
    /// `(workspace id, root on the worker's side)` of every workspace of the environment.
    pub(crate) workspaces: Vec<(String, String)>,
    /// The ssh control path and the container name.
    pub(crate) argv: ArgvContext,
    /// The private directory of the ssh control socket (removed with the plan).
    pub(crate) _private: Option<tempfile::TempDir>,
    /// For an `image` / `rootfs` container: the server started (or restarted) it.
    pub(crate) started: AtomicBool,
}

/// Runs `argv` to completion (its stdin closed): its stdout on exit 0, else its stderr's tail.
async fn run_argv(argv: &[String]) -> Result<String, String> {
    let Some((program, args)) = argv.split_first() else {
        return Err("an empty argv".into());
    };
    let out = tokio::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: String = err
            .trim()
            .chars()
            .rev()
            .take(2000)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        Err(format!(
            "`{}` failed ({}): {tail}",
            argv.join(" "),
            out.status
        ))
    }
}

/// For a container the server starts (`image` / `rootfs`): makes sure it runs before the worker
/// is exec'ed into it. A running one is used as it is (its worker died, not the container). A
/// kept one that stopped is started again. One of the server's own (`--rm`) that stopped —
/// killed, or its `sleep` gone — is removed (its engine may still be removing it: a `start`
/// then races that removal) and run again; so is any that does not exist (never started, or
/// removed after it died): run with the server's own binary mounted at `/codespace` and every
/// workspace root at its own path.
async fn ensure_container(plan: &ConnectPlan) -> Result<(), WorkerError> {
    let EnvironmentSpec::Container(spec) = &plan.spec else {
        return Ok(());
    };
    if matches!(spec.target, crate::config::ContainerTarget::Named(_)) {
        return Ok(());
    }
    let name = &plan.argv.container_name;
    let state = run_argv(&crate::environments::container_exists_argv(spec, name)).await;
    let started = match state.as_deref().map(str::trim) {
        Ok("true") => Ok(()),
        Ok(_) if spec.keep => {
            match run_argv(&crate::environments::container_start_argv(spec, name)).await {
                Ok(_) => Ok(()),
                // Removed since it was inspected: run it.
                Err(_) => run_container(plan, spec, name).await,
            }
        }
        Ok(_) => {
            // Gone already or removed now: either way the name is free for the run.
            let _ = run_argv(&crate::environments::container_remove_argv(spec, name)).await;
            run_container(plan, spec, name).await
        }
        Err(_) => run_container(plan, spec, name).await,
    };
    started.map_err(|e| WorkerError::Transport(format!("container {name}: {e}")))?;
    plan.started.store(true, Ordering::Release);
    Ok(())
}

/// `ENGINE run -d ...` of the environment's container (see
/// [`crate::environments::container_run_argv`]).
async fn run_container(
    plan: &ConnectPlan,
    spec: &crate::config::ContainerSpec,
    name: &str,
) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("the server's own binary: {e}"))?;
    let roots: Vec<PathBuf> = plan
        .workspaces
        .iter()
        .map(|(_, r)| PathBuf::from(r))
        .collect();
    match crate::environments::container_run_argv(spec, name, &exe, &roots) {
        Some(argv) => run_argv(&argv).await.map(drop),
        None => Ok(()),
    }
}

impl ConnectPlan {
    /// What ends with the server: a container it started is removed (stopped when kept); an
    /// ssh master connection is closed.
    async fn shutdown(&self) {
        match &self.spec {
            EnvironmentSpec::Container(spec) if self.started.load(Ordering::Acquire) => {
                if let Some(argv) =
                    crate::environments::container_stop_argv(spec, &self.argv.container_name)
                    && let Err(e) = run_argv(&argv).await
                {
                    tracing::warn!(environment = %self.env_id, error = %e, "container not stopped");
                }
            }
            EnvironmentSpec::Ssh(spec) => {
                let argv = crate::environments::ssh_close_argv(spec, &self.argv.ssh_control_path);
                let _ = run_argv(&argv).await;
            }
            _ => {}
        }
    }
}

/// One environment's worker, as the gateway sees it.
pub struct EnvironmentWorker {
    env_id: String,
    plan: Arc<ConnectPlan>,
    sup: Supervisor<Call, Reply, Event>,
    lost_hooks: Arc<Mutex<Vec<LostHook>>>,
    sink: Arc<Mutex<Option<EventSink>>>,
    forwarding: AtomicBool,
}

impl std::fmt::Debug for EnvironmentWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnvironmentWorker")
            .field("env", &self.env_id)
            .finish_non_exhaustive()
    }
}

/// A transport failure as the runner's error: the environment is unavailable, with why.
fn unavailable(e: &WorkerError) -> RunnerError {
    RunnerError::unavailable(e.to_string())
}

impl EnvironmentWorker {
    /// A worker reached as `plan` says (not connected yet: the first call connects); each lost
    /// connection is reported to `on_disconnect` once.
    pub(crate) fn new(
        plan: ConnectPlan,
        on_disconnect: DisconnectFn,
        lost_hooks: Arc<Mutex<Vec<LostHook>>>,
    ) -> EnvironmentWorker {
        let env_id = plan.env_id.clone();
        let plan = Arc::new(plan);
        let p = Arc::clone(&plan);
        let connect: ConnectFn<Call, Reply, Event> = Arc::new(move || {
            let plan = Arc::clone(&p);
            Box::pin(async move { connect(&plan).await })
        });
        EnvironmentWorker {
            env_id,
            plan,
            sup: Supervisor::new(connect, on_disconnect),
            lost_hooks,
            sink: Arc::new(Mutex::new(None)),
            forwarding: AtomicBool::new(false),
        }
    }

    /// The environment id.
    pub fn env_id(&self) -> &str {
        &self.env_id
    }

    /// Ends the environment's transport when the server stops (see [`ConnectPlan::shutdown`]).
    pub async fn shutdown(&self) {
        self.plan.shutdown().await;
    }

    /// Registers `hook`, run each time this environment's worker is lost (after the store rows
    /// and the leases are done).
    pub fn on_lost(&self, hook: LostHook) {
        self.lost_hooks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(hook);
    }

    /// Connects when there is no live connection; `Err` is why the environment is unavailable.
    pub async fn ensure(&self) -> Result<(), String> {
        self.forward_events();
        self.sup
            .client()
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// `workspace_info.environment.worker` now.
    pub fn status(&self) -> crate::wire::WorkerStatus {
        use crate::wire::WorkerState as W;
        let s = self.sup.status();
        let (state, reason) = match (s.state, &s.last_error, &s.version) {
            (WorkerState::Connected, _, _) => (W::Ready, None),
            (WorkerState::Connecting, _, None) => (W::Starting, None),
            (WorkerState::Connecting, _, Some(_)) => (W::Restarting, s.last_error.clone()),
            // Not started yet: the first call starts it.
            (WorkerState::Down, None, _) => (W::Starting, None),
            // It served and then died or disconnected: the next call starts it again.
            (WorkerState::Down, Some(e), Some(_)) => (W::Restarting, Some(e.clone())),
            // It never answered: it cannot be reached (a missing binary, a host key, a
            // worker of another build...).
            (WorkerState::Down, Some(e), None) => (W::Unavailable, Some(e.clone())),
        };
        crate::wire::WorkerStatus {
            state,
            version: s.version,
            restarts: s.restarts,
            reason,
        }
    }

    /// Starts forwarding the supervisor's events to the subscriber (once; needs a runtime).
    fn forward_events(&self) {
        if self.forwarding.swap(true, Ordering::AcqRel) {
            return;
        }
        let Some(mut rx) = self.sup.take_events() else {
            return;
        };
        let sink = Arc::clone(&self.sink);
        tokio::spawn(async move {
            while let Some(ev) = rx.recv().await {
                let s = sink.lock().unwrap_or_else(PoisonError::into_inner).clone();
                if let Some(s) = s {
                    s(ev);
                }
            }
        });
    }
}

/// The [`Wire`] of a [`codespace_runner_api::RemoteRunner`] over an [`EnvironmentWorker`].
#[derive(Clone, Debug)]
pub struct WorkerWire(pub Arc<EnvironmentWorker>);

impl Wire for WorkerWire {
    fn call(&self, call: Call) -> BoxFuture<'_, Result<Reply, RunnerError>> {
        Box::pin(async move {
            self.0.forward_events();
            self.0.sup.call(&call).await.map_err(|e| unavailable(&e))
        })
    }

    fn subscribe(&self, sink: EventSink) {
        *self.0.sink.lock().unwrap_or_else(PoisonError::into_inner) = Some(sink);
    }
}

/// This side's identity in the handshake.
fn me() -> Identity {
    Identity::this_build()
}

/// One connection attempt: reach the worker, then register every workspace.
async fn connect(plan: &ConnectPlan) -> Result<Conn, WorkerError> {
    let me = me();
    let (client, events) = match &plan.spec {
        EnvironmentSpec::Worker(WorkerSpec::Socket {
            path,
            secret_file,
            uid,
        }) => {
            let secret = read_secret_file(secret_file.as_deref()).await?;
            let uid = uid.unwrap_or_else(|| rustix::process::geteuid().as_raw());
            codespace_runner_worker::unix::connect(path, Some(uid), &secret, &me).await?
        }
        EnvironmentSpec::Worker(WorkerSpec::User(user)) => {
            start_as_user(user, &Secret::generate()?, &me).await?
        }
        spec => {
            ensure_container(plan).await?;
            let argv = crate::environments::stdio_argv(spec, &plan.argv).ok_or_else(|| {
                WorkerError::Transport(format!(
                    "environment kind `{}` has no worker",
                    spec.kind().as_str()
                ))
            })?;
            let spec = SpawnSpec {
                argv: argv.into_iter().map(OsString::from).collect(),
                env: Vec::new(),
            };
            codespace_runner_worker::spawn::spawn(&spec, &Secret::generate()?, &me).await?
        }
    };
    for (workspace, root) in &plan.workspaces {
        let call = Call::OpenWorkspace(OpenWorkspace {
            workspace: workspace.clone(),
            root: root.clone(),
        });
        match client.call(&call).await? {
            Reply::Done => {}
            Reply::Error(e) => {
                return Err(WorkerError::Transport(format!(
                    "workspace `{workspace}`: {e}"
                )));
            }
            _ => {
                return Err(WorkerError::Protocol(
                    "the worker answered open_workspace with something else".into(),
                ));
            }
        }
    }
    Ok((client, events))
}

/// The secret line of a `worker {socket}` (its first line), from a file only its owner may read.
async fn read_secret_file(file: Option<&Path>) -> Result<Secret, WorkerError> {
    use std::os::unix::fs::PermissionsExt;
    let file = file.ok_or_else(|| {
        WorkerError::Transport(
            "a `worker.socket` environment needs `worker.secret_file` (the secret line the \
             worker was started with)"
                .into(),
        )
    })?;
    let err = |what: String| WorkerError::Transport(format!("{}: {what}", file.display()));
    let meta = tokio::fs::metadata(file)
        .await
        .map_err(|e| err(e.to_string()))?;
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(err(
            "the secret file must not be readable by group or others (mode 0600)".into(),
        ));
    }
    let text = tokio::fs::read_to_string(file)
        .await
        .map_err(|e| err(e.to_string()))?;
    Secret::parse(text.lines().next().unwrap_or_default().trim_end())
}

/// A worker the server started as another user: killed (its process group) and its socket
/// directory removed with the connection.
struct UserWorker {
    child: tokio::process::Child,
    pgid: Option<rustix::process::Pid>,
    dir: PathBuf,
    /// The worker's stdin, open while this server lives (`--exit-with-stdin`): the kernel closes
    /// it when the server dies, however it dies, and the worker then exits.
    stdin: tokio::process::ChildStdin,
}

impl Drop for UserWorker {
    fn drop(&mut self) {
        if let Some(pgid) = self.pgid {
            let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
        }
        let _ = self.child.start_kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `(uid, gid)` of `user` (through the system's user database: `getent passwd`).
async fn lookup_user(user: &str) -> Result<(u32, u32), WorkerError> {
    let out = tokio::process::Command::new("getent")
        .args(["passwd", "--", user])
        .output()
        .await
        .map_err(|e| WorkerError::Transport(format!("getent: {e}")))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut fields = text.lines().next().unwrap_or_default().split(':');
    let (uid, gid) = (fields.nth(2), fields.next());
    match (
        uid.and_then(|u| u.parse().ok()),
        gid.and_then(|g| g.parse().ok()),
    ) {
        (Some(u), Some(g)) if out.status.success() => Ok((u, g)),
        _ => Err(WorkerError::Transport(format!(
            "no user `{user}` on this host"
        ))),
    }
}

/// Starts `codespace worker --socket DIR/w.sock --allow-uid ME --exit-with-stdin` as `user` (through `setpriv`,
/// which needs the server to hold CAP_SETUID/CAP_SETGID), waits for `listening`, and connects,
/// checking that the worker runs as that user.
async fn start_as_user(user: &str, secret: &Secret, me: &Identity) -> Result<Conn, WorkerError> {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
    let (uid, gid) = lookup_user(user).await?;
    let exe = std::env::current_exe()
        .map_err(|e| WorkerError::Transport(format!("the server's own binary: {e}")))?;
    // The worker creates the directory itself (mode 0700, owned by it).
    let dir = std::env::temp_dir().join(format!("cs-w-{}", uuid::Uuid::new_v4().simple()));
    let sock = dir.join("w.sock");
    let my_uid = rustix::process::geteuid().as_raw().to_string();
    let mut cmd = tokio::process::Command::new("setpriv");
    cmd.arg(format!("--reuid={uid}"))
        .arg(format!("--regid={gid}"))
        .arg("--clear-groups")
        .arg("--")
        .arg(&exe)
        .args(["worker", "--socket"])
        .arg(&sock)
        .args(["--allow-uid", &my_uid, "--exit-with-stdin"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .process_group(0);
    let mut child = cmd
        .spawn()
        .map_err(|e| WorkerError::Transport(format!("cannot start setpriv: {e}")))?;
    let pgid = child
        .id()
        .and_then(|id| rustix::process::Pid::from_raw(i32::try_from(id).unwrap_or(0)));
    let (Some(stdin), Some(stdout), Some(mut stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(WorkerError::Transport(
            "the child's pipes are missing".into(),
        ));
    };
    let mut guard = UserWorker {
        child,
        pgid,
        dir,
        stdin,
    };
    guard
        .stdin
        .write_all(format!("{}\n", secret.expose()).as_bytes())
        .await
        .map_err(|e| WorkerError::Handshake(format!("the worker does not take input: {e}")))?;
    let mut line = String::new();
    let mut out = tokio::io::BufReader::new(stdout);
    let said = tokio::time::timeout(LISTEN_TIMEOUT, out.read_line(&mut line)).await;
    if !matches!(said, Ok(Ok(_))) || line.trim() != "listening" {
        let mut tail = Vec::new();
        let _ = tokio::time::timeout(
            Duration::from_secs(2),
            (&mut stderr).take(8192).read_to_end(&mut tail),
        )
        .await;
        return Err(WorkerError::Handshake(format!(
            "the worker started as `{user}` did not listen; its stderr: {}",
            String::from_utf8_lossy(&tail).trim()
        )));
    }
    // Its stderr is drained (a full pipe must not hold it up).
    tokio::spawn(async move {
        let mut sink = tokio::io::sink();
        let _ = tokio::io::copy(&mut stderr, &mut sink).await;
    });
    let (mut client, events) =
        codespace_runner_worker::unix::connect(&sock, Some(uid), secret, me).await?;
    client.attach_transport(Box::new(guard), None);
    Ok((client, events))
}

/// Whether environment `spec` is served by a worker (kinds worker, ssh, container,
/// kubernetes, command).
pub fn served_by_worker(spec: &EnvironmentSpec) -> bool {
    matches!(
        spec,
        EnvironmentSpec::Worker(_)
            | EnvironmentSpec::Ssh(_)
            | EnvironmentSpec::Container(_)
            | EnvironmentSpec::Kubernetes(_)
            | EnvironmentSpec::Command(_)
    )
}

/// The worker of every environment of `config` that has one, with the workspaces it serves
/// (not connected: each connects on its first call). `Err`: a private directory for the ssh
/// control sockets could not be made.
pub(crate) fn workers_of(
    config: &crate::config::Config,
    store: Option<&Arc<codespace_store::Store>>,
    leases: &Arc<crate::lease::Leases>,
) -> Result<std::collections::BTreeMap<String, Arc<EnvironmentWorker>>, String> {
    let instance = uuid::Uuid::new_v4().simple().to_string();
    let mut out = std::collections::BTreeMap::new();
    for (env_id, env) in &config.environments {
        if !served_by_worker(&env.spec) {
            continue;
        }
        let workspaces: Vec<(String, String)> = config
            .workspaces
            .iter()
            .filter(|(_, ws)| &ws.environment == env_id)
            .map(|(id, ws)| (id.clone(), ws.root.display().to_string()))
            .collect();
        let private = match &env.spec {
            // A Unix socket path is at most 107 bytes: a short directory of the server's.
            EnvironmentSpec::Ssh(_) => Some(
                tempfile::Builder::new()
                    .prefix("cs-ssh-")
                    .tempdir_in("/tmp")
                    .map_err(|e| format!("environment {env_id}: ssh control directory: {e}"))?,
            ),
            _ => None,
        };
        let keep = matches!(&env.spec, EnvironmentSpec::Container(c) if c.keep);
        let argv = ArgvContext {
            ssh_control_path: private
                .as_ref()
                .map(|d| d.path().join("c"))
                .unwrap_or_default(),
            container_name: crate::environments::container_name(env_id, keep, &instance),
        };
        let ids: Vec<String> = workspaces.iter().map(|(id, _)| id.clone()).collect();
        let plan = ConnectPlan {
            env_id: env_id.clone(),
            spec: env.spec.clone(),
            workspaces,
            argv,
            _private: private,
            started: AtomicBool::new(false),
        };
        let lost = LostContext {
            store: store.cloned(),
            leases: Arc::clone(leases),
            hooks: Arc::new(Mutex::new(Vec::new())),
        };
        let hook_env = env_id.clone();
        let ctx = lost.clone();
        let on_disconnect: DisconnectFn = Arc::new(move |reason: &str| {
            let hooks = ctx
                .hooks
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            environment_lost(
                ctx.store.as_ref(),
                &ctx.leases,
                &hooks,
                &hook_env,
                &ids,
                reason,
            );
        });
        out.insert(
            env_id.clone(),
            Arc::new(EnvironmentWorker::new(plan, on_disconnect, lost.hooks)),
        );
    }
    Ok(out)
}

/// Called when an environment's worker is lost, with the environment's workspaces and why:
/// what else keeps state about the worker's processes (a process table routed through the
/// runner) registers one with [`EnvironmentWorker::on_lost`].
pub type LostHook = Arc<dyn Fn(&[String], &str) + Send + Sync>;

/// What the disconnect hook of one environment needs.
#[derive(Clone)]
pub(crate) struct LostContext {
    pub(crate) store: Option<Arc<codespace_store::Store>>,
    pub(crate) leases: Arc<crate::lease::Leases>,
    pub(crate) hooks: Arc<Mutex<Vec<LostHook>>>,
}

/// The supervisor's disconnect hook: the worker of `env_id` (serving `workspaces`) died or
/// disconnected, and every process it ran died with it (the worker is their parent and kills
/// them; `process_id`s are never served again). Their store rows still `running` become
/// `lost`, every process-owned lease of those workspaces is released, the registered
/// [`LostHook`]s run, and an `environment_worker_lost` event records it. Runs on the
/// supervisor's watcher task: the store writes go to the blocking pool.
pub fn environment_lost(
    store: Option<&Arc<codespace_store::Store>>,
    leases: &crate::lease::Leases,
    hooks: &[LostHook],
    env_id: &str,
    workspaces: &[String],
    reason: &str,
) {
    tracing::warn!(environment = env_id, reason, "environment worker lost");
    let mut released = Vec::new();
    for ws in workspaces {
        released.extend(leases.release_all_processes(ws));
    }
    for hook in hooks {
        hook(workspaces, reason);
    }
    let Some(store) = store.cloned() else { return };
    let (env, wss, why) = (env_id.to_string(), workspaces.to_vec(), reason.to_string());
    let work = move || {
        let mut lost = Vec::new();
        for ws in &wss {
            match store.running_processes(ws) {
                Ok(ids) => lost.extend(ids),
                Err(e) => tracing::warn!(error = %e, "cannot list the lost worker's processes"),
            }
        }
        if let Err(e) = store.mark_processes_lost(&lost) {
            tracing::warn!(error = %e, "cannot mark the lost worker's processes");
        }
        let detail = serde_json::json!({
            "environment": env,
            "workspaces": wss,
            "reason": why,
            "processes_lost": lost,
            "leases_released": released,
        });
        if let Err(e) = store.insert_event("environment_worker_lost", &detail) {
            tracing::warn!(error = %e, "environment_worker_lost event not recorded");
        }
    };
    match tokio::runtime::Handle::try_current() {
        Ok(h) => drop(h.spawn_blocking(work)),
        Err(_) => work(),
    }
}

/// The wire of a worker's environment no worker client serves: every call is `Unavailable`.
struct NoWorker;

impl Wire for NoWorker {
    fn call(&self, call: Call) -> BoxFuture<'_, Result<Reply, RunnerError>> {
        Box::pin(async move {
            Err(RunnerError::unavailable(format!(
                "no worker serves this environment ({})",
                call.method()
            )))
        })
    }
    fn subscribe(&self, _sink: EventSink) {}
}

/// A runner that answers every call `Unavailable` (a worker's workspace without a worker).
pub(crate) fn no_worker() -> std::sync::Arc<dyn codespace_runner_api::Runner> {
    std::sync::Arc::new(codespace_runner_api::RemoteRunner::new(NoWorker))
}
