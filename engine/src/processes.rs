//! The engine's side of the process registry: what it records about each process it started
//! (the [`Owner`] the runner's table carries beside the handle), the per-command temp dir, the
//! child's environment and the watch that records an exit. The process tools are in
//! `tools/process.rs`; which process a call is about is the gateway's question.

use crate::config::Limits;
use crate::error::{ErrorCode, ToolError};
use crate::lease::Leases;
use crate::wire::ProcessStatusResult;
use codespace_runner_process::{
    InheritedFd, ProcError, ProcessInfo, ProcessTable, Registration, SpawnError, TableLimits,
};
use codespace_store::{ProcessRow, Store};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The fixed `PATH` of every child.
pub const CHILD_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

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

/// One process the gateway started, as the process tools see it: the runner table's
/// registration (its status snapshot and the gateway's [`Owner`]) flattened.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub(crate) workspace: String,
    pub(crate) client: String,
    pub(crate) argv: Vec<String>,
    pub(crate) tty: bool,
    pub(crate) tmp_dir: Option<PathBuf>,
    pub(crate) env_names: Vec<String>,
    pub(crate) background: bool,
    pub(crate) separate_stderr: bool,
    /// `network: proxy`: the process's egress proxy (its counters feed `process_status`).
    pub(crate) proxy: Option<Arc<codespace_runner_netproxy::ProcessProxy>>,
}

/// What the gateway keeps about each process, in the runner's table beside the process (so it
/// is looked up and evicted with it). The client is the table's owner label; argv, tty and the
/// stderr mode are the table's own.
#[derive(Debug)]
pub(crate) struct Owner {
    pub(crate) workspace: String,
    pub(crate) env_names: Vec<String>,
    pub(crate) background: bool,
    pub(crate) proxy: Option<Arc<codespace_runner_netproxy::ProcessProxy>>,
    /// The command's private temp dir: removed when the process exits (the exit watcher) and,
    /// at the latest, when the table evicts the process.
    pub(crate) tmp: Option<TmpDir>,
}

impl Entry {
    pub(crate) fn of(r: &Registration<Owner>) -> Entry {
        Entry {
            workspace: r.meta.workspace.clone(),
            client: r.info.owner.clone(),
            argv: r.info.argv.clone(),
            tty: r.info.tty,
            tmp_dir: r.meta.tmp.as_ref().map(|t| t.0.clone()),
            env_names: r.meta.env_names.clone(),
            background: r.meta.background,
            separate_stderr: r.info.separate_stderr,
            proxy: r.meta.proxy.clone(),
        }
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

/// The gateway's process state: the runner table, the one registry of who started what.
#[derive(Debug)]
pub(crate) struct Processes {
    pub(crate) table: ProcessTable<Owner>,
    pub(crate) helper_exe: Option<PathBuf>,
    pub(crate) force_no_landlock: bool,
}

impl Processes {
    /// An empty registry with the operator's limits.
    pub(crate) fn new(limits: &Limits) -> Processes {
        let table = ProcessTable::with_metadata(TableLimits {
            max_live: limits.max_live_processes,
            max_exited_kept: limits.max_exited_processes,
            ring_bytes: limits.output_ring_bytes,
            default_timeout: Duration::from_millis(limits.process_timeout_ms),
            max_pids: limits.max_pids_per_process,
            ..TableLimits::default()
        });
        Processes {
            table,
            helper_exe: None,
            // A test hook: only a binary built with the `test-hooks` feature reads the variable.
            force_no_landlock: cfg!(feature = "test-hooks")
                && std::env::var_os(FORCE_NO_LANDLOCK_ENV).is_some_and(|v| v == "1"),
        }
    }

    /// The limits of the table (the host runner's own table takes the same).
    pub(crate) fn table_limits(&self) -> TableLimits {
        self.table.limits().clone()
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
        self.table
            .registration(id)
            .map(|r| Entry::of(&r))
            .map_err(|_| {
                ToolError::new(
                    ErrorCode::ProcessNotFound,
                    "no process with this process_id",
                )
            })
    }

    /// Every process the table still holds, by id.
    pub(crate) fn entries(&self) -> Vec<(String, Entry)> {
        self.table
            .registrations()
            .iter()
            .map(|r| (r.info.id.clone(), Entry::of(r)))
            .collect()
    }

    /// Removes every process's temp dir now (their entries may outlive this call).
    pub(crate) fn remove_tmp_dirs(&self) {
        for r in self.table.registrations() {
            remove_tmp(r.meta.tmp.as_ref().map(TmpDir::path));
        }
    }

    /// Kills every process group the table owns and removes their temp dirs.
    pub(crate) async fn shutdown(&self) {
        self.table.shutdown().await;
        self.remove_tmp_dirs();
    }

    /// Number of processes still running (tests, workspace_info).
    pub(crate) fn live_count(&self) -> usize {
        self.table.live_count()
    }

    /// The per-process task limit and how the host enforces it (workspace_info, start-up).
    pub(crate) fn pids_isolation(&self) -> codespace_runner_process::PidsIsolation {
        self.table.pids_isolation()
    }
}

impl Drop for Processes {
    /// Exit watchers die with their runtime (and may hold the table); the temp dirs must not
    /// outlive the gateway.
    fn drop(&mut self) {
        self.remove_tmp_dirs();
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

pub(crate) fn status_result(id: &str, info: &ProcessInfo) -> ProcessStatusResult {
    ProcessStatusResult {
        network: None,
        process_id: id.to_string(),
        state: info.state.as_str().to_string(),
        exit_code: info.exit_code,
        termination: info.termination.map(|t| t.as_str().to_string()),
        signal: info.signal,
        output_total: info.output_total,
        output_retained_from: info.output_retained_from,
        eof: info.eof,
        tty: info.tty,
    }
}

/// Everything needed to keep the store and the lease in step with a process after it exits.
pub(crate) struct ExitWatch {
    pub(crate) table: ProcessTable<Owner>,
    pub(crate) leases: Arc<Leases>,
    pub(crate) store: Option<Arc<Store>>,
    pub(crate) row: ProcessRow,
    pub(crate) tmp_dir: Option<PathBuf>,
    /// The task serving the relay's control socket: stopped when the process exits, which
    /// closes the server's end, so the relay exits too.
    pub(crate) proxy_control: Option<tokio::task::AbortHandle>,
    /// The operation ledger's record of the files the command changed (issue 31).
    pub(crate) ledger: Option<crate::command_ledger::CommandLedger>,
}

impl ExitWatch {
    pub(crate) async fn run(self) {
        let id = self.row.process_id.clone();
        let info = self.table.wait_exit(&id).await;
        if let Some(control) = &self.proxy_control {
            control.abort();
        }
        self.leases.release_process(&self.row.workspace, &id);
        remove_tmp(self.tmp_dir.as_deref());
        let Some(store) = self.store else { return };
        let mut row = self.row;
        row.ended_ms = Some(codespace_store::now_ms());
        match info {
            Ok(info) => {
                row.state = info.state.as_str().to_string();
                row.exit_code = info.exit_code.map(i64::from);
                row.termination = info.termination.map(|t| t.as_str().to_string());
            }
            Err(_) => {
                row.state = "unknown".into();
            }
        }
        if let Err(e) = store.upsert_process(&row) {
            tracing::error!(process_id = %id, error = %e, "cannot record process exit");
        }
        if let Some(ledger) = self.ledger {
            ledger.record(store, id).await;
        }
    }
}
