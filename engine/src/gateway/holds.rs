//! The hold machinery of approvals (issue #14) as one view of the gateway, [`Holds`]: whether a
//! call is held, the hold's `APPROVAL_REQUIRED`, the holds this server serves, `approval_resolve`'s
//! decision, `operation_resume` and the in-band answer. The holds' rows, errors and outcomes are
//! `approvals.rs`'s.

use crate::error::{ErrorCode, ToolError};
use crate::gateway::approvals::{
    InBandChannel, InFlight, Resumed, RunHeld, conflict, held_call, held_details, not_found,
    pinned_of, replay_outcome, resolve_in_store, resume_result, store_err, to_value, wire_state,
    with_id,
};
use crate::gateway::{Gateway, WorkspaceRuntime};
use crate::policy::PolicySnapshot;
use crate::request::{ApprovalFacts, Session, build_requests, confirm_requests, with_approval};
use crate::wire::{
    ApprovalDecision, ApprovalResolveParams, OperationResumeParams, OperationResumeResult,
    ToolCall, ToolResult,
};
use codespace_store::{ApprovalRow, ApprovalState, Store};
use serde_json::json;

/// The gateway seen as the server of approval holds ([`Gateway::holds`]).
pub struct Holds<'a>(&'a Gateway);

impl std::ops::Deref for Holds<'_> {
    type Target = Gateway;
    fn deref(&self) -> &Gateway {
        self.0
    }
}

impl Gateway {
    /// The approval holds this gateway serves.
    pub fn holds(&self) -> Holds<'_> {
        Holds(self)
    }
}

impl<'a> Holds<'a> {
    /// Whether Cedar holds an (allowed) apply_patch / exec_command call for a human: one
    /// `confirm` request per distinct sub-request; a matching permit or an evaluation error
    /// holds. Held decisions are audited.
    pub(crate) async fn confirm_holds(
        &self,
        snap: &PolicySnapshot,
        ws: &WorkspaceRuntime,
        call: &ToolCall,
        session: &Session,
    ) -> Result<bool, ToolError> {
        let mut reqs = build_requests(call, session, None)?;
        ws.fill_links(&mut reqs).await?;
        for r in &mut reqs {
            if let std::borrow::Cow::Owned(red) = self.config.redaction.text(&r.subject) {
                r.subject = red;
            }
        }
        let confirm = confirm_requests(&reqs);
        if confirm.is_empty() {
            return Ok(false);
        }
        let d = self
            .decider
            .probe(snap, &ws.facts, call.tool(), &confirm, session);
        let held = d.subs.iter().any(|s| s.allowed || !s.errors.is_empty());
        if held {
            self.decider.audit(snap, &d, &ws.facts, &confirm, session);
        }
        Ok(held)
    }

    /// The APPROVAL_REQUIRED error of a held call, with its hold's id.
    pub(crate) async fn hold(
        &self,
        ws: &WorkspaceRuntime,
        call: &ToolCall,
        session: &Session,
    ) -> ToolError {
        match self.hold_row(ws, call, session).await {
            Ok(row) => with_id(
                ToolError::new(
                    ErrorCode::ApprovalRequired,
                    format!(
                        "this {} waits for a human: approval `{}` is {}; once granted \
                         (approval_resolve, or the operator's `codespace approvals grant`), \
                         call operation_resume with the approval_id",
                        row.tool,
                        row.approval_id,
                        wire_state(row.state)
                    ),
                ),
                &row.approval_id,
            ),
            Err(e) => e,
        }
    }

    /// A hold this server serves: same workspace registration; `Err` is APPROVAL_NOT_FOUND.
    pub(crate) fn served_hold(
        &self,
        id: &str,
    ) -> Result<(ApprovalRow, &'a WorkspaceRuntime), ToolError> {
        let store = self.require_store()?;
        let row = store
            .approval(id, codespace_store::now_ms())
            .map_err(store_err)?
            .ok_or_else(|| not_found(id))?;
        let ws = self
            .0
            .workspaces
            .get(&row.workspace)
            .filter(|w| w.registration == row.registration)
            .ok_or_else(|| not_found(id))?;
        Ok((row, ws))
    }

    /// Decides `approval_resolve` over the tool channel on the hold's workspace: one Cedar
    /// request with `context.approval` (who asked, who answers, the answer); `Err` is the
    /// refusal, with the hold's id. A hold belongs to the client that asked: another client sees
    /// it only where a policy names it as a reviewer (a permit matching
    /// `context.approval.resolver`); refused, it gets `APPROVAL_NOT_FOUND`, as resume does (the
    /// refusal is audited all the same).
    pub(crate) fn decide_resolve(
        &self,
        snap: &PolicySnapshot,
        session: &Session,
        call: &ToolCall,
        p: &ApprovalResolveParams,
        row: &ApprovalRow,
        ws: &WorkspaceRuntime,
    ) -> Result<crate::policy::decide::Decision, ToolError> {
        let mut reqs = build_requests(call, session, None)?;
        with_approval(
            &mut reqs,
            &ApprovalFacts {
                channel: "tool".into(),
                requested_by: row.requested_by.clone(),
                resolved_by: session.client.clone(),
                resolver: session.resolver().to_string(),
                decision: p.decision.as_str().into(),
            },
        );
        let d = self
            .decider
            .decide(snap, &ws.facts, call.tool(), &reqs, session);
        if d.allowed() {
            Ok(d)
        } else if row.requested_by != session.client {
            Err(not_found(&p.approval_id))
        } else {
            Err(with_id(d.to_error(snap), &p.approval_id))
        }
    }

    /// Serves `operation_resume`: re-decides the held call under the current policies, runs
    /// it exactly once and stores its outcome; a repeat returns the stored outcome.
    pub(crate) async fn operation_resume(
        &self,
        snap: &std::sync::Arc<PolicySnapshot>,
        session: &Session,
        p: &OperationResumeParams,
        run: RunHeld,
    ) -> Result<OperationResumeResult, ToolError> {
        let id = p.approval_id.as_str();
        let (row, ws) = self.served_hold(id)?;
        // A hold belongs to the client that asked for it.
        if row.requested_by != session.client {
            return Err(not_found(id));
        }
        let call = ToolCall::OperationResume(p.clone());
        let mut reqs = build_requests(&call, session, None)?;
        with_approval(
            &mut reqs,
            &ApprovalFacts {
                channel: row.channel.clone().unwrap_or_else(|| "tool".into()),
                requested_by: row.requested_by.clone(),
                resolved_by: row.resolved_by.clone().unwrap_or_default(),
                resolver: row.resolved_by.clone().unwrap_or_default(),
                decision: "grant".into(),
            },
        );
        let d = self
            .decider
            .decide(snap, &ws.facts, call.tool(), &reqs, session);
        if !d.allowed() {
            return Err(with_id(d.to_error(snap), id));
        }
        let store = self.require_store()?;
        match row.state {
            ApprovalState::Consumed => return replay_outcome(&row),
            ApprovalState::Pending => {
                return Err(with_id(
                    ToolError::new(
                        ErrorCode::ApprovalRequired,
                        format!("approval `{id}` is still pending: it has not been granted"),
                    ),
                    id,
                ));
            }
            ApprovalState::Resuming => {
                if InFlight::contains(id) || row.tool == "exec_command" {
                    if !InFlight::contains(id) {
                        // An interrupted exec resume is never respawned.
                        return Err(with_id(
                            ToolError::new(
                                ErrorCode::ApprovalAmbiguous,
                                format!(
                                    "the resume of approval `{id}` was interrupted; the command \
                                     may have started and is not started again"
                                ),
                            ),
                            id,
                        ));
                    }
                    return Err(conflict(id, Some(ApprovalState::Resuming)));
                }
                // An interrupted patch resume: its operation key replays what the ledger holds.
                let guard = InFlight::enter(id)
                    .ok_or_else(|| conflict(id, Some(ApprovalState::Resuming)))?;
                let out = self.run_held(snap, session, &row, run).await;
                return self.finish(store, &row, session, out, guard);
            }
            ApprovalState::Granted => {}
            other => return Err(conflict(id, Some(other))),
        }
        let guard =
            InFlight::enter(id).ok_or_else(|| conflict(id, Some(ApprovalState::Resuming)))?;
        let now = codespace_store::now_ms();
        let Some(row) = store.begin_resume(id, now).map_err(store_err)? else {
            let state = store.approval(id, now).map_err(store_err)?.map(|r| r.state);
            return Err(conflict(id, state));
        };
        self.approval_event("approval_resumed", &row, &session.client, "tool");
        let out = self.run_held(snap, session, &row, run).await;
        self.finish(store, &row, session, out, guard)
    }

    /// What an in-band prompt shows of a pending hold `session` asked for: its summary and
    /// [`held_details`] (`None` for any other hold).
    pub fn pending_summary(
        &self,
        session: &Session,
        id: &str,
    ) -> Option<(String, Vec<(String, String)>)> {
        let (row, _) = self.served_hold(id).ok()?;
        if row.state != ApprovalState::Pending || row.requested_by != session.client {
            return None;
        }
        let details = row
            .arguments
            .as_ref()
            .map(|a| held_details(&self.config, &row.tool, a))
            .unwrap_or_default();
        Some((row.summary, details))
    }

    /// A human's answer in-band (channel `elicitation` or `mrtr`, through the asking client):
    /// decided by policy as `approval_resolve`; a grant resumes the held call at once and returns
    /// the held tool's own result; a deny is final (`APPROVAL_CONFLICT`, nothing ran). `run` runs
    /// the held call through its handler. Over `mrtr` the answer is single-use: a hold no longer
    /// pending is `APPROVAL_CONFLICT` (a replayed `requestState` never returns the stored result).
    pub(crate) async fn answer_in_band_with(
        &self,
        session: &Session,
        id: &str,
        decision: ApprovalDecision,
        channel: InBandChannel,
        run: RunHeld,
    ) -> Result<ToolResult, ToolError> {
        let snap = self.policy.snapshot();
        let out = self
            .answer_in_band_under(&snap, session, id, decision, channel, run)
            .await;
        out.map_err(|mut e| {
            if let std::borrow::Cow::Owned(red) = self.config.redaction.text(&e.message) {
                e.message = red;
            }
            e
        })
    }

    async fn answer_in_band_under(
        &self,
        snap: &std::sync::Arc<PolicySnapshot>,
        session: &Session,
        id: &str,
        decision: ApprovalDecision,
        channel: InBandChannel,
        run: RunHeld,
    ) -> Result<ToolResult, ToolError> {
        let (row, ws) = self.served_hold(id)?;
        if row.requested_by != session.client {
            return Err(not_found(id));
        }
        if channel == InBandChannel::Mrtr && row.state != ApprovalState::Pending {
            return Err(conflict(id, Some(row.state)));
        }
        let call = ToolCall::ApprovalResolve(ApprovalResolveParams {
            approval_id: id.to_string(),
            decision,
        });
        let mut reqs = build_requests(&call, session, None)?;
        with_approval(
            &mut reqs,
            &ApprovalFacts {
                channel: channel.as_str().into(),
                requested_by: row.requested_by.clone(),
                resolved_by: session.client.clone(),
                resolver: session.resolver().to_string(),
                decision: decision.as_str().into(),
            },
        );
        let d = self
            .decider
            .decide(snap, &ws.facts, call.tool(), &reqs, session);
        if !d.allowed() {
            return Err(with_id(d.to_error(snap), id));
        }
        let store = self.require_store()?;
        resolve_in_store(store, &row, decision, session.resolver(), channel.as_str())?;
        if decision == ApprovalDecision::Deny {
            return Err(with_id(
                ToolError::new(
                    ErrorCode::ApprovalConflict,
                    format!("approval `{id}` was denied by the user; nothing ran"),
                ),
                id,
            ));
        }
        let resumed = self
            .operation_resume(
                snap,
                session,
                &OperationResumeParams {
                    approval_id: id.to_string(),
                },
                run,
            )
            .await?;
        match (resumed.apply_patch, resumed.exec_command) {
            (Some(r), _) => Ok(ToolResult::ApplyPatch(r)),
            (None, Some(r)) => Ok(ToolResult::ExecCommand(Box::new(r))),
            (None, None) => Err(ToolError::new(
                ErrorCode::Internal,
                "the resume returned no result",
            )),
        }
    }

    /// Runs the held call (re-decided and version-checked by the tool itself).
    async fn run_held(
        &self,
        snap: &std::sync::Arc<PolicySnapshot>,
        session: &Session,
        row: &ApprovalRow,
        run: RunHeld,
    ) -> Result<ToolResult, ToolError> {
        let args = row
            .arguments
            .as_ref()
            .ok_or_else(|| conflict(&row.approval_id, Some(ApprovalState::Denied)))?;
        let resumed = Resumed {
            pinned: pinned_of(row),
        };
        // The hold's own operation key makes the run idempotent: a repeat after a crash replays
        // what the ledger holds instead of running again.
        let key = format!("approval-{}", row.approval_id);
        match held_call(&row.tool, args)? {
            ToolCall::ApplyPatch(mut p) => {
                p.operation_key.get_or_insert(key);
                let call = ToolCall::ApplyPatch(p.clone());
                let auth = self
                    .authorize_held(snap, &p.workspace_id, &call, session, false)
                    .await?;
                run(auth, call, Some(resumed)).await
            }
            ToolCall::WriteFile(mut p) => {
                p.operation_key.get_or_insert(key);
                let call = ToolCall::WriteFile(p.clone());
                let auth = self
                    .authorize_held(snap, &p.workspace_id, &call, session, false)
                    .await?;
                run(auth, call, Some(resumed)).await
            }
            ToolCall::ExecCommand(mut p) => {
                p.operation_key.get_or_insert(key);
                let call = ToolCall::ExecCommand(p.clone());
                let auth = self
                    .authorize_held(snap, &p.workspace_id, &call, session, false)
                    .await?;
                run(auth, call, None).await
            }
            other => Err(ToolError::new(
                ErrorCode::Internal,
                format!("`{}` cannot be held", other.tool()),
            )),
        }
    }

    /// Stores the outcome of a resume: consumed, unless nothing ran (the hold is granted
    /// again and the error returned).
    fn finish(
        &self,
        store: &Store,
        row: &ApprovalRow,
        session: &Session,
        out: Result<ToolResult, ToolError>,
        guard: InFlight,
    ) -> Result<OperationResumeResult, ToolError> {
        let id = row.approval_id.as_str();
        let now = codespace_store::now_ms();
        let result = match out {
            Ok(v) => {
                // The stored outcome is the result as the wire shows it (a replay reads it).
                let outcome = json!({"ok": to_value(&v)?});
                store
                    .finish_resume(id, true, Some(&outcome), now)
                    .map_err(store_err)?;
                resume_result(id, v, false)
            }
            Err(e) => {
                let nothing_ran = e.operation_id.is_none()
                    && matches!(
                        e.code,
                        ErrorCode::Unauthorized
                            | ErrorCode::WorkspaceBusy
                            | ErrorCode::ResourceQueueFull
                            | ErrorCode::WorkspaceNotFound
                    );
                if nothing_ran {
                    store
                        .finish_resume(id, false, None, now)
                        .map_err(store_err)?;
                } else {
                    let outcome = json!({"error": e});
                    store
                        .finish_resume(id, true, Some(&outcome), now)
                        .map_err(store_err)?;
                }
                Err(with_id(e, id))
            }
        };
        drop(guard);
        if let Ok(Some(after)) = store.approval(id, now) {
            self.approval_event("approval_finished", &after, &session.client, "tool");
        }
        result
    }
}
