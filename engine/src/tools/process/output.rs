//! Reading a process's output through its runner: one stream's page (`read_output`), a window
//! of stdout and of stderr kept apart with one long poll over both, and the drain of an exec's
//! output after its `yield_ms` wait.

use crate::wire::ReadProcessResult;
use codespace_runner_api::{self as api, Runner, RunnerError};
use std::sync::Arc;
use std::time::Duration;

/// One page of `id`'s output from `cursor`, as the runner's answer (lost: the end).
async fn read_stream(
    runner: &Arc<dyn Runner>,
    id: &str,
    stream: api::OutputStream,
    cursor: u64,
    max_bytes: Option<u64>,
    tail: bool,
    wait: Duration,
) -> Result<api::OutputPage, RunnerError> {
    runner
        .read_output(api::OutputRequest {
            process_id: id.to_string(),
            stream,
            cursor,
            max_bytes,
            wait_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
            tail,
        })
        .await
}

/// Reads a window of stdout and, when `stderr` is given, one of stderr. With `wait`,
/// long-polls until either returns bytes, both reach their end, or the wait elapses.
pub(super) async fn read_windows(
    runner: &Arc<dyn Runner>,
    id: &str,
    out: (u64, Option<u64>, bool),
    stderr: Option<(u64, Option<u64>, bool)>,
    wait: Duration,
) -> Result<(api::OutputPage, Option<api::OutputPage>), RunnerError> {
    use api::OutputStream::{Stderr, Stdout};
    let Some(err) = stderr else {
        let a = read_stream(runner, id, Stdout, out.0, out.1, out.2, wait).await?;
        return Ok((a, None));
    };
    // Both at once without waiting; then wait on both and re-read the other once one spoke.
    let a = read_stream(runner, id, Stdout, out.0, out.1, out.2, Duration::ZERO).await?;
    let b = read_stream(runner, id, Stderr, err.0, err.1, err.2, Duration::ZERO).await?;
    let spoke = !a.data.is_empty() || !b.data.is_empty();
    if spoke || (a.eof && b.eof) || wait.is_zero() {
        return Ok((a, Some(b)));
    }
    let wa = read_stream(runner, id, Stdout, out.0, out.1, out.2, wait);
    let wb = read_stream(runner, id, Stderr, err.0, err.1, err.2, wait);
    tokio::pin!(wa, wb);
    let first_out = tokio::select! {
        r = &mut wa => Ok(r?),
        r = &mut wb => Err(r?),
    };
    match first_out {
        Ok(a) => {
            let b = read_stream(runner, id, Stderr, err.0, err.1, err.2, Duration::ZERO).await?;
            Ok((a, Some(b)))
        }
        Err(b) => {
            let a = read_stream(runner, id, Stdout, out.0, out.1, out.2, Duration::ZERO).await?;
            Ok((a, Some(b)))
        }
    }
}

/// Reads from `cursor` (and stderr from `stderr_cursor`, when kept apart) until output
/// collection ends or `budget` elapses (after an exit).
pub(super) async fn drain(
    runner: &Arc<dyn Runner>,
    id: &str,
    cursor: u64,
    stderr_cursor: Option<u64>,
    budget: Duration,
) -> ReadProcessResult {
    let deadline = tokio::time::Instant::now() + budget;
    let mut data: Vec<u8> = Vec::new();
    let mut err_data: Vec<u8> = Vec::new();
    let mut next = cursor;
    let mut err_next = stderr_cursor;
    let mut out = ReadProcessResult {
        process_id: id.to_string(),
        cursor,
        chunk: String::new(),
        eof: false,
        output_lost: false,
        retained_from: 0,
        stderr_chunk: None,
        stderr_cursor: None,
        state: None,
    };
    let window = |cursor| (cursor, None, false);
    loop {
        let wait = deadline.saturating_duration_since(tokio::time::Instant::now());
        let Ok((c, e)) = read_windows(runner, id, window(next), err_next.map(window), wait).await
        else {
            break;
        };
        data.extend_from_slice(&c.data);
        next = c.cursor;
        out.output_lost = c.output_lost;
        out.retained_from = c.retained_from;
        let mut got = !c.data.is_empty();
        let mut eof = c.eof;
        if let Some(e) = &e {
            err_data.extend_from_slice(&e.data);
            err_next = Some(e.cursor);
            got |= !e.data.is_empty();
            eof &= e.eof;
        }
        out.eof = eof;
        if eof || wait.is_zero() || !got {
            break;
        }
    }
    out.cursor = next;
    out.chunk = String::from_utf8_lossy(&data).into_owned();
    if let Some(n) = err_next.filter(|_| stderr_cursor.is_some()) {
        out.stderr_cursor = Some(n);
        out.stderr_chunk = Some(String::from_utf8_lossy(&err_data).into_owned());
    }
    out
}
