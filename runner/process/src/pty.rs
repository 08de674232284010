//! PTY backend: starts a child as a session leader on a fresh 24x80 pseudo-terminal.
//!
//! portable-pty opens the terminal pair (and serves resize, reader and writer of the master);
//! the child itself is started here with `std::process::Command`, so that before `exec` it can
//! join its cgroup(s) and set the parent-death signal, which portable-pty's own spawn cannot.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;

use portable_pty::{MasterPty, PtySize, native_pty_system};
use rustix::fs::{Mode, OFlags};
use rustix::process::{Signal, getpid, getppid, set_parent_process_death_signal, setsid};

use crate::cgroup::JoinFds;
use crate::error::SpawnError;
use crate::proc::Proc;

/// Initial terminal size.
const INITIAL_SIZE: PtySize = PtySize {
    rows: 24,
    cols: 80,
    pixel_width: 0,
    pixel_height: 0,
};

/// Size of one read from the terminal master.
const READ_CHUNK: usize = 64 * 1024;

/// Signals whose disposition the child resets to the default before `exec` (an ignored signal
/// would otherwise stay ignored in the program).
const RESET_SIGNALS: &[libc::c_int] = &[
    libc::SIGCHLD,
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGTERM,
    libc::SIGALRM,
    libc::SIGPIPE,
];

/// A freshly started terminal child.
pub(crate) struct PtyChild {
    pub(crate) pid: u32,
    pub(crate) master: Box<dyn MasterPty + Send>,
    pub(crate) reader: Box<dyn Read + Send>,
    pub(crate) writer: Box<dyn Write + Send>,
}

/// What to exec on the terminal: `program` with `arg0` and `args`, in `cwd`, with exactly `env`.
pub(crate) struct PtyPlan<'a> {
    pub(crate) program: &'a Path,
    pub(crate) arg0: &'a OsStr,
    pub(crate) args: &'a [String],
    pub(crate) cwd: &'a Path,
    pub(crate) env: &'a [(String, String)],
    pub(crate) join: JoinFds,
    /// Descriptors the child keeps across `exec` (their close-on-exec flag is cleared after fork).
    pub(crate) inherit_fds: &'a [std::os::fd::RawFd],
}

fn failed(what: &str, err: &dyn std::fmt::Display) -> SpawnError {
    // The library's messages can contain absolute paths: log them, return a generic message.
    tracing::debug!(%err, "{what}");
    SpawnError::SpawnFailed(what.to_owned())
}

/// Starts the program on a new terminal. Before `exec` the child joins its cgroup(s), becomes a
/// session leader with the terminal as its controlling tty (pid == pgid == sid), and gets
/// SIGKILL when the spawning thread's process dies. Like the pipe backend, this must run on a
/// long-lived runtime thread (`PR_SET_PDEATHSIG` follows the forking thread).
pub(crate) fn spawn_pty(plan: &PtyPlan<'_>) -> Result<PtyChild, SpawnError> {
    let pair = native_pty_system()
        .openpty(INITIAL_SIZE)
        .map_err(|e| failed("could not open a terminal", &e))?;
    let slave_path = pair
        .master
        .tty_name()
        .ok_or_else(|| SpawnError::SpawnFailed("the terminal has no name".to_owned()))?;
    let slave = rustix::fs::open(
        &slave_path,
        OFlags::RDWR | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| failed("could not open the terminal", &e))?;
    drop(pair.slave);
    let stdio = || {
        slave
            .try_clone()
            .map(Stdio::from)
            .map_err(|e| failed("could not open the terminal", &e))
    };
    let mut cmd = std::process::Command::new(plan.program);
    cmd.arg0(plan.arg0)
        .args(plan.args)
        .env_clear()
        .envs(plan.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .current_dir(plan.cwd)
        .stdin(stdio()?)
        .stdout(stdio()?)
        .stderr(stdio()?);
    let parent = getpid();
    let join = plan.join;
    let inherit_fds = plan.inherit_fds.to_vec();
    // SAFETY: the closure only makes async-signal-safe calls (write, signal, setsid, ioctl,
    // prctl, getppid) and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            join.join()?;
            crate::signals::keep_across_exec(&inherit_fds)?;
            for sig in RESET_SIGNALS {
                libc::signal(*sig, libc::SIG_DFL);
            }
            setsid()?;
            if libc::ioctl(0, libc::TIOCSCTTY, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            set_parent_process_death_signal(Some(Signal::KILL))?;
            if getppid() != Some(parent) {
                return Err(std::io::Error::other("parent exited during spawn"));
            }
            Ok(())
        });
    }
    let spawned = cmd.spawn();
    // The parent's copies of the terminal must close, or the master never sees EOF.
    drop(cmd);
    drop(slave);
    let child = spawned.map_err(|e| failed("could not start the program on a terminal", &e))?;
    let pid = child.id();
    // The child is reaped by the table (waitid/waitpid), not through this handle; dropping a
    // std Child neither kills nor waits.
    drop(child);
    let io = pair
        .master
        .try_clone_reader()
        .and_then(|r| Ok((r, pair.master.take_writer()?)));
    match io {
        Ok((reader, writer)) => Ok(PtyChild {
            pid,
            master: pair.master,
            reader,
            writer,
        }),
        Err(e) => {
            crate::signals::signal_group(pid, rustix::process::Signal::KILL);
            // Reap it in the background so no zombie is left behind.
            let _ = std::thread::Builder::new()
                .name("proc-reap".to_owned())
                .spawn(move || {
                    let _ = crate::signals::wait_exit_no_reap(pid);
                    crate::signals::reap_nonblocking(pid);
                });
            Err(failed("could not attach to the terminal", &e))
        }
    }
}

/// Blocking loop copying terminal output into the process's output (run on its own thread).
/// EIO (every slave holder gone) counts as end of stream.
pub(crate) fn read_loop(mut reader: Box<dyn Read + Send>, proc: Arc<Proc>) {
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let Some(bytes) = buf.get(..n) else { break };
                if !proc.output.push(bytes) {
                    break;
                }
            }
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(err) => {
                if err.raw_os_error() != Some(libc::EIO) {
                    tracing::debug!(id = %proc.id, %err, "terminal read failed");
                }
                break;
            }
        }
    }
    proc.output.writer_done();
}
