//! `write_file` (issue 31's file toolkit), a handler of an [`Authorized`] call: a whole-file
//! write, append or create with exact bytes, run as the one-file patch the request builder made
//! of it (a `Write` hunk), through `apply_patch`'s plan → journal → commit path, so versions,
//! the rollback journal, recovery, holds and the ledger apply unchanged.

use crate::error::{ErrorCode, ToolError};
use crate::gateway::Authorized;
use crate::wire::{ApplyPatchParams, ApplyPatchResult, WriteFileParams};
use codespace_runner_fs::{RelPath, Version};
use codespace_runner_patch::Hunk;
use std::collections::BTreeMap;

/// Serves `write_file` (the gateway has decided its path as `write_file` and `apply_patch` and,
/// unless this runs a granted hold, asked `confirm`).
pub(crate) async fn write_file(
    auth: &Authorized<'_>,
    p: &WriteFileParams,
    resumed: Option<&crate::gateway::approvals::Resumed>,
) -> Result<ApplyPatchResult, ToolError> {
    let rel = RelPath::parse(&p.path)?;
    // The bytes as the request builder decoded them (never decoded twice).
    let size = match auth.patch()?.hunks.first() {
        Some(Hunk::Write { data, .. }) => data.len() as u64,
        _ => {
            return Err(ToolError::new(
                ErrorCode::Internal,
                "write_file: the request builder made no whole-file change",
            ));
        }
    };
    let max = auth.config.limits.max_patch_file_bytes;
    if size > max {
        return Err(ToolError::new(
            ErrorCode::FileTooLarge,
            format!(
                "content is {size} bytes, more than limits.max_patch_file_bytes ({max}); nothing was written"
            ),
        ));
    }
    let digest = match auth.patch()?.hunks.first() {
        Some(Hunk::Write { data, .. }) => Version::from_bytes(data).as_str().to_string(),
        _ => String::new(),
    };
    let expected_versions: BTreeMap<String, String> = p
        .expected_version
        .iter()
        .map(|v| (rel.as_str().to_string(), v.clone()))
        .collect();
    // The operation's fingerprint (a replayed `operation_key` must name the same write): the
    // path, mode and the content's digest stand where a patch's text would.
    let params = ApplyPatchParams {
        workspace_id: p.workspace_id.clone(),
        patch: format!("write_file {} {} {digest}", p.mode.as_str(), rel.as_str()),
        expected_versions,
        operation_key: p.operation_key.clone(),
        check_only: p.check_only,
    };
    crate::tools::patch::apply_patch(auth, &params, resumed).await
}
