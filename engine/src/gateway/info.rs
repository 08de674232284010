//! `workspace_info` without a workspace: the server's identity, its policy set and its store.
//! The gateway answers it itself (nothing is decided: no workspace is named) and hands it to the
//! workspace handler as the first part of its answer.

use super::Services;
use crate::policy::{PolicySnapshot, RejectedReload};
use crate::wire::{
    PolicyInfo, RejectedReloadInfo, RetentionInfo, StoreInfo, StoreRows, WorkspaceInfoResult,
    rfc3339_ms,
};

/// The `policy` block of workspace_info: hash, load time, and a rejected reload if any.
fn policy_block(snap: &PolicySnapshot, rejected: Option<RejectedReload>) -> PolicyInfo {
    PolicyInfo {
        set_sha256: snap.sha256.clone(),
        loaded_at: rfc3339_ms(snap.loaded_at_ms),
        last_reload_rejected: rejected.map(|rej| RejectedReloadInfo {
            at: rfc3339_ms(rej.at_ms),
            errors: rej.errors,
        }),
        signer: snap.signer.as_ref().map(|s| crate::wire::SignerInfo {
            principal: s.principal.clone(),
            key: s.key.clone(),
        }),
    }
}

/// The `store` block of workspace_info: retention settings and the row counts the
/// background pruner last took (never counted on the request path).
fn store_block(svc: &Services) -> Option<StoreInfo> {
    svc.store.as_ref()?;
    let r = &svc.config.retention;
    let at_opt = |ms: Option<i64>| ms.map(rfc3339_ms);
    Some(StoreInfo {
        retention: RetentionInfo {
            audit: crate::retention::format_duration(r.audit),
            operations: crate::retention::format_duration(r.operations),
            operation_keys: crate::retention::format_duration(r.operation_keys),
        },
        rows: svc.store_stats.get().map(|(at, st)| StoreRows {
            counted_at: rfc3339_ms(at),
            audit: st.audit_rows,
            oldest_audit_at: at_opt(st.oldest_audit_ms),
            operations: st.operations,
            oldest_operation_at: at_opt(st.oldest_operation_ms),
            processes: st.processes,
            events: st.events,
            operation_keys: st.operation_keys,
        }),
    })
}

/// `workspace_info` without a workspace: the server's identity, its policy set and its store.
/// Nothing here is decided: it names no workspace.
pub(super) fn server_info(
    svc: &Services,
    snap: &PolicySnapshot,
    rejected: Option<RejectedReload>,
) -> WorkspaceInfoResult {
    WorkspaceInfoResult {
        server: "codespace",
        version: env!("CARGO_PKG_VERSION"),
        internal_model_calls: false,
        tools_exposed: crate::tool_table::tool_names(),
        transports: svc.transports.clone(),
        workspace_id: None,
        workspace_id_is_credential: false,
        note: "Execution-only server: no model calls. Every call is authorized by Cedar policy.",
        policy: policy_block(snap, rejected),
        store: store_block(svc),
        profile: None,
        execution: None,
        environment: None,
        telemetry: crate::telemetry::info(),
    }
}
