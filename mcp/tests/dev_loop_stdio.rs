//! The dev loop through the real binary (`codespace serve` on stdio): a background service runs
//! while apply_patch succeeds and another command runs, and terminate-then-exec never sees
//! `WORKSPACE_BUSY`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod stdio_common;

use serde_json::json;
use std::time::{Duration, Instant};
use stdio_common::StdioServer;

#[test]
fn a_background_service_runs_beside_patches_and_commands_through_the_binary() {
    if !codespace_runner_sandbox::probe().sandbox_available() {
        println!("skip: the kernel lacks the command sandbox (Landlock/seccomp)");
        return;
    }
    let mut s = StdioServer::serve_temp_workspace()
        .env(
            "XDG_DATA_HOME",
            std::env::temp_dir().join("codespace-test-unused-xdg"),
        )
        .deadline(Duration::from_secs(60))
        .spawn();
    s.initialize("dev-loop");
    let svc = s.tool_ok(
        "exec_command",
        json!({"workspace_id": "default", "background": true,
               "command": ["sh", "-c", "echo ready; exec sleep 600"]}),
    );
    let svc_id = svc["process_id"].as_str().unwrap().to_string();
    // Wait for the service's first line (an event, not a sleep).
    let deadline = Instant::now() + Duration::from_secs(30);
    let (mut out, mut cursor) = (String::new(), 0);
    while !out.contains("ready") {
        assert!(
            Instant::now() < deadline,
            "service never said ready: {out:?}"
        );
        let r = s.tool_ok(
            "read_process",
            json!({"process_id": svc_id, "cursor": cursor, "wait_ms": 5_000}),
        );
        out.push_str(r["chunk"].as_str().unwrap());
        cursor = r["cursor"].as_u64().unwrap();
    }
    s.tool_ok(
        "apply_patch",
        json!({"workspace_id": "default",
               "patch": "*** Begin Patch\n*** Add File: beside.txt\n+hello\n*** End Patch\n"}),
    );
    let r = s.tool_ok(
        "exec_command",
        json!({"workspace_id": "default", "command": ["cat", "beside.txt"], "yield_ms": 20_000}),
    );
    assert_eq!(r["state"], "exited", "{r}");
    assert_eq!(r["exit_code"], 0, "{r}");
    assert_eq!(r["chunk"], "hello\n", "{r}");
    // Terminate a foreground process, then exec at once: never WORKSPACE_BUSY.
    for _ in 0..5 {
        let fg = s.tool_ok(
            "exec_command",
            json!({"workspace_id": "default", "command": ["sleep", "600"]}),
        );
        let t = s.tool_ok("terminate_process", json!({"process_id": fg["process_id"]}));
        assert_eq!(t["state"], "exited", "{t}");
        assert_eq!(t["termination"], "terminated", "{t}");
        let r = s.tool_ok(
            "exec_command",
            json!({"workspace_id": "default", "command": ["true"], "yield_ms": 20_000}),
        );
        assert_eq!(r["exit_code"], 0, "{r}");
    }
    let status = s.tool_ok("process_status", json!({"process_id": svc_id}));
    assert_eq!(status["state"], "running", "the service lives on: {status}");
    let t = s.tool_ok("terminate_process", json!({"process_id": svc_id}));
    assert_eq!(t["state"], "exited", "{t}");
}
