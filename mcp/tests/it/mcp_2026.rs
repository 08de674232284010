//! MCP 2026-07-28 beside 2025-11-25 (issue 30): stateless requests over HTTP (no `initialize`,
//! no session) and over stdio, `server/discover`, cache hints on `tools/list` only for the new
//! revision, `Mcp-Method`/`Mcp-Name` checked against the body, the `traceparent` in the audit
//! row, the audited client taken from the bearer token and never from `_meta.clientInfo`, the
//! session cap untouched by stateless requests, and strict tool input schemas in both eras.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::http_common::{self, ACCEPT, Resp, Setup, bearer, http, initialize};
use crate::stdio_common::StdioServer;
use codespace_store::{DecisionQuery, Store};
use serde_json::{Value, json};
use std::net::SocketAddr;

const ALICE: &str = "alice-token-0123456789abcdef";
const BOB: &str = "bob-token-0123456789abcdef0";
const MODERN: &str = "2026-07-28";
const TRACE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// The `_meta` a 2026-07-28 request carries, naming `client` as its clientInfo.
fn meta(client: &str) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": client, "version": "1"},
    })
}

/// A 2026-07-28 request: `params` gets the protocol `_meta`.
fn modern(id: i64, method: &str, mut params: Value, client: &str) -> Value {
    params["_meta"] = meta(client);
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// POSTs a stateless request as `token` with the 2026 header and any `extra` headers.
async fn post_modern(addr: SocketAddr, token: &str, msg: &Value, extra: &[(&str, &str)]) -> Resp {
    let auth = bearer(token);
    let mut h: Vec<(&str, &str)> = vec![
        ("Accept", ACCEPT),
        ("Authorization", &auth),
        ("MCP-Protocol-Version", MODERN),
    ];
    h.extend_from_slice(extra);
    http(addr, "POST", &h, &msg.to_string()).await
}

/// The `Mcp-Method`/`Mcp-Name` headers a 2026 client sends for a `tools/call` of `tool`.
fn call_headers(tool: &str) -> [(&str, &str); 2] {
    [("Mcp-Method", "tools/call"), ("Mcp-Name", tool)]
}

fn structured(reply: &Value) -> Value {
    assert_eq!(reply["result"]["isError"], false, "{reply}");
    reply["result"]["structuredContent"].clone()
}

fn error_code(reply: &Value) -> (String, String) {
    assert_eq!(reply["result"]["isError"], true, "{reply}");
    let body = &reply["result"]["structuredContent"];
    (
        body["code"].as_str().unwrap().to_string(),
        body["message"].as_str().unwrap().to_string(),
    )
}

#[tokio::test]
async fn a_2026_client_works_without_initialize_or_session() {
    let s = Setup {
        clients: vec![("alice", ALICE)],
        ..Setup::default()
    }
    .start()
    .await;
    let d = post_modern(
        s.addr,
        ALICE,
        &modern(1, "server/discover", json!({}), "py"),
        &[("Mcp-Method", "server/discover")],
    )
    .await;
    assert_eq!(d.status, 200, "{d:?}");
    assert!(d.header("mcp-session-id").is_none(), "{d:?}");
    let versions = d.reply(1)["result"]["supportedVersions"].clone();
    assert!(
        versions.as_array().unwrap().contains(&json!(MODERN))
            && versions.as_array().unwrap().contains(&json!("2025-11-25")),
        "{versions}"
    );

    let l = post_modern(
        s.addr,
        ALICE,
        &modern(2, "tools/list", json!({}), "py"),
        &[("Mcp-Method", "tools/list")],
    )
    .await;
    assert_eq!(l.status, 200, "{l:?}");
    assert!(l.header("mcp-session-id").is_none(), "{l:?}");
    let list = l.reply(2)["result"].clone();
    assert_eq!(list["ttlMs"], 300_000, "{list}");
    // Clients are configured: the list is for admitted callers only.
    assert_eq!(list["cacheScope"], "private", "{list}");
    assert!(list["tools"].as_array().unwrap().len() >= 10);

    let c = post_modern(
        s.addr,
        ALICE,
        &modern(
            3,
            "tools/call",
            json!({"name": "read", "arguments": {"workspace_id": "main", "path": "a.txt"}}),
            "py",
        ),
        &call_headers("read"),
    )
    .await;
    assert_eq!(c.status, 200, "{c:?}");
    assert!(c.header("mcp-session-id").is_none(), "{c:?}");
    assert_eq!(structured(&c.reply(3))["content"], "hello over http\n");

    // ping belongs to the session era; the stateless revision has none.
    let p = post_modern(
        s.addr,
        ALICE,
        &modern(4, "ping", json!({}), "py"),
        &[("Mcp-Method", "ping")],
    )
    .await;
    assert_eq!(p.reply(4)["error"]["code"], -32601, "{p:?}");
    s.stop().await;
}

#[tokio::test]
async fn a_2025_session_is_unchanged_beside_it() {
    let s = Setup {
        clients: vec![("alice", ALICE)],
        ..Setup::default()
    }
    .start()
    .await;
    // `initialize` still negotiates 2025-11-25, and its tools/list has no 2026 fields.
    let sid = initialize(s.addr, Some(ALICE)).await;
    let r = http_common::post(
        s.addr,
        Some(ALICE),
        Some(&sid),
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    )
    .await;
    let list = r.reply(2)["result"].clone();
    for key in ["ttlMs", "cacheScope", "resultType"] {
        assert!(list.get(key).is_none(), "{key} in a 2025 list: {list}");
    }
    s.stop().await;
}

#[tokio::test]
async fn the_audit_row_names_the_token_client_and_the_trace() {
    let s = Setup {
        clients: vec![("alice", ALICE), ("bob", BOB)],
        ..Setup::default()
    }
    .start()
    .await;
    // Alice's request claims to be bob in `_meta.clientInfo`: the row still says alice.
    let c = post_modern(
        s.addr,
        ALICE,
        &modern(
            1,
            "tools/call",
            json!({"name": "read", "arguments": {"workspace_id": "main", "path": "a.txt"}}),
            "bob",
        ),
        &[
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "read"),
            ("traceparent", TRACE),
        ],
    )
    .await;
    let decision_id = c.reply(1)["result"]["structuredContent"]["decision_id"].clone();
    structured(&c.reply(1));
    // A malformed traceparent is not recorded.
    let bad = post_modern(
        s.addr,
        ALICE,
        &modern(
            2,
            "tools/call",
            json!({"name": "find", "arguments": {"workspace_id": "main"}}),
            "alice",
        ),
        &[
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "find"),
            ("traceparent", "00-zz-not-a-trace"),
        ],
    )
    .await;
    structured(&bad.reply(2));
    s.flush_audit();
    let store = Store::open(&s.store).unwrap();
    let rows = store.query_decisions(&DecisionQuery::default()).unwrap();
    let read: Vec<_> = rows.iter().filter(|r| r.tool == "read").collect();
    assert!(!read.is_empty(), "{rows:?} ({decision_id})");
    for r in &read {
        assert_eq!(r.client.as_deref(), Some("alice"), "{r:?}");
        assert_eq!(r.transport.as_deref(), Some("streamable-http"), "{r:?}");
        assert_eq!(r.trace_parent.as_deref(), Some(TRACE), "{r:?}");
    }
    let find: Vec<_> = rows.iter().filter(|r| r.tool == "find").collect();
    assert!(!find.is_empty(), "{rows:?}");
    assert!(find.iter().all(|r| r.trace_parent.is_none()), "{find:?}");
    s.stop().await;
}

#[tokio::test]
async fn mcp_method_and_name_must_match_the_body() {
    let s = Setup {
        clients: vec![("alice", ALICE)],
        ..Setup::default()
    }
    .start()
    .await;
    let msg = modern(
        1,
        "tools/call",
        json!({"name": "read", "arguments": {"workspace_id": "main", "path": "a.txt"}}),
        "py",
    );
    let wrong_method = post_modern(
        s.addr,
        ALICE,
        &msg,
        &[("Mcp-Method", "tools/list"), ("Mcp-Name", "read")],
    )
    .await;
    assert_eq!(wrong_method.status, 400, "{wrong_method:?}");
    let wrong_name = post_modern(
        s.addr,
        ALICE,
        &msg,
        &[("Mcp-Method", "tools/call"), ("Mcp-Name", "apply_patch")],
    )
    .await;
    assert_eq!(wrong_name.status, 400, "{wrong_name:?}");
    let right = post_modern(s.addr, ALICE, &msg, &call_headers("read")).await;
    assert_eq!(right.status, 200, "{right:?}");
    s.stop().await;
}

#[tokio::test]
async fn stateless_requests_take_no_session_slot_and_initialize_still_does() {
    let s = Setup {
        clients: vec![("alice", ALICE)],
        limits: json!({"max_sessions_per_client": 1}),
        ..Setup::default()
    }
    .start()
    .await;
    let _sid = initialize(s.addr, Some(ALICE)).await;
    // At the cap, stateless requests still pass.
    for id in 1..=3 {
        let r = post_modern(
            s.addr,
            ALICE,
            &modern(id, "tools/list", json!({}), "py"),
            &[("Mcp-Method", "tools/list")],
        )
        .await;
        assert_eq!(r.status, 200, "{r:?}");
    }
    // An initialize sent under the 2026 header opens a session: refused at the cap.
    let init = json!({"jsonrpc": "2.0", "id": 9, "method": "initialize", "params": {
        "protocolVersion": MODERN, "capabilities": {},
        "clientInfo": {"name": "sneaky", "version": "1"}}});
    let r = post_modern(s.addr, ALICE, &init, &[]).await;
    assert_eq!(r.status, 429, "{r:?}");
    s.stop().await;
}

#[tokio::test]
async fn every_input_schema_is_closed_and_a_misspelt_argument_is_named() {
    let s = Setup {
        clients: vec![("alice", ALICE)],
        ..Setup::default()
    }
    .start()
    .await;
    let l = post_modern(
        s.addr,
        ALICE,
        &modern(1, "tools/list", json!({}), "py"),
        &[("Mcp-Method", "tools/list")],
    )
    .await;
    for tool in l.reply(1)["result"]["tools"].as_array().unwrap() {
        assert_eq!(
            tool["inputSchema"]["additionalProperties"], false,
            "{}",
            tool["name"]
        );
    }
    let args = json!({"workspace_id": "main", "path": "a.txt", "offest": 3});
    // 2026-07-28, stateless.
    let c = post_modern(
        s.addr,
        ALICE,
        &modern(
            2,
            "tools/call",
            json!({"name": "read", "arguments": args}),
            "py",
        ),
        &call_headers("read"),
    )
    .await;
    let (code, message) = error_code(&c.reply(2));
    assert_eq!(code, "INVALID_ARGUMENTS");
    assert!(message.contains("offest"), "{message}");
    // 2025-11-25, in a session.
    let sid = initialize(s.addr, Some(ALICE)).await;
    let r = http_common::call(s.addr, Some(ALICE), &sid, 3, "read", args).await;
    let (code, message) = error_code(&r);
    assert_eq!(code, "INVALID_ARGUMENTS");
    assert!(message.contains("offest"), "{message}");
    s.stop().await;
}

#[test]
fn a_2026_client_works_over_stdio_without_initialize() {
    let mut s = StdioServer::serve_temp_workspace().spawn();
    let d = s.request("server/discover", json!({"_meta": meta("stdio-2026")}));
    assert!(
        d["result"]["supportedVersions"]
            .as_array()
            .unwrap()
            .contains(&json!(MODERN)),
        "{d}"
    );
    let l = s.request("tools/list", json!({"_meta": meta("stdio-2026")}));
    assert_eq!(l["result"]["ttlMs"], 300_000, "{l}");
    // No clients configured: one user, one list.
    assert_eq!(l["result"]["cacheScope"], "public", "{l}");
    let c = s.request(
        "tools/call",
        json!({"_meta": meta("stdio-2026"), "name": "read",
               "arguments": {"workspace_id": "default", "path": "a.txt"}}),
    );
    assert_eq!(structured(&c)["content"], "alpha\n");
    let bad = s.request(
        "tools/call",
        json!({"_meta": meta("stdio-2026"), "name": "read",
               "arguments": {"workspace_id": "default", "path": "a.txt", "tail_line": 1}}),
    );
    let (code, message) = error_code(&bad);
    assert_eq!(code, "INVALID_ARGUMENTS");
    assert!(message.contains("tail_line"), "{message}");
    // The _meta trace context reaches the row over stdio too.
    let mut m = meta("stdio-2026");
    m["traceparent"] = json!(TRACE);
    let t = s.request(
        "tools/call",
        json!({"_meta": m, "name": "find", "arguments": {"workspace_id": "default"}}),
    );
    structured(&t);
    s.close_stdin();
    s.wait_exit(std::time::Duration::from_secs(20));
    let store = Store::open(&s.dir().join("store.db")).unwrap();
    let rows = store.query_decisions(&DecisionQuery::default()).unwrap();
    let find: Vec<_> = rows.iter().filter(|r| r.tool == "find").collect();
    assert!(!find.is_empty(), "{rows:?}");
    for r in find {
        assert_eq!(r.trace_parent.as_deref(), Some(TRACE), "{r:?}");
        assert_eq!(r.client.as_deref(), Some("local"), "{r:?}");
    }
}
