//! Wire types of the MCP tools: one `<Tool>Params` and `<Tool>Result` per tool, with the JSON
//! schemas the server advertises. Optional result fields are omitted rather than sent as null.

pub use crate::tool_table::ToolName;
pub use approvals::*;
pub use files::*;
pub use info::*;
pub use ledger::*;
pub use process::*;
pub use result::*;

mod approvals;
mod files;
mod info;
mod ledger;
mod process;
mod result;

/// Largest `read` window, and its default.
pub const READ_MAX_BYTES: u64 = 1024 * 1024;
/// Largest image `read` returns as MCP image content (PNG, JPEG, GIF, WebP; 3 MiB, about 4 MiB
/// of base64): a larger image is `FILE_TOO_LARGE` naming its size.
pub const IMAGE_MAX_BYTES: u64 = 3 * 1024 * 1024;
/// Largest `find` page, and its default.
pub const FIND_MAX_PATHS: u64 = 10_000;
/// Default `grep` page, in matches.
pub const GREP_DEFAULT_MATCHES: u64 = 200;
/// Largest `grep` page, in matches.
pub const GREP_MAX_MATCHES: u64 = 10_000;
/// Largest file `grep` searches.
pub const GREP_MAX_FILE_BYTES: u64 = 32 * 1024 * 1024;
/// Longest line `grep` returns, in characters.
pub const GREP_MAX_LINE_CHARS: usize = 500;
/// Most bytes of line text one `grep` page carries.
pub const GREP_MAX_OUTPUT_BYTES: usize = 4 * 1024 * 1024;
/// Default `find_files` result count.
pub const FIND_FILES_DEFAULT_LIMIT: u64 = 50;
/// Largest `find_files` result count.
pub const FIND_FILES_MAX_LIMIT: u64 = 1_000;

/// A parsed tool call: the tool name and its typed parameters. Built from `tools/call` params
/// by the server and from `call:` cases by the policy test runner, so both take the same path.
#[derive(Debug, Clone)]
#[allow(missing_docs)]
pub enum ToolCall {
    WorkspaceInfo(WorkspaceInfoParams),
    Read(ReadParams),
    Find(FindParams),
    ApplyPatch(ApplyPatchParams),
    OperationStatus(OperationStatusParams),
    ExecCommand(ExecCommandParams),
    WriteStdin(WriteStdinParams),
    ReadProcess(ReadProcessParams),
    ProcessStatus(ProcessIdParams),
    ProcessResize(ProcessResizeParams),
    TerminateProcess(ProcessIdParams),
    Grep(GrepParams),
    FindFiles(FindFilesParams),
    ApprovalCreate(ApprovalCreateParams),
    ApprovalResolve(ApprovalResolveParams),
    OperationResume(OperationResumeParams),
    // The operation ledger (issue 31).
    OperationDiff(OperationDiffParams),
    OperationRevert(OperationRevertParams),
    ProcessList(ProcessListParams),
    WriteFile(WriteFileParams),
}

/// Why a `tools/call` could not become a [`ToolCall`].
#[derive(Debug, Clone, PartialEq)]
pub enum CallParseError {
    /// No such tool (a JSON-RPC error at the transport).
    UnknownTool(String),
    /// The arguments do not match the tool's input schema (`INVALID_ARGUMENTS`).
    InvalidArguments(String),
}

fn parse_args<T: serde::de::DeserializeOwned>(
    args: &serde_json::Value,
) -> Result<T, CallParseError> {
    let value = if args.is_null() {
        serde_json::Value::Object(Default::default())
    } else {
        args.clone()
    };
    if !value.is_object() {
        return Err(CallParseError::InvalidArguments(
            "arguments must be a JSON object".into(),
        ));
    }
    serde_json::from_value(value).map_err(|e| CallParseError::InvalidArguments(e.to_string()))
}

impl ToolCall {
    /// Parses a tool name and its JSON arguments.
    pub fn parse(name: &str, args: &serde_json::Value) -> Result<ToolCall, CallParseError> {
        let Some(tool) = ToolName::parse(name) else {
            return Err(CallParseError::UnknownTool(name.to_string()));
        };
        Ok(match tool {
            ToolName::WorkspaceInfo => ToolCall::WorkspaceInfo(parse_args(args)?),
            ToolName::Read => ToolCall::Read(parse_args(args)?),
            ToolName::Find => ToolCall::Find(parse_args(args)?),
            ToolName::ApplyPatch => ToolCall::ApplyPatch(parse_args(args)?),
            ToolName::OperationStatus => ToolCall::OperationStatus(parse_args(args)?),
            ToolName::ExecCommand => ToolCall::ExecCommand(parse_args(args)?),
            ToolName::WriteStdin => ToolCall::WriteStdin(parse_args(args)?),
            ToolName::ReadProcess => ToolCall::ReadProcess(parse_args(args)?),
            ToolName::ProcessStatus => ToolCall::ProcessStatus(parse_args(args)?),
            ToolName::ProcessResize => ToolCall::ProcessResize(parse_args(args)?),
            ToolName::TerminateProcess => ToolCall::TerminateProcess(parse_args(args)?),
            ToolName::Grep => ToolCall::Grep(parse_args(args)?),
            ToolName::FindFiles => ToolCall::FindFiles(parse_args(args)?),
            ToolName::ApprovalCreate => ToolCall::ApprovalCreate(parse_args(args)?),
            ToolName::ApprovalResolve => ToolCall::ApprovalResolve(parse_args(args)?),
            ToolName::OperationResume => ToolCall::OperationResume(parse_args(args)?),
            // The operation ledger (issue 31).
            ToolName::OperationDiff => ToolCall::OperationDiff(parse_args(args)?),
            ToolName::OperationRevert => ToolCall::OperationRevert(parse_args(args)?),
            ToolName::ProcessList => ToolCall::ProcessList(parse_args(args)?),
            ToolName::WriteFile => ToolCall::WriteFile(parse_args(args)?),
        })
    }

    /// The tool this call is for.
    pub fn name(&self) -> ToolName {
        match self {
            ToolCall::WorkspaceInfo(_) => ToolName::WorkspaceInfo,
            ToolCall::Read(_) => ToolName::Read,
            ToolCall::Find(_) => ToolName::Find,
            ToolCall::ApplyPatch(_) => ToolName::ApplyPatch,
            ToolCall::OperationStatus(_) => ToolName::OperationStatus,
            ToolCall::ExecCommand(_) => ToolName::ExecCommand,
            ToolCall::WriteStdin(_) => ToolName::WriteStdin,
            ToolCall::ReadProcess(_) => ToolName::ReadProcess,
            ToolCall::ProcessStatus(_) => ToolName::ProcessStatus,
            ToolCall::ProcessResize(_) => ToolName::ProcessResize,
            ToolCall::TerminateProcess(_) => ToolName::TerminateProcess,
            ToolCall::Grep(_) => ToolName::Grep,
            ToolCall::FindFiles(_) => ToolName::FindFiles,
            ToolCall::ApprovalCreate(_) => ToolName::ApprovalCreate,
            ToolCall::ApprovalResolve(_) => ToolName::ApprovalResolve,
            ToolCall::OperationResume(_) => ToolName::OperationResume,
            // The operation ledger (issue 31).
            ToolCall::OperationDiff(_) => ToolName::OperationDiff,
            ToolCall::OperationRevert(_) => ToolName::OperationRevert,
            ToolCall::ProcessList(_) => ToolName::ProcessList,
            ToolCall::WriteFile(_) => ToolName::WriteFile,
        }
    }

    /// The tool name (= the Cedar action id).
    pub fn tool(&self) -> &'static str {
        self.name().as_str()
    }

    /// The workspace the call names, when it names one.
    pub fn workspace_id(&self) -> Option<&str> {
        match self {
            ToolCall::WorkspaceInfo(p) => p.workspace_id.as_deref().filter(|s| !s.is_empty()),
            ToolCall::Read(p) => Some(&p.workspace_id),
            ToolCall::Find(p) => Some(&p.workspace_id),
            ToolCall::ApplyPatch(p) => Some(&p.workspace_id),
            ToolCall::WriteFile(p) => Some(&p.workspace_id),
            ToolCall::ExecCommand(p) => Some(&p.workspace_id),
            ToolCall::Grep(p) => Some(&p.workspace_id),
            ToolCall::FindFiles(p) => Some(&p.workspace_id),
            ToolCall::ApprovalCreate(p) => p.arguments.get("workspace_id").and_then(|w| w.as_str()),
            ToolCall::ProcessList(p) => p.workspace_id.as_deref().filter(|s| !s.is_empty()),
            _ => None,
        }
    }
}

/// Milliseconds to an RFC 3339 UTC timestamp.
pub fn rfc3339_ms(ms: i64) -> String {
    let nanos = i128::from(ms) * 1_000_000;
    time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| ms.to_string())
}
