//! The gateway's side of the process tools: which process a call is about (its workspace and the
//! facts Cedar reads: same client, argv, tty, env names, background), the sandbox helper, and the
//! live count.

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

impl Services {
    /// Number of managed processes still running.
    pub fn live_processes(&self) -> usize {
        self.processes.live_count()
    }

    /// The per-process task limit and how this host enforces it.
    pub fn pids_isolation(&self) -> codespace_runner_process::PidsIsolation {
        self.processes.pids_isolation()
    }

    /// Kills every process group the gateway owns (stdin EOF, SIGTERM): no orphans.
    pub async fn shutdown(&self) {
        self.processes.shutdown().await;
        // Each worker environment's transport ends: workers disconnected, containers the
        // server started removed (stopped when kept), ssh master connections closed.
        for w in self.workers.values() {
            w.shutdown().await;
        }
        // The queued audit rows reach the store before the process exits.
        self.stop_audit();
    }
}
