//! The dev loop through the real binary (`codespace serve` on stdio): a background service runs
//! while apply_patch succeeds and another command runs, and terminate-then-exec never sees
//! `WORKSPACE_BUSY`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::stdio_common;

use serde_json::json;
use std::time::{Duration, Instant};
use stdio_common::StdioServer;

#[test]
fn a_background_service_runs_beside_patches_and_commands_through_the_binary() {
    if !codespace_test_skip::require(
        codespace_runner_sandbox::probe().sandbox_available(),
        "a_background_service_runs_beside_patches_and_commands_through_the_binary",
        "the kernel lacks the command sandbox (Landlock/seccomp)",
    ) {
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

#[test]
fn a_long_poll_reports_progress_and_a_cancel_ends_the_wait_not_the_process() {
    let mut s = StdioServer::serve_temp_workspace()
        .env("CODESPACE_LOG", "warn,codespace_mcp::long_call=debug")
        .deadline(Duration::from_secs(60))
        .spawn();
    s.initialize("dev-loop");
    let args = if codespace_runner_sandbox::probe().sandbox_available() {
        json!({"workspace_id": "default", "background": true, "command": ["sleep", "600"]})
    } else {
        codespace_test_skip::skip(
            "a_long_poll_reports_progress_and_a_cancel_ends_the_wait_not_the_process",
            "no command sandbox here: the long poll runs on an exited process",
        );
        json!({"workspace_id": "default", "command": ["true"]})
    };
    let started = s.call("exec_command", args);
    if started["isError"] == true {
        codespace_test_skip::skip(
            "a_long_poll_reports_progress_and_a_cancel_ends_the_wait_not_the_process",
            format!("exec refused on this host: {started}"),
        );
        return;
    }
    let id = started["structuredContent"]["process_id"].clone();
    let rid = s.send_request(
        "tools/call",
        json!({"name": "read_process",
               "arguments": {"process_id": id, "cursor": 0, "wait_ms": 30_000},
               "_meta": {"progressToken": "poll-1"}}),
    );
    // Progress notifications while it waits (the event: two of them, increasing).
    let mut seen: Vec<f64> = Vec::new();
    while seen.len() < 2 {
        let m = s.next_message();
        assert_ne!(
            m["id"],
            json!(rid),
            "the poll answered before any progress: {m}"
        );
        if m["method"] == "notifications/progress" {
            assert_eq!(m["params"]["progressToken"], "poll-1", "{m}");
            assert_eq!(m["params"]["total"], 30_000.0, "{m}");
            seen.push(m["params"]["progress"].as_f64().unwrap());
        }
    }
    assert!(seen[0] < seen[1], "progress increases: {seen:?}");
    // Cancel: the wait ends at once (the server logs it), the process lives on.
    s.send(
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                   "params": {"requestId": rid, "reason": "test"}}),
    );
    let sent = Instant::now();
    let needle = "long call cancelled";
    while !s.stderr_text().contains(needle) {
        assert!(
            sent.elapsed() < Duration::from_secs(5),
            "the wait did not end: {}",
            s.stderr_tail()
        );
        // Paced by a round trip to the server, not by a sleep.
        let _ = s.request("ping", json!({}));
    }
    let ended_after = sent.elapsed();
    println!("cancelled wait ended {ended_after:?} after the cancel was sent");
    assert!(
        ended_after < Duration::from_millis(500),
        "the cancelled wait ended {ended_after:?} after the cancel (target 50 ms)"
    );
    if codespace_runner_sandbox::probe().sandbox_available() {
        let st = s.tool_ok("process_status", json!({"process_id": id}));
        assert_eq!(st["state"], "running", "the process lives on: {st}");
        s.tool_ok("terminate_process", json!({"process_id": id}));
    }
    // The cancelled request is never answered.
    s.collect_available();
    assert!(
        !s.transcript().iter().any(|raw| {
            serde_json::from_slice::<serde_json::Value>(raw)
                .is_ok_and(|v| v["id"] == json!(rid) && v.get("method").is_none())
        }),
        "a cancelled request got an answer"
    );
}
