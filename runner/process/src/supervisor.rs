//! Per-process supervisor task: timeout, exit observation, leftover cleanup (process group,
//! session and cgroup), reaping, closing the child's stdin, output drain, cgroup removal.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::process::Child;
use tokio::sync::oneshot;

use crate::proc::Proc;
use crate::signals::{ExitKind, reap_nonblocking, wait_exit_no_reap};
use crate::types::Termination;

/// One reserved "live process" slot; released on drop.
#[derive(Debug)]
pub(crate) struct LiveSlot {
    live: Arc<AtomicUsize>,
}

impl LiveSlot {
    /// Reserves a slot if fewer than `max` are taken.
    pub(crate) fn reserve(live: &Arc<AtomicUsize>, max: usize) -> Option<LiveSlot> {
        live.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < max).then_some(n + 1)
        })
        .ok()
        .map(|_| LiveSlot {
            live: Arc::clone(live),
        })
    }
}

impl Drop for LiveSlot {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How the leader is reaped once it is a zombie.
pub(crate) enum Reaper {
    /// tokio owns the child; `wait()` reaps it.
    Pipe(Child),
    /// Reaped directly with `waitpid`: a PTY child, or a pipe child started with `posix_spawn`.
    Raw(u32),
}

/// Resolves with the exit kind once the child has exited, leaving it a zombie.
pub(crate) type ExitWatch = Pin<Box<dyn Future<Output = ExitKind> + Send>>;

/// The off switch of the pidfd exit watch: `CODESPACE_EXIT_WATCH=thread` in the server's
/// environment watches every process with a thread of its own, as before.
pub const EXIT_WATCH_ENV: &str = "CODESPACE_EXIT_WATCH";

fn pidfd_watch_enabled() -> bool {
    static ENABLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ENABLED.get_or_init(|| std::env::var_os(EXIT_WATCH_ENV).is_none_or(|v| v != "thread"))
}

/// Watches `pid` (a child of this process, not yet reaped) for its exit: a pidfd on the
/// runtime's reactor, so the exit wakes the supervisor directly (no thread per process, no
/// hand-off from one); a thread blocked in `waitid(WNOWAIT)` where pidfds are not available
/// (or [`EXIT_WATCH_ENV`]`=thread`).
pub(crate) fn watch_exit(pid: u32) -> std::io::Result<ExitWatch> {
    if pidfd_watch_enabled()
        && let Some(watch) = watch_exit_pidfd(pid)
    {
        return Ok(watch);
    }
    let (tx, rx) = oneshot::channel();
    std::thread::Builder::new()
        .name("proc-wait".to_owned())
        .spawn(move || {
            let kind = wait_exit_no_reap(pid).unwrap_or_else(|err| {
                tracing::warn!(pid, %err, "waiting for a child failed");
                ExitKind::Unknown
            });
            let _ = tx.send(kind);
        })?;
    Ok(Box::pin(
        async move { rx.await.unwrap_or(ExitKind::Unknown) },
    ))
}

/// The pidfd watch, or `None` when the kernel or the runtime cannot give one.
fn watch_exit_pidfd(pid: u32) -> Option<ExitWatch> {
    let p = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)?;
    let fd = rustix::process::pidfd_open(p, rustix::process::PidfdFlags::NONBLOCK).ok()?;
    // SAFETY: an `OwnedFd` is a valid, open descriptor that stays the same until it is dropped
    // with the `AsyncFd`.
    let fd = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
    }
    .ok()?;
    Some(Box::pin(async move {
        loop {
            match exit_of_pidfd(fd.get_ref()) {
                Ok(Some(kind)) => return kind,
                Ok(None) => {}
                Err(err) => {
                    tracing::warn!(pid, %err, "waiting for a child failed");
                    return ExitKind::Unknown;
                }
            }
            match fd.readable().await {
                Ok(mut guard) => guard.clear_ready(),
                Err(err) => {
                    tracing::warn!(pid, %err, "waiting for a child failed");
                    return ExitKind::Unknown;
                }
            }
        }
    }))
}

/// The exit kind when the pidfd's process has exited (not reaped), `None` while it runs.
fn exit_of_pidfd(fd: &std::os::fd::OwnedFd) -> std::io::Result<Option<ExitKind>> {
    use rustix::process::{WaitId, WaitIdOptions, waitid};
    loop {
        match waitid(
            WaitId::PidFd(std::os::fd::AsFd::as_fd(fd)),
            WaitIdOptions::EXITED | WaitIdOptions::NOWAIT | WaitIdOptions::NOHANG,
        ) {
            Ok(Some(status)) => {
                return Ok(Some(if let Some(code) = status.exit_status() {
                    ExitKind::Code(code)
                } else if let Some(sig) = status.terminating_signal() {
                    ExitKind::Signal(sig)
                } else {
                    ExitKind::Unknown
                }));
            }
            Ok(None) => return Ok(None),
            Err(rustix::io::Errno::INTR) => continue,
            Err(err) => return Err(err.into()),
        }
    }
}

/// What a supervisor asks of its table once its process is done: evict what has expired.
pub(crate) trait Prune: Send + Sync {
    /// Evicts exited handles older than the TTL, then the oldest beyond `max_exited_kept`.
    fn prune(&self);
}

/// Settings of one supervisor.
pub(crate) struct Supervision {
    pub(crate) proc: Arc<Proc>,
    pub(crate) reaper: Reaper,
    pub(crate) exit_rx: ExitWatch,
    pub(crate) timeout: Duration,
    pub(crate) grace: Duration,
    pub(crate) slot: LiveSlot,
    pub(crate) table: Weak<dyn Prune>,
    pub(crate) on_exit: Option<crate::types::ExitHook>,
    /// The network namespace the command's spare waited in, given back once the command's
    /// cgroup is removed (and closed otherwise).
    pub(crate) network: Option<crate::spare::Network>,
}

/// Runs until the process has exited, been reaped and its output collected (or abandoned).
pub(crate) async fn supervise(s: Supervision) {
    let Supervision {
        proc,
        reaper,
        mut exit_rx,
        timeout,
        grace,
        slot,
        table,
        on_exit,
        network,
    } = s;
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let outcome = tokio::select! {
        r = &mut exit_rx => r,
        () = &mut deadline => {
            proc.begin_kill(Termination::Timeout, grace);
            (&mut exit_rx).await
        }
    };
    let kind = outcome;
    proc.kill_leftovers_and_mark_reaped();
    match reaper {
        Reaper::Pipe(mut child) => {
            if let Err(err) = child.wait().await {
                tracing::warn!(id = %proc.id, %err, "reaping a child failed");
            }
        }
        Reaper::Raw(pid) => reap_nonblocking(pid),
    }
    drop(slot);
    // Before the exit is observable (status, wait_exit, eof): whoever frees something here is
    // sure no observer still finds it held.
    if let Some(hook) = on_exit {
        hook(&proc.id);
    }
    proc.record_exit(kind);
    // The exit is one of the output's writers: `eof` is reported only once it is recorded.
    proc.output.writer_done();
    if let Some(err) = &proc.stderr {
        err.writer_done();
    }
    proc.close_handles().await;
    // Leftovers were killed, so the pipes/terminal close promptly; an escapee that still holds them
    // (e.g. one that called setsid) does not keep the handle open forever.
    if tokio::time::timeout(grace, proc.output.wait_finished())
        .await
        .is_err()
    {
        tracing::debug!(id = %proc.id, "output still open after exit; collection ended");
        proc.output.force_finish();
    }
    if let Some(err) = &proc.stderr
        && tokio::time::timeout(grace, err.wait_finished())
            .await
            .is_err()
    {
        err.force_finish();
    }
    if let Some(cg) = proc.cgroup()
        && cg.remove_when_empty().await
        && let Some(network) = network
    {
        network.give_back();
    }
    if let Some(inner) = table.upgrade() {
        inner.prune();
    }
}
