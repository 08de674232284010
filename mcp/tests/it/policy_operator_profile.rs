//! An operator profile without recompiling: a temp policies directory (the shipped set plus
//! `profiles/ci-tester.cedar`) and a config entry with `extends: read-only`, enforced by the real
//! `codespace serve` over MCP stdio; then the profile is changed on disk and the running server
//! enforces the new version (hot reload, no restart); `codespace audit` shows the decisions.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::stdio_common;

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use stdio_common::{BIN, StdioServer};

const DEADLINE: Duration = Duration::from_secs(30);

const CI_TESTER_V1: &str = r#"// Operator profile: read-only, plus writing test files under tests/.
@id("ci-tester.permit.write-tests")
permit (
  principal in CodeSpace::PermissionProfile::"ci-tester",
  action == CodeSpace::Action::"apply_patch",
  resource
)
when { resource.path like "tests/*" };
"#;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn patch_add(path: &str) -> String {
    format!("*** Begin Patch\n*** Add File: {path}\n+hello\n*** End Patch\n")
}

#[test]
fn an_operator_profile_is_enforced_and_rolled_out_without_restart() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let pol = root.join("policies");
    for sub in ["base", "profiles"] {
        std::fs::create_dir_all(pol.join(sub)).unwrap();
        for e in std::fs::read_dir(repo().join("policies").join(sub)).unwrap() {
            let p = e.unwrap().path();
            std::fs::copy(&p, pol.join(sub).join(p.file_name().unwrap())).unwrap();
        }
    }
    std::fs::write(pol.join("profiles/ci-tester.cedar"), CI_TESTER_V1).unwrap();
    let schema = root.join("codespace.cedarschema");
    std::fs::copy(repo().join("schema/codespace.cedarschema"), &schema).unwrap();
    let ws = root.join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("a.txt"), "alpha\n").unwrap();
    let store = root.join("audit.db");
    let config = root.join("codespace.json");
    std::fs::write(
        &config,
        serde_json::to_string_pretty(&json!({
            "policies": pol, "schema": schema, "store": store,
            "profiles": {"ci-tester": {"extends": "read-only", "description": "reads; writes tests/"}},
            "workspaces": {"w": {"root": ws, "profile": "ci-tester"}},
        }))
        .unwrap(),
    )
    .unwrap();

    let mut s = StdioServer::serve()
        .arg("--config")
        .arg(&config)
        .env("CODESPACE_LOG", "info")
        .stderr_file(root.join("stderr.log"))
        .deadline(DEADLINE)
        .spawn();
    s.initialize("operator-test");

    // Inherited from read-only through `extends`.
    let r = s.tool_ok("read", json!({"workspace_id": "w", "path": "a.txt"}));
    assert_eq!(r["content"], "alpha\n", "{r}");
    // Its own permit: tests/ yes, src/ no.
    s.tool_ok(
        "apply_patch",
        json!({"workspace_id": "w", "patch": patch_add("tests/t.txt")}),
    );
    assert!(ws.join("tests/t.txt").exists());
    let e = s.tool_err(
        "apply_patch",
        json!({"workspace_id": "w", "patch": patch_add("src/x.rs")}),
    );
    assert_eq!(e["code"], "UNAUTHORIZED", "{e}");
    assert!(!ws.join("src/x.rs").exists());

    // Roll out v2 (fixtures/ instead of tests/) with an atomic rename, as docs/policy.md advises.
    let info = s.tool_ok("workspace_info", json!({"workspace_id": "w"}));
    let v1 = info["policy"]["set_sha256"].as_str().unwrap().to_string();
    let tmp = root.join("ci-tester.cedar.new");
    std::fs::write(&tmp, CI_TESTER_V1.replace("tests/*", "fixtures/*")).unwrap();
    std::fs::rename(&tmp, pol.join("profiles/ci-tester.cedar")).unwrap();
    let end = Instant::now() + DEADLINE;
    loop {
        let info = s.tool_ok("workspace_info", json!({"workspace_id": "w"}));
        if info["policy"]["set_sha256"].as_str().unwrap() != v1 {
            assert!(
                info["policy"].get("last_reload_rejected").is_none(),
                "{info}"
            );
            break;
        }
        assert!(
            Instant::now() < end,
            "the running server never picked up the new profile"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    s.tool_ok(
        "apply_patch",
        json!({"workspace_id": "w", "patch": patch_add("fixtures/f.txt")}),
    );
    let e = s.tool_err(
        "apply_patch",
        json!({"workspace_id": "w", "patch": patch_add("tests/u.txt")}),
    );
    assert_eq!(e["code"], "UNAUTHORIZED", "{e}");

    s.close_and_wait(DEADLINE);

    // The decision log: the two patch denies, as JSON lines (workspace_info's capability
    // probes also log their denies, hence the tool filter), and the reload event.
    let out = Command::new(BIN)
        .args([
            "audit",
            "--json",
            "--oldest",
            "--decision",
            "deny",
            "--tool",
            "apply_patch",
            "--store",
        ])
        .arg(&store)
        .env_remove("CODESPACE_CONFIG")
        .output()
        .unwrap();
    assert!(out.status.success());
    let rows: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let subjects: Vec<&str> = rows
        .iter()
        .map(|r| r["subject"].as_str().unwrap())
        .collect();
    assert_eq!(subjects, ["add src/x.rs", "add tests/u.txt"], "{rows:#?}");
    assert!(
        rows.iter()
            .all(|r| r["profile"] == "ci-tester" && r["default_deny"] == true)
    );
    assert!(rows[1]["time"].as_str().unwrap().contains('T'));
    let table = Command::new(BIN)
        .args(["audit", "--store"])
        .arg(&store)
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&table.stdout).to_string();
    assert!(
        table.contains("ci-tester.permit.write-tests") && table.contains("(default deny)"),
        "{table}"
    );
    let events = Command::new(BIN)
        .args(["audit", "--events", "--json", "--store"])
        .arg(&store)
        .output()
        .unwrap();
    let events = String::from_utf8_lossy(&events.stdout).to_string();
    let reload: Vec<Value> = events
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["kind"] == "policy_reload")
        .collect();
    assert_eq!(reload.len(), 1, "{events}");
    assert_eq!(reload[0]["detail"]["accepted"], true);
    assert_eq!(reload[0]["detail"]["old_sha256"], json!(v1));
}
