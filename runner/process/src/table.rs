//! The process table: spawns, looks up, reads, signals and evicts managed processes.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use rustix::process::Signal;

use crate::cgroup::{Cgroups, PidsIsolation};
use crate::error::{ProcError, SpawnError};
use crate::output::Output;
use crate::pipe::{ExecPlan, pump, spawn_pipe, spawn_pipe_lean};
use crate::proc::{Proc, ProcIdentity, Stdin};
use crate::pty::{PtyPlan, read_loop, spawn_pty};
use crate::resolve::{check_cwd, display_name, resolve_program};
use crate::signals::signal_group;
use crate::spare::{HandOver, Spares};
use crate::supervisor::{LiveSlot, Prune, Reaper, Supervision, supervise, watch_exit};
use crate::types::{
    ExitHook, ProcessInfo, ReadChunk, ReadWindow, Registration, SpawnOptions, SpawnSpec, Spawned,
    Stream, TableLimits, Termination,
};

/// How long `shutdown` waits for each killed process to be reaped.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(5);

/// One handle of the table and its starter's metadata (evicted together).
struct Slot<M> {
    proc: Arc<Proc>,
    meta: Arc<M>,
}

/// Shared state behind a [`ProcessTable`].
pub(crate) struct Inner<M> {
    limits: TableLimits,
    procs: Mutex<HashMap<String, Slot<M>>>,
    live: Arc<AtomicUsize>,
    cgroups: Arc<Cgroups>,
    /// Launchers started ahead ([`crate::Launcher::warm_spare`]).
    spares: Arc<Spares>,
}

impl<M> Inner<M> {
    fn procs(&self) -> MutexGuard<'_, HashMap<String, Slot<M>>> {
        self.procs.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<M: Send + Sync> Prune for Inner<M> {
    fn prune(&self) {
        let now = Instant::now();
        let mut evicted = Vec::new();
        {
            let mut procs = self.procs();
            let mut exited: Vec<(Instant, String)> = procs
                .iter()
                .filter_map(|(id, s)| s.proc.exited_at().map(|at| (at, id.clone())))
                .collect();
            exited.sort();
            let expired = exited
                .iter()
                .take_while(|(at, _)| now.duration_since(*at) >= self.limits.exited_ttl)
                .count();
            let excess = exited.len().saturating_sub(self.limits.max_exited_kept);
            for (_, id) in exited.iter().take(expired.max(excess)) {
                evicted.extend(procs.remove(id));
            }
        }
        // The metadata is dropped outside the lock: its drop may do work (remove a temp dir).
        drop(evicted);
    }
}

/// Table of managed child processes: the one registry of the processes it started. `M` is what
/// the starter keeps about each process (who started it, for what); it lives exactly as long as
/// the process's handle (see [`ProcessTable::spawn_owned`]). Cheap to clone (shared state
/// inside).
pub struct ProcessTable<M = ()> {
    inner: Arc<Inner<M>>,
}

impl<M> Clone for ProcessTable<M> {
    fn clone(&self) -> Self {
        ProcessTable {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<M> std::fmt::Debug for ProcessTable<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessTable")
            .field("limits", &self.inner.limits)
            .field("live", &self.inner.live.load(Ordering::Acquire))
            .finish_non_exhaustive()
    }
}

/// A child one of the backends started.
enum Started {
    Pty(crate::pty::PtyChild),
    Pipe(Box<crate::pipe::PipeChild>),
}

/// What the OS is asked to run after applying the launcher.
struct Plan {
    program: PathBuf,
    arg0: OsString,
    args: Vec<String>,
    env: Vec<(String, String)>,
    /// The launcher's descriptors the child keeps across `exec`.
    inherit_fds: Vec<std::os::fd::RawFd>,
    /// The launcher does the pre-`exec` steps itself ([`crate::Launcher::self_start`]).
    self_start: bool,
    /// A warm spare may run it ([`crate::Launcher::warm_spare`]).
    warm_spare: bool,
    /// The spare's shape ([`crate::Launcher::spare_args`]).
    spare_args: Vec<String>,
    /// See [`crate::Launcher::recycle_network`].
    recycle_network: bool,
}

fn plan_for(spec: &SpawnSpec, first: &str) -> Result<Plan, SpawnError> {
    let resolved = resolve_program(first, &spec.cwd, &spec.env)?;
    let rest: Vec<String> = spec.argv.iter().skip(1).cloned().collect();
    let Some(launcher) = &spec.launcher else {
        return Ok(Plan {
            program: resolved,
            arg0: OsString::from(first),
            args: rest,
            env: spec.env.clone(),
            inherit_fds: Vec::new(),
            self_start: false,
            warm_spare: false,
            spare_args: Vec::new(),
            recycle_network: false,
        });
    };
    let launcher_str = launcher.program.to_string_lossy().into_owned();
    let program = resolve_program(&launcher_str, &spec.cwd, &spec.env).map_err(|_| {
        SpawnError::SpawnFailed(format!(
            "the sandbox launcher is not available: {}",
            display_name(&launcher_str)
        ))
    })?;
    let mut args = launcher.args.clone();
    args.push("--".to_owned());
    args.extend(spec.argv.iter().cloned());
    let mut env = spec.env.clone();
    env.extend(launcher.env.iter().cloned());
    Ok(Plan {
        program,
        arg0: OsString::from(launcher_str),
        args,
        env,
        inherit_fds: launcher
            .inherit_fds
            .iter()
            .map(crate::types::InheritedFd::raw)
            .collect(),
        self_start: launcher.self_start,
        warm_spare: launcher.self_start && launcher.warm_spare,
        spare_args: launcher.spare_args.clone(),
        recycle_network: launcher.recycle_network,
    })
}

/// Inserts the self-start arguments ([`crate::Launcher::self_start`]) before the `--` that ends
/// the launcher's own arguments, and adds the cgroup descriptors to those the child inherits.
fn add_self_start(plan: &mut Plan, join: &crate::cgroup::JoinFds) {
    let at = plan
        .args
        .iter()
        .position(|a| a == "--")
        .unwrap_or(plan.args.len());
    let mut extra = Vec::new();
    for fd in join.raw() {
        extra.push(crate::types::SELF_START_CGROUP_ARG.to_owned());
        extra.push(fd.to_string());
        plan.inherit_fds.push(fd);
    }
    extra.push(crate::types::SELF_START_PARENT_ARG.to_owned());
    extra.push(rustix::process::getpid().as_raw_nonzero().get().to_string());
    plan.args.splice(at..at, extra);
}

impl ProcessTable {
    /// An empty table with these limits that keeps no metadata of its own per process (see
    /// [`ProcessTable::with_metadata`]). With `limits.cgroups`, it sets up its cgroups here
    /// (a few writes under `/sys/fs/cgroup`; blocking, call it at start-up).
    pub fn new(limits: TableLimits) -> ProcessTable {
        ProcessTable::with_metadata(limits)
    }
}

impl<M: Default + Send + Sync + 'static> ProcessTable<M> {
    /// Starts a process with default metadata. On error nothing is running.
    pub async fn spawn(&self, spec: SpawnSpec) -> Result<Spawned, SpawnError> {
        self.spawn_with_exit_hook(spec, None).await
    }

    /// Starts a process whose `on_exit` runs once it has exited and been reaped, before its exit
    /// becomes observable: before [`ProcessTable::status`] says `exited`, before
    /// [`ProcessTable::wait_exit`] resolves and before a read reports `eof`. A caller that frees a
    /// resource there (a lease) is sure no observer of the exit still finds it held. Not called
    /// when the spawn fails.
    pub async fn spawn_with_exit_hook(
        &self,
        spec: SpawnSpec,
        on_exit: Option<ExitHook>,
    ) -> Result<Spawned, SpawnError> {
        self.spawn_with(
            spec,
            SpawnOptions {
                on_exit,
                separate_stderr: false,
            },
        )
        .await
    }

    /// Starts a process with [`SpawnOptions`] (the exit hook, see
    /// [`ProcessTable::spawn_with_exit_hook`], and whether stderr is kept apart) and default
    /// metadata.
    pub async fn spawn_with(
        &self,
        spec: SpawnSpec,
        options: SpawnOptions,
    ) -> Result<Spawned, SpawnError> {
        self.spawn_owned(spec, options, M::default()).await
    }
}

impl<M: Send + Sync + 'static> ProcessTable<M> {
    /// An empty table with these limits whose processes each carry an `M` (see
    /// [`ProcessTable::spawn_owned`]). With `limits.cgroups`, it sets up its cgroups here
    /// (a few writes under `/sys/fs/cgroup`; blocking, call it at start-up).
    pub fn with_metadata(limits: TableLimits) -> ProcessTable<M> {
        let cgroups = Arc::new(Cgroups::setup(limits.max_pids, limits.cgroups));
        ProcessTable {
            inner: Arc::new(Inner {
                limits,
                procs: Mutex::new(HashMap::new()),
                live: Arc::new(AtomicUsize::new(0)),
                cgroups,
                spares: Arc::new(Spares::default()),
            }),
        }
    }

    /// The per-process task limit and how this host enforces it.
    pub fn pids_isolation(&self) -> PidsIsolation {
        self.inner.cgroups.isolation()
    }

    /// The limits this table enforces.
    pub fn limits(&self) -> &TableLimits {
        &self.inner.limits
    }

    /// Starts a process with [`SpawnOptions`] and registers `meta` beside it: who started it
    /// and why, returned by [`ProcessTable::registration`] and dropped when the handle is
    /// evicted (or right away when the spawn fails). On error nothing is running.
    pub async fn spawn_owned(
        &self,
        spec: SpawnSpec,
        options: SpawnOptions,
        meta: M,
    ) -> Result<Spawned, SpawnError> {
        let SpawnOptions {
            on_exit,
            separate_stderr,
        } = options;
        let first = spec
            .argv
            .first()
            .filter(|a| !a.is_empty())
            .ok_or(SpawnError::InvalidCommand)?;
        self.inner.prune();
        let slot = LiveSlot::reserve(&self.inner.live, self.inner.limits.max_live)
            .ok_or(SpawnError::LimitReached)?;
        check_cwd(&spec.cwd)?;
        let mut plan = plan_for(&spec, first)?;
        let steps = crate::steps::wanted(&plan.env).then(crate::steps::monotonic_ns);
        let mut cgroup = self.inner.cgroups.for_process().map_err(|err| {
            tracing::warn!(%err, "cannot create a process cgroup");
            SpawnError::SpawnFailed("could not create the process's cgroup".to_owned())
        })?;
        if let Some(before_cgroup) = steps {
            crate::steps::add_server_marks(&mut plan.env, before_cgroup);
        }
        let join = cgroup.as_ref().map(|c| c.join_fds()).unwrap_or_default();
        let limits = &self.inner.limits;
        let timeout = spec
            .timeout
            .map_or(limits.default_timeout, |t| t.min(limits.default_timeout));
        let ident = |pid| ProcIdentity {
            id: format!("proc-{}", uuid::Uuid::new_v4()),
            pid,
            owner: spec.owner.clone(),
            argv: spec.argv.clone(),
        };

        let mut network = None;
        let started = if spec.tty {
            spawn_pty(&PtyPlan {
                program: &plan.program,
                arg0: &plan.arg0,
                args: &plan.args,
                cwd: &spec.cwd,
                env: &plan.env,
                join,
                inherit_fds: &plan.inherit_fds,
            })
            .map(Started::Pty)
        } else if plan.self_start {
            add_self_start(&mut plan, &join);
            let spare = if plan.warm_spare {
                self.inner.spares.take(&plan.program, &plan.spare_args)
            } else {
                None
            };
            // Only a namespace whose every process is provably gone goes back: the cgroup's
            // removal says so (see `spare.rs`).
            let take_network = plan.recycle_network && cgroup.is_some();
            let warm = spare.and_then(|spare| {
                spare
                    .hand_over(
                        &HandOver {
                            args: &plan.args,
                            env: &plan.env,
                            cwd: &spec.cwd,
                            fds: &plan.inherit_fds,
                        },
                        take_network,
                    )
                    .map_err(|err| tracing::debug!(%err, "starting the command cold"))
                    .ok()
            });
            let started = match warm {
                Some((child, taken)) => {
                    network = taken;
                    Ok(child)
                }
                None => spawn_pipe_lean(&ExecPlan {
                    program: &plan.program,
                    arg0: &plan.arg0,
                    args: &plan.args,
                    cwd: &spec.cwd,
                    env: &plan.env,
                    join: crate::cgroup::JoinFds::default(),
                    inherit_fds: &plan.inherit_fds,
                }),
            };
            if plan.warm_spare {
                // The next command's launcher, started ahead (it gets nothing of this one).
                self.inner
                    .spares
                    .refill(&plan.program, &plan.arg0, &plan.spare_args);
            }
            started.map(|c| Started::Pipe(Box::new(c)))
        } else {
            spawn_pipe(&ExecPlan {
                program: &plan.program,
                arg0: &plan.arg0,
                args: &plan.args,
                cwd: &spec.cwd,
                env: &plan.env,
                join,
                inherit_fds: &plan.inherit_fds,
            })
            .map(|c| Started::Pipe(Box::new(c)))
        };
        if let Some(cg) = cgroup.as_mut() {
            cg.spawned();
        }
        let started = match started {
            Ok(s) => s,
            Err(err) => {
                if let Some(cg) = &cgroup {
                    let _ = cg.remove_when_empty().await;
                }
                return Err(err);
            }
        };
        let (proc, reaper) = match started {
            Started::Pty(child) => {
                let proc = Arc::new(Proc::new(
                    ident(child.pid),
                    // The terminal reader, and the exit itself: `eof` implies the exit is recorded.
                    Output::new(limits.ring_bytes, 2),
                    Stdin::Pty(Arc::new(Mutex::new(Some(child.writer)))),
                    Some(child.master),
                    cgroup,
                ));
                let reader_proc = Arc::clone(&proc);
                let reader = child.reader;
                let started = std::thread::Builder::new()
                    .name("proc-pty-read".to_owned())
                    .spawn(move || read_loop(reader, reader_proc));
                if let Err(err) = started {
                    tracing::warn!(%err, "could not start the terminal reader");
                    proc.output.force_finish();
                    proc.kill_for(Termination::Terminated, Signal::KILL);
                }
                (proc, Reaper::Raw(child.pid))
            }
            Started::Pipe(child) => {
                let child = *child;
                let stdin = Stdin::Pipe(tokio::sync::Mutex::new(Some(child.stdin)));
                let proc = if separate_stderr {
                    // Each stream: its pump and the exit itself.
                    Proc::new(
                        ident(child.pid),
                        Output::new(limits.ring_bytes, 2),
                        stdin,
                        None,
                        cgroup,
                    )
                    .with_stderr(Output::new(limits.ring_bytes, 2))
                } else {
                    // stdout, stderr, and the exit itself: `eof` implies the exit is recorded.
                    Proc::new(
                        ident(child.pid),
                        Output::new(limits.ring_bytes, 3),
                        stdin,
                        None,
                        cgroup,
                    )
                };
                let proc = Arc::new(proc);
                tokio::spawn(pump(child.stdout, Arc::clone(&proc), Stream::Stdout));
                tokio::spawn(pump(child.stderr, Arc::clone(&proc), Stream::Stderr));
                let reaper = match child.child {
                    Some(tokio_child) => Reaper::Pipe(tokio_child),
                    None => Reaper::Raw(child.pid),
                };
                (proc, reaper)
            }
        };
        let exit_rx = match watch_exit(proc.pid) {
            Ok(rx) => rx,
            Err(err) => {
                // Without a watcher the exit would never be seen: kill it and let tokio or a
                // best-effort reap clean up.
                signal_group(proc.pid, Signal::KILL);
                if let Reaper::Pipe(mut child) = reaper {
                    let _ = child.wait().await;
                }
                return Err(SpawnError::SpawnFailed(format!(
                    "could not watch the process: {err}"
                )));
            }
        };
        let spawned = Spawned {
            id: proc.id.clone(),
            pid: proc.pid,
        };
        self.inner.procs().insert(
            spawned.id.clone(),
            Slot {
                proc: Arc::clone(&proc),
                meta: Arc::new(meta),
            },
        );
        tokio::spawn(supervise(Supervision {
            proc,
            reaper,
            exit_rx,
            timeout,
            grace: limits.kill_grace,
            slot,
            table: {
                let weak: Weak<Inner<M>> = Arc::downgrade(&self.inner);
                weak as Weak<dyn Prune>
            },
            on_exit,
            network,
        }));
        Ok(spawned)
    }

    fn get(&self, id: &str) -> Result<Arc<Proc>, ProcError> {
        self.inner.prune();
        self.inner
            .procs()
            .get(id)
            .map(|s| Arc::clone(&s.proc))
            .ok_or(ProcError::NotFound)
    }

    /// The process `id` with its starter's metadata (a snapshot of its status beside it).
    /// [`ProcError::NotFound`] once the handle was evicted.
    pub fn registration(&self, id: &str) -> Result<Registration<M>, ProcError> {
        self.inner.prune();
        let slot = self
            .inner
            .procs()
            .get(id)
            .map(|s| (Arc::clone(&s.proc), Arc::clone(&s.meta)));
        let (proc, meta) = slot.ok_or(ProcError::NotFound)?;
        Ok(Registration {
            info: proc.info(),
            meta,
        })
    }

    /// Every process the table still holds (running or exited, not yet evicted), with its
    /// metadata, in no particular order.
    pub fn registrations(&self) -> Vec<Registration<M>> {
        self.inner.prune();
        let slots: Vec<(Arc<Proc>, Arc<M>)> = self
            .inner
            .procs()
            .values()
            .map(|s| (Arc::clone(&s.proc), Arc::clone(&s.meta)))
            .collect();
        slots
            .into_iter()
            .map(|(proc, meta)| Registration {
                info: proc.info(),
                meta,
            })
            .collect()
    }

    /// Reads combined output from `cursor`. With `wait`, long-polls until bytes past the cursor
    /// arrive, collection ends, or the wait elapses.
    pub async fn read(
        &self,
        id: &str,
        cursor: u64,
        wait: Option<Duration>,
    ) -> Result<ReadChunk, ProcError> {
        let proc = self.get(id)?;
        let mut rx = proc.output.subscribe();
        let deadline = wait.map(|w| tokio::time::Instant::now() + w);
        loop {
            let chunk = proc.output.read(cursor);
            if !chunk.data.is_empty() || chunk.eof {
                return Ok(chunk);
            }
            let Some(deadline) = deadline else {
                return Ok(chunk);
            };
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => return Ok(chunk),
            }
        }
    }

    /// Reads a window of stdout (merged output unless stderr was kept apart) and, when stderr
    /// was kept apart and `stderr` is given, a window of stderr. With `wait`, long-polls until
    /// either returns bytes, both reach their end, or the wait elapses.
    pub async fn read_windows(
        &self,
        id: &str,
        out: ReadWindow,
        stderr: Option<ReadWindow>,
        wait: Option<Duration>,
    ) -> Result<(ReadChunk, Option<ReadChunk>), ProcError> {
        let proc = self.get(id)?;
        let err_out = proc.stderr.as_ref().zip(stderr);
        let mut rx = proc.output.subscribe();
        let mut rx_err = err_out.map(|(o, _)| o.subscribe());
        let deadline = wait.map(|w| tokio::time::Instant::now() + w);
        loop {
            let a = proc.output.read_window(out.cursor, out.max_bytes, out.tail);
            let b = err_out.map(|(o, w)| o.read_window(w.cursor, w.max_bytes, w.tail));
            let data = !a.data.is_empty() || b.as_ref().is_some_and(|c| !c.data.is_empty());
            let done = a.eof && b.as_ref().is_none_or(|c| c.eof);
            if data || done {
                return Ok((a, b));
            }
            let Some(deadline) = deadline else {
                return Ok((a, b));
            };
            let changed = async {
                match rx_err.as_mut() {
                    Some(e) => {
                        tokio::select! {
                            r = rx.changed() => r.is_ok(),
                            r = e.changed() => r.is_ok(),
                        }
                    }
                    None => rx.changed().await.is_ok(),
                }
            };
            match tokio::time::timeout_at(deadline, changed).await {
                Ok(true) => {}
                Ok(false) | Err(_) => return Ok((a, b)),
            }
        }
    }

    /// Writes bytes to the process's stdin (the terminal for a PTY process).
    pub async fn write_stdin(&self, id: &str, data: &[u8]) -> Result<(), ProcError> {
        self.get(id)?.write_stdin(data).await
    }

    /// A status snapshot.
    pub async fn status(&self, id: &str) -> Result<ProcessInfo, ProcError> {
        Ok(self.get(id)?.info())
    }

    /// Resizes a PTY process's terminal.
    pub async fn resize(&self, id: &str, rows: u16, cols: u16) -> Result<(), ProcError> {
        self.get(id)?.resize(rows, cols)
    }

    /// SIGTERM to the process group (and, for a PTY, its session), SIGKILL after `kill_grace`.
    /// Returns once SIGTERM is sent. Terminating an exited process is a no-op.
    pub async fn terminate(&self, id: &str) -> Result<(), ProcError> {
        let proc = self.get(id)?;
        proc.begin_kill(Termination::Terminated, self.inner.limits.kill_grace);
        Ok(())
    }

    /// Like [`ProcessTable::terminate`], then waits (at most the kill grace plus `margin`) for the
    /// process to exit and returns its status: `exited` unless it outlived even SIGKILL's grace
    /// (then `running`; the kill goes on). Terminating an exited process returns its final status.
    pub async fn terminate_and_wait(
        &self,
        id: &str,
        margin: Duration,
    ) -> Result<ProcessInfo, ProcError> {
        let proc = self.get(id)?;
        let grace = self.inner.limits.kill_grace;
        proc.begin_kill(Termination::Terminated, grace);
        let _ = tokio::time::timeout(grace.saturating_add(margin), proc.wait_exited()).await;
        Ok(proc.info())
    }

    /// Resolves when the process has exited (and been reaped); returns its final status.
    pub async fn wait_exit(&self, id: &str) -> Result<ProcessInfo, ProcError> {
        let proc = self.get(id)?;
        proc.wait_exited().await;
        Ok(proc.info())
    }

    /// Number of processes that have not exited yet.
    pub fn live_count(&self) -> usize {
        self.inner.live.load(Ordering::Acquire)
    }

    /// SIGKILLs every process group (and PTY session) the table owns and waits for them to be
    /// reaped; kills every warm spare and starts no more.
    pub async fn shutdown(&self) {
        self.inner.spares.close();
        let procs: Vec<Arc<Proc>> = self
            .inner
            .procs()
            .values()
            .map(|s| Arc::clone(&s.proc))
            .collect();
        for proc in &procs {
            proc.kill_for(Termination::Terminated, Signal::KILL);
        }
        for proc in &procs {
            if tokio::time::timeout(SHUTDOWN_WAIT, proc.wait_exited())
                .await
                .is_err()
            {
                tracing::warn!(id = %proc.id, "process not reaped after shutdown kill");
            }
        }
    }
}
