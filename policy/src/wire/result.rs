//! The typed result of a tool call: [`ToolResult`], one variant per result shape, which `mcp`
//! serializes as the call's `structuredContent`. The only JSON values left inside are data the
//! store recorded (a finished operation's fields as `operation_status` shows them).

use super::approvals::{ApprovalStateResult, OperationResumeResult};
use super::files::{ApplyPatchResult, FindFilesResult, FindResult, GrepResult, ReadResult};
use super::info::WorkspaceInfoResult;
use super::ledger::OperationDiffResult;
use super::process::ProcessListResult;
use super::process::{
    ExecCommandResult, ProcessAckResult, ProcessResizeResult, ProcessStatusResult,
    ReadProcessResult,
};
use crate::error::ToolError;
use serde::Serialize;

/// What a served tool call returns; serialized without a tag (each variant is the tool's own
/// result object, exactly as its output schema describes it).
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
#[allow(missing_docs)]
pub enum ToolResult {
    WorkspaceInfo(Box<WorkspaceInfoResult>),
    Read(ReadResult),
    ReadMany(ReadManyResult),
    Find(FindResult),
    Grep(GrepResult),
    FindFiles(FindFilesResult),
    ApplyPatch(ApplyPatchResult),
    OperationStatus(Box<OperationStatusResult>),
    ExecCommand(Box<ExecCommandResult>),
    /// `write_stdin` and `terminate_process`.
    ProcessAck(ProcessAckResult),
    ReadProcess(ReadProcessResult),
    ProcessStatus(ProcessStatusResult),
    ProcessResize(ProcessResizeResult),
    /// `approval_create` and `approval_resolve`.
    ApprovalState(ApprovalStateResult),
    OperationResume(Box<OperationResumeResult>),
    /// `operation_diff` (the operation ledger, issue 31).
    OperationDiff(Box<OperationDiffResult>),
    ProcessList(ProcessListResult),
}

/// Result of `read` with `paths`: one entry per path, in the order asked.
#[derive(Debug, Clone, Serialize)]
pub struct ReadManyResult {
    /// Each path's read, or its error.
    pub files: Vec<ReadManyFile>,
}

/// One file of a `read` with `paths`.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum ReadManyFile {
    /// The file's read, exactly as a single `read` of it returns.
    Read(ReadResult),
    /// The path's refusal or failure (its error body, redacted).
    Failed {
        /// The path as asked.
        path: String,
        /// The error body a single `read` of it would have returned.
        error: ToolError,
    },
}

/// One event of an operation (`operation_status.events`).
#[derive(Debug, Clone, Serialize)]
pub struct OperationEvent {
    /// RFC 3339 time of the event.
    pub at: String,
    /// What happened.
    pub name: String,
    /// The operation's status the event recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Why, when the event says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Result of `operation_status`.
#[derive(Debug, Clone, Serialize)]
pub struct OperationStatusResult {
    /// The operation id (`op-…`).
    pub operation_id: String,
    /// `running` until it finished, then its recorded status.
    pub status: String,
    /// Always false (a status is never a replay).
    pub replayed: bool,
    /// The operation kind of its tool.
    pub kind: &'static str,
    /// The tool that ran it.
    pub tool: String,
    /// Its workspace.
    pub workspace_id: String,
    /// Unix seconds it was created.
    pub created_at: i64,
    /// Its events, oldest first.
    pub events: Vec<OperationEvent>,
    /// Unix seconds it finished.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<i64>,
    /// The caller's operation key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operation_key: Option<String>,
    /// Recorded: the touched paths (non-empty only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub files: Option<serde_json::Value>,
    /// Recorded: the per-file changes (non-empty only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub changes: Option<serde_json::Value>,
    /// Recorded: the process an exec started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process_id: Option<serde_json::Value>,
    /// Recorded: the error it finished with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<serde_json::Value>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    fn read(path: &str) -> ReadResult {
        ReadResult {
            path: path.into(),
            content: "hi\n".into(),
            encoding: None,
            content_lossy: false,
            version: "sha256:00".into(),
            truncated: false,
            offset: None,
            next_offset: None,
            byte_count: 3,
            mime_type: None,
            image: None,
        }
    }

    /// A result is the tool's own object: no tag, no null for an absent optional field.
    #[test]
    fn a_result_serializes_as_the_tools_own_object_without_nulls() {
        let v = serde_json::to_value(ToolResult::Read(read("a.txt"))).unwrap();
        let obj = v.as_object().unwrap();
        assert_eq!(v["path"], "a.txt");
        assert_eq!(v["content"], "hi\n");
        assert!(!obj.contains_key("Read"), "{v}");
        assert!(obj.values().all(|f| !f.is_null()), "{v}");
        assert!(!obj.contains_key("offset") && !obj.contains_key("encoding"));
    }

    /// `read` with `paths`: a file's read as a single read returns it, a failure as
    /// `{path, error}` with the ErrorBody.
    #[test]
    fn a_read_of_several_files_keeps_each_files_shape() {
        let r = ReadManyResult {
            files: vec![
                ReadManyFile::Read(read("a.txt")),
                ReadManyFile::Failed {
                    path: ".env".into(),
                    error: ToolError::new(ErrorCode::Unauthorized, "denied"),
                },
            ],
        };
        let v = serde_json::to_value(ToolResult::ReadMany(r)).unwrap();
        assert_eq!(v["files"][0]["path"], "a.txt");
        assert_eq!(v["files"][0]["byte_count"], 3);
        assert_eq!(v["files"][1]["path"], ".env");
        assert_eq!(v["files"][1]["error"]["code"], "UNAUTHORIZED");
        assert_eq!(v["files"][1]["error"]["message"], "denied");
        assert_eq!(v["files"][1].as_object().unwrap().len(), 2, "{v}");
    }
}
