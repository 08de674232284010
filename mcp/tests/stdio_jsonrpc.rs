//! The `codespace serve` binary over raw JSON lines on stdio: after a proper initialize, garbage,
//! a JSON array, an unknown method and an unknown tool each get an answer or are dropped, and the
//! server keeps serving; EOF on stdin ends it with exit 0.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_codespace");
const DEADLINE: Duration = Duration::from_secs(20);

struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    seen: Vec<String>,
    _dir: tempfile::TempDir,
}

impl Server {
    fn start() -> Server {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        std::fs::write(ws.join("a.txt"), "alpha\n").unwrap();
        let stderr = std::fs::File::create(dir.path().join("stderr.log")).unwrap();
        let mut child = Command::new(BIN)
            .arg("serve")
            .arg(&ws)
            .arg("--store")
            .arg(dir.path().join("store.db"))
            .current_dir(dir.path())
            .env_remove("CODESPACE_CONFIG")
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
        Server {
            child,
            stdin,
            lines: rx,
            seen: Vec::new(),
            _dir: dir,
        }
    }

    fn send_raw(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    fn send(&mut self, v: &Value) {
        self.send_raw(&v.to_string());
    }

    /// Waits (bounded) for the response carrying `id`; every line read is kept in `seen`.
    fn response(&mut self, id: i64) -> Value {
        let end = Instant::now() + DEADLINE;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            let line = match self.lines.recv_timeout(left) {
                Ok(l) => l,
                Err(RecvTimeoutError::Timeout) => panic!("no response to id {id}: {:?}", self.seen),
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("server closed stdout before id {id}: {:?}", self.seen)
                }
            };
            self.seen.push(line.clone());
            let v: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line}"));
            if v.get("id") == Some(&json!(id)) {
                return v;
            }
        }
    }

    fn initialize(&mut self) {
        self.send(&json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "raw-test", "version": "0"}}
        }));
        let r = self.response(1);
        assert_eq!(r["result"]["protocolVersion"], "2025-11-25", "{r}");
        assert_eq!(r["result"]["serverInfo"]["name"], "codespace");
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    }

    fn read_call(&mut self, id: i64) -> Value {
        self.send(&json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "read", "arguments": {"workspace_id": "default", "path": "a.txt"}}
        }));
        self.response(id)
    }

    /// Closes stdin and waits (bounded) for the exit status.
    fn close_and_wait(&mut self, within: Duration) -> std::process::ExitStatus {
        drop(self.stdin.take());
        let end = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() >= end {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("server did not exit within {within:?} of stdin EOF");
            }
            std::thread::sleep(Duration::from_millis(20));
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

fn assert_read_ok(r: &Value) {
    let result = &r["result"];
    assert_eq!(result["isError"], false, "{r}");
    assert_eq!(result["structuredContent"]["content"], "alpha\n", "{r}");
    assert_eq!(result["structuredContent"]["path"], "a.txt");
}

#[test]
fn server_keeps_answering_after_malformed_input() {
    let mut s = Server::start();
    s.initialize();
    assert_read_ok(&s.read_call(2));

    // Not JSON, truncated JSON, a JSON array, an empty batch, a batch, a bare value.
    for garbage in [
        "this is not json",
        "{",
        "[1, 2, 3]",
        "[]",
        r#"[{"jsonrpc":"2.0","id":90,"method":"ping"}]"#,
        "42",
        r#"{"jsonrpc":"2.0","id":91}"#,
    ] {
        s.send_raw(garbage);
    }
    // An unknown method is a JSON-RPC error with the request's id.
    s.send(&json!({"jsonrpc": "2.0", "id": 3, "method": "no/such/method", "params": {}}));
    let r = s.response(3);
    assert_eq!(r["error"]["code"], -32601, "{r}");
    assert!(r.get("result").is_none());

    // An unknown tool is a JSON-RPC error too (not a tool result).
    s.send(&json!({
        "jsonrpc": "2.0", "id": 4, "method": "tools/call",
        "params": {"name": "rm_rf", "arguments": {}}
    }));
    let r = s.response(4);
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(
        r["error"]["message"].as_str().unwrap().contains("rm_rf"),
        "{r}"
    );

    // Schema-invalid arguments are a tool error, not a JSON-RPC error.
    s.send(&json!({
        "jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "read", "arguments": {"workspace_id": "default"}}
    }));
    let r = s.response(5);
    assert_eq!(r["result"]["isError"], true, "{r}");
    let body: Value =
        serde_json::from_str(r["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(body["code"], "INVALID_ARGUMENTS");

    // And a valid call is answered correctly after all of it.
    assert_read_ok(&s.read_call(6));
    // A ping works as well.
    s.send(&json!({"jsonrpc": "2.0", "id": 7, "method": "ping"}));
    let r = s.response(7);
    assert!(r.get("result").is_some(), "{r}");

    // Nothing but JSON-RPC messages ever appeared on stdout.
    for line in &s.seen {
        let v: Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["jsonrpc"], "2.0", "{line}");
    }
    let status = s.close_and_wait(Duration::from_secs(10));
    assert!(status.success(), "exit status {status}");
}

#[test]
fn stdin_eof_ends_the_server_with_exit_0() {
    let mut s = Server::start();
    s.initialize();
    assert_read_ok(&s.read_call(2));
    let started = Instant::now();
    let status = s.close_and_wait(Duration::from_secs(5));
    assert_eq!(status.code(), Some(0), "exit status {status}");
    eprintln!("exit after EOF took {:?}", started.elapsed());
}

#[test]
fn stdin_eof_before_initialize_ends_the_server() {
    let mut s = Server::start();
    let status = s.close_and_wait(Duration::from_secs(5));
    // No session was ever established: nothing to serve, a clean and prompt exit.
    assert_eq!(status.code(), Some(0), "exit status {status}");
}
