//! Test and glue entry points for a worker's workspace (the runtime itself is
//! `WorkspaceRuntime::remote` in `mod.rs`: no host root, its path index listing through the
//! runner, its version table fed by the runner's events): [`with_worker_runner`] serves a
//! workspace through a given runner, [`host_runner`] lends the gateway's in-process runner.
//! Nothing here opens a host path.

use super::{Gateway, WorkspaceRuntime};
use codespace_runner_api::{Event, Runner};
use std::sync::Arc;

/// Serves the worker's workspace `workspace` of `gw` through `runner` (a worker client, or a
/// test's in-memory one): its files are reached only through it from now on, and its runner's
/// file events feed the workspace's version table. `Err` names a workspace that is unknown or
/// whose files are on this host.
#[doc(hidden)]
pub fn with_worker_runner(
    mut gw: Gateway,
    workspace: &str,
    runner: Arc<dyn Runner>,
) -> Result<Gateway, String> {
    attach(&mut gw, workspace, runner)?;
    Ok(gw)
}

/// [`with_worker_runner`] in place.
pub(super) fn attach(
    gw: &mut Gateway,
    workspace: &str,
    runner: Arc<dyn Runner>,
) -> Result<(), String> {
    let max = gw.config.limits.max_walk_entries;
    let ws = gw
        .workspaces
        .remove(workspace)
        .ok_or_else(|| format!("unknown workspace {workspace}"))?;
    if ws.root.is_some() {
        gw.workspaces.insert(workspace.to_string(), ws);
        return Err(format!("workspace {workspace} is on this host"));
    }
    let mut rt = WorkspaceRuntime::remote(ws.facts, Arc::clone(&runner), ws.registration, max);
    rt.runner_attached = true;
    let tables =
        std::collections::HashMap::from([(workspace.to_string(), Arc::clone(&rt.versions))]);
    runner.subscribe(Arc::new(move |e: Event| {
        crate::versions::runner_event(&tables, &e)
    }));
    gw.workspaces.insert(workspace.to_string(), rt);
    Ok(())
}

/// The in-process runner of this host (what tests put behind an in-memory wire).
#[doc(hidden)]
pub fn host_runner(gw: &Gateway) -> Arc<dyn Runner> {
    Arc::clone(&gw.host) as Arc<dyn Runner>
}
