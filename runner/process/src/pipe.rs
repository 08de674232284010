//! Pipe backend: starts a child with piped stdio in its own session and pumps its output.

use std::ffi::OsStr;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;

use rustix::process::{Signal, getpid, getppid, set_parent_process_death_signal, setsid};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};

use crate::cgroup::JoinFds;
use crate::error::SpawnError;
use crate::proc::Proc;

/// Size of one read from a child pipe.
const PUMP_CHUNK: usize = 64 * 1024;

/// A freshly started pipe child.
pub(crate) struct PipeChild {
    pub(crate) child: Child,
    pub(crate) pid: u32,
    pub(crate) stdin: ChildStdin,
    pub(crate) stdout: ChildStdout,
    pub(crate) stderr: ChildStderr,
}

/// What to exec: `program` with `arg0` and `args`, in `cwd`, with exactly `env`.
pub(crate) struct ExecPlan<'a> {
    pub(crate) program: &'a Path,
    pub(crate) arg0: &'a OsStr,
    pub(crate) args: &'a [String],
    pub(crate) cwd: &'a Path,
    pub(crate) env: &'a [(String, String)],
    /// The cgroup(s) the child joins before `exec` (none when the table has no cgroups).
    pub(crate) join: JoinFds,
    /// Descriptors the child keeps across `exec` (their close-on-exec flag is cleared after fork).
    pub(crate) inherit_fds: &'a [std::os::fd::RawFd],
}

/// Starts the child. Before `exec` it joins its cgroup(s), becomes the leader of a new session
/// (so sid == pgid == pid, and it has no controlling terminal: nothing it runs can reach the
/// server's terminal), and gets SIGKILL when the spawning thread's process dies
/// (`PR_SET_PDEATHSIG`).
///
/// `PR_SET_PDEATHSIG` fires when the *thread* that forked exits, so this must run on a long-lived
/// runtime thread (any async task on a tokio worker is fine; not a short-lived blocking thread).
pub(crate) fn spawn_pipe(plan: &ExecPlan<'_>) -> Result<PipeChild, SpawnError> {
    let parent = getpid();
    let mut cmd = Command::new(plan.program);
    cmd.arg0(plan.arg0)
        .args(plan.args)
        .env_clear()
        .envs(plan.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .current_dir(plan.cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let join = plan.join;
    let inherit_fds = plan.inherit_fds.to_vec();
    // SAFETY: the closure only makes async-signal-safe syscalls (write, setsid, prctl, getppid)
    // and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            join.join()?;
            crate::signals::keep_across_exec(&inherit_fds)?;
            setsid()?;
            set_parent_process_death_signal(Some(Signal::KILL))?;
            if getppid() != Some(parent) {
                return Err(std::io::Error::other("parent exited during spawn"));
            }
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|err| SpawnError::SpawnFailed(err.to_string()))?;
    let pid = child.id();
    let stdin = child.stdin.take();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    match (pid, stdin, stdout, stderr) {
        (Some(pid), Some(stdin), Some(stdout), Some(stderr)) => Ok(PipeChild {
            child,
            pid,
            stdin,
            stdout,
            stderr,
        }),
        _ => {
            let _ = child.start_kill();
            Err(SpawnError::SpawnFailed(
                "the child's pipes were not available".to_owned(),
            ))
        }
    }
}

/// Copies one pipe into the process's output until end of stream, then reports the pump done.
pub(crate) async fn pump<R: AsyncRead + Unpin>(
    mut reader: R,
    proc: Arc<Proc>,
    stream: crate::types::Stream,
) {
    let mut buf = vec![0u8; PUMP_CHUNK];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => {
                let Some(bytes) = buf.get(..n) else { break };
                if !proc.sink(stream).push(bytes) {
                    break;
                }
            }
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(err) => {
                tracing::debug!(id = %proc.id, %err, "output pipe read failed");
                break;
            }
        }
    }
    proc.sink(stream).writer_done();
}
