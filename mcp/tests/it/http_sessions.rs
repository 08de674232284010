//! Process handles across HTTP sessions: a process started in one session is readable, writable
//! and terminable from a later session of the same client, refused to another client, and
//! closing a session kills nothing.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::http_common;

use http_common::{Setup, call, http, initialize};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const CI_TOKEN: &str = "ci-token-0123456789abcdef";
const DEV_TOKEN: &str = "dev-token-0123456789abcdef";

fn body(reply: &Value) -> Value {
    let text = reply["result"]["content"][0]["text"].as_str().unwrap();
    serde_json::from_str(text).unwrap()
}

#[tokio::test]
async fn a_process_outlives_its_session_and_stays_with_its_client() {
    let probe = codespace_runner_sandbox::probe();
    if !probe.sandbox_available() {
        codespace_test_skip::skip(
            "a_process_outlives_its_session_and_stays_with_its_client",
            "no command sandbox on this kernel",
        );
        return;
    }
    let s = Setup {
        clients: vec![("ci", CI_TOKEN), ("dev", DEV_TOKEN)],
        sandbox: true,
        ..Setup::default()
    }
    .start()
    .await;

    // Session 1 (client ci) starts an interactive cat.
    let sid1 = initialize(s.addr, Some(CI_TOKEN)).await;
    let r = call(
        s.addr,
        Some(CI_TOKEN),
        &sid1,
        10,
        "exec_command",
        json!({"workspace_id": "main", "command": ["cat"]}),
    )
    .await;
    assert_eq!(r["result"]["isError"], false, "{r}");
    let pid = r["result"]["structuredContent"]["process_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(pid.starts_with("proc-"));

    // Close session 1 (DELETE): the process keeps running.
    let del = http(
        s.addr,
        "DELETE",
        &[
            ("authorization", &format!("Bearer {CI_TOKEN}")),
            ("mcp-session-id", &sid1),
        ],
        "",
    )
    .await;
    assert!(del.status < 300, "{del:?}");

    // Session 2 of the same client writes, reads and sees it running.
    let sid2 = initialize(s.addr, Some(CI_TOKEN)).await;
    assert_ne!(sid1, sid2);
    let st = call(
        s.addr,
        Some(CI_TOKEN),
        &sid2,
        11,
        "process_status",
        json!({"process_id": pid}),
    )
    .await;
    assert_eq!(
        st["result"]["structuredContent"]["state"], "running",
        "{st}"
    );
    let w = call(
        s.addr,
        Some(CI_TOKEN),
        &sid2,
        12,
        "write_stdin",
        json!({"process_id": pid, "data": "hello across sessions\n"}),
    )
    .await;
    assert_eq!(w["result"]["isError"], false, "{w}");
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = String::new();
    let mut cursor = 0u64;
    let mut id = 13;
    while !seen.contains("hello across sessions") {
        assert!(Instant::now() < deadline, "output never arrived: {seen:?}");
        let r = call(
            s.addr,
            Some(CI_TOKEN),
            &sid2,
            id,
            "read_process",
            json!({"process_id": pid, "cursor": cursor, "wait_ms": 500}),
        )
        .await;
        id += 1;
        let out = &r["result"]["structuredContent"];
        seen.push_str(out["chunk"].as_str().unwrap_or(""));
        cursor = out["cursor"].as_u64().unwrap();
    }

    // Another client cannot see or steer it.
    let sid3 = initialize(s.addr, Some(DEV_TOKEN)).await;
    for (tool, args) in [
        ("read_process", json!({"process_id": pid})),
        ("write_stdin", json!({"process_id": pid, "data": "x\n"})),
        ("terminate_process", json!({"process_id": pid})),
        ("process_status", json!({"process_id": pid})),
    ] {
        let r = call(s.addr, Some(DEV_TOKEN), &sid3, id, tool, args).await;
        id += 1;
        assert_eq!(r["result"]["isError"], true, "{tool}: {r}");
        let code = body(&r)["code"].as_str().unwrap().to_string();
        assert!(
            code == "UNAUTHORIZED" || code == "PROCESS_NOT_FOUND",
            "{tool}: {code}"
        );
    }
    let st = call(
        s.addr,
        Some(CI_TOKEN),
        &sid2,
        id,
        "process_status",
        json!({"process_id": pid}),
    )
    .await;
    id += 1;
    assert_eq!(
        st["result"]["structuredContent"]["state"], "running",
        "the other client did not kill it"
    );

    // The owner terminates it.
    let t = call(
        s.addr,
        Some(CI_TOKEN),
        &sid2,
        id,
        "terminate_process",
        json!({"process_id": pid}),
    )
    .await;
    id += 1;
    assert_eq!(t["result"]["isError"], false, "{t}");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let st = call(
            s.addr,
            Some(CI_TOKEN),
            &sid2,
            id,
            "process_status",
            json!({"process_id": pid}),
        )
        .await;
        id += 1;
        if st["result"]["structuredContent"]["state"] == "exited" {
            assert_eq!(
                st["result"]["structuredContent"]["termination"],
                "terminated"
            );
            break;
        }
        assert!(Instant::now() < deadline, "never exited");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    s.stop().await;
}
