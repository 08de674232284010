//! The wire form of the [`Runner`] trait, for a worker process: one [`Call`] variant per
//! method, one [`Reply`] variant per result, the [`Event`]s a worker reports unasked, the
//! worker's side ([`serve_call`]) and the transport seam of the gateway's side ([`Wire`]). How
//! the messages are framed and correlated is the transport's business, not this crate's.

use crate::dto::*;
use crate::{BoxFuture, EventSink, Runner, RunnerError};
use serde::{Deserialize, Serialize};

/// One request to a runner: a method of [`Runner`] and its argument.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "method", content = "args", rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum Call {
    Read(ReadRequest),
    Version(VersionRequest),
    Stat(PathRequest),
    MakeDirs(PathRequest),
    Walk(WalkRequest),
    Grep(GrepRequest),
    Snapshot(SnapshotRequest),
    Apply(ApplyRequest),
    Restore(RestoreRequest),
    Spawn(Box<SpawnRequest>),
    WriteStdin(StdinRequest),
    Resize(ResizeRequest),
    ReadOutput(OutputRequest),
    Wait(ProcessRef),
    Status(ProcessRef),
    Terminate(ProcessRef),
    ProbeSandbox,
    /// Transport set-up, not a [`Runner`] method: the gateway registers a workspace with a
    /// worker after each (re)connect, naming its root as an absolute path on the worker's side.
    /// It stays out of the trait because an in-process runner is given its roots by the
    /// gateway that opened them, and a [`RemoteRunner`](crate::RemoteRunner) never sends it:
    /// only the worker transport does, and the worker's handler answers it before
    /// [`serve_call`] (which refuses it).
    OpenWorkspace(OpenWorkspace),
}

/// `open_workspace`: serve `workspace` from `root` (absolute, on the worker's side).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenWorkspace {
    /// The workspace id.
    pub workspace: String,
    /// Its root directory on the worker's side (absolute; opened without following a link).
    pub root: String,
}

impl Call {
    /// The method's name (for logs and errors).
    pub fn method(&self) -> &'static str {
        match self {
            Call::Read(_) => "read",
            Call::Version(_) => "version",
            Call::Stat(_) => "stat",
            Call::MakeDirs(_) => "make_dirs",
            Call::Walk(_) => "walk",
            Call::Grep(_) => "grep",
            Call::Snapshot(_) => "snapshot",
            Call::Apply(_) => "apply",
            Call::Restore(_) => "restore",
            Call::Spawn(_) => "spawn",
            Call::WriteStdin(_) => "write_stdin",
            Call::Resize(_) => "resize",
            Call::ReadOutput(_) => "read_output",
            Call::Wait(_) => "wait",
            Call::Status(_) => "status",
            Call::Terminate(_) => "terminate",
            Call::ProbeSandbox => "probe_sandbox",
            Call::OpenWorkspace(_) => "open_workspace",
        }
    }
}

/// The answer to one [`Call`]: the method's result, or its error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", content = "value", rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum Reply {
    Window(FileWindow),
    Version(Option<String>),
    Stat(Option<FileStat>),
    Listing(Listing),
    Grep(GrepPage),
    Backups(Vec<Backup>),
    Applied(AppliedPatch),
    Spawned(SpawnedProcess),
    Output(OutputPage),
    Status(ProcessStatus),
    Probe(SandboxProbe),
    /// A method without a result succeeded.
    Done,
    /// The method failed.
    Error(RunnerError),
}

/// What a runner reports without being asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// Paths of a workspace changed on the runner's side (its watcher's version bumps).
    FileChanged {
        /// The workspace id.
        workspace: String,
        /// The changed paths (workspace-relative).
        paths: Vec<String>,
    },
    /// The runner's watcher lost events: nothing it knew of the workspace's files holds.
    WatchLost {
        /// The workspace id.
        workspace: String,
    },
    /// A process exited.
    ProcessExited {
        /// Its final status.
        status: ProcessStatus,
    },
}

/// The gateway's end of a transport to a worker: sends a [`Call`] and waits for its [`Reply`]
/// (concurrent calls allowed). `Err` is a transport failure (then nothing is known of the call;
/// a dead worker is [`RunnerError::Unavailable`]). Events the worker reports arrive at the sink.
pub trait Wire: Send + Sync + 'static {
    /// Sends `call` and waits for its reply.
    fn call(&self, call: Call) -> BoxFuture<'_, Result<Reply, RunnerError>>;
    /// Where to deliver the worker's events (replaces an earlier sink).
    fn subscribe(&self, sink: EventSink);
}

/// The worker's side: answers one [`Call`] with `runner`.
pub async fn serve_call(runner: &dyn Runner, call: Call) -> Reply {
    fn done<T>(r: Result<T, RunnerError>, ok: impl FnOnce(T) -> Reply) -> Reply {
        match r {
            Ok(v) => ok(v),
            Err(e) => Reply::Error(e),
        }
    }
    let unit = |()| Reply::Done;
    match call {
        Call::Read(r) => done(runner.read(r).await, Reply::Window),
        Call::Version(r) => done(runner.version(r).await, Reply::Version),
        Call::Stat(r) => done(runner.stat(r).await, Reply::Stat),
        Call::MakeDirs(r) => done(runner.make_dirs(r).await, unit),
        Call::Walk(r) => done(runner.walk(r).await, Reply::Listing),
        Call::Grep(r) => done(runner.grep(r).await, Reply::Grep),
        Call::Snapshot(r) => done(runner.snapshot(r).await, Reply::Backups),
        Call::Apply(r) => done(runner.apply(r).await, Reply::Applied),
        Call::Restore(r) => done(runner.restore(r).await, unit),
        Call::Spawn(r) => done(runner.spawn(*r).await, Reply::Spawned),
        Call::WriteStdin(r) => done(runner.write_stdin(r).await, unit),
        Call::Resize(r) => done(runner.resize(r).await, unit),
        Call::ReadOutput(r) => done(runner.read_output(r).await, Reply::Output),
        Call::Wait(r) => done(runner.wait(r).await, Reply::Status),
        Call::Status(r) => done(runner.status(r).await, Reply::Status),
        Call::Terminate(r) => done(runner.terminate(r).await, Reply::Status),
        Call::ProbeSandbox => done(runner.probe_sandbox().await, Reply::Probe),
        Call::OpenWorkspace(_) => Reply::Error(RunnerError::internal(
            "open_workspace is the worker transport's set-up, answered by the worker's handler",
        )),
    }
}
