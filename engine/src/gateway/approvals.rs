//! Approval holds (issue #14): which allowed `apply_patch` / `exec_command` calls wait for a
//! human (Cedar's `confirm` action), the holds in the store, `approval_create`,
//! `approval_resolve` (a Cedar request with `context.approval`), `operation_resume` (re-decided
//! under the current policies, run exactly once, replayed from the stored outcome) and the
//! operator CLI's resolution. Holds are bound to the client that asked, the workspace identity
//! (registration) and the canonical arguments.

use crate::config::Config;
use crate::error::{ErrorCode, ToolError};
use crate::gateway::ops::fingerprint;
use crate::gateway::{Services, WorkspaceRuntime};
use crate::policy::PolicySnapshot;
use crate::request::{
    ApprovalFacts, Session, SubRequest, WorkspaceFacts, build_requests, with_approval,
};
use crate::wire::{
    ApplyPatchParams, ApplyPatchResult, ApprovalCreateParams, ApprovalDecision,
    ApprovalResolveParams, ApprovalStateResult, ExecCommandResult, OperationResumeResult, ToolCall,
    ToolResult,
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
/// declared the capability, `mrtr` for MCP 2026-07-28 clients: `input_required`; `web` for the
/// console of `serve --http`).
pub const APPROVAL_CHANNELS: &[&str] = &["tool", "elicitation", "mrtr", "cli", "web"];

/// The operator's out-of-band channels: the CLI on the server's machine and the web console.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperatorChannel {
    /// `codespace approvals grant|deny`.
    Cli,
    /// The web console's approvals queue (`/console`).
    Web,
}

impl OperatorChannel {
    /// The name in `context.approval.channel`, the hold's row and the session's transport.
    pub fn as_str(self) -> &'static str {
        match self {
            OperatorChannel::Cli => "cli",
            OperatorChannel::Web => "web",
        }
    }
}

/// The channels through which the asking client's user answers a hold in-band.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InBandChannel {
    /// A server-initiated `elicitation/create` request (MCP 2025 sessions).
    Elicitation,
    /// An `input_required` result answered by the retried `tools/call` (MCP 2026-07-28).
    Mrtr,
}

impl InBandChannel {
    /// The name in `context.approval.channel` and the hold's row.
    pub fn as_str(self) -> &'static str {
        match self {
            InBandChannel::Elicitation => "elicitation",
            InBandChannel::Mrtr => "mrtr",
        }
    }
}

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
pub(super) fn in_flight() -> &'static Mutex<BTreeSet<String>> {
    static SET: OnceLock<Mutex<BTreeSet<String>>> = OnceLock::new();
    SET.get_or_init(|| Mutex::new(BTreeSet::new()))
}

/// Removes its hold from [`in_flight`] when the resume ends, however it ends.
pub(super) struct InFlight(String);

impl InFlight {
    pub(super) fn enter(id: &str) -> Option<InFlight> {
        let mut set = in_flight().lock().ok()?;
        set.insert(id.to_string()).then(|| InFlight(id.to_string()))
    }
    pub(super) fn contains(id: &str) -> bool {
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

pub(super) fn not_found(id: &str) -> ToolError {
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
pub(super) fn conflict(id: &str, state: Option<ApprovalState>) -> ToolError {
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
pub(super) fn held_call(tool: &str, args: &Value) -> Result<ToolCall, ToolError> {
    ToolCall::parse(tool, args).map_err(|_| {
        ToolError::new(
            ErrorCode::Internal,
            "the stored arguments of this hold no longer parse",
        )
    })
}

/// The pinned versions stored in a hold's facts.
pub(super) fn pinned_of(row: &ApprovalRow) -> BTreeMap<String, String> {
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
            ToolCall::WriteFile(p) => {
                let rel = RelPath::parse(&p.path)?;
                let known = self.current_version(ws, &rel).await?;
                let pinned = BTreeMap::from([(
                    rel.as_str().to_string(),
                    crate::gateway::patches::known_str(&known).to_string(),
                )]);
                ("write_file", serde_json::to_value(p), pinned)
            }
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
    pub(super) fn approval_event(&self, kind: &str, row: &ApprovalRow, by: &str, channel: &str) {
        if let Some(store) = &self.store {
            approval_event(store, kind, row, by, channel);
        }
    }
}

/// The result of a resume: `{approval_id, state: consumed, <tool>: result}`.
pub(super) fn resume_result(
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
        "apply_patch" | "write_file" => {
            ToolResult::ApplyPatch(ApplyPatchResult::deserialize(v).map_err(bad)?)
        }
        _ => ToolResult::ExecCommand(Box::new(ExecCommandResult::deserialize(v).map_err(bad)?)),
    })
}

/// A repeated resume: the stored outcome, never a second run.
pub(super) fn replay_outcome(row: &ApprovalRow) -> Result<OperationResumeResult, ToolError> {
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
    operator_resolve(
        config,
        snap,
        store,
        id,
        decision,
        Operator {
            name: operator,
            user: None,
        },
        OperatorChannel::Cli,
    )
}

/// Who answers a hold over an operator channel.
#[derive(Debug, Clone)]
pub struct Operator<'a> {
    /// The operator's name (the CLI's `--as`, the console's signed-in client).
    pub name: &'a str,
    /// The person, when one signed in (the console with an OIDC access token).
    pub user: Option<codespace_policy::user::UserFacts>,
}

/// An operator's answer over `channel` (the CLI's or the web console's path): one audited
/// `approval_resolve` decision with `context.approval.channel` = the channel and
/// `context.approval.resolver` = `operator` (or, when a person signed in, `user`'s id, with
/// `context.session.user` = that user), then the same state change the tool makes.
/// Blocking (store reads and writes): call it off the async workers.
pub fn operator_resolve(
    config: &Config,
    snap: &Arc<PolicySnapshot>,
    store: &Arc<Store>,
    id: &str,
    decision: ApprovalDecision,
    who: Operator<'_>,
    channel: OperatorChannel,
) -> Result<ApprovalStateResult, ToolError> {
    let ch = channel.as_str();
    let user = who.user;
    // A person (the console's OIDC sign-in) resolves as that user, as over the tool.
    let operator = user.as_ref().map_or(who.name, |u| u.id.as_str());
    let row = store
        .approval(id, codespace_store::now_ms())
        .map_err(store_err)?
        .ok_or_else(|| not_found(id))?;
    if row.state != ApprovalState::Pending {
        return resolve_in_store(store, &row, decision, operator, ch);
    }
    let facts = facts_of(&row).ok_or_else(|| {
        ToolError::new(
            ErrorCode::Internal,
            "the hold has no recorded workspace facts",
        )
    })?;
    let session = Session {
        client: operator.to_string(),
        transport: ch.into(),
        user: user.clone(),
    };
    let call = ToolCall::ApprovalResolve(ApprovalResolveParams {
        approval_id: id.to_string(),
        decision,
    });
    let mut reqs: Vec<SubRequest> = build_requests(&call, &session, None)?;
    with_approval(
        &mut reqs,
        &ApprovalFacts {
            channel: ch.into(),
            requested_by: row.requested_by.clone(),
            resolved_by: operator.to_string(),
            resolver: operator.to_string(),
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
    resolve_in_store(store, &row, decision, operator, ch)
}
