//! The stdio message limit (`limits.max_message_bytes`) through the binary: a longer line is
//! answered (-32600 with its id when the id can be read, null otherwise; -32700 when it is not
//! a JSON object), is never buffered whole, and the server keeps serving.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::stdio_common;

use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;
use stdio_common::StdioServer;

/// `serve --config` with `limits.max_message_bytes = limit` (None: the default).
fn start(dir: &Path, limit: Option<usize>) -> StdioServer {
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("a.txt"), "alpha\n").unwrap();
    let mut cfg = json!({
        "workspaces": {"default": {"root": ws, "profile": "read-only"}},
        "store": dir.join("store.db"),
    });
    if let Some(l) = limit {
        cfg["limits"] = json!({ "max_message_bytes": l });
    }
    let path = dir.join("config.json");
    std::fs::write(&path, cfg.to_string()).unwrap();
    let mut s = StdioServer::serve()
        .arg("--config")
        .arg(&path)
        .env("HOME", dir)
        .env("XDG_DATA_HOME", dir)
        .deadline(Duration::from_secs(60))
        .spawn();
    let r = s.initialize("limits-test");
    assert_eq!(r["result"]["serverInfo"]["name"], "codespace", "{r}");
    s
}

fn read_ok(s: &mut StdioServer) {
    let r = s.tool_ok("read", json!({"workspace_id": "default", "path": "a.txt"}));
    assert_eq!(r["content"], "alpha\n");
}

/// A tools/call line of about `size` bytes whose padding comes before or after the id.
fn padded(id: Value, size: usize, id_first: bool) -> String {
    let pad = "x".repeat(size);
    if id_first {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"read","arguments":{{"workspace_id":"default","path":"a.txt","pad":"{pad}"}}}}}}"#
        )
    } else {
        format!(
            r#"{{"jsonrpc":"2.0","method":"tools/call","params":{{"name":"read","arguments":{{"pad":"{pad}"}}}},"id":{id}}}"#
        )
    }
}

fn vm_hwm_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

#[test]
fn an_oversized_line_is_answered_with_its_id_and_the_server_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = start(dir.path(), Some(4096));
    // Numeric and string ids, read from the first 4096 bytes.
    s.send_bytes(padded(json!(41), 10_000, true).as_bytes());
    let r = s.response(41);
    assert_eq!(r["error"]["code"], -32600, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("limit of 4096 bytes"),
        "{r}"
    );
    s.send_bytes(padded(json!("big-1"), 10_000, true).as_bytes());
    let r = s.next_message();
    assert_eq!(r["id"], "big-1", "{r}");
    assert_eq!(r["error"]["code"], -32600);
    read_ok(&mut s);
    // The id comes after the padding: it cannot be read; the answer carries null.
    s.send_bytes(padded(json!(42), 10_000, false).as_bytes());
    let r = s.next_message();
    assert_eq!(r["id"], Value::Null, "{r}");
    assert_eq!(r["error"]["code"], -32600);
    // Not JSON at all: a parse error.
    s.send_bytes("y".repeat(10_000).as_bytes());
    let r = s.next_message();
    assert_eq!(r["id"], Value::Null, "{r}");
    assert_eq!(r["error"]["code"], -32700);
    // A message just under the limit is served.
    let fits = padded(json!(43), 3800, true);
    assert!(fits.len() <= 4096);
    s.send_bytes(fits.as_bytes());
    let r = s.response(43);
    assert!(r.get("result").is_some(), "{r}");
    read_ok(&mut s);
    s.close_stdin();
    assert!(s.wait_exit(Duration::from_secs(30)).success());
}

#[test]
fn an_oversized_line_is_never_buffered_whole() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = start(dir.path(), Some(4096));
    read_ok(&mut s);
    let before = vm_hwm_kib(s.pid());
    // 96 MiB in one line: far more than the server's whole footprint.
    let line = padded(json!(7), 96 << 20, true);
    s.send_bytes(line.as_bytes());
    drop(line);
    let r = s.response(7);
    assert_eq!(r["error"]["code"], -32600, "{r}");
    read_ok(&mut s);
    let after = vm_hwm_kib(s.pid());
    eprintln!("server peak RSS {before} KiB before, {after} KiB after a 96 MiB line");
    assert!(
        after < before + 32 * 1024,
        "peak RSS grew from {before} KiB to {after} KiB: the line was buffered"
    );
}

#[test]
fn the_default_limit_answers_a_20_mb_line() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = start(dir.path(), None);
    s.send_bytes(padded(json!(9), 20 << 20, true).as_bytes());
    let r = s.response(9);
    assert_eq!(r["error"]["code"], -32600, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&format!("limit of {} bytes", 16 << 20)),
        "{r}"
    );
    read_ok(&mut s);
}
