//! One managed process: identity, output, lifecycle state, stdin and terminal handles.

use std::io::Write;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use portable_pty::{MasterPty, PtySize};
use rustix::process::Signal;
use tokio::io::AsyncWriteExt;
use tokio::process::ChildStdin;
use tokio::sync::watch;

use crate::cgroup::ProcCgroup;
use crate::error::ProcError;
use crate::output::Output;
use crate::signals::{ExitKind, signal_group, signal_session};
use crate::types::{ProcState, ProcessInfo, Termination};

/// Longest time one `write_stdin` may wait for the child to accept its input.
const STDIN_WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Final status of an exited process.
#[derive(Debug, Clone, Copy)]
struct ExitRecord {
    termination: Termination,
    exit_code: Option<i32>,
    signal: Option<i32>,
    exited_at: Instant,
}

/// Mutable lifecycle state, guarded by one lock so no signal is sent after the pid is reaped.
#[derive(Debug, Default)]
struct Life {
    /// Set when the table itself asked the process to die (`Timeout` or `Terminated`).
    kill_reason: Option<Termination>,
    /// The leader is about to be or has been reaped: its pid/pgid may be reused, never signal again.
    reaped: bool,
    exit: Option<ExitRecord>,
}

/// Where `write_stdin` bytes go.
pub(crate) enum Stdin {
    /// The write end of the child's stdin pipe (`None` once it broke or the process exited).
    Pipe(tokio::sync::Mutex<Option<ChildStdin>>),
    /// The PTY master writer (blocking; used from the blocking pool; `None` once exited).
    Pty(Arc<Mutex<Option<Box<dyn Write + Send>>>>),
}

/// Everything the table knows about one process.
pub(crate) struct Proc {
    pub(crate) id: String,
    pub(crate) pid: u32,
    pub(crate) tty: bool,
    pub(crate) owner: String,
    pub(crate) argv: Vec<String>,
    pub(crate) started_at: SystemTime,
    pub(crate) output: Output,
    /// stderr, when the spawn asked to keep it apart from stdout (pipe mode only).
    pub(crate) stderr: Option<Output>,
    life: Mutex<Life>,
    exited: watch::Sender<bool>,
    stdin: Stdin,
    /// The terminal master (PTY mode; `None` inside once the process exited).
    master: Option<Mutex<Option<Box<dyn MasterPty + Send>>>>,
    /// The process's own cgroup(s), when the table has them.
    cgroup: Option<ProcCgroup>,
}

/// Identity fields of a new process.
pub(crate) struct ProcIdentity {
    pub(crate) id: String,
    pub(crate) pid: u32,
    pub(crate) owner: String,
    pub(crate) argv: Vec<String>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Proc {
    /// A running process with the given output sink, stdin, optional PTY master and cgroup.
    pub(crate) fn new(
        ident: ProcIdentity,
        output: Output,
        stdin: Stdin,
        master: Option<Box<dyn MasterPty + Send>>,
        cgroup: Option<ProcCgroup>,
    ) -> Self {
        let (exited, _) = watch::channel(false);
        Proc {
            id: ident.id,
            pid: ident.pid,
            tty: master.is_some(),
            owner: ident.owner,
            argv: ident.argv,
            started_at: SystemTime::now(),
            output,
            stderr: None,
            life: Mutex::new(Life::default()),
            exited,
            stdin,
            master: master.map(|m| Mutex::new(Some(m))),
            cgroup,
        }
    }

    /// Sends `sig` to the process group and, for a PTY, its whole session; a SIGKILL also goes to
    /// every process of its cgroup (escapees that left the group and session included). No-op
    /// once reaped.
    fn signal_tree_locked(&self, life: &Life, sig: Signal) {
        if life.reaped {
            return;
        }
        signal_group(self.pid, sig);
        if self.tty {
            signal_session(self.pid, sig);
        }
        if sig == Signal::KILL
            && let Some(cg) = &self.cgroup
        {
            cg.kill();
        }
    }

    /// The process's cgroup, when it has one.
    pub(crate) fn cgroup(&self) -> Option<&ProcCgroup> {
        self.cgroup.as_ref()
    }

    /// Closes the parent's ends of the child's stdin and terminal once it exited, so descriptors
    /// are bounded by live processes, not by how many exited handles are kept.
    pub(crate) async fn close_handles(&self) {
        match &self.stdin {
            Stdin::Pipe(slot) => {
                slot.lock().await.take();
            }
            Stdin::Pty(writer) => {
                lock(writer).take();
            }
        }
        if let Some(master) = &self.master {
            lock(master).take();
        }
    }

    /// Records why the table is killing the process (first reason wins) and sends `sig` to its tree.
    /// Returns false when the process is already gone.
    pub(crate) fn kill_for(&self, reason: Termination, sig: Signal) -> bool {
        let mut life = lock(&self.life);
        if life.reaped {
            return false;
        }
        life.kill_reason.get_or_insert(reason);
        self.signal_tree_locked(&life, sig);
        true
    }

    /// SIGTERM now, SIGKILL after `grace` unless the process exited first. Does not wait.
    pub(crate) fn begin_kill(self: &Arc<Self>, reason: Termination, grace: Duration) {
        if !self.kill_for(reason, Signal::TERM) {
            return;
        }
        let me = Arc::clone(self);
        tokio::spawn(async move {
            if tokio::time::timeout(grace, me.wait_exited()).await.is_err() {
                let life = lock(&me.life);
                me.signal_tree_locked(&life, Signal::KILL);
            }
        });
    }

    /// Called once the leader is a zombie: kills whatever is left of its group/session, then marks
    /// it reaped so no later signal can hit a reused pid.
    pub(crate) fn kill_leftovers_and_mark_reaped(&self) {
        let mut life = lock(&self.life);
        self.signal_tree_locked(&life, Signal::KILL);
        life.reaped = true;
    }

    /// Keeps stderr apart in its own output (before the process is shared).
    pub(crate) fn with_stderr(mut self, stderr: Output) -> Self {
        self.stderr = Some(stderr);
        self
    }

    /// The output a pump of `stream` feeds.
    pub(crate) fn sink(&self, stream: crate::types::Stream) -> &Output {
        match (stream, &self.stderr) {
            (crate::types::Stream::Stderr, Some(err)) => err,
            _ => &self.output,
        }
    }

    /// Stores the exit status (after reaping) and wakes everyone waiting for exit.
    pub(crate) fn record_exit(&self, kind: ExitKind) {
        {
            let mut life = lock(&self.life);
            let (termination, exit_code, signal) = match (life.kill_reason, kind) {
                (Some(reason), _) => (reason, None, None),
                (None, ExitKind::Code(c)) => (Termination::Exited, Some(c), None),
                (None, ExitKind::Signal(s)) => (Termination::Signaled, None, Some(s)),
                (None, ExitKind::Unknown) => (Termination::Unknown, None, None),
            };
            life.exit = Some(ExitRecord {
                termination,
                exit_code,
                signal,
                exited_at: Instant::now(),
            });
        }
        self.exited.send_replace(true);
    }

    /// When the process exited, if it did.
    pub(crate) fn exited_at(&self) -> Option<Instant> {
        lock(&self.life).exit.map(|e| e.exited_at)
    }

    /// Whether the exit status is recorded.
    pub(crate) fn is_exited(&self) -> bool {
        lock(&self.life).exit.is_some()
    }

    /// Resolves once the exit status is recorded.
    pub(crate) async fn wait_exited(&self) {
        let mut rx = self.exited.subscribe();
        let _ = rx.wait_for(|exited| *exited).await;
    }

    /// A status snapshot.
    pub(crate) fn info(&self) -> ProcessInfo {
        let stats = self.output.stats();
        let exit = lock(&self.life).exit;
        ProcessInfo {
            id: self.id.clone(),
            pid: self.pid,
            tty: self.tty,
            separate_stderr: self.stderr.is_some(),
            owner: self.owner.clone(),
            state: if exit.is_some() {
                ProcState::Exited
            } else {
                ProcState::Running
            },
            exit_code: exit.and_then(|e| e.exit_code),
            termination: exit.map(|e| e.termination),
            signal: exit.and_then(|e| e.signal),
            output_total: stats.total,
            output_retained_from: stats.retained_from,
            eof: stats.finished,
            started_at: self.started_at,
            argv: self.argv.clone(),
        }
    }

    /// Writes all of `data` to the child's stdin (pipe or terminal).
    pub(crate) async fn write_stdin(&self, data: &[u8]) -> Result<(), ProcError> {
        if self.is_exited() {
            return Err(ProcError::StdinClosed);
        }
        let timed_out = || ProcError::Io("the process did not accept input in time".to_owned());
        match &self.stdin {
            Stdin::Pipe(slot) => {
                let mut guard = tokio::time::timeout(STDIN_WRITE_TIMEOUT, slot.lock())
                    .await
                    .map_err(|_| timed_out())?;
                let pipe = guard.as_mut().ok_or(ProcError::StdinClosed)?;
                let written = tokio::time::timeout(STDIN_WRITE_TIMEOUT, async {
                    pipe.write_all(data).await?;
                    pipe.flush().await
                })
                .await
                .map_err(|_| timed_out())?;
                match written {
                    Ok(()) => Ok(()),
                    Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => {
                        *guard = None;
                        Err(ProcError::StdinClosed)
                    }
                    Err(err) => Err(ProcError::Io(err.to_string())),
                }
            }
            Stdin::Pty(writer) => {
                let writer = Arc::clone(writer);
                let bytes = data.to_vec();
                let job = tokio::task::spawn_blocking(move || {
                    let mut guard = lock(&writer);
                    let w = guard
                        .as_mut()
                        .ok_or_else(|| std::io::Error::from_raw_os_error(libc::EIO))?;
                    w.write_all(&bytes)?;
                    w.flush()
                });
                match tokio::time::timeout(STDIN_WRITE_TIMEOUT, job).await {
                    Err(_) => Err(timed_out()),
                    Ok(Err(join)) => Err(ProcError::Io(join.to_string())),
                    Ok(Ok(Ok(()))) => Ok(()),
                    Ok(Ok(Err(err))) if err.raw_os_error() == Some(libc::EIO) => {
                        Err(ProcError::StdinClosed)
                    }
                    Ok(Ok(Err(err))) => Err(ProcError::Io(err.to_string())),
                }
            }
        }
    }

    /// Resizes the terminal.
    pub(crate) fn resize(&self, rows: u16, cols: u16) -> Result<(), ProcError> {
        let master = self.master.as_ref().ok_or(ProcError::NotTty)?;
        if self.is_exited() {
            return Err(ProcError::NotRunning);
        }
        if rows == 0 || cols == 0 {
            return Err(ProcError::Io("rows and cols must be at least 1".to_owned()));
        }
        lock(master)
            .as_ref()
            .ok_or(ProcError::NotRunning)?
            .resize(PtySize {
                rows,
                cols,
                pixel_width: 0,
                pixel_height: 0,
            })
            .map_err(|err| ProcError::Io(err.to_string()))
    }
}
