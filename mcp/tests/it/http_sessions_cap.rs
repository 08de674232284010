//! HTTP sessions: a per-client cap (429 past it, counted per client), DELETE answered 204 for
//! a live session and 404 for one that is gone, and the message-size limit from the config.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::http_common;

use http_common::*;
use serde_json::json;

const CI_TOKEN: &str = "ci-token-0123456789abcdef";
const DEV_TOKEN: &str = "dev-token-0123456789abcdef";

async fn delete(addr: std::net::SocketAddr, token: &str, sid: &str) -> Resp {
    http(
        addr,
        "DELETE",
        &[
            ("Authorization", &bearer(token)),
            ("Mcp-Session-Id", sid),
            ("MCP-Protocol-Version", "2025-11-25"),
        ],
        "",
    )
    .await
}

#[tokio::test]
async fn sessions_per_client_are_capped_with_429() {
    let s = Setup {
        clients: vec![("ci", CI_TOKEN), ("dev", DEV_TOKEN)],
        limits: json!({"max_sessions_per_client": 3}),
        ..Setup::default()
    }
    .start()
    .await;
    let mut ci = Vec::new();
    for _ in 0..3 {
        ci.push(initialize(s.addr, Some(CI_TOKEN)).await);
    }
    let refused = post(s.addr, Some(CI_TOKEN), None, &initialize_msg(1)).await;
    assert_eq!(refused.status, 429, "{refused:?}");
    assert_eq!(refused.body, r#"{"error":"too many sessions"}"#);
    assert!(refused.header("mcp-session-id").is_none());
    // The cap is per client: dev still opens its own.
    initialize(s.addr, Some(DEV_TOKEN)).await;
    // ci's open sessions keep working.
    let ping = json!({"jsonrpc": "2.0", "id": 7, "method": "ping"});
    let r = post(s.addr, Some(CI_TOKEN), Some(&ci[0]), &ping).await;
    assert_eq!(r.status, 200, "{r:?}");
    // Closing one frees a place.
    assert_eq!(delete(s.addr, CI_TOKEN, &ci[0]).await.status, 204);
    initialize(s.addr, Some(CI_TOKEN)).await;
    let again = post(s.addr, Some(CI_TOKEN), None, &initialize_msg(1)).await;
    assert_eq!(again.status, 429, "{again:?}");
    s.stop().await;
}

#[tokio::test]
async fn concurrent_initializes_never_pass_the_cap() {
    let s = Setup {
        limits: json!({"max_sessions_per_client": 4}),
        ..Setup::default()
    }
    .start()
    .await;
    let addr = s.addr;
    let tasks: Vec<_> = (0..16)
        .map(|_| tokio::spawn(async move { post(addr, None, None, &initialize_msg(1)).await }))
        .collect();
    let mut ok = 0;
    for t in tasks {
        let r = t.await.unwrap();
        match r.status {
            200 => ok += 1,
            429 => {}
            other => panic!("unexpected {other}: {r:?}"),
        }
    }
    assert_eq!(ok, 4, "exactly the cap is admitted");
    s.stop().await;
}

#[tokio::test]
async fn delete_answers_204_then_404() {
    let s = Setup {
        clients: vec![("ci", CI_TOKEN), ("dev", DEV_TOKEN)],
        ..Setup::default()
    }
    .start()
    .await;
    let sid = initialize(s.addr, Some(CI_TOKEN)).await;
    // Another client cannot close it.
    assert_eq!(delete(s.addr, DEV_TOKEN, &sid).await.status, 404);
    let r = delete(s.addr, CI_TOKEN, &sid).await;
    assert_eq!(r.status, 204, "{r:?}");
    assert!(r.body.is_empty());
    assert_eq!(delete(s.addr, CI_TOKEN, &sid).await.status, 404);
    assert_eq!(
        delete(s.addr, CI_TOKEN, "no-such-session").await.status,
        404
    );
    let ping = json!({"jsonrpc": "2.0", "id": 7, "method": "ping"});
    assert_eq!(
        post(s.addr, Some(CI_TOKEN), Some(&sid), &ping).await.status,
        404
    );
    s.stop().await;
}

#[tokio::test]
async fn the_config_message_limit_caps_http_bodies() {
    let s = Setup {
        limits: json!({"max_message_bytes": 2048}),
        ..Setup::default()
    }
    .start()
    .await;
    let big =
        json!({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"pad": "x".repeat(4096)}});
    let r = post(s.addr, None, None, &big).await;
    assert_eq!(r.status, 413, "{r:?}");
    initialize(s.addr, None).await;
    s.stop().await;
}
