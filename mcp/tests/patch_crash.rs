//! kill -9 of the server in the middle of an apply_patch, then a restart: the start-up recovery
//! rolls every touched file back from the journal and the operation reads `unknown`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

struct Server {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
}

impl Server {
    fn start(root: &Path, store: &Path, delay_ms: Option<u64>) -> Server {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_codespace"));
        cmd.arg("serve")
            .arg(root)
            .arg("--store")
            .arg(store)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        if let Some(ms) = delay_ms {
            cmd.env("CODESPACE_TEST_PATCH_STEP_DELAY_MS", ms.to_string());
        }
        let mut child = cmd.spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut s = Server {
            child,
            stdin,
            stdout,
            next_id: 1,
        };
        let init = s.request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "crash-test", "version": "0"}}),
        );
        assert_eq!(init["result"]["serverInfo"]["name"], "codespace");
        s.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        s
    }

    fn send(&mut self, v: Value) {
        writeln!(self.stdin, "{v}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn send_request(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send_request(method, params);
        loop {
            let mut line = String::new();
            assert!(
                self.stdout.read_line(&mut line).unwrap() > 0,
                "server closed stdout"
            );
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["id"] == id {
                return v;
            }
        }
    }

    fn tool(&mut self, name: &str, args: Value) -> Value {
        self.request("tools/call", json!({"name": name, "arguments": args}))
    }
}

#[test]
fn kill_nine_mid_apply_then_restart_rolls_back() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    std::fs::create_dir(&root).unwrap();
    let store = dir.path().join("store.db");
    for (name, body) in [("a.txt", "a\n"), ("b.txt", "b\n"), ("c.txt", "c\n")] {
        std::fs::write(root.join(name), body).unwrap();
    }
    let before: Vec<(String, Vec<u8>)> = ["a.txt", "b.txt", "c.txt"]
        .iter()
        .map(|n| (n.to_string(), std::fs::read(root.join(n)).unwrap()))
        .collect();

    // Each write step sleeps 300 ms, so the apply takes seconds; kill -9 after the journal is
    // written and the first file has been replaced.
    let mut s = Server::start(&root, &store, Some(300));
    s.send_request(
        "tools/call",
        json!({"name": "apply_patch", "arguments": {"workspace_id": "default",
            "operation_key": "crash-1",
            "patch": "*** Begin Patch\n*** Update File: a.txt\n@@\n-a\n+A\n*** Update File: b.txt\n@@\n-b\n+B\n*** Delete File: c.txt\n*** Add File: d.txt\n+d\n*** End Patch\n"}}),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(Instant::now() < deadline, "the first file never changed");
        if std::fs::read(root.join("a.txt")).unwrap() == b"A\n" {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    s.child.kill().unwrap(); // SIGKILL
    s.child.wait().unwrap();
    assert_eq!(
        std::fs::read(root.join("a.txt")).unwrap(),
        b"A\n",
        "the crash left a half-applied patch"
    );

    // Restart on the same store: recovery rolls back.
    let mut s = Server::start(&root, &store, None);
    for (name, body) in &before {
        assert_eq!(
            &std::fs::read(root.join(name)).unwrap(),
            body,
            "{name} not restored"
        );
    }
    assert!(!root.join("d.txt").exists());
    let st = s.tool("operation_status", json!({"operation_key": "crash-1"}));
    let text = st["result"]["content"][0]["text"].as_str().unwrap();
    let body: Value = serde_json::from_str(text).unwrap();
    assert_eq!(body["status"], "unknown", "{body}");
    // A retry with the same key replays `unknown` and is never re-applied automatically.
    let again = s.tool(
        "apply_patch",
        json!({"workspace_id": "default", "operation_key": "crash-1",
            "patch": "*** Begin Patch\n*** Update File: a.txt\n@@\n-a\n+A\n*** Update File: b.txt\n@@\n-b\n+B\n*** Delete File: c.txt\n*** Add File: d.txt\n+d\n*** End Patch\n"}),
    );
    let body: Value =
        serde_json::from_str(again["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(body["replayed"], true);
    assert_eq!(body["status"], "unknown");
    assert_eq!(std::fs::read(root.join("a.txt")).unwrap(), b"a\n");
    drop(s.stdin);
    let _ = s.child.wait();
}
