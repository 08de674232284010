//! kill -9 of the server in the middle of an apply_patch, then a restart: the start-up recovery
//! rolls every touched file back from the journal and the operation reads `unknown`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod stdio_common;

use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};
use stdio_common::StdioServer;

/// Touches three files (update, update, delete) and adds a fourth.
const PATCH: &str = "*** Begin Patch\n*** Update File: a.txt\n@@\n-a\n+A\n*** Update File: b.txt\n@@\n-b\n+B\n*** Delete File: c.txt\n*** Add File: d.txt\n+d\n*** End Patch\n";

fn start(root: &Path, store: &Path, delay_ms: Option<u64>) -> StdioServer {
    let mut b = StdioServer::serve().arg(root).arg("--store").arg(store);
    if let Some(ms) = delay_ms {
        b = b.env("CODESPACE_TEST_PATCH_STEP_DELAY_MS", ms.to_string());
    }
    let mut s = b.spawn();
    let init = s.initialize("crash-test");
    assert_eq!(init["result"]["serverInfo"]["name"], "codespace");
    s
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
    let mut s = start(&root, &store, Some(300));
    s.send_request(
        "tools/call",
        json!({"name": "apply_patch", "arguments": {"workspace_id": "default",
            "operation_key": "crash-1",
            "patch": PATCH}}),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(Instant::now() < deadline, "the first file never changed");
        if std::fs::read(root.join("a.txt")).unwrap() == b"A\n" {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    s.kill(); // SIGKILL
    assert_eq!(
        std::fs::read(root.join("a.txt")).unwrap(),
        b"A\n",
        "the crash left a half-applied patch"
    );

    // Restart on the same store: recovery rolls back.
    let mut s = start(&root, &store, None);
    for (name, body) in &before {
        assert_eq!(
            &std::fs::read(root.join(name)).unwrap(),
            body,
            "{name} not restored"
        );
    }
    assert!(!root.join("d.txt").exists());
    let body = s.tool_ok("operation_status", json!({"operation_key": "crash-1"}));
    assert_eq!(body["status"], "unknown", "{body}");
    // A retry with the same key replays `unknown` and is never re-applied automatically.
    let body = s.tool_ok(
        "apply_patch",
        json!({"workspace_id": "default", "operation_key": "crash-1",
            "patch": PATCH}),
    );
    assert_eq!(body["replayed"], true);
    assert_eq!(body["status"], "unknown");
    assert_eq!(std::fs::read(root.join("a.txt")).unwrap(), b"a\n");
    let _ = s.close_and_wait(Duration::from_secs(30));
}
