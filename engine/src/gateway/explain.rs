//! `policy explain` against a configured workspace: the explanation of a call under the policy
//! set in force, with the facts the server would use (no audit row).

use super::Gateway;
use crate::error::{ErrorCode, ToolError};
use crate::policy::explain::{Explanation, explain_call};
use crate::request::{ProcessFacts, Session};
use crate::wire::ToolCall;

impl Gateway {
    /// Explains `call` against a configured workspace under the policy set in force, with the
    /// facts the server would use. Writes no audit row.
    #[allow(clippy::result_large_err)] // ToolError is the gateway's error type throughout
    pub fn explain(
        &self,
        session: &Session,
        call: &ToolCall,
        process: Option<&ProcessFacts>,
    ) -> Result<Explanation, ToolError> {
        let id = call.workspace_id().ok_or_else(|| {
            ToolError::new(
                ErrorCode::InvalidArguments,
                "the call names no workspace_id; pass --workspace or a workspace_id argument",
            )
        })?;
        let ws = self.workspace(id)?;
        let snap = self.policy.snapshot();
        Ok(explain_call(
            &snap,
            &self.config.profiles,
            &ws.facts,
            session,
            call,
            process,
        ))
    }
}
