//! The file tools of a workspace served by a real worker, through the real binary: a `command`
//! environment whose argv is `codespace worker --stdio` (the gateway starts it and restarts it).
//! find with `path`, grep, find_files and apply_patch with `expected_versions` go through the
//! worker; an edit made in the worker's tree is a `VERSION_CONFLICT` before the apply and a
//! `STALE_READ` inside the apply window; `kill -9` of the worker between the patch's snapshot
//! and its apply leaves the files all old or all new and no journal once the worker is back.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::stdio_common::{self, BIN, StdioServer};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Three files a patch touches, a `.gitignore` and an ignored file.
fn tree(dir: &Path) -> PathBuf {
    let root = dir.join("ws");
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::create_dir_all(root.join("target")).unwrap();
    std::fs::write(root.join(".gitignore"), "target/\n").unwrap();
    std::fs::write(root.join("src/main.rs"), "fn main() {\n    hello();\n}\n").unwrap();
    std::fs::write(root.join("src/lib.rs"), "pub fn hello() {}\n").unwrap();
    std::fs::write(root.join("README.md"), "hello readme\n").unwrap();
    std::fs::write(root.join("target/gen.rs"), "hello generated\n").unwrap();
    std::fs::canonicalize(&root).unwrap()
}

/// A server whose one workspace `w` (root `root`) lives in a `command` worker's environment.
fn serve(dir: &Path, root: &Path, hook: Option<(&str, &Path)>) -> StdioServer {
    let cfg = json!({
        "environments": {"e": {"kind": "command", "command": {"argv": [BIN, "worker", "--stdio"]}}},
        "workspaces": {"w": {"root": root, "environment": "e", "sandbox": "off",
                              "secret_masking": "off"}},
    });
    let path = dir.join("config.json");
    std::fs::write(&path, cfg.to_string()).unwrap();
    let mut b = StdioServer::serve()
        .arg("--config")
        .arg(&path)
        .arg("--store")
        .arg(dir.join("store.db"))
        .stderr_file(dir.join("stderr.log"));
    if let Some((k, v)) = hook {
        b = b.env(k, v);
    }
    let mut s = b.spawn();
    s.initialize("env-files");
    s
}

fn paths(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_string())
        .collect()
}

fn open_journals(store: &Path) -> usize {
    codespace_store::Store::open(store)
        .unwrap()
        .open_journals()
        .unwrap()
        .len()
}

/// Waits until the gateway wrote the patch's journal (the apply is then held before its
/// `apply` call by the gate hook).
fn wait_journal(store: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while open_journals(store) == 0 {
        assert!(Instant::now() < deadline, "no journal was written");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The pid of the worker the server started (its child running `worker --stdio`).
fn worker_pid(server: u32) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if ppid == Some(server) && cmdline.windows(6).any(|w| w == b"worker") {
                return pid;
            }
        }
        assert!(Instant::now() < deadline, "no worker process found");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn find_grep_find_files_and_apply_patch_go_through_a_command_worker() {
    let dir = tempfile::tempdir().unwrap();
    let root = tree(dir.path());
    let mut s = serve(dir.path(), &root, None);

    let found = s.tool_ok("find", json!({"workspace_id": "w", "path": "src"}));
    assert_eq!(
        paths(&found["paths"]),
        ["src/lib.rs", "src/main.rs"],
        "{found}"
    );
    assert_eq!(found["walk_reason"], "watcher_unavailable", "{found}");
    let ignored = s.tool_ok(
        "find",
        json!({"workspace_id": "w", "respect_gitignore": true}),
    );
    assert!(
        !paths(&ignored["paths"]).contains(&"target/gen.rs".to_string()),
        "{ignored}"
    );
    let grep = s.tool_ok("grep", json!({"workspace_id": "w", "pattern": "hello"}));
    let hits: Vec<&str> = grep["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["path"].as_str().unwrap())
        .collect();
    assert_eq!(hits, ["README.md", "src/lib.rs", "src/main.rs"], "{grep}");
    let ff = s.tool_ok("find_files", json!({"workspace_id": "w", "query": "lib"}));
    assert_eq!(ff["matches"][0]["path"], "src/lib.rs", "{ff}");

    let read = s.tool_ok("read", json!({"workspace_id": "w", "path": "src/lib.rs"}));
    let v = read["version"].as_str().unwrap().to_string();
    let patch = "*** Begin Patch\n*** Update File: src/lib.rs\n-pub fn hello() {}\n+pub fn hello() { 1 }\n*** End Patch";
    let out = s.tool_ok(
        "apply_patch",
        json!({"workspace_id": "w", "patch": patch, "expected_versions": {"src/lib.rs": v}}),
    );
    assert_eq!(out["status"], "applied", "{out}");
    assert_eq!(
        std::fs::read_to_string(root.join("src/lib.rs")).unwrap(),
        "pub fn hello() { 1 }\n"
    );
    // An edit made in the worker's tree: the version the client holds is stale.
    let after = out["changes"][0]["after_version"]
        .as_str()
        .unwrap()
        .to_string();
    std::fs::write(root.join("src/lib.rs"), "pub fn hello() { 2 }\n").unwrap();
    let patch2 = "*** Begin Patch\n*** Update File: src/lib.rs\n-pub fn hello() { 2 }\n+pub fn hello() { 3 }\n*** End Patch";
    let e = s.tool_err(
        "apply_patch",
        json!({"workspace_id": "w", "patch": patch2, "expected_versions": {"src/lib.rs": after}}),
    );
    assert_eq!(e["code"], "VERSION_CONFLICT", "{e}");
    assert_eq!(
        std::fs::read_to_string(root.join("src/lib.rs")).unwrap(),
        "pub fn hello() { 2 }\n"
    );
    s.close_and_wait(Duration::from_secs(30));
}

#[test]
fn an_edit_in_the_workers_tree_during_the_apply_is_stale_read() {
    if !stdio_common::test_hooks_or_skip(
        "env_files::an_edit_in_the_workers_tree_during_the_apply_is_stale_read",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = tree(dir.path());
    let gate = dir.path().join("gate");
    let mut s = serve(
        dir.path(),
        &root,
        Some(("CODESPACE_TEST_PATCH_GATE", &gate)),
    );
    let patch = "*** Begin Patch\n*** Update File: src/lib.rs\n-pub fn hello() {}\n+pub fn hello() { 1 }\n*** Update File: README.md\n-hello readme\n+bye\n*** End Patch";
    let id = s.send_request(
        "tools/call",
        json!({"name": "apply_patch", "arguments": {"workspace_id": "w", "patch": patch}}),
    );
    wait_journal(&dir.path().join("store.db"));
    std::fs::write(root.join("src/lib.rs"), "outside\n").unwrap();
    std::fs::write(&gate, "").unwrap();
    let r = s.response(id);
    let body = stdio_common::error_body(&r["result"]);
    assert_eq!(body["code"], "STALE_READ", "{r}");
    assert_eq!(
        std::fs::read_to_string(root.join("src/lib.rs")).unwrap(),
        "outside\n"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("README.md")).unwrap(),
        "hello readme\n"
    );
    assert_eq!(open_journals(&dir.path().join("store.db")), 0);
    s.close_and_wait(Duration::from_secs(30));
}

#[test]
fn kill_nine_of_the_worker_mid_patch_leaves_all_old_or_all_new_after_restart() {
    if !stdio_common::test_hooks_or_skip(
        "env_files::kill_nine_of_the_worker_mid_patch_leaves_all_old_or_all_new_after_restart",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = tree(dir.path());
    let store = dir.path().join("store.db");
    let gate = dir.path().join("gate");
    let mut s = serve(
        dir.path(),
        &root,
        Some(("CODESPACE_TEST_PATCH_GATE", &gate)),
    );
    let old: Vec<(String, String)> = ["src/lib.rs", "README.md"]
        .iter()
        .map(|p| {
            (
                p.to_string(),
                std::fs::read_to_string(root.join(p)).unwrap(),
            )
        })
        .collect();
    let patch = "*** Begin Patch\n*** Update File: src/lib.rs\n-pub fn hello() {}\n+pub fn hello() { 1 }\n*** Update File: README.md\n-hello readme\n+bye\n*** Add File: new.txt\n+new\n*** End Patch";
    let id = s.send_request(
        "tools/call",
        json!({"name": "apply_patch", "arguments": {"workspace_id": "w", "patch": patch}}),
    );
    // Snapshot taken and journaled; the apply waits at the gate: kill the worker now.
    wait_journal(&store);
    let pid = worker_pid(s.pid());
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(i32::try_from(pid).unwrap()).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    std::fs::write(&gate, "").unwrap();
    let r = s.response(id);
    // Either the worker was gone (unavailable: nothing applied, the journal kept for the
    // worker's recovery) or it was started again and the apply landed whole.
    let applied = r["result"]["structuredContent"]["status"] == "applied";
    if !applied {
        let body = stdio_common::error_body(&r["result"]);
        assert_eq!(body["code"], "ENVIRONMENT_UNAVAILABLE", "{r}");
    }
    // The next call reaches a new worker, which recovers the journal before serving.
    let read = s.tool_ok("read", json!({"workspace_id": "w", "path": "README.md"}));
    let now: Vec<String> = old
        .iter()
        .map(|(p, _)| std::fs::read_to_string(root.join(p)).unwrap())
        .collect();
    let was: Vec<String> = old.iter().map(|(_, c)| c.clone()).collect();
    let new = vec!["pub fn hello() { 1 }\n".to_string(), "bye\n".to_string()];
    assert!(
        now == was && !root.join("new.txt").exists() || now == new && root.join("new.txt").exists(),
        "files are neither all old nor all new: {now:?}"
    );
    assert_eq!(read["content"], now[1], "{read}");
    assert_eq!(open_journals(&store), 0);
    let info = s.tool_ok("workspace_info", json!({"workspace_id": "w"}));
    assert!(
        info["environment"]["worker"]["restarts"].as_u64().unwrap() >= 1,
        "{info}"
    );
    s.close_and_wait(Duration::from_secs(30));
}
