//! The `codespace serve` binary over raw JSON lines on stdio: after a proper initialize, garbage,
//! a JSON array, an unknown method and an unknown tool each get an answer or are dropped, and the
//! server keeps serving; EOF on stdin ends it with exit 0.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::stdio_common;

use serde_json::{Value, json};
use std::time::{Duration, Instant};
use stdio_common::StdioServer;

const DEADLINE: Duration = Duration::from_secs(20);

/// `serve` on a temp workspace holding `a.txt` = `alpha\n`.
fn start() -> StdioServer {
    StdioServer::serve_temp_workspace()
        .deadline(DEADLINE)
        .spawn()
}

fn initialize(s: &mut StdioServer) {
    let r = s.initialize("raw-test");
    assert_eq!(r["result"]["protocolVersion"], "2025-11-25", "{r}");
    assert_eq!(r["result"]["serverInfo"]["name"], "codespace");
}

fn read_call(s: &mut StdioServer, id: i64) -> Value {
    s.send(&json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "read", "arguments": {"workspace_id": "default", "path": "a.txt"}}
    }));
    s.response(id)
}

fn assert_read_ok(r: &Value) {
    let result = &r["result"];
    assert_eq!(result["isError"], false, "{r}");
    assert_eq!(result["structuredContent"]["content"], "alpha\n", "{r}");
    assert_eq!(result["structuredContent"]["path"], "a.txt");
}

#[test]
fn server_keeps_answering_after_malformed_input() {
    let mut s = start();
    initialize(&mut s);
    assert_read_ok(&read_call(&mut s, 2));

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
        s.send_bytes(garbage.as_bytes());
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
    assert_read_ok(&read_call(&mut s, 6));
    // A ping works as well.
    s.send(&json!({"jsonrpc": "2.0", "id": 7, "method": "ping"}));
    let r = s.response(7);
    assert!(r.get("result").is_some(), "{r}");

    // Nothing but JSON-RPC messages ever appeared on stdout.
    let bad = s.non_jsonrpc_lines();
    assert!(bad.is_empty(), "{bad:?}");
    let status = s.close_and_wait(Duration::from_secs(10));
    assert!(status.success(), "exit status {status}");
}

#[test]
fn stdin_eof_ends_the_server_with_exit_0() {
    let mut s = start();
    initialize(&mut s);
    assert_read_ok(&read_call(&mut s, 2));
    let started = Instant::now();
    let status = s.close_and_wait(Duration::from_secs(5));
    assert_eq!(status.code(), Some(0), "exit status {status}");
    eprintln!("exit after EOF took {:?}", started.elapsed());
}

#[test]
fn stdin_eof_before_initialize_ends_the_server() {
    let mut s = start();
    let status = s.close_and_wait(Duration::from_secs(5));
    // No session was ever established: nothing to serve, a clean and prompt exit.
    assert_eq!(status.code(), Some(0), "exit status {status}");
}
