//! Signalling process groups and sessions, and observing exit without reaping.

use std::io;

use rustix::process::{
    Pid, Signal, WaitId, WaitIdOptions, WaitOptions, kill_process, kill_process_group, waitid,
    waitpid,
};

/// How a process ended, as seen by `waitid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExitKind {
    /// Normal exit with this code.
    Code(i32),
    /// Killed by this signal.
    Signal(i32),
    /// Not observable.
    Unknown,
}

fn pid_of(raw: u32) -> Option<Pid> {
    i32::try_from(raw).ok().and_then(Pid::from_raw)
}

/// Sends `sig` to every member of process group `pgid` (missing group is not an error).
pub(crate) fn signal_group(pgid: u32, sig: Signal) {
    if let Some(pid) = pid_of(pgid)
        && let Err(err) = kill_process_group(pid, sig)
        && err != rustix::io::Errno::SRCH
    {
        tracing::debug!(pgid, %err, "killpg failed");
    }
}

/// Sends `sig` to every process whose session id is `sid` (found by scanning `/proc`).
pub(crate) fn signal_session(sid: u32, sig: Signal) {
    let me = std::process::id();
    for pid in session_members(sid) {
        if pid == me {
            continue;
        }
        if let Some(p) = pid_of(pid) {
            let _ = kill_process(p, sig);
        }
    }
}

/// Session id from the text of `/proc/<pid>/stat`.
fn session_of_stat(stat: &str) -> Option<u32> {
    let after_comm = stat.get(stat.rfind(')')? + 1..)?;
    // fields after comm: state ppid pgrp session ...
    after_comm.split_whitespace().nth(3)?.parse().ok()
}

/// Pids of the processes in session `sid`.
pub(crate) fn session_members(sid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| session_of_stat(&s))
                == Some(sid)
        })
        .collect()
}

/// Blocks until child `pid` has exited, leaving it a zombie (so its pid and pgid cannot be reused).
pub(crate) fn wait_exit_no_reap(pid: u32) -> io::Result<ExitKind> {
    let p = pid_of(pid).ok_or_else(|| io::Error::other("invalid pid"))?;
    loop {
        match waitid(
            WaitId::Pid(p),
            WaitIdOptions::EXITED | WaitIdOptions::NOWAIT,
        ) {
            Ok(Some(status)) => {
                return Ok(if let Some(code) = status.exit_status() {
                    ExitKind::Code(code)
                } else if let Some(sig) = status.terminating_signal() {
                    ExitKind::Signal(sig)
                } else {
                    ExitKind::Unknown
                });
            }
            Ok(None) => continue,
            Err(rustix::io::Errno::INTR) => continue,
            Err(err) => return Err(err.into()),
        }
    }
}

/// Reaps an exited child that is not managed by tokio (never blocks).
pub(crate) fn reap_nonblocking(pid: u32) {
    if let Some(p) = pid_of(pid) {
        let _ = waitpid(Some(p), WaitOptions::NOHANG);
    }
}

/// Clears the close-on-exec flag of each of `fds` in a freshly forked child (async-signal-safe:
/// one `fcntl` each, no allocation), so the launcher keeps them across `exec`.
pub(crate) fn keep_across_exec(fds: &[std::os::fd::RawFd]) -> std::io::Result<()> {
    for &fd in fds {
        // SAFETY: fcntl(F_SETFD) on a descriptor number touches no memory; a bad number is EBADF.
        if unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } == -1 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_session_even_with_odd_command_names() {
        let stat = "1234 (we ird) name)) S 1 1200 1100 34816 1200 4194560";
        assert_eq!(session_of_stat(stat), Some(1100));
        assert_eq!(session_of_stat("garbage"), None);
    }

    #[test]
    fn finds_own_session() {
        let me = std::process::id();
        let stat = std::fs::read_to_string(format!("/proc/{me}/stat")).unwrap();
        let sid = session_of_stat(&stat).unwrap();
        assert!(session_members(sid).contains(&me));
    }
}
