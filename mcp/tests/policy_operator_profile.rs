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

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_codespace");
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

struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    next_id: i64,
}

impl Server {
    fn call(&mut self, name: &str, args: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                          "params": {"name": name, "arguments": args}}));
        self.response(id)["result"].clone()
    }

    fn send(&mut self, v: &Value) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{v}").unwrap();
        stdin.flush().unwrap();
    }

    fn response(&mut self, id: i64) -> Value {
        let end = Instant::now() + DEADLINE;
        loop {
            let line = self
                .lines
                .recv_timeout(end.saturating_duration_since(Instant::now()))
                .unwrap_or_else(|e| panic!("no response to {id}: {e}"));
            let v: Value = serde_json::from_str(&line).unwrap();
            if v.get("id") == Some(&json!(id)) {
                return v;
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn patch_add(path: &str) -> String {
    format!("*** Begin Patch\n*** Add File: {path}\n+hello\n*** End Patch\n")
}

fn error_code(result: &Value) -> String {
    assert_eq!(result["isError"], true, "{result}");
    let body: Value = serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
    body["code"].as_str().unwrap().to_string()
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

    let stderr = std::fs::File::create(root.join("stderr.log")).unwrap();
    let mut child = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&config)
        .env_remove("CODESPACE_CONFIG")
        .env("CODESPACE_LOG", "info")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(stderr))
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let stdin = child.stdin.take();
    let mut s = Server {
        child,
        stdin,
        lines: rx,
        next_id: 1,
    };
    s.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "operator-test", "version": "0"}}}));
    s.response(1);
    s.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));

    // Inherited from read-only through `extends`.
    let r = s.call("read", json!({"workspace_id": "w", "path": "a.txt"}));
    assert_eq!(r["structuredContent"]["content"], "alpha\n", "{r}");
    // Its own permit: tests/ yes, src/ no.
    let r = s.call(
        "apply_patch",
        json!({"workspace_id": "w", "patch": patch_add("tests/t.txt")}),
    );
    assert_eq!(r["isError"], false, "{r}");
    assert!(ws.join("tests/t.txt").exists());
    let r = s.call(
        "apply_patch",
        json!({"workspace_id": "w", "patch": patch_add("src/x.rs")}),
    );
    assert_eq!(error_code(&r), "UNAUTHORIZED");
    assert!(!ws.join("src/x.rs").exists());

    // Roll out v2 (fixtures/ instead of tests/) with an atomic rename, as docs/policy.md advises.
    let info = s.call("workspace_info", json!({"workspace_id": "w"}));
    let v1 = info["structuredContent"]["policy"]["set_sha256"]
        .as_str()
        .unwrap()
        .to_string();
    let tmp = root.join("ci-tester.cedar.new");
    std::fs::write(&tmp, CI_TESTER_V1.replace("tests/*", "fixtures/*")).unwrap();
    std::fs::rename(&tmp, pol.join("profiles/ci-tester.cedar")).unwrap();
    let end = Instant::now() + DEADLINE;
    loop {
        let info = s.call("workspace_info", json!({"workspace_id": "w"}));
        if info["structuredContent"]["policy"]["set_sha256"]
            .as_str()
            .unwrap()
            != v1
        {
            assert!(
                info["structuredContent"]["policy"]
                    .get("last_reload_rejected")
                    .is_none(),
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
    let r = s.call(
        "apply_patch",
        json!({"workspace_id": "w", "patch": patch_add("fixtures/f.txt")}),
    );
    assert_eq!(r["isError"], false, "{r}");
    let r = s.call(
        "apply_patch",
        json!({"workspace_id": "w", "patch": patch_add("tests/u.txt")}),
    );
    assert_eq!(error_code(&r), "UNAUTHORIZED");

    drop(s.stdin.take());
    let end = Instant::now() + DEADLINE;
    while s.child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < end, "server did not exit on EOF");
        std::thread::sleep(Duration::from_millis(20));
    }

    // The decision log: the two patch denies, as JSON lines (workspace_info's capability
    // probes also log their denies, hence the tool filter), and the reload event.
    let out = Command::new(BIN)
        .args([
            "audit",
            "--json",
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
