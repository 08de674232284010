//! Long tool calls as MCP expects: while `exec_command` (`yield_ms`) or `read_process`
//! (`wait_ms`) waits, a request that carries a progress token gets `notifications/progress`,
//! and a cancelled request stops waiting at once. Cancelling ends the wait, never the process:
//! a `read_process` wait is dropped; an `exec_command` finishes its bookkeeping in the
//! background (its operation is recorded, its process keeps running), its answer unsent.

use codespace_engine::wire::ToolResult;
use codespace_engine::{ToolCall, ToolError};
use rmcp::RoleServer;
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::RequestContext;
use std::future::Future;
use std::time::{Duration, Instant};

/// How often a waiting call reports progress.
pub const PROGRESS_EVERY: Duration = Duration::from_millis(500);

/// The wait a call asks for, when it is a long poll.
pub fn wait_of(call: &ToolCall) -> Option<u64> {
    match call {
        ToolCall::ExecCommand(p) => p.yield_ms.filter(|ms| *ms > 0),
        ToolCall::ReadProcess(p) => p.wait_ms.filter(|ms| *ms > 0),
        _ => None,
    }
}

/// Runs the work of a long-poll call (the call, or the in-band resume of its hold) while it
/// reports progress: `None` when the request was cancelled (nothing is sent back then). A
/// `detach`ed work (an `exec_command`) finishes its bookkeeping after a cancel; any other is
/// dropped.
pub async fn run<F>(
    work: F,
    detach: bool,
    wait_ms: u64,
    context: &RequestContext<RoleServer>,
) -> Option<Result<ToolResult, ToolError>>
where
    F: Future<Output = Result<ToolResult, ToolError>> + Send + 'static,
{
    let mut task = tokio::spawn(work);
    let token: Option<ProgressToken> = context.meta.get_progress_token();
    let started = Instant::now();
    let mut tick =
        tokio::time::interval_at(tokio::time::Instant::now() + PROGRESS_EVERY, PROGRESS_EVERY);
    loop {
        tokio::select! {
            joined = &mut task => {
                return Some(joined.unwrap_or_else(|e| {
                    Err(ToolError::new(
                        codespace_engine::ErrorCode::Internal,
                        format!("the call did not finish: {e}"),
                    ))
                }));
            }
            () = context.ct.cancelled() => {
                if !detach {
                    task.abort();
                }
                tracing::debug!(
                    request = %context.id,
                    waited_ms = started.elapsed().as_millis() as u64,
                    "long call cancelled: the wait ended, the process lives on"
                );
                return None;
            }
            _ = tick.tick(), if token.is_some() => {
                if let Some(t) = &token {
                    let waited = started.elapsed().as_millis() as f64;
                    let param = ProgressNotificationParam::new(t.clone(), waited)
                        .with_total(wait_ms as f64)
                        .with_message("waiting for output or exit");
                    if let Err(e) = context.peer.notify_progress(param).await {
                        tracing::debug!(error = %e, "cannot send a progress notification");
                    }
                }
            }
        }
    }
}
