//! Workspaces whose files are a worker's: their runtime has no host root, its path index lists
//! through the runner (`Runner::walk`), its version table never watches the host and follows the
//! runner's events, and their patch journals are recovered through the runner
//! (`Runner::restore`) once it is attached. Nothing here opens a host path.

use super::{Gateway, WorkspaceRuntime};
use crate::config::EnvironmentSpec;
use crate::request::WorkspaceFacts;
use codespace_runner_api::{
    BoxFuture, Call, Event, EventSink, RemoteRunner, Reply, Runner, RunnerError, Wire,
};
use std::path::Path;
use std::sync::Arc;

/// Whether a workspace of an environment of this kind has its files on this host (`host`, and
/// `linux-container`, whose reads the server serves itself).
pub(crate) fn on_host(spec: &EnvironmentSpec) -> bool {
    matches!(spec, EnvironmentSpec::Host | EnvironmentSpec::LinuxContainer)
}

/// The store identity of a worker's workspace root (its registration key): the environment and
/// the root as the worker sees it (no host stat: the path is not this host's).
pub(crate) fn root_identity(environment: &str, root: &Path) -> String {
    format!("environment:{environment}:{}", root.display())
}

/// The wire of an environment no worker client serves yet: every call is `Unavailable`.
struct NoWorker;

impl Wire for NoWorker {
    fn call(&self, call: Call) -> BoxFuture<'_, Result<Reply, RunnerError>> {
        Box::pin(async move {
            Err(RunnerError::Unavailable {
                reason: format!("no worker serves this environment ({})", call.method()),
            })
        })
    }
    fn subscribe(&self, _sink: EventSink) {}
}

/// A runner that answers every call `Unavailable` (a worker's workspace before its client).
pub(crate) fn no_worker() -> Arc<dyn Runner> {
    Arc::new(RemoteRunner::new(NoWorker))
}

/// The runtime of a worker's workspace served by `runner`.
pub(crate) fn runtime(
    facts: WorkspaceFacts,
    runner: Arc<dyn Runner>,
    registration: String,
    max_walk_entries: usize,
) -> WorkspaceRuntime {
    let files = crate::index::RunnerFiles {
        runner: Arc::clone(&runner),
        workspace: facts.id.clone(),
    };
    WorkspaceRuntime {
        index: Arc::new(crate::index::PathIndex::new_remote(files, max_walk_entries)),
        versions: Arc::new(crate::versions::Versions::remote()),
        facts,
        root: None,
        runner,
        registration,
        runner_attached: false,
        recovered_for: std::sync::atomic::AtomicU64::new(u64::MAX),
        applying: std::sync::Mutex::default(),
    }
}

/// Once per worker connection (`connection`: its restart count), before the connection serves
/// a call of `ws`: the journals a dead connection left are restored through the worker
/// ([`crate::gateway::patches::recover_worker`]).
pub(crate) async fn recover_on_connect(gw: &Gateway, ws: &WorkspaceRuntime, connection: u64) {
    use std::sync::atomic::Ordering;
    if ws.recovered_for.swap(connection, Ordering::AcqRel) == connection {
        return;
    }
    let recovered = crate::gateway::patches::recover_worker(gw, &ws.facts.id).await;
    if !recovered.is_empty() {
        tracing::warn!(workspace = %ws.facts.id, operations = ?recovered, "rolled back interrupted patches through the worker");
    }
}

/// Feeds a runner's file events to the version tables of its workspaces (`FileChanged`: those
/// paths' versions unknown; `WatchLost`: every version unknown). Other events are not files'.
pub(crate) fn file_event(
    tables: &std::collections::HashMap<String, Arc<crate::versions::Versions>>,
    event: &Event,
) {
    match event {
        Event::FileChanged { workspace, paths } => {
            if let Some(v) = tables.get(workspace) {
                v.runner_changed(paths);
            }
        }
        Event::WatchLost { workspace } => {
            if let Some(v) = tables.get(workspace) {
                v.runner_lost();
            }
        }
        Event::ProcessExited { .. } => {}
    }
}

impl Gateway {
    /// Serves the worker's workspace `workspace` through `runner` (a worker client, or a test's
    /// in-memory one): its files are reached only through it from now on, and its runner's file
    /// events feed the workspace's version table. `Err` names a workspace that is unknown or
    /// whose files are on this host.
    #[doc(hidden)]
    pub fn with_worker_runner(
        mut self,
        workspace: &str,
        runner: Arc<dyn Runner>,
    ) -> Result<Gateway, String> {
        let max = self.config.limits.max_walk_entries;
        let ws = self
            .workspaces
            .remove(workspace)
            .ok_or_else(|| format!("unknown workspace {workspace}"))?;
        if ws.root.is_some() {
            self.workspaces.insert(workspace.to_string(), ws);
            return Err(format!("workspace {workspace} is on this host"));
        }
        let mut rt = runtime(ws.facts, Arc::clone(&runner), ws.registration, max);
        rt.runner_attached = true;
        let tables = std::collections::HashMap::from([(
            workspace.to_string(),
            Arc::clone(&rt.versions),
        )]);
        runner.subscribe(Arc::new(move |e: Event| file_event(&tables, &e)));
        self.workspaces.insert(workspace.to_string(), rt);
        Ok(self)
    }

    /// The in-process runner of this host (what `codespace worker` serves, and what tests put
    /// behind an in-memory wire).
    #[doc(hidden)]
    pub fn host_runner(&self) -> Arc<dyn Runner> {
        Arc::clone(&self.host) as Arc<dyn Runner>
    }
}
