//! File size limits and blocking through the binary: `read` of a file above
//! `limits.max_hash_bytes` and `apply_patch` touching one above `limits.max_patch_file_bytes`
//! are `FILE_TOO_LARGE` without reading the file, and reads hashing a big file leave the server
//! answering.
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

/// `serve --config` on `<dir>/ws` (workspace-write) with `limits`.
fn start(dir: &Path, limits: Value) -> StdioServer {
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("a.txt"), "alpha\n").unwrap();
    let cfg = json!({
        "workspaces": {"default": {"root": ws, "profile": "workspace-write"}},
        "store": dir.join("store.db"),
        "limits": limits,
    });
    let path = dir.join("config.json");
    std::fs::write(&path, cfg.to_string()).unwrap();
    let mut s = StdioServer::serve()
        .arg("--config")
        .arg(&path)
        .env("HOME", dir)
        .env("XDG_DATA_HOME", dir)
        .deadline(Duration::from_secs(120))
        .spawn();
    s.initialize("file-limits-test");
    s
}

fn sparse(path: &Path, len: u64) {
    std::fs::File::create(path).unwrap().set_len(len).unwrap();
}

fn vm_hwm_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

#[test]
fn a_read_above_max_hash_bytes_is_file_too_large() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = start(dir.path(), json!({"max_hash_bytes": 1 << 20}));
    // 2 GiB: hashing it would take a long while; the size alone refuses it.
    sparse(&dir.path().join("ws/huge.bin"), 2 << 30);
    let e = s.tool_err(
        "read",
        json!({"workspace_id": "default", "path": "huge.bin", "limit": 1}),
    );
    assert_eq!(e["code"], "FILE_TOO_LARGE", "{e}");
    let msg = e["message"].as_str().unwrap();
    assert!(msg.contains("limits.max_hash_bytes"), "{msg}");
    assert!(msg.contains("huge.bin"), "{msg}");
    assert!(
        !msg.contains(dir.path().to_str().unwrap()),
        "no server path: {msg}"
    );
    let info = s.tool_ok("workspace_info", json!({"workspace_id": "default"}));
    assert_eq!(
        info["execution"]["files"]["capabilities"]["max_hash_bytes"],
        1 << 20,
        "{info}"
    );
    // At the limit is fine.
    sparse(&dir.path().join("ws/edge.bin"), 1 << 20);
    let r = s.tool_ok(
        "read",
        json!({"workspace_id": "default", "path": "edge.bin", "limit": 1, "encoding": "base64"}),
    );
    assert_eq!(r["truncated"], true, "{r}");
    s.tool_ok("read", json!({"workspace_id": "default", "path": "a.txt"}));
}

#[test]
fn a_patch_touching_a_file_above_max_patch_file_bytes_is_refused_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = start(dir.path(), json!({"max_patch_file_bytes": 1 << 20}));
    let big = dir.path().join("ws/big.txt");
    let text = "line\n".repeat(300_000); // 1.5 MB
    std::fs::write(&big, &text).unwrap();
    for patch in [
        "*** Begin Patch\n*** Update File: big.txt\n@@\n-line\n+LINE\n*** End Patch\n",
        "*** Begin Patch\n*** Delete File: big.txt\n*** End Patch\n",
        "*** Begin Patch\n*** Update File: a.txt\n@@\n-alpha\n+ALPHA\n*** Update File: big.txt\n@@\n-line\n+LINE\n*** End Patch\n",
    ] {
        let e = s.tool_err(
            "apply_patch",
            json!({"workspace_id": "default", "patch": patch}),
        );
        assert_eq!(e["code"], "FILE_TOO_LARGE", "{e}");
        assert!(
            e["message"]
                .as_str()
                .unwrap()
                .contains("limits.max_patch_file_bytes"),
            "{e}"
        );
    }
    assert_eq!(std::fs::read_to_string(&big).unwrap(), text);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("ws/a.txt")).unwrap(),
        "alpha\n"
    );
    // A small file still patches.
    s.tool_ok(
        "apply_patch",
        json!({"workspace_id": "default",
               "patch": "*** Begin Patch\n*** Update File: a.txt\n@@\n-alpha\n+ALPHA\n*** End Patch\n"}),
    );
}

#[test]
fn a_patch_on_a_1_gib_file_does_not_load_it() {
    let dir = tempfile::tempdir().unwrap();
    // Default limits: 64 MiB per patched file.
    let mut s = start(dir.path(), json!({}));
    sparse(&dir.path().join("ws/huge.bin"), 1 << 30);
    s.tool_ok("read", json!({"workspace_id": "default", "path": "a.txt"}));
    let before = vm_hwm_kib(s.pid());
    let e = s.tool_err(
        "apply_patch",
        json!({"workspace_id": "default",
               "patch": "*** Begin Patch\n*** Update File: huge.bin\n@@\n-x\n+y\n*** End Patch\n"}),
    );
    assert_eq!(e["code"], "FILE_TOO_LARGE", "{e}");
    let after = vm_hwm_kib(s.pid());
    eprintln!("peak RSS {before} KiB before, {after} KiB after the refused patch");
    assert!(
        after < before + 64 * 1024,
        "peak RSS grew from {before} KiB to {after} KiB"
    );
}

#[test]
fn reads_hashing_a_big_file_leave_the_server_answering() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = start(dir.path(), json!({}));
    sparse(&dir.path().join("ws/big.bin"), 512 << 20);
    // More concurrent reads than the runtime has workers: hashing on the workers would leave
    // none to answer the ping.
    let n = std::thread::available_parallelism().map_or(2, |n| n.get()) + 2;
    let reads: Vec<i64> = (0..n)
        .map(|i| {
            s.send_request(
                "tools/call",
                json!({"name": "read", "arguments":
                    {"workspace_id": "default", "path": "big.bin", "offset": i, "limit": 1,
                     "encoding": "base64"}}),
            )
        })
        .collect();
    let ping = s.send_request("ping", json!({}));
    let mut order = Vec::new();
    let mut replies = std::collections::BTreeMap::new();
    while replies.len() < n + 1 {
        let m = s.next_message();
        let Some(id) = m["id"].as_i64() else { continue };
        order.push(id);
        replies.insert(id, m);
    }
    assert_eq!(
        order.first(),
        Some(&ping),
        "the ping waited for the hashing reads: order {order:?}"
    );
    let versions: std::collections::BTreeSet<String> = reads
        .iter()
        .map(|id| {
            let r = &replies[id]["result"];
            assert_eq!(r["isError"], false, "{r}");
            r["structuredContent"]["version"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(versions.len(), 1, "{versions:?}");
}
