//! The rmcp server: tools/list from the wire types, and one `call_tool` that parses the
//! arguments, hands the call to the gateway and encodes the result or the ErrorBody.

use codespace_engine::gateway::approvals::InBandChannel;
use codespace_engine::wire::{
    ApplyPatchParams, ApplyPatchResult, CallParseError, ExecCommandParams, FindParams, FindResult,
    OperationStatusParams, ProcessIdParams, ProcessResizeParams, ReadParams, ReadProcessParams,
    ReadResult, WorkspaceInfoParams, WriteStdinParams,
};
use codespace_engine::wire::{
    ApprovalCreateParams, ApprovalResolveParams, ApprovalStateResult, OperationResumeParams,
    OperationResumeResult,
};
use codespace_engine::wire::{
    ExecCommandResult, ProcessAckResult, ProcessResizeResult, ProcessStatusResult,
    ReadProcessResult,
};
use codespace_engine::wire::{
    FindFilesParams, FindFilesResult, GrepParams, GrepResult, ReadManyFile, ToolResult,
};
use codespace_engine::wire::{ProcessListParams, ProcessListResult};
use codespace_engine::{
    ErrorCode, Gateway, Session, TOOLS, ToolCall, ToolError, ToolName, ToolSpec, with_trace_parent,
};
use rmcp::handler::server::common::schema_for_type;
use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock,
    Implementation, ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerCapabilities,
    ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use std::borrow::Cow;
use std::sync::Arc;

/// The transport name in `Session.transport`, decision rows and `workspace_info.transports`.
pub const HTTP_TRANSPORT: &str = "streamable-http";

/// The newest MCP revision served: 2026-07-28 (stateless, per-request `_meta`) beside every
/// revision with an `initialize` handshake (2024-11-05 … 2025-11-25), each client getting the
/// one it asks for. rmcp routes by the request: `initialize` opens the session era, a request
/// whose `_meta` carries the 2026 protocol fields is served statelessly.
pub const NEWEST_PROTOCOL_VERSION: ProtocolVersion = ProtocolVersion::V_2026_07_28;

/// The authenticated caller of one HTTP request, set by the gate in the request extensions.
#[derive(Debug, Clone)]
pub struct HttpClient(pub Arc<str>);

/// The person behind an OIDC bearer token of one HTTP request, set by the gate beside
/// [`HttpClient`].
#[derive(Debug, Clone)]
pub struct HttpUser(pub codespace_engine::policy::user::UserFacts);

/// The session of an HTTP tool call: the client the gate authenticated (and the person, for an
/// OIDC token), when the request came over HTTP; `None` on other transports.
pub fn request_session(ctx: &RequestContext<RoleServer>) -> Option<Session> {
    let parts = ctx.extensions.get::<axum::http::request::Parts>()?;
    let client = parts.extensions.get::<HttpClient>()?;
    Some(Session {
        client: client.0.to_string(),
        transport: HTTP_TRANSPORT.to_string(),
        user: parts.extensions.get::<HttpUser>().map(|u| u.0.clone()),
    })
}

/// True for a held patch or command (`APPROVAL_REQUIRED` with its hold's id): the human is
/// asked in-band when the client can.
fn held(tool: &str, e: &ToolError) -> bool {
    e.code == ErrorCode::ApprovalRequired
        && e.approval_id.is_some()
        && matches!(tool, "apply_patch" | "exec_command")
}

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

    /// A long poll: the call, then for a held one the in-band question and the resume, each
    /// waited with progress; `None` when the request was cancelled.
    async fn long_poll(
        &self,
        name: &str,
        session: &Session,
        call: ToolCall,
        wait_ms: u64,
        context: &RequestContext<RoleServer>,
    ) -> Option<Result<ToolResult, ToolError>> {
        let detach = matches!(call, ToolCall::ExecCommand(_));
        let (gateway, s) = (Arc::clone(&self.gateway), session.clone());
        let trace = trace_parent(context);
        let (tool, tp) = (name.to_string(), trace.clone());
        let work = with_trace_parent(trace.clone(), async move {
            codespace_engine::telemetry::observe_call(&tool, tp, gateway.call(&s, call)).await
        });
        let e = match crate::long_call::run(work, detach, wait_ms, context).await? {
            // A 2026 client is asked through `input_required` instead (no server requests).
            Err(e) if held(name, &e) && !crate::mrtr::is_2026(context) => e,
            other => return Some(other),
        };
        let Some(answer) = crate::elicit::decision(&self.gateway, session, context, &e).await
        else {
            return (!context.ct.is_cancelled()).then_some(Err(e));
        };
        let id = e.approval_id.clone().unwrap_or_default();
        let (gateway, s) = (Arc::clone(&self.gateway), session.clone());
        let work = with_trace_parent(trace, async move {
            gateway
                .answer_in_band(&s, &id, answer, InBandChannel::Elicitation)
                .await
        });
        crate::long_call::run(work, detach, wait_ms, context).await
    }
}

/// The W3C trace context of a request: the HTTP `traceparent` header, else the request's
/// `_meta.traceparent` (SEP-414); only a well-formed value, which goes into its decision rows.
fn trace_parent(ctx: &RequestContext<RoleServer>) -> Option<Arc<str>> {
    let header = ctx
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|p| p.headers.get("traceparent"))
        .and_then(|v| v.to_str().ok())
        .and_then(codespace_engine::w3c_trace_parent);
    header
        .or_else(|| {
            ctx.meta
                .get_traceparent()
                .and_then(codespace_engine::w3c_trace_parent)
        })
        .map(Arc::from)
}

/// How long a 2026-07-28 client or gateway may reuse `tools/list` (`ttlMs`): the list is fixed
/// for the life of the server process (nothing of it reloads).
pub const TOOLS_LIST_TTL_MS: u64 = 5 * 60 * 1000;

/// Who may cache `tools/list` (`cacheScope`). Its hints depend on the workspaces' network
/// (`openWorldHint`): behind bearer tokens (configured clients) that is `private`, never served
/// by a shared cache to a caller the gate did not admit; without clients (stdio, loopback) the
/// one user sees one list, `public`.
fn tools_cache_scope(gateway: &Gateway) -> CacheScope {
    if gateway.config().clients.is_empty() {
        CacheScope::Public
    } else {
        CacheScope::Private
    }
}

impl CodeSpaceServer {
    /// The retry of an `input_required` hold (MCP 2026-07-28): the `requestState` opened for
    /// this caller and call, the answer decided over channel `mrtr`, a grant run once (waited
    /// like a long poll when the call is one); `None` when the request was cancelled.
    async fn mrtr_retry(
        &self,
        request: (&str, &serde_json::Value, &str),
        responses: Option<&rmcp::model::InputResponses>,
        session: &Session,
        call: &ToolCall,
        context: &RequestContext<RoleServer>,
    ) -> Option<Result<ToolResult, ToolError>> {
        let (name, args, state) = request;
        let id = match crate::mrtr::open(session, name, args, state) {
            Ok(id) => id,
            Err(e) => return Some(Err(e)),
        };
        let Some(answer) = crate::mrtr::decision(responses) else {
            return Some(Err(crate::mrtr::still_pending(&id)));
        };
        let (gateway, s) = (Arc::clone(&self.gateway), session.clone());
        let work = async move {
            gateway
                .answer_in_band(&s, &id, answer, InBandChannel::Mrtr)
                .await
        };
        match crate::long_call::wait_of(call) {
            Some(wait_ms) => {
                let detach = matches!(call, ToolCall::ExecCommand(_));
                crate::long_call::run(work, detach, wait_ms, context).await
            }
            None => Some(work.await),
        }
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

/// What `read` returns: one file's [`ReadResult`], or `{files: [...]}` for `paths`.
fn read_output_schema() -> Arc<rmcp::model::JsonObject> {
    let mut one = (*schema_for_type::<ReadResult>()).clone();
    let mut root = rmcp::model::JsonObject::new();
    for key in ["$schema", "$defs"] {
        if let Some(v) = one.remove(key) {
            root.insert(key.into(), v);
        }
    }
    one.remove("title");
    root.insert("type".into(), "object".into());
    root.insert(
        "anyOf".into(),
        serde_json::json!([one, {
            "type": "object",
            "properties": {
                "files": {
                    "type": "array",
                    "description": "With `paths`: one entry per path, in order: that file's read result, or {path, error: {code, message}}.",
                    "items": {"type": "object", "required": ["path"]},
                },
            },
            "required": ["files"],
        }]),
    );
    Arc::new(root)
}

/// What `operation_status` returns (built as JSON by the engine's operations module).
fn operation_status_output_schema() -> Arc<rmcp::model::JsonObject> {
    schema_obj(serde_json::json!({
        "type": "object",
        "properties": {
            "operation_id": {"type": "string"},
            "status": {"type": "string", "description": "running, or the final status (succeeded, failed, unknown, ...)"},
            "replayed": {"type": "boolean"},
            "kind": {"type": "string"},
            "tool": {"type": "string"},
            "workspace_id": {"type": "string"},
            "operation_key": {"type": "string"},
            "created_at": {"type": "integer", "description": "Unix seconds"},
            "finished_at": {"type": "integer", "description": "Unix seconds"},
            "files": {"type": "array"},
            "changes": {"type": "array"},
            "process_id": {"type": "string"},
            "error": {"type": "object"},
            "events": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "at": {"type": "string"},
                        "name": {"type": "string"},
                        "status": {"type": "string"},
                        "reason": {"type": "string"},
                    },
                    "required": ["at", "name"],
                },
            },
        },
        "required": ["operation_id", "status", "kind", "tool", "workspace_id", "created_at", "events"],
    }))
}

/// Every tool of the table with its description and schemas, title and hints.
pub fn tool_list() -> Vec<Tool> {
    TOOLS
        .iter()
        .map(|spec| finish_tool(wire_tool(spec.name), spec))
        .collect()
}

/// The description and the input/output schemas of a tool (an exhaustive match: a new tool in
/// the engine's table does not compile until it is described here).
fn wire_tool(tool: ToolName) -> Tool {
    let name = tool.as_str();
    match tool {
        ToolName::WorkspaceInfo => Tool::new(
            name,
                "Server identity and, with a workspace_id, that workspace's effective execution contract: \
                 permissions and availability as decided by policy, limits, serialization, isolation, network. \
                 Calls no model and reads no files; workspace ids are not credentials.",
                schema_for_type::<WorkspaceInfoParams>(),
            )
            .with_raw_output_schema(workspace_info_output_schema()),
        ToolName::Read => Tool::new(
            name,
                "Read a workspace-relative regular file. Returns a window of its bytes (offset/limit, default and \
                 max 1 MiB, or the first/last N lines with head_lines/tail_lines) and the sha256 version of the \
                 whole file. Use next_offset to continue. encoding \"text\" refuses non-UTF-8 bytes with \
                 BINARY_FILE, \"base64\" returns the bytes exactly; omitted, invalid UTF-8 is replaced \
                 (content_lossy), a file holding a NUL byte is BINARY_FILE (size and sha256), and a whole \
                 PNG/JPEG/GIF/WebP image (up to 3 MiB, else FILE_TOO_LARGE) comes back as an image content \
                 item with mime_type set and content empty. paths (up to 64) reads several files: {files: [...]}, each a result or its own \
                 error. Symlinks, special files and paths outside the workspace are refused.",
                schema_for_type::<ReadParams>(),
            )
            .with_raw_output_schema(read_output_schema()),
        ToolName::Find => Tool::new(
            name,
                "List workspace-relative file paths (sorted, symlinks listed but never followed), optionally \
                 under one directory (path; max_depth then counts from it) and filtered by a glob, paged by offset/limit (default and max 10000). incomplete means the walk hit \
                 a cap; restart at offset 0 when listing_version changes. Paths policy withholds are counted in \
                 withheld. type (file|dir|any), max_depth, exclude globs, respect_gitignore (also skips hidden \
                 entries) and details (kind, size, mtime per entry) refine the listing.",
                schema_for_type::<FindParams>(),
            )
            .with_output_schema::<FindResult>(),
        ToolName::ApplyPatch => Tool::new(
            name,
                "Apply a V4A patch (*** Begin Patch / *** Add File / *** Update File / *** Delete File / \
                 *** Move to / @@ chunks / *** End Patch) to workspace files, all or nothing: the whole patch is \
                 parsed, planned and authorized before any write, and any failure restores every touched file. \
                 expected_versions (path -> sha256:<hex> or \"absent\") guards against stale edits \
                 (VERSION_CONFLICT). check_only verifies without writing and returns diff, the unified diff it \
                 would apply (files you may not read named as withheld). operation_key makes retries safe.",
                schema_for_type::<ApplyPatchParams>(),
            )
            .with_output_schema::<ApplyPatchResult>(),
        ToolName::OperationStatus => Tool::new(
            name,
                "Look up a recorded operation (apply_patch, exec_command, write_stdin, terminate_process) by \
                 exactly one of operation_id or operation_key. Never re-runs anything.",
                schema_for_type::<OperationStatusParams>(),
            )
            .with_raw_output_schema(operation_status_output_schema()),
        ToolName::ExecCommand => Tool::new(
            name,
                "Start a managed process: exact argv (no shell), cwd = workspace root (or cwd, workspace-relative), \
                 cleared environment plus env (each name decided by policy), inside the command sandbox that policy \
                 shapes. Returns a process_id that outlives this request. tty gives a 24x80 terminal. yield_ms waits \
                 for early output or exit. A live foreground process holds the workspace's mutation lease \
                 (WORKSPACE_BUSY for other commands and patches); background: true starts a service that does not. \
                 stderr: \"separate\" keeps stderr apart with its own cursor.",
                schema_for_type::<ExecCommandParams>(),
            )
            .with_output_schema::<ExecCommandResult>(),
        ToolName::WriteStdin => Tool::new(
            name,
                "Write text to a managed process's stdin (or terminal).",
                schema_for_type::<WriteStdinParams>(),
            )
            .with_output_schema::<ProcessAckResult>(),
        ToolName::ReadProcess => Tool::new(
            name,
                "Read a process's combined output from a byte cursor; wait_ms long-polls for new output or \
                 exit. eof means output collection finished and the cursor is at the end (not an exit status); \
                 output_lost means bytes before retained_from were dropped from the bounded buffer.",
                schema_for_type::<ReadProcessParams>(),
            )
            .with_output_schema::<ReadProcessResult>(),
        ToolName::ProcessStatus => Tool::new(
            name,
                "State of a managed process: running/exited, exit_code, termination \
                 (exited/signaled/timeout/terminated/unknown), output totals.",
                schema_for_type::<ProcessIdParams>(),
            )
            .with_output_schema::<ProcessStatusResult>(),
        ToolName::ProcessResize => Tool::new(
            name,
                "Resize a managed process's terminal (tty processes only).",
                schema_for_type::<ProcessResizeParams>(),
            )
            .with_output_schema::<ProcessResizeResult>(),
        ToolName::TerminateProcess => Tool::new(
            name,
                "Terminate a managed process and its whole process group (TERM, then KILL after a grace period).",
                schema_for_type::<ProcessIdParams>(),
            )
            .with_output_schema::<ProcessAckResult>(),
        ToolName::ApprovalCreate => Tool::new(
            name,
            "Ask for a confirmation hold on an apply_patch or exec_command call (tool + the same arguments \
             that tool takes). Policy is checked first (UNAUTHORIZED creates nothing); an active hold for the \
             same call is reused. A hold is a pause for a human, never a grant. Returns approval_id and state.",
            schema_for_type::<ApprovalCreateParams>(),
        )
        .with_output_schema::<ApprovalStateResult>(),
        ToolName::ApprovalResolve => Tool::new(
            name,
            "Answer a pending hold: decision grant or deny. Policy decides who may answer over this tool \
             (an operator may require a human channel such as the codespace approvals CLI). Deny is final \
             and scrubs the held arguments.",
            schema_for_type::<ApprovalResolveParams>(),
        )
        .with_output_schema::<ApprovalStateResult>(),
        ToolName::OperationResume => Tool::new(
            name,
            "Run a granted hold exactly once: re-decided under the current policies and re-checked against \
             the files as they were when the hold was asked (VERSION_CONFLICT if they changed). Returns the \
             apply_patch or exec_command result; a repeat returns the stored result (replayed). An \
             interrupted command resume is never started again (APPROVAL_AMBIGUOUS).",
            schema_for_type::<OperationResumeParams>(),
        )
        .with_output_schema::<OperationResumeResult>(),
        ToolName::Grep => Tool::new(
            name,
                "Search file contents for a literal string (or a regex with regex: true; case_insensitive, \
                 context_lines <= 10). Returns matching lines (path, line_number, line capped at 500 characters, \
                 before/after context) in path then line order, paged by max_matches (default 200, max 10000) \
                 and offset/next_offset; per-file counts; skipped binary, too large and unreadable files. \
                 Respects .gitignore and skips hidden files unless respect_gitignore is false. glob and path \
                 narrow the search. Files policy withholds are never opened and are counted in withheld.",
                schema_for_type::<GrepParams>(),
            )
            .with_output_schema::<GrepResult>(),
        ToolName::FindFiles => Tool::new(
            name,
                "Fuzzy-find workspace files by path: paths ranked by score (best first) with the matched \
                 character positions (indices). Words separated by spaces must all match. limit defaults to 50 \
                 (max 1000). withheld counts every file of the workspace policy withholds, whatever the query.",
                schema_for_type::<FindFilesParams>(),
            )
            .with_output_schema::<FindFilesResult>(),
        // The operation ledger (issue 31).
        ToolName::OperationDiff => Tool::new(
            name,
                "The unified diff of one of your recorded operations (operation_id): an apply_patch's \
                 before/after per file; a command's changed files (best effort, no content). Paged by lines \
                 (offset/limit, default 2000, max 10000; next_offset continues). Each path is decided by \
                 policy like read; files policy withholds, or whose content is never stored (secrets), are \
                 named as withheld and never shown.",
                schema_for_type::<codespace_engine::wire::OperationDiffParams>(),
            )
            .with_output_schema::<codespace_engine::wire::OperationDiffResult>(),
        ToolName::OperationRevert => Tool::new(
            name,
                "Revert one of your applied apply_patch operations (operation_id) as a new, all-or-nothing \
                 apply_patch of the reverse change, decided (and held for approval) exactly like that patch. \
                 Every file must still be at the version the operation left (else VERSION_CONFLICT naming \
                 the files); a withheld (secret) file cannot be reverted. operation_key makes retries safe. \
                 Returns the new apply_patch result.",
                schema_for_type::<codespace_engine::wire::OperationRevertParams>(),
            )
            .with_output_schema::<ApplyPatchResult>(),
        ToolName::ProcessList => Tool::new(
            name,
                "List your own process handles (running, or exited and not yet evicted), newest first: \
                 process_id, workspace_id, state, the command line (first 200 characters), started_at (Unix \
                 seconds), tty, background. Another client's processes are never listed. With workspace_id, \
                 only that workspace (refused like any call); without, every workspace policy lets you list in.",
                schema_for_type::<ProcessListParams>(),
            )
            .with_output_schema::<ProcessListResult>(),
        ToolName::WriteFile => Tool::new(
            name,
                "Write a whole workspace file with exact bytes: mode \"replace\" (default; the file must exist) \
                 makes its content exactly content, \"append\" adds content after its last byte, \"create\" \
                 makes a new file (ADD_FILE_EXISTS if anything is there). No line ending is added or \
                 converted; encoding \"base64\" writes any bytes. Runs as a one-file patch: decided like \
                 apply_patch on the path, all or nothing, expected_version (sha256:<hex>) guards against \
                 stale writes (VERSION_CONFLICT), check_only returns the diff without writing, operation_key \
                 makes retries safe, operation_diff/operation_revert work on it. Returns the apply_patch result.",
                schema_for_type::<codespace_engine::wire::WriteFileParams>(),
            )
            .with_output_schema::<ApplyPatchResult>(),
    }
}

/// Gives a tool its title and hints from the engine's table and makes its schemas plain JSON
/// Schema.
fn finish_tool(mut tool: Tool, spec: &ToolSpec) -> Tool {
    tool.title = Some(spec.title.to_string());
    let mut a = ToolAnnotations::default();
    a.title = Some(spec.title.to_string());
    a.read_only_hint = Some(spec.read_only);
    a.destructive_hint = Some(spec.destructive);
    a.idempotent_hint = Some(spec.idempotent);
    a.open_world_hint = Some(spec.open_world);
    tool.annotations = Some(a);
    tool.input_schema = Arc::new(plain_schema_object(tool.input_schema.as_ref()));
    if let Some(out) = &tool.output_schema {
        tool.output_schema = Some(Arc::new(with_error_branch(plain_schema_object(
            out.as_ref(),
        ))));
    }
    tool
}

fn plain_schema_object(schema: &rmcp::model::JsonObject) -> rmcp::model::JsonObject {
    let mut v = serde_json::Value::Object(schema.clone());
    plain_schema(&mut v);
    match v {
        serde_json::Value::Object(m) => m,
        _ => schema.clone(),
    }
}

/// Formats schemars emits for Rust integer and float types; they are not JSON Schema formats
/// (the bounds stay as `minimum`/`maximum`), and strict validators reject unknown formats.
const RUST_NUMBER_FORMATS: &[&str] = &[
    "uint", "uint8", "uint16", "uint32", "uint64", "int", "int8", "int16", "int32", "int64",
    "float", "double",
];

/// Keywords that belong to the non-null branch when a nullable type array becomes `anyOf`.
const TYPED_KEYWORDS: &[&str] = &[
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "pattern",
    "format",
    "items",
    "minItems",
    "maxItems",
    "uniqueItems",
    "properties",
    "required",
    "additionalProperties",
    "enum",
];

/// Rewrites a schema in place: drops Rust number formats and turns `"type": [T, "null"]` into
/// `anyOf: [{type: T, …}, {type: "null"}]`, which every client's validator understands.
fn plain_schema(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(m) => {
            if m.get("format")
                .and_then(|f| f.as_str())
                .is_some_and(|f| RUST_NUMBER_FORMATS.contains(&f))
            {
                m.remove("format");
            }
            let nullable_pair = match m.get("type") {
                Some(serde_json::Value::Array(types)) if types.len() == 2 => {
                    let null = serde_json::Value::from("null");
                    if types.contains(&null) {
                        types.iter().find(|t| **t != null).cloned()
                    } else {
                        None
                    }
                }
                _ => None,
            };
            if let Some(other) = nullable_pair {
                m.remove("type");
                let mut branch = serde_json::Map::new();
                branch.insert("type".into(), other);
                for key in TYPED_KEYWORDS {
                    if let Some(val) = m.remove(*key) {
                        branch.insert((*key).into(), val);
                    }
                }
                if let Some(serde_json::Value::Array(values)) = branch.get_mut("enum") {
                    values.retain(|x| !x.is_null());
                }
                m.insert(
                    "anyOf".into(),
                    serde_json::json!([branch, {"type": "null"}]),
                );
            }
            for child in m.values_mut() {
                plain_schema(child);
            }
        }
        serde_json::Value::Array(items) => {
            for child in items {
                plain_schema(child);
            }
        }
        _ => {}
    }
}

/// The success result of a tool: its typed result serialized as `structuredContent` (the
/// engine's result types leave optional fields out rather than sending null).
pub(crate) fn tool_result(mut r: ToolResult) -> CallToolResult {
    let images = take_images(&mut r);
    match result_value(r) {
        Ok(v) => {
            let mut out = structured_result(v);
            // An image read whole: its bytes as image content items after the JSON text item
            // (in `paths` order), once; the JSON says `mime_type` with an empty `content`.
            out.content.extend(images);
            out
        }
        Err(e) => error_result(&ToolError::new(ErrorCode::Internal, e.to_string())),
    }
}

/// The image content items of a read (one file, or each image of `paths`), taken out of it.
fn take_images(r: &mut ToolResult) -> Vec<ContentBlock> {
    use base64::Engine as _;
    let image = |read: &mut ReadResult| {
        let data = read.image.take()?;
        let mime = read.mime_type.clone()?;
        Some(ContentBlock::image(
            base64::engine::general_purpose::STANDARD.encode(data),
            mime,
        ))
    };
    match r {
        ToolResult::Read(read) => image(read).into_iter().collect(),
        ToolResult::ReadMany(many) => many
            .files
            .iter_mut()
            .filter_map(|f| match f {
                ReadManyFile::Read(read) => image(read),
                ReadManyFile::Failed { .. } => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// The JSON of a tool result. A read's content (up to a MiB per file) moves into the value
/// instead of being copied: it is serialized empty and then put in its place.
fn result_value(r: ToolResult) -> Result<serde_json::Value, serde_json::Error> {
    fn read_value(mut r: ReadResult) -> Result<serde_json::Value, serde_json::Error> {
        let content = std::mem::take(&mut r.content);
        let mut v = serde_json::to_value(&r)?;
        if let Some(slot) = v.get_mut("content") {
            *slot = serde_json::Value::String(content);
        }
        Ok(v)
    }
    match r {
        ToolResult::Read(read) => read_value(read),
        ToolResult::ReadMany(many) => {
            let files = many
                .files
                .into_iter()
                .map(|f| match f {
                    ReadManyFile::Read(read) => read_value(read),
                    failed => serde_json::to_value(&failed),
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok(serde_json::json!({ "files": files }))
        }
        other => serde_json::to_value(&other),
    }
}

/// The success result: `structuredContent` and the same JSON as one text item, as
/// `CallToolResult::structured` makes it, with the text serialized straight into a buffer
/// (`structured` formats through `Display`, several times slower on a large result).
fn structured_result(v: serde_json::Value) -> CallToolResult {
    let text = serde_json::to_string(&v).unwrap_or_else(|_| v.to_string());
    let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
    r.structured_content = Some(v);
    r
}

/// A tool error: the ErrorBody as one text item and, for SDKs that read only structured
/// results, as `structuredContent` too (every output schema admits it: [`with_error_branch`]).
pub(crate) fn error_result(e: &ToolError) -> CallToolResult {
    let mut r = CallToolResult::error(vec![ContentBlock::text(e.to_json())]);
    r.structured_content = serde_json::to_value(e).ok();
    r
}

/// The ErrorBody's schema: what `structuredContent` holds when `isError` is true.
fn error_body_schema() -> serde_json::Value {
    serde_json::json!({
        "type": "object",
        "description": "The ErrorBody of a failed call (isError: true).",
        "properties": {
            "code": {"type": "string"},
            "message": {"type": "string"},
            "operation_id": {"type": "string"},
            "approval_id": {"type": "string"},
            "decision_id": {"type": "string"},
            "policy_ids": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["code", "message"],
    })
}

/// A tool's output schema made to admit its error results too: `anyOf` the result's schema and
/// the ErrorBody's, with the definitions the result's schema refers to kept at the root (where
/// its `$ref`s point) and `"type": "object"` kept at the root (the MCP rule for output schemas).
fn with_error_branch(mut result: rmcp::model::JsonObject) -> rmcp::model::JsonObject {
    let mut root = rmcp::model::JsonObject::new();
    for key in ["$schema", "title", "definitions"] {
        if let Some(v) = result.remove(key) {
            root.insert(key.into(), v);
        }
    }
    let mut defs = match result.remove("$defs") {
        Some(serde_json::Value::Object(m)) => m,
        _ => serde_json::Map::new(),
    };
    defs.insert("ErrorBody".into(), error_body_schema());
    root.insert("type".into(), "object".into());
    root.insert(
        "anyOf".into(),
        serde_json::json!([result, {"$ref": "#/$defs/ErrorBody"}]),
    );
    root.insert("$defs".into(), serde_json::Value::Object(defs));
    root
}

impl ServerHandler for CodeSpaceServer {
    fn get_info(&self) -> ServerConfig {
        let mut caps = ServerCapabilities::builder()
            .enable_tools()
            .enable_tasks()
            .enable_resources()
            .build();
        // Operator skills (issue 31): prompts and the skills extension (SEP-2640) only when
        // `skills_dir` is configured.
        if crate::skills::configured(&self.gateway) {
            caps.prompts = Some(rmcp::model::PromptsCapability::default());
            caps.extensions.get_or_insert_with(Default::default).insert(
                rmcp::model::SKILLS_EXTENSION_ID.to_string(),
                Default::default(),
            );
        }
        ServerConfig::new(caps)
            .with_server_info(
                Implementation::new("codespace", env!("CARGO_PKG_VERSION")).with_title("CodeSpace"),
            )
            .with_instructions(INSTRUCTIONS)
    }

    async fn initialize(
        &self,
        request: rmcp::model::InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::InitializeResult, McpError> {
        context.peer.set_peer_info(request.clone());
        let mut result = self.negotiate_initialize(&request)?;
        // Tasks are a 2026-07-28 extension: a session that initializes does not see them.
        crate::tasks::hide_from_legacy(&mut result.capabilities);
        Ok(result)
    }

    async fn get_task(
        &self,
        request: rmcp::model::GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetTaskResult, McpError> {
        let session = request_session(&context).unwrap_or_else(|| self.session.clone());
        crate::tasks::get(&self.gateway, &session, &request.task_id).await
    }

    async fn cancel_task(
        &self,
        request: rmcp::model::CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let session = request_session(&context).unwrap_or_else(|| self.session.clone());
        crate::tasks::cancel(&self.gateway, &session, &request.task_id).await
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&NEWEST_PROTOCOL_VERSION))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let mut tools = tool_list();
        // A command reaches other hosts only where some workspace's network is not restricted.
        let any_network = self
            .gateway
            .config()
            .workspaces
            .values()
            .any(|w| w.network != codespace_engine::config::Network::Restricted);
        if !any_network {
            for tool in &mut tools {
                if let Some(a) = tool.annotations.as_mut() {
                    a.open_world_hint = Some(false);
                }
            }
        }
        let list = ListToolsResult::with_all_items(tools);
        // Cache hints are a 2026-07-28 field; earlier revisions get the list as before.
        let modern = context
            .protocol_version()
            .is_some_and(|v| v.as_str() >= NEWEST_PROTOCOL_VERSION.as_str());
        Ok(if modern {
            list.with_ttl_ms(TOOLS_LIST_TTL_MS)
                .with_cache_scope(tools_cache_scope(&self.gateway))
        } else {
            list
        })
    }

    // Resources (issue 31): each list and read is a tool call through the gateway
    // (crate::resources).
    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourcesResult, McpError> {
        let session = request_session(&context).unwrap_or_else(|| self.session.clone());
        let cursor = request.as_ref().and_then(|r| r.cursor.as_deref());
        crate::resources::list(&self.gateway, &session, cursor).await
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourceTemplatesResult, McpError> {
        Ok(crate::resources::templates())
    }

    async fn read_resource(
        &self,
        request: rmcp::model::ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ReadResourceResponse, McpError> {
        let session = request_session(&context).unwrap_or_else(|| self.session.clone());
        crate::resources::read(&self.gateway, &session, &request.uri)
            .await
            .map(Into::into)
    }

    // Operator skills (issue 31; crate::skills): every entry and read a `read_skill` decision.
    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListPromptsResult, McpError> {
        if !crate::skills::configured(&self.gateway) {
            return Err(McpError::method_not_found::<
                rmcp::model::ListPromptsRequestMethod,
            >());
        }
        let session = request_session(&context).unwrap_or_else(|| self.session.clone());
        let cursor = request.as_ref().and_then(|r| r.cursor.as_deref());
        crate::skills::list_prompts(&self.gateway, &session, cursor).await
    }

    async fn get_prompt(
        &self,
        request: rmcp::model::GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetPromptResponse, McpError> {
        let session = request_session(&context).unwrap_or_else(|| self.session.clone());
        crate::skills::get_prompt(&self.gateway, &session, &request.name)
            .await
            .map(Into::into)
    }

    async fn list_skills(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListSkillsResult, McpError> {
        let session = request_session(&context).unwrap_or_else(|| self.session.clone());
        let cursor = request.as_ref().and_then(|r| r.cursor.as_deref());
        crate::skills::list_skills(&self.gateway, &session, cursor).await
    }

    async fn get_skill(
        &self,
        request: rmcp::model::GetSkillRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetSkillResult, McpError> {
        let session = request_session(&context).unwrap_or_else(|| self.session.clone());
        crate::skills::get_skill(&self.gateway, &session, &request.uri).await
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        // Over HTTP the caller is the client the gate authenticated for this request.
        let session = request_session(&context).unwrap_or_else(|| self.session.clone());
        let name = request.name.as_ref();
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
        let trace = trace_parent(&context);
        let era_2026 = crate::mrtr::is_2026(&context);
        if era_2026 && let Some(state) = request.request_state.as_deref() {
            let out = self
                .mrtr_retry(
                    (name, &args, state),
                    request.input_responses.as_ref(),
                    &session,
                    &call,
                    &context,
                )
                .await;
            return match out {
                Some(Ok(r)) => Ok(tool_result(r).into()),
                Some(Err(e)) => Ok(error_result(&e).into()),
                None => Err(McpError::internal_error("request cancelled", None)),
            };
        }
        if matches!(call, ToolCall::ExecCommand(_) | ToolCall::ApplyPatch(_))
            && crate::tasks::requested(&context)
        {
            let out = match crate::tasks::start(&self.gateway, &session, call).await {
                crate::tasks::Started::Task(t) => return Ok(t.into()),
                crate::tasks::Started::Plain(out) => out,
            };
            return Ok(self.finish_2026(name, &args, &session, out, true));
        }
        let out = match crate::long_call::wait_of(&call) {
            // A long poll reports progress and stops waiting when cancelled; a held one is asked
            // in-band like any other, and its resume waits the same way.
            Some(wait_ms) => match self
                .long_poll(name, &session, call, wait_ms, &context)
                .await
            {
                Some(out) => out,
                None => return Err(McpError::internal_error("request cancelled", None)),
            },
            None => {
                let tp = trace.clone();
                with_trace_parent(trace, async {
                    let call = self.gateway.call(&session, call);
                    match codespace_engine::telemetry::observe_call(name, tp, call).await {
                        // A held call: ask the human in-band when the client can (elicitation).
                        Err(e) if held(name, &e) && !era_2026 => {
                            crate::elicit::ask(&self.gateway, &session, &context, e).await
                        }
                        other => other,
                    }
                })
                .await
            }
        };
        tracing::debug!(
            tool = name,
            us = started.elapsed().as_micros() as u64,
            ok = out.is_ok(),
            "tool call"
        );
        Ok(self.finish_2026(name, &args, &session, out, era_2026))
    }
}

impl CodeSpaceServer {
    /// The response of a call: its result or ErrorBody, or for a held call of a 2026 client
    /// the hold's `input_required` ([`crate::mrtr`]).
    fn finish_2026(
        &self,
        name: &str,
        args: &serde_json::Value,
        session: &Session,
        out: Result<ToolResult, ToolError>,
        era_2026: bool,
    ) -> CallToolResponse {
        match out {
            Ok(r) => tool_result(r).into(),
            Err(e) => {
                if era_2026
                    && held(name, &e)
                    && let Some(ask) =
                        crate::mrtr::input_required(&self.gateway, session, name, args, &e)
                {
                    return ask.into();
                }
                error_result(&e).into()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The read's content moved into the value makes the same JSON as serializing it whole,
    /// for one file and for `paths`.
    #[test]
    fn a_moved_read_content_makes_the_same_json() {
        let read = ReadResult {
            path: "a.txt".into(),
            content: "x".repeat(5000),
            encoding: None,
            content_lossy: false,
            version: "sha256:00".into(),
            truncated: true,
            offset: Some(3),
            next_offset: Some(5003),
            byte_count: 5000,
            mime_type: None,
            image: None,
        };
        let one = ToolResult::Read(read.clone());
        assert_eq!(
            result_value(one.clone()).unwrap(),
            serde_json::to_value(&one).unwrap()
        );
        let many = ToolResult::ReadMany(codespace_engine::wire::ReadManyResult {
            files: vec![
                ReadManyFile::Read(read),
                ReadManyFile::Failed {
                    path: ".env".into(),
                    error: ToolError::new(ErrorCode::Unauthorized, "no"),
                },
            ],
        });
        assert_eq!(
            result_value(many.clone()).unwrap(),
            serde_json::to_value(&many).unwrap()
        );
    }

    #[test]
    fn the_success_result_is_byte_for_byte_what_rmcp_structured_makes() {
        let content: String = (0..400)
            .map(|i| format!("line {i:05} \"quoted\" \\ tab\t é 🦀\n"))
            .collect();
        let v = serde_json::json!({
            "path": "dir/file.txt",
            "content": content,
            "content_lossy": false,
            "version": "sha256:00ff",
            "truncated": true,
            "next_offset": 10240,
            "byte_count": 10240,
            "nested": {"list": [1, 2.5, null, "x"]},
        });
        let ours = serde_json::to_string(&structured_result(v.clone())).unwrap();
        let theirs = serde_json::to_string(&CallToolResult::structured(v)).unwrap();
        assert_eq!(ours, theirs);
    }
}
