//! Pre-authentication exhaustion of `serve --http`, on the real binary: connections that never
//! finish a request head are closed after `limits.http_header_timeout_ms`, connections not yet
//! authenticated are capped (the oldest is closed to make room), and the soft open-file limit is
//! raised to the hard one at start, so idle sockets cannot lock a client with a token out.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::http_common;

use http_common::{call, initialize};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_codespace");
const TOKEN: &str = "preauth-token-0123456789abcdef";

struct Server {
    child: Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `codespace serve --http 127.0.0.1:0` with a token client and `limits`, started by `sh` with
/// the soft open-file limit lowered to `soft_nofile` (the hard one stays).
fn serve(limits: Value, soft_nofile: u32) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("a.txt"), "alpha\n").unwrap();
    let cfg = dir.path().join("config.json");
    std::fs::write(
        &cfg,
        json!({
            "workspaces": {"main": {"root": root, "profile": "read-only"}},
            "store": dir.path().join("store.db"),
            "clients": {"ci": {"token": TOKEN}},
            "limits": limits,
        })
        .to_string(),
    )
    .unwrap();
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -S -n {soft_nofile} && exec \"$0\" serve --http 127.0.0.1:0 --config \"$1\""
        ))
        .arg(BIN)
        .arg(&cfg)
        .env_remove("CODESPACE_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line);
        }
    });
    let addr = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the start-up line");
        if let Some(rest) =
            line.strip_prefix("codespace: serving MCP over streamable HTTP at http://")
        {
            break rest.trim_end_matches("/mcp").parse().unwrap();
        }
    };
    Server {
        child,
        addr,
        _dir: dir,
    }
}

/// A connection that sent `bytes` (a partial request head, or nothing) and waits.
fn idle(addr: SocketAddr, bytes: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(bytes).unwrap();
    s
}

/// Blocks until the server closes `s` (EOF or reset); panics if it sends anything first or
/// keeps it open past `bound`.
fn wait_closed_by_server(s: &mut TcpStream, bound: Duration) {
    s.set_read_timeout(Some(bound)).unwrap();
    let mut buf = [0_u8; 512];
    match s.read(&mut buf) {
        Ok(0) => {}
        Ok(n) => {
            // A 408 or similar before the close is fine; then the close must follow.
            let _ = n;
            match s.read(&mut buf) {
                Ok(0) => {}
                Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
                other => panic!("the server kept the connection open: {other:?}"),
            }
        }
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        Err(e) => panic!("the server did not close the idle connection within {bound:?}: {e}"),
    }
}

fn soft_and_hard_nofile(pid: u32) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap()
        .to_string();
    let cols: Vec<&str> = line.split_whitespace().collect();
    (cols[3].to_string(), cols[4].to_string())
}

const PARTIAL_HEAD: &[u8] = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: appl";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_partial_heads_cannot_lock_out_a_client_with_a_token() {
    // The header timeout is long here: what keeps the client in is the cap and the fd limit.
    let s = serve(
        json!({"http_header_timeout_ms": 600_000, "http_max_unauthenticated_connections": 16}),
        96,
    );
    let pid = s.child.id();
    let (soft, hard) = soft_and_hard_nofile(pid);
    assert_eq!(
        soft, hard,
        "the soft open-file limit was not raised to the hard one"
    );
    // More idle half-requests than the lowered soft limit would have allowed descriptors.
    let mut idlers: Vec<TcpStream> = (0..150).map(|_| idle(s.addr, PARTIAL_HEAD)).collect();
    // A client with a token still gets answered, on new connections.
    let sid = initialize(s.addr, Some(TOKEN)).await;
    let r = call(
        s.addr,
        Some(TOKEN),
        &sid,
        2,
        "read",
        json!({"workspace_id": "main", "path": "a.txt"}),
    )
    .await;
    assert_eq!(r["result"]["isError"], false, "{r}");
    // At most the cap of idle connections are left open: the oldest ones were closed. Their
    // closing is what the test waits for (the first 150 - 16 in accept order).
    let closed = idlers.len() - 16;
    for s in idlers.iter_mut().take(closed) {
        wait_closed_by_server(s, Duration::from_secs(30));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_partial_head_is_closed_after_the_header_timeout() {
    let timeout = Duration::from_millis(300);
    let s = serve(
        json!({"http_header_timeout_ms": timeout.as_millis() as u64}),
        1024,
    );
    let start = Instant::now();
    let mut partial = idle(s.addr, PARTIAL_HEAD);
    let mut silent = idle(s.addr, b"");
    wait_closed_by_server(&mut partial, Duration::from_secs(30));
    wait_closed_by_server(&mut silent, Duration::from_secs(30));
    assert!(
        start.elapsed() >= timeout,
        "closed before the timeout: {:?}",
        start.elapsed()
    );
    // An authenticated keep-alive connection whose next request head stalls is closed too (the
    // head timer, not the authentication deadline: the first request authenticated it).
    let mut authed = TcpStream::connect(s.addr).unwrap();
    authed
        .write_all(
            format!(
                "GET /mcp HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {TOKEN}\r\n\
                 Accept: text/event-stream\r\n\r\n",
                s.addr
            )
            .as_bytes(),
        )
        .unwrap();
    authed.write_all(PARTIAL_HEAD).unwrap();
    authed
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut got = Vec::new();
    let closed = authed.read_to_end(&mut got);
    let text = String::from_utf8_lossy(&got).to_lowercase();
    assert!(
        closed.is_ok(),
        "not closed within 30 s: {closed:?} after {text}"
    );
    assert!(text.starts_with("http/1.1 400"), "{text}");
    assert!(!text.contains("connection: close"), "{text}");
    // The server still serves.
    let sid = initialize(s.addr, Some(TOKEN)).await;
    assert!(!sid.is_empty());
}
