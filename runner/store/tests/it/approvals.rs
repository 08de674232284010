//! Approval holds in the store: reuse by fingerprint, resolution, deny scrubbing, expiry,
//! the one resume, and survival across a reopen.

use codespace_store::{ApprovalRow, ApprovalState, Resolution, Store};
use serde_json::json;

fn hold(id: &str, fp: &str, now: i64) -> ApprovalRow {
    ApprovalRow {
        approval_id: id.into(),
        fingerprint: fp.into(),
        tool: "exec_command".into(),
        workspace: "w".into(),
        registration: "reg-1".into(),
        state: ApprovalState::Pending,
        arguments: Some(json!({"workspace_id": "w", "command": ["true"]})),
        summary: "true".into(),
        facts: Some(json!({"pinned": {}})),
        requested_by: "local".into(),
        transport: "stdio".into(),
        channel: None,
        resolved_by: None,
        result: None,
        created_ms: now,
        expires_ms: now + 1000,
        resolved_ms: None,
        resumed_ms: None,
        finished_ms: None,
    }
}

#[test]
fn an_active_hold_with_the_same_fingerprint_is_reused() {
    let s = Store::open_in_memory().unwrap();
    let (a, created) = s
        .create_or_reuse_approval(&hold("appr-1", "fp", 10), 10)
        .unwrap();
    assert!(created);
    let (b, created) = s
        .create_or_reuse_approval(&hold("appr-2", "fp", 11), 11)
        .unwrap();
    assert!(!created);
    assert_eq!(b.approval_id, a.approval_id);
    // Once expired, the same fingerprint gets a new hold.
    let (c, created) = s
        .create_or_reuse_approval(&hold("appr-3", "fp", 2000), 2000)
        .unwrap();
    assert!(created);
    assert_eq!(c.approval_id, "appr-3");
    assert_eq!(
        s.approval("appr-1", 2000).unwrap().unwrap().state,
        "expired"
    );
}

#[test]
fn deny_is_final_and_scrubs_the_arguments() {
    let s = Store::open_in_memory().unwrap();
    s.create_or_reuse_approval(&hold("appr-1", "fp", 10), 10)
        .unwrap();
    let Resolution::Changed(r) = s
        .resolve_approval("appr-1", false, "op", "cli", 12)
        .unwrap()
    else {
        panic!("not changed")
    };
    assert_eq!(r.state, "denied");
    assert_eq!(r.arguments, None);
    assert_eq!(r.facts, None);
    assert_eq!(r.channel.as_deref(), Some("cli"));
    assert_eq!(r.resolved_by.as_deref(), Some("op"));
    let again = s.resolve_approval("appr-1", true, "op", "cli", 13).unwrap();
    assert!(matches!(again, Resolution::Unchanged(r) if r.state == "denied"));
    assert!(s.begin_resume("appr-1", 14).unwrap().is_none());
    assert_eq!(
        s.resolve_approval("appr-9", true, "op", "cli", 13).unwrap(),
        Resolution::NotFound
    );
}

#[test]
fn a_granted_hold_resumes_once_and_keeps_its_outcome_across_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    {
        let s = Store::open(&path).unwrap();
        s.create_or_reuse_approval(&hold("appr-1", "fp", 10), 10)
            .unwrap();
        s.resolve_approval("appr-1", true, "local", "tool", 11)
            .unwrap();
        let r = s.begin_resume("appr-1", 12).unwrap().unwrap();
        assert_eq!(r.state, "resuming");
        assert!(
            s.begin_resume("appr-1", 12).unwrap().is_none(),
            "only one resume"
        );
        s.finish_resume("appr-1", true, Some(&json!({"ok": {"x": 1}})), 13)
            .unwrap();
    }
    let s = Store::open(&path).unwrap();
    let r = s.approval("appr-1", 5000).unwrap().unwrap();
    assert_eq!(r.state, "consumed", "a consumed hold never expires");
    assert_eq!(r.result, Some(json!({"ok": {"x": 1}})));
    assert_eq!(
        s.approvals(Some(ApprovalState::Consumed), 10, 5000)
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn a_resume_where_nothing_ran_returns_the_hold_to_granted() {
    let s = Store::open_in_memory().unwrap();
    s.create_or_reuse_approval(&hold("appr-1", "fp", 10), 10)
        .unwrap();
    s.resolve_approval("appr-1", true, "local", "tool", 11)
        .unwrap();
    s.begin_resume("appr-1", 12).unwrap().unwrap();
    s.finish_resume("appr-1", false, None, 13).unwrap();
    assert_eq!(s.approval("appr-1", 14).unwrap().unwrap().state, "granted");
    // A granted hold past its time expires and cannot be resumed.
    assert!(s.begin_resume("appr-1", 1010).unwrap().is_none());
    assert_eq!(
        s.approval("appr-1", 1010).unwrap().unwrap().state,
        "expired"
    );
}

#[test]
fn holds_that_can_no_longer_run_are_pruned_after_the_retention_and_others_stay() {
    let store = Store::open_in_memory().unwrap();
    // Old (created at 10, before the cutoff 2 000): denied, pending past its expiry (1 010),
    // pending with an expiry after the cutoff, granted and resuming (interrupted).
    store
        .create_or_reuse_approval(&hold("appr-denied", "fp1", 10), 10)
        .unwrap();
    store
        .resolve_approval("appr-denied", false, "op", "cli", 11)
        .unwrap();
    store
        .create_or_reuse_approval(&hold("appr-lapsed", "fp2", 10), 10)
        .unwrap();
    let mut long = hold("appr-long", "fp3", 10);
    long.expires_ms = 1_000_000;
    store.create_or_reuse_approval(&long, 10).unwrap();
    let mut resuming = hold("appr-resuming", "fp4", 10);
    resuming.expires_ms = 1_000_000;
    store.create_or_reuse_approval(&resuming, 10).unwrap();
    store
        .resolve_approval("appr-resuming", true, "op", "cli", 11)
        .unwrap();
    assert!(store.begin_resume("appr-resuming", 12).unwrap().is_some());
    // Recent (created after the cutoff) and denied: within the retention.
    store
        .create_or_reuse_approval(&hold("appr-recent", "fp5", 3_000), 3_000)
        .unwrap();
    store
        .resolve_approval("appr-recent", false, "op", "cli", 3_001)
        .unwrap();

    let deleted = store
        .prune_batch(codespace_store::PruneTarget::Approvals, 2_000, 100)
        .unwrap();
    assert_eq!(deleted, 2);
    let now = 3_002;
    assert!(store.approval("appr-denied", now).unwrap().is_none());
    assert!(store.approval("appr-lapsed", now).unwrap().is_none());
    assert!(store.approval("appr-long", now).unwrap().is_some());
    assert_eq!(
        store.approval("appr-resuming", now).unwrap().unwrap().state,
        "resuming"
    );
    assert!(store.approval("appr-recent", now).unwrap().is_some());
}
