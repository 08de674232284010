//! The in-band approval channel: when a call is held (`APPROVAL_REQUIRED` with an approval_id)
//! and the client declared the `elicitation` capability, the server asks the human through the
//! client (a form: what the call does, where and with which environment, and grant or deny). A grant resumes the held call in the
//! same request and returns its own result; decline, cancel, a client error or no answer leave
//! the hold pending and return `APPROVAL_REQUIRED` as usual. The same question is what an MCP
//! 2026-07-28 client gets inside `input_required` ([`crate::mrtr`]).

use codespace_engine::gateway::approvals::InBandChannel;
use codespace_engine::shown::escape;
use codespace_engine::wire::{ApprovalDecision, ToolResult};
use codespace_engine::{Gateway, Session, ToolError};
use rmcp::RoleServer;
use rmcp::model::{
    ClientResult, ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction,
    ElicitationSchema, EnumSchema, ServerRequest,
};
use rmcp::service::{Peer, RequestContext};
use serde_json::Value;
use std::time::Duration;

/// How long the server waits for the human before answering `APPROVAL_REQUIRED`.
const ANSWER_WAIT: Duration = Duration::from_secs(600);

/// True when the client declared form elicitation (or elicitation without modes).
fn supports_form(peer: &Peer<RoleServer>) -> bool {
    peer.peer_info()
        .and_then(|info| info.capabilities.elicitation.clone())
        .is_some_and(|c| c.form.is_some() || c.url.is_none())
}

/// The form: one required choice, `decision` = grant | deny.
fn form() -> Option<ElicitationSchema> {
    ElicitationSchema::builder()
        .required_enum_schema(
            "decision",
            EnumSchema::builder(vec!["grant".to_string(), "deny".to_string()]).build(),
        )
        .build()
        .ok()
}

/// The question: the summary, then the held command's working directory, `tty`, `background`
/// and `env` (values redacted), every control character escaped ([`codespace_engine::shown`]).
fn message(id: &str, summary: &str, details: &[(String, String)]) -> String {
    let mut text = format!("Approve this call? {} (approval {id})", escape(summary));
    for (label, value) in details {
        text.push_str(&format!("\n{label}: {}", escape(value)));
    }
    text
}

/// Asks the human about `held` when the client can: the answer, or `None` (no elicitation,
/// decline, cancel, a client error, no answer, or the request was cancelled meanwhile).
pub async fn decision(
    gateway: &Gateway,
    session: &Session,
    context: &RequestContext<RoleServer>,
    held: &ToolError,
) -> Option<ApprovalDecision> {
    let id = held.approval_id.clone()?;
    if !supports_form(&context.peer) {
        return None;
    }
    let request = ServerRequest::ElicitRequest(question(gateway, session, &id)?);
    let answer = tokio::select! {
        answer = tokio::time::timeout(ANSWER_WAIT, context.peer.send_request(request)) => answer,
        () = context.ct.cancelled() => return None,
    };
    match answer {
        Ok(Ok(ClientResult::ElicitResult(r))) => answer_of(&r),
        Ok(Ok(_)) => None,
        Ok(Err(e)) => {
            tracing::debug!(approval_id = %id, error = %e, "elicitation failed; the hold stays pending");
            None
        }
        Err(_) => None,
    }
}

/// The question about the pending hold `id` that `session` asked for: the form request, the
/// same for `elicitation/create` and for an `input_required` result (`None` for a hold that is
/// not this caller's or not pending).
pub fn question(gateway: &Gateway, session: &Session, id: &str) -> Option<ElicitRequest> {
    let (summary, details) = gateway.holds().pending_summary(session, id)?;
    Some(ElicitRequest::new(
        ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: message(id, &summary, &details),
            requested_schema: form()?,
        },
    ))
}

/// The human's decision in an elicitation answer: accepted with `decision` grant or deny;
/// `None` for decline, cancel or anything else.
pub fn answer_of(r: &ElicitResult) -> Option<ApprovalDecision> {
    if r.action != ElicitationAction::Accept {
        return None;
    }
    match r
        .content
        .as_ref()?
        .get("decision")
        .and_then(Value::as_str)?
    {
        "grant" => Some(ApprovalDecision::Grant),
        "deny" => Some(ApprovalDecision::Deny),
        _ => None,
    }
}

/// Asks the human about `held` when the client can; otherwise (or unanswered) returns `held`.
pub async fn ask(
    gateway: &Gateway,
    session: &Session,
    context: &RequestContext<RoleServer>,
    held: ToolError,
) -> Result<ToolResult, ToolError> {
    let Some(answer) = decision(gateway, session, context, &held).await else {
        return Err(held);
    };
    let Some(id) = held.approval_id.as_deref() else {
        return Err(held);
    };
    gateway
        .answer_in_band(session, id, answer, InBandChannel::Elicitation)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_question_escapes_controls_and_shows_the_held_facts() {
        let details = vec![
            ("cwd".to_string(), "sub\x1b".to_string()),
            ("env".to_string(), "A=1".to_string()),
        ];
        let m = message("appr-1", "exec_command in w: echo \x1b[2K", &details);
        assert_eq!(
            m,
            "Approve this call? exec_command in w: echo \\x1b[2K (approval appr-1)\ncwd: sub\\x1b\nenv: A=1"
        );
    }
}
