//! The environment gate: an allowed call that needs its workspace's environment fails with
//! `ENVIRONMENT_UNAVAILABLE` when the environment cannot be reached, and leaves an
//! `environment_unavailable` event beside the call's audit rows (same decision id). Nothing
//! ever runs on the server's host instead.

use super::{Gateway, WorkspaceRuntime};
use crate::error::{ErrorCode, ToolError};
use crate::wire::ToolCall;
use std::sync::Arc;

/// `Err(ENVIRONMENT_UNAVAILABLE)` when `call` needs the environment of `ws` and it cannot
/// be reached (recorded in the store's events first).
pub(crate) async fn gate(
    gw: &Gateway,
    ws: &WorkspaceRuntime,
    call: &ToolCall,
    decision_id: &str,
) -> Result<(), ToolError> {
    if !crate::environments::needs_environment(call) {
        return Ok(());
    }
    let Some(env) = gw.config.environments.get(&ws.facts.environment) else {
        return Ok(());
    };
    let reason = match gw.workers.get(&env.id) {
        // Served in-process (`host`, `linux-container`), or a worker kind without a worker.
        None => match crate::environments::availability(&env.spec, None) {
            Ok(()) => return Ok(()),
            Err(reason) => reason,
        },
        Some(_) if !crate::environments::served_through_runner(call) => format!(
            "`{}` is not served through a worker in this build (only on the server's own \
             host); nothing ran, and nothing runs on the server's host instead",
            call.tool()
        ),
        // Reach the worker now (a live connection is reused; a dead one is restarted after
        // its backoff): a worker that cannot be reached fails the call here, recorded.
        Some(w) => match w.ensure().await {
            Ok(()) => return Ok(()),
            Err(reason) => reason,
        },
    };
    let message = format!("environment `{}` is unavailable: {reason}", env.id);
    if let Some(store) = gw.store() {
        let detail = serde_json::json!({
            "decision_id": decision_id,
            "workspace": ws.facts.id,
            "environment": env.id,
            "kind": env.spec.kind().as_str(),
            "transport": env.spec.transport().as_str(),
            "host": env.spec.host_fact(),
            "tool": call.tool(),
            "reason": reason,
        });
        let store = Arc::clone(store);
        let written = tokio::task::spawn_blocking(move || {
            store.insert_event("environment_unavailable", &detail)
        })
        .await;
        if !matches!(written, Ok(Ok(_))) {
            tracing::warn!("environment_unavailable event not recorded");
        }
    }
    Err(ToolError::new(ErrorCode::EnvironmentUnavailable, message))
}
