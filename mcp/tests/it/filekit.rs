//! The file toolkit of issue 31 through the built binary: `read` of an image is MCP image
//! content (size-capped), other binary files are `BINARY_FILE` with size and sha256 (or base64
//! when asked); `process_list` lists the caller's own handles, never another client's.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::http_common::{Setup, call, initialize};
use crate::stdio_common::StdioServer;
use base64::Engine as _;
use serde_json::{Value, json};

/// A 1x1 PNG (a valid image: signature, IHDR, IDAT, IEND).
const PNG_1X1: &[u8] = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89\x00\x00\x00\rIDATx\x9cc\xf8\xcf\xc0\xf0\x1f\x00\x05\x00\x01\xff\x89\x99=\x1d\x00\x00\x00\x00IEND\xaeB`\x82";

fn b64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

fn sha256_version(data: &[u8]) -> String {
    use sha2::Digest as _;
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(data)))
}

#[test]
fn an_image_read_is_image_content_and_a_binary_file_is_binary_file() {
    let mut s = StdioServer::serve_temp_workspace().spawn();
    s.initialize("filekit-test");
    let ws = s.dir().join("ws");
    std::fs::write(ws.join("dot.png"), PNG_1X1).unwrap();
    // A JPEG larger than one read window (1 MiB) but under the image cap (3 MiB).
    let mut jpeg = b"\xff\xd8\xff\xe0".to_vec();
    jpeg.resize(1_600_000, 7);
    std::fs::write(ws.join("big.jpg"), &jpeg).unwrap();
    // A GIF above the cap.
    let mut gif = b"GIF89a".to_vec();
    gif.resize(3 * 1024 * 1024 + 1, 1);
    std::fs::write(ws.join("huge.gif"), &gif).unwrap();
    let blob = b"ELF\x00\x01\x02binary\x00data".to_vec();
    std::fs::write(ws.join("tool.bin"), &blob).unwrap();

    // The PNG: a JSON text item mirroring structuredContent, then the image item.
    let r = s.call(
        "read",
        json!({"workspace_id": "default", "path": "dot.png"}),
    );
    assert_eq!(r["isError"], false, "{r}");
    let sc = &r["structuredContent"];
    assert_eq!(sc["mime_type"], "image/png", "{r}");
    assert_eq!(sc["content"], "", "{r}");
    assert_eq!(sc["byte_count"], PNG_1X1.len(), "{r}");
    assert_eq!(sc["version"], sha256_version(PNG_1X1), "{r}");
    let text: Value = serde_json::from_str(r["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(&text, sc);
    assert_eq!(r["content"][1]["type"], "image", "{r}");
    assert_eq!(r["content"][1]["mimeType"], "image/png", "{r}");
    assert_eq!(r["content"][1]["data"], b64(PNG_1X1), "{r}");
    assert_eq!(r["content"].as_array().unwrap().len(), 2, "{r}");

    // Larger than a window: read whole all the same.
    let r = s.call(
        "read",
        json!({"workspace_id": "default", "path": "big.jpg"}),
    );
    assert_eq!(r["structuredContent"]["mime_type"], "image/jpeg");
    assert_eq!(r["content"][1]["data"], b64(&jpeg));

    // Over the cap: FILE_TOO_LARGE naming its size.
    let e = s.tool_err(
        "read",
        json!({"workspace_id": "default", "path": "huge.gif"}),
    );
    assert_eq!(e["code"], "FILE_TOO_LARGE", "{e}");
    let msg = e["message"].as_str().unwrap();
    assert!(
        msg.contains(&gif.len().to_string()) && msg.contains("3145728"),
        "{msg}"
    );

    // Asked as base64: the bytes, no image item.
    let r = s.call(
        "read",
        json!({"workspace_id": "default", "path": "dot.png", "encoding": "base64"}),
    );
    assert_eq!(r["structuredContent"]["content"], b64(PNG_1X1), "{r}");
    assert!(r["structuredContent"].get("mime_type").is_none(), "{r}");
    assert_eq!(r["content"].as_array().unwrap().len(), 1, "{r}");

    // Asked as text: BINARY_FILE.
    let e = s.tool_err(
        "read",
        json!({"workspace_id": "default", "path": "dot.png", "encoding": "text"}),
    );
    assert_eq!(e["code"], "BINARY_FILE", "{e}");

    // Another binary file, content omitted: BINARY_FILE with its size and sha256.
    let e = s.tool_err(
        "read",
        json!({"workspace_id": "default", "path": "tool.bin"}),
    );
    assert_eq!(e["code"], "BINARY_FILE", "{e}");
    let msg = e["message"].as_str().unwrap();
    assert!(
        msg.contains(&format!("{} bytes", blob.len())) && msg.contains(&sha256_version(&blob)),
        "{msg}"
    );
    let r = s.tool_ok(
        "read",
        json!({"workspace_id": "default", "path": "tool.bin", "encoding": "base64"}),
    );
    assert_eq!(r["content"], b64(&blob), "{r}");

    // Several paths: each image's bytes as an image item, in order.
    let r = s.call(
        "read",
        json!({"workspace_id": "default", "paths": ["a.txt", "dot.png", "tool.bin"]}),
    );
    let files = &r["structuredContent"]["files"];
    assert_eq!(files[0]["content"], "alpha\n", "{r}");
    assert_eq!(files[1]["mime_type"], "image/png", "{r}");
    assert_eq!(files[2]["error"]["code"], "BINARY_FILE", "{r}");
    assert_eq!(r["content"][1]["data"], b64(PNG_1X1), "{r}");
    assert_eq!(r["content"].as_array().unwrap().len(), 2, "{r}");

    // The images of one `paths` read share the cap: the second 1.6 MB JPEG is refused, the
    // small PNG after it still fits.
    std::fs::write(ws.join("big2.jpg"), &jpeg).unwrap();
    let r = s.call(
        "read",
        json!({"workspace_id": "default", "paths": ["big.jpg", "big2.jpg", "dot.png"]}),
    );
    let files = &r["structuredContent"]["files"];
    assert_eq!(files[0]["mime_type"], "image/jpeg", "{r}");
    assert_eq!(files[1]["error"]["code"], "FILE_TOO_LARGE", "{r}");
    assert_eq!(files[2]["mime_type"], "image/png", "{r}");
    assert_eq!(r["content"].as_array().unwrap().len(), 3, "{r}");
}

/// `process_list` over the built binary: the caller's own command, with its state, command
/// line and start time.
#[test]
fn process_list_shows_the_callers_own_command() {
    if crate::process_common::skip_without_sandbox("process_list_shows_the_callers_own_command") {
        return;
    }
    let mut s = StdioServer::serve_temp_workspace().spawn();
    s.initialize("filekit-test");
    let empty = s.tool_ok("process_list", json!({}));
    assert_eq!(empty["processes"], json!([]), "{empty}");
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let x = s.tool_ok(
        "exec_command",
        json!({"workspace_id": "default", "command": ["cat", "-"]}),
    );
    let pid = x["process_id"].as_str().unwrap().to_string();
    let list = s.tool_ok("process_list", json!({"workspace_id": "default"}));
    let procs = list["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 1, "{list}");
    assert_eq!(procs[0]["process_id"], pid.as_str());
    assert_eq!(procs[0]["workspace_id"], "default");
    assert_eq!(procs[0]["state"], "running");
    assert_eq!(procs[0]["command"], "cat -");
    assert_eq!(procs[0]["tty"], false);
    assert!(
        procs[0]["started_at"].as_i64().unwrap() >= before - 1,
        "{list}"
    );
    let e = s.tool_err("process_list", json!({"workspace_id": "nope"}));
    assert_eq!(e["code"], "WORKSPACE_NOT_FOUND", "{e}");
    s.tool_ok("terminate_process", json!({"process_id": pid}));
    let list = s.tool_ok("process_list", json!({}));
    assert_eq!(list["processes"][0]["state"], "exited", "{list}");
}

/// Resources over the built binary: a process's output is listed and readable, decided as
/// `read_process`; unknown URIs and processes are resource-not-found; operation diffs name the
/// tool that serves them.
#[test]
fn process_output_is_a_resource_listed_and_read_through_the_gateway() {
    if crate::process_common::skip_without_sandbox(
        "process_output_is_a_resource_listed_and_read_through_the_gateway",
    ) {
        return;
    }
    let mut s = StdioServer::serve_temp_workspace().spawn();
    let init = s.initialize("filekit-test");
    assert!(
        init["result"]["capabilities"]["resources"].is_object(),
        "{init}"
    );
    let x = s.tool_ok(
        "exec_command",
        json!({"workspace_id": "default", "command": ["echo", "resource output"], "yield_ms": 10000}),
    );
    let pid = x["process_id"].as_str().unwrap().to_string();
    let uri = format!("codespace://processes/{pid}/output");
    let list = s.request("resources/list", json!({}));
    let resources = list["result"]["resources"].as_array().unwrap();
    assert_eq!(resources.len(), 1, "{list}");
    assert_eq!(resources[0]["uri"], uri.as_str(), "{list}");
    assert_eq!(resources[0]["mimeType"], "text/plain", "{list}");
    assert!(list["result"].get("nextCursor").is_none(), "{list}");
    let bad = s.request("resources/list", json!({"cursor": "not-a-cursor"}));
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    let read = s.request("resources/read", json!({"uri": uri}));
    let contents = &read["result"]["contents"];
    assert_eq!(contents[0]["uri"], uri.as_str(), "{read}");
    assert!(
        contents[0]["text"]
            .as_str()
            .unwrap()
            .contains("resource output"),
        "{read}"
    );
    let missing = s.request(
        "resources/read",
        json!({"uri": "codespace://processes/proc-nope/output"}),
    );
    assert_eq!(missing["error"]["code"], -32002, "{missing}");
    let other = s.request("resources/read", json!({"uri": "file:///etc/passwd"}));
    assert_eq!(other["error"]["code"], -32002, "{other}");
    let t = s.request("resources/templates/list", json!({}));
    let templates: Vec<&str> = t["result"]["resourceTemplates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["uriTemplate"].as_str().unwrap())
        .collect();
    assert_eq!(
        templates,
        [
            "codespace://processes/{id}/output",
            "codespace://operations/{id}/diff"
        ]
    );
    // An unknown operation is not found; a real patch operation's diff reads through the
    // ledger's `operation_diff`.
    let unknown = s.request(
        "resources/read",
        json!({"uri": "codespace://operations/op-1/diff"}),
    );
    assert!(unknown.get("error").is_some(), "{unknown}");
    let patched = s.tool_ok(
        "apply_patch",
        json!({"workspace_id": "default",
               "patch": "*** Begin Patch\n*** Add File: added.txt\n+from the resource test\n*** End Patch\n"}),
    );
    let op = patched["operation_id"].as_str().unwrap().to_string();
    let diff = s.request(
        "resources/read",
        json!({"uri": format!("codespace://operations/{op}/diff")}),
    );
    let text = diff["result"]["contents"][0]["text"].as_str().unwrap_or("");
    assert!(text.contains("+from the resource test"), "{diff}");
}

const CI_TOKEN: &str = "ci-token-0123456789abcdef";
const DEV_TOKEN: &str = "dev-token-0123456789abcdef";

/// Two clients of one server: each lists its own process and never the other's.
#[tokio::test]
async fn process_list_never_shows_another_clients_process() {
    if crate::process_common::skip_without_sandbox(
        "process_list_never_shows_another_clients_process",
    ) {
        return;
    }
    let s = Setup {
        clients: vec![("ci", CI_TOKEN), ("dev", DEV_TOKEN)],
        sandbox: true,
        ..Setup::default()
    }
    .start()
    .await;
    let ci = initialize(s.addr, Some(CI_TOKEN)).await;
    let dev = initialize(s.addr, Some(DEV_TOKEN)).await;
    let mut ids = Vec::new();
    for (n, (token, sid)) in [(CI_TOKEN, &ci), (DEV_TOKEN, &dev)].into_iter().enumerate() {
        let r = call(
            s.addr,
            Some(token),
            sid,
            10 + n as i64,
            "exec_command",
            // Services: a second command needs no mutation lease.
            json!({"workspace_id": "main", "command": ["cat"], "background": true}),
        )
        .await;
        assert_eq!(r["result"]["isError"], false, "{r}");
        ids.push(
            r["result"]["structuredContent"]["process_id"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    for (n, (token, sid)) in [(CI_TOKEN, &ci), (DEV_TOKEN, &dev)].into_iter().enumerate() {
        for args in [json!({}), json!({"workspace_id": "main"})] {
            let r = call(
                s.addr,
                Some(token),
                sid,
                20 + n as i64,
                "process_list",
                args,
            )
            .await;
            let listed: Vec<&str> = r["result"]["structuredContent"]["processes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["process_id"].as_str().unwrap())
                .collect();
            assert_eq!(listed, [ids[n].as_str()], "{r}");
        }
    }
    // Another client's output resource: refused like its read_process.
    let r = crate::http_common::post(
        s.addr,
        Some(DEV_TOKEN),
        Some(&dev),
        &json!({"jsonrpc": "2.0", "id": 40, "method": "resources/read",
                "params": {"uri": format!("codespace://processes/{}/output", ids[0])}}),
    )
    .await;
    let reply = r.reply(40);
    assert!(reply["error"].is_object(), "{reply}");
    assert!(reply.get("result").is_none(), "{reply}");
    for (n, (token, sid)) in [(CI_TOKEN, &ci), (DEV_TOKEN, &dev)].into_iter().enumerate() {
        call(
            s.addr,
            Some(token),
            sid,
            30 + n as i64,
            "terminate_process",
            json!({"process_id": ids[n]}),
        )
        .await;
    }
    s.stop().await;
}

/// `resources/list` pages: 101 processes are 100 on the first page and one on the page its
/// `nextCursor` names, together every process once.
#[test]
fn resources_list_is_paged() {
    if crate::process_common::skip_without_sandbox("resources_list_is_paged") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let cfg = json!({
        "workspaces": {"default": {"root": ws, "profile": "workspace-write"}},
        "store": dir.path().join("store.db"),
        "limits": {"max_exited_processes": 200},
    });
    let path = dir.path().join("config.json");
    std::fs::write(&path, cfg.to_string()).unwrap();
    let mut s = StdioServer::serve()
        .arg("--config")
        .arg(&path)
        .env("HOME", dir.path())
        .env("XDG_DATA_HOME", dir.path())
        .deadline(std::time::Duration::from_secs(300))
        .spawn();
    s.initialize("filekit-test");
    let mut started = std::collections::BTreeSet::new();
    for _ in 0..101 {
        let x = s.tool_ok(
            "exec_command",
            json!({"workspace_id": "default", "command": ["true"], "yield_ms": 10000}),
        );
        started.insert(x["process_id"].as_str().unwrap().to_string());
    }
    let uris = |page: &Value| -> Vec<String> {
        page["result"]["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["uri"].as_str().unwrap().to_string())
            .collect()
    };
    let first = s.request("resources/list", json!({}));
    assert_eq!(uris(&first).len(), 100, "{first}");
    let cursor = first["result"]["nextCursor"].as_str().unwrap().to_string();
    let second = s.request("resources/list", json!({"cursor": cursor}));
    assert_eq!(uris(&second).len(), 1, "{second}");
    assert!(second["result"].get("nextCursor").is_none(), "{second}");
    let listed: std::collections::BTreeSet<String> = uris(&first)
        .into_iter()
        .chain(uris(&second))
        .map(|u| {
            u.trim_start_matches("codespace://processes/")
                .trim_end_matches("/output")
                .to_string()
        })
        .collect();
    assert_eq!(listed, started);
}
