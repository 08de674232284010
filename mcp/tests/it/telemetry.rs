//! Telemetry through the real binary (`codespace serve --http`): `/metrics` behind the bearer
//! tokens, linted by `promtool check metrics` and scraped by a real Prometheus; an audit batch
//! the store refuses is counted, logged and stored as an event; the OTLP export reaches a test
//! collector that decodes it with the official protobuf definitions (`opentelemetry-proto`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::http_common::{ACCEPT, Resp, initialize, parse_response};

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message as _;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const BIN: &str = env!("CARGO_BIN_EXE_codespace");
const TOKEN: &str = "telemetry-test-token-0123456789";
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_ID: &str = "00f067aa0ba902b7";

/// A `codespace serve --http` child, killed on drop.
struct Served {
    child: Child,
    addr: SocketAddr,
    store: PathBuf,
    log: Arc<Mutex<Vec<String>>>,
    _dir: tempfile::TempDir,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(profile: &str, extra: Value) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("a.txt"), "hello\n").unwrap();
    let store = dir.path().join("store.db");
    let mut cfg = json!({
        "workspaces": {"main": {"root": root, "profile": profile}},
        "store": store,
        "clients": {"ci": {"token": TOKEN}},
    });
    if let (Some(c), Some(e)) = (cfg.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            c.insert(k.clone(), v.clone());
        }
    }
    let cfg_path = dir.path().join("config.json");
    std::fs::write(&cfg_path, cfg.to_string()).unwrap();
    let mut child = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&cfg_path)
        .args(["--http", "127.0.0.1:0"])
        .env_remove("CODESPACE_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let log = Arc::new(Mutex::new(Vec::new()));
    let keep = Arc::clone(&log);
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            keep.lock().unwrap().push(line.clone());
            let _ = tx.send(line);
        }
    });
    let addr: SocketAddr = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("start-up line");
        if let Some(rest) =
            line.strip_prefix("codespace: serving MCP over streamable HTTP at http://")
        {
            break rest.trim_end_matches("/mcp").parse().unwrap();
        }
    };
    Served {
        child,
        addr,
        store,
        log,
        _dir: dir,
    }
}

/// One HTTP/1.1 request to `path` with `headers`, the whole response read.
async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Resp {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if method == "POST" {
        req.push_str("Content-Type: application/json\r\n");
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("Connection: close\r\n\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut raw))
        .await
        .expect("response within 30 s")
        .unwrap();
    parse_response(&raw)
}

async fn metrics(addr: SocketAddr, token: Option<&str>) -> Resp {
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut h = Vec::new();
    if let Some(a) = &auth {
        h.push(("Authorization", a.as_str()));
    }
    request(addr, "GET", "/metrics", &h, "").await
}

/// A tools/call in session `sid`, with extra headers (e.g. `traceparent`).
async fn call(
    addr: SocketAddr,
    sid: &str,
    id: i64,
    tool: &str,
    args: Value,
    extra: &[(&str, &str)],
) -> Value {
    let auth = format!("Bearer {TOKEN}");
    let mut h = vec![
        ("Accept", ACCEPT),
        ("Authorization", auth.as_str()),
        ("Mcp-Session-Id", sid),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    h.extend_from_slice(extra);
    let msg = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                     "params": {"name": tool, "arguments": args}});
    let r = request(addr, "POST", "/mcp", &h, &msg.to_string()).await;
    assert_eq!(r.status, 200, "{r:?}");
    r.reply(id)
}

/// Calls `tool` (no extra headers) and checks that its result is (`is_error`) or is not a
/// tool error.
async fn call_expecting(
    addr: SocketAddr,
    sid: &str,
    id: i64,
    tool: &str,
    args: Value,
    is_error: bool,
) {
    let r = call(addr, sid, id, tool, args, &[]).await;
    assert_eq!(r["result"]["isError"], is_error, "{r}");
}

/// Reads `a.txt` in `main` (with `extra` headers) and checks that it succeeded.
async fn read_a(addr: SocketAddr, sid: &str, id: i64, extra: &[(&str, &str)]) {
    let r = call(
        addr,
        sid,
        id,
        "read",
        json!({"workspace_id": "main", "path": "a.txt"}),
        extra,
    )
    .await;
    assert_eq!(r["result"]["isError"], false, "{r}");
}

/// Adds `b.txt` in `main` with one patch and checks that it was (not `is_error`) or was not
/// applied.
async fn add_b(addr: SocketAddr, sid: &str, id: i64, is_error: bool) {
    call_expecting(
        addr,
        sid,
        id,
        "apply_patch",
        json!({"workspace_id": "main", "patch": "*** Begin Patch\n*** Add File: b.txt\n+b\n*** End Patch\n"}),
        is_error,
    )
    .await
}

/// Polls `/metrics` until `line` is in it (the scrape sees the event), at most 30 s.
async fn metrics_until(addr: SocketAddr, line: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let body = metrics(addr, Some(TOKEN)).await.body;
        if body.lines().any(|l| l == line) {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "no `{line}` in /metrics:\n{body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn on_path(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(program))
            .find(|p| p.is_file())
    })
}

#[tokio::test]
async fn metrics_need_a_token_and_pass_promtool() {
    let s = serve("read-only", json!({}));
    assert_eq!(metrics(s.addr, None).await.status, 401);
    assert_eq!(
        metrics(s.addr, Some("not-the-token-0123456789xyz"))
            .await
            .status,
        401
    );
    let sid = initialize(s.addr, Some(TOKEN)).await;
    read_a(s.addr, &sid, 2, &[]).await;
    add_b(s.addr, &sid, 3, true).await;
    let body = metrics_until(
        s.addr,
        r#"codespace_decisions_total{profile="read-only",result="allow",tool="read"} 1"#,
    )
    .await;
    let resp = metrics(s.addr, Some(TOKEN)).await;
    assert_eq!(
        resp.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    for line in [
        r#"codespace_decisions_total{profile="read-only",result="deny",tool="apply_patch"} 1"#,
        r#"codespace_tool_call_duration_seconds_count{tool="read"} 1"#,
        "codespace_holds_pending 0",
        "codespace_processes_live 0",
        "codespace_audit_write_failures_total 0",
        "codespace_policy_reload_failures_total 0",
        r#"codespace_otlp_dropped_total{signal="logs"} 0"#,
    ] {
        assert!(body.lines().any(|l| l == line), "no `{line}` in:\n{body}");
    }
    // Nothing secret in the exposition: no token, no path, no file content.
    assert!(!body.contains(TOKEN) && !body.contains("a.txt") && !body.contains("hello"));

    let Some(promtool) = on_path("promtool") else {
        codespace_test_skip::skip(
            "metrics_need_a_token_and_pass_promtool",
            "promtool is not installed (Debian package `prometheus`; scripts/test.sh installs it)",
        );
        return;
    };
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write as _;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(resp.body.as_bytes()).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics failed:\n{}{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        resp.body
    );
}

/// A loopback port nobody listens on right now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test]
async fn a_real_prometheus_scrapes_metrics_with_the_token() {
    let Some(prometheus) = on_path("prometheus") else {
        codespace_test_skip::skip(
            "a_real_prometheus_scrapes_metrics_with_the_token",
            "prometheus is not installed (Debian package `prometheus`; scripts/test.sh installs it)",
        );
        return;
    };
    let s = serve("read-only", json!({}));
    let sid = initialize(s.addr, Some(TOKEN)).await;
    read_a(s.addr, &sid, 2, &[]).await;

    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, TOKEN).unwrap();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: codespace\n    \
             scrape_interval: 1s\n    authorization:\n      type: Bearer\n      credentials_file: {}\n    \
             static_configs:\n      - targets: ['{}']\n",
            token_file.display(),
            s.addr
        ),
    )
    .unwrap();
    let port = free_port();
    let mut prom = Command::new(prometheus)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    struct Kill<'a>(&'a mut Child);
    impl Drop for Kill<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _prom = Kill(&mut prom);
    let api: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let query = |q: &'static str| async move {
        let Ok(mut conn) = TcpStream::connect(api).await else {
            return None;
        };
        let req = format!(
            "GET /api/v1/query?query={q} HTTP/1.1\r\nHost: {api}\r\nConnection: close\r\n\r\n"
        );
        conn.write_all(req.as_bytes()).await.ok()?;
        let mut raw = Vec::new();
        conn.read_to_end(&mut raw).await.ok()?;
        let r = parse_response(&raw);
        serde_json::from_str::<Value>(&r.body).ok()
    };
    // Poll the API until the scrape is in it (up == 1 for our job), at most 90 s.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let up = query("up%7Bjob%3D%22codespace%22%7D").await;
        let value = up
            .as_ref()
            .and_then(|v| v["data"]["result"].get(0))
            .map(|r| r["value"][1].clone());
        if value == Some(json!("1")) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus never scraped us: {up:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let series = query("codespace_decisions_total%7Btool%3D%22read%22%7D")
        .await
        .unwrap();
    let result = &series["data"]["result"][0];
    assert_eq!(result["metric"]["result"], "allow", "{series}");
    assert_eq!(result["metric"]["profile"], "read-only", "{series}");
    assert_eq!(result["value"][1], "1", "{series}");
}

#[tokio::test]
async fn a_refused_audit_batch_is_counted_logged_and_stored_as_an_event() {
    let s = serve("read-only", json!({}));
    let sid = initialize(s.addr, Some(TOKEN)).await;
    // The store itself refuses `find`'s decision rows (as a full disk or a constraint would).
    {
        let conn = rusqlite::Connection::open(&s.store).unwrap();
        conn.busy_timeout(Duration::from_secs(10)).unwrap();
        conn.execute_batch(
            "CREATE TRIGGER refuse_find BEFORE INSERT ON decisions WHEN NEW.tool = 'find' \
             BEGIN SELECT RAISE(ABORT, 'refused by the test'); END;",
        )
        .unwrap();
    }
    call_expecting(
        s.addr,
        &sid,
        2,
        "find",
        json!({"workspace_id": "main"}),
        false,
    )
    .await;
    metrics_until(s.addr, "codespace_audit_write_failures_total 1").await;
    let conn = rusqlite::Connection::open(&s.store).unwrap();
    let detail: String = conn
        .query_row(
            "SELECT detail FROM events WHERE kind = 'audit_write_failed'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let detail: Value = serde_json::from_str(&detail).unwrap();
    assert_eq!(detail["appends_lost"], 1, "{detail}");
    assert!(
        detail["error"]
            .as_str()
            .unwrap()
            .contains("refused by the test"),
        "{detail}"
    );
    let log = s.log.lock().unwrap().join("\n");
    assert!(log.contains("audit write failed"), "{log}");
    let r = call(s.addr, &sid, 4, "workspace_info", json!({}), &[]).await;
    assert_eq!(
        r["result"]["structuredContent"]["telemetry"]["audit_write_failures"], 1,
        "{r}"
    );
    // Other tools' rows still go in.
    read_a(s.addr, &sid, 3, &[]).await;
    metrics_until(
        s.addr,
        r#"codespace_decisions_total{profile="read-only",result="allow",tool="read"} 1"#,
    )
    .await;
}

/// What the test collector received, decoded.
#[derive(Default)]
struct Received {
    logs: Vec<ExportLogsServiceRequest>,
    traces: Vec<ExportTraceServiceRequest>,
    api_keys: Vec<String>,
}

/// A collector on a free loopback port: `/v1/logs` and `/v1/traces` decoded with the official
/// protobuf types; each request wakes the waiting test.
async fn collector() -> (SocketAddr, Arc<Mutex<Received>>, Arc<tokio::sync::Notify>) {
    use axum::body::Bytes;
    use axum::http::HeaderMap;
    let got = Arc::new(Mutex::new(Received::default()));
    let wake = Arc::new(tokio::sync::Notify::new());
    let (g1, w1, g2, w2) = (
        Arc::clone(&got),
        Arc::clone(&wake),
        Arc::clone(&got),
        Arc::clone(&wake),
    );
    let app = axum::Router::new()
        .route(
            "/v1/logs",
            axum::routing::post(move |h: HeaderMap, body: Bytes| async move {
                assert_eq!(
                    h.get("content-type").and_then(|v| v.to_str().ok()),
                    Some("application/x-protobuf")
                );
                let req = ExportLogsServiceRequest::decode(body).expect("OTLP logs decode");
                let mut g = g1.lock().unwrap();
                g.logs.push(req);
                if let Some(k) = h.get("x-api-key").and_then(|v| v.to_str().ok()) {
                    g.api_keys.push(k.to_string());
                }
                drop(g);
                w1.notify_one();
                ""
            }),
        )
        .route(
            "/v1/traces",
            axum::routing::post(move |body: Bytes| async move {
                let req = ExportTraceServiceRequest::decode(body).expect("OTLP traces decode");
                g2.lock().unwrap().traces.push(req);
                w2.notify_one();
                ""
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (addr, got, wake)
}

/// The OCSF bodies of the decision log records received so far.
fn decision_bodies(got: &Received) -> Vec<(Value, String)> {
    let mut out = Vec::new();
    for req in &got.logs {
        for rl in &req.resource_logs {
            for sl in &rl.scope_logs {
                for rec in &sl.log_records {
                    if rec.event_name != "codespace.decision" {
                        continue;
                    }
                    let Some(AnyValue::StringValue(s)) =
                        rec.body.as_ref().and_then(|b| b.value.clone())
                    else {
                        continue;
                    };
                    out.push((serde_json::from_str(&s).unwrap(), hex(&rec.trace_id)));
                }
            }
        }
    }
    out
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[tokio::test]
async fn decisions_operations_and_spans_reach_an_otlp_collector_under_the_callers_trace() {
    let (collector, got, wake) = collector().await;
    let s = serve(
        "workspace-write",
        json!({"export": {"otlp": {
            "endpoint": format!("http://{collector}"),
            "headers": {"x-api-key": "collector-key-42"},
        }}}),
    );
    let sid = initialize(s.addr, Some(TOKEN)).await;
    let tp = format!("00-{TRACE_ID}-{PARENT_ID}-01");
    read_a(s.addr, &sid, 2, &[("traceparent", tp.as_str())]).await;
    add_b(s.addr, &sid, 3, false).await;

    // Wait (each received request wakes us) for: the read's span under the caller's trace,
    // its decision record, and the patch's operation events.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let done = {
            let g = got.lock().unwrap();
            let span = g
                .traces
                .iter()
                .flat_map(|t| &t.resource_spans)
                .flat_map(|rs| &rs.scope_spans)
                .flat_map(|ss| &ss.spans)
                .any(|sp| {
                    sp.name == "tools/call read"
                        && hex(&sp.trace_id) == TRACE_ID
                        && hex(&sp.parent_span_id) == PARENT_ID
                });
            let decision = decision_bodies(&g)
                .iter()
                .any(|(ev, trace)| ev["api"]["operation"] == "read" && trace == TRACE_ID);
            let ops = g
                .logs
                .iter()
                .flat_map(|l| &l.resource_logs)
                .flat_map(|rl| &rl.scope_logs)
                .flat_map(|sl| &sl.log_records)
                .filter(|r| r.event_name == "codespace.operation")
                .count();
            span && decision && ops >= 2
        };
        if done {
            break;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "the collector did not get everything");
        let _ = tokio::time::timeout(left, wake.notified()).await;
    }
    let g = got.lock().unwrap();
    for (ev, _) in decision_bodies(&g) {
        assert_eq!(ev["class_uid"], 6003, "{ev}");
        assert_eq!(ev["category_uid"], 6, "{ev}");
        assert_eq!(ev["metadata"]["product"]["name"], "CodeSpace", "{ev}");
        assert!(ev["type_uid"].as_u64().unwrap() / 100 == 6003, "{ev}");
    }
    assert!(g.api_keys.iter().all(|k| k == "collector-key-42"));
    assert!(!g.api_keys.is_empty());
    let resource = g.logs[0].resource_logs[0].resource.as_ref().unwrap();
    assert!(resource.attributes.iter().any(|kv| kv.key == "service.name"
        && kv.value.as_ref().and_then(|v| v.value.clone())
            == Some(AnyValue::StringValue("codespace".into()))));
    // The collector's key is a credential: never in the server's log.
    let log = s.log.lock().unwrap().join("\n");
    assert!(!log.contains("collector-key-42"), "{log}");
}

#[tokio::test]
async fn a_dead_collector_costs_counted_records_not_failed_calls() {
    let dead = free_port();
    let s = serve(
        "read-only",
        json!({"export": {"otlp": {"endpoint": format!("http://127.0.0.1:{dead}"), "timeout_ms": 500}}}),
    );
    let sid = initialize(s.addr, Some(TOKEN)).await;
    for i in 0..3 {
        read_a(s.addr, &sid, 2 + i, &[]).await;
    }
    // Each failed batch is counted; the calls above all answered.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let body = metrics(s.addr, Some(TOKEN)).await.body;
        let failed = body
            .lines()
            .find_map(|l| l.strip_prefix(r#"codespace_otlp_export_failures_total{signal="logs"} "#))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        if failed >= 3 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no failed export counted:\n{body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // workspace_info reports the same, with the endpoint and no more.
    let r = call(s.addr, &sid, 9, "workspace_info", json!({}), &[]).await;
    let otlp = &r["result"]["structuredContent"]["telemetry"]["otlp"];
    assert_eq!(otlp["endpoint"], format!("http://127.0.0.1:{dead}"), "{r}");
    assert!(otlp["logs"]["failed"].as_u64().unwrap() >= 3, "{r}");
    assert_eq!(otlp["logs"]["dropped"], 0, "{r}");
}
