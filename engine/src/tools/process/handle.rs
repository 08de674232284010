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
use codespace_runner_api::{self as api, RunnerError};
use serde_json::json;

use crate::processes::*;

/// The process `id` (the gateway found it before deciding) and its runner, unless it is lost.
fn live_entry(auth: &Authorized<'_>, id: &str) -> Result<Entry, ToolError> {
    let entry = auth.processes.entry(id)?;
    if entry.standing == Standing::Lost {
        return Err(ToolError::new(ErrorCode::ProcessNotRunning, LOST_MESSAGE));
    }
    Ok(entry)
}

/// A runner's error about process `id`: an unreachable runner means the process is lost (its
/// lease released, its row `lost`), said as such.
fn runner_error(auth: &Authorized<'_>, id: &str, e: RunnerError) -> ToolError {
    if let RunnerError::Unavailable { .. } = e {
        lose(auth, id);
        return ToolError::new(ErrorCode::ProcessNotRunning, LOST_MESSAGE);
    }
    crate::host_runner::to_tool_error(e)
}

/// `id`'s worker is gone: it is lost.
fn lose(auth: &Authorized<'_>, id: &str) {
    if let Some(ws) = auth.processes.registry.lose(id) {
        record_lost(&auth.leases, auth.store.as_ref(), &[(id.to_string(), ws)]);
    }
}

/// The status of `id` now, from its runner (`lost` when its worker is gone); an observed exit
/// frees its lease before the caller hears of it.
pub(crate) async fn status_of(
    auth: &Authorized<'_>,
    id: &str,
) -> Result<api::ProcessStatus, ToolError> {
    let entry = auth.processes.entry(id)?;
    if entry.standing == Standing::Lost {
        return Ok(lost_status(id, &entry));
    }
    let r = entry
        .runner
        .status(api::ProcessRef {
            process_id: id.to_string(),
        })
        .await;
    match r {
        Ok(s) => {
            if s.state != api::ProcessState::Running {
                observed_exit(auth, &entry.workspace, id);
            }
            Ok(s)
        }
        Err(RunnerError::Unavailable { .. }) => {
            lose(auth, id);
            Ok(lost_status(id, &entry))
        }
        Err(e) => Err(crate::host_runner::to_tool_error(e)),
    }
}

pub(crate) async fn write_stdin(
    auth: &Authorized<'_>,
    p: &WriteStdinParams,
) -> Result<ProcessAckResult, ToolError> {
    let fp = fingerprint(&json!({"process_id": p.process_id, "bytes": p.data.len()}));
    let entry = live_entry(auth, &p.process_id);
    let action = async {
        let entry = entry?;
        entry
            .runner
            .write_stdin(api::StdinRequest {
                process_id: p.process_id.clone(),
                data: p.data.as_bytes().to_vec(),
            })
            .await
            .map_err(|e| runner_error(auth, &p.process_id, e))
    };
    acked_operation(
        auth,
        &p.process_id,
        &fp,
        crate::facts::OperationStatus::Written,
        action,
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
    action: impl std::future::Future<Output = Result<(), ToolError>>,
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
            let e = e.with_operation(op_id.clone());
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
    let entry = auth.processes.entry(&p.process_id)?;
    let separate = entry.separate_stderr;
    let lost = |cursor: Option<u64>, err: Option<u64>| ReadProcessResult {
        process_id: p.process_id.clone(),
        cursor: cursor.unwrap_or(0),
        chunk: String::new(),
        eof: true,
        output_lost: false,
        retained_from: 0,
        stderr_cursor: separate.then(|| err.unwrap_or(0)),
        stderr_chunk: separate.then(String::new),
        state: Some("lost".into()),
    };
    if entry.standing == Standing::Lost {
        return Ok(lost(p.cursor, p.stderr_cursor));
    }
    let tail = p.tail.unwrap_or(false);
    let max_bytes = match p.max_bytes {
        Some(m) => Some(m),
        None if tail => Some(DEFAULT_TAIL_BYTES as u64),
        None => None,
    };
    let window = |cursor: u64| (cursor, max_bytes, tail);
    let read = super::output::read_windows(
        &entry.runner,
        &p.process_id,
        window(p.cursor.unwrap_or(0)),
        separate.then(|| window(p.stderr_cursor.unwrap_or(0))),
        p.wait_ms.map(capped).unwrap_or_default(),
    )
    .await;
    let (c, e) = match read {
        Ok(r) => r,
        Err(RunnerError::Unavailable { .. }) => {
            lose(auth, &p.process_id);
            return Ok(lost(p.cursor, p.stderr_cursor));
        }
        Err(e) => return Err(crate::host_runner::to_tool_error(e)),
    };
    let eof = c.eof && e.as_ref().is_none_or(|e| e.eof);
    if eof {
        // The end of the output comes after the exit: the lease is free before it is said.
        observed_exit(auth, &entry.workspace, &p.process_id);
    }
    Ok(ReadProcessResult {
        process_id: p.process_id.clone(),
        cursor: c.cursor,
        chunk: String::from_utf8_lossy(&c.data).into_owned(),
        eof,
        output_lost: c.output_lost,
        retained_from: c.retained_from,
        stderr_cursor: e.as_ref().map(|e| e.cursor),
        stderr_chunk: e.map(|e| String::from_utf8_lossy(&e.data).into_owned()),
        state: None,
    })
}

pub(crate) async fn process_status(
    auth: &Authorized<'_>,
    p: &ProcessIdParams,
) -> Result<ProcessStatusResult, ToolError> {
    let info = status_of(auth, &p.process_id).await?;
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
    let entry = live_entry(auth, &p.process_id)?;
    let info = status_of(auth, &p.process_id).await?;
    if !info.tty {
        return Err(ToolError::new(
            ErrorCode::ProcessNotTty,
            codespace_runner_process::ProcError::NotTty.to_string(),
        ));
    }
    if info.state != api::ProcessState::Running {
        return Err(ToolError::new(
            ErrorCode::ProcessNotRunning,
            codespace_runner_process::ProcError::NotRunning.to_string(),
        ));
    }
    entry
        .runner
        .resize(api::ResizeRequest {
            process_id: p.process_id.clone(),
            size: api::TermSize {
                rows: p.rows,
                cols: p.cols,
            },
        })
        .await
        .map_err(|e| runner_error(auth, &p.process_id, e))?;
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
    // `exited`, the process's lease is already free. A lost process has nothing left to kill.
    let entry = auth.processes.entry(&p.process_id)?;
    let waited = if entry.standing == Standing::Lost {
        Ok(lost_status(&p.process_id, &entry))
    } else {
        match entry
            .runner
            .terminate(api::ProcessRef {
                process_id: p.process_id.clone(),
            })
            .await
        {
            Err(RunnerError::Unavailable { .. }) => {
                lose(auth, &p.process_id);
                Ok(lost_status(&p.process_id, &entry))
            }
            other => other.map_err(crate::host_runner::to_tool_error),
        }
    };
    match waited {
        Ok(info) => {
            if info.state != api::ProcessState::Running {
                observed_exit(auth, &entry.workspace, &p.process_id);
            }
            let r = ProcessAckResult {
                ok: true,
                process_id: p.process_id.clone(),
                operation_id: Some(op_id.clone()),
                state: Some(state_str(info.state).to_string()),
                exit_code: info.exit_code,
                termination: info.termination,
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
            let e = e.with_operation(op_id.clone());
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

/// Once a caller is told a process exited, its workspace lease is free (the exit watcher
/// releases it too, but may not have run yet: a next exec must not see it busy).
fn observed_exit(auth: &Authorized<'_>, workspace: &str, id: &str) {
    auth.processes.registry.ended(id);
    auth.leases.release_process(workspace, id);
}
