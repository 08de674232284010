//! The process tools: exec_command, write_stdin, read_process, process_status, process_resize,
//! terminate_process. (Being implemented: these stubs keep the dispatch shape.)

use crate::error::{ErrorCode, ToolError};
use crate::gateway::Gateway;
use crate::policy::PolicySnapshot;
use crate::request::Session;
use crate::tools::ToolCall;
use serde_json::Value;

impl Gateway {
    /// Serves a process tool call.
    pub(crate) async fn process_call(
        &self,
        _snap: &PolicySnapshot,
        _session: &Session,
        call: &ToolCall,
    ) -> Result<Value, ToolError> {
        Err(ToolError::new(
            ErrorCode::InvalidArguments,
            format!("tool `{}` is not available in this build", call.tool()),
        ))
    }
}
