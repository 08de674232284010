//! Dispatch: a parsed [`ToolCall`] to its handler. The gateway resolves the call's target and
//! decides it (an [`Authorized`] value or the refusal); the handler in `tools/` runs it and
//! returns its typed result, wrapped here as a [`ToolResult`] for `mcp` to serialize. The
//! gateway never names a handler: the held calls `operation_resume` runs come back here
//! through [`run_held`].

use crate::error::ToolError;
use crate::gateway::approvals::{InBandChannel, Resumed};
use crate::gateway::{Authorized, Gateway};
use crate::policy::PolicySnapshot;
use crate::request::Session;
use crate::wire::{
    ApprovalDecision, ReadManyFile, ReadManyResult, ReadParams, ToolCall, ToolResult,
};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// `read` with `paths`: each path authorized and read exactly as a single `read` of it (its
/// own decision and audit row); a path's refusal or failure becomes that file's `error`, so
/// the call itself fails only on invalid arguments or an unknown workspace.
async fn read_many(
    gw: &Gateway,
    snap: &Arc<PolicySnapshot>,
    p: &ReadParams,
    session: &Session,
) -> Result<ReadManyResult, ToolError> {
    crate::request::check_read_args(p)?;
    gw.workspace(&p.workspace_id)?;
    let paths = p.paths.as_deref().unwrap_or_default();
    let mut files = Vec::with_capacity(paths.len());
    // The images of one call share one image cap (64 images of 3 MiB would be 192 MiB).
    let mut image_bytes: u64 = 0;
    for path in paths {
        let one = ReadParams {
            path: Some(path.clone()),
            paths: None,
            ..p.clone()
        };
        let call = ToolCall::Read(one.clone());
        let r = match gw.authorize_on(snap, &p.workspace_id, &call, session).await {
            Ok(a) => crate::tools::fs::read(&a, &one).await,
            Err(e) => Err(e),
        };
        let r = r.and_then(|read| {
            let n = read.image.as_ref().map_or(0, |d| d.len() as u64);
            let total = image_bytes.saturating_add(n);
            if total > crate::wire::IMAGE_MAX_BYTES {
                return Err(ToolError::new(
                    crate::error::ErrorCode::FileTooLarge,
                    format!(
                        "{path}: the images of one read total at most {} bytes; read this one alone",
                        crate::wire::IMAGE_MAX_BYTES
                    ),
                ));
            }
            image_bytes = total;
            Ok(read)
        });
        files.push(match r {
            Ok(v) => ReadManyFile::Read(v),
            Err(mut e) => {
                // A file's error text passes the redactor as a call's error does.
                if let std::borrow::Cow::Owned(red) = gw.config.redaction.text(&e.message) {
                    e.message = red;
                }
                ReadManyFile::Failed {
                    path: path.clone(),
                    error: e,
                }
            }
        });
    }
    Ok(ReadManyResult { files })
}

/// `process_list`: decided on the one workspace it names, or on each workspace (one decision
/// each; a workspace whose decision refuses is left out, its processes unlisted); each
/// workspace's own handles of the caller, newest first.
async fn process_list(
    gw: &Gateway,
    snap: &Arc<PolicySnapshot>,
    call: &ToolCall,
    p: &crate::wire::ProcessListParams,
    session: &Session,
) -> Result<crate::wire::ProcessListResult, ToolError> {
    let mut processes = Vec::new();
    match p.workspace_id.as_deref().filter(|s| !s.is_empty()) {
        Some(id) => {
            let auth = gw.authorize_on(snap, id, call, session).await?;
            crate::tools::process_list::process_list_in(&auth, &mut processes).await;
        }
        None => {
            let ids: Vec<String> = gw.workspaces.keys().cloned().collect();
            for id in ids {
                if let Ok(auth) = gw.authorize_on(snap, &id, call, session).await {
                    crate::tools::process_list::process_list_in(&auth, &mut processes).await;
                }
            }
        }
    }
    processes.sort_by(|a, b| {
        b.started_at
            .cmp(&a.started_at)
            .then_with(|| a.process_id.cmp(&b.process_id))
    });
    Ok(crate::wire::ProcessListResult { processes })
}

impl Gateway {
    /// Serves one tool call. The result is the tool's result object.
    pub async fn call(&self, session: &Session, call: ToolCall) -> Result<ToolResult, ToolError> {
        // Calls in flight finish under the snapshot they started with.
        let snap = self.policy.snapshot();
        let result = match &call {
            ToolCall::WorkspaceInfo(p) => {
                let server = self.server_info(&snap);
                match p.workspace_id.as_deref().filter(|s| !s.is_empty()) {
                    None => Ok(server),
                    Some(id) => {
                        let auth = self.authorize_on(&snap, id, &call, session).await?;
                        // The worker's state is what reaching it says now (a live connection
                        // is reused; a dead one is tried again after its backoff).
                        if let Some(w) = self.workers.get(&auth.ws().facts.environment) {
                            let _ = w.ensure().await;
                        }
                        crate::tools::info::workspace_info(&auth, server).await
                    }
                }
                .map(|r| ToolResult::WorkspaceInfo(Box::new(r)))
            }
            ToolCall::Read(p) if p.paths.is_some() => read_many(self, &snap, p, session)
                .await
                .map(ToolResult::ReadMany),
            ToolCall::Read(p) => {
                let auth = self
                    .authorize_on(&snap, &p.workspace_id, &call, session)
                    .await?;
                crate::tools::fs::read(&auth, p).await.map(ToolResult::Read)
            }
            ToolCall::Find(p) => {
                let auth = self
                    .authorize_on(&snap, &p.workspace_id, &call, session)
                    .await?;
                crate::tools::search::find(&auth, p)
                    .await
                    .map(ToolResult::Find)
            }
            ToolCall::Grep(p) => {
                let auth = self
                    .authorize_on(&snap, &p.workspace_id, &call, session)
                    .await?;
                crate::tools::search::grep(&auth, p)
                    .await
                    .map(ToolResult::Grep)
            }
            ToolCall::FindFiles(p) => {
                let auth = self
                    .authorize_on(&snap, &p.workspace_id, &call, session)
                    .await?;
                crate::tools::search::find_files(&auth, p)
                    .await
                    .map(ToolResult::FindFiles)
            }
            ToolCall::OperationStatus(p) => {
                // The caller's operation, then the call decided on its workspace.
                let (row, _) = crate::gateway::ops::operation_target(self, session, p)?;
                let auth = self
                    .authorize_on(&snap, &row.workspace, &call, session)
                    .await?;
                crate::tools::ops::operation_status(&auth, &row)
                    .map(|r| ToolResult::OperationStatus(Box::new(r)))
            }
            // The operation ledger (issue 31).
            ToolCall::OperationDiff(p) => {
                // The caller's operation, then the call decided on its workspace (and each path
                // the diff shows decided by the handler through `Authorized`).
                let (row, _) = crate::gateway::ops::operation_target(
                    self,
                    session,
                    &crate::wire::OperationStatusParams {
                        operation_id: Some(p.operation_id.clone()),
                        operation_key: None,
                    },
                )?;
                let auth = self
                    .authorize_on(&snap, &row.workspace, &call, session)
                    .await?;
                crate::tools::ledger::operation_diff(&auth, &row, p)
                    .await
                    .map(|r| ToolResult::OperationDiff(Box::new(r)))
            }
            ToolCall::OperationRevert(p) => operation_revert(self, &snap, session, &call, p).await,
            ToolCall::ApplyPatch(p) => {
                // A check writes nothing, so it is never held.
                let confirm = !p.check_only.unwrap_or(false);
                let auth = self
                    .authorize_held(&snap, &p.workspace_id, &call, session, confirm)
                    .await?;
                crate::tools::patch::apply_patch(&auth, p, None)
                    .await
                    .map(ToolResult::ApplyPatch)
            }
            // A whole-file write (issue 31): a one-file patch operation, held like one.
            ToolCall::WriteFile(p) => {
                let confirm = !p.check_only.unwrap_or(false);
                let auth = self
                    .authorize_held(&snap, &p.workspace_id, &call, session, confirm)
                    .await?;
                // Boxed: its apply_patch future inline would grow this match's state (and the
                // debug stack frame every decision above it runs on) by its whole size.
                Box::pin(crate::tools::write_file::write_file(&auth, p, None))
                    .await
                    .map(ToolResult::ApplyPatch)
            }
            ToolCall::ApprovalCreate(p) => {
                let held = crate::gateway::approvals::held_of(p)?;
                let auth = self
                    .authorize_on(&snap, held.workspace_id().unwrap_or(""), &call, session)
                    .await?;
                crate::tools::approvals::approval_create(&auth, &held)
                    .await
                    .map(ToolResult::ApprovalState)
            }
            ToolCall::ApprovalResolve(p) => {
                let (auth, row) = self.authorize_resolve(&snap, session, &call, p)?;
                crate::tools::approvals::approval_resolve(&auth, p, &row)
                    .map(ToolResult::ApprovalState)
            }
            ToolCall::OperationResume(p) => self
                .holds()
                .operation_resume(&snap, session, p, run_held)
                .await
                .map(|r| ToolResult::OperationResume(Box::new(r))),
            ToolCall::ExecCommand(p) => {
                let auth = self
                    .authorize_held(&snap, &p.workspace_id, &call, session, true)
                    .await?;
                crate::tools::process::exec_command(&auth, p)
                    .await
                    .map(|r| ToolResult::ExecCommand(Box::new(r)))
            }
            ToolCall::WriteStdin(p) => {
                let auth = self
                    .authorize_process(&snap, session, &call, &p.process_id)
                    .await?;
                crate::tools::process::write_stdin(&auth, p)
                    .await
                    .map(ToolResult::ProcessAck)
            }
            ToolCall::ReadProcess(p) => {
                let auth = self
                    .authorize_process(&snap, session, &call, &p.process_id)
                    .await?;
                crate::tools::process::read_process(&auth, p)
                    .await
                    .map(ToolResult::ReadProcess)
            }
            ToolCall::ProcessStatus(p) => {
                let auth = self
                    .authorize_process(&snap, session, &call, &p.process_id)
                    .await?;
                crate::tools::process::process_status(&auth, p)
                    .await
                    .map(ToolResult::ProcessStatus)
            }
            ToolCall::ProcessResize(p) => {
                let auth = self
                    .authorize_process(&snap, session, &call, &p.process_id)
                    .await?;
                crate::tools::process::process_resize(&auth, p)
                    .await
                    .map(ToolResult::ProcessResize)
            }
            ToolCall::ProcessList(p) => process_list(self, &snap, &call, p, session)
                .await
                .map(ToolResult::ProcessList),
            ToolCall::TerminateProcess(p) => {
                let auth = self
                    .authorize_process(&snap, session, &call, &p.process_id)
                    .await?;
                crate::tools::process::terminate_process(&auth, p)
                    .await
                    .map(ToolResult::ProcessAck)
            }
        }
        .map_err(|mut e| {
            // Every error text the caller gets passes the redactor (a spawn error may quote
            // the command).
            if let std::borrow::Cow::Owned(red) = self.config.redaction.text(&e.message) {
                e.message = red;
            }
            e
        })?;
        Ok(result)
    }

    /// A human's answer in-band through the asking client (channel `elicitation`, or `mrtr`:
    /// the answer of an MCP 2026 `input_required` retry, single-use): decided by policy as
    /// `approval_resolve`; a grant resumes the held call at once and returns the held tool's own
    /// result; a deny is final (`APPROVAL_CONFLICT`, nothing ran).
    pub async fn answer_in_band(
        &self,
        session: &Session,
        id: &str,
        decision: ApprovalDecision,
        channel: InBandChannel,
    ) -> Result<ToolResult, ToolError> {
        self.holds()
            .answer_in_band_with(session, id, decision, channel, run_held)
            .await
    }
}

/// `operation_revert` (issue 31): the caller's `apply_patch` operation, the call decided on its
/// workspace as `operation_revert`, then its reverse patch decided, held and applied exactly as
/// an `apply_patch` call of it (a hold stores that `apply_patch`; resuming it applies the
/// reverse patch).
async fn operation_revert(
    gw: &Gateway,
    snap: &Arc<PolicySnapshot>,
    session: &Session,
    call: &ToolCall,
    p: &crate::wire::OperationRevertParams,
) -> Result<ToolResult, ToolError> {
    let (row, _) = crate::gateway::ops::operation_target(
        gw,
        session,
        &crate::wire::OperationStatusParams {
            operation_id: Some(p.operation_id.clone()),
            operation_key: None,
        },
    )?;
    let params = {
        let auth = gw.authorize_on(snap, &row.workspace, call, session).await?;
        crate::tools::ledger::revert_params(&auth, &row, p).await?
    };
    let patch_call = ToolCall::ApplyPatch(params.clone());
    let auth = gw
        .authorize_held(snap, &row.workspace, &patch_call, session, true)
        .await?;
    crate::tools::patch::apply_patch(&auth, &params, None)
        .await
        .map(ToolResult::ApplyPatch)
}

/// Runs a held call the gateway authorized (`operation_resume`) through its handler.
fn run_held<'a>(
    auth: Authorized<'a>,
    call: ToolCall,
    resumed: Option<Resumed>,
) -> Pin<Box<dyn Future<Output = Result<ToolResult, ToolError>> + Send + 'a>> {
    Box::pin(async move {
        match call {
            ToolCall::ApplyPatch(p) => {
                crate::tools::patch::apply_patch(&auth, &p, resumed.as_ref())
                    .await
                    .map(ToolResult::ApplyPatch)
            }
            ToolCall::ExecCommand(p) => crate::tools::process::exec_command(&auth, &p)
                .await
                .map(|r| ToolResult::ExecCommand(Box::new(r))),
            ToolCall::WriteFile(p) => Box::pin(crate::tools::write_file::write_file(
                &auth,
                &p,
                resumed.as_ref(),
            ))
            .await
            .map(ToolResult::ApplyPatch),
            other => Err(ToolError::new(
                crate::error::ErrorCode::Internal,
                format!("`{}` cannot be held", other.tool()),
            )),
        }
    })
}
