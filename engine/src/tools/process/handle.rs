//! The process tools that act on a running process, handlers of an [`Authorized`] call the
//! gateway decided with the process's facts: `write_stdin`, `read_process`, `process_status`,
//! `process_resize`, `terminate_process` (`exec_command`, which starts one, is the parent's).

use crate::error::{ErrorCode, ToolError};
use crate::gateway::Authorized;
use crate::gateway::ops::{Begin, fingerprint};
use crate::wire::{
    ProcessAckResult, ProcessIdParams, ProcessResizeParams, ProcessResizeResult,
    ProcessStatusResult, ReadProcessParams, ReadProcessResult, WriteStdinParams,
};
use codespace_runner_process::{ProcError, ProcState, ProcessInfo, ReadWindow};
use serde_json::json;

use crate::processes::*;

pub(crate) async fn write_stdin(
    auth: &Authorized<'_>,
    p: &WriteStdinParams,
) -> Result<ProcessAckResult, ToolError> {
    let fp = fingerprint(&json!({"process_id": p.process_id, "bytes": p.data.len()}));
    let table = &auth.processes.table;
    acked_operation(
        auth,
        &p.process_id,
        &fp,
        crate::facts::OperationStatus::Written,
        table.write_stdin(&p.process_id, p.data.as_bytes()),
    )
    .await
}

/// A keyless process operation (write_stdin, terminate_process): mint it, run `action`,
/// finish it with `done` or with the error, and answer `{ok, process_id, operation_id}`.
async fn acked_operation(
    auth: &Authorized<'_>,
    process_id: &str,
    fp: &str,
    done: crate::facts::OperationStatus,
    action: impl std::future::Future<Output = Result<(), ProcError>>,
) -> Result<ProcessAckResult, ToolError> {
    let op_id = match auth.begin_operation(None, fp)? {
        Begin::New(id) => id,
        Begin::Replay(_) => return Err(internal("unexpected replay without a key")),
    };
    match action.await {
        Ok(()) => {
            let r = ProcessAckResult {
                ok: true,
                process_id: process_id.to_string(),
                operation_id: Some(op_id.clone()),
                state: None,
                exit_code: None,
                termination: None,
                signal: None,
            };
            auth.finish_operation(&op_id, done, &to_value(&r)?, None);
            Ok(r)
        }
        Err(e) => {
            let e = proc_error(&e).with_operation(op_id.clone());
            fail_operation(auth, &op_id, &e);
            Err(e)
        }
    }
}

pub(crate) async fn read_process(
    auth: &Authorized<'_>,
    p: &ReadProcessParams,
) -> Result<ReadProcessResult, ToolError> {
    if p.max_bytes == Some(0) {
        return Err(ToolError::new(
            ErrorCode::InvalidArguments,
            "max_bytes must be at least 1",
        ));
    }
    let separate = auth
        .processes
        .entry(&p.process_id)
        .map(|e| e.separate_stderr)
        .unwrap_or(false);
    let tail = p.tail.unwrap_or(false);
    let max_bytes = match p.max_bytes {
        Some(m) => Some(usize::try_from(m).unwrap_or(usize::MAX)),
        None if tail => Some(DEFAULT_TAIL_BYTES),
        None => None,
    };
    let window = |cursor: u64| ReadWindow {
        cursor,
        max_bytes,
        tail,
    };
    let (c, e) = auth
        .processes
        .table
        .read_windows(
            &p.process_id,
            window(p.cursor.unwrap_or(0)),
            separate.then(|| window(p.stderr_cursor.unwrap_or(0))),
            p.wait_ms.map(capped),
        )
        .await
        .map_err(|e| proc_error(&e))?;
    let eof = c.eof && e.as_ref().is_none_or(|e| e.eof);
    Ok(ReadProcessResult {
        process_id: p.process_id.clone(),
        cursor: c.cursor,
        chunk: c.chunk,
        eof,
        output_lost: c.output_lost,
        retained_from: c.retained_from,
        stderr_cursor: e.as_ref().map(|e| e.cursor),
        stderr_chunk: e.map(|e| e.chunk),
    })
}

pub(crate) async fn process_status(
    auth: &Authorized<'_>,
    p: &ProcessIdParams,
) -> Result<ProcessStatusResult, ToolError> {
    let ws = auth.ws();
    let info = auth
        .processes
        .table
        .status(&p.process_id)
        .await
        .map_err(|e| proc_error(&e))?;
    release_if_exited(auth, &ws.facts.id, &p.process_id, &info);
    let mut result = status_result(&p.process_id, &info);
    if let Ok(entry) = auth.processes.entry(&p.process_id)
        && let Some(proxy) = &entry.proxy
    {
        let n = proxy.counters();
        result.network = Some(crate::wire::ProcessNetwork {
            connections: n.connections,
            bytes_out: n.bytes_out,
            bytes_in: n.bytes_in,
            denied: n.denied,
        });
    }
    Ok(result)
}

pub(crate) async fn process_resize(
    auth: &Authorized<'_>,
    p: &ProcessResizeParams,
) -> Result<ProcessResizeResult, ToolError> {
    if p.rows == 0 || p.cols == 0 {
        return Err(ToolError::new(
            ErrorCode::InvalidArguments,
            "rows and cols must be at least 1",
        ));
    }
    let table = &auth.processes.table;
    let info = table
        .status(&p.process_id)
        .await
        .map_err(|e| proc_error(&e))?;
    if !info.tty {
        return Err(proc_error(&ProcError::NotTty));
    }
    if info.state != ProcState::Running {
        return Err(proc_error(&ProcError::NotRunning));
    }
    table
        .resize(&p.process_id, p.rows, p.cols)
        .await
        .map_err(|e| proc_error(&e))?;
    Ok(ProcessResizeResult {
        ok: true,
        rows: p.rows,
        cols: p.cols,
    })
}

pub(crate) async fn terminate_process(
    auth: &Authorized<'_>,
    p: &ProcessIdParams,
) -> Result<ProcessAckResult, ToolError> {
    let fp = fingerprint(&json!({"process_id": p.process_id}));
    let op_id = match auth.begin_operation(None, &fp)? {
        Begin::New(id) => id,
        Begin::Replay(_) => return Err(internal("unexpected replay without a key")),
    };
    // Waits for the exit (bounded by the kill grace plus a margin): when this answers
    // `exited`, the exit hook has already freed the process's lease.
    let waited = auth
        .processes
        .table
        .terminate_and_wait(&p.process_id, TERMINATE_MARGIN)
        .await;
    match waited {
        Ok(info) => {
            let r = ProcessAckResult {
                ok: true,
                process_id: p.process_id.clone(),
                operation_id: Some(op_id.clone()),
                state: Some(info.state.as_str().to_string()),
                exit_code: info.exit_code,
                termination: info.termination.map(|t| t.as_str().to_string()),
                signal: info.signal,
            };
            let recorded = to_value(&r)?;
            auth.finish_operation(
                &op_id,
                crate::facts::OperationStatus::Terminated,
                &recorded,
                None,
            );
            Ok(r)
        }
        Err(e) => {
            let e = proc_error(&e).with_operation(op_id.clone());
            fail_operation(auth, &op_id, &e);
            Err(e)
        }
    }
}

/// Finishes `op_id` as failed with `e`.
pub(super) fn fail_operation(auth: &Authorized<'_>, op_id: &str, e: &ToolError) {
    auth.finish_operation(
        op_id,
        crate::facts::OperationStatus::Failed,
        &json!({"error": {"code": e.code, "message": e.message}}),
        Some(e.code.as_str()),
    );
}

/// Once a caller has been told a process exited, its workspace lease is free (the exit
/// watcher releases it too, but may not have run yet: a next exec must not see it busy).
pub(super) fn release_if_exited(
    auth: &Authorized<'_>,
    workspace: &str,
    id: &str,
    info: &ProcessInfo,
) {
    if info.state == ProcState::Exited {
        auth.leases.release_process(workspace, id);
    }
}
