//! Policy operations for security teams, end to end on the binary: test ergonomics (contract
//! error texts, determining policies in failures, coverage gates in JUnit/JSON, `--filter`),
//! one source of truth for profiles (`--config`), the explain JSON, and `audit` into a pipe
//! that closes early.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::cli_common::{repo, run};
use serde_json::json;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_codespace");

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).to_string()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

/// A copy of the shipped policies (and schema) in `root/policies`, plus `extra` files.
fn policies_copy(root: &Path, extra: &[(&str, &str)]) -> PathBuf {
    let pol = root.join("policies");
    for sub in ["base", "profiles"] {
        std::fs::create_dir_all(pol.join(sub)).unwrap();
        for e in std::fs::read_dir(repo().join("policies").join(sub)).unwrap() {
            let p = e.unwrap().path();
            std::fs::copy(&p, pol.join(sub).join(p.file_name().unwrap())).unwrap();
        }
    }
    std::fs::create_dir_all(root.join("schema")).unwrap();
    std::fs::copy(
        repo().join("schema/codespace.cedarschema"),
        root.join("schema/codespace.cedarschema"),
    )
    .unwrap();
    for (name, text) in extra {
        write(&pol, name, text);
    }
    pol
}

const MIXED: &str = r#"workspace: { id: w, profile: read-only }
cases:
  - name: typo tool
    call: { name: reed, arguments: { workspace_id: w, path: a } }
    decision: allow
  - name: missing argument
    call: { name: read, arguments: { workspace_id: w } }
    decision: allow
  - name: reads the env file
    call: { name: read, arguments: { workspace_id: w, path: .env } }
    decision: allow
  - name: writes
    call: { name: apply_patch, arguments: { workspace_id: w, patch: "*** Begin Patch\n*** Add File: a\n+x\n*** End Patch\n" } }
    decision: deny
    reason: [read-only.permit.fs-read]
  - name: reads a source file
    call: { name: read, arguments: { workspace_id: w, path: src/a.rs } }
    decision: allow
"#;

#[test]
fn test_failures_speak_contract_terms_and_name_the_determining_policies() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "mixed.yaml", MIXED);
    let o = run(&["policy", "test", &f]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("call: tool not found: `reed` (did you mean `read`?)"),
        "{out}"
    );
    assert!(!out.contains("UnknownTool"), "{out}");
    assert!(
        out.contains("refused before Cedar (INVALID_ARGUMENTS: `path` (or `paths`) is required)"),
        "{out}"
    );
    assert!(
        out.contains("decision: expected allow, got deny: denied by policy: read `.env`: forbidden by base.forbid.secret-files: files that usually hold secrets"),
        "{out}"
    );
    assert!(
        out.contains("reason: expected read-only.permit.fs-read among the determining policies, got [] (default deny: no policy permits it)"),
        "{out}"
    );
    assert!(out.ends_with("1 passed, 4 failed\n"), "{out}");
}

#[test]
fn filter_runs_only_the_matching_cases() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "mixed.yaml", MIXED);
    let o = run(&["policy", "test", &f, "--filter", "source file"]);
    let out = stdout(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("ok     "), "{out}");
    assert!(!out.contains("typo tool"), "{out}");
    assert!(out.ends_with("1 passed, 0 failed\n"), "{out}");
}

#[test]
fn a_missed_coverage_threshold_is_a_failing_junit_case_and_threshold_met_false() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        dir.path(),
        "one.yaml",
        "workspace: { id: w, profile: read-only }\ncases:\n  - name: reads\n    call: { name: read, arguments: { workspace_id: w, path: a } }\n    decision: allow\n",
    );
    let o = run(&[
        "policy",
        "test",
        &f,
        "--coverage-min",
        "50",
        "--format",
        "junit",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let x = stdout(&o);
    assert!(
        x.contains(
            r#"<testsuites name="codespace policy test" tests="2" skipped="0" failures="1""#
        ),
        "{x}"
    );
    assert!(
        x.contains(r#"<testcase name="policy coverage &gt;= 50% (--coverage-min)" classname="policy test gates">"#)
            && x.contains(r#"<failure message="policy coverage "#)
            && x.contains("% is below --coverage-min 50"),
        "{x}"
    );
    let o = run(&[
        "policy",
        "test",
        &f,
        "--coverage-min",
        "50",
        "--format",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["coverage"]["threshold_met"], json!(false), "{v}");
    assert_eq!(v["coverage"]["threshold"], json!(50.0), "{v}");
    assert_eq!(v["gates_passed"], json!(false), "{v}");
    assert_eq!(v["failed"], json!(0), "{v}");
    // Met: the gate passes (one read case determines a couple of the ~25 shipped policies).
    let o = run(&[
        "policy",
        "test",
        &f,
        "--coverage-min",
        "1",
        "--format",
        "json",
    ]);
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["coverage"]["threshold_met"], json!(true), "{v}");
}

#[test]
fn explain_json_reports_scope_matched_as_a_boolean() {
    let o = run(&[
        "policy",
        "explain",
        "--json",
        "--workspace-profile",
        "read-only",
        "--call",
        r#"{"name":"read","arguments":{"workspace_id":"w","path":".env"}}"#,
    ]);
    assert_eq!(o.status.code(), Some(2));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let policies = v["requests"][0]["policies"].as_array().unwrap();
    let by_id = |id: &str| policies.iter().find(|p| p["id"] == id).unwrap().clone();
    assert_eq!(
        by_id("base.forbid.secret-files")["scope_matched"],
        json!(true)
    );
    assert_eq!(by_id("base.forbid.secret-files")["condition"], json!(true));
    assert_eq!(
        by_id("workspace-write.permit.fs-write")["scope_matched"],
        json!(false)
    );
    assert_eq!(
        by_id("workspace-write.permit.fs-write")["condition"],
        json!(null)
    );
    assert_eq!(
        by_id("base.forbid.git-metadata-write")["scope_matched"],
        json!(false)
    );
    // Unknown tool: the contract's words, not Rust debug text.
    let o = run(&[
        "policy",
        "explain",
        "--call",
        r#"{"name":"reed","arguments":{"workspace_id":"w","path":"a"}}"#,
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("tool not found: `reed` (did you mean `read`?)"),
        "{}",
        stderr(&o)
    );
}

const SRC_WRITER: &str = r#"// Operator profile: read-only plus writes under src/.
@id("src-writer.permit.src")
permit (
  principal in CodeSpace::PermissionProfile::"src-writer",
  action == CodeSpace::Action::"apply_patch",
  resource
)
when { resource.path like "src/*" };
"#;

const SRC_WRITER_TESTS: &str = r#"workspace: { id: w, profile: src-writer }
cases:
  - name: inherits reads from read-only
    call: { name: read, arguments: { workspace_id: w, path: README.md } }
    decision: allow
    reason: [read-only.permit.fs-read]
  - name: writes src
    call: { name: apply_patch, arguments: { workspace_id: w, patch: "*** Begin Patch\n*** Add File: src/x.rs\n+x\n*** End Patch\n" } }
    decision: allow
"#;

fn operator_config(root: &Path, pol: &Path, profile_id: &str) -> String {
    let ws = root.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    write(
        root,
        "codespace.json",
        &serde_json::to_string_pretty(&json!({
            "policies": pol,
            "schema": root.join("schema/codespace.cedarschema"),
            "store": root.join("audit.db"),
            "profiles": {profile_id: {"extends": "read-only"}},
            "workspaces": {"w": {"root": ws, "profile": profile_id}},
        }))
        .unwrap(),
    )
}

#[test]
fn policy_test_uses_the_config_profile_tree() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let pol = policies_copy(
        &root,
        &[
            ("profiles/src-writer.cedar", SRC_WRITER),
            ("tests/src-writer.yaml", SRC_WRITER_TESTS),
        ],
    );
    let cfg = operator_config(&root, &pol, "src-writer");
    // With the config: the file does not redeclare `profiles:`, and `extends` still applies.
    let o = run(&["policy", "test", "--config", &cfg]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).ends_with("2 passed, 0 failed\n"),
        "{}",
        stdout(&o)
    );
    // Without it, the profile is unknown: the set is refused with a pointer, never tested as
    // a parentless profile.
    let o = run(&["policy", "test", "--policies", pol.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("policy src-writer.permit.src: unknown profile `src-writer`"),
        "{}",
        stderr(&o)
    );
    // validate --config agrees with test --config.
    let o = run(&["policy", "validate", "--config", &cfg]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn a_misspelled_profile_is_a_validation_error_with_a_suggestion() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let pol = policies_copy(
        &root,
        &[(
            "profiles/src-writer.cedar",
            &SRC_WRITER.replace(
                "PermissionProfile::\"src-writer\"",
                "PermissionProfile::\"src-writter\"",
            ),
        )],
    );
    let cfg = operator_config(&root, &pol, "src-writer");
    let o = run(&["policy", "validate", "--config", &cfg]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let err = stderr(&o);
    assert!(
        err.contains("profiles/src-writer.cedar:2: policy src-writer.permit.src: unknown profile `src-writter` (did you mean `src-writer`?)"),
        "{err}"
    );
    // The server refuses to start with it, too.
    let o = Command::new(BIN)
        .args(["serve", "--config", &cfg])
        .stdin(Stdio::null())
        .env("HOME", &root)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("unknown profile `src-writter`"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn audit_json_into_a_pipe_closed_early_exits_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("audit.db");
    let store = codespace_store::Store::open(&db).unwrap();
    let rows: Vec<codespace_store::DecisionRow> = (0..3000)
        .map(|i| codespace_store::DecisionRow {
            decision_id: format!("dec-{i:06}"),
            at_ms: 1_700_000_000_000 + i,
            policy_set_sha256: "sha256:".to_string() + &"ab".repeat(32),
            profile: "read-only".into(),
            workspace: "w".into(),
            tool: "read".into(),
            action: "read".into(),
            sub_index: 0,
            subject: format!("src/file-{i}.rs"),
            client: Some("local".into()),
            transport: Some("stdio".into()),
            decision: "allow".into(),
            policy_ids: vec!["read-only.permit.fs-read".into()],
            errors: vec![],
            default_deny: false,
            duration_us: 10,
            ..Default::default()
        })
        .collect();
    store.insert_decisions(&rows).unwrap();
    drop(store);
    for extra in [&["--json"][..], &[][..]] {
        let mut child = Command::new(BIN)
            .args(["audit", "--store", db.to_str().unwrap()])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .env_remove("CODESPACE_CONFIG")
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        for _ in 0..3 {
            lines.next().unwrap().unwrap();
        }
        drop(lines); // `| head -3`
        let status = child.wait().unwrap();
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
        assert!(!err.contains("panicked"), "{err}");
        assert!(!err.contains("Broken pipe"), "{err}");
        assert!(status.success(), "{status:?} {err}");
    }
}

#[test]
fn policy_ls_lists_ids_effects_locations_and_reasons() {
    let o = run(&["policy", "ls", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let rows: Vec<serde_json::Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let secret = rows
        .iter()
        .find(|r| r["id"] == "base.forbid.secret-files")
        .unwrap();
    assert_eq!(secret["effect"], "forbid");
    assert_eq!(secret["file"], "base/guardrails.cedar");
    assert!(secret["line"].as_u64().unwrap() > 1);
    assert!(secret["reason"].as_str().unwrap().contains("secrets"));
    let read = rows
        .iter()
        .find(|r| r["id"] == "read-only.permit.fs-read")
        .unwrap();
    assert_eq!(read["effect"], "permit");
    assert_eq!(read["reason"], json!(null));
    let text = stdout(&run(&["policy", "ls"]));
    assert!(text.contains("read-only.permit.fs-read"), "{text}");
    assert!(text.contains("profiles/read-only.cedar:"), "{text}");
}

#[test]
fn policy_unused_lists_the_policies_that_decided_nothing_in_the_window() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("audit.db");
    let store = codespace_store::Store::open(&db).unwrap();
    let now = codespace_store::now_ms();
    let row = |id: &str, at_ms: i64, policy: &str| codespace_store::DecisionRow {
        decision_id: id.into(),
        at_ms,
        decision: "allow".into(),
        policy_ids: vec![policy.into()],
        ..Default::default()
    };
    store
        .insert_decisions(&[
            row("d-new", now, "read-only.permit.fs-read"),
            // Older than the window: does not count.
            row("d-old", now - 3 * 86_400_000, "base.forbid.secret-files"),
        ])
        .unwrap();
    drop(store);
    let o = run(&[
        "policy",
        "unused",
        "--since",
        "1d",
        "--store",
        db.to_str().unwrap(),
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let ids: Vec<&str> = v["unused"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["id"].as_str().unwrap())
        .collect();
    assert!(!ids.contains(&"read-only.permit.fs-read"), "{ids:?}");
    assert!(ids.contains(&"base.forbid.secret-files"), "{ids:?}");
    assert_eq!(ids.len(), v["policies"].as_u64().unwrap() as usize - 1);
}

#[test]
fn policy_fmt_checks_then_formats_keeping_comments_and_annotations() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let messy = "// Operator profile: writes under src/.\n@id(\"src-writer.permit.src\")\npermit (principal in CodeSpace::PermissionProfile::\"src-writer\", action == CodeSpace::Action::\"apply_patch\", resource) when { resource.path like \"src/*\" };\n";
    let pol = policies_copy(&root, &[("profiles/src-writer.cedar", messy)]);
    let file = pol.join("profiles/src-writer.cedar");
    let pol_s = pol.to_str().unwrap();
    let o = run(&["policy", "fmt", "--check", "--policies", pol_s]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stdout(&o).contains(&format!("would reformat {}", file.display())),
        "{}",
        stdout(&o)
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        messy,
        "--check changes nothing"
    );
    let o = run(&["policy", "fmt", "--policies", pol_s]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    let pretty = std::fs::read_to_string(&file).unwrap();
    assert_ne!(pretty, messy);
    assert!(
        pretty.starts_with("// Operator profile: writes under src/.\n"),
        "{pretty}"
    );
    assert!(
        pretty.contains("@id(\"src-writer.permit.src\")"),
        "{pretty}"
    );
    assert!(
        pretty.contains("\n  principal in CodeSpace::PermissionProfile::\"src-writer\",\n"),
        "{pretty}"
    );
    // Formatted now: --check passes, and the set still validates.
    let o = run(&["policy", "fmt", "--check", "--policies", pol_s]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
}

#[test]
fn coverage_reports_the_alternatives_of_or_chains_no_case_reaches() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        dir.path(),
        "env.yaml",
        "workspace: { id: w, profile: read-only }\ncases:\n  - name: env\n    call: { name: read, arguments: { workspace_id: w, path: .env } }\n    decision: deny\n  - name: pem\n    call: { name: read, arguments: { workspace_id: w, path: k.pem } }\n    decision: deny\n",
    );
    let o = run(&["policy", "test", &f]);
    let out = stdout(&o);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("unreached: base.forbid.secret-files#5  resource.basename like \"id_rsa*\""),
        "{out}"
    );
    assert!(
        !out.contains("unreached: base.forbid.secret-files#1 "),
        "{out}"
    );
    let o = run(&["policy", "test", &f, "--format", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let unreached: Vec<&str> = v["coverage"]["unreached_alternatives"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["alternative"].as_str().unwrap())
        .collect();
    assert!(
        unreached.contains(&"base.forbid.secret-files#2"),
        "{unreached:?}"
    );
    assert!(
        !unreached.contains(&"base.forbid.secret-files#1"),
        "{unreached:?}"
    );
    assert!(
        !unreached.contains(&"base.forbid.secret-files#3"),
        "{unreached:?}"
    );
    // The shipped tests reach every alternative.
    let out = stdout(&run(&["policy", "test"]));
    assert!(out.contains("alternatives: 44/44 alternatives"), "{out}");
}

/// Whether cvc5 can be found; skips when not (`codespace_test_skip`: fails under
/// `CODESPACE_REQUIRE_ISOLATION=1`; scripts/test.sh installs it).
fn have_solver() -> bool {
    let found = std::env::var_os("CVC5").is_some_and(|p| Path::new(&p).is_file())
        || std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("cvc5").is_file()));
    codespace_test_skip::require(
        found,
        &codespace_test_skip::this_test(),
        "cvc5 is not installed (scripts/test.sh installs it)",
    )
}

#[test]
fn verify_without_a_solver_says_so_and_exits_4() {
    let o = Command::new(BIN)
        .args(["policy", "verify"])
        .current_dir(repo())
        .env_remove("CODESPACE_CONFIG")
        .env("CVC5", "/nonexistent/cvc5")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(4), "{}", stdout(&o));
    assert!(
        stderr(&o).contains("no SMT solver found; nothing was proven"),
        "{}",
        stderr(&o)
    );
    assert!(!stdout(&o).contains("proven"), "{}", stdout(&o));
}

#[test]
fn verify_proves_the_shipped_set_and_refutes_a_widening_with_a_replayed_counterexample() {
    if !have_solver() {
        return;
    }
    let o = run(&["policy", "verify"]);
    let out = stdout(&o);
    assert!(o.status.success(), "{out}{}", stderr(&o));
    assert!(
        out.contains(
            "proven  read-only never permits fs_write, proc_spawn, proc_io, sandbox or net"
        ),
        "{out}"
    );
    assert!(out.contains("proven  every policy never errors"), "{out}");
    assert!(out.contains("5 of 5 properties proven"), "{out}");

    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let pol = policies_copy(
        &root,
        &[(
            "profiles/make.cedar",
            "@id(\"read-only.permit.make\")\npermit (principal in CodeSpace::PermissionProfile::\"read-only\", action == CodeSpace::Action::\"exec_command\", resource)\nwhen { context has command && context.command.program == \"make\" };\n",
        )],
    );
    let shipped = repo().join("policies");
    let o = run(&[
        "policy",
        "verify",
        "--policies",
        pol.to_str().unwrap(),
        "--implies",
        shipped.to_str().unwrap(),
    ]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains(
            "FAILED  read-only never permits fs_write, proc_spawn, proc_io, sandbox or net"
        ),
        "{out}"
    );
    assert!(out.contains("\"program\": \"make\""), "{out}");
    assert!(
        out.contains("the authorizer says allow under the set (by read-only.permit.make); the authorizer says deny under OLD"),
        "{out}"
    );
}

/// `confirm` has reversed polarity in `policy verify --implies`: dropping the shipped hold
/// (fewer calls wait for a human) is refused as more permissive; adding a hold is not.
#[test]
fn verify_treats_confirm_with_reversed_polarity() {
    if !have_solver() {
        return;
    }
    let shipped = repo().join("policies");
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let more_holds = policies_copy(
        &root,
        &[(
            "base/push.cedar",
            "@id(\"base.confirm.git-push\")\npermit (principal, action == CodeSpace::Action::\"confirm\", resource)\nwhen { context has command && context.command.prefixes.contains(\"git push\") };\n",
        )],
    );
    let o = run(&[
        "policy",
        "verify",
        "--policies",
        more_holds.to_str().unwrap(),
        "--implies",
        shipped.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));

    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let fewer_holds = policies_copy(&root, &[]);
    std::fs::remove_file(fewer_holds.join("base/approvals.cedar")).unwrap();
    let o = run(&[
        "policy",
        "verify",
        "--policies",
        fewer_holds.to_str().unwrap(),
        "--implies",
        shipped.to_str().unwrap(),
    ]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{out}{}", stderr(&o));
    assert!(out.contains("the set no longer holds it"), "{out}");
}
