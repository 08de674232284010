//! Streamable HTTP transport, in process: MCP over /mcp, the DNS-rebinding guard, bearer
//! tokens, the client name in Cedar and the decision log, session ownership and the limits.
// Its own test binary (not in tests/it/): it installs a process-wide TRACE tracing subscriber and reads every log line of the process.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

#[path = "it/http_common/mod.rs"]
mod http_common;

use codespace_store::DecisionQuery;
use http_common::*;
use serde_json::json;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;

const CI_TOKEN: &str = "ci-token-0123456789abcdef";
const DEV_TOKEN: &str = "dev-token-0123456789abcdef";

/// Every log line of this test process, at TRACE, so tests can check no token is ever logged.
fn log_buffer() -> Arc<Mutex<Vec<u8>>> {
    static BUF: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    BUF.get_or_init(|| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let sink = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || LogSink(sink.clone()))
            .finish();
        let _ = tracing::subscriber::set_global_default(subscriber);
        buf
    })
    .clone()
}

struct LogSink(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogSink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn two_clients() -> Setup {
    Setup {
        clients: vec![("ci", CI_TOKEN), ("dev", DEV_TOKEN)],
        ..Setup::default()
    }
}

#[tokio::test]
async fn initialize_list_and_call_over_http() {
    let s = Setup::default().start().await;
    let sid = initialize(s.addr, None).await;
    let list = post(
        s.addr,
        None,
        Some(&sid),
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    )
    .await;
    assert_eq!(list.header("content-type"), Some("text/event-stream"));
    let names: Vec<String> = list.reply(2)["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    assert!(names.contains(&"read".to_string()), "{names:?}");
    let r = call(
        s.addr,
        None,
        &sid,
        3,
        "read",
        json!({"workspace_id": "main", "path": "a.txt"}),
    )
    .await;
    assert_eq!(r["result"]["isError"], false, "{r}");
    assert_eq!(
        r["result"]["structuredContent"]["content"],
        "hello over http\n"
    );
    let info = call(s.addr, None, &sid, 4, "workspace_info", json!({})).await;
    assert_eq!(
        info["result"]["structuredContent"]["transports"],
        json!(["streamable-http"])
    );
    s.flush_audit();
    let rows = codespace_store::Store::open(&s.store)
        .unwrap()
        .query_decisions(&DecisionQuery::default())
        .unwrap();
    let row = rows
        .iter()
        .find(|r| r.tool == "read")
        .expect("a read decision row");
    assert_eq!(row.client.as_deref(), Some("local"));
    assert_eq!(row.transport.as_deref(), Some("streamable-http"));
    s.stop().await;
}

#[tokio::test]
async fn missing_or_wrong_token_gets_401_and_no_token_is_echoed_or_logged() {
    let logs = log_buffer();
    let s = two_clients().start().await;
    let wrong = "wrong-token-which-must-not-echo-42";
    let basic = format!("Basic {CI_TOKEN}");
    let prefix = bearer(&CI_TOKEN[..CI_TOKEN.len() - 1]);
    let longer = bearer(&format!("{CI_TOKEN}x"));
    let wrong_bearer = bearer(wrong);
    let cases: Vec<Option<&str>> = vec![
        None,
        Some(&wrong_bearer),
        Some(&basic),
        Some(&prefix),
        Some(&longer),
        Some("Bearer"),
    ];
    for auth in cases {
        let mut h = vec![("Accept", ACCEPT)];
        if let Some(a) = auth {
            h.push(("Authorization", a));
        }
        let r = http(s.addr, "POST", &h, &initialize_msg(1).to_string()).await;
        assert_eq!(r.status, 401, "{auth:?}: {r:?}");
        assert!(
            r.header("www-authenticate").unwrap().starts_with("Bearer"),
            "{r:?}"
        );
        assert_eq!(r.body, r#"{"error":"unauthorized"}"#);
        assert!(r.header("mcp-session-id").is_none());
        let all = format!("{:?}", r.headers) + &r.body;
        for t in [CI_TOKEN, DEV_TOKEN, wrong] {
            assert!(!all.contains(t), "token echoed: {all}");
        }
    }
    // The right token works, and is then not logged either.
    let sid = initialize(s.addr, Some(CI_TOKEN)).await;
    let r = call(
        s.addr,
        Some(CI_TOKEN),
        &sid,
        2,
        "read",
        json!({"workspace_id": "main", "path": "a.txt"}),
    )
    .await;
    assert_eq!(r["result"]["isError"], false, "{r}");
    s.stop().await;
    let text = String::from_utf8_lossy(&logs.lock().unwrap()).to_string();
    assert!(
        text.contains("bearer token"),
        "the refusals were logged: {text}"
    );
    for t in [CI_TOKEN, DEV_TOKEN, wrong] {
        assert!(!text.contains(t), "token in the log");
    }
}

#[tokio::test]
async fn foreign_host_and_origin_are_refused_before_mcp_handling() {
    let s = Setup {
        clients: vec![("ci", CI_TOKEN)],
        tweak: Box::new(|o| o.allowed_hosts = vec!["mcp.example.com".into()]),
        ..Setup::default()
    }
    .start()
    .await;
    let port = s.addr.port();
    let auth = bearer(CI_TOKEN);
    let body = initialize_msg(1).to_string();
    let own = format!("127.0.0.1:{port}");
    let localhost = format!("localhost:{port}");
    let wrong_port = format!("127.0.0.1:{}", port.wrapping_add(1));
    let evil_at_port = format!("evil.example:{port}");
    let own_origin = format!("http://localhost:{port}");
    let refused: Vec<Vec<(&str, &str)>> = vec![
        vec![("Host", "evil.example")],
        vec![("Host", &evil_at_port)],
        vec![("Host", &wrong_port)],
        vec![("Host", &own), ("Origin", "http://evil.example")],
        vec![("Host", &own), ("Origin", "https://evil.example:443")],
        vec![("Host", &own), ("Origin", "null")],
    ];
    for extra in refused {
        // With and without a valid token: the guard answers first, so a token changes nothing.
        for with_token in [false, true] {
            let mut h = vec![("Accept", ACCEPT)];
            h.extend(extra.iter().copied());
            if with_token {
                h.push(("Authorization", &auth));
            }
            let r = http(s.addr, "POST", &h, &body).await;
            assert_eq!(r.status, 403, "{h:?}: {r:?}");
            assert!(r.header("mcp-session-id").is_none(), "no session for {h:?}");
        }
    }
    let accepted: Vec<Vec<(&str, &str)>> = vec![
        vec![("Host", &own)],
        vec![("Host", &localhost), ("Origin", &own_origin)],
        vec![("Host", "mcp.example.com")],
        vec![
            ("Host", "mcp.example.com"),
            ("Origin", "https://mcp.example.com"),
        ],
    ];
    for extra in accepted {
        let mut h = vec![("Accept", ACCEPT), ("Authorization", &auth)];
        h.extend(extra.iter().copied());
        let r = http(s.addr, "POST", &h, &body).await;
        assert_eq!(r.status, 200, "{h:?}: {r:?}");
        assert!(r.header("mcp-session-id").is_some());
    }
    s.stop().await;
}

const CI_ONLY: &str = r#"
@id("base.forbid.secret-for-ci")
@reason("only client ci may read secret-for-ci.txt")
forbid (principal, action == CodeSpace::Action::"read", resource)
when { resource.path == "secret-for-ci.txt" && context.session.client != "ci" };
"#;

#[tokio::test]
async fn client_name_reaches_policy_and_decision_rows() {
    let s = Setup {
        clients: vec![("ci", CI_TOKEN), ("dev", DEV_TOKEN)],
        base_policies: vec![("ci-only.cedar", CI_ONLY)],
        ..Setup::default()
    }
    .start()
    .await;
    let args = json!({"workspace_id": "main", "path": "secret-for-ci.txt"});
    let ci = initialize(s.addr, Some(CI_TOKEN)).await;
    let ok = call(s.addr, Some(CI_TOKEN), &ci, 2, "read", args.clone()).await;
    assert_eq!(ok["result"]["isError"], false, "{ok}");
    assert_eq!(
        ok["result"]["structuredContent"]["content"],
        "ci eyes only\n"
    );

    let dev = initialize(s.addr, Some(DEV_TOKEN)).await;
    let denied = call(s.addr, Some(DEV_TOKEN), &dev, 2, "read", args).await;
    assert_eq!(denied["result"]["isError"], true, "{denied}");
    let body: serde_json::Value =
        serde_json::from_str(denied["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(body["code"], "UNAUTHORIZED", "{body}");
    assert!(
        body.to_string().contains("base.forbid.secret-for-ci"),
        "{body}"
    );
    // Other reads by dev are unaffected.
    let other = call(
        s.addr,
        Some(DEV_TOKEN),
        &dev,
        3,
        "read",
        json!({"workspace_id": "main", "path": "a.txt"}),
    )
    .await;
    assert_eq!(other["result"]["isError"], false, "{other}");

    s.flush_audit();
    let rows = codespace_store::Store::open(&s.store)
        .unwrap()
        .query_decisions(&DecisionQuery {
            tool: Some("read".into()),
            ..DecisionQuery::default()
        })
        .unwrap();
    let secret: Vec<_> = rows
        .iter()
        .filter(|r| r.subject.contains("secret-for-ci.txt"))
        .collect();
    assert!(
        secret.iter().any(|r| r.client.as_deref() == Some("ci")
            && r.transport.as_deref() == Some("streamable-http")
            && r.decision == "allow"),
        "{secret:?}"
    );
    assert!(
        secret.iter().any(|r| r.client.as_deref() == Some("dev")
            && r.decision == "deny"
            && r.policy_ids
                .contains(&"base.forbid.secret-for-ci".to_string())),
        "{secret:?}"
    );
    s.stop().await;
}

#[tokio::test]
async fn a_session_answers_only_the_client_that_created_it() {
    let s = two_clients().start().await;
    let ci = initialize(s.addr, Some(CI_TOKEN)).await;
    let ping = json!({"jsonrpc": "2.0", "id": 5, "method": "ping"});
    let stolen = post(s.addr, Some(DEV_TOKEN), Some(&ci), &ping).await;
    assert_eq!(stolen.status, 404, "{stolen:?}");
    let own = post(s.addr, Some(CI_TOKEN), Some(&ci), &ping).await;
    assert_eq!(own.status, 200, "{own:?}");
    assert_eq!(own.reply(5)["result"], json!({}));
    s.stop().await;
}

#[tokio::test]
async fn in_flight_cap_gives_429_and_a_stalled_client_blocks_no_one() {
    let s = Setup {
        clients: vec![("ci", CI_TOKEN), ("dev", DEV_TOKEN)],
        tweak: Box::new(|o| o.max_in_flight_per_client = 1),
        ..Setup::default()
    }
    .start()
    .await;
    let dev = initialize(s.addr, Some(DEV_TOKEN)).await;
    // ci starts a request and stalls half-way through its body.
    let mut stalled = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {CI_TOKEN}\r\nAccept: {ACCEPT}\r\n\
         Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{\"jsonrpc\":",
        s.addr
    );
    stalled.write_all(head.as_bytes()).await.unwrap();
    // Until the server has taken ci's one slot, a second ci request may still pass; poll.
    let deadline = Instant::now() + Duration::from_secs(10);
    let busy = loop {
        let r = post(s.addr, Some(CI_TOKEN), None, &initialize_msg(1)).await;
        if r.status == 429 {
            break r;
        }
        assert!(Instant::now() < deadline, "never got 429: {r:?}");
    };
    assert_eq!(busy.header("retry-after"), Some("1"));
    assert_eq!(busy.body, r#"{"error":"too many requests in flight"}"#);
    // Another client is served while ci's request hangs.
    let r = call(
        s.addr,
        Some(DEV_TOKEN),
        &dev,
        2,
        "read",
        json!({"workspace_id": "main", "path": "a.txt"}),
    )
    .await;
    assert_eq!(r["result"]["isError"], false, "{r}");
    // When the stalled connection goes away, ci gets its slot back.
    drop(stalled);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = post(s.addr, Some(CI_TOKEN), None, &initialize_msg(1)).await;
        if r.status == 200 {
            break;
        }
        assert_eq!(r.status, 429, "{r:?}");
        assert!(Instant::now() < deadline, "ci's slot never came back");
        tokio::task::yield_now().await;
    }
    s.stop().await;
}

#[tokio::test]
async fn oversized_bodies_get_413() {
    let s = Setup {
        tweak: Box::new(|o| o.max_body_bytes = Some(1024)),
        ..Setup::default()
    }
    .start()
    .await;
    let big =
        json!({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"pad": "x".repeat(4096)}});
    let r = post(s.addr, None, None, &big).await;
    assert_eq!(r.status, 413, "{r:?}");
    // Without a Content-Length (chunked), the cap holds while the body streams in.
    let body = big.to_string();
    let mut chunked = String::new();
    for part in body.as_bytes().chunks(500) {
        chunked.push_str(&format!(
            "{:x}\r\n{}\r\n",
            part.len(),
            std::str::from_utf8(part).unwrap()
        ));
    }
    chunked.push_str("0\r\n\r\n");
    let mut st = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    let req = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nAccept: {ACCEPT}\r\nContent-Type: application/json\r\n\
         Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n{chunked}",
        s.addr
    );
    st.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(
        Duration::from_secs(10),
        tokio::io::AsyncReadExt::read_to_end(&mut st, &mut raw),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(parse_response(&raw).status, 413);
    // A small request still works.
    initialize(s.addr, None).await;
    s.stop().await;
}

#[tokio::test]
async fn idle_sessions_expire() {
    let s = Setup {
        tweak: Box::new(|o| o.session_idle = Duration::from_secs(1)),
        ..Setup::default()
    }
    .start()
    .await;
    let sid = initialize(s.addr, None).await;
    let ping = json!({"jsonrpc": "2.0", "id": 9, "method": "ping"});
    // Each probe is activity, so probe less often than the idle time.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let r = post(s.addr, None, Some(&sid), &ping).await;
        if r.status == 404 {
            break;
        }
        assert_eq!(r.status, 200, "{r:?}");
        assert!(Instant::now() < deadline, "the session never expired");
    }
    s.stop().await;
}

#[tokio::test]
async fn unauthenticated_http_refuses_a_non_loopback_address() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = codespace_engine::Config::embedded_default(dir.path()).unwrap();
    let policy =
        codespace_engine::PolicyStore::load(codespace_engine::policy::PolicySource::Embedded)
            .unwrap();
    let gw = codespace_engine::Gateway::new(
        cfg,
        Arc::new(policy),
        None,
        codespace_engine::SandboxFacts {
            sandbox_enforced: false,
            network_enforced: false,
            masking_enforced: false,
        },
    )
    .unwrap();
    let opts = codespace_mcp::http::HttpOptions::new("0.0.0.0:0".parse().unwrap());
    let e = codespace_mcp::http::HttpServer::bind(Arc::new(gw), opts)
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            codespace_mcp::http::HttpError::UnauthenticatedNonLoopback(_)
        ),
        "{e}"
    );
    assert!(e.to_string().contains("non-loopback"), "{e}");
}

#[tokio::test]
async fn concurrent_clients_make_calls_without_errors() {
    let s = Setup {
        clients: vec![("ci", CI_TOKEN), ("dev", DEV_TOKEN)],
        ..Setup::default()
    }
    .start()
    .await;
    const CLIENTS: usize = 8;
    const CALLS: i64 = 25;
    let addr = s.addr;
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        tasks.push(tokio::spawn(async move {
            let token = if c % 2 == 0 { CI_TOKEN } else { DEV_TOKEN };
            let sid = initialize(addr, Some(token)).await;
            let mut lat = Vec::new();
            for i in 0..CALLS {
                let t = Instant::now();
                let r = call(
                    addr,
                    Some(token),
                    &sid,
                    10 + i,
                    "read",
                    json!({"workspace_id": "main", "path": "a.txt"}),
                )
                .await;
                assert_eq!(r["result"]["isError"], false, "{r}");
                lat.push(t.elapsed());
            }
            lat
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    assert_eq!(all.len(), CLIENTS * CALLS as usize);
    all.sort();
    eprintln!(
        "{} calls: p50 {:?}, p99 {:?}",
        all.len(),
        all[all.len() / 2],
        all[all.len() * 99 / 100]
    );
    s.stop().await;
}
