//! `approval_create` and `approval_resolve`, handlers of an [`Authorized`] call: the gateway
//! has parsed the held call (or found the hold this server serves) and decided the call on that
//! workspace; here the hold is created or resolved in the store. `operation_resume` is the
//! gateway's own (it re-decides and runs the held call through its handler).

use crate::error::ToolError;
use crate::gateway::Authorized;
use crate::gateway::approvals::{resolve_in_store, wire_state};
use crate::wire::{ApprovalResolveParams, ApprovalStateResult, ToolCall};
use codespace_store::ApprovalRow;

/// `approval_create`: creates (or reuses) the hold for `held`.
pub(crate) async fn approval_create(
    auth: &Authorized<'_>,
    held: &ToolCall,
) -> Result<ApprovalStateResult, ToolError> {
    let row = auth.hold_row(auth.ws(), held, auth.session()).await?;
    Ok(ApprovalStateResult {
        approval_id: row.approval_id,
        state: wire_state(row.state).into(),
    })
}

/// `approval_resolve` over the tool channel: grants or denies the hold `row`.
pub(crate) fn approval_resolve(
    auth: &Authorized<'_>,
    p: &ApprovalResolveParams,
    row: &ApprovalRow,
) -> Result<ApprovalStateResult, ToolError> {
    let store = auth.require_store()?;
    resolve_in_store(store, row, p.decision, auth.session().resolver(), "tool")
}
