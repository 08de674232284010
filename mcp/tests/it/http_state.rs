//! Server-owned state over HTTP: operation keys belong to the client that chose them, and an
//! unauthenticated loopback endpoint is refused when a workspace's commands have network.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::http_common;

use codespace_engine::policy::{PolicySource, PolicyStore};
use codespace_engine::{Config, Gateway, SandboxFacts};
use codespace_mcp::http::{HttpError, HttpOptions, HttpServer};
use http_common::{Setup, call, initialize};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;

const ALICE: &str = "alice-token-0123456789abcdef";
const BOB: &str = "bob-token-0123456789abcdef0";

fn error_body(reply: &Value) -> Value {
    assert_eq!(reply["result"]["isError"], true, "{reply}");
    let text = reply["result"]["content"][0]["text"].as_str().unwrap();
    serde_json::from_str(text).unwrap()
}

fn ok(reply: &Value) -> Value {
    assert_eq!(reply["result"]["isError"], false, "{reply}");
    reply["result"]["structuredContent"].clone()
}

fn add(name: &str) -> String {
    format!("*** Begin Patch\n*** Add File: {name}\n+{name}\n*** End Patch\n")
}

#[tokio::test]
async fn operation_keys_are_scoped_to_the_client() {
    let s = Setup {
        clients: vec![("alice", ALICE), ("bob", BOB)],
        ..Setup::default()
    }
    .start()
    .await;
    let a = initialize(s.addr, Some(ALICE)).await;
    let b = initialize(s.addr, Some(BOB)).await;

    let alice_op = ok(&call(
        s.addr,
        Some(ALICE),
        &a,
        10,
        "apply_patch",
        json!({"workspace_id": "main", "operation_key": "k-deploy", "patch": add("alice.txt")}),
    )
    .await);
    assert_eq!(alice_op["status"], "applied");

    // Bob cannot see Alice's operation through her key.
    let st = error_body(
        &call(
            s.addr,
            Some(BOB),
            &b,
            11,
            "operation_status",
            json!({"operation_key": "k-deploy"}),
        )
        .await,
    );
    assert_eq!(st["code"], "OPERATION_NOT_FOUND", "{st}");
    // Nor through its id: another client's operation reads exactly like a missing one.
    let by_id = error_body(
        &call(
            s.addr,
            Some(BOB),
            &b,
            21,
            "operation_status",
            json!({"operation_id": alice_op["operation_id"]}),
        )
        .await,
    );
    let missing = error_body(
        &call(
            s.addr,
            Some(BOB),
            &b,
            22,
            "operation_status",
            json!({"operation_id": "op-does-not-exist"}),
        )
        .await,
    );
    assert_eq!(by_id["code"], "OPERATION_NOT_FOUND", "{by_id}");
    assert_eq!(by_id["message"], missing["message"]);

    // Bob replaying Alice's key with Alice's patch runs as new: not her stored result (the file
    // exists now, so his add fails on its own merits).
    let replay = error_body(
        &call(
            s.addr,
            Some(BOB),
            &b,
            12,
            "apply_patch",
            json!({"workspace_id": "main", "operation_key": "k-deploy", "patch": add("alice.txt")}),
        )
        .await,
    );
    assert_eq!(replay["code"], "ADD_FILE_EXISTS", "{replay}");
    assert_ne!(replay["operation_id"], alice_op["operation_id"]);

    // Each sees their own operation under the shared key name.
    let st = ok(&call(
        s.addr,
        Some(BOB),
        &b,
        13,
        "operation_status",
        json!({"operation_key": "k-deploy"}),
    )
    .await);
    assert_eq!(st["operation_id"], replay["operation_id"]);
    let st = ok(&call(
        s.addr,
        Some(ALICE),
        &a,
        14,
        "operation_status",
        json!({"operation_key": "k-deploy"}),
    )
    .await);
    assert_eq!(st["operation_id"], alice_op["operation_id"]);

    // The same key name with different patches by two clients: neither a conflict nor a replay.
    let alice_shared = ok(&call(
        s.addr,
        Some(ALICE),
        &a,
        15,
        "apply_patch",
        json!({"workspace_id": "main", "operation_key": "k-shared", "patch": add("alice2.txt")}),
    )
    .await);
    let bob_shared = ok(&call(
        s.addr,
        Some(BOB),
        &b,
        16,
        "apply_patch",
        json!({"workspace_id": "main", "operation_key": "k-shared", "patch": add("bob.txt")}),
    )
    .await);
    assert_eq!(bob_shared["status"], "applied", "{bob_shared}");
    assert_eq!(bob_shared["replayed"], false);
    assert_ne!(bob_shared["operation_id"], alice_shared["operation_id"]);
    assert!(s.root.join("bob.txt").exists());

    // Alice's own retry still replays.
    let again = ok(&call(
        s.addr,
        Some(ALICE),
        &a,
        17,
        "apply_patch",
        json!({"workspace_id": "main", "operation_key": "k-deploy", "patch": add("alice.txt")}),
    )
    .await);
    assert_eq!(again["replayed"], true);
    assert_eq!(again["operation_id"], alice_op["operation_id"]);
    s.stop().await;
}

fn gateway(dir: &Path, network: &str, clients: Value) -> Gateway {
    let root = dir.join("ws");
    std::fs::create_dir_all(&root).unwrap();
    let cfg = json!({
        "workspaces": {
            "quiet": {"root": root},
            "online": {"root": root, "network": network},
        },
        "store": dir.join("store.db"),
        "clients": clients,
    });
    let cfg = Config::from_json(&cfg.to_string(), Path::new("/")).unwrap();
    Gateway::new(
        cfg,
        Arc::new(PolicyStore::load(PolicySource::Embedded).unwrap()),
        Some(Arc::new(
            codespace_store::Store::open(&dir.join("store.db")).unwrap(),
        )),
        SandboxFacts {
            sandbox_enforced: true,
            network_enforced: true,
            masking_enforced: true,
        },
    )
    .unwrap()
}

#[tokio::test]
async fn unauthenticated_http_is_refused_when_a_workspace_has_network() {
    let dir = tempfile::tempdir().unwrap();
    let opts = || HttpOptions::new("127.0.0.1:0".parse().unwrap());
    let gw = gateway(dir.path(), "enabled", json!({}));
    match HttpServer::bind(Arc::new(gw), opts()).await {
        Err(e @ HttpError::UnauthenticatedWithNetwork(_)) => {
            let msg = e.to_string();
            assert!(msg.contains("workspaces.online.network"), "{msg}");
            assert!(!msg.contains('\n'), "{msg}");
        }
        Err(e) => panic!("wrong refusal: {e}"),
        Ok(_) => panic!("unauthenticated HTTP served a network-enabled workspace"),
    }
    // With tokens it serves; with every workspace restricted, loopback stays open without.
    let gw = gateway(
        dir.path(),
        "enabled",
        json!({"ci": {"token": "ci-token-0123456789abcdef"}}),
    );
    let server = HttpServer::bind(Arc::new(gw), opts()).await.unwrap();
    assert!(server.authenticated());
    drop(server);
    let gw = gateway(dir.path(), "restricted", json!({}));
    let server = HttpServer::bind(Arc::new(gw), opts()).await.unwrap();
    assert!(!server.authenticated());
}

#[test]
fn serve_http_without_tokens_and_with_network_exits_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    std::fs::create_dir_all(&root).unwrap();
    let cfg = dir.path().join("config.json");
    std::fs::write(
        &cfg,
        json!({"workspaces": {"w": {"root": root, "network": "enabled"}},
               "store": dir.path().join("store.db")})
        .to_string(),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_codespace"))
        .args(["serve", "--http", "127.0.0.1:0", "--config"])
        .arg(&cfg)
        .env_remove("CODESPACE_CONFIG")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("refusing to serve unauthenticated HTTP: workspaces.w.network"),
        "{err}"
    );
}
