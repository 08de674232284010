//! The in-band approval channel: when a call is held (`APPROVAL_REQUIRED` with an approval_id)
//! and the client declared the `elicitation` capability, the server asks the human through the
//! client (a form: what the call does, and grant or deny). A grant resumes the held call in the
//! same request and returns its own result; decline, cancel, a client error or no answer leave
//! the hold pending and return `APPROVAL_REQUIRED` as usual.

use codespace_engine::wire::ApprovalDecision;
use codespace_engine::{Gateway, Session, ToolError};
use rmcp::RoleServer;
use rmcp::model::{
    ClientResult, ElicitRequest, ElicitRequestParams, ElicitationAction, ElicitationSchema,
    EnumSchema, ServerRequest,
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

/// Asks the human about `held` when the client can; otherwise (or unanswered) returns `held`.
pub async fn ask(
    gateway: &Gateway,
    session: &Session,
    context: &RequestContext<RoleServer>,
    held: ToolError,
) -> Result<Value, ToolError> {
    let Some(id) = held.approval_id.clone() else {
        return Err(held);
    };
    if !supports_form(&context.peer) {
        return Err(held);
    }
    let (Some(summary), Some(schema)) = (gateway.pending_summary(session, &id), form()) else {
        return Err(held);
    };
    let request = ServerRequest::ElicitRequest(ElicitRequest::new(
        ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: format!("Approve this call? {summary} (approval {id})"),
            requested_schema: schema,
        },
    ));
    let answer = tokio::time::timeout(ANSWER_WAIT, context.peer.send_request(request)).await;
    let decision = match answer {
        Ok(Ok(ClientResult::ElicitResult(r))) if r.action == ElicitationAction::Accept => r
            .content
            .as_ref()
            .and_then(|c| c.get("decision"))
            .and_then(Value::as_str)
            .map(str::to_string),
        Ok(Ok(_)) => None,
        Ok(Err(e)) => {
            tracing::debug!(approval_id = %id, error = %e, "elicitation failed; the hold stays pending");
            None
        }
        Err(_) => None,
    };
    let decision = match decision.as_deref() {
        Some("grant") => ApprovalDecision::Grant,
        Some("deny") => ApprovalDecision::Deny,
        _ => return Err(held),
    };
    gateway.answer_in_band(session, &id, decision).await
}
