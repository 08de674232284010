//! MCP resources (issue 31): each of the caller's processes' output as
//! `codespace://processes/{id}/output`, and the template of operation diffs
//! `codespace://operations/{id}/diff`. Every list and read is a tool call through the gateway
//! (`process_list`, `read_process`, `operation_diff`), decided, audited and scoped to the calling
//! client exactly as the tool is: resources are another way to ask, never a side door. The
//! operator's skills (`skill://<name>/<path>`, [`crate::skills`]) follow the processes, each a
//! `read_skill` decision.

use codespace_engine::wire::{
    CallParseError, ProcessListParams, ReadProcessParams, ToolCall, ToolResult,
};
use codespace_engine::{ErrorCode, Gateway, Session, ToolError};
use rmcp::ErrorData as McpError;
use rmcp::model::{
    ListResourceTemplatesResult, ListResourcesResult, ReadResourceResult, Resource,
    ResourceContents, ResourceTemplate,
};

/// The URI template of a process's output.
pub const PROCESS_OUTPUT_TEMPLATE: &str = "codespace://processes/{id}/output";
/// The URI template of an operation's unified diff.
pub const OPERATION_DIFF_TEMPLATE: &str = "codespace://operations/{id}/diff";
/// Resources per `resources/list` page.
pub const RESOURCES_PAGE: usize = 100;

/// The tool an operation-diff read calls (served by the operation ledger's tool when this build
/// has it; the name is pinned in the wave-3 decisions).
pub const OPERATION_DIFF_TOOL: &str = "operation_diff";

fn process_uri(id: &str) -> String {
    format!("codespace://processes/{id}/output")
}

/// A tool error as a JSON-RPC error: its code names the kind, `data` carries the ErrorBody.
fn rpc_error(e: &ToolError) -> McpError {
    let data = serde_json::to_value(e).ok();
    match e.code {
        ErrorCode::ProcessNotFound | ErrorCode::OperationNotFound => {
            McpError::resource_not_found(e.message.clone(), data)
        }
        ErrorCode::InvalidArguments => McpError::invalid_params(e.message.clone(), data),
        _ => McpError::invalid_request(e.message.clone(), data),
    }
}

/// `resources/list`: the output of each process `process_list` shows the caller, newest first,
/// then the files of each skill the caller may read, [`RESOURCES_PAGE`] at a time; the cursor is
/// the offset of the next page in that sequence.
pub async fn list(
    gw: &Gateway,
    session: &Session,
    cursor: Option<&str>,
) -> Result<ListResourcesResult, McpError> {
    let start = match cursor {
        None => 0,
        Some(c) => c
            .parse::<usize>()
            .map_err(|_| McpError::invalid_params("unknown cursor", None))?,
    };
    let call = ToolCall::ProcessList(ProcessListParams::default());
    let processes = match gw.call(session, call).await {
        Ok(ToolResult::ProcessList(l)) => l.processes,
        Ok(_) => Vec::new(),
        Err(e) => return Err(rpc_error(&e)),
    };
    let mut all: Vec<Resource> = processes
        .iter()
        .map(|p| {
            Resource::new(process_uri(&p.process_id), format!("output of {}", p.process_id))
                .with_title(format!("{} ({})", p.command, p.state))
                .with_description(format!(
                    "Output of the process `{}` in workspace `{}` ({}), as read_process returns it from cursor 0.",
                    p.command, p.workspace_id, p.state
                ))
                .with_mime_type("text/plain")
        })
        .collect();
    if crate::skills::configured(gw) {
        all.extend(crate::skills::resources(
            &crate::skills::visible(gw, session).await,
        ));
    }
    let total = all.len();
    let items = all
        .into_iter()
        .skip(start)
        .take(RESOURCES_PAGE)
        .collect::<Vec<_>>();
    let mut out = ListResourcesResult::with_all_items(items);
    let next = start.saturating_add(RESOURCES_PAGE);
    if next < total {
        out.next_cursor = Some(next.to_string());
    }
    Ok(out)
}

/// `resources/templates/list`: process output and operation diffs.
pub fn templates() -> ListResourceTemplatesResult {
    ListResourceTemplatesResult::with_all_items(vec![
        ResourceTemplate::new(PROCESS_OUTPUT_TEMPLATE, "process output")
            .with_description(
                "The retained output of one of your processes (read_process from cursor 0; \
                 decided as read_process).",
            )
            .with_mime_type("text/plain"),
        ResourceTemplate::new(OPERATION_DIFF_TEMPLATE, "operation diff")
            .with_description(
                "The unified diff of one of your operations (decided as operation_diff; withheld \
                 files named, never shown).",
            )
            .with_mime_type("text/x-diff"),
    ])
}

/// `resources/read` of one URI.
pub async fn read(
    gw: &Gateway,
    session: &Session,
    uri: &str,
) -> Result<ReadResourceResult, McpError> {
    if uri.starts_with(crate::skills::SKILL_SCHEME) {
        return crate::skills::read(gw, session, uri).await;
    }
    let rest = uri
        .strip_prefix("codespace://")
        .ok_or_else(|| McpError::resource_not_found(format!("unknown resource {uri}"), None))?;
    let parts: Vec<&str> = rest.split('/').collect();
    match parts.as_slice() {
        ["processes", id, "output"] if !id.is_empty() => {
            read_process_output(gw, session, uri, id).await
        }
        ["operations", id, "diff"] if !id.is_empty() => {
            read_operation_diff(gw, session, uri, id).await
        }
        _ => Err(McpError::resource_not_found(
            format!("unknown resource {uri}"),
            None,
        )),
    }
}

async fn read_process_output(
    gw: &Gateway,
    session: &Session,
    uri: &str,
    id: &str,
) -> Result<ReadResourceResult, McpError> {
    let call = ToolCall::ReadProcess(ReadProcessParams {
        process_id: id.to_string(),
        cursor: None,
        wait_ms: None,
        max_bytes: None,
        tail: None,
        stderr_cursor: None,
    });
    match gw.call(session, call).await {
        Ok(ToolResult::ReadProcess(r)) => {
            let mut contents = vec![ResourceContents::text(r.chunk, uri)];
            if let Some(err) = r.stderr_chunk {
                contents.push(ResourceContents::text(err, format!("{uri}#stderr")));
            }
            Ok(ReadResourceResult::new(contents))
        }
        Ok(_) => Err(McpError::internal_error("unexpected result", None)),
        Err(e) => Err(rpc_error(&e)),
    }
}

/// An operation's diff: the `operation_diff` tool's result through the gateway. A build without
/// that tool answers with an error saying so.
async fn read_operation_diff(
    gw: &Gateway,
    session: &Session,
    uri: &str,
    id: &str,
) -> Result<ReadResourceResult, McpError> {
    let args = serde_json::json!({ "operation_id": id });
    let call = match ToolCall::parse(OPERATION_DIFF_TOOL, &args) {
        Ok(c) => c,
        Err(CallParseError::UnknownTool(_)) => {
            return Err(McpError::invalid_request(
                "operation diffs are served by the operation_diff tool, which this build does not have",
                None,
            ));
        }
        Err(CallParseError::InvalidArguments(m)) => {
            return Err(McpError::invalid_params(m, None));
        }
    };
    match gw.call(session, call).await {
        Ok(r) => {
            let v = serde_json::to_value(&r)
                .map_err(|e| McpError::internal_error(e.to_string(), None))?;
            let text = match v.get("diff").and_then(|d| d.as_str()) {
                Some(d) => d.to_string(),
                None => v.to_string(),
            };
            Ok(ReadResourceResult::new(vec![
                ResourceContents::text(text, uri).with_mime_type("text/x-diff"),
            ]))
        }
        Err(e) => Err(rpc_error(&e)),
    }
}
