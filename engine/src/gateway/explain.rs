//! `policy explain` against a configured workspace: the explanation of a call under the policy
//! set in force, with the facts the server would use (no audit row).

use super::Gateway;
use crate::error::{ErrorCode, ToolError};
use crate::policy::explain::{Explanation, explain_call, explain_requests};
use crate::request::{
    ProcessFacts, Session, build_requests, exec_facts, write_scope_candidates, write_scope_requests,
};
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
        // A command's whole write scope: the candidates asked when it starts follow the call's
        // own requests (nested `.git` aside, which depend on the tree at that moment).
        if let ToolCall::ExecCommand(p) = call
            && let (Ok(mut reqs), Ok(exec)) = (
                build_requests(call, session, process),
                exec_facts(p, session),
            )
        {
            let configured = self.config.command_write_paths(id);
            let candidates = write_scope_candidates(&exec.cwd, &configured, &[]);
            reqs.extend(write_scope_requests(
                &exec,
                candidates.get(1..).unwrap_or_default(),
            ));
            return Ok(explain_requests(
                &snap,
                &self.config.profiles,
                &ws.facts,
                call.tool(),
                &reqs,
            ));
        }
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
