//! Tasks (the MCP extension `io.modelcontextprotocol/tasks`, SEP-2663) for long non-interactive
//! jobs, mapped onto operations: one id space (task id = `operation_id`), one audit trail.
//!
//! A 2026-07-28 `tools/call` of `exec_command` (no `tty`, not `background`) or `apply_patch`
//! whose request declares the tasks extension returns a task handle. `tasks/get` reads the
//! operation through the ordinary tools, each decided by Cedar like any call: the exec's
//! `process_status` (running: `working`; exited with its output collected: `completed`, the result
//! being exactly what `read_process` from cursor 0 returns; terminated: `cancelled`; a status
//! that cannot be read: `failed`); an `apply_patch` runs to its end before the handle is returned
//! (it is bounded by the patch limits) and its task is `completed` with the tool's own result.
//! `tasks/cancel` is `terminate_process` on the exec's process. Process handles stay the
//! interactive path: a `tty` or `background` exec asked as a task is refused with
//! `INVALID_ARGUMENTS`. The extension has no `tasks/result`: a completed task's `tasks/get`
//! carries the result.

use codespace_engine::wire::{
    ExecCommandParams, OperationStatusParams, ProcessIdParams, ReadProcessParams, ToolResult,
};
use codespace_engine::{ErrorCode, Gateway, Session, ToolCall, ToolError};
use rmcp::ErrorData as McpError;
use rmcp::RoleServer;
use rmcp::model::{
    CallToolResult, CreateTaskResult, DetailedTask, GetTaskResult, JsonObject, Task, TaskPayload,
    TaskStatus,
};
use rmcp::service::RequestContext;
use std::collections::VecDeque;
use std::sync::{Mutex, OnceLock};

/// How often a client should poll `tasks/get`.
const POLL_INTERVAL_MS: u64 = 500;

/// How many finished `apply_patch` task results are kept in memory (oldest dropped first).
const KEPT_PATCH_RESULTS: usize = 256;

/// True when this `tools/call` asks for a task: a 2026-07-28 request that declares the tasks
/// extension in its client capabilities.
pub fn requested(context: &RequestContext<RoleServer>) -> bool {
    crate::mrtr::is_2026(context)
        && context
            .client_capabilities()
            .is_some_and(|c| c.supports_tasks())
}

/// Removes the tasks extension from the capabilities an `initialize` answers (2025 sessions):
/// it is a 2026-07-28 extension, advertised by `server/discover`.
pub fn hide_from_legacy(capabilities: &mut rmcp::model::ServerCapabilities) {
    if let Some(ext) = capabilities.extensions.as_mut() {
        ext.remove(rmcp::model::TASKS_EXTENSION_ID);
        if ext.is_empty() {
            capabilities.extensions = None;
        }
    }
}

/// A finished `apply_patch` task: its id, the client that asked, its result.
struct PatchTask {
    id: String,
    client: String,
    created_at: String,
    result: JsonObject,
}

fn patch_tasks() -> &'static Mutex<VecDeque<PatchTask>> {
    static TASKS: OnceLock<Mutex<VecDeque<PatchTask>>> = OnceLock::new();
    TASKS.get_or_init(|| Mutex::new(VecDeque::new()))
}

fn remember_patch(task: PatchTask) {
    if let Ok(mut kept) = patch_tasks().lock() {
        if kept.len() >= KEPT_PATCH_RESULTS {
            kept.pop_front();
        }
        kept.push_back(task);
    }
}

fn patch_task(session: &Session, id: &str) -> Option<(String, JsonObject)> {
    let kept = patch_tasks().lock().ok()?;
    kept.iter()
        .find(|t| t.id == id && t.client == session.client)
        .map(|t| (t.created_at.clone(), t.result.clone()))
}

/// Now, RFC 3339.
fn now() -> String {
    stamp(time::OffsetDateTime::now_utc())
}

fn stamp(t: time::OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// Unix seconds, RFC 3339.
fn stamp_secs(secs: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(secs)
        .map(stamp)
        .unwrap_or_else(|_| now())
}

/// The JSON object of a `tools/call` result.
fn object_of(r: &CallToolResult) -> JsonObject {
    match serde_json::to_value(r) {
        Ok(serde_json::Value::Object(m)) => m,
        _ => JsonObject::new(),
    }
}

/// What starting a call as a task gave: the task handle, or the call's outcome to answer as
/// usual (a hold, a refusal before any operation, a result without an operation id).
pub enum Started {
    /// The handle.
    Task(CreateTaskResult),
    /// Answer this as an ordinary `tools/call`.
    Plain(Result<ToolResult, ToolError>),
}

/// Starts `call` (`exec_command` or `apply_patch`) as a task for `session`.
pub async fn start(gateway: &Gateway, session: &Session, call: ToolCall) -> Started {
    match call {
        ToolCall::ExecCommand(p) => start_exec(gateway, session, p).await,
        ToolCall::ApplyPatch(_) => {
            let out = gateway.call(session, call).await;
            let id = match &out {
                Ok(ToolResult::ApplyPatch(r)) => r.operation_id.clone(),
                Err(e) => match &e.operation_id {
                    Some(id) => id.clone(),
                    None => return Started::Plain(out),
                },
                Ok(_) => return Started::Plain(out),
            };
            let result = match out {
                Ok(r) => crate::server::tool_result(r),
                Err(e) => crate::server::error_result(&e),
            };
            let created_at = now();
            remember_patch(PatchTask {
                id: id.clone(),
                client: session.client.clone(),
                created_at: created_at.clone(),
                result: object_of(&result),
            });
            let task = Task::new(id, TaskStatus::Completed, created_at.clone(), created_at)
                .with_poll_interval_ms(POLL_INTERVAL_MS);
            Started::Task(CreateTaskResult::new(task))
        }
        other => Started::Plain(gateway.call(session, other).await),
    }
}

async fn start_exec(gateway: &Gateway, session: &Session, mut p: ExecCommandParams) -> Started {
    if p.tty == Some(true) || p.background == Some(true) {
        return Started::Plain(Err(ToolError::new(
            ErrorCode::InvalidArguments,
            "a task runs a non-interactive command: tty and background processes are \
             interactive, call exec_command without the tasks extension and use its process_id",
        )));
    }
    // The handle comes back at once; tasks/get follows the process.
    p.yield_ms = None;
    let out = gateway.call(session, ToolCall::ExecCommand(p)).await;
    let id = match &out {
        Ok(ToolResult::ExecCommand(r)) => match &r.operation_id {
            Some(id) => id.clone(),
            None => return Started::Plain(out),
        },
        _ => return Started::Plain(out),
    };
    let created = now();
    let task = Task::new(id, TaskStatus::Working, created.clone(), created)
        .with_poll_interval_ms(POLL_INTERVAL_MS);
    Started::Task(CreateTaskResult::new(task))
}

/// `-32602` for a task this caller does not have.
fn no_task(id: &str) -> McpError {
    McpError::invalid_params(format!("no task `{id}` for this caller"), None)
}

/// The process an exec task's operation started, and when it was created (RFC 3339).
async fn exec_of(
    gateway: &Gateway,
    session: &Session,
    id: &str,
) -> Result<(String, String), McpError> {
    let call = ToolCall::OperationStatus(OperationStatusParams {
        operation_id: Some(id.to_string()),
        operation_key: None,
    });
    let Ok(ToolResult::OperationStatus(op)) = gateway.call(session, call).await else {
        return Err(no_task(id));
    };
    if op.tool != "exec_command" {
        return Err(no_task(id));
    }
    let process = op
        .process_id
        .as_ref()
        .and_then(|v| v.as_str())
        .ok_or_else(|| no_task(id))?;
    Ok((process.to_string(), stamp_secs(op.created_at)))
}

/// The failed payload of a task whose state could not be read.
fn failed(e: &ToolError) -> TaskPayload {
    let mut error = JsonObject::new();
    error.insert("code".into(), (-32603).into());
    error.insert("message".into(), e.message.clone().into());
    error.insert(
        "data".into(),
        serde_json::to_value(e).unwrap_or(serde_json::Value::Null),
    );
    TaskPayload::Failed { error }
}

/// `tasks/get`.
pub async fn get(
    gateway: &Gateway,
    session: &Session,
    id: &str,
) -> Result<GetTaskResult, McpError> {
    if let Some((created_at, result)) = patch_task(session, id) {
        let task = Task::new(id, TaskStatus::Completed, created_at.clone(), created_at);
        return Ok(GetTaskResult::new(DetailedTask::new(
            task,
            TaskPayload::Completed { result },
        )));
    }
    let (process_id, created_at) = exec_of(gateway, session, id).await?;
    let status = gateway
        .call(
            session,
            ToolCall::ProcessStatus(ProcessIdParams {
                process_id: process_id.clone(),
            }),
        )
        .await;
    let payload = match status {
        Ok(ToolResult::ProcessStatus(s)) if s.state == "running" || !s.eof => TaskPayload::Working,
        Ok(ToolResult::ProcessStatus(s)) if s.termination.as_deref() == Some("terminated") => {
            TaskPayload::Cancelled
        }
        Ok(ToolResult::ProcessStatus(_)) => {
            let read = gateway
                .call(
                    session,
                    ToolCall::ReadProcess(ReadProcessParams {
                        process_id,
                        cursor: None,
                        wait_ms: None,
                        max_bytes: None,
                        tail: None,
                        stderr_cursor: None,
                    }),
                )
                .await;
            match read {
                Ok(r) => TaskPayload::Completed {
                    result: object_of(&crate::server::tool_result(r)),
                },
                Err(e) => failed(&e),
            }
        }
        Ok(_) => failed(&ToolError::new(ErrorCode::Internal, "unexpected status")),
        Err(e) => failed(&e),
    };
    let task = Task::new(id, TaskStatus::Working, created_at, now())
        .with_poll_interval_ms(POLL_INTERVAL_MS);
    Ok(GetTaskResult::new(DetailedTask::new(task, payload)))
}

/// `tasks/cancel`: `terminate_process` on the exec's process (decided by Cedar as that tool).
pub async fn cancel(gateway: &Gateway, session: &Session, id: &str) -> Result<(), McpError> {
    if patch_task(session, id).is_some() {
        return Err(McpError::invalid_params(
            format!("task `{id}` is already completed"),
            None,
        ));
    }
    let (process_id, _) = exec_of(gateway, session, id).await?;
    match gateway
        .call(
            session,
            ToolCall::TerminateProcess(ProcessIdParams { process_id }),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(e) => Err(McpError::invalid_request(
            format!(
                "task `{id}` was not cancelled: {}: {}",
                e.code.as_str(),
                e.message
            ),
            serde_json::to_value(&e).ok(),
        )),
    }
}
