//! Sample rows shared by the store's integration tests.
#![allow(dead_code)]

use codespace_store::{DecisionRow, OperationRow, ProcessRow};

/// A decision row with the given identity, time and verdict.
pub fn decision(id: &str, sub_index: i64, at_ms: i64, verdict: &str) -> DecisionRow {
    DecisionRow {
        decision_id: id.to_owned(),
        at_ms,
        policy_set_sha256: "ab".repeat(32),
        profile: "workspace-write".to_owned(),
        workspace: "default".to_owned(),
        tool: "read".to_owned(),
        action: "Action::\"read\"".to_owned(),
        sub_index,
        subject: "src/lib.rs".to_owned(),
        client: Some("test-client".to_owned()),
        transport: None,
        decision: verdict.to_owned(),
        policy_ids: vec!["policy0".to_owned(), "policy3".to_owned()],
        errors: vec![],
        default_deny: verdict == "deny",
        duration_us: 42,
        ..DecisionRow::default()
    }
}

/// An unfinished operation row.
pub fn operation(id: &str, workspace: &str, tool: &str, key: Option<&str>) -> OperationRow {
    OperationRow {
        operation_id: id.to_owned(),
        operation_key: key.map(str::to_owned),
        fingerprint: format!("fp-{id}"),
        tool: tool.to_owned(),
        workspace: workspace.to_owned(),
        client: Some("test-client".to_owned()),
        status: "running".to_owned(),
        created_ms: 1_000,
        finished_ms: None,
        result: None,
    }
}

/// A running process row belonging to `operation_id`.
pub fn process(id: &str, operation_id: &str) -> ProcessRow {
    ProcessRow {
        process_id: id.to_owned(),
        workspace: "default".to_owned(),
        operation_id: operation_id.to_owned(),
        argv_sha256: "cd".repeat(32),
        program: "cargo".to_owned(),
        tty: true,
        pid: Some(4242),
        state: "running".to_owned(),
        exit_code: None,
        termination: None,
        started_ms: 2_000,
        ended_ms: None,
    }
}
