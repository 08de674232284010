//! Approval holds through the real gateway: `approvals: confirm` holds allowed patches and
//! commands with an approval_id; resolve, resume exactly once, replay, version re-check, deny
//! scrubbing, expiry, restart, interrupted exec resumes; who may answer: no client grants over
//! the tool by default (its own hold: the named rule; another's: APPROVAL_NOT_FOUND), the CLI
//! does, and a client a reviewer policy names does.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use codespace_engine::wire::ApprovalDecision;
use codespace_engine::{
    Config, ErrorCode, Gateway, PolicySource, PolicyStore, SandboxFacts, Session, ToolCall,
    ToolError,
};
use codespace_store::Store;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;

struct Env {
    dir: tempfile::TempDir,
    root: PathBuf,
    store: Arc<Store>,
    gw: Gateway,
}

fn config(root: &Path, profile: &str, extra: &str) -> Config {
    let json = format!(
        r#"{{"workspaces": {{"w": {{"root": "{}", "profile": "{profile}", "approvals": "confirm",
            "sandbox": "off", "secret_masking": "off"}}}}{extra}}}"#,
        root.display()
    );
    Config::from_json(&json, Path::new("/")).unwrap()
}

fn gateway(cfg: Config, policy: PolicySource, store: &Arc<Store>) -> Gateway {
    Gateway::new(
        cfg,
        Arc::new(PolicyStore::load(policy).unwrap()),
        Some(Arc::clone(store)),
        SandboxFacts {
            sandbox_enforced: false,
            network_enforced: false,
            masking_enforced: false,
        },
    )
    .unwrap()
}

fn env_with(profile: &str, extra: &str) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    std::fs::create_dir(&root).unwrap();
    let root = std::fs::canonicalize(&root).unwrap();
    let store = Arc::new(Store::open(&dir.path().join("store.db")).unwrap());
    let gw = gateway(
        config(&root, profile, extra),
        PolicySource::Embedded,
        &store,
    );
    Env {
        dir,
        root,
        store,
        gw,
    }
}

fn env() -> Env {
    env_with("workspace-write", "")
}

async fn call(gw: &Gateway, name: &str, args: Value) -> Result<Value, ToolError> {
    gw.call(&Session::stdio(), ToolCall::parse(name, &args).unwrap())
        .await
        .map(|r| serde_json::to_value(r).unwrap())
}

const ADD: &str = "*** Begin Patch\n*** Add File: x.txt\n+x\n*** End Patch\n";

fn held_id(err: &ToolError) -> String {
    assert_eq!(err.code, ErrorCode::ApprovalRequired, "{err:?}");
    let id = err.approval_id.clone().expect("approval_id");
    assert!(id.starts_with("appr-"), "{id}");
    id
}

/// The operator's grant (channel `cli`): the shipped policies refuse a grant over the tool by
/// the client that asked.
async fn grant(e: &Env, id: &str) -> Value {
    let snap = PolicyStore::load(PolicySource::Embedded)
        .unwrap()
        .snapshot();
    let cfg = config(&e.root, "workspace-write", "");
    let r = codespace_engine::gateway::approvals::cli_resolve(
        &cfg,
        &snap,
        &e.store,
        id,
        ApprovalDecision::Grant,
        "alice",
    )
    .unwrap();
    json!({"approval_id": r.approval_id, "state": r.state})
}

async fn resume(gw: &Gateway, id: &str) -> Result<Value, ToolError> {
    call(gw, "operation_resume", json!({"approval_id": id})).await
}

#[tokio::test]
async fn a_held_patch_applies_exactly_once_after_a_grant_and_a_repeat_replays() {
    let e = env();
    let args = json!({"workspace_id": "w", "patch": ADD});
    let err = call(&e.gw, "apply_patch", args.clone()).await.unwrap_err();
    let id = held_id(&err);
    assert!(!e.root.join("x.txt").exists());
    // The same call again reuses the active hold.
    let again = call(&e.gw, "apply_patch", args).await.unwrap_err();
    assert_eq!(held_id(&again), id);
    // Not granted yet.
    let early = resume(&e.gw, &id).await.unwrap_err();
    assert_eq!(early.code, ErrorCode::ApprovalRequired);
    assert!(!e.root.join("x.txt").exists());
    assert_eq!(grant(&e, &id).await["state"], "granted");
    let done = resume(&e.gw, &id).await.unwrap();
    assert_eq!(done["state"], "consumed");
    assert_eq!(done["approval_id"], json!(id));
    assert_eq!(done["apply_patch"]["status"], "applied");
    assert_eq!(
        std::fs::read_to_string(e.root.join("x.txt")).unwrap(),
        "x\n"
    );
    // A repeat returns the stored result and writes nothing (an Add would fail on a second run).
    let replay = resume(&e.gw, &id).await.unwrap();
    assert_eq!(replay["replayed"], true);
    assert_eq!(
        replay["apply_patch"]["operation_id"],
        done["apply_patch"]["operation_id"]
    );
    // Create, resolve and resume are events with who and through which channel.
    let kinds: Vec<(String, Value)> = e
        .store
        .events(None, 100)
        .unwrap()
        .into_iter()
        .filter(|ev| ev.kind.starts_with("approval_"))
        .map(|ev| (ev.kind, ev.detail))
        .collect();
    let names: Vec<&str> = kinds.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names,
        [
            "approval_created",
            "approval_resolved",
            "approval_resumed",
            "approval_finished"
        ]
    );
    assert_eq!(kinds[1].1["by"], "alice");
    assert_eq!(kinds[1].1["channel"], "cli");
    // ...and audit rows: the confirm decision that held it, the resolve and the resume.
    e.gw.flush_audit();
    let rows = e
        .store
        .query_decisions(&codespace_store::DecisionQuery::default())
        .unwrap();
    for action in ["confirm", "approval_resolve", "operation_resume"] {
        assert!(
            rows.iter().any(|r| r.action == action),
            "no audit row for {action}"
        );
    }
}

#[tokio::test]
async fn a_file_changed_since_the_hold_fails_the_resume_and_keeps_the_outside_edit() {
    let e = env();
    std::fs::write(e.root.join("a.txt"), "one\n").unwrap();
    let err = call(
        &e.gw,
        "apply_patch",
        json!({"workspace_id": "w",
               "patch": "*** Begin Patch\n*** Update File: a.txt\n@@\n-one\n+two\n*** End Patch\n"}),
    )
    .await
    .unwrap_err();
    let id = held_id(&err);
    std::fs::write(e.root.join("a.txt"), "one\nedited outside\n").unwrap();
    grant(&e, &id).await;
    let failed = resume(&e.gw, &id).await.unwrap_err();
    assert_eq!(failed.code, ErrorCode::VersionConflict, "{failed:?}");
    assert_eq!(failed.approval_id.as_deref(), Some(id.as_str()));
    assert_eq!(
        std::fs::read_to_string(e.root.join("a.txt")).unwrap(),
        "one\nedited outside\n"
    );
    // It ran once: the repeat returns the same outcome.
    let again = resume(&e.gw, &id).await.unwrap_err();
    assert_eq!(again.code, ErrorCode::VersionConflict);
    assert!(again.message.contains("replayed"), "{}", again.message);
}

#[tokio::test]
async fn a_resume_whose_hunks_no_longer_match_the_changed_file_is_a_version_conflict() {
    let e = env();
    std::fs::write(e.root.join("a.txt"), "one\n").unwrap();
    let err = call(
        &e.gw,
        "apply_patch",
        json!({"workspace_id": "w",
               "patch": "*** Begin Patch\n*** Update File: a.txt\n@@\n-one\n+two\n*** End Patch\n"}),
    )
    .await
    .unwrap_err();
    let id = held_id(&err);
    // The outside edit removes the line the hunk needs: the hunk no longer applies, and the
    // useful answer is that the approved file changed.
    std::fs::write(e.root.join("a.txt"), "rewritten outside\n").unwrap();
    grant(&e, &id).await;
    let failed = resume(&e.gw, &id).await.unwrap_err();
    assert_eq!(failed.code, ErrorCode::VersionConflict, "{failed:?}");
    assert!(
        failed
            .message
            .contains("changed since the approval was requested"),
        "{}",
        failed.message
    );
    assert_eq!(
        std::fs::read_to_string(e.root.join("a.txt")).unwrap(),
        "rewritten outside\n"
    );
}

#[tokio::test]
async fn deny_is_final_and_scrubs_the_held_arguments() {
    let e = env();
    let err = call(
        &e.gw,
        "apply_patch",
        json!({"workspace_id": "w", "patch": ADD}),
    )
    .await
    .unwrap_err();
    let id = held_id(&err);
    let denied = call(
        &e.gw,
        "approval_resolve",
        json!({"approval_id": id, "decision": "deny"}),
    )
    .await
    .unwrap();
    assert_eq!(denied["state"], "denied");
    let row = e
        .store
        .approval(&id, codespace_store::now_ms())
        .unwrap()
        .unwrap();
    assert_eq!(row.arguments, None);
    assert_eq!(row.facts, None);
    let snap = PolicyStore::load(PolicySource::Embedded)
        .unwrap()
        .snapshot();
    let late = codespace_engine::gateway::approvals::cli_resolve(
        &config(&e.root, "workspace-write", ""),
        &snap,
        &e.store,
        &id,
        ApprovalDecision::Grant,
        "alice",
    )
    .unwrap_err();
    assert_eq!(late.code, ErrorCode::ApprovalConflict);
    assert_eq!(
        resume(&e.gw, &id).await.unwrap_err().code,
        ErrorCode::ApprovalConflict
    );
    assert!(!e.root.join("x.txt").exists());
    // A new call gets a new hold (the denied one is not active).
    let fresh = call(
        &e.gw,
        "apply_patch",
        json!({"workspace_id": "w", "patch": ADD}),
    )
    .await
    .unwrap_err();
    assert_ne!(held_id(&fresh), id);
}

#[tokio::test]
async fn an_expired_hold_is_approval_conflict() {
    let e = env_with(
        "workspace-write",
        r#", "limits": {"approval_ttl_ms": 60000}"#,
    );
    let err = call(
        &e.gw,
        "apply_patch",
        json!({"workspace_id": "w", "patch": ADD}),
    )
    .await
    .unwrap_err();
    let id = held_id(&err);
    // Look at the hold from past its time (the store expires it then).
    let row = e.store.approval(&id, row_expiry(&e, &id)).unwrap().unwrap();
    assert_eq!(row.state, "expired");
    let late = call(
        &e.gw,
        "approval_resolve",
        json!({"approval_id": id, "decision": "deny"}),
    )
    .await
    .unwrap_err();
    assert_eq!(late.code, ErrorCode::ApprovalConflict);
    assert!(late.message.contains("expired"), "{}", late.message);
    assert_eq!(
        resume(&e.gw, &id).await.unwrap_err().code,
        ErrorCode::ApprovalConflict
    );
}

fn row_expiry(e: &Env, id: &str) -> i64 {
    let row = e.store.approval(id, 0).unwrap().unwrap();
    assert_eq!(row.expires_ms - row.created_ms, 60_000);
    row.expires_ms
}

#[tokio::test]
async fn holds_survive_a_restart() {
    let e = env();
    let err = call(
        &e.gw,
        "apply_patch",
        json!({"workspace_id": "w", "patch": ADD}),
    )
    .await
    .unwrap_err();
    let id = held_id(&err);
    grant(&e, &id).await;
    drop(e.gw);
    let store = Arc::new(Store::open(&e.dir.path().join("store.db")).unwrap());
    let gw = gateway(
        config(&e.root, "workspace-write", ""),
        PolicySource::Embedded,
        &store,
    );
    let done = resume(&gw, &id).await.unwrap();
    assert_eq!(done["apply_patch"]["status"], "applied");
    assert!(e.root.join("x.txt").exists());
}

#[tokio::test]
async fn approval_create_checks_policy_first_and_a_denial_creates_no_hold() {
    let e = env_with("read-only", "");
    let err = call(
        &e.gw,
        "approval_create",
        json!({"tool": "apply_patch", "arguments": {"workspace_id": "w", "patch": ADD}}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::Unauthorized);
    assert!(e.store.approvals(None, 10, 0).unwrap().is_empty());
    // Unknown holds are APPROVAL_NOT_FOUND.
    let missing = resume(&e.gw, "appr-nope").await.unwrap_err();
    assert_eq!(missing.code, ErrorCode::ApprovalNotFound);
}

#[tokio::test]
async fn approval_create_holds_and_reuses_the_same_call() {
    let e = env();
    let args = json!({"tool": "apply_patch", "arguments": {"workspace_id": "w", "patch": ADD}});
    let a = call(&e.gw, "approval_create", args.clone()).await.unwrap();
    assert_eq!(a["state"], "pending");
    let b = call(&e.gw, "approval_create", args).await.unwrap();
    assert_eq!(a["approval_id"], b["approval_id"]);
    // The direct call meets the same hold.
    let err = call(
        &e.gw,
        "apply_patch",
        json!({"workspace_id": "w", "patch": ADD}),
    )
    .await
    .unwrap_err();
    assert_eq!(json!(held_id(&err)), a["approval_id"]);
    let bad = call(
        &e.gw,
        "approval_create",
        json!({"tool": "exec_command", "arguments": {"workspace_id": "w"}}),
    )
    .await
    .unwrap_err();
    assert_eq!(bad.code, ErrorCode::InvalidArguments);
}

#[tokio::test]
async fn a_held_command_runs_once_and_an_interrupted_resume_is_ambiguous() {
    let e = env();
    let argv = json!(["sh", "-c", "echo ran >> log.txt"]);
    let err = call(
        &e.gw,
        "exec_command",
        json!({"workspace_id": "w", "command": argv}),
    )
    .await
    .unwrap_err();
    let id = held_id(&err);
    grant(&e, &id).await;
    let done = resume(&e.gw, &id).await.unwrap();
    let pid = done["exec_command"]["process_id"]
        .as_str()
        .unwrap()
        .to_string();
    // Wait for its exit (long-poll on the output, no sleep).
    loop {
        let r = call(
            &e.gw,
            "read_process",
            json!({"process_id": pid, "wait_ms": 5000}),
        )
        .await
        .unwrap();
        if r["eof"] == true {
            break;
        }
    }
    let replay = resume(&e.gw, &id).await.unwrap();
    assert_eq!(replay["replayed"], true);
    assert_eq!(replay["exec_command"]["process_id"], json!(pid));
    assert_eq!(
        std::fs::read_to_string(e.root.join("log.txt")).unwrap(),
        "ran\n"
    );

    // A resume that a crash interrupted (state `resuming`, not running here) is never respawned.
    let err = call(
        &e.gw,
        "exec_command",
        json!({"workspace_id": "w", "command": ["sh", "-c", "echo second >> log.txt"]}),
    )
    .await
    .unwrap_err();
    let id2 = held_id(&err);
    grant(&e, &id2).await;
    e.store
        .begin_resume(&id2, codespace_store::now_ms())
        .unwrap()
        .unwrap();
    let amb = resume(&e.gw, &id2).await.unwrap_err();
    assert_eq!(amb.code, ErrorCode::ApprovalAmbiguous);
    assert_eq!(
        std::fs::read_to_string(e.root.join("log.txt")).unwrap(),
        "ran\n"
    );
}

#[tokio::test]
async fn a_hold_belongs_to_the_client_that_asked() {
    let e = env();
    let err = call(
        &e.gw,
        "apply_patch",
        json!({"workspace_id": "w", "patch": ADD}),
    )
    .await
    .unwrap_err();
    let id = held_id(&err);
    grant(&e, &id).await;
    let other = Session {
        client: "other".into(),
        transport: "streamable-http".into(),
        user: None,
    };
    let err =
        e.gw.call(
            &other,
            ToolCall::parse("operation_resume", &json!({"approval_id": id})).unwrap(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::ApprovalNotFound);
    assert!(!e.root.join("x.txt").exists());
}

/// The shipped set plus `policies/examples/profiles/approval-reviewer.cedar`, in a temp dir.
fn reviewer_policies(dir: &Path) -> PolicySource {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let pol = dir.join("policies");
    for sub in ["base", "profiles"] {
        std::fs::create_dir_all(pol.join(sub)).unwrap();
        for f in std::fs::read_dir(repo.join("policies").join(sub)).unwrap() {
            let f = f.unwrap().path();
            std::fs::copy(&f, pol.join(sub).join(f.file_name().unwrap())).unwrap();
        }
    }
    std::fs::copy(
        repo.join("policies/examples/profiles/approval-reviewer.cedar"),
        pol.join("profiles/approval-reviewer.cedar"),
    )
    .unwrap();
    PolicySource::Dir {
        policies: pol,
        schema: repo.join("schema/codespace.cedarschema"),
    }
}

fn client(name: &str) -> Session {
    Session {
        client: name.into(),
        transport: "streamable-http".into(),
        user: None,
    }
}

async fn resolve_as(
    gw: &Gateway,
    who: &Session,
    id: &str,
    decision: &str,
) -> Result<Value, ToolError> {
    gw.call(
        who,
        ToolCall::parse(
            "approval_resolve",
            &json!({"approval_id": id, "decision": decision}),
        )
        .unwrap(),
    )
    .await
    .map(|r| serde_json::to_value(r).unwrap())
}

#[tokio::test]
async fn no_client_grants_over_the_tool_by_default_while_the_cli_grants() {
    let e = env();
    let err = call(
        &e.gw,
        "apply_patch",
        json!({"workspace_id": "w", "patch": ADD}),
    )
    .await
    .unwrap_err();
    let id = held_id(&err);
    // The asking client: refused by the named base rule.
    let refused = call(
        &e.gw,
        "approval_resolve",
        json!({"approval_id": id, "decision": "grant"}),
    )
    .await
    .unwrap_err();
    assert_eq!(refused.code, ErrorCode::Unauthorized);
    assert_eq!(
        refused.policy_ids,
        Some(vec!["base.forbid.self-approval".to_string()])
    );
    // Another client that knows the id: the hold is not there for it, grant or deny.
    for decision in ["grant", "deny"] {
        let other = resolve_as(&e.gw, &client("other"), &id, decision)
            .await
            .unwrap_err();
        assert_eq!(other.code, ErrorCode::ApprovalNotFound, "{other:?}");
    }
    let row = e
        .store
        .approval(&id, codespace_store::now_ms())
        .unwrap()
        .unwrap();
    assert_eq!(row.state, "pending");
    // Every attempt is audited with who resolved.
    e.gw.flush_audit();
    let rows = e
        .store
        .query_decisions(&codespace_store::DecisionQuery::default())
        .unwrap();
    let resolver_of = |r: &codespace_store::DecisionRow| {
        r.request
            .as_ref()
            .and_then(|v| v.pointer("/request/context/approval/resolver"))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let tried: Vec<Option<String>> = rows
        .iter()
        .filter(|r| r.action == "approval_resolve")
        .map(resolver_of)
        .collect();
    assert_eq!(tried.len(), 3, "{tried:?}");
    assert!(tried.contains(&Some("other".into())), "{tried:?}");
    // The operator's CLI grants; the asking client resumes.
    assert_eq!(grant(&e, &id).await["state"], "granted");
    let done = resume(&e.gw, &id).await.unwrap();
    assert_eq!(done["apply_patch"]["status"], "applied");
}

#[tokio::test]
async fn a_client_a_policy_names_as_reviewer_answers_over_the_tool() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    std::fs::create_dir(&root).unwrap();
    let root = std::fs::canonicalize(&root).unwrap();
    let store = Arc::new(Store::open(&dir.path().join("store.db")).unwrap());
    let gw = gateway(
        config(&root, "workspace-write", ""),
        reviewer_policies(dir.path()),
        &store,
    );
    let err = call(
        &gw,
        "apply_patch",
        json!({"workspace_id": "w", "patch": ADD}),
    )
    .await
    .unwrap_err();
    let id = held_id(&err);
    let nobody = resolve_as(&gw, &client("other"), &id, "grant")
        .await
        .unwrap_err();
    assert_eq!(nobody.code, ErrorCode::ApprovalNotFound);
    let granted = resolve_as(&gw, &client("review-bot"), &id, "grant")
        .await
        .unwrap();
    assert_eq!(granted["state"], "granted");
    let row = store
        .approval(&id, codespace_store::now_ms())
        .unwrap()
        .unwrap();
    assert_eq!(row.channel.as_deref(), Some("tool"));
    assert_eq!(row.resolved_by.as_deref(), Some("review-bot"));
    let done = resume(&gw, &id).await.unwrap();
    assert_eq!(done["apply_patch"]["status"], "applied");
}
