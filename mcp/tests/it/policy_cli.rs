//! The security-team CLI as a CI job runs it: `policy test` with parameterized cases, report
//! formats, coverage thresholds, `--fail-on-empty` and the cedar export; `policy explain` exit
//! codes; the worked example profile of docs/policy.md.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::cli_common::{repo, run};
use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_codespace");

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).to_string()
}

fn last_line(s: &str) -> &str {
    s.lines().last().unwrap_or("")
}

#[test]
fn shipped_tests_pass_with_full_coverage() {
    let o = run(&["policy", "test", "--coverage-min", "100", "--fail-on-empty"]);
    let out = stdout(&o);
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("(100.0%)"), "{out}");
    assert!(last_line(&out).ends_with(" passed, 0 failed"), "{out}");
}

#[test]
fn coverage_below_the_threshold_fails() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("one.yaml");
    std::fs::write(
        &f,
        "workspace: { id: w, profile: read-only }\ncases:\n  - name: reads\n    call: { name: read, arguments: { workspace_id: w, path: a } }\n    decision: allow\n",
    )
    .unwrap();
    let f = f.to_str().unwrap();
    let o = run(&["policy", "test", f, "--coverage-min", "50"]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    // One policy of the shipped set decides the single case: far below 50 %, whatever the
    // number of shipped policies.
    assert!(
        out.contains("FAILED policy coverage ") && out.contains("% is below --coverage-min 50"),
        "{out}"
    );
    assert!(out.contains("coverage: 1/"), "{out}");
    assert!(out.contains("uncovered: base.forbid.secret-files"), "{out}");
    assert_eq!(last_line(&out), "1 passed, 0 failed");
    // The same run without a threshold passes.
    assert!(run(&["policy", "test", f]).status.success());
}

#[test]
fn fail_on_empty_fails_when_nothing_ran() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("empty.yaml");
    std::fs::write(&f, "workspace: { id: w, profile: read-only }\ncases: []\n").unwrap();
    let f = f.to_str().unwrap();
    assert!(run(&["policy", "test", f]).status.success());
    let o = run(&["policy", "test", f, "--fail-on-empty"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("no test case ran"), "{}", stdout(&o));
    assert_eq!(last_line(&stdout(&o)), "0 passed, 0 failed");
}

#[test]
fn json_and_junit_reports() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("mixed.yaml");
    std::fs::write(
        &f,
        "workspace: { id: w, profile: read-only }\ncases:\n  - name: \"read {{p}}\"\n    call: { name: read, arguments: { workspace_id: w, path: \"{{p}}\" } }\n    params: [{ p: a.rs }, { p: .env }]\n    decision: allow\n",
    )
    .unwrap();
    let f = f.to_str().unwrap();
    let o = run(&["policy", "test", f, "--format", "json"]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (v["passed"].as_u64(), v["failed"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(v["cases"][1]["name"], "read .env");
    assert!(
        v["cases"][1]["failures"][0]
            .as_str()
            .unwrap()
            .contains("expected allow, got deny")
    );
    assert!(String::from_utf8_lossy(&o.stderr).ends_with("1 passed, 1 failed\n"));

    let xml = dir.path().join("r.xml");
    let o = run(&[
        "policy",
        "test",
        f,
        "--format",
        "junit",
        "--output",
        xml.to_str().unwrap(),
    ]);
    assert_eq!(last_line(&stdout(&o)), "1 passed, 1 failed");
    let x = std::fs::read_to_string(&xml).unwrap();
    assert!(x.starts_with("<?xml"), "{x}");
    assert!(
        x.contains(r#"<testcase name="read a.rs" classname=""#)
            && x.contains(r#"<testcase name="read .env" classname=""#)
            && x.contains(
                r#"<failure message="decision: expected allow, got deny: denied by policy: read `.env`: forbidden by base.forbid.secret-files"#
            ),
        "{x}"
    );
    assert!(
        x.contains(
            r#"<testsuites name="codespace policy test" tests="2" skipped="0" failures="1""#
        ),
        "{x}"
    );
}

#[test]
fn emit_cedar_writes_run_tests_files() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("cedar");
    let o = run(&["policy", "test", "--emit-cedar", out_dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stdout(&o));
    let v: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out_dir.join("read-only.cedartests.json")).unwrap(),
    )
    .unwrap();
    let cases = v.as_array().unwrap();
    assert!(cases.len() >= 13);
    for c in cases {
        for k in [
            "name",
            "request",
            "entities",
            "decision",
            "reason",
            "num_errors",
        ] {
            assert!(c.get(k).is_some(), "{k} missing in {c}");
        }
    }
}

#[test]
fn explain_exits_2_on_deny_and_0_on_allow() {
    let deny = run(&[
        "policy",
        "explain",
        "--workspace-profile",
        "read-only",
        "--call",
        r#"{"name":"read","arguments":{"workspace_id":"w","path":"keys/server.pem"}}"#,
    ]);
    let out = stdout(&deny);
    assert_eq!(deny.status.code(), Some(2), "{out}");
    assert!(
        out.contains("forbidden by base.forbid.secret-files: files that usually hold secrets"),
        "{out}"
    );
    assert!(out.contains("* base.forbid.secret-files"), "{out}");
    let allow = run(&[
        "policy",
        "explain",
        "--json",
        "--call",
        r#"{"name":"exec_command","arguments":{"workspace_id":"w","command":["cargo","test"]}}"#,
    ]);
    assert_eq!(allow.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&allow.stdout).unwrap();
    assert_eq!(v["decision"], "allow");
    assert_eq!(v["requests"].as_array().unwrap().len(), 3);
    assert_eq!(v["requests"][2]["action"], "process_network");
    assert_eq!(v["requests"][2]["decision"], "deny");
}

/// The worked example of docs/policy.md, rolled out the way an operator would: copy the profile
/// into a policies directory and run its tests with the shipped ones.
#[test]
fn the_cargo_tester_example_passes_its_tests() {
    let dir = tempfile::tempdir().unwrap();
    let pol = dir.path().join("policies");
    for sub in ["base", "profiles"] {
        std::fs::create_dir_all(pol.join(sub)).unwrap();
        for e in std::fs::read_dir(repo().join("policies").join(sub)).unwrap() {
            let p = e.unwrap().path();
            std::fs::copy(&p, pol.join(sub).join(p.file_name().unwrap())).unwrap();
        }
    }
    std::fs::copy(
        repo().join("policies/examples/profiles/cargo-tester.cedar"),
        pol.join("profiles/cargo-tester.cedar"),
    )
    .unwrap();
    let example = repo().join("policies/examples/tests/cargo-tester.yaml");
    let schema = repo().join("schema/codespace.cedarschema");
    let o = run(&[
        "policy",
        "test",
        "--policies",
        pol.to_str().unwrap(),
        "--schema",
        schema.to_str().unwrap(),
        "--fail-on-empty",
        example.to_str().unwrap(),
    ]);
    let out = stdout(&o);
    assert!(o.status.success(), "{out}");
    for id in [
        "cargo-tester.permit.cargo-test",
        "cargo-tester.permit.cargo-test-writes",
        "cargo-tester.permit.own-cargo-test-io",
    ] {
        assert!(
            !out.contains(&format!("uncovered: {id}")),
            "{id} not exercised:\n{out}"
        );
    }
    assert!(
        out.contains("runs nothing else [argv=[\"/tmp/evil/cargo\",\"test\"]]"),
        "{out}"
    );
    assert_eq!(last_line(&out), "27 passed, 0 failed");
}

#[test]
fn audit_since_accepts_rfc3339_unix_ms_and_ages() {
    use codespace_mcp::policy_cli::parse_since;
    let now = 1_800_000_000_000;
    assert_eq!(
        parse_since("1700000000000", now).unwrap(),
        1_700_000_000_000
    );
    assert_eq!(parse_since("2h", now).unwrap(), now - 7_200_000);
    assert_eq!(parse_since("15m", now).unwrap(), now - 900_000);
    assert_eq!(
        parse_since("2023-11-14T22:13:20Z", now).unwrap(),
        1_700_000_000_000
    );
    assert!(parse_since("yesterday", now).is_err());
}

/// The approvals example of docs/policy.md ("Who may answer"): the reviewer base policy copied
/// into a policies directory passes its tests and is exercised by them.
#[test]
fn the_approval_reviewer_example_passes_its_tests() {
    let dir = tempfile::tempdir().unwrap();
    let pol = dir.path().join("policies");
    for sub in ["base", "profiles"] {
        std::fs::create_dir_all(pol.join(sub)).unwrap();
        for e in std::fs::read_dir(repo().join("policies").join(sub)).unwrap() {
            let p = e.unwrap().path();
            std::fs::copy(&p, pol.join(sub).join(p.file_name().unwrap())).unwrap();
        }
    }
    std::fs::copy(
        repo().join("policies/examples/profiles/approval-reviewer.cedar"),
        pol.join("profiles/approval-reviewer.cedar"),
    )
    .unwrap();
    let example = repo().join("policies/examples/tests/approval-reviewer.yaml");
    let schema = repo().join("schema/codespace.cedarschema");
    let o = run(&[
        "policy",
        "test",
        "--policies",
        pol.to_str().unwrap(),
        "--schema",
        schema.to_str().unwrap(),
        "--fail-on-empty",
        example.to_str().unwrap(),
    ]);
    let out = stdout(&o);
    assert!(o.status.success(), "{out}");
    assert!(
        !out.contains("uncovered: approval-reviewer.permit.review-bot"),
        "{out}"
    );
    assert_eq!(last_line(&out), "3 passed, 0 failed");
}

/// The environment guardrails of docs/environments.md ("commands only in containers", "network
/// only on ssh host X"), each copied into a policies directory with the shipped set (the way an
/// operator rolls one out), pass their tests and are exercised by them.
#[test]
fn the_environment_guardrail_examples_pass_their_tests() {
    for (example, tests, passed) in [
        (
            "commands-only-in-containers",
            &["", "-host", "-ssh"][..],
            "5 passed, 0 failed",
        ),
        (
            "network-only-on-ssh-host",
            &["", "-other", "-local"][..],
            "4 passed, 0 failed",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let pol = dir.path().join("policies");
        for sub in ["base", "profiles"] {
            std::fs::create_dir_all(pol.join(sub)).unwrap();
            for e in std::fs::read_dir(repo().join("policies").join(sub)).unwrap() {
                let p = e.unwrap().path();
                std::fs::copy(&p, pol.join(sub).join(p.file_name().unwrap())).unwrap();
            }
        }
        std::fs::copy(
            repo().join(format!("policies/examples/environments/{example}.cedar")),
            pol.join("base").join(format!("{example}.cedar")),
        )
        .unwrap();
        let schema = repo().join("schema/codespace.cedarschema");
        let mut args: Vec<String> = vec![
            "policy".into(),
            "test".into(),
            "--policies".into(),
            pol.display().to_string(),
            "--schema".into(),
            schema.display().to_string(),
            "--fail-on-empty".into(),
        ];
        for t in tests {
            args.push(
                repo()
                    .join(format!(
                        "policies/examples/environments/tests/{example}{t}.yaml"
                    ))
                    .display()
                    .to_string(),
            );
        }
        let o = run(&args.iter().map(String::as_str).collect::<Vec<_>>());
        let out = stdout(&o);
        assert!(o.status.success(), "{example}: {out}");
        assert!(!out.contains(&format!("uncovered: {example}.")), "{out}");
        assert_eq!(last_line(&out), passed, "{example}");
    }
}

/// `codespace …` run in `cwd` (a directory outside the checkout in the tests below).
fn run_in(cwd: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .current_dir(cwd)
        .env_remove("CODESPACE_CONFIG")
        .output()
        .unwrap()
}

fn both(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The `sha256:…` after `set ` in `policy validate`'s line.
fn set_hash(out: &str) -> String {
    out.split("; set ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no set hash in {out}"))
        .to_string()
}

#[test]
fn the_embedded_tests_run_outside_a_checkout_with_full_coverage() {
    let dir = tempfile::tempdir().unwrap();
    let o = run_in(
        dir.path(),
        &["policy", "test", "--coverage-min", "100", "--fail-on-empty"],
    );
    let out = stdout(&o);
    assert!(o.status.success(), "{}", both(&o));
    assert!(out.contains("ok     embedded:policies/tests/"), "{out}");
    assert!(out.contains("(100.0%)"), "{out}");
    let passed: usize = last_line(&out).split(' ').next().unwrap().parse().unwrap();
    assert!(passed > 100, "{out}");
    assert!(last_line(&out).ends_with(" passed, 0 failed"), "{out}");
}

#[test]
fn policy_init_writes_a_set_whose_tests_pass_and_never_overwrites() {
    let dir = tempfile::tempdir().unwrap();
    // Into the (empty) current directory, outside any checkout.
    let o = run_in(dir.path(), &["policy", "init", "."]);
    assert!(o.status.success(), "{}", both(&o));
    for f in [
        "policies/base/guardrails.cedar",
        "policies/profiles/read-only.cedar",
        "policies/examples/profiles/cargo-tester.cedar",
        "policies/tests/read-only.yaml",
        "schema/codespace.cedarschema",
    ] {
        assert_eq!(
            std::fs::read(dir.path().join(f)).unwrap(),
            std::fs::read(repo().join(f)).unwrap(),
            "{f}"
        );
    }
    let readme = std::fs::read_to_string(dir.path().join("README.md")).unwrap();
    assert!(readme.contains("Edit `policies/profiles/`"), "{readme}");
    let o = run_in(
        dir.path(),
        &["policy", "test", "--coverage-min", "100", "--fail-on-empty"],
    );
    assert!(o.status.success(), "{}", both(&o));
    assert!(stdout(&o).contains("(100.0%)"), "{}", both(&o));
    // The exported files hash as the embedded set does.
    let exported = run_in(dir.path(), &["policy", "validate"]);
    assert!(exported.status.success(), "{}", both(&exported));
    let elsewhere = tempfile::tempdir().unwrap();
    let embedded = run_in(elsewhere.path(), &["policy", "validate"]);
    assert_eq!(set_hash(&stdout(&exported)), set_hash(&stdout(&embedded)));

    // A non-empty directory, or a file, is refused and nothing is changed.
    std::fs::write(
        dir.path().join("policies/profiles/read-only.cedar"),
        "// mine\n",
    )
    .unwrap();
    let o = run_in(dir.path(), &["policy", "init", "."]);
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("is not empty"),
        "{}",
        both(&o)
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("policies/profiles/read-only.cedar")).unwrap(),
        "// mine\n"
    );
    let file = dir.path().join("README.md");
    let o = run_in(dir.path(), &["policy", "init", file.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("is not a directory"),
        "{}",
        both(&o)
    );
    // A new directory (and its parents) is created.
    let fresh = dir.path().join("a/b");
    let o = run_in(dir.path(), &["policy", "init", fresh.to_str().unwrap()]);
    assert!(o.status.success(), "{}", both(&o));
    assert!(fresh.join("policies/tests/guardrails.yaml").is_file());
}

#[test]
fn policy_test_without_test_files_says_so_instead_of_zero_coverage() {
    let dir = tempfile::tempdir().unwrap();
    let o = run_in(dir.path(), &["policy", "init", "."]);
    assert!(o.status.success(), "{}", both(&o));
    std::fs::remove_dir_all(dir.path().join("policies/tests")).unwrap();
    let o = run_in(dir.path(), &["policy", "test"]);
    assert!(o.status.success(), "{}", both(&o));
    let out = stdout(&o);
    assert!(out.contains("no test files under policies/tests"), "{out}");
    assert!(!out.contains("coverage:"), "{out}");
    let o = run_in(dir.path(), &["policy", "test", "--coverage-min", "100"]);
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    assert!(stdout(&o).contains("no test files under"), "{}", both(&o));
}

#[test]
fn the_embedded_set_hashes_as_the_same_files_on_disk_and_says_embedded() {
    let elsewhere = tempfile::tempdir().unwrap();
    let embedded = run_in(elsewhere.path(), &["policy", "validate"]);
    assert!(embedded.status.success(), "{}", both(&embedded));
    let e = stdout(&embedded);
    assert!(e.contains("against the embedded schema"), "{e}");
    assert!(!e.contains("schema/codespace.cedarschema"), "{e}");
    let policies = repo().join("policies");
    let on_disk = run_in(
        elsewhere.path(),
        &[
            "policy",
            "validate",
            "--policies",
            policies.to_str().unwrap(),
        ],
    );
    assert!(on_disk.status.success(), "{}", both(&on_disk));
    let d = stdout(&on_disk);
    assert!(d.contains("codespace.cedarschema"), "{d}");
    assert_eq!(set_hash(&e), set_hash(&d), "{e}\n{d}");
}
