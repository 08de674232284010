//! `codespace serve --http` as a process: start-up lines, refusal of unauthenticated
//! non-loopback binding, SIGTERM ending cleanly with a stream open, and no token in the log.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::http_common;

use http_common::*;
use serde_json::json;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;

const BIN: &str = env!("CARGO_BIN_EXE_codespace");
const TOKEN: &str = "process-test-token-0123456789";

#[test]
fn unauthenticated_non_loopback_address_is_refused_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .args(["serve", dir.path().to_str().unwrap(), "--store"])
        .arg(state.path().join("s.db"))
        .args(["--http", "0.0.0.0:0"])
        .env_remove("CODESPACE_CONFIG")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("refusing to serve unauthenticated HTTP on the non-loopback address"),
        "{err}"
    );
    assert!(!err.contains("serving MCP"), "{err}");
}

#[tokio::test]
async fn sigterm_ends_the_server_cleanly_and_the_log_holds_no_token() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("a.txt"), "x\n").unwrap();
    let cfg = json!({
        "workspaces": {"main": {"root": root, "profile": "read-only"}},
        "store": dir.path().join("store.db"),
        "clients": {"ci": {"token": TOKEN}},
    });
    let cfg_path = dir.path().join("config.json");
    std::fs::write(&cfg_path, cfg.to_string()).unwrap();
    let mut child = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&cfg_path)
        .args(["--http", "127.0.0.1:0"])
        .env("CODESPACE_LOG", "trace")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Collect stderr on a thread; the first line names the address.
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line);
        }
    });
    let mut lines = Vec::new();
    let addr: SocketAddr = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("start-up line");
        lines.push(line.clone());
        if let Some(rest) =
            line.strip_prefix("codespace: serving MCP over streamable HTTP at http://")
        {
            break rest.trim_end_matches("/mcp").parse().unwrap();
        }
    };

    let wrong = "not-the-token-but-similar-0123";
    let r = post(addr, Some(wrong), None, &initialize_msg(1)).await;
    assert_eq!(r.status, 401);
    let sid = initialize(addr, Some(TOKEN)).await;
    let r = call(
        addr,
        Some(TOKEN),
        &sid,
        2,
        "read",
        json!({"workspace_id": "main", "path": "a.txt"}),
    )
    .await;
    assert_eq!(r["result"]["isError"], false, "{r}");
    // Hold the session's standing SSE stream open across the shutdown.
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let get = format!(
        "GET /mcp HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\nAccept: text/event-stream\r\n\
         Mcp-Session-Id: {sid}\r\nMCP-Protocol-Version: 2025-11-25\r\n\r\n"
    );
    stream.write_all(get.as_bytes()).await.unwrap();

    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    let exit = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "server still running 20 s after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(exit.success(), "{exit:?}");
    reader.join().unwrap();
    lines.extend(rx.try_iter());
    let log = lines.join("\n");
    assert!(log.contains("codespace: HTTP server stopped"), "{log}");
    assert!(!log.contains("UNAUTHENTICATED"), "{log}");
    assert!(!log.contains(TOKEN), "token in the log");
    assert!(!log.contains(wrong), "presented token in the log");
    drop(stream);
}

#[tokio::test]
async fn a_closed_session_is_logged_as_closed_and_another_clients_session_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    std::fs::create_dir_all(&root).unwrap();
    const OTHER: &str = "other-client-token-0123456789";
    let cfg = json!({
        "workspaces": {"main": {"root": root, "profile": "read-only"}},
        "store": dir.path().join("store.db"),
        "clients": {"ci": {"token": TOKEN}, "other": {"token": OTHER}},
    });
    let cfg_path = dir.path().join("config.json");
    std::fs::write(&cfg_path, cfg.to_string()).unwrap();
    let mut child = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&cfg_path)
        .args(["--http", "127.0.0.1:0"])
        .env("CODESPACE_LOG", "info")
        .env_remove("CODESPACE_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line);
        }
    });
    let mut lines = Vec::new();
    let addr: SocketAddr = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("start-up line");
        lines.push(line.clone());
        if let Some(rest) =
            line.strip_prefix("codespace: serving MCP over streamable HTTP at http://")
        {
            break rest.trim_end_matches("/mcp").parse().unwrap();
        }
    };
    let delete = |sid: String, token: &'static str| async move {
        http(
            addr,
            "DELETE",
            &[("authorization", &bearer(token)), ("mcp-session-id", &sid)],
            "",
        )
        .await
    };
    let sid = initialize(addr, Some(TOKEN)).await;
    let live = initialize(addr, Some(TOKEN)).await;
    assert_eq!(delete(sid.clone(), TOKEN).await.status, 204);
    // Deleted before: a closed session, not another client's.
    assert_eq!(delete(sid.clone(), TOKEN).await.status, 404);
    // A live session of another client is still named as such.
    assert_eq!(delete(live, OTHER).await.status, 404);
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = child.wait().unwrap();
    assert!(exit.success(), "{exit:?}");
    reader.join().unwrap();
    lines.extend(rx.try_iter());
    let log = lines.join("\n");
    // The closed session's DELETE is logged as such; only the other client's attempt is
    // "session of another client".
    assert_eq!(log.matches("unknown or closed session").count(), 1, "{log}");
    assert_eq!(log.matches("session of another client").count(), 1, "{log}");
}
