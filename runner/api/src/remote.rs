//! [`RemoteRunner`]: the gateway's side of a worker. Each [`Runner`] method becomes a [`Call`]
//! over a [`Wire`]; the [`Reply`] becomes the method's result. A reply of the wrong kind (a
//! worker that does not speak this protocol) is an `Internal` error, never a guess.

use crate::dto::*;
use crate::{BoxFuture, Call, EventSink, Reply, Runner, RunnerError, RunnerResult, Wire};

/// A [`Runner`] served by a worker at the other end of `W`.
pub struct RemoteRunner<W: Wire> {
    wire: W,
}

impl<W: Wire> std::fmt::Debug for RemoteRunner<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteRunner").finish_non_exhaustive()
    }
}

impl<W: Wire> RemoteRunner<W> {
    /// A runner over `wire`.
    pub fn new(wire: W) -> RemoteRunner<W> {
        RemoteRunner { wire }
    }

    /// The transport.
    pub fn wire(&self) -> &W {
        &self.wire
    }

    /// Sends `call` and takes the reply `pick` accepts.
    fn ask<T: Send + 'static>(
        &self,
        call: Call,
        pick: fn(Reply) -> Result<T, Reply>,
    ) -> BoxFuture<'_, RunnerResult<T>> {
        Box::pin(async move {
            let method = call.method();
            match self.wire.call(call).await? {
                Reply::Error(e) => Err(e),
                reply => pick(reply).map_err(|other| {
                    RunnerError::internal(format!(
                        "the worker answered {method} with {}",
                        reply_kind(&other)
                    ))
                }),
            }
        })
    }
}

fn reply_kind(r: &Reply) -> &'static str {
    match r {
        Reply::Window(_) => "a file window",
        Reply::Version(_) => "a version",
        Reply::Stat(_) => "a stat",
        Reply::Listing(_) => "a listing",
        Reply::Grep(_) => "a grep page",
        Reply::Backups(_) => "backups",
        Reply::Applied(_) => "an applied patch",
        Reply::Spawned(_) => "a spawned process",
        Reply::Output(_) => "output",
        Reply::Status(_) => "a process status",
        Reply::Probe(_) => "a sandbox probe",
        Reply::Done => "done",
        Reply::Error(_) => "an error",
    }
}

fn done(r: Reply) -> Result<(), Reply> {
    match r {
        Reply::Done => Ok(()),
        other => Err(other),
    }
}

fn status(r: Reply) -> Result<ProcessStatus, Reply> {
    match r {
        Reply::Status(s) => Ok(s),
        other => Err(other),
    }
}

impl<W: Wire> Runner for RemoteRunner<W> {
    fn read(&self, req: ReadRequest) -> BoxFuture<'_, RunnerResult<FileWindow>> {
        self.ask(Call::Read(req), |r| match r {
            Reply::Window(w) => Ok(w),
            other => Err(other),
        })
    }
    fn version(&self, req: VersionRequest) -> BoxFuture<'_, RunnerResult<Option<String>>> {
        self.ask(Call::Version(req), |r| match r {
            Reply::Version(v) => Ok(v),
            other => Err(other),
        })
    }
    fn stat(&self, req: PathRequest) -> BoxFuture<'_, RunnerResult<Option<FileStat>>> {
        self.ask(Call::Stat(req), |r| match r {
            Reply::Stat(s) => Ok(s),
            other => Err(other),
        })
    }
    fn make_dirs(&self, req: PathRequest) -> BoxFuture<'_, RunnerResult<()>> {
        self.ask(Call::MakeDirs(req), |r| match r {
            Reply::Done => Ok(()),
            other => Err(other),
        })
    }
    fn walk(&self, req: WalkRequest) -> BoxFuture<'_, RunnerResult<Listing>> {
        self.ask(Call::Walk(req), |r| match r {
            Reply::Listing(l) => Ok(l),
            other => Err(other),
        })
    }
    fn grep(&self, req: GrepRequest) -> BoxFuture<'_, RunnerResult<GrepPage>> {
        self.ask(Call::Grep(req), |r| match r {
            Reply::Grep(g) => Ok(g),
            other => Err(other),
        })
    }
    fn snapshot(&self, req: SnapshotRequest) -> BoxFuture<'_, RunnerResult<Vec<Backup>>> {
        self.ask(Call::Snapshot(req), |r| match r {
            Reply::Backups(b) => Ok(b),
            other => Err(other),
        })
    }
    fn apply(&self, req: ApplyRequest) -> BoxFuture<'_, RunnerResult<AppliedPatch>> {
        self.ask(Call::Apply(req), |r| match r {
            Reply::Applied(a) => Ok(a),
            other => Err(other),
        })
    }
    fn restore(&self, req: RestoreRequest) -> BoxFuture<'_, RunnerResult<()>> {
        self.ask(Call::Restore(req), done)
    }
    fn spawn(&self, req: SpawnRequest) -> BoxFuture<'_, RunnerResult<SpawnedProcess>> {
        self.ask(Call::Spawn(Box::new(req)), |r| match r {
            Reply::Spawned(s) => Ok(s),
            other => Err(other),
        })
    }
    fn write_stdin(&self, req: StdinRequest) -> BoxFuture<'_, RunnerResult<()>> {
        self.ask(Call::WriteStdin(req), done)
    }
    fn resize(&self, req: ResizeRequest) -> BoxFuture<'_, RunnerResult<()>> {
        self.ask(Call::Resize(req), done)
    }
    fn read_output(&self, req: OutputRequest) -> BoxFuture<'_, RunnerResult<OutputPage>> {
        self.ask(Call::ReadOutput(req), |r| match r {
            Reply::Output(o) => Ok(o),
            other => Err(other),
        })
    }
    fn wait(&self, req: ProcessRef) -> BoxFuture<'_, RunnerResult<ProcessStatus>> {
        self.ask(Call::Wait(req), status)
    }
    fn status(&self, req: ProcessRef) -> BoxFuture<'_, RunnerResult<ProcessStatus>> {
        self.ask(Call::Status(req), status)
    }
    fn terminate(&self, req: ProcessRef) -> BoxFuture<'_, RunnerResult<ProcessStatus>> {
        self.ask(Call::Terminate(req), status)
    }
    fn probe_sandbox(&self) -> BoxFuture<'_, RunnerResult<SandboxProbe>> {
        self.ask(Call::ProbeSandbox, |r| match r {
            Reply::Probe(p) => Ok(p),
            other => Err(other),
        })
    }
    fn subscribe(&self, sink: EventSink) {
        self.wire.subscribe(sink);
    }
}
