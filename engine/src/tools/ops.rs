//! `operation_status`: what became of one of the caller's operations, a handler of an
//! [`Authorized`] call (the gateway resolved the operation and decided the call on its workspace).

use crate::error::{ErrorCode, ToolError};
use crate::gateway::Authorized;
use crate::wire::{OperationEvent, OperationStatusResult, rfc3339_ms};
use codespace_store::{OperationRow, Store};

fn store_err(e: codespace_store::StoreError) -> ToolError {
    ToolError::new(ErrorCode::Internal, format!("store: {e}"))
}

/// `operation_status` of the operation the gateway resolved (and decided the call on).
pub(crate) fn operation_status(
    auth: &Authorized<'_>,
    row: &OperationRow,
) -> Result<OperationStatusResult, ToolError> {
    status_of(auth.require_store()?, row)
}

/// The status of `row` with its events from `store`. The finished operation's `files`,
/// `changes`, `process_id` and `error` are copied from its recorded result as they were stored.
fn status_of(store: &Store, row: &OperationRow) -> Result<OperationStatusResult, ToolError> {
    let events = store
        .operation_events(&row.operation_id)
        .map_err(store_err)?
        .into_iter()
        .map(|e| OperationEvent {
            at: rfc3339_ms(e.at_ms),
            name: e.name,
            status: e.status,
            reason: e.reason,
        })
        .collect();
    let status = if row.finished_ms.is_none() {
        crate::facts::OperationStatus::Running.as_str().to_string()
    } else {
        row.status.clone()
    };
    let recorded = row.result.as_ref().and_then(|r| r.as_object());
    let field = |name: &str| {
        recorded
            .and_then(|res| res.get(name))
            .filter(|v| !v.as_array().is_some_and(Vec::is_empty))
            .cloned()
    };
    Ok(OperationStatusResult {
        operation_id: row.operation_id.clone(),
        status,
        replayed: false,
        kind: crate::tool_table::operation_kind(&row.tool),
        tool: row.tool.clone(),
        workspace_id: row.workspace.clone(),
        created_at: row.created_ms / 1000,
        events,
        finished_at: row.finished_ms.map(|f| f / 1000),
        operation_key: row.operation_key.clone(),
        files: field("files"),
        changes: field("changes"),
        process_id: field("process_id"),
        error: recorded.and_then(|res| res.get("error")).cloned(),
    })
}
