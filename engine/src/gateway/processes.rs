//! The gateway's side of the process tools: which process a call is about (its workspace and the
//! facts Cedar reads: same client, argv, tty, env names, background), the sandbox helper, the
//! live count and `environment_lost` (a worker's processes become `lost`).

use super::{Authorized, Gateway, Services};
use crate::error::{ErrorCode, ToolError};
use crate::policy::PolicySnapshot;
use crate::request::{ProcessFacts, Session};
use crate::wire::ToolCall;
use std::path::PathBuf;
use std::sync::Arc;

impl Gateway {
    /// Sets the executable that acts as the sandbox helper (`codespace __sandbox-exec`). Without
    /// it, a workspace whose sandbox is enforced refuses every command (fail closed).
    pub fn with_helper_exe(mut self, exe: PathBuf) -> Gateway {
        self.svc.processes.set_helper_exe(exe);
        self.svc
            .host
            .set_helper_exe(self.svc.processes.helper_exe.clone());
        self
    }

    /// Finds the process a call is about and decides the call on its workspace with the
    /// process's facts: the handler's [`Authorized`] value, or the refusal.
    pub(crate) async fn authorize_process<'a>(
        &'a self,
        snap: &'a Arc<PolicySnapshot>,
        session: &'a Session,
        call: &ToolCall,
        id: &str,
    ) -> Result<Authorized<'a>, ToolError> {
        let entry = self.processes.entry(id)?;
        let ws = self.workspace(&entry.workspace).map_err(|_| {
            ToolError::new(
                ErrorCode::ProcessNotFound,
                "the process's workspace is gone",
            )
        })?;
        let facts = ProcessFacts {
            id: id.to_string(),
            same_client: entry.client == session.client,
            argv: entry.argv.clone(),
            tty: entry.tty,
            env_names: entry.env_names.clone(),
            background: entry.background,
        };
        let decided = self
            .authorize(snap, ws, call, session, Some(&facts))
            .await?;
        Ok(Authorized::new(self, snap, ws, session, decided))
    }
}

/// `gw` with every workspace of `environment` served through `runner` instead, as a worker's
/// workspace (no host root from now on): the engine's tests put an in-memory worker there.
#[doc(hidden)]
pub fn with_runner(
    mut gw: Gateway,
    environment: &str,
    runner: Arc<dyn codespace_runner_api::Runner>,
) -> Gateway {
    let ids: Vec<String> = gw
        .workspaces
        .iter()
        .filter(|(_, ws)| ws.facts.environment == environment)
        .map(|(id, _)| id.clone())
        .collect();
    for id in ids {
        if let Some(ws) = gw.workspaces.get_mut(&id) {
            ws.root = None;
        }
        // Cannot fail: the workspace exists and has no host root now.
        let _ = super::remote::attach(&mut gw, &id, Arc::clone(&runner));
    }
    gw
}

impl Services {
    /// Number of managed processes still running (this host's, and those of other
    /// environments' runners not known to have ended).
    pub fn live_processes(&self) -> usize {
        let host = Arc::clone(&self.host) as Arc<dyn codespace_runner_api::Runner>;
        self.host.live_count() + self.processes.registry.live_elsewhere(&host)
    }

    /// The per-process task limit and how this host enforces it.
    pub fn pids_isolation(&self) -> codespace_runner_process::PidsIsolation {
        self.host.pids_isolation()
    }

    /// The worker of `environment` died or disconnected (its supervisor's disconnect hook
    /// calls this): every process of it the gateway still counted as live becomes `lost` —
    /// its lease released, its store row `lost`, every later call on it answered as lost
    /// (`read_process` at end of output with `state: "lost"`, `process_status` `lost`). Its
    /// id is never handed to the next worker. Returns how many processes were lost.
    pub fn environment_lost(&self, environment: &str) -> usize {
        let lost = self.processes.registry.lose_environment(environment);
        if !lost.is_empty() {
            tracing::warn!(
                environment,
                processes = lost.len(),
                "processes lost with their worker"
            );
        }
        crate::processes::record_lost(&self.leases, self.store.as_ref(), &lost);
        lost.len()
    }

    /// Kills every process group the gateway owns (stdin EOF, SIGTERM): no orphans.
    pub async fn shutdown(&self) {
        self.host.shutdown().await;
        // Each worker environment's transport ends: workers disconnected, containers the
        // server started removed (stopped when kept), ssh master connections closed.
        for w in self.workers.values() {
            w.shutdown().await;
        }
        // The queued audit rows reach the store before the process exits.
        self.stop_audit();
    }
}
