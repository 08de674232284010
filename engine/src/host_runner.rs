//! [`HostRunner`]: the in-process [`Runner`], today's code paths behind the one seam. It serves
//! the workspaces of this host by id (their opened roots), reads through the gateway's
//! [`FileVersions`] (the no-wait read and the version cache), walks and greps with the runner
//! crates on the blocking pool, commits patches with `runner/fs`'s journaled transaction, and runs
//! processes in its table, the only process table of the server (sandboxed through
//! `runner/sandbox`'s helper when the request carries a plan: masks, write scope, network,
//! private temp dir; the exec handshake awaited before `spawn` answers). A `network: proxy`
//! command's relay control socket is handed over in-process ([`HostRunner::stash_relay`]).
//! `to_tool_error`/`from_tool_error` map its errors to the wire's and back, code and message.

use crate::error::{ErrorCode, ToolError};
use crate::file_versions::FileVersions;
use crate::processes::{TmpDir, make_tmp_dir, remove_tmp};
use codespace_runner_api::{self as api, BoxFuture, EventSink, Runner, RunnerError, RunnerResult};
use codespace_runner_fs::txn::{self, Change};
use codespace_runner_fs::{FsError, RelPath, Root, WalkLimits};
use codespace_runner_process::{
    InheritedFd, ProcError, ProcessTable, ReadWindow, SpawnError, SpawnOptions, SpawnSpec,
    TableLimits,
};
use codespace_runner_sandbox::{HelperOutcome, SandboxCommand};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

/// What the host runner keeps beside each process in its table (evicted with it).
#[derive(Debug, Default)]
pub(crate) struct HostProc {
    /// The command's private temp dir: removed once it exited and, at the latest, on eviction.
    tmp: Option<TmpDir>,
    stage: Option<TmpDir>, // a `before_patch` hook's staged view, removed likewise
}

/// The runner of the host the server runs on (and, in `codespace worker`, of the worker's host).
pub struct HostRunner {
    roots: RwLock<HashMap<String, (Arc<Root>, PathBuf)>>,
    file_versions: Arc<FileVersions>,
    /// The process table: every process this runner started, and only here.
    table: ProcessTable<HostProc>,
    helper_exe: Mutex<Option<PathBuf>>,
    /// Test hook: every plan asks the helper to act as if Landlock were missing (refuse more).
    force_no_landlock: AtomicBool,
    /// Relay control sockets of `network: proxy` commands, handed over before their spawn.
    relays: Mutex<HashMap<String, InheritedFd>>,
    sink: Arc<Mutex<Option<EventSink>>>,
}

impl std::fmt::Debug for HostRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostRunner").finish_non_exhaustive()
    }
}

impl HostRunner {
    /// A runner reading through `file_versions`, its processes limited by `limits`, sandboxed
    /// through the helper `helper_exe` (none: a spawn with a sandbox plan fails closed).
    pub(crate) fn new(
        file_versions: Arc<FileVersions>,
        limits: TableLimits,
        helper_exe: Option<PathBuf>,
    ) -> HostRunner {
        HostRunner {
            roots: RwLock::new(HashMap::new()),
            file_versions,
            table: ProcessTable::with_metadata(limits),
            helper_exe: Mutex::new(helper_exe),
            force_no_landlock: AtomicBool::new(false),
            relays: Mutex::new(HashMap::new()),
            sink: Arc::new(Mutex::new(None)),
        }
    }

    /// A runner of its own (a worker's, or a test's): processes limited by the operator's
    /// `limits`, sandboxed through `helper_exe`, serving each `(id, root)` workspace.
    pub fn serving(
        limits: &crate::config::Limits,
        helper_exe: Option<PathBuf>,
        workspaces: &[(String, PathBuf)],
    ) -> Result<HostRunner, String> {
        let runner = HostRunner::new(
            Arc::new(FileVersions::new()),
            crate::processes::table_limits(limits),
            helper_exe,
        );
        for (id, path) in workspaces {
            let root = Root::open(path).map_err(|e| format!("workspace {id}: {e}"))?;
            runner.add_workspace(id, Arc::new(root), path.clone());
        }
        Ok(runner)
    }

    /// Sets the test hook that makes every sandbox plan refuse as if Landlock were missing.
    pub(crate) fn set_force_no_landlock(&self, on: bool) {
        self.force_no_landlock.store(on, Ordering::Relaxed);
    }

    /// Hands over the relay end of a `network: proxy` command's control socket; the returned
    /// name goes in its [`api::SandboxSpec::proxy_relay`]. Taken by the spawn that names it.
    pub(crate) fn stash_relay(&self, fd: InheritedFd) -> String {
        let name = format!("relay-{}", uuid::Uuid::new_v4());
        self.relays
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.clone(), fd);
        name
    }

    /// Drops a stashed relay end its spawn never took.
    pub(crate) fn drop_relay(&self, name: &str) {
        self.relays
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name);
    }

    /// Number of processes that have not exited yet.
    pub(crate) fn live_count(&self) -> usize {
        self.table.live_count()
    }

    /// The per-process task limit and how this host enforces it.
    pub(crate) fn pids_isolation(&self) -> codespace_runner_process::PidsIsolation {
        self.table.pids_isolation()
    }

    /// Kills every process group the table owns and removes their temp dirs.
    pub async fn shutdown(&self) {
        self.table.shutdown().await;
        self.remove_tmp_dirs();
    }

    fn remove_tmp_dirs(&self) {
        for r in self.table.registrations() {
            remove_tmp(r.meta.tmp.as_ref().map(TmpDir::path));
            remove_tmp(r.meta.stage.as_ref().map(TmpDir::path));
        }
    }

    /// Sets the sandbox helper (the `codespace` binary; `None`: sandboxed spawns fail closed).
    pub(crate) fn set_helper_exe(&self, exe: Option<PathBuf>) {
        *self
            .helper_exe
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = exe;
    }

    /// The process table.
    async fn table(&self) -> RunnerResult<&ProcessTable<HostProc>> {
        Ok(&self.table)
    }

    /// Serves the workspace `id`: `root` opened at the absolute path `path`.
    pub(crate) fn add_workspace(&self, id: &str, root: Arc<Root>, path: PathBuf) {
        self.roots
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id.to_string(), (root, path));
    }

    fn workspace(&self, id: &str) -> RunnerResult<(Arc<Root>, PathBuf)> {
        self.roots
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
            .cloned()
            .ok_or_else(|| RunnerError::internal(format!("no workspace {id} on this runner")))
    }

    fn root(&self, id: &str) -> RunnerResult<Arc<Root>> {
        self.roots
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
            .map(|(r, _)| Arc::clone(r))
            .ok_or_else(|| RunnerError::internal(format!("no workspace {id} on this runner")))
    }

    /// Reports `event` to the subscriber, if any.
    fn emit(sink: &Mutex<Option<EventSink>>, event: api::Event) {
        let sink = sink.lock().unwrap_or_else(PoisonError::into_inner).clone();
        if let Some(sink) = sink {
            sink(event);
        }
    }
}

impl Drop for HostRunner {
    /// Exit watchers die with their runtime; the temp dirs must not outlive the runner.
    fn drop(&mut self) {
        self.remove_tmp_dirs();
    }
}

fn rel(path: &str) -> RunnerResult<RelPath> {
    RelPath::parse(path).map_err(fs_err)
}

/// A `runner/fs` error as the runner's (the message is the one the wire carries).
pub(crate) fn fs_err(e: FsError) -> RunnerError {
    from_tool_error(ToolError::from(e))
}

/// A tool error of the runner's work as a [`RunnerError`] (same code, same message).
pub(crate) fn from_tool_error(e: ToolError) -> RunnerError {
    let message = e.message;
    match e.code {
        ErrorCode::PathEscape => RunnerError::PathEscape { message },
        ErrorCode::FileNotFound => RunnerError::NotFound { message },
        ErrorCode::PathNotDirectory => RunnerError::NotDirectory { message },
        ErrorCode::SymlinkRejected => RunnerError::Symlink { message },
        ErrorCode::SpecialFileRejected => RunnerError::SpecialFile { message },
        ErrorCode::FileTooLarge => RunnerError::TooLarge { message },
        ErrorCode::StaleRead => RunnerError::Stale { message },
        ErrorCode::AddFileExists => RunnerError::AddFileExists { message },
        ErrorCode::MoveDestinationExists => RunnerError::MoveDestinationExists { message },
        ErrorCode::FileOperationFailed => RunnerError::FileOperation { message },
        ErrorCode::InvalidCommand => RunnerError::InvalidCommand { message },
        ErrorCode::InvalidArguments => RunnerError::InvalidArguments { message },
        ErrorCode::ProcessSpawnFailed => RunnerError::SpawnFailed { message },
        ErrorCode::ProcessNotFound => RunnerError::ProcessNotFound { message },
        ErrorCode::ProcessNotTty => RunnerError::ProcessNotTty { message },
        ErrorCode::ProcessNotRunning => RunnerError::ProcessNotRunning { message },
        ErrorCode::WorkspaceBusy => RunnerError::Busy { message },
        _ => RunnerError::Internal { message },
    }
}

pub(crate) use convert::to_tool_error;

fn proc_err(e: &ProcError) -> RunnerError {
    from_tool_error(crate::processes::proc_error(e))
}

fn spawn_err(e: &SpawnError) -> RunnerError {
    from_tool_error(crate::processes::spawn_error(e))
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> RunnerResult<T> + Send + 'static,
) -> RunnerResult<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| RunnerError::internal(format!("file task: {e}")))?
}

fn change(c: &api::FileChange) -> RunnerResult<Change> {
    Ok(match c {
        api::FileChange::Write { path, data, mode } => Change::Write {
            path: rel(path)?,
            data: data.clone(),
            mode: *mode,
        },
        api::FileChange::Delete { path } => Change::Delete { path: rel(path)? },
        api::FileChange::Move {
            from,
            to,
            data,
            mode,
        } => Change::Move {
            from: rel(from)?,
            to: rel(to)?,
            data: data.clone(),
            mode: *mode,
        },
    })
}

fn commit_err(e: txn::CommitError) -> RunnerError {
    match e {
        txn::CommitError::Refused { cause }
        | txn::CommitError::RolledBack { cause }
        | txn::CommitError::Partial { cause, .. } => fs_err(cause),
        txn::CommitError::Journal { message } => RunnerError::Stale { message },
        other => RunnerError::FileOperation {
            message: other.to_string(),
        },
    }
}

impl Runner for HostRunner {
    fn read(&self, req: api::ReadRequest) -> BoxFuture<'_, RunnerResult<api::FileWindow>> {
        Box::pin(async move {
            let root = self.root(&req.workspace)?;
            let path = rel(&req.path)?;
            let w = self
                .file_versions
                .read(&root, &path, req.offset, req.limit, req.max_hash_bytes)
                .await
                .map_err(from_tool_error)?;
            Ok(api::FileWindow {
                data: w.data,
                size: w.size,
                version: w.version.as_str().to_string(),
                links: w.links,
            })
        })
    }

    fn version(&self, req: api::VersionRequest) -> BoxFuture<'_, RunnerResult<Option<String>>> {
        Box::pin(async move {
            let root = self.root(&req.workspace)?;
            let path = rel(&req.path)?;
            let v = self
                .file_versions
                .version(&root, &path, req.max_hash_bytes)
                .await
                .map_err(from_tool_error)?;
            Ok(v.map(|v| v.as_str().to_string()))
        })
    }

    fn stat(&self, req: api::PathRequest) -> BoxFuture<'_, RunnerResult<Option<api::FileStat>>> {
        Box::pin(async move {
            let (root, path) = (self.root(&req.workspace)?, rel(&req.path)?);
            blocking(move || {
                Ok(root.stat(&path).map_err(fs_err)?.map(|m| api::FileStat {
                    kind: kind(m.kind),
                    mode: m.mode,
                    size: m.size,
                    links: m.links,
                    mtime_ms: m.mtime_ms,
                    ino: m.ino,
                }))
            })
            .await
        })
    }

    fn make_dirs(&self, req: api::PathRequest) -> BoxFuture<'_, RunnerResult<()>> {
        Box::pin(async move {
            let (root, path) = (self.root(&req.workspace)?, rel(&req.path)?);
            blocking(move || root.create_dirs(&path).map(drop).map_err(fs_err)).await
        })
    }

    fn walk(&self, req: api::WalkRequest) -> BoxFuture<'_, RunnerResult<api::Listing>> {
        Box::pin(async move {
            let root = self.root(&req.workspace)?;
            let path = rel(&req.path)?;
            let limits = WalkLimits {
                max_depth: usize::try_from(req.max_depth).unwrap_or(usize::MAX),
                max_entries: usize::try_from(req.max_entries).unwrap_or(usize::MAX),
                stat_links: req.stat_links,
            };
            blocking(move || {
                let w = root.walk_under_all(&path, &limits).map_err(fs_err)?;
                let temps = root.temp_names();
                Ok(api::Listing {
                    entries: w
                        .entries
                        .into_iter()
                        .map(|e| api::ListedEntry {
                            temp: crate::index::walk::is_server_temp(temps, &e.path, e.kind),
                            path: e.path,
                            kind: kind(e.kind),
                            ino: e.ino,
                            links: e.links,
                        })
                        .collect(),
                    incomplete: w.incomplete,
                    capped: w.capped,
                    non_utf8_skipped: w.non_utf8_skipped as u64,
                    unlisted: w
                        .unlisted
                        .into_iter()
                        .map(|u| api::UnlistedDir {
                            path: u.path,
                            why: match u.why {
                                codespace_runner_fs::UnlistedWhy::Depth => {
                                    api::UnlistedReason::Depth
                                }
                                codespace_runner_fs::UnlistedWhy::Unreadable => {
                                    api::UnlistedReason::Unreadable
                                }
                                codespace_runner_fs::UnlistedWhy::NonUtf8Name => {
                                    api::UnlistedReason::NonUtf8Name
                                }
                            },
                            name: u.name,
                        })
                        .collect(),
                })
            })
            .await
        })
    }

    fn grep(&self, req: api::GrepRequest) -> BoxFuture<'_, RunnerResult<api::GrepPage>> {
        use codespace_runner_search::{GrepLimits, OpenError, Pattern, PatternOptions, Window};
        Box::pin(async move {
            let root = self.root(&req.workspace)?;
            let opts = PatternOptions {
                regex: req.regex,
                case_insensitive: req.case_insensitive,
                context_lines: usize::try_from(req.context_lines).unwrap_or(usize::MAX),
            };
            let pattern =
                Pattern::new(&req.pattern, &opts).map_err(|e| RunnerError::InvalidArguments {
                    message: e.to_string(),
                })?;
            blocking(move || {
                let open = |p: &String| {
                    let r = RelPath::parse(p).map_err(|_| OpenError::Unreadable)?;
                    root.open_file(&r)
                        .map(|(f, _)| f)
                        .map_err(|_| OpenError::Unreadable)
                };
                let limits = GrepLimits {
                    max_file_bytes: req.max_file_bytes,
                    max_line_chars: usize::try_from(req.max_line_chars).unwrap_or(usize::MAX),
                    max_output_bytes: usize::try_from(req.max_output_bytes).unwrap_or(usize::MAX),
                    ..GrepLimits::default()
                };
                let window = Window {
                    offset: req.offset,
                    max_matches: req.max_matches,
                };
                let o = codespace_runner_search::grep::search(
                    &pattern, &req.files, open, window, &limits,
                );
                Ok(api::GrepPage {
                    matches: o
                        .matches
                        .into_iter()
                        .map(|m| api::GrepMatch {
                            file: m.file as u64,
                            line_number: m.line_number,
                            line: m.line,
                            line_truncated: m.line_truncated,
                            before: m.before,
                            after: m.after,
                        })
                        .collect(),
                    file_counts: o
                        .file_counts
                        .into_iter()
                        .map(|(f, n)| (f as u64, n))
                        .collect(),
                    skipped_binary: o.skipped.binary,
                    skipped_too_large: o.skipped.too_large,
                    skipped_unreadable: o.skipped.unreadable,
                    truncated: o.truncated,
                    next_offset: o.next_offset,
                    files_examined: o.files_examined as u64,
                })
            })
            .await
        })
    }

    fn snapshot(&self, req: api::SnapshotRequest) -> BoxFuture<'_, RunnerResult<Vec<api::Backup>>> {
        Box::pin(async move {
            let root = self.root(&req.workspace)?;
            let changes = req
                .changes
                .iter()
                .map(change)
                .collect::<RunnerResult<Vec<_>>>()?;
            blocking(move || {
                let mut snap = Snapshot(Vec::new());
                match txn::commit(&root, &changes, &mut snap, &mut |_| Ok(())) {
                    Err(txn::CommitError::Journal { message }) if message == SNAPSHOT_ONLY => {
                        Ok(snap.0.iter().map(backup_dto).collect())
                    }
                    Err(e) => Err(commit_err(e)),
                    Ok(_) => Err(RunnerError::internal("a snapshot wrote files")),
                }
            })
            .await
        })
    }

    fn apply(&self, req: api::ApplyRequest) -> BoxFuture<'_, RunnerResult<api::AppliedPatch>> {
        Box::pin(async move {
            let root = self.root(&req.workspace)?;
            let changes = req
                .changes
                .iter()
                .map(change)
                .collect::<RunnerResult<Vec<_>>>()?;
            blocking(move || {
                let mut journal = Journaled(&req.journaled);
                let report = txn::commit(&root, &changes, &mut journal, &mut |_| Ok(()))
                    .map_err(commit_err)?;
                let v = |v: Option<codespace_runner_fs::Version>| v.map(|v| v.as_str().to_string());
                Ok(api::AppliedPatch {
                    files: report
                        .files
                        .into_iter()
                        .map(|f| api::FileVersions {
                            path: f.path.as_str().to_string(),
                            before: v(f.before),
                            after: v(f.after),
                        })
                        .collect(),
                    created_dirs: report
                        .created_dirs
                        .iter()
                        .map(|d| d.as_str().to_string())
                        .collect(),
                })
            })
            .await
        })
    }

    fn restore(&self, req: api::RestoreRequest) -> BoxFuture<'_, RunnerResult<()>> {
        Box::pin(async move {
            let root = self.root(&req.workspace)?;
            let backups = req
                .backups
                .iter()
                .map(|b| {
                    Ok(txn::Backup {
                        path: rel(&b.path)?,
                        before: b.before.clone(),
                    })
                })
                .collect::<RunnerResult<Vec<_>>>()?;
            blocking(move || {
                txn::restore(&root, &backups).map_err(|files| RunnerError::FileOperation {
                    message: format!("could not restore: {}", files.join(", ")),
                })
            })
            .await
        })
    }

    fn spawn(&self, req: api::SpawnRequest) -> BoxFuture<'_, RunnerResult<api::SpawnedProcess>> {
        Box::pin(async move {
            // A relay end handed over for this spawn is taken now, whatever happens next.
            let relay = req
                .sandbox
                .as_ref()
                .and_then(|s| s.proxy_relay.as_ref())
                .and_then(|name| {
                    self.relays
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .remove(name)
                });
            let (_, root_path) = self.workspace(&req.workspace)?;
            let cwd_rel = rel(&req.cwd)?;
            let cwd = if cwd_rel.is_root() {
                root_path.clone()
            } else {
                root_path.join(cwd_rel.as_str())
            };
            let mut env = req.env;
            let mut handshake = None;
            // On any error from here on, `tmp` is dropped and so removed.
            let (mut tmp, mut stage) = (None, None);
            let launcher = match &req.sandbox {
                None => None,
                Some(spec) => {
                    let helper = self
                        .helper_exe
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .clone();
                    let Some(helper) = helper else {
                        return Err(RunnerError::SpawnFailed {
                            message: "command sandbox unavailable: this server has no sandbox \
                                      helper configured"
                                .into(),
                        });
                    };
                    let mut plan = plan(&root_path, spec);
                    plan.force_landlock_unavailable =
                        self.force_no_landlock.load(Ordering::Relaxed);
                    if let Some(names) = &spec.private_tmp {
                        let dir = make_tmp_dir().map_err(from_tool_error)?;
                        let path = dir.path().to_string_lossy().into_owned();
                        for name in names {
                            env.retain(|(k, _)| k != name);
                            env.push((name.clone(), path.clone()));
                        }
                        env.sort();
                        plan.tmp_dir = Some(dir.path().to_path_buf());
                        tmp = Some(dir);
                    }
                    stage = convert::stage_dir(spec).await?;
                    plan.stage_dir = stage.as_ref().map(|d| d.path().to_path_buf());
                    if spec.network == api::SandboxNetwork::Proxy && relay.is_none() {
                        return Err(RunnerError::SpawnFailed {
                            message: "network: proxy needs the gateway's egress proxy beside \
                                      the command, and this runner was handed none"
                                .into(),
                        });
                    }
                    let launch = SandboxCommand {
                        helper,
                        plan,
                        proxy_control: relay.as_ref().map(|fd| Arc::clone(&fd.0)),
                    }
                    .launch()
                    .map_err(|e| RunnerError::SpawnFailed {
                        message: format!("command sandbox unavailable: {e}"),
                    })?;
                    let (shake, launcher) = convert::launcher(launch);
                    handshake = Some(shake);
                    Some(launcher)
                }
            };
            let dirs: Vec<PathBuf> = tmp.iter().chain(&stage).map(|t| t.path().into()).collect();
            let spec = SpawnSpec {
                argv: req.argv,
                cwd,
                env,
                tty: req.tty.is_some(),
                timeout: req.timeout_ms.map(Duration::from_millis),
                launcher,
                owner: req.owner,
            };
            let sink = Arc::clone(&self.sink);
            let opts = SpawnOptions {
                on_exit: Some(Box::new(move |id: &str| {
                    HostRunner::emit(
                        &sink,
                        api::Event::ProcessExited {
                            status: api::ProcessStatus {
                                process_id: id.to_string(),
                                state: api::ProcessState::Exited,
                                exit_code: None,
                                signal: None,
                                termination: None,
                                tty: false,
                                output_total: 0,
                                output_retained_from: 0,
                                eof: false,
                            },
                        },
                    );
                })),
                separate_stderr: req.separate_stderr,
            };
            let table = &self.table;
            // The spec (and with it this side's copy of the handshake's write end) is consumed
            // here: from now on only the helper holds that end.
            let spawned = table
                .spawn_owned(spec, opts, HostProc { tmp, stage })
                .await
                .map_err(|e| spawn_err(&e))?;
            drop(relay);
            if let Some(size) = req.tty {
                let _ = table.resize(&spawned.id, size.rows, size.cols).await;
            }
            // The private temp dir and the stage go as soon as the process exited.
            // A command may have filled its temp dir: removed on the blocking pool.
            if !dirs.is_empty() {
                let (table, id) = (table.clone(), spawned.id.clone());
                tokio::spawn(async move {
                    let _ = table.wait_exit(&id).await;
                    let _ = tokio::task::spawn_blocking(move || {
                        dirs.iter().for_each(|d| remove_tmp(Some(d)));
                    })
                    .await;
                });
            }
            if let Some(h) = handshake {
                let id = spawned.id.clone();
                let exited = async move {
                    let _ = table.wait_exit(&id).await;
                };
                if let HelperOutcome::Refused(why) = h.outcome(exited).await {
                    let _ = table.terminate(&spawned.id).await;
                    return Err(RunnerError::SpawnFailed {
                        message: format!("command sandbox refused to start the command: {why}"),
                    });
                }
            }
            Ok(api::SpawnedProcess {
                process_id: spawned.id,
                pid: spawned.pid,
            })
        })
    }

    fn write_stdin(&self, req: api::StdinRequest) -> BoxFuture<'_, RunnerResult<()>> {
        Box::pin(async move {
            self.table()
                .await?
                .write_stdin(&req.process_id, &req.data)
                .await
                .map_err(|e| proc_err(&e))
        })
    }

    fn resize(&self, req: api::ResizeRequest) -> BoxFuture<'_, RunnerResult<()>> {
        Box::pin(async move {
            self.table()
                .await?
                .resize(&req.process_id, req.size.rows, req.size.cols)
                .await
                .map_err(|e| proc_err(&e))
        })
    }

    fn read_output(&self, req: api::OutputRequest) -> BoxFuture<'_, RunnerResult<api::OutputPage>> {
        Box::pin(async move {
            let window = ReadWindow {
                cursor: req.cursor,
                max_bytes: req
                    .max_bytes
                    .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
                tail: req.tail,
            };
            let wait = Some(Duration::from_millis(req.wait_ms));
            let (out, err) = match req.stream {
                api::OutputStream::Stdout => self
                    .table()
                    .await?
                    .read_windows(&req.process_id, window, None, wait)
                    .await
                    .map(|(o, _)| (Some(o), None)),
                api::OutputStream::Stderr => self
                    .table()
                    .await?
                    .read_windows(&req.process_id, ReadWindow::default(), Some(window), wait)
                    .await
                    .map(|(_, e)| (None, e)),
            }
            .map_err(|e| proc_err(&e))?;
            let c = out.or(err).ok_or_else(|| RunnerError::InvalidArguments {
                message: "this process keeps no separate stderr".into(),
            })?;
            Ok(api::OutputPage {
                data: c.data,
                cursor: c.cursor,
                eof: c.eof,
                output_lost: c.output_lost,
                retained_from: c.retained_from,
            })
        })
    }

    fn wait(&self, req: api::ProcessRef) -> BoxFuture<'_, RunnerResult<api::ProcessStatus>> {
        Box::pin(async move {
            let info = self
                .table()
                .await?
                .wait_exit(&req.process_id)
                .await
                .map_err(|e| proc_err(&e))?;
            Ok(status(&info))
        })
    }

    fn status(&self, req: api::ProcessRef) -> BoxFuture<'_, RunnerResult<api::ProcessStatus>> {
        Box::pin(async move {
            let info = self
                .table()
                .await?
                .status(&req.process_id)
                .await
                .map_err(|e| proc_err(&e))?;
            Ok(status(&info))
        })
    }

    fn terminate(&self, req: api::ProcessRef) -> BoxFuture<'_, RunnerResult<api::ProcessStatus>> {
        Box::pin(async move {
            // Bounded by the kill grace plus a margin: `running` if it outlived even that.
            let info = self
                .table()
                .await?
                .terminate_and_wait(&req.process_id, crate::processes::TERMINATE_MARGIN)
                .await
                .map_err(|e| proc_err(&e))?;
            Ok(status(&info))
        })
    }

    fn probe_sandbox(&self) -> BoxFuture<'_, RunnerResult<api::SandboxProbe>> {
        Box::pin(async move {
            let p = blocking(|| Ok(codespace_runner_sandbox::probe())).await?;
            Ok(api::SandboxProbe {
                pids: Some(convert::pids_probe(self.pids_isolation())),
                landlock_abi: p.landlock_abi,
                seccomp: p.seccomp,
                user_namespaces: p.user_namespaces,
                net_namespaces: p.net_namespaces,
                mount_namespaces: p.mount_namespaces,
            })
        })
    }

    fn subscribe(&self, sink: EventSink) {
        *self.sink.lock().unwrap_or_else(PoisonError::into_inner) = Some(sink);
    }
}

mod convert;
use convert::{Journaled, SNAPSHOT_ONLY, Snapshot, backup_dto, kind, plan, status};

#[cfg(test)]
mod tests;
