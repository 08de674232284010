//! The rmcp server: tools/list from the wire types, and one `call_tool` that parses the
//! arguments, hands the call to the gateway and encodes the result or the ErrorBody.

use codespace_engine::tools::{
    ApplyPatchParams, ApplyPatchResult, CallParseError, ExecCommandParams, FindParams, FindResult,
    OperationStatusParams, ProcessIdParams, ProcessResizeParams, ReadParams, ReadProcessParams,
    ReadResult, WorkspaceInfoParams, WriteStdinParams,
};
use codespace_engine::tools::{
    ExecCommandResult, ProcessAckResult, ProcessResizeResult, ProcessStatusResult,
    ReadProcessResult,
};
use codespace_engine::tools::{FindFilesParams, FindFilesResult, GrepParams, GrepResult};
use codespace_engine::{ErrorCode, Gateway, IMPLEMENTED_TOOLS, Session, ToolCall, ToolError};
use rmcp::handler::server::common::schema_for_type;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig,
    Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use std::borrow::Cow;
use std::sync::Arc;

/// What `initialize.instructions` says: the global invariants.
pub const INSTRUCTIONS: &str = "CodeSpace is an execution-only server: it never calls a model. \
Every tool call is authorized by Cedar policy; a denial is UNAUTHORIZED with a reason, decision_id and policy_ids. \
workspace_id and process_id are selectors, not credentials. Paths are workspace-relative; symlinks and special files are refused. \
Commands are exact argv without a shell; processes outlive the request, and output beyond the retained window can be lost (output_lost). \
A live process holds its workspace's mutation lease (WORKSPACE_BUSY); concurrent patches wait FIFO up to 64 waiters (RESOURCE_QUEUE_FULL). \
dispatch_status \"unknown\" means the process may have started: do not start a duplicate. \
Call workspace_info with a workspace_id for that workspace's effective capabilities.";

/// The MCP server of one connection (stdio) or one HTTP session.
#[derive(Clone)]
pub struct CodeSpaceServer {
    gateway: Arc<Gateway>,
    session: Session,
}

impl CodeSpaceServer {
    /// A server for `session`.
    pub fn new(gateway: Arc<Gateway>, session: Session) -> CodeSpaceServer {
        CodeSpaceServer { gateway, session }
    }
}

fn schema_obj(v: serde_json::Value) -> Arc<rmcp::model::JsonObject> {
    match v {
        serde_json::Value::Object(m) => Arc::new(m),
        _ => Arc::new(Default::default()),
    }
}

/// A permissive object schema for results built as JSON (workspace_info).
fn workspace_info_output_schema() -> Arc<rmcp::model::JsonObject> {
    schema_obj(serde_json::json!({
        "type": "object",
        "properties": {
            "server": {"type": "string"},
            "version": {"type": "string"},
            "internal_model_calls": {"type": "boolean"},
            "tools_exposed": {"type": "array", "items": {"type": "string"}},
            "transports": {"type": "array", "items": {"type": "string"}},
            "workspace_id": {"type": ["string", "null"]},
            "workspace_id_is_credential": {"type": "boolean"},
            "profile": {"type": "string"},
            "execution": {"type": "object"},
            "policy": {"type": "object"},
        },
        "required": ["server", "version", "internal_model_calls", "tools_exposed",
                     "transports", "workspace_id", "workspace_id_is_credential"],
    }))
}

/// A plain object schema for results built as JSON.
fn object_schema() -> Arc<rmcp::model::JsonObject> {
    schema_obj(serde_json::json!({"type": "object"}))
}

fn annotations(read_only: bool, destructive: bool) -> ToolAnnotations {
    let mut a = ToolAnnotations::default();
    a.read_only_hint = Some(read_only);
    a.destructive_hint = Some(destructive);
    a.open_world_hint = Some(false);
    a
}

/// Every implemented tool with its description and schemas.
pub fn tool_list() -> Vec<Tool> {
    let all = vec![
        Tool::new(
            "workspace_info",
            "Server identity and, with a workspace_id, that workspace's effective execution contract: \
             permissions and availability as decided by policy, limits, serialization, isolation, network. \
             Calls no model and reads no files; workspace ids are not credentials.",
            schema_for_type::<WorkspaceInfoParams>(),
        )
        .with_raw_output_schema(workspace_info_output_schema())
        .with_annotations(annotations(true, false)),
        Tool::new(
            "read",
            "Read a workspace-relative regular file. Returns a window of its bytes (offset/limit, default and \
             max 1 MiB) as lossy UTF-8, and the sha256 version of the whole file. Use next_offset to continue. \
             Symlinks, special files and paths outside the workspace are refused.",
            schema_for_type::<ReadParams>(),
        )
        .with_output_schema::<ReadResult>()
        .with_annotations(annotations(true, false)),
        Tool::new(
            "find",
            "List workspace-relative file paths (sorted, symlinks listed but never followed), optionally \
             filtered by a glob, paged by offset/limit (default and max 10000). incomplete means the walk hit \
             a cap; restart at offset 0 when listing_version changes. Paths policy withholds are counted in \
             withheld. type (file|dir|any), max_depth, exclude globs, respect_gitignore (also skips hidden \
             entries) and details (kind, size, mtime per entry) refine the listing.",
            schema_for_type::<FindParams>(),
        )
        .with_output_schema::<FindResult>()
        .with_annotations(annotations(true, false)),
        Tool::new(
            "apply_patch",
            "Apply a V4A patch (*** Begin Patch / *** Add File / *** Update File / *** Delete File / \
             *** Move to / @@ chunks / *** End Patch) to workspace files, all or nothing: the whole patch is \
             parsed, planned and authorized before any write, and any failure restores every touched file. \
             expected_versions (path -> sha256:<hex> or \"absent\") guards against stale edits \
             (VERSION_CONFLICT). check_only verifies without writing. operation_key makes retries safe.",
            schema_for_type::<ApplyPatchParams>(),
        )
        .with_output_schema::<ApplyPatchResult>()
        .with_annotations(annotations(false, true)),
        Tool::new(
            "operation_status",
            "Look up a recorded operation (apply_patch, exec_command, write_stdin, terminate_process) by \
             exactly one of operation_id or operation_key. Never re-runs anything.",
            schema_for_type::<OperationStatusParams>(),
        )
        .with_raw_output_schema(object_schema())
        .with_annotations(annotations(true, false)),
        Tool::new(
            "exec_command",
            "Start a managed process: exact argv (no shell), cwd = workspace root (or cwd, workspace-relative), \
             cleared environment plus env (each name decided by policy), inside the command sandbox that policy \
             shapes. Returns a process_id that outlives this request. tty gives a 24x80 terminal. yield_ms waits \
             for early output or exit. A live foreground process holds the workspace's mutation lease \
             (WORKSPACE_BUSY for other commands and patches); background: true starts a service that does not. \
             stderr: \"separate\" keeps stderr apart with its own cursor.",
            schema_for_type::<ExecCommandParams>(),
        )
        .with_output_schema::<ExecCommandResult>()
        .with_annotations(annotations(false, true)),
        Tool::new(
            "write_stdin",
            "Write text to a managed process's stdin (or terminal).",
            schema_for_type::<WriteStdinParams>(),
        )
        .with_output_schema::<ProcessAckResult>()
        .with_annotations(annotations(false, false)),
        Tool::new(
            "read_process",
            "Read a process's combined output from a byte cursor; wait_ms long-polls for new output or \
             exit. eof means output collection finished and the cursor is at the end (not an exit status); \
             output_lost means bytes before retained_from were dropped from the bounded buffer.",
            schema_for_type::<ReadProcessParams>(),
        )
        .with_output_schema::<ReadProcessResult>()
        .with_annotations(annotations(true, false)),
        Tool::new(
            "process_status",
            "State of a managed process: running/exited, exit_code, termination \
             (exited/signaled/timeout/terminated/unknown), output totals.",
            schema_for_type::<ProcessIdParams>(),
        )
        .with_output_schema::<ProcessStatusResult>()
        .with_annotations(annotations(true, false)),
        Tool::new(
            "process_resize",
            "Resize a managed process's terminal (tty processes only).",
            schema_for_type::<ProcessResizeParams>(),
        )
        .with_output_schema::<ProcessResizeResult>()
        .with_annotations(annotations(false, false)),
        Tool::new(
            "terminate_process",
            "Terminate a managed process and its whole process group (TERM, then KILL after a grace period).",
            schema_for_type::<ProcessIdParams>(),
        )
        .with_output_schema::<ProcessAckResult>()
        .with_annotations(annotations(false, true)),
        Tool::new(
            "grep",
            "Search file contents for a literal string (or a regex with regex: true; case_insensitive, \
             context_lines <= 10). Returns matching lines (path, line_number, line capped at 500 characters, \
             before/after context) in path then line order, paged by max_matches (default 200, max 10000) \
             and offset/next_offset; per-file counts; skipped binary, too large and unreadable files. \
             Respects .gitignore and skips hidden files unless respect_gitignore is false. glob and path \
             narrow the search. Files policy withholds are never opened and are counted in withheld.",
            schema_for_type::<GrepParams>(),
        )
        .with_output_schema::<GrepResult>()
        .with_annotations(annotations(true, false)),
        Tool::new(
            "find_files",
            "Fuzzy-find workspace files by path: paths ranked by score (best first) with the matched \
             character positions (indices). Words separated by spaces must all match. limit defaults to 50 \
             (max 1000). Files policy withholds are counted in withheld.",
            schema_for_type::<FindFilesParams>(),
        )
        .with_output_schema::<FindFilesResult>()
        .with_annotations(annotations(true, false)),
    ];
    all.into_iter()
        .filter(|t| IMPLEMENTED_TOOLS.contains(&t.name.as_ref()))
        .collect()
}

fn error_result(e: &ToolError) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(e.to_json())])
}

impl ServerHandler for CodeSpaceServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("codespace", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(tool_list()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        // Over HTTP the caller is the client the gate authenticated for this request.
        let session =
            crate::http::request_session(&context).unwrap_or_else(|| self.session.clone());
        let name = request.name.as_ref();
        if !IMPLEMENTED_TOOLS.contains(&name) {
            return Err(McpError::invalid_params(
                format!("tool not found: {name}"),
                None,
            ));
        }
        let args = request
            .arguments
            .map(serde_json::Value::Object)
            .unwrap_or(serde_json::Value::Null);
        let call = match ToolCall::parse(name, &args) {
            Ok(c) => c,
            Err(CallParseError::UnknownTool(t)) => {
                return Err(McpError::invalid_params(
                    format!("tool not found: {t}"),
                    None,
                ));
            }
            Err(CallParseError::InvalidArguments(msg)) => {
                let e = ToolError::new(
                    ErrorCode::InvalidArguments,
                    format!("invalid arguments for {name}: {msg}"),
                );
                return Ok(error_result(&e).into());
            }
        };
        let started = std::time::Instant::now();
        let out = match crate::long_call::wait_of(&call) {
            // A long poll reports progress and stops waiting when cancelled.
            Some(wait_ms) => {
                let gateway = Arc::clone(&self.gateway);
                match crate::long_call::run(gateway, session, call, wait_ms, &context).await {
                    Some(out) => out,
                    None => return Err(McpError::internal_error("request cancelled", None)),
                }
            }
            None => self.gateway.call(&session, call).await,
        };
        tracing::debug!(
            tool = name,
            us = started.elapsed().as_micros() as u64,
            ok = out.is_ok(),
            "tool call"
        );
        Ok(match out {
            Ok(v) => CallToolResult::structured(v).into(),
            Err(e) => error_result(&e).into(),
        })
    }
}
