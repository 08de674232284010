//! Approval holds (issue #14): which allowed `apply_patch` / `exec_command` calls wait for a
//! human (Cedar's `confirm` action), the holds in the store, `approval_create`,
//! `approval_resolve` (a Cedar request with `context.approval`), `operation_resume` (re-decided
//! under the current policies, run exactly once, replayed from the stored outcome) and the
//! operator CLI's resolution. Holds are bound to the client that asked, the workspace identity
//! (registration) and the canonical arguments.

use crate::config::Config;
use crate::error::{ErrorCode, ToolError};
use crate::gateway::ops::fingerprint;
use crate::gateway::{Gateway, Services, WorkspaceRuntime};
use crate::policy::PolicySnapshot;
use crate::request::{
    ApprovalFacts, Session, SubRequest, WorkspaceFacts, build_requests, confirm_requests,
    with_approval,
};
use crate::wire::{
    ApplyPatchParams, ApplyPatchResult, ApprovalCreateParams, ApprovalDecision,
    ApprovalResolveParams, ApprovalStateResult, ExecCommandResult, OperationResumeParams,
    OperationResumeResult, ToolCall, ToolResult,
};
use codespace_runner_fs::RelPath;
use codespace_store::{ApprovalRow, ApprovalState, Resolution, Store};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, OnceLock};

/// The call `approval_create` asks a hold for, parsed: a malformed one is INVALID_ARGUMENTS,
/// whatever its workspace.
pub(crate) fn held_of(p: &ApprovalCreateParams) -> Result<ToolCall, ToolError> {
    ToolCall::parse(p.tool.as_str(), &p.arguments).map_err(|e| {
        let why = match e {
            crate::wire::CallParseError::UnknownTool(t) => format!("unknown tool `{t}`"),
            crate::wire::CallParseError::InvalidArguments(m) => m,
        };
        ToolError::new(
            ErrorCode::InvalidArguments,
            format!("arguments for {}: {why}", p.tool.as_str()),
        )
    })
}

/// The channels a hold can be answered on in this build (`elicitation` when the client
/// declared the capability).
pub const APPROVAL_CHANNELS: &[&str] = &["tool", "elicitation", "cli"];

/// What a resumed call carries into its tool: the hold and the file versions pinned when it
/// was requested (a patch whose files changed since then is `VERSION_CONFLICT`).
#[derive(Debug, Clone, Default)]
pub(crate) struct Resumed {
    /// path → version (or `absent`) at hold time.
    pub(crate) pinned: BTreeMap<String, String>,
}

/// Runs a held call (`apply_patch` or `exec_command`, authorized by the gateway) through its
/// handler and returns its result. The dispatcher passes it in, so the gateway never names a
/// handler.
pub(crate) type RunHeld = for<'a> fn(
    crate::gateway::Authorized<'a>,
    ToolCall,
    Option<Resumed>,
) -> std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<ToolResult, ToolError>> + Send + 'a>,
>;

/// Holds whose resume runs in this process now (a `resuming` hold not listed here was
/// interrupted by a crash or a restart).
fn in_flight() -> &'static Mutex<BTreeSet<String>> {
    static SET: OnceLock<Mutex<BTreeSet<String>>> = OnceLock::new();
    SET.get_or_init(|| Mutex::new(BTreeSet::new()))
}

/// Removes its hold from [`in_flight`] when the resume ends, however it ends.
struct InFlight(String);

impl InFlight {
    fn enter(id: &str) -> Option<InFlight> {
        let mut set = in_flight().lock().ok()?;
        set.insert(id.to_string()).then(|| InFlight(id.to_string()))
    }
    fn contains(id: &str) -> bool {
        in_flight().lock().map(|s| s.contains(id)).unwrap_or(false)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Ok(mut set) = in_flight().lock() {
            set.remove(&self.0);
        }
    }
}

pub(crate) fn store_err(e: codespace_store::StoreError) -> ToolError {
    ToolError::new(ErrorCode::Internal, format!("store: {e}"))
}

fn not_found(id: &str) -> ToolError {
    let mut e = ToolError::new(
        ErrorCode::ApprovalNotFound,
        format!("no approval hold `{id}` for this caller"),
    );
    e.approval_id = Some(id.to_string()).filter(|s| s.starts_with("appr-"));
    e
}

pub(crate) fn with_id(mut e: ToolError, id: &str) -> ToolError {
    e.approval_id = Some(id.to_string());
    e
}

/// `APPROVAL_CONFLICT` for a hold in `state` (`None`: the hold is gone).
fn conflict(id: &str, state: Option<ApprovalState>) -> ToolError {
    let why = match state {
        Some(ApprovalState::Expired) => "expired before it was resumed; ask again",
        Some(ApprovalState::Denied) => "was denied",
        Some(ApprovalState::Consumed) => "was already resumed",
        Some(ApprovalState::Resuming) => "is being resumed",
        Some(ApprovalState::Granted) => "was already granted",
        Some(ApprovalState::Pending) | None => "is in another state",
    };
    let state = state.map_or("gone", ApprovalState::as_str);
    with_id(
        ToolError::new(
            ErrorCode::ApprovalConflict,
            format!("approval `{id}` {why} (state {state})"),
        ),
        id,
    )
}

/// The wire state of a stored state (`resuming` is internal).
pub(crate) fn wire_state(state: ApprovalState) -> &'static str {
    state.shown().as_str()
}

pub use super::hold_summary::{SUMMARY_LINE_CHARS, env_entry, held_details, summary};

/// Parses a hold's stored arguments back into the held call.
fn held_call(tool: &str, args: &Value) -> Result<ToolCall, ToolError> {
    ToolCall::parse(tool, args).map_err(|_| {
        ToolError::new(
            ErrorCode::Internal,
            "the stored arguments of this hold no longer parse",
        )
    })
}

/// The pinned versions stored in a hold's facts.
fn pinned_of(row: &ApprovalRow) -> BTreeMap<String, String> {
    row.facts
        .as_ref()
        .and_then(|f| f.get("pinned"))
        .and_then(|p| serde_json::from_value(p.clone()).ok())
        .unwrap_or_default()
}

/// The workspace facts stored in a hold's facts.
fn facts_of(row: &ApprovalRow) -> Option<WorkspaceFacts> {
    row.facts
        .as_ref()
        .and_then(|f| f.get("workspace"))
        .and_then(|w| serde_json::from_value(w.clone()).ok())
}

impl Services {
    /// The versions of the paths a patch touches, now (`absent` for a missing path).
    async fn pin_versions(
        &self,
        ws: &WorkspaceRuntime,
        p: &ApplyPatchParams,
    ) -> Result<BTreeMap<String, String>, ToolError> {
        let patch = codespace_runner_patch::parse(&p.patch)
            .map_err(|e| ToolError::new(ErrorCode::InvalidPatch, e.to_string()))?;
        let mut out = BTreeMap::new();
        for (path, _) in patch.touched_paths() {
            let rel = RelPath::parse(&path)?;
            let known = self.current_version(ws, &rel).await?;
            out.insert(
                rel.as_str().to_string(),
                crate::gateway::patches::known_str(&known).to_string(),
            );
        }
        Ok(out)
    }

    /// Creates (or reuses) the hold for `call` on behalf of `session`.
    pub(crate) async fn hold_row(
        &self,
        ws: &WorkspaceRuntime,
        call: &ToolCall,
        session: &Session,
    ) -> Result<ApprovalRow, ToolError> {
        let store = self.require_store()?;
        let (tool, arguments, pinned) = match call {
            ToolCall::ApplyPatch(p) => (
                "apply_patch",
                serde_json::to_value(p),
                self.pin_versions(ws, p).await?,
            ),
            ToolCall::ExecCommand(p) => ("exec_command", serde_json::to_value(p), BTreeMap::new()),
            other => {
                return Err(ToolError::new(
                    ErrorCode::InvalidArguments,
                    format!("`{}` cannot be held", other.tool()),
                ));
            }
        };
        let arguments =
            arguments.map_err(|e| ToolError::new(ErrorCode::Internal, e.to_string()))?;
        let fp = fingerprint(&json!({
            "client": session.client,
            "registration": ws.registration,
            "workspace": ws.facts.id,
            "tool": tool,
            "arguments": arguments,
        }));
        let now = codespace_store::now_ms();
        let ttl = i64::try_from(self.config.limits.approval_ttl_ms).unwrap_or(i64::MAX);
        let row = ApprovalRow {
            approval_id: format!("appr-{}", uuid::Uuid::new_v4()),
            fingerprint: fp,
            tool: tool.into(),
            workspace: ws.facts.id.clone(),
            registration: ws.registration.clone(),
            state: ApprovalState::Pending,
            arguments: Some(arguments),
            summary: summary(&self.config, &ws.facts.id, call),
            facts: Some(json!({"workspace": ws.facts, "pinned": pinned})),
            requested_by: session.client.clone(),
            transport: session.transport.clone(),
            channel: None,
            resolved_by: None,
            result: None,
            created_ms: now,
            expires_ms: now.saturating_add(ttl),
            resolved_ms: None,
            resumed_ms: None,
            finished_ms: None,
        };
        let (row, created) = store
            .create_or_reuse_approval(&row, now)
            .map_err(store_err)?;
        if created {
            self.approval_event("approval_created", &row, &session.client, "tool");
        }
        Ok(row)
    }

    /// Records an approval event (create / resolve / resume) with who and through which
    /// channel. A store failure is logged.
    fn approval_event(&self, kind: &str, row: &ApprovalRow, by: &str, channel: &str) {
        if let Some(store) = &self.store {
            approval_event(store, kind, row, by, channel);
        }
    }
}

impl Gateway {
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
        crate::links::fill_links_async(&ws.root, &mut reqs).await?;
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
    ) -> Result<(ApprovalRow, &WorkspaceRuntime), ToolError> {
        let store = self.require_store()?;
        let row = store
            .approval(id, codespace_store::now_ms())
            .map_err(store_err)?
            .ok_or_else(|| not_found(id))?;
        let ws = self
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

    /// A human's answer in-band (channel `elicitation`, through the asking client): decided by
    /// policy as `approval_resolve`; a grant resumes the held call at once and returns the held
    /// tool's own result; a deny is final (`APPROVAL_CONFLICT`, nothing ran). `run` runs the
    /// held call through its handler.
    pub(crate) async fn answer_in_band_with(
        &self,
        session: &Session,
        id: &str,
        decision: ApprovalDecision,
        run: RunHeld,
    ) -> Result<ToolResult, ToolError> {
        let snap = self.policy.snapshot();
        let out = self
            .answer_in_band_under(&snap, session, id, decision, run)
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
        run: RunHeld,
    ) -> Result<ToolResult, ToolError> {
        let (row, ws) = self.served_hold(id)?;
        if row.requested_by != session.client {
            return Err(not_found(id));
        }
        let call = ToolCall::ApprovalResolve(ApprovalResolveParams {
            approval_id: id.to_string(),
            decision,
        });
        let mut reqs = build_requests(&call, session, None)?;
        with_approval(
            &mut reqs,
            &ApprovalFacts {
                channel: "elicitation".into(),
                requested_by: row.requested_by.clone(),
                resolved_by: session.client.clone(),
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
        resolve_in_store(store, &row, decision, &session.client, "elicitation")?;
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

/// The result of a resume: `{approval_id, state: consumed, <tool>: result}`.
fn resume_result(
    id: &str,
    v: ToolResult,
    replayed: bool,
) -> Result<OperationResumeResult, ToolError> {
    let mut out = OperationResumeResult {
        approval_id: id.to_string(),
        state: ApprovalState::Consumed.as_str().into(),
        replayed,
        apply_patch: None,
        exec_command: None,
    };
    match v {
        ToolResult::ApplyPatch(r) => out.apply_patch = Some(r),
        ToolResult::ExecCommand(r) => out.exec_command = Some(*r),
        _ => {
            return Err(ToolError::new(
                ErrorCode::Internal,
                "a held call returned another tool's result",
            ));
        }
    }
    Ok(out)
}

/// A stored resume outcome read back as the held tool's result.
fn recorded_result(tool: &str, v: &Value) -> Result<ToolResult, ToolError> {
    use serde::Deserialize as _;
    let bad = |e: serde_json::Error| ToolError::new(ErrorCode::Internal, e.to_string());
    Ok(match tool {
        "apply_patch" => ToolResult::ApplyPatch(ApplyPatchResult::deserialize(v).map_err(bad)?),
        _ => ToolResult::ExecCommand(Box::new(ExecCommandResult::deserialize(v).map_err(bad)?)),
    })
}

/// A repeated resume: the stored outcome, never a second run.
fn replay_outcome(row: &ApprovalRow) -> Result<OperationResumeResult, ToolError> {
    let id = row.approval_id.as_str();
    match &row.result {
        Some(r) if r.get("ok").is_some() => resume_result(
            id,
            recorded_result(&row.tool, r.get("ok").unwrap_or(&Value::Null))?,
            true,
        ),
        Some(r) => {
            let err = r.get("error").cloned().unwrap_or(Value::Null);
            let text = |k: &str| err.get(k).and_then(Value::as_str).map(str::to_string);
            let mut e = ToolError::new(
                ErrorCode::from_code(&text("code").unwrap_or_default()),
                format!(
                    "replayed resume of `{id}`: {}",
                    text("message").unwrap_or_default()
                ),
            );
            e.operation_id = text("operation_id");
            e.decision_id = text("decision_id");
            Err(with_id(e, id))
        }
        None => Err(with_id(
            ToolError::new(
                ErrorCode::ApprovalAmbiguous,
                format!("approval `{id}` was consumed but its outcome was not stored"),
            ),
            id,
        )),
    }
}

pub(crate) fn to_value<T: serde::Serialize>(v: &T) -> Result<Value, ToolError> {
    serde_json::to_value(v).map_err(|e| ToolError::new(ErrorCode::Internal, e.to_string()))
}

fn approval_event(store: &Store, kind: &str, row: &ApprovalRow, by: &str, channel: &str) {
    let detail = json!({
        "approval_id": row.approval_id,
        "tool": row.tool,
        "workspace": row.workspace,
        "state": row.state,
        "requested_by": row.requested_by,
        "by": by,
        "channel": channel,
    });
    if let Err(e) = store.insert_event(kind, &detail) {
        tracing::error!(approval_id = %row.approval_id, error = %e, "cannot record approval event");
    }
}

/// Moves a pending hold to granted/denied; an answer repeated on a resolved hold is
/// idempotent; a contrary one is APPROVAL_CONFLICT.
pub(crate) fn resolve_in_store(
    store: &Store,
    row: &ApprovalRow,
    decision: ApprovalDecision,
    by: &str,
    channel: &str,
) -> Result<ApprovalStateResult, ToolError> {
    let id = row.approval_id.as_str();
    let grant = decision == ApprovalDecision::Grant;
    let now = codespace_store::now_ms();
    let state = match store
        .resolve_approval(id, grant, by, channel, now)
        .map_err(store_err)?
    {
        Resolution::NotFound => return Err(not_found(id)),
        Resolution::Changed(after) => {
            approval_event(store, "approval_resolved", &after, by, channel);
            after.state
        }
        Resolution::Unchanged(now_row) => {
            let same = matches!(
                (now_row.state, grant),
                (
                    ApprovalState::Granted | ApprovalState::Resuming | ApprovalState::Consumed,
                    true
                ) | (ApprovalState::Denied, false)
            );
            if !same {
                return Err(conflict(id, Some(now_row.state)));
            }
            now_row.state
        }
    };
    Ok(ApprovalStateResult {
        approval_id: id.to_string(),
        state: wire_state(state).into(),
    })
}

/// The operator's answer from the CLI (channel `cli`), with the server running or not: the
/// hold's recorded workspace facts, the current policies, one audited `approval_resolve`
/// decision, then the same state change the tool makes.
pub fn cli_resolve(
    config: &Config,
    snap: &Arc<PolicySnapshot>,
    store: &Arc<Store>,
    id: &str,
    decision: ApprovalDecision,
    operator: &str,
) -> Result<ApprovalStateResult, ToolError> {
    let row = store
        .approval(id, codespace_store::now_ms())
        .map_err(store_err)?
        .ok_or_else(|| not_found(id))?;
    if row.state != ApprovalState::Pending {
        return resolve_in_store(store, &row, decision, operator, "cli");
    }
    let facts = facts_of(&row).ok_or_else(|| {
        ToolError::new(
            ErrorCode::Internal,
            "the hold has no recorded workspace facts",
        )
    })?;
    let session = Session {
        client: operator.to_string(),
        transport: "cli".into(),
    };
    let call = ToolCall::ApprovalResolve(ApprovalResolveParams {
        approval_id: id.to_string(),
        decision,
    });
    let mut reqs: Vec<SubRequest> = build_requests(&call, &session, None)?;
    with_approval(
        &mut reqs,
        &ApprovalFacts {
            channel: "cli".into(),
            requested_by: row.requested_by.clone(),
            resolved_by: operator.to_string(),
            decision: decision.as_str().into(),
        },
    );
    // One decision, its rows written before the hold changes; entities that cannot be built
    // refuse it with the reason, as everywhere.
    let sink = crate::audit::StoreSink::synchronous(Arc::clone(store), config.redaction.clone());
    let decider =
        codespace_policy::Decider::over(Arc::clone(snap), config.profiles.clone(), Arc::new(sink));
    let d = decider.decide(snap, &facts, call.tool(), &reqs, &session);
    if !d.allowed() {
        return Err(with_id(d.to_error(snap), id));
    }
    resolve_in_store(store, &row, decision, operator, "cli")
}
