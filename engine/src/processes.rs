//! The engine's side of the processes: what it records about each process it started (its
//! workspace, environment, client and the facts Cedar reads, the runner it lives on — the
//! process itself is in that runner's table, the only process table), the per-command temp dir
//! helpers, the child's environment, the watch that records an exit, and
//! [`Registry::lose_environment`]: a worker that died takes its processes with it (`lost`). The
//! process tools are in `tools/process.rs`; which process a call is about is the gateway's
//! question.

use crate::config::Limits;
use crate::error::{ErrorCode, ToolError};
use crate::lease::Leases;
use crate::wire::ProcessStatusResult;
use codespace_runner_api::{self as api, Runner, RunnerError};
use codespace_runner_process::{InheritedFd, ProcError, SpawnError, TableLimits};
use codespace_store::{ProcessRow, Store};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// The fixed `PATH` of every child.
pub const CHILD_PATH: &str = crate::config::SYSTEM_PATH;

/// `read_process` `tail: true` without `max_bytes`: the last this many bytes.
pub const DEFAULT_TAIL_BYTES: usize = 64 * 1024;

/// Longest `read_process.wait_ms` and `exec_command.yield_ms` honoured.
pub const MAX_WAIT_MS: u64 = 30_000;

/// Test hook: when this environment variable is `1` at gateway construction, every sandbox plan
/// asks the helper to behave as if the kernel had no Landlock, so the helper refuses to run the
/// command (fail closed). It can only make the server refuse more, never less.
pub const FORCE_NO_LANDLOCK_ENV: &str = "CODESPACE_TEST_FORCE_NO_LANDLOCK";

/// How long terminate_process waits beyond the kill grace for the process to be reaped.
pub(crate) const TERMINATE_MARGIN: Duration = Duration::from_secs(1);

/// The proxy variables a `network: proxy` command gets (both spellings: tools read either).
pub(crate) const PROXY_ENV_NAMES: &[&str] = &[
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
];

/// The egress proxy of one `network: proxy` command, before it is spawned.
pub(crate) struct ProxySetup {
    pub(crate) proxy: Arc<codespace_runner_netproxy::ProcessProxy>,
    pub(crate) decider: Arc<crate::gateway::net::ProcessDecider>,
    /// The helper's end of the control socket (inherited by that one child).
    pub(crate) relay_end: InheritedFd,
    /// The server's end.
    pub(crate) server_end: std::os::fd::OwnedFd,
    pub(crate) argv: Vec<String>,
}

/// Where a process the gateway started stands, as far as the gateway knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Standing {
    /// Not known to have exited.
    Live,
    /// Its exit was observed.
    Ended,
    /// Its worker died or disconnected: killed with it, nothing more is known of it.
    Lost,
}

/// One process the gateway started, as the process tools see it. The process lives in
/// `runner`'s table under the same id; this is what the gateway knows about it besides.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub(crate) workspace: String,
    /// The environment whose runner runs it.
    pub(crate) environment: String,
    pub(crate) client: String,
    pub(crate) argv: Vec<String>,
    pub(crate) tty: bool,
    pub(crate) env_names: Vec<String>,
    pub(crate) background: bool,
    pub(crate) separate_stderr: bool,
    /// `network: proxy`: the process's egress proxy (its counters feed `process_status`).
    pub(crate) proxy: Option<Arc<codespace_runner_netproxy::ProcessProxy>>,
    /// The runner it lives on.
    pub(crate) runner: Arc<dyn Runner>,
    pub(crate) standing: Standing,
    /// When the gateway started it (Unix milliseconds).
    pub(crate) started_ms: i64,
    seq: u64,
}

impl Entry {
    /// A new live entry.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn live(
        workspace: String,
        environment: String,
        client: String,
        argv: Vec<String>,
        tty: bool,
        env_names: Vec<String>,
        background: bool,
        separate_stderr: bool,
        proxy: Option<Arc<codespace_runner_netproxy::ProcessProxy>>,
        runner: Arc<dyn Runner>,
    ) -> Entry {
        Entry {
            workspace,
            environment,
            client,
            argv,
            tty,
            env_names,
            background,
            separate_stderr,
            proxy,
            runner,
            standing: Standing::Live,
            started_ms: codespace_store::now_ms(),
            seq: 0,
        }
    }
}

/// The gateway's records of its processes by id, shared with the exit watchers. Bounded: past
/// `cap` entries, the oldest ended or lost ones go (their runner forgets them too).
#[derive(Debug)]
pub(crate) struct Registry {
    entries: Mutex<HashMap<String, Entry>>,
    next: std::sync::atomic::AtomicU64,
    cap: usize,
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a started process; `false` (nothing recorded) when the id is already known (a
    /// runner that reuses ids is not trusted with a second process under one).
    pub(crate) fn insert(&self, id: &str, mut entry: Entry) -> bool {
        let mut map = self.lock();
        if map.contains_key(id) {
            return false;
        }
        entry.seq = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        map.insert(id.to_string(), entry);
        while map.len() > self.cap {
            let oldest = map
                .iter()
                .filter(|(_, e)| e.standing != Standing::Live)
                .min_by_key(|(_, e)| e.seq)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => map.remove(&k),
                None => break,
            };
        }
        true
    }

    /// The entry of `id`.
    pub(crate) fn get(&self, id: &str) -> Option<Entry> {
        self.lock().get(id).cloned()
    }

    /// Every entry, by id.
    pub(crate) fn all(&self) -> Vec<(String, Entry)> {
        self.lock()
            .iter()
            .map(|(k, e)| (k.clone(), e.clone()))
            .collect()
    }

    /// Its exit was observed (a lost process stays lost).
    pub(crate) fn ended(&self, id: &str) {
        if let Some(e) = self.lock().get_mut(id)
            && e.standing == Standing::Live
        {
            e.standing = Standing::Ended;
        }
    }

    /// `id` is lost; its workspace when that changed anything (it was live).
    pub(crate) fn lose(&self, id: &str) -> Option<String> {
        let mut map = self.lock();
        let e = map.get_mut(id)?;
        (e.standing == Standing::Live).then(|| {
            e.standing = Standing::Lost;
            e.workspace.clone()
        })
    }

    /// Every live process of `environment` is lost: `(id, workspace)` of each.
    pub(crate) fn lose_environment(&self, environment: &str) -> Vec<(String, String)> {
        let mut map = self.lock();
        map.iter_mut()
            .filter(|(_, e)| e.environment == environment && e.standing == Standing::Live)
            .map(|(id, e)| {
                e.standing = Standing::Lost;
                (id.clone(), e.workspace.clone())
            })
            .collect()
    }

    /// Live entries not served by `host` (their runner's table is not this server's).
    pub(crate) fn live_elsewhere(&self, host: &Arc<dyn Runner>) -> usize {
        self.lock()
            .values()
            .filter(|e| e.standing == Standing::Live && !same_runner(&e.runner, host))
            .count()
    }
}

/// Whether two runners are the same object.
pub(crate) fn same_runner(a: &Arc<dyn Runner>, b: &Arc<dyn Runner>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
}

/// The process table's limits from the operator's `limits` (the host runner's table).
pub(crate) fn table_limits(limits: &Limits) -> TableLimits {
    TableLimits {
        max_live: limits.max_live_processes,
        max_exited_kept: limits.max_exited_processes,
        ring_bytes: limits.output_ring_bytes,
        default_timeout: Duration::from_millis(limits.process_timeout_ms),
        max_pids: limits.max_pids_per_process,
        ..TableLimits::default()
    }
}

/// A process's private temp dir; removed on drop.
#[derive(Debug)]
pub(crate) struct TmpDir(PathBuf);

impl TmpDir {
    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TmpDir {
    fn drop(&mut self) {
        remove_tmp(Some(&self.0));
    }
}

/// The gateway's process state: its records of who started what (the processes themselves are
/// in their runners' tables), the sandbox helper and the test hook.
#[derive(Debug)]
pub(crate) struct Processes {
    pub(crate) registry: Arc<Registry>,
    pub(crate) helper_exe: Option<PathBuf>,
    pub(crate) force_no_landlock: bool,
}

impl Processes {
    /// An empty registry with the operator's limits.
    pub(crate) fn new(limits: &Limits) -> Processes {
        Processes {
            registry: Arc::new(Registry {
                entries: Mutex::new(HashMap::new()),
                next: std::sync::atomic::AtomicU64::new(0),
                cap: limits
                    .max_live_processes
                    .saturating_add(limits.max_exited_processes)
                    .saturating_add(64),
            }),
            helper_exe: None,
            // A test hook: only a binary built with the `test-hooks` feature reads the variable.
            force_no_landlock: cfg!(feature = "test-hooks")
                && std::env::var_os(FORCE_NO_LANDLOCK_ENV).is_some_and(|v| v == "1"),
        }
    }

    /// Sets the sandbox helper executable (the `codespace` binary).
    /// An empty path clears it (fail closed).
    pub(crate) fn set_helper_exe(&mut self, exe: PathBuf) {
        self.helper_exe = if exe.as_os_str().is_empty() {
            None
        } else {
            Some(std::fs::canonicalize(&exe).unwrap_or(exe))
        };
    }

    pub(crate) fn entry(&self, id: &str) -> Result<Entry, ToolError> {
        self.registry.get(id).ok_or_else(|| {
            ToolError::new(
                ErrorCode::ProcessNotFound,
                "no process with this process_id",
            )
        })
    }

    /// Every process still recorded, by id.
    pub(crate) fn entries(&self) -> Vec<(String, Entry)> {
        self.registry.all()
    }
}

/// The processes `lost` names (their worker died): their leases released, their store rows
/// `lost` (off the async workers when called on one).
pub(crate) fn record_lost(leases: &Leases, store: Option<&Arc<Store>>, lost: &[(String, String)]) {
    for (id, workspace) in lost {
        leases.release_process(workspace, id);
    }
    let Some(store) = store.cloned() else { return };
    if lost.is_empty() {
        return;
    }
    let ids: Vec<String> = lost.iter().map(|(id, _)| id.clone()).collect();
    let write = move || {
        if let Err(e) = store.mark_processes_lost(&ids) {
            tracing::error!(error = %e, "cannot record lost processes");
        }
    };
    match tokio::runtime::Handle::try_current() {
        Ok(h) => {
            h.spawn_blocking(write);
        }
        Err(_) => write(),
    }
}

pub(crate) fn remove_tmp(dir: Option<&Path>) {
    if let Some(d) = dir
        && let Err(e) = std::fs::remove_dir_all(d)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(error = %e.kind(), "cannot remove a process temp dir");
    }
}

pub(crate) fn spawn_error(e: &SpawnError) -> ToolError {
    match e {
        SpawnError::InvalidCommand => ToolError::new(ErrorCode::InvalidCommand, e.to_string()),
        SpawnError::LimitReached => ToolError::new(
            ErrorCode::WorkspaceBusy,
            "the server already runs its maximum number of live processes; wait for one to exit \
             or terminate one",
        ),
        SpawnError::SpawnFailed(_) => ToolError::new(ErrorCode::ProcessSpawnFailed, e.to_string()),
    }
}

/// The remedy added to a spawn failure whose program the command cannot find (`program not
/// found`) or may not execute (`EACCES` from the sandbox: its directory is not readable there):
/// the commands' `PATH` (operator and toolchain directories by role, never their paths) and how
/// to add a toolchain.
pub(crate) struct ExecRemedy {
    path: String,
}

impl ExecRemedy {
    /// From the child's environment and the operator's (and toolchains') `PATH` directories.
    pub(crate) fn new(env: &[(String, String)], configured: &[PathBuf]) -> ExecRemedy {
        let path = env
            .iter()
            .rev()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| {
                v.split(':')
                    .map(|d| {
                        if configured.iter().any(|c| Path::new(d) == c) {
                            "<configured dir>"
                        } else {
                            d
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(":")
            })
            .unwrap_or_default();
        ExecRemedy { path }
    }

    /// `e` with the remedy appended when it is about finding or executing the program.
    pub(crate) fn apply(&self, mut e: ToolError) -> ToolError {
        let m = &e.message;
        let not_found = m.contains("program not found");
        let denied = m.contains("cannot execute")
            && (m.contains("Permission denied") || m.contains("os error 13"));
        if !not_found && !denied {
            return e;
        }
        let what = if denied {
            "the program's directory is not readable by sandboxed commands"
        } else {
            "no such program on the commands' PATH"
        };
        e.message = format!(
            "{m}; {what} (the commands' PATH is {}; workspace_info's \
             execution.isolation.toolchains lists the toolchains added); add its directory \
             with `codespace serve --toolchain DIR`, or the config's `path` + `read_paths` \
             (docs/config.md)",
            self.path
        );
        e
    }
}

pub(crate) fn proc_error(e: &ProcError) -> ToolError {
    ToolError::new(ErrorCode::from(e), e.to_string())
}

pub(crate) fn internal(e: impl std::fmt::Display) -> ToolError {
    ToolError::new(ErrorCode::Internal, e.to_string())
}

pub(crate) fn to_value<T: serde::Serialize>(v: &T) -> Result<Value, ToolError> {
    serde_json::to_value(v).map_err(internal)
}

pub(crate) fn argv_sha256(argv: &[String]) -> String {
    let text = serde_json::to_string(argv).unwrap_or_default();
    format!("sha256:{}", hex::encode(Sha256::digest(text.as_bytes())))
}

pub(crate) fn capped(ms: u64) -> Duration {
    Duration::from_millis(ms.min(MAX_WAIT_MS))
}

/// A private temp dir for one process (mode 0700), under the system temp dir; removed when the
/// returned guard is dropped.
pub(crate) fn make_tmp_dir() -> Result<TmpDir, ToolError> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = std::env::temp_dir().join(format!("codespace-proc-{}", uuid::Uuid::new_v4()));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| {
            ToolError::new(
                ErrorCode::ProcessSpawnFailed,
                format!("cannot create the process temp dir: {}", e.kind()),
            )
        })?;
    Ok(TmpDir(dir))
}

/// Paths a workspace's commands get besides the workspace and their temp dir.
pub(crate) struct CommandPaths {
    /// The operator's read paths (environment's and workspace's).
    pub(crate) read_paths: Vec<PathBuf>,
    /// The home directory (created 0700 on first use), when one is known.
    pub(crate) home: Option<PathBuf>,
    /// The operator's directories prepended to `PATH`.
    pub(crate) path: Vec<PathBuf>,
    /// The operator's fixed variables.
    pub(crate) env: std::collections::BTreeMap<String, String>,
}

/// What a command's sandbox is made of besides its plan's paths: the decided write scope
/// (root writable, writable directories, read-only mounts beneath them), the masks, the network.
pub(crate) struct SandboxParts<'a> {
    /// The workspace root as the runner sees it.
    pub(crate) root: &'a std::path::Path,
    /// The workspace root itself is writable.
    pub(crate) root_writable: bool,
    /// Writable directories beneath the root.
    pub(crate) writable: &'a [codespace_runner_fs::RelPath],
    /// Denied paths beneath a writable directory.
    pub(crate) read_only_mounts: &'a [codespace_runner_fs::RelPath],
    /// The secret masks (the non-UTF-8 marker among them becomes its flag).
    pub(crate) masks: &'a [crate::mask_cache::Mask],
    /// The network the command gets.
    pub(crate) network: codespace_runner_api::SandboxNetwork,
}

/// The runner's sandbox spec of a command (an `exec_command` or a hook) from its decided
/// `parts`, the workspace's command `paths` and `home` (None: the private temp dir is HOME).
pub(crate) fn sandbox_spec(
    parts: &SandboxParts<'_>,
    paths: &CommandPaths,
    home: Option<&PathBuf>,
    stage: Option<Vec<codespace_runner_api::StagedFile>>,
) -> codespace_runner_api::SandboxSpec {
    let abs = |p: &str| parts.root.join(p).to_string_lossy().into_owned();
    let mut tmp_env = vec!["TMPDIR".to_string()];
    if home.is_none() {
        tmp_env.push("HOME".to_string());
    }
    let non_utf8 = |m: &&crate::mask_cache::Mask| m.path == crate::masks::NON_UTF8_TOP_LEVEL;
    codespace_runner_api::SandboxSpec {
        write_workspace: parts.root_writable,
        write_paths: parts.writable.iter().map(|p| abs(p.as_str())).collect(),
        read_only: parts
            .read_only_mounts
            .iter()
            .map(|p| abs(p.as_str()))
            .collect(),
        masks: parts
            .masks
            .iter()
            .filter(|m| !non_utf8(m))
            .map(|m| abs(&m.path))
            .collect(),
        network: parts.network,
        tmp_dir: None,
        extra_read: paths
            .read_paths
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect(),
        home_dir: home.map(|h| h.to_string_lossy().into_owned()),
        private_tmp: Some(tmp_env),
        mask_non_utf8_top_level: parts.masks.iter().any(|m| non_utf8(&m)),
        proxy_relay: None,
        stage,
    }
}

/// The child's environment: the server's `base` (PATH, HOME, LANG, TERM, TMPDIR), then the
/// call's `env` on top, then the operator's `env` on top of that (the operator wins), and the
/// operator's `path` directories prepended to whatever `PATH` results.
pub(crate) fn child_env(
    base: Vec<(String, String)>,
    call: Option<&std::collections::BTreeMap<String, String>>,
    operator: &std::collections::BTreeMap<String, String>,
    path: &[PathBuf],
) -> Vec<(String, String)> {
    let mut merged: std::collections::BTreeMap<String, String> = base.into_iter().collect();
    if let Some(call) = call {
        for (k, v) in call {
            merged.insert(k.clone(), v.clone());
        }
    }
    for (k, v) in operator {
        merged.insert(k.clone(), v.clone());
    }
    if !path.is_empty() {
        let mut dirs: Vec<String> = path
            .iter()
            .map(|d| d.to_string_lossy().into_owned())
            .collect();
        if let Some(rest) = merged.get("PATH").filter(|p| !p.is_empty()) {
            dirs.push(rest.clone());
        }
        merged.insert("PATH".into(), dirs.join(":"));
    }
    merged.into_iter().collect()
}

/// A runner's status of `id` as the wire's.
pub(crate) fn status_result(id: &str, s: &api::ProcessStatus) -> ProcessStatusResult {
    ProcessStatusResult {
        network: None,
        process_id: id.to_string(),
        state: state_str(s.state).to_string(),
        exit_code: s.exit_code,
        termination: s.termination.clone(),
        signal: s.signal,
        output_total: s.output_total,
        output_retained_from: s.output_retained_from,
        eof: s.eof,
        tty: s.tty,
    }
}

/// The wire's and the store's name of a state.
pub(crate) fn state_str(s: api::ProcessState) -> &'static str {
    match s {
        api::ProcessState::Running => "running",
        api::ProcessState::Exited => "exited",
        api::ProcessState::Lost => "lost",
    }
}

/// The status of a lost process: nothing more is known of it, and no more output will come.
pub(crate) fn lost_status(id: &str, entry: &Entry) -> api::ProcessStatus {
    api::ProcessStatus {
        process_id: id.to_string(),
        state: api::ProcessState::Lost,
        exit_code: None,
        signal: None,
        termination: None,
        tty: entry.tty,
        output_total: 0,
        output_retained_from: 0,
        eof: true,
    }
}

/// The message of a call on a lost process.
pub(crate) const LOST_MESSAGE: &str =
    "the process was lost: its environment's worker died or disconnected";

/// Everything needed to keep the store and the lease in step with a process after it exits.
pub(crate) struct ExitWatch {
    pub(crate) runner: Arc<dyn Runner>,
    pub(crate) registry: Arc<Registry>,
    pub(crate) leases: Arc<Leases>,
    pub(crate) store: Option<Arc<Store>>,
    pub(crate) row: ProcessRow,
    /// The task serving the relay's control socket: stopped when the process exits, which
    /// closes the server's end, so the relay exits too.
    pub(crate) proxy_control: Option<tokio::task::AbortHandle>,
    /// The operation ledger's record of the files the command changed (issue 31).
    pub(crate) ledger: Option<crate::command_ledger::CommandLedger>,
    /// Told once the `running` row is written (the call's reply waits for it).
    pub(crate) recorded: Option<tokio::sync::oneshot::Sender<()>>,
}

impl ExitWatch {
    pub(crate) async fn run(mut self) {
        let id = self.row.process_id.clone();
        // The `running` row, while the call goes on (its reply waits for `recorded`); written
        // before anything else of this task, so a command that exits at once never has its
        // `exited` row overwritten by it.
        if let Some(store) = &self.store {
            let (store, row) = (Arc::clone(store), self.row.clone());
            let written = tokio::task::spawn_blocking(move || store.upsert_process(&row)).await;
            if !matches!(written, Ok(Ok(()))) {
                tracing::error!(process_id = %id, "cannot record process");
            }
        }
        if let Some(recorded) = self.recorded.take() {
            let _ = recorded.send(());
        }
        let waited = self
            .runner
            .wait(api::ProcessRef {
                process_id: id.clone(),
            })
            .await;
        if let Some(control) = &self.proxy_control {
            control.abort();
        }
        let status = match waited {
            Err(RunnerError::Unavailable { .. }) => {
                // Its worker is gone, and the process with it.
                if let Some(ws) = self.registry.lose(&id) {
                    record_lost(&self.leases, self.store.as_ref(), &[(id, ws)]);
                }
                return;
            }
            other => other,
        };
        self.registry.ended(&id);
        self.leases.release_process(&self.row.workspace, &id);
        let Some(store) = self.store else { return };
        let mut row = self.row;
        row.ended_ms = Some(codespace_store::now_ms());
        match status {
            Ok(s) => {
                row.state = state_str(s.state).to_string();
                row.exit_code = s.exit_code.map(i64::from);
                row.termination = s.termination;
            }
            Err(_) => {
                row.state = "unknown".into();
            }
        }
        let ledger = self.ledger;
        let write = {
            let (store, id) = (Arc::clone(&store), id.clone());
            move || {
                if let Err(e) = store.upsert_process(&row) {
                    tracing::error!(process_id = %id, error = %e, "cannot record process exit");
                }
            }
        };
        let _ = tokio::task::spawn_blocking(write).await;
        if let Some(ledger) = ledger {
            ledger.record(store, id).await;
        }
    }
}
