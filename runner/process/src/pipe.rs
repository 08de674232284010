//! Pipe backend: starts a child with piped stdio in its own session and pumps its output.

use std::ffi::OsStr;
use std::os::fd::{AsRawFd, RawFd};
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
    /// tokio's handle when tokio started it; `None` for a `posix_spawn` start (reaped by pid).
    pub(crate) child: Option<Child>,
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
            child: Some(child),
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

/// Starts a launcher that does the pre-`exec` steps itself ([`crate::Launcher::self_start`])
/// with `posix_spawn`: glibc starts the child with `clone(CLONE_VM | CLONE_VFORK)`, so the
/// server's page tables are not copied and the child runs at once (with `fork`, copying the
/// server's mappings and the child's copy-on-write faults before its `exec` were the largest
/// part of a sandboxed command's start). The spawn makes the child a session leader
/// (`POSIX_SPAWN_SETSID`), empties its signal mask and resets every signal to its default, moves
/// it to `cwd`, gives it the three pipes and keeps `inherit_fds` open across `exec` under the
/// same numbers (`adddup2(fd, fd)` clears close-on-exec in the child only). `plan.join` is not
/// used: the launcher joins its cgroups from the descriptors named in its arguments.
pub(crate) fn spawn_pipe_lean(plan: &ExecPlan<'_>) -> Result<PipeChild, SpawnError> {
    use std::os::unix::ffi::OsStrExt;
    let nul = || SpawnError::SpawnFailed("an argument or variable holds a NUL byte".to_owned());
    let cstr = |bytes: &[u8]| std::ffi::CString::new(bytes).map_err(|_| nul());
    let program = cstr(plan.program.as_os_str().as_bytes())?;
    let cwd = cstr(plan.cwd.as_os_str().as_bytes())?;
    let mut argv = vec![cstr(plan.arg0.as_bytes())?];
    for arg in plan.args {
        argv.push(cstr(arg.as_bytes())?);
    }
    let envp = plan
        .env
        .iter()
        .map(|(k, v)| cstr(format!("{k}={v}").as_bytes()))
        .collect::<Result<Vec<_>, _>>()?;
    let argv_ptrs = null_terminated(&argv);
    let envp_ptrs = null_terminated(&envp);
    let failed = |what: &str, e: std::io::Error| SpawnError::SpawnFailed(format!("{what}: {e}"));
    let pipe = || {
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
            .map_err(|e| failed("cannot create the child's pipes", e.into()))
    };
    let (in_read, in_write) = pipe()?;
    let (out_read, out_write) = pipe()?;
    let (err_read, err_write) = pipe()?;
    let mut actions = FileActions::new().map_err(|e| failed("posix_spawn set-up", e))?;
    for (fd, target) in [
        (in_read.as_raw_fd(), 0),
        (out_write.as_raw_fd(), 1),
        (err_write.as_raw_fd(), 2),
    ] {
        actions
            .dup2(fd, target)
            .map_err(|e| failed("posix_spawn set-up", e))?;
    }
    for &fd in plan.inherit_fds {
        actions
            .dup2(fd, fd)
            .map_err(|e| failed("posix_spawn set-up", e))?;
    }
    actions
        .chdir(&cwd)
        .map_err(|e| failed("posix_spawn set-up", e))?;
    let attr = SpawnAttr::new().map_err(|e| failed("posix_spawn set-up", e))?;
    let mut pid: libc::pid_t = 0;
    // SAFETY: every pointer is valid for the call: the program and cwd strings, the
    // NULL-terminated argv/envp arrays (their strings are alive in `argv`/`envp`), and the
    // initialized file actions and attributes. glibc's posix_spawn is safe to call from a
    // multi-threaded process (the child runs only its own code until `exec`).
    let rc = unsafe {
        libc::posix_spawn(
            &mut pid,
            program.as_ptr(),
            actions.as_ptr(),
            attr.as_ptr(),
            argv_ptrs.as_ptr(),
            envp_ptrs.as_ptr(),
        )
    };
    drop((in_read, out_write, err_write));
    if rc != 0 {
        return Err(SpawnError::SpawnFailed(
            std::io::Error::from_raw_os_error(rc).to_string(),
        ));
    }
    let pid = u32::try_from(pid)
        .map_err(|_| SpawnError::SpawnFailed("posix_spawn returned no pid".to_owned()))?;
    let wrap = |e: std::io::Error| {
        // The child runs; without its pipes it cannot be managed: kill it (it leads its group).
        signal_pid_group(pid);
        failed("cannot register the child's pipes", e)
    };
    let stdin = ChildStdin::from_std(std::process::ChildStdin::from(in_write)).map_err(wrap)?;
    let stdout = ChildStdout::from_std(std::process::ChildStdout::from(out_read)).map_err(wrap)?;
    let stderr = ChildStderr::from_std(std::process::ChildStderr::from(err_read)).map_err(wrap)?;
    Ok(PipeChild {
        child: None,
        pid,
        stdin,
        stdout,
        stderr,
    })
}

/// SIGKILL to the group `pid` leads (a child the table cannot manage after all; reaped by the
/// exit watch's fallback of the caller, or by init once the server exits).
pub(crate) fn signal_pid_group(pid: u32) {
    if let Some(p) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process_group(p, Signal::KILL);
    }
}

/// The pointers of `items`, then a NULL (an `argv`/`envp` array).
fn null_terminated(items: &[std::ffi::CString]) -> Vec<*mut libc::c_char> {
    items
        .iter()
        .map(|c| c.as_ptr().cast_mut())
        .chain(std::iter::once(std::ptr::null_mut()))
        .collect()
}

/// `posix_spawn_file_actions_t`, destroyed on drop.
struct FileActions(Box<libc::posix_spawn_file_actions_t>);

impl FileActions {
    fn new() -> std::io::Result<FileActions> {
        // SAFETY: a zeroed value is only storage; `init` below initializes it.
        let mut raw: Box<libc::posix_spawn_file_actions_t> =
            Box::new(unsafe { std::mem::zeroed() });
        // SAFETY: `raw` points to writable storage for the object.
        check(unsafe { libc::posix_spawn_file_actions_init(&mut *raw) })?;
        Ok(FileActions(raw))
    }

    fn dup2(&mut self, fd: RawFd, target: RawFd) -> std::io::Result<()> {
        // SAFETY: the object was initialized in `new`.
        check(unsafe { libc::posix_spawn_file_actions_adddup2(&mut *self.0, fd, target) })
    }

    fn chdir(&mut self, dir: &std::ffi::CStr) -> std::io::Result<()> {
        // SAFETY: the object was initialized in `new`; glibc copies the path.
        check(unsafe { libc::posix_spawn_file_actions_addchdir_np(&mut *self.0, dir.as_ptr()) })
    }

    fn as_ptr(&self) -> *const libc::posix_spawn_file_actions_t {
        &*self.0
    }
}

impl Drop for FileActions {
    fn drop(&mut self) {
        // SAFETY: initialized in `new`, destroyed once.
        unsafe { libc::posix_spawn_file_actions_destroy(&mut *self.0) };
    }
}

/// `posix_spawnattr_t` with a new session, an empty signal mask and every signal at its
/// default; destroyed on drop.
struct SpawnAttr(Box<libc::posix_spawnattr_t>);

impl SpawnAttr {
    fn new() -> std::io::Result<SpawnAttr> {
        // SAFETY: a zeroed value is only storage; `init` below initializes it.
        let mut raw: Box<libc::posix_spawnattr_t> = Box::new(unsafe { std::mem::zeroed() });
        // SAFETY: `raw` points to writable storage for the object.
        check(unsafe { libc::posix_spawnattr_init(&mut *raw) })?;
        let attr = SpawnAttr(raw);
        // SAFETY: zeroed sigset_t storage, then initialized by sigemptyset/sigfillset.
        let mut empty: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: both point to writable sigset_t storage.
        unsafe {
            libc::sigemptyset(&mut empty);
            libc::sigfillset(&mut all);
        }
        let flags = libc::POSIX_SPAWN_SETSID
            | libc::c_short::try_from(libc::POSIX_SPAWN_SETSIGMASK | libc::POSIX_SPAWN_SETSIGDEF)
                .map_err(|_| std::io::Error::other("posix_spawn flags out of range"))?;
        let mut raw = attr;
        // SAFETY: the attributes were initialized above; the sets are initialized.
        unsafe {
            check(libc::posix_spawnattr_setflags(&mut *raw.0, flags))?;
            check(libc::posix_spawnattr_setsigmask(&mut *raw.0, &empty))?;
            check(libc::posix_spawnattr_setsigdefault(&mut *raw.0, &all))?;
        }
        Ok(raw)
    }

    fn as_ptr(&self) -> *const libc::posix_spawnattr_t {
        &*self.0
    }
}

impl Drop for SpawnAttr {
    fn drop(&mut self) {
        // SAFETY: initialized in `new`, destroyed once.
        unsafe { libc::posix_spawnattr_destroy(&mut *self.0) };
    }
}

fn check(rc: libc::c_int) -> std::io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::from_raw_os_error(rc))
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
