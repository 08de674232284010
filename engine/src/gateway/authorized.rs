//! [`Authorized`]: what a tool handler gets once the gateway has resolved the call's workspace
//! and decided it. It can only be built here, in the gateway module, so a handler that runs a
//! runner has a decision behind it by construction; further decisions a handler needs (a read
//! re-decided with the opened file's link count, the per-entry filter of a listing) are asked
//! through it and audited by the gateway like the first.

use super::{Gateway, Services, WorkspaceRuntime};
use crate::policy::decide::Decision;
use crate::policy::{Action, PolicySnapshot};
use crate::request::{Session, SubRequest};
use codespace_runner_fs::RelPath;
use std::sync::Arc;

/// An allowing decision with what the request builder parsed for it (the typed action, the
/// target paths, the parsed patch), so a handler need not parse the call again.
#[derive(Debug)]
pub(crate) struct Decided {
    pub(super) decision: Decision,
    pub(super) action: Action,
    pub(super) targets: Vec<RelPath>,
    pub(super) patch: Option<codespace_runner_patch::Patch>,
}

impl Decided {
    /// A decision whose requests the gateway built itself (nothing parsed to hand on).
    pub(super) fn bare(decision: Decision, action: Action) -> Decided {
        Decided {
            decision,
            action,
            targets: Vec::new(),
            patch: None,
        }
    }
}

/// A decided call on one workspace. Handlers are its methods (in `crate::tools`); through it
/// they reach the [`Services`] (by `Deref`), the workspace and the decision, never the gateway.
pub(crate) struct Authorized<'a> {
    gateway: &'a Gateway,
    snap: &'a Arc<PolicySnapshot>,
    ws: &'a WorkspaceRuntime,
    ws_config: Option<&'a crate::config::Workspace>,
    session: &'a Session,
    decision: Decision,
    action: Action,
    targets: Vec<RelPath>,
    patch: Option<codespace_runner_patch::Patch>,
}

impl std::ops::Deref for Authorized<'_> {
    type Target = Services;
    fn deref(&self) -> &Services {
        &self.gateway.svc
    }
}

impl<'a> Authorized<'a> {
    /// Only the gateway builds one, after an allowing decision.
    pub(super) fn new(
        gateway: &'a Gateway,
        snap: &'a Arc<PolicySnapshot>,
        ws: &'a WorkspaceRuntime,
        session: &'a Session,
        decided: Decided,
    ) -> Authorized<'a> {
        let Decided {
            decision,
            action,
            targets,
            patch,
        } = decided;
        Authorized {
            gateway,
            snap,
            ws,
            ws_config: gateway.svc.config.workspaces.get(&ws.facts.id),
            session,
            decision,
            action,
            targets,
            patch,
        }
    }

    /// The call's action, typed.
    pub(crate) fn action(&self) -> Action {
        self.action
    }

    /// The call's first target path as the request builder parsed it (a `read`'s path, the
    /// searched directory, a patch's first touched path, a command's cwd).
    /// `INTERNAL` if the builder parsed none (a call of another tool).
    pub(crate) fn target(&self) -> Result<&RelPath, crate::ToolError> {
        self.targets.first().ok_or_else(|| {
            crate::ToolError::new(
                crate::ErrorCode::Internal,
                format!("{}: the request builder parsed no path", self.action),
            )
        })
    }

    /// `apply_patch`: the patch the request builder parsed (`INTERNAL` for another tool).
    pub(crate) fn patch(&self) -> Result<&codespace_runner_patch::Patch, crate::ToolError> {
        self.patch.as_ref().ok_or_else(|| {
            crate::ToolError::new(
                crate::ErrorCode::Internal,
                format!("{}: the request builder parsed no patch", self.action),
            )
        })
    }

    /// The workspace the call was decided on.
    pub(crate) fn ws(&self) -> &'a WorkspaceRuntime {
        self.ws
    }

    /// The operator's config of the call's workspace, looked up once when the call was
    /// authorized (`None` only if the config no longer names it).
    pub(crate) fn ws_config(&self) -> Option<&'a crate::config::Workspace> {
        self.ws_config
    }

    /// The policy snapshot the call was decided under (for denial texts and signatures).
    pub(crate) fn snap(&self) -> &'a Arc<PolicySnapshot> {
        self.snap
    }

    /// The caller.
    pub(crate) fn session(&self) -> &'a Session {
        self.session
    }

    /// The allowing decision.
    pub(crate) fn decision(&self) -> &Decision {
        &self.decision
    }

    /// A further decision of this call on its workspace, audited: `Err` is the refusal.
    pub(crate) fn decide_more(
        &self,
        tool: Action,
        reqs: &[SubRequest],
    ) -> Result<Decision, crate::ToolError> {
        let d = self.gateway.decider.decide(
            self.snap,
            &self.ws.facts,
            tool.as_str(),
            reqs,
            self.session,
        );
        if d.allowed() {
            Ok(d)
        } else {
            Err(d.to_error(self.snap))
        }
    }

    /// Further decisions of this call that write no audit row: probes whose answers are
    /// reported, not acted on, and listings that audit only what they withhold.
    pub(crate) fn decide_quietly(&self, tool: Action, reqs: &[SubRequest]) -> Decision {
        self.gateway
            .decider
            .probe(self.snap, &self.ws.facts, tool.as_str(), reqs, self.session)
    }

    /// An answer derived from quiet probes under the call's policy snapshot, kept until a
    /// reload (see [`codespace_policy::Decider::memo`]); `key` names what else it depends on.
    pub(crate) fn probe_memo<T: std::any::Any + Send + Sync>(
        &self,
        key: &str,
        derive: impl FnOnce() -> T,
    ) -> Arc<T> {
        self.gateway.decider.memo(self.snap, key, derive)
    }

    /// The decision-signature plan of the call's policy snapshot.
    pub(crate) fn signature_plan(&self) -> Arc<crate::policy::signature::SignaturePlan> {
        self.gateway.decider.signature_plan(self.snap)
    }

    /// Audit rows for entries a listing withheld (see [`codespace_policy::Decider::audit_withheld`]).
    pub(crate) fn audit_withheld(
        &self,
        d: &Decision,
        reqs: &[SubRequest],
        paths: &[(String, usize)],
    ) {
        self.gateway.decider.audit_withheld(
            self.snap,
            d,
            &self.ws.facts,
            reqs,
            paths,
            self.session,
        );
    }
}

impl Authorized<'_> {
    /// Mints the call's operation (of its own tool) on its workspace (or finds the replay of
    /// its key).
    pub(crate) fn begin_operation(
        &self,
        key: Option<&str>,
        fingerprint: &str,
    ) -> Result<crate::gateway::ops::Begin, crate::ToolError> {
        self.prepare_operation(key, fingerprint)?.commit()
    }

    /// The operation this call would mint on its workspace (nothing stored yet: see
    /// [`super::ops::Minted`]).
    pub(crate) fn prepare_operation(
        &self,
        key: Option<&str>,
        fingerprint: &str,
    ) -> Result<super::ops::Minting, crate::ToolError> {
        super::ops::prepare_operation(
            self.gateway,
            self.action.as_str(),
            &self.ws.facts.id,
            key,
            fingerprint,
            self.session,
        )
    }

    /// The unexpired operations the caller keyed with `key` (see [`super::ops::keyed_operations`]).
    pub(crate) fn keyed_operations(
        &self,
        key: &str,
        tool: Option<Action>,
    ) -> Result<Vec<codespace_store::OperationRow>, crate::ToolError> {
        super::ops::keyed_operations(self.gateway, self.session, key, tool.map(Action::as_str))
    }

    /// Waits for the call's workspace lease (FIFO, bounded by `limits.max_waiters`) on behalf
    /// of the caller, under the operator's `lease_scope`; the handler says when (after its
    /// operation key showed the call is not a replay).
    pub(crate) async fn lease(&self) -> Result<crate::lease::RequestLease, crate::ToolError> {
        let scope = self.ws_config.map(|w| w.lease_scope).unwrap_or_default();
        self.leases
            .acquire_as(&self.ws.facts.id, &self.session.client, scope)
            .await
    }

    /// The secret masks a command of this call needs (decided here, see `gateway/masks.rs`).
    pub(crate) async fn secret_masks(
        &self,
        listing: &crate::index::start::StartListing<'_>,
    ) -> Result<Vec<crate::mask_cache::Mask>, crate::ToolError> {
        self.gateway
            .secret_masks(self.snap, self.ws, self.session, listing)
            .await
    }

    /// The write scope of the command this `exec_command` call is about to start (decided and
    /// audited here, see `gateway/write_scope.rs`).
    pub(crate) async fn write_scope(
        &self,
        exec: &crate::request::ExecFacts,
        listing: &crate::index::start::StartListing<'_>,
    ) -> Result<super::write_scope::WriteScope, crate::ToolError> {
        super::write_scope::write_scope(
            self.gateway,
            self.snap,
            self.ws,
            self.session,
            &self.decision,
            exec,
            listing,
        )
        .await
    }

    /// The write scope of an `after_patch` hook of this `apply_patch` call (see
    /// `gateway/write_scope.rs`): `dirs` decided under the hook's own decision.
    pub(crate) async fn hook_write_scope(
        &self,
        hook_decision: &Decision,
        exec: &crate::request::ExecFacts,
        dirs: &[RelPath],
        listing: &crate::index::start::StartListing<'_>,
    ) -> Result<super::write_scope::WriteScope, crate::ToolError> {
        super::write_scope::hook_write_scope(
            self.gateway,
            self.snap,
            self.ws,
            self.session,
            hook_decision,
            exec,
            dirs,
            listing,
        )
        .await
    }

    /// Decides a large batch of this call's sub-requests on the blocking pool (no cache, no
    /// audit rows: the listing tools audit what they withhold).
    pub(crate) async fn decide_on_blocking_pool(
        &self,
        tool: Action,
        reqs: Vec<SubRequest>,
    ) -> Result<Decision, crate::ToolError> {
        let tool = tool.as_str();
        let decider = Arc::clone(&self.gateway.decider);
        let snap = Arc::clone(self.snap);
        let facts = self.ws.facts.clone();
        let session = self.session.clone();
        tokio::task::spawn_blocking(move || {
            decider.probe_uncached(&snap, &facts, tool, &reqs, &session)
        })
        .await
        .map_err(|e| {
            crate::ToolError::new(crate::ErrorCode::Internal, format!("blocking task: {e}"))
        })
    }
}
