//! A policy test runner that cannot be fooled, through the real binary: a call the request
//! builder refuses before Cedar is `refused`, not a passing `deny`; placeholders in map keys;
//! per-profile and per-action coverage gates; tests on hot reload on by default; the shipped
//! set is `policy fmt --check` clean and its hash does not depend on formatting.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::cli_common::{both, repo, run};
use crate::stdio_common;

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use stdio_common::StdioServer;

const DEADLINE: Duration = Duration::from_secs(30);

fn write_case(dir: &Path, name: &str, yaml: &str) -> String {
    let f = dir.join(name);
    std::fs::write(&f, yaml).unwrap();
    f.to_str().unwrap().to_string()
}

/// A copy of the shipped policies (base, profiles, tests) and schema under `root`.
fn copy_set(root: &Path) -> (PathBuf, PathBuf) {
    let pol = root.join("policies");
    for sub in ["base", "profiles", "tests"] {
        std::fs::create_dir_all(pol.join(sub)).unwrap();
        for e in std::fs::read_dir(repo().join("policies").join(sub)).unwrap() {
            let p = e.unwrap().path();
            std::fs::copy(&p, pol.join(sub).join(p.file_name().unwrap())).unwrap();
        }
    }
    let schema = root.join("codespace.cedarschema");
    std::fs::copy(repo().join("schema/codespace.cedarschema"), &schema).unwrap();
    (pol, schema)
}

const OUTSIDE: &str = "workspace: { id: w, profile: workspace-write }\ncases:\n  - name: escape\n    call: { name: read, arguments: { workspace_id: w, path: ../../etc/passwd } }\n";

#[test]
fn a_call_refused_before_cedar_is_not_a_passing_deny() {
    let dir = tempfile::tempdir().unwrap();
    // Today's trap: the case says deny, the builder refuses the path, Cedar is never asked.
    let f = write_case(
        dir.path(),
        "deny.yaml",
        &format!("{OUTSIDE}    decision: deny\n"),
    );
    let o = run(&["policy", "test", &f]);
    let out = both(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("refused before Cedar"), "{out}");
    assert!(out.contains("0 passed, 1 failed"), "{out}");

    // Said explicitly, it passes; the JSON report says `refused` with the code.
    let f = write_case(
        dir.path(),
        "refused.yaml",
        &format!("{OUTSIDE}    expect: refused\n"),
    );
    let o = run(&["policy", "test", &f, "--format", "json"]);
    assert!(o.status.success(), "{}", both(&o));
    let report: Value = serde_json::from_slice(&o.stdout).unwrap();
    let case = &report["cases"][0];
    assert_eq!(case["decision"], "refused", "{report}");
    let code = case["refused_code"].as_str().unwrap().to_string();
    assert!(!code.is_empty() && code != "UNAUTHORIZED", "{report}");

    // With the right code it passes, with another it fails.
    let f = write_case(
        dir.path(),
        "code.yaml",
        &format!("{OUTSIDE}    decision: refused\n    code: {code}\n"),
    );
    assert!(run(&["policy", "test", &f]).status.success());
    let f = write_case(
        dir.path(),
        "wrong-code.yaml",
        &format!("{OUTSIDE}    decision: refused\n    code: WORKSPACE_BUSY\n"),
    );
    let o = run(&["policy", "test", &f]);
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    assert!(
        both(&o).contains("code: expected WORKSPACE_BUSY"),
        "{}",
        both(&o)
    );

    // Bad arguments are refused too (INVALID_ARGUMENTS), never a Cedar deny.
    let f = write_case(
        dir.path(),
        "args.yaml",
        "workspace: { id: w, profile: read-only }\ncases:\n  - name: no path\n    call: { name: read, arguments: { workspace_id: w } }\n    decision: deny\n",
    );
    let o = run(&["policy", "test", &f]);
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    assert!(
        both(&o).contains("refused before Cedar (INVALID_ARGUMENTS"),
        "{}",
        both(&o)
    );

    // A `refused` case whose call reaches Cedar fails, naming Cedar's decision.
    let f = write_case(
        dir.path(),
        "reached.yaml",
        "workspace: { id: w, profile: read-only }\ncases:\n  - name: a command\n    call: { name: exec_command, arguments: { workspace_id: w, command: [ls] } }\n    decision: refused\n",
    );
    let o = run(&["policy", "test", &f]);
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    assert!(
        both(&o).contains("reached Cedar and got deny"),
        "{}",
        both(&o)
    );
}

#[test]
fn placeholders_are_substituted_in_map_keys() {
    let dir = tempfile::tempdir().unwrap();
    let f = write_case(
        dir.path(),
        "keys.yaml",
        "workspace: { id: w, profile: workspace-write }\ncases:\n  - name: \"{{dir}} is {{verdict}}\"\n    call: { name: exec_command, arguments: { workspace_id: w, command: [ls] } }\n    decision: allow\n    write_paths: { \"{{dir}}\": \"{{verdict}}\" }\n    params:\n      - { dir: .git, verdict: deny }\n      - { dir: src, verdict: allow }\n",
    );
    let o = run(&["policy", "test", &f]);
    let out = both(&o);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("ok     ") && out.contains(".git is deny"),
        "{out}"
    );
    assert!(out.contains("2 passed, 0 failed"), "{out}");
    // The key really is the parameter: swapping the verdicts fails both instances.
    let f = write_case(
        dir.path(),
        "keys-wrong.yaml",
        "workspace: { id: w, profile: workspace-write }\ncases:\n  - name: \"{{dir}}\"\n    call: { name: exec_command, arguments: { workspace_id: w, command: [ls] } }\n    decision: allow\n    write_paths: { \"{{dir}}\": \"{{verdict}}\" }\n    params:\n      - { dir: .git, verdict: allow }\n      - { dir: src, verdict: deny }\n",
    );
    let o = run(&["policy", "test", &f]);
    assert!(both(&o).contains("0 passed, 2 failed"), "{}", both(&o));
}

#[test]
fn coverage_gates_per_profile_and_per_action() {
    let dir = tempfile::tempdir().unwrap();
    // Every read-only policy (read and info) decides a case; nothing of workspace-write does.
    let f = write_case(
        dir.path(),
        "ro.yaml",
        "workspace: { id: w, profile: read-only }\ncases:\n  - name: reads\n    call: { name: read, arguments: { workspace_id: w, path: a } }\n    decision: allow\n  - name: info\n    call: { name: workspace_info, arguments: { workspace_id: w } }\n    decision: allow\n",
    );
    let o = run(&["policy", "test", &f, "--coverage-min-profile", "100"]);
    let out = both(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("below --coverage-min-profile 100"), "{out}");
    assert!(out.contains("profile workspace-write 0.0%"), "{out}");
    assert!(!out.contains("profile read-only "), "{out}");
    assert!(out.contains("2 passed, 0 failed"), "{out}");

    let o = run(&[
        "policy",
        "test",
        &f,
        "--coverage-min-action",
        "100",
        "--format",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    let report: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["gates_passed"], false, "{report}");
    assert_eq!(
        report["coverage"]["by_profile"]["read-only"]["percent"], 100.0,
        "{report}"
    );
    assert!(
        report["coverage"]["by_action"]["fs_write"]["percent"]
            .as_f64()
            .unwrap()
            < 100.0,
        "{report}"
    );
    // The shipped tests meet both gates at 100 %.
    let o = run(&[
        "policy",
        "test",
        "--coverage-min-profile",
        "100",
        "--coverage-min-action",
        "100",
    ]);
    assert!(o.status.success(), "{}", both(&o));
}

#[test]
fn a_set_failing_its_own_tests_does_not_go_live_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let (pol, schema) = copy_set(&root);
    let ws = root.join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("a.txt"), "alpha\n").unwrap();
    let config = root.join("codespace.json");
    // No `policy_tests_on_reload`: the default runs the tests.
    std::fs::write(
        &config,
        serde_json::to_string_pretty(&json!({
            "policies": pol, "schema": schema, "store": root.join("audit.db"),
            "workspaces": {"w": {"root": ws, "profile": "read-only"}},
        }))
        .unwrap(),
    )
    .unwrap();
    let mut s = StdioServer::serve()
        .arg("--config")
        .arg(&config)
        .stderr_file(root.join("stderr.log"))
        .deadline(DEADLINE)
        .spawn();
    s.initialize("reload-test");
    let info = s.tool_ok("workspace_info", json!({"workspace_id": "w"}));
    let v1 = info["policy"]["set_sha256"].as_str().unwrap().to_string();
    // An edit that validates but breaks the shipped tests: read-only loses its reads.
    let ro = pol.join("profiles/read-only.cedar");
    let text = std::fs::read_to_string(&ro).unwrap();
    let broken = text.replace("\"fs_read\"", "\"info\"");
    assert_ne!(text, broken);
    let tmp = root.join("read-only.cedar.new");
    std::fs::write(&tmp, broken).unwrap();
    std::fs::rename(&tmp, &ro).unwrap();
    let end = Instant::now() + DEADLINE;
    let rejected = loop {
        let info = s.tool_ok("workspace_info", json!({"workspace_id": "w"}));
        if let Some(r) = info["policy"].get("last_reload_rejected") {
            assert_eq!(info["policy"]["set_sha256"], json!(v1), "{info}");
            break r.clone();
        }
        assert_eq!(info["policy"]["set_sha256"], json!(v1), "{info}");
        assert!(Instant::now() < end, "the reload was never attempted");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(rejected.to_string().contains("test "), "{rejected}");
    // The running set still reads.
    let r = s.tool_ok("read", json!({"workspace_id": "w", "path": "a.txt"}));
    assert_eq!(r["content"], "alpha\n", "{r}");
}

#[test]
fn the_shipped_set_is_fmt_clean_and_its_hash_ignores_formatting() {
    let o = run(&["policy", "fmt", "--check", "--policies", "policies"]);
    assert!(o.status.success(), "{}", both(&o));

    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let (pol, schema) = copy_set(&root);
    let hash = |pol: &Path| {
        let o = run(&[
            "policy",
            "validate",
            "--policies",
            pol.to_str().unwrap(),
            "--schema",
            schema.to_str().unwrap(),
        ]);
        let out = both(&o);
        assert!(o.status.success(), "{out}");
        out.split_whitespace()
            .find(|w| w.starts_with("sha256:"))
            .unwrap()
            .trim_end_matches([',', ')', '.'])
            .to_string()
    };
    let before = hash(&pol);
    // Reformat a file by hand (one line per policy, a comment): same hash.
    let ro = pol.join("profiles/read-only.cedar");
    let text = std::fs::read_to_string(&ro).unwrap();
    let squashed = format!(
        "// squashed by hand\n{}",
        text.lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .map(str::trim)
            .collect::<Vec<_>>()
            .join(" ")
    );
    std::fs::write(&ro, &squashed).unwrap();
    assert_eq!(hash(&pol), before);
    // `policy fmt` brings the text back; the hash never moved.
    let o = run(&["policy", "fmt", "--policies", pol.to_str().unwrap()]);
    assert!(o.status.success(), "{}", both(&o));
    assert_eq!(hash(&pol), before);
    // A change Cedar sees changes it.
    std::fs::write(&ro, squashed.replace("\"fs_read\"", "\"info\"")).unwrap();
    assert_ne!(hash(&pol), before);
}
