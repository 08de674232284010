//! Public value types: limits, spawn specification, launcher seam, read chunks and process info.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

/// Limits of one process table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableLimits {
    /// Most processes running at once (default 8).
    pub max_live: usize,
    /// Most exited handles kept readable; the oldest are evicted first (default 64).
    pub max_exited_kept: usize,
    /// How long an exited handle stays readable (default 15 min).
    pub exited_ttl: Duration,
    /// Bytes of combined output retained per process (default 1 MiB).
    pub ring_bytes: usize,
    /// Timeout applied to every process; a spawn may only shorten it (default 10 min).
    pub default_timeout: Duration,
    /// Delay between SIGTERM and SIGKILL when terminating or timing out (default 2 s).
    pub kill_grace: Duration,
    /// Most tasks (processes and threads) one process and its descendants may have, enforced
    /// through its cgroup where the host offers a `pids` controller (default 512).
    pub max_pids: u32,
    /// Give every process its own cgroup where the host has a writable hierarchy (default
    /// true): terminate, timeout, shutdown and the leader's exit then kill every descendant,
    /// escapees included, and `max_pids` is enforced.
    pub cgroups: bool,
}

impl Default for TableLimits {
    fn default() -> Self {
        TableLimits {
            max_live: 8,
            max_exited_kept: 64,
            exited_ttl: Duration::from_secs(15 * 60),
            ring_bytes: 1024 * 1024,
            default_timeout: Duration::from_secs(10 * 60),
            kill_grace: Duration::from_secs(2),
            max_pids: 512,
            cgroups: true,
        }
    }
}

/// Wraps the child: the table runs `program args… -- argv…` instead of argv, with `env` added to the
/// child's environment. The sandbox supplies it so restrictions apply before argv's first instruction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launcher {
    /// Absolute path of the launcher program.
    pub program: PathBuf,
    /// Arguments placed before the `--` separator.
    pub args: Vec<String>,
    /// Extra environment variables for the launcher (added after the spec's env).
    pub env: Vec<(String, String)>,
    /// Descriptors the child keeps across `exec`, under the same numbers (the sandbox helper's
    /// exec handshake pipe; the egress proxy's control socket of a `network: proxy` command).
    /// Every other descriptor of the server is close-on-exec; these have that flag cleared in
    /// the child only, after `fork`.
    pub inherit_fds: Vec<InheritedFd>,
    /// The launcher does the steps a forked child does before `exec` itself: in pipe mode the
    /// table then starts it with `posix_spawn` (a `vfork`-like start that never copies the
    /// server's memory; the spawn makes its session) and appends [`SELF_START_CGROUP_ARG`] and
    /// the number of each cgroup descriptor it inherits, then [`SELF_START_PARENT_ARG`] and the
    /// server's pid, to `args`; the launcher must join those cgroups and arm its parent-death
    /// signal before anything else, and refuse to go on when that fails. A PTY child is forked
    /// as before (no arguments added).
    pub self_start: bool,
    /// With `self_start`, in pipe mode: the table keeps one launcher of this program started
    /// ahead (`program` [`crate::SPARE_ARG`] `<fd>` [`SELF_START_PARENT_ARG`] `<pid>`, no
    /// environment) and hands the next command to it: `args` (the self-start arguments
    /// included), the environment, the working directory and `inherit_fds` under their numbers
    /// go over the descriptor `<fd>` then (see `runner/process/src/spare.rs`). A spare serves one
    /// command; when none waits, the command starts cold as with `self_start` alone.
    pub warm_spare: bool,
    /// With `warm_spare`: arguments a spare is started with after its parent pid (its shape,
    /// e.g. the sandbox helper's `--private-network`). Spares are kept per program and these
    /// arguments: a spare serves only a command whose launcher names the same.
    pub spare_args: Vec<String>,
    /// With `warm_spare`: the command may open no socket but `AF_UNIX` ones (the sandbox's
    /// seccomp program holds it to that), so the private network namespace its spare waited in
    /// is used again by a later spare once every process of the command is gone (its cgroup
    /// removed); see `runner/process/src/spare.rs`. Without a cgroup it never is.
    pub recycle_network: bool,
}

/// See [`Launcher::self_start`] (the sandbox helper's `SELF_START_CGROUP_ARG`).
pub const SELF_START_CGROUP_ARG: &str = "--cgroup-fd";
/// See [`Launcher::self_start`] (the sandbox helper's `SELF_START_PARENT_ARG`).
pub const SELF_START_PARENT_ARG: &str = "--parent-pid";

/// Runs once when a process has exited, before its exit is observable; gets the process id.
pub type ExitHook = Box<dyn FnOnce(&str) + Send + 'static>;

/// Spawn options beside the [`SpawnSpec`].
#[derive(Default)]
pub struct SpawnOptions {
    /// See [`crate::ProcessTable::spawn_with`].
    pub on_exit: Option<ExitHook>,
    /// Keep stderr in its own output with its own cursor (pipe mode only; a PTY has one stream).
    pub separate_stderr: bool,
}

impl std::fmt::Debug for SpawnOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpawnOptions")
            .field("on_exit", &self.on_exit.is_some())
            .field("separate_stderr", &self.separate_stderr)
            .finish()
    }
}

/// One output stream of a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// stdout (with stderr merged in, unless the spawn kept stderr apart).
    Stdout,
    /// stderr, when the spawn kept it apart.
    Stderr,
}

/// What one read asks for: where to start, at most how many bytes, and whether only the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReadWindow {
    /// Absolute byte offset to read from.
    pub cursor: u64,
    /// At most this many bytes (none: everything retained from the cursor).
    pub max_bytes: Option<usize>,
    /// Only the last `max_bytes` before the end (from the cursor when that is later).
    pub tail: bool,
}
/// A descriptor handed to one child (see [`Launcher::inherit_fds`]). Equal when the numbers are.
#[derive(Debug, Clone)]
pub struct InheritedFd(pub std::sync::Arc<std::os::fd::OwnedFd>);

impl InheritedFd {
    /// The descriptor's number (in the server and, after `fork`, in the child).
    pub fn raw(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&*self.0)
    }
}

impl PartialEq for InheritedFd {
    fn eq(&self, other: &Self) -> bool {
        self.raw() == other.raw()
    }
}

impl Eq for InheritedFd {}

/// What to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpawnSpec {
    /// Exact argv, no shell. Empty → [`crate::SpawnError::InvalidCommand`].
    pub argv: Vec<String>,
    /// Working directory of the child.
    pub cwd: PathBuf,
    /// The complete child environment (the table clears the environment first).
    pub env: Vec<(String, String)>,
    /// Run in a 24x80 pseudo-terminal instead of pipes.
    pub tty: bool,
    /// Optional timeout; it can only shorten the table's default timeout.
    pub timeout: Option<Duration>,
    /// Optional wrapper (the sandbox seam).
    pub launcher: Option<Launcher>,
    /// Opaque owner label, returned in [`ProcessInfo`].
    pub owner: String,
}

/// A started process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spawned {
    /// Handle id, `proc-<uuid v4>`.
    pub id: String,
    /// OS process id (also the process group id).
    pub pid: u32,
}

/// One read of a process's combined output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadChunk {
    /// Absolute byte offset to pass to the next read.
    pub cursor: u64,
    /// The bytes returned.
    pub data: Vec<u8>,
    /// `data` as lossy UTF-8.
    pub chunk: String,
    /// Output collection has finished and `cursor` is at the end of the output.
    pub eof: bool,
    /// Some output fell out of the retained window (`retained_from > 0`).
    pub output_lost: bool,
    /// First byte offset still retained.
    pub retained_from: u64,
}

/// Whether a process is still running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcState {
    /// Not yet exited.
    Running,
    /// Exited and reaped.
    Exited,
    /// Its worker died or disconnected while it ran: it was killed with the worker (a worker's
    /// children die with it), its exit status is unknowable, its lease is released and its id
    /// is never served again. The in-process table never reports it; a worker client does.
    Lost,
}

impl ProcState {
    /// Wire name: `running`, `exited` or `lost`.
    pub fn as_str(self) -> &'static str {
        match self {
            ProcState::Running => "running",
            ProcState::Exited => "exited",
            ProcState::Lost => "lost",
        }
    }
}

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Termination {
    /// It exited on its own; `exit_code` is set.
    Exited,
    /// A signal the table did not send killed it; `signal` is set.
    Signaled,
    /// The table's timeout ended it.
    Timeout,
    /// [`crate::ProcessTable::terminate`] or shutdown ended it.
    Terminated,
    /// The exit status could not be observed.
    Unknown,
}

impl Termination {
    /// Wire name: `exited`, `signaled`, `timeout`, `terminated` or `unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            Termination::Exited => "exited",
            Termination::Signaled => "signaled",
            Termination::Timeout => "timeout",
            Termination::Terminated => "terminated",
            Termination::Unknown => "unknown",
        }
    }
}

/// Snapshot of one process handle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessInfo {
    /// Handle id.
    pub id: String,
    /// OS process id.
    pub pid: u32,
    /// Started in a pseudo-terminal.
    pub tty: bool,
    /// stderr is kept apart from stdout (its own output and cursor).
    pub separate_stderr: bool,
    /// Owner label from the spawn.
    pub owner: String,
    /// Running or exited.
    pub state: ProcState,
    /// Exit code, only when `termination` is `Exited`.
    pub exit_code: Option<i32>,
    /// How it ended, only once exited.
    pub termination: Option<Termination>,
    /// Killing signal, only when `termination` is `Signaled`.
    pub signal: Option<i32>,
    /// Total bytes of output produced so far.
    pub output_total: u64,
    /// First byte offset still retained.
    pub output_retained_from: u64,
    /// Output collection has finished (no more bytes will arrive).
    pub eof: bool,
    /// When the process was started.
    pub started_at: SystemTime,
    /// The argv as requested (without any launcher).
    pub argv: Vec<String>,
}

/// One process of a [`crate::ProcessTable`] with what its starter keeps about it (the table's
/// `M`): who started it and why. The metadata lives exactly as long as the table's handle:
/// it is dropped when the handle is evicted.
#[derive(Debug)]
pub struct Registration<M> {
    /// The table's status snapshot (id, owner label, argv, tty, state, …).
    pub info: ProcessInfo,
    /// The starter's metadata, as given to [`crate::ProcessTable::spawn_owned`].
    pub meta: std::sync::Arc<M>,
}

impl<M> Clone for Registration<M> {
    fn clone(&self) -> Self {
        Registration {
            info: self.info.clone(),
            meta: std::sync::Arc::clone(&self.meta),
        }
    }
}
