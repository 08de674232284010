//! The real `codespace serve` over stdio with raw JSON-RPC: processes started through MCP die
//! with the server (stdin EOF and SIGTERM, checked by pid after it exited), and the sandbox
//! helper's refusal (Landlock forced unavailable by the test hook) fails the call closed.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::process_common;
use crate::stdio_common;

use process_common::{pid_alive, skip_without_sandbox, wait_pids_gone};
use serde_json::json;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use stdio_common::StdioServer;

fn start(config: &Path, envs: &[(&str, &str)]) -> StdioServer {
    let mut b = StdioServer::serve()
        .arg("--config")
        .arg(config)
        .stderr_inherit();
    for (k, v) in envs {
        b = b.env(k, v);
    }
    let mut s = b.spawn();
    s.initialize("process-test");
    s
}

/// A config with `n` workspaces (w0…), and the store. Without a sandbox here the workspaces
/// say `"sandbox": "off"` (the shipped guardrail refuses every exec otherwise).
fn config(dir: &Path, n: usize) -> std::path::PathBuf {
    // Without a sandbox (and so without secret masks) commands run only where the operator
    // turned the sandbox off and opted out of masking.
    let (sandbox, masking) = if process_common::sandbox_available() {
        ("required", "required")
    } else {
        ("off", "off")
    };
    let mut ws = serde_json::Map::new();
    for i in 0..n {
        let root = dir.join(format!("ws{i}"));
        std::fs::create_dir_all(&root).unwrap();
        ws.insert(
            format!("w{i}"),
            json!({"root": root, "sandbox": sandbox, "secret_masking": masking}),
        );
    }
    let cfg = json!({"workspaces": ws, "store": dir.join("store.db")});
    let path = dir.join("config.json");
    std::fs::write(&path, cfg.to_string()).unwrap();
    path
}

/// Starts `sh` + a background `sleep 1000` in each workspace; returns every pid.
fn start_sleepers(s: &mut StdioServer, n: usize) -> Vec<i64> {
    let mut pids = Vec::new();
    for i in 0..n {
        let r = s.tool_ok(
            "exec_command",
            json!({"workspace_id": format!("w{i}"),
                   "command": ["sh", "-c", "sleep 1000 & echo $$ $!; wait"], "yield_ms": 300}),
        );
        let mut out = r["chunk"].as_str().unwrap().to_string();
        let id = r["process_id"].as_str().unwrap().to_string();
        let mut cursor = r["cursor"].as_u64().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !out.contains('\n') {
            assert!(Instant::now() < deadline, "no pid line");
            let rr = s.tool_ok(
                "read_process",
                json!({"process_id": id, "cursor": cursor, "wait_ms": 1000}),
            );
            out.push_str(rr["chunk"].as_str().unwrap());
            cursor = rr["cursor"].as_u64().unwrap();
        }
        pids.extend(out.split_whitespace().map(|p| p.parse::<i64>().unwrap()));
    }
    assert!(pids.iter().all(|p| pid_alive(*p)));
    pids
}

#[test]
fn closing_stdin_kills_every_process_the_server_started() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 3);
    let mut s = start(&cfg, &[]);
    let pids = start_sleepers(&mut s, 3);
    assert_eq!(pids.len(), 6);
    let status = s.close_and_wait(Duration::from_secs(20));
    assert!(status.success(), "{status:?}");
    assert_eq!(
        wait_pids_gone(&pids, Duration::from_secs(5)),
        Vec::<i64>::new()
    );
}

#[test]
fn sigterm_kills_every_process_the_server_started() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 2);
    let mut s = start(&cfg, &[]);
    let pids = start_sleepers(&mut s, 2);
    let ok = Command::new("kill")
        .args(["-TERM", &s.pid().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    s.wait_exit(Duration::from_secs(20));
    assert_eq!(
        wait_pids_gone(&pids, Duration::from_secs(5)),
        Vec::<i64>::new()
    );
}

#[test]
fn the_helper_refuses_when_landlock_is_forced_unavailable() {
    if !stdio_common::test_hooks_or_skip("the_helper_refuses_when_landlock_is_forced_unavailable") {
        return;
    }
    if skip_without_sandbox("the_helper_refuses_when_landlock_is_forced_unavailable") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 1);
    let mut s = start(&cfg, &[("CODESPACE_TEST_FORCE_NO_LANDLOCK", "1")]);
    let body = s.tool_err(
        "exec_command",
        json!({"workspace_id": "w0", "command": ["sh", "-c", "echo ran > ran.txt"], "yield_ms": 2000}),
    );
    assert_eq!(body["code"], "PROCESS_SPAWN_FAILED", "{body}");
    let msg = body["message"].as_str().unwrap();
    assert!(msg.contains("sandbox") && msg.contains("Landlock"), "{msg}");
    assert!(
        !msg.contains(dir.path().to_str().unwrap()),
        "absolute path on the wire: {msg}"
    );
    assert!(
        !dir.path().join("ws0/ran.txt").exists(),
        "the command ran unsandboxed"
    );
    // Nothing holds the workspace afterwards: the next call fails the same way, not BUSY.
    let body = s.tool_err(
        "exec_command",
        json!({"workspace_id": "w0", "command": ["true"]}),
    );
    assert_eq!(body["code"], "PROCESS_SPAWN_FAILED", "{body}");
}

/// Whether this host gives every process a cgroup (so escapees can be found); skips
/// when it does not.
fn escapees_tracked_or_skip(test: &str) -> bool {
    let table = codespace_runner_process::ProcessTable::new(Default::default());
    let iso = table.pids_isolation();
    if !iso.tracked {
        codespace_test_skip::skip(
            test,
            format!("no writable cgroup here, escapees are not tracked ({iso:?})"),
        );
    }
    iso.tracked
}

#[test]
fn closing_stdin_kills_a_setsid_escapee() {
    let name = "closing_stdin_kills_a_setsid_escapee";
    if !escapees_tracked_or_skip(name) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 1);
    let mut s = start(&cfg, &[]);
    // `setsid -f` leaves the process group and the session; only the cgroup still holds it.
    let r = s.tool_ok(
        "exec_command",
        json!({"workspace_id": "w0",
               "command": ["sh", "-c", "setsid -f sh -c 'echo esc=$$; exec sleep 1000'; sleep 1000"],
               "yield_ms": 300}),
    );
    let id = r["process_id"].as_str().unwrap().to_string();
    let mut out = r["chunk"].as_str().unwrap().to_string();
    let mut cursor = r["cursor"].as_u64().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !out.contains('\n') {
        assert!(Instant::now() < deadline, "no escapee pid line: {out:?}");
        let rr = s.tool_ok(
            "read_process",
            json!({"process_id": id, "cursor": cursor, "wait_ms": 1000}),
        );
        out.push_str(rr["chunk"].as_str().unwrap());
        cursor = rr["cursor"].as_u64().unwrap();
    }
    let esc: i64 = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("esc="))
        .unwrap()
        .parse()
        .unwrap();
    assert!(pid_alive(esc));
    let status = s.close_and_wait(Duration::from_secs(20));
    assert!(status.success(), "{status:?}");
    let alive = wait_pids_gone(&[esc], Duration::from_secs(5));
    if !alive.is_empty() {
        let _ = Command::new("kill")
            .args(["-KILL", &esc.to_string()])
            .status();
    }
    assert_eq!(alive, Vec::<i64>::new(), "the escapee outlived the server");
}
