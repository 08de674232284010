//! The one seam between the engine and whatever runs its decided work.
//!
//! Everything the engine asks of the runner crates after a decision (read a window of a file and
//! its version, stat, walk, grep, commit a planned patch and restore its journal, spawn, steer,
//! read, wait for and terminate a process, probe the command sandbox, and the events a runner
//! reports on its own) is a method of [`Runner`], taking and returning plain data ([`dto`]): paths
//! are workspace-relative strings, limits are numbers, masks and write scopes are lists of paths.
//! Nothing here is a Cedar type or an MCP type: a runner never sees policy and never decides.
//!
//! Two kinds of runner implement it: the in-process host runner (in the engine, over the runner
//! crates) and [`RemoteRunner`], which turns each method into a [`Call`] sent over a [`Wire`] to a
//! worker process, where [`serve_call`] answers it with that worker's own runner.

#![forbid(unsafe_code)]

pub mod dto;
mod error;
mod remote;
mod wire;

pub use dto::*;
pub use error::RunnerError;
pub use remote::RemoteRunner;
pub use wire::{Call, Event, OpenWorkspace, Reply, Wire, serve_call};

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// A boxed, sendable future: what the trait's methods return, so `dyn Runner` works.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A method's result.
pub type RunnerResult<T> = Result<T, RunnerError>;

/// Where a runner delivers the [`Event`]s it reports on its own (a file changed, a process
/// exited). Called on whatever thread observed the event: it must not block.
pub type EventSink = Arc<dyn Fn(Event) + Send + Sync>;

/// What the engine asks of a runner once a call is decided. Every argument and result is plain
/// data (serde), so a worker can serve the same trait over a byte stream.
pub trait Runner: std::fmt::Debug + Send + Sync + 'static {
    /// The window `[offset, offset + limit)` of a regular file and facts about the whole file
    /// (size, content version, link count). A file over `max_hash_bytes` is `TooLarge`.
    fn read(&self, req: ReadRequest) -> BoxFuture<'_, RunnerResult<FileWindow>>;
    /// The content version of a path (`None`: it does not exist).
    fn version(&self, req: VersionRequest) -> BoxFuture<'_, RunnerResult<Option<String>>>;
    /// lstat-style facts of a path, never following a symlink (`None`: it does not exist).
    fn stat(&self, req: PathRequest) -> BoxFuture<'_, RunnerResult<Option<FileStat>>>;
    /// `mkdir -p` of a directory beneath the workspace root, never following a symlink on the
    /// way (an existing directory is fine; a symlink or a file on the way is an error). A
    /// command's write scope creates an operator's missing write path with it.
    fn make_dirs(&self, req: PathRequest) -> BoxFuture<'_, RunnerResult<()>>;
    /// A bounded, no-follow listing beneath a directory (the path index is built from it).
    fn walk(&self, req: WalkRequest) -> BoxFuture<'_, RunnerResult<Listing>>;
    /// Content search over the given files (the engine chose them: listed and decided).
    fn grep(&self, req: GrepRequest) -> BoxFuture<'_, RunnerResult<GrepPage>>;
    /// The state of every path a patch touches, before anything is written: what the gateway
    /// records as the patch's journal in its store before it asks for [`Runner::apply`].
    fn snapshot(&self, req: SnapshotRequest) -> BoxFuture<'_, RunnerResult<Vec<Backup>>>;
    /// Applies a planned patch all-or-nothing. The runner snapshots the touched paths again and
    /// refuses, writing nothing, unless they still equal `journaled` (what the gateway recorded);
    /// a failed step rolls every path back.
    fn apply(&self, req: ApplyRequest) -> BoxFuture<'_, RunnerResult<AppliedPatch>>;
    /// Restores journaled backups (recovery of an interrupted patch, or an undo).
    fn restore(&self, req: RestoreRequest) -> BoxFuture<'_, RunnerResult<()>>;
    /// Starts a process (under the sandbox plan it carries, if any).
    fn spawn(&self, req: SpawnRequest) -> BoxFuture<'_, RunnerResult<SpawnedProcess>>;
    /// Writes to a process's stdin.
    fn write_stdin(&self, req: StdinRequest) -> BoxFuture<'_, RunnerResult<()>>;
    /// Resizes a process's terminal.
    fn resize(&self, req: ResizeRequest) -> BoxFuture<'_, RunnerResult<()>>;
    /// Reads a process's output from a cursor, waiting up to `wait_ms` for some.
    fn read_output(&self, req: OutputRequest) -> BoxFuture<'_, RunnerResult<OutputPage>>;
    /// A process's status once it has exited (waits for the exit).
    fn wait(&self, req: ProcessRef) -> BoxFuture<'_, RunnerResult<ProcessStatus>>;
    /// A process's status now.
    fn status(&self, req: ProcessRef) -> BoxFuture<'_, RunnerResult<ProcessStatus>>;
    /// Terminates a process's whole tree and returns its final status.
    fn terminate(&self, req: ProcessRef) -> BoxFuture<'_, RunnerResult<ProcessStatus>>;
    /// What the runner's kernel offers the command sandbox.
    fn probe_sandbox(&self) -> BoxFuture<'_, RunnerResult<SandboxProbe>>;
    /// Where to deliver the events the runner reports on its own (replaces an earlier sink).
    fn subscribe(&self, sink: EventSink);
}
