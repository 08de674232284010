//! `apply_patch`: parse and plan the whole patch, authorize every touched path, check versions,
//! then commit all or nothing under the workspace lease with a rollback journal.

use crate::error::{ErrorCode, ToolError};
use crate::gateway::Gateway;
use crate::policy::PolicySnapshot;
use crate::request::Session;
use crate::tools::ApplyPatchParams;
use serde_json::Value;

impl Gateway {
    /// Serves `apply_patch`.
    pub(crate) async fn apply_patch(
        &self,
        _snap: &PolicySnapshot,
        _session: &Session,
        _p: &ApplyPatchParams,
    ) -> Result<Value, ToolError> {
        Err(ToolError::new(
            ErrorCode::InvalidArguments,
            "tool `apply_patch` is not available in this build",
        ))
    }
}
