//! `approval_create` and `approval_resolve`, handlers of an [`Authorized`] call: the gateway
//! has parsed the held call (or found the hold this server serves) and decided the call on that
//! workspace; here the hold is created or resolved in the store. `operation_resume` is the
//! gateway's own (it re-decides and runs the held call through its handler).

use crate::error::ToolError;
use crate::gateway::Authorized;
use crate::gateway::approvals::{resolve_in_store, to_value, wire_state};
use crate::wire::{ApprovalResolveParams, ApprovalStateResult, ToolCall};
use codespace_store::ApprovalRow;
use serde_json::Value;

impl Authorized<'_> {
    /// `approval_create`: creates (or reuses) the hold for `held`.
    pub(crate) async fn approval_create(&self, held: &ToolCall) -> Result<Value, ToolError> {
        let row = self.hold_row(self.ws(), held, self.session()).await?;
        to_value(&ApprovalStateResult {
            approval_id: row.approval_id,
            state: wire_state(&row.state).into(),
        })
    }

    /// `approval_resolve` over the tool channel: grants or denies the hold `row`.
    pub(crate) fn approval_resolve(
        &self,
        p: &ApprovalResolveParams,
        row: &ApprovalRow,
    ) -> Result<Value, ToolError> {
        let store = self.require_store()?;
        let out = resolve_in_store(store, row, p.decision, &self.session().client, "tool")?;
        to_value(&out)
    }
}
