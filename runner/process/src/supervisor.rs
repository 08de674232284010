//! Per-process supervisor task: timeout, exit observation, leftover cleanup (process group,
//! session and cgroup), reaping, closing the child's stdin, output drain, cgroup removal.

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

/// Starts a thread that blocks in `waitid(WNOWAIT)` for `pid` and reports the exit kind.
pub(crate) fn watch_exit(pid: u32) -> std::io::Result<oneshot::Receiver<ExitKind>> {
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
    Ok(rx)
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
    pub(crate) exit_rx: oneshot::Receiver<ExitKind>,
    pub(crate) timeout: Duration,
    pub(crate) grace: Duration,
    pub(crate) slot: LiveSlot,
    pub(crate) table: Weak<dyn Prune>,
    pub(crate) on_exit: Option<crate::types::ExitHook>,
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
    let kind = outcome.unwrap_or(ExitKind::Unknown);
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
    if let Some(cg) = proc.cgroup() {
        cg.remove_when_empty().await;
    }
    if let Some(inner) = table.upgrade() {
        inner.prune();
    }
}
