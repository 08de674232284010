//! The real `codespace serve` over stdio with raw JSON-RPC: processes started through MCP die
//! with the server (stdin EOF and SIGTERM, checked by pid after it exited), and the sandbox
//! helper's refusal (Landlock forced unavailable by the test hook) fails the call closed.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod process_common;

use process_common::{BIN, pid_alive, skip_without_sandbox, wait_pids_gone};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    next: u64,
}

impl Server {
    fn start(config: &Path, envs: &[(&str, &str)]) -> Server {
        let mut cmd = Command::new(BIN);
        cmd.args(["serve", "--config"])
            .arg(config)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .env_remove("CODESPACE_CONFIG");
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut s = Server {
            child,
            stdin,
            stdout,
            next: 1,
        };
        s.request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "process-test", "version": "1"}}),
        );
        s.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        s
    }

    fn send(&mut self, v: &Value) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{v}").unwrap();
        stdin.flush().unwrap();
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let mut line = String::new();
            assert!(
                self.stdout.read_line(&mut line).unwrap() > 0,
                "server closed stdout"
            );
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["id"] == id {
                return v["result"].clone();
            }
        }
    }

    fn tool(&mut self, name: &str, args: Value) -> Value {
        self.request("tools/call", json!({"name": name, "arguments": args}))
    }

    fn wait_exit(&mut self, within: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            assert!(Instant::now() < deadline, "server did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A config with `n` workspaces (w0…) on restricted or enabled network, and the store.
fn config(dir: &Path, n: usize) -> std::path::PathBuf {
    let network = if process_common::sandbox_available() {
        "restricted"
    } else {
        "enabled"
    };
    let mut ws = serde_json::Map::new();
    for i in 0..n {
        let root = dir.join(format!("ws{i}"));
        std::fs::create_dir_all(&root).unwrap();
        ws.insert(format!("w{i}"), json!({"root": root, "network": network}));
    }
    let cfg = json!({"workspaces": ws, "store": dir.join("store.db")});
    let path = dir.join("config.json");
    std::fs::write(&path, cfg.to_string()).unwrap();
    path
}

/// Starts `sh` + a background `sleep 1000` in each workspace; returns every pid.
fn start_sleepers(s: &mut Server, n: usize) -> Vec<i64> {
    let mut pids = Vec::new();
    for i in 0..n {
        let r = s.tool(
            "exec_command",
            json!({"workspace_id": format!("w{i}"),
                   "command": ["sh", "-c", "sleep 1000 & echo $$ $!; wait"], "yield_ms": 300}),
        );
        assert_eq!(r["isError"], false, "{r}");
        let mut out = r["structuredContent"]["chunk"]
            .as_str()
            .unwrap()
            .to_string();
        let id = r["structuredContent"]["process_id"]
            .as_str()
            .unwrap()
            .to_string();
        let mut cursor = r["structuredContent"]["cursor"].as_u64().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !out.contains('\n') {
            assert!(Instant::now() < deadline, "no pid line");
            let rr = s.tool(
                "read_process",
                json!({"process_id": id, "cursor": cursor, "wait_ms": 1000}),
            );
            out.push_str(rr["structuredContent"]["chunk"].as_str().unwrap());
            cursor = rr["structuredContent"]["cursor"].as_u64().unwrap();
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
    let mut s = Server::start(&cfg, &[]);
    let pids = start_sleepers(&mut s, 3);
    assert_eq!(pids.len(), 6);
    drop(s.stdin.take());
    let status = s.wait_exit(Duration::from_secs(20));
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
    let mut s = Server::start(&cfg, &[]);
    let pids = start_sleepers(&mut s, 2);
    let ok = Command::new("kill")
        .args(["-TERM", &s.child.id().to_string()])
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
    if skip_without_sandbox("the_helper_refuses_when_landlock_is_forced_unavailable") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 1);
    let mut s = Server::start(&cfg, &[("CODESPACE_TEST_FORCE_NO_LANDLOCK", "1")]);
    let r = s.tool(
        "exec_command",
        json!({"workspace_id": "w0", "command": ["sh", "-c", "echo ran > ran.txt"], "yield_ms": 2000}),
    );
    assert_eq!(r["isError"], true, "{r}");
    let body: Value = serde_json::from_str(r["content"][0]["text"].as_str().unwrap()).unwrap();
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
    let r = s.tool(
        "exec_command",
        json!({"workspace_id": "w0", "command": ["true"]}),
    );
    let body: Value = serde_json::from_str(r["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(body["code"], "PROCESS_SPAWN_FAILED", "{body}");
}
