//! Holds as MCP 2026-07-28 multi round-trip requests (MRTR). A 2026 client's `apply_patch` or
//! `exec_command` that Cedar's `confirm` holds returns `input_required`: the hold's question (the
//! same form as today's elicitation, [`crate::elicit::question`]) and a `requestState` sealed
//! with an HMAC key made at each start, binding the hold id, the client (and transport) and the
//! call's fingerprint (tool + arguments). The retry with `inputResponses` answers the hold over
//! channel `mrtr` (decided by Cedar as `approval_resolve`) and runs the held call once.
//!
//! A state that does not open (forged, altered, another client's, another call's, expired, or
//! from before a restart) is `APPROVAL_NOT_FOUND`; a hold no longer pending (a replay) is
//! `APPROVAL_CONFLICT`; a patch whose files moved since the hold is `VERSION_CONFLICT` (the
//! resume's pinned versions). Holds survive a restart, their `requestState`s do not (the key is
//! in memory only): `operation_resume` stays the path for those.

use codespace_engine::wire::ApprovalDecision;
use codespace_engine::{ErrorCode, Gateway, Session, ToolError};
use rmcp::RoleServer;
use rmcp::model::{
    ElicitResult, InputRequest, InputRequests, InputRequiredResult, InputResponses,
    RequestStateCodec, SealOptions,
};
use rmcp::service::RequestContext;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::sync::OnceLock;
use std::time::Duration;

/// The key of the one input request (the hold's question) in `inputRequests`/`inputResponses`.
pub const INPUT_KEY: &str = "approval";

/// Domain label of the associated data, so a tag made here means nothing elsewhere.
const DOMAIN: &str = "codespace-mrtr-v1";

/// True when the request speaks MCP 2026-07-28 or later (no `initialize`; MRTR instead of
/// server-initiated requests).
pub fn is_2026(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|v| !v.has_initialize())
}

/// The codec of this server start: a 256-bit key from the kernel's CSPRNG (`getrandom`), made on
/// first use and kept in memory only (holds answered through `input_required` do not survive a
/// restart; the tool channel does). No key, no codec: the call fails closed.
fn codec() -> Option<&'static RequestStateCodec> {
    static CODEC: OnceLock<Option<RequestStateCodec>> = OnceLock::new();
    CODEC
        .get_or_init(|| {
            let mut key = vec![0u8; 32];
            getrandom::fill(&mut key).ok()?;
            RequestStateCodec::try_new(key).ok()
        })
        .as_ref()
}

/// The call's fingerprint: sha256 of its tool and arguments as sent.
fn fingerprint(tool: &str, args: &Value) -> String {
    let bytes = serde_json::to_vec(&json!({"tool": tool, "arguments": args})).unwrap_or_default();
    hex::encode(Sha256::digest(bytes))
}

/// What a state is bound to besides the hold id: client, transport and the call's fingerprint.
fn binding(session: &Session, tool: &str, args: &Value) -> Vec<u8> {
    format!(
        "{DOMAIN}\0{}\0{}\0{}",
        session.client,
        session.transport,
        fingerprint(tool, args)
    )
    .into_bytes()
}

/// Seals the hold `id` for `session`'s call `tool(args)`, valid for `ttl`.
fn seal(id: &str, session: &Session, tool: &str, args: &Value, ttl: Duration) -> Option<String> {
    let ad = binding(session, tool, args);
    let payload = serde_json::to_vec(&json!({"hold": id})).ok()?;
    Some(codec()?.seal_with(&payload, &SealOptions::new().associated_data(&ad).ttl(ttl)))
}

/// The hold id a retry's `requestState` names, or `APPROVAL_NOT_FOUND` when it does not open
/// for this caller and this call.
pub fn open(session: &Session, tool: &str, args: &Value, state: &str) -> Result<String, ToolError> {
    let refused = || {
        ToolError::new(
            ErrorCode::ApprovalNotFound,
            "no approval hold for this requestState, caller and call (forged, altered, another \
             client's or another call's, expired, or from before a server restart; \
             operation_resume still resumes a granted hold)",
        )
    };
    let ad = binding(session, tool, args);
    let payload = codec()
        .ok_or_else(refused)?
        .open_with(state, &ad)
        .map_err(|_| refused())?;
    let v: Value = serde_json::from_slice(&payload).map_err(|_| refused())?;
    v.get("hold")
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(refused)
}

/// The `input_required` result for the held call `tool(args)` (`held` is its
/// `APPROVAL_REQUIRED`), or `None` when the hold cannot be asked about (not pending, not this
/// caller's): the caller then returns `held` as is.
pub fn input_required(
    gateway: &Gateway,
    session: &Session,
    tool: &str,
    args: &Value,
    held: &ToolError,
) -> Option<InputRequiredResult> {
    let id = held.approval_id.as_deref()?;
    let question = crate::elicit::question(gateway, session, id)?;
    let ttl = Duration::from_millis(gateway.config().limits.approval_ttl_ms);
    let state = seal(id, session, tool, args, ttl)?;
    let mut requests = InputRequests::new();
    requests.insert(INPUT_KEY.to_string(), InputRequest::Elicitation(question));
    Some(InputRequiredResult::new(Some(requests), Some(state)))
}

/// The human's answer in a retry's `inputResponses`: grant or deny, `None` for decline, cancel,
/// no answer or an answer that is not an elicitation result.
pub fn decision(responses: Option<&InputResponses>) -> Option<ApprovalDecision> {
    let answer = responses?.get(INPUT_KEY)?;
    let r: ElicitResult = serde_json::from_value(answer.clone()).ok()?;
    crate::elicit::answer_of(&r)
}

/// `APPROVAL_REQUIRED` for a retry that carried no grant or deny: the hold stays pending.
pub fn still_pending(id: &str) -> ToolError {
    let mut e = ToolError::new(
        ErrorCode::ApprovalRequired,
        format!(
            "approval `{id}` is still pending: the answer was neither grant nor deny; answer \
             again, or grant it another way and call operation_resume"
        ),
    );
    e.approval_id = Some(id.to_string());
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(client: &str) -> Session {
        Session {
            client: client.into(),
            transport: "stdio".into(),
            user: None,
        }
    }

    #[test]
    fn a_state_opens_only_for_its_client_and_call() {
        let args = json!({"workspace_id": "w", "patch": "x"});
        let ttl = Duration::from_secs(60);
        let state = seal("appr-1", &session("a"), "apply_patch", &args, ttl).unwrap();
        assert_eq!(
            open(&session("a"), "apply_patch", &args, &state).unwrap(),
            "appr-1"
        );
        let other_client = open(&session("b"), "apply_patch", &args, &state).unwrap_err();
        assert_eq!(other_client.code, ErrorCode::ApprovalNotFound);
        let other_call = json!({"workspace_id": "w", "patch": "y"});
        let moved = open(&session("a"), "apply_patch", &other_call, &state).unwrap_err();
        assert_eq!(moved.code, ErrorCode::ApprovalNotFound);
        let other_tool = open(&session("a"), "exec_command", &args, &state).unwrap_err();
        assert_eq!(other_tool.code, ErrorCode::ApprovalNotFound);
        let mut altered = state.clone();
        altered.push('A');
        let altered = open(&session("a"), "apply_patch", &args, &altered).unwrap_err();
        assert_eq!(altered.code, ErrorCode::ApprovalNotFound);
        let other_transport = Session {
            client: "a".into(),
            transport: "streamable-http".into(),
            user: None,
        };
        assert!(open(&other_transport, "apply_patch", &args, &state).is_err());
    }

    #[test]
    fn only_an_accepted_grant_or_deny_is_a_decision() {
        let mut r = InputResponses::new();
        r.insert(
            INPUT_KEY.into(),
            json!({"action": "accept", "content": {"decision": "grant"}}),
        );
        assert_eq!(decision(Some(&r)), Some(ApprovalDecision::Grant));
        r.insert(
            INPUT_KEY.into(),
            json!({"action": "accept", "content": {"decision": "deny"}}),
        );
        assert_eq!(decision(Some(&r)), Some(ApprovalDecision::Deny));
        r.insert(INPUT_KEY.into(), json!({"action": "decline"}));
        assert_eq!(decision(Some(&r)), None);
        r.insert(INPUT_KEY.into(), json!("grant"));
        assert_eq!(decision(Some(&r)), None);
        assert_eq!(decision(None), None);
    }
}
