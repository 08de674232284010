//! Security-team features through the real engine: the audit rows a deny and an allow leave,
//! `explain` on a denied call, parameterized cases, coverage, and the cedar export.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use codespace_engine::policy::explain::{Tri, explain_call, render_text, to_json};
use codespace_engine::policy::{PolicySource, compile};
use codespace_engine::{Config, ErrorCode, Gateway, PolicyStore, SandboxFacts, Session, ToolCall};
use codespace_policy_tools::suite::{
    Coverage, Fixture, RunOptions, parse_file, profile_tree, run_file, run_file_with,
};
use codespace_store::{DecisionQuery, Store};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

fn gateway(root: &Path, profile: &str) -> (Gateway, Arc<Store>, Arc<PolicyStore>) {
    let cfg = Config::from_json(
        &format!(
            r#"{{"workspaces": {{"w": {{"root": "{}", "profile": "{profile}"}}}}}}"#,
            root.display()
        ),
        Path::new("/"),
    )
    .unwrap();
    let policy = Arc::new(PolicyStore::load(PolicySource::Embedded).unwrap());
    let store = Arc::new(Store::open_in_memory().unwrap());
    let gw = Gateway::new(
        cfg,
        Arc::clone(&policy),
        Some(Arc::clone(&store)),
        SandboxFacts {
            sandbox_enforced: true,
            network_enforced: true,
            masking_enforced: true,
        },
    )
    .unwrap();
    (gw, store, policy)
}

fn call(name: &str, args: serde_json::Value) -> ToolCall {
    ToolCall::parse(name, &args).unwrap()
}

#[tokio::test]
async fn an_allow_and_a_deny_each_leave_exactly_the_expected_audit_rows() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::write(root.join("a.txt"), "alpha-content\n").unwrap();
    std::fs::write(root.join(".env"), "SECRET=hunter2\n").unwrap();
    let (gw, store, policy) = gateway(&root, "read-only");
    let sha = policy.snapshot().sha256.clone();
    let s = Session::stdio();

    gw.call(
        &s,
        call("read", json!({"workspace_id": "w", "path": "a.txt"})),
    )
    .await
    .unwrap();
    let rows = store.query_decisions(&DecisionQuery::default()).unwrap();
    assert_eq!(rows.len(), 1, "{rows:#?}");
    let r = &rows[0];
    assert_eq!(
        (
            r.decision.as_str(),
            r.tool.as_str(),
            r.action.as_str(),
            r.subject.as_str()
        ),
        ("allow", "read", "read", "a.txt")
    );
    assert_eq!(r.policy_ids, vec!["read-only.permit.fs-read".to_string()]);
    assert_eq!((r.sub_index, r.default_deny), (0, false));
    assert!(r.errors.is_empty());
    assert_eq!(
        (r.profile.as_str(), r.workspace.as_str()),
        ("read-only", "w")
    );
    assert_eq!(r.policy_set_sha256, sha);
    assert_eq!(r.transport.as_deref(), Some("stdio"));

    let err = gw
        .call(
            &s,
            call("read", json!({"workspace_id": "w", "path": ".env"})),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Unauthorized);
    let denies = store
        .query_decisions(&DecisionQuery {
            decision: Some("deny".into()),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(denies.len(), 1, "{denies:#?}");
    let d = &denies[0];
    assert_eq!(Some(d.decision_id.clone()), err.decision_id);
    assert_eq!(d.policy_ids, vec!["base.forbid.secret-files".to_string()]);
    assert_eq!((d.subject.as_str(), d.default_deny), (".env", false));
    // Exactly two rows in all, and never any file content.
    let all = store.query_decisions(&DecisionQuery::default()).unwrap();
    assert_eq!(all.len(), 2);
    let dump = serde_json::to_string(&all).unwrap();
    assert!(
        !dump.contains("hunter2") && !dump.contains("alpha-content"),
        "{dump}"
    );
}

#[tokio::test]
async fn a_default_deny_is_flagged_in_the_audit_row() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let (gw, store, _) = gateway(&root, "read-only");
    let patch = "*** Begin Patch\n*** Add File: n.txt\n+x\n*** End Patch\n";
    let err = gw
        .call(
            &Session::stdio(),
            call("apply_patch", json!({"workspace_id": "w", "patch": patch})),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Unauthorized);
    let rows = store.query_decisions(&DecisionQuery::default()).unwrap();
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert!(rows[0].default_deny && rows[0].policy_ids.is_empty());
    assert_eq!(rows[0].subject, "add n.txt");
    assert!(!std::fs::exists(root.join("n.txt")).unwrap());
}

fn shipped() -> codespace_engine::policy::PolicySnapshot {
    compile(PolicySource::Embedded.read().unwrap()).unwrap()
}

#[test]
fn explain_of_a_denied_call_names_the_forbid_and_its_reason() {
    let snap = shipped();
    let fx = Fixture::new("w", "read-only");
    let x = explain_call(
        &snap,
        &profile_tree(&BTreeMap::new()),
        &fx.facts(),
        &Session::stdio(),
        &call("read", json!({"workspace_id": "w", "path": "config/.env"})),
        None,
    );
    assert!(!x.allowed());
    let denial = x.denial.clone().unwrap();
    assert!(denial.contains("base.forbid.secret-files"), "{denial}");
    assert!(
        denial.contains("files that usually hold secrets"),
        "{denial}"
    );
    let req = &x.requests[0];
    assert_eq!(req.cedar_decision, "deny");
    assert_eq!(
        req.principal,
        r#"CodeSpace::PermissionProfile::"read-only""#
    );
    assert_eq!(req.resource_attrs["basename"], ".env");
    let row = |id: &str| req.policies.iter().find(|p| p.id == id).unwrap();
    let forbid = row("base.forbid.secret-files");
    assert_eq!(
        (forbid.scope.clone(), forbid.condition.clone()),
        (Tri::True, Some(Tri::True))
    );
    assert!(forbid.determining && forbid.effect == "forbid");
    // The permit matched too, but a forbid wins; the exec permit's scope does not match.
    assert_eq!(row("read-only.permit.fs-read").condition, Some(Tri::True));
    assert!(!row("read-only.permit.fs-read").determining);
    assert_eq!(
        row("base.forbid.server-owned-files").condition,
        Some(Tri::False)
    );
    assert_eq!(row("workspace-write.permit.exec").scope, Tri::False);
    assert_eq!(row("workspace-write.permit.exec").condition, None);

    let text = render_text(&x);
    assert!(text.starts_with("DENY"), "{text}");
    assert!(text.contains("* base.forbid.secret-files"), "{text}");
    assert!(
        text.contains("reason: files that usually hold secrets"),
        "{text}"
    );
    let j = to_json(&x);
    assert_eq!(j["decision"], "deny");
    assert_eq!(
        j["requests"][0]["determining_policies"],
        json!(["base.forbid.secret-files"])
    );
}

#[test]
fn explain_agrees_with_decide_on_every_sub_request() {
    let snap = shipped();
    let fx = Fixture::new("w", "workspace-write");
    let x = explain_call(
        &snap,
        &profile_tree(&BTreeMap::new()),
        &fx.facts(),
        &Session::stdio(),
        &call(
            "exec_command",
            json!({"workspace_id": "w", "command": ["cargo", "test"]}),
        ),
        None,
    );
    assert!(x.allowed());
    let d = x.decision.clone().unwrap();
    assert_eq!(x.requests.len(), 3);
    for (r, s) in x.requests.iter().zip(d.subs.iter()) {
        assert_eq!(r.cedar_decision == "allow", s.allowed, "{}", r.action);
        let mut determining: Vec<&str> = r
            .policies
            .iter()
            .filter(|p| p.condition == Some(Tri::True) && (p.effect == "forbid" || s.allowed))
            .map(|p| p.id.as_str())
            .collect();
        determining.sort_unstable();
        let mut want: Vec<&str> = s.policy_ids.iter().map(String::as_str).collect();
        want.sort_unstable();
        assert_eq!(determining, want, "{}", r.action);
    }
    // process_network is a default deny: no policy holds.
    assert!(x.requests[2].determining.is_empty());
}

#[test]
fn explain_reports_a_request_builder_refusal_as_a_deny() {
    let snap = shipped();
    let fx = Fixture::new("w", "workspace-write");
    let x = explain_call(
        &snap,
        &profile_tree(&BTreeMap::new()),
        &fx.facts(),
        &Session::stdio(),
        &call(
            "read",
            json!({"workspace_id": "w", "path": "../etc/passwd"}),
        ),
        None,
    );
    assert!(!x.allowed());
    assert!(
        x.builder_error
            .as_deref()
            .unwrap()
            .starts_with("PATH_ESCAPE"),
        "{:?}",
        x.builder_error
    );
}

const PARAM_FILE: &str = r#"
workspace: { id: w, profile: read-only }
cases:
  - name: "reads {{path}}"
    call: { name: read, arguments: { workspace_id: w, path: "{{path}}" } }
    params: [{ path: a.txt, d: allow }, { path: .env, d: deny }, { path: id_rsa, d: deny }]
    decision: "{{d}}"
  - name: runs
    call: { name: exec_command, arguments: { workspace_id: w, command: "{{argv}}" } }
    params: [{ argv: [ls] }, { argv: [cargo, test] }]
    decision: deny
  - name: broken
    call: { name: read, arguments: { workspace_id: w, path: "{{nope}}" } }
    params: [{ path: a }]
    decision: allow
"#;

#[test]
fn parameterized_cases_expand_and_bad_placeholders_fail() {
    let snap = shipped();
    let results = run_file(&snap, "p.yaml", &parse_file(PARAM_FILE).unwrap());
    let names: Vec<&str> = results.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "reads a.txt",
            "reads .env",
            "reads id_rsa",
            "runs [argv=[\"ls\"]]",
            "runs [argv=[\"cargo\",\"test\"]]",
            "broken [path=a]",
        ]
    );
    assert!(results[..5].iter().all(|r| r.passed), "{results:#?}");
    let broken = &results[5];
    assert!(!broken.passed);
    assert!(
        broken.failures[0].contains("{{nope}}"),
        "{:?}",
        broken.failures
    );
}

#[test]
fn coverage_counts_determining_policies_and_reports_the_rest() {
    let snap = shipped();
    let file = parse_file(
        "workspace: { id: w, profile: read-only }\ncases:\n  - name: r\n    call: { name: read, arguments: { workspace_id: w, path: a } }\n    decision: allow\n",
    )
    .unwrap();
    let results = run_file(&snap, "one.yaml", &file);
    let cov = Coverage::of(&snap, &results);
    assert_eq!(
        cov.covered.iter().collect::<Vec<_>>(),
        ["read-only.permit.fs-read"]
    );
    assert!(cov.percent() < 10.0, "{}", cov.percent());
    assert!(
        cov.uncovered()
            .contains(&"base.forbid.secret-files".to_string())
    );
    assert_eq!(cov.uncovered().len(), snap.meta.len() - 1);
}

#[test]
fn cedar_export_has_one_case_per_sub_request_in_run_tests_shape() {
    let snap = shipped();
    let file = parse_file(PARAM_FILE).unwrap();
    let out = run_file_with(
        &snap,
        "p.yaml",
        &file,
        RunOptions {
            emit_cedar: true,
            ..RunOptions::default()
        },
    );
    // 3 reads (1 request each) + 2 exec calls (3 requests each, plus the `confirm` request the
    // server asks beside them); the broken case emits nothing.
    let cases: Vec<_> = out.iter().flat_map(|o| o.cedar.iter()).collect();
    assert_eq!(cases.len(), 3 + 2 * 4);
    assert_eq!(
        cases
            .iter()
            .filter(|c| c["request"]["action"] == r#"CodeSpace::Action::"confirm""#)
            .count(),
        2
    );
    let env = cases[1];
    assert_eq!(env["decision"], "deny");
    assert_eq!(env["reason"], json!(["base.forbid.secret-files"]));
    assert_eq!(env["num_errors"], 0);
    assert_eq!(env["request"]["action"], r#"CodeSpace::Action::"read""#);
    let ents = env["entities"].as_array().unwrap();
    assert!(
        ents.iter()
            .any(|e| e["uid"]["type"] == "CodeSpace::Operation" && e["attrs"]["path"] == ".env")
    );
    assert!(ents.iter().all(|e| e["uid"]["type"] != "CodeSpace::Action"));
}
