//! Decision rows and operation events as OCSF 1.5.0 events of class API Activity (`class_uid`
//! 6003, category Application Activity): each row answers one MCP `tools/call` sub-request, an
//! API call by an actor (the MCP client) on resources (the workspace's files or a command),
//! with Cedar's answer as its status and, through the Security Control profile, as
//! `action_id`/`disposition_id` (allowed / denied). Used by `codespace audit --format ocsf` and
//! as the body of the OTLP log records. Why this class and not an IAM Authorization class is in
//! docs/telemetry.md.
//!
//! The rows are already redacted (the audit sink redacts before it stores or exports); the
//! recorded Cedar request is not copied into the event.

use codespace_store::DecisionRow;
use serde_json::{Value, json};

/// The OCSF schema version the events follow.
pub const OCSF_VERSION: &str = "1.5.0";
/// API Activity.
pub const CLASS_UID: u64 = 6003;
const CATEGORY_UID: u64 = 6;
const PRODUCT: &str = "CodeSpace";

/// API Activity's `activity_id` of a tool: 1 Create, 2 Read, 3 Update, 4 Delete, 99 Other.
fn activity(tool: &str, action: &str) -> (u64, &'static str) {
    match (tool, action) {
        (_, "read" | "list" | "search") => (2, "Read"),
        ("workspace_info" | "read" | "find" | "grep" | "find_files", _) => (2, "Read"),
        ("operation_status" | "process_status" | "read_process", _) => (2, "Read"),
        ("apply_patch", _) => (3, "Update"),
        ("exec_command", _) => (1, "Create"),
        ("terminate_process", _) => (4, "Delete"),
        _ => (99, "Other"),
    }
}

fn product() -> Value {
    json!({"name": PRODUCT, "vendor_name": PRODUCT, "version": env!("CARGO_PKG_VERSION")})
}

/// One decision row as an OCSF API Activity event.
pub fn decision_event(row: &DecisionRow) -> Value {
    let allowed = row.decision == "allow";
    let masked = row.decision == codespace_store::MASKED;
    let (activity_id, activity_name) = activity(&row.tool, &row.action);
    let (status_id, status) = if allowed || masked {
        (1, "Success")
    } else {
        (2, "Failure")
    };
    // Security Control profile: 1 Allowed / 2 Denied; disposition 1 Allowed / 2 Blocked.
    let (action_id, action, disposition_id, disposition) = if allowed || masked {
        (1, "Allowed", 1, "Allowed")
    } else {
        (2, "Denied", 2, "Blocked")
    };
    let mut resource = json!({
        "type": if row.tool == "exec_command" { "command" } else { "file" },
        "name": row.subject,
        "group": {"name": row.workspace},
    });
    if let Some(p) = &row.path
        && let Some(obj) = resource.as_object_mut()
    {
        obj.insert("uid".into(), json!(p));
    }
    let mut unmapped = json!({
        "cedar_action": row.action,
        "sub_index": row.sub_index,
        "policy_set_sha256": row.policy_set_sha256,
        "policy_ids": row.policy_ids,
        "default_deny": row.default_deny,
        "duration_us": row.duration_us,
        "decision": row.decision,
    });
    if let Some(obj) = unmapped.as_object_mut() {
        if let Some(k) = &row.kind {
            obj.insert("patch_kind".into(), json!(k));
        }
        if let Some(s) = &row.shadow_decision {
            obj.insert("shadow_decision".into(), json!(s));
        }
        // Who signed the set that decided (absent for an unsigned set).
        if let Some(s) = &row.policy_signer {
            obj.insert(
                "policy_signer".into(),
                json!({"principal": s.principal, "key": s.key}),
            );
        }
        if !row.errors.is_empty() {
            obj.insert("errors".into(), json!(row.errors));
        }
        obj.insert("profile".into(), json!(row.profile));
        if let Some(r) = &row.reason {
            obj.insert("reason".into(), json!(r));
        }
        if let Some(tp) = &row.trace_parent
            && let Some(trace) = tp.split('-').nth(1)
        {
            obj.insert("trace_id".into(), json!(trace));
        }
    }
    json!({
        "class_uid": CLASS_UID,
        "class_name": "API Activity",
        "category_uid": CATEGORY_UID,
        "category_name": "Application Activity",
        "activity_id": activity_id,
        "activity_name": activity_name,
        "type_uid": CLASS_UID * 100 + activity_id,
        "type_name": format!("API Activity: {activity_name}"),
        "severity_id": if allowed || masked { 1 } else { 3 },
        "severity": if allowed || masked { "Informational" } else { "Medium" },
        "time": row.at_ms,
        "status_id": status_id,
        "status": status,
        "action_id": action_id,
        "action": action,
        "disposition_id": disposition_id,
        "disposition": disposition,
        "message": format!("{} {} {}: {}", row.tool, row.action, row.decision, row.subject),
        "metadata": {
            "version": OCSF_VERSION,
            "product": product(),
            "profiles": ["security_control"],
            "uid": format!("{}/{}", row.decision_id, row.sub_index),
            "correlation_uid": row.decision_id,
            "log_name": "decisions",
        },
        "actor": {
            "user": {"name": row.client.as_deref().unwrap_or("unknown"), "type_id": 99, "type": "MCP client"},
            "app_name": row.transport.as_deref().unwrap_or("unknown"),
        },
        "api": {
            "operation": row.tool,
            "service": {"name": "mcp"},
            "request": {"uid": row.decision_id},
        },
        "src_endpoint": {"name": row.transport.as_deref().unwrap_or("unknown")},
        "resources": [resource],
        "unmapped": unmapped,
    })
}

/// An operation's timeline step (`minted`, `finished`) as an OCSF API Activity event.
pub fn operation_event(
    operation_id: &str,
    step: &str,
    status: Option<&str>,
    reason: Option<&str>,
    at_ms: i64,
) -> Value {
    let failed = matches!(status, Some("failed" | "cancelled" | "unknown"));
    json!({
        "class_uid": CLASS_UID,
        "class_name": "API Activity",
        "category_uid": CATEGORY_UID,
        "category_name": "Application Activity",
        "activity_id": 99,
        "activity_name": "Other",
        "type_uid": CLASS_UID * 100 + 99,
        "type_name": "API Activity: Other",
        "severity_id": if failed { 3 } else { 1 },
        "severity": if failed { "Medium" } else { "Informational" },
        "time": at_ms,
        "status_id": if failed { 2 } else { 1 },
        "status": if failed { "Failure" } else { "Success" },
        "message": format!("operation {operation_id} {step}{}", status.map(|s| format!(" ({s})")).unwrap_or_default()),
        "metadata": {
            "version": OCSF_VERSION,
            "product": product(),
            "uid": format!("{operation_id}/{step}"),
            "correlation_uid": operation_id,
            "log_name": "operations",
        },
        "actor": {"app_name": PRODUCT},
        "api": {"operation": step, "service": {"name": "codespace-operations"}},
        "src_endpoint": {"name": "codespace"},
        "resources": [{"type": "operation", "uid": operation_id}],
        "unmapped": {"step": step, "status": status, "reason": reason},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deny_is_a_failed_denied_api_activity() {
        let row = DecisionRow {
            decision_id: "d1".into(),
            tool: "apply_patch".into(),
            action: "write".into(),
            decision: "deny".into(),
            subject: "src/a.rs".into(),
            profile: "read-only".into(),
            trace_parent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
            ..DecisionRow::default()
        };
        let e = decision_event(&row);
        assert_eq!(e["class_uid"], 6003);
        assert_eq!(e["type_uid"], 600303);
        assert_eq!(e["status_id"], 2);
        assert_eq!(e["action_id"], 2);
        assert_eq!(
            e["unmapped"]["trace_id"],
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
    }
}
