//! A patch in a `command` worker's environment (`codespace worker --stdio`, started and
//! restarted by the gateway), through the real binary: `kill -9` of the worker between the
//! patch's snapshot and its apply leaves the files all old or all new and no journal once the
//! worker is back. The file tools through each transport are in `env_matrix.rs`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::env_common::{EnvSetup, Transport, open_journals, tree, wait_journal};
use crate::stdio_common;
use serde_json::json;
use std::time::Duration;

#[test]
fn kill_nine_of_the_worker_mid_patch_leaves_all_old_or_all_new_after_restart() {
    let test =
        "env_files::kill_nine_of_the_worker_mid_patch_leaves_all_old_or_all_new_after_restart";
    if !stdio_common::test_hooks_or_skip(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let env = EnvSetup::new(Transport::Command, test, dir.path(), &[]).unwrap();
    let root = tree(dir.path());
    let store = dir.path().join("store.db");
    let gate = dir.path().join("gate");
    let mut s = env.serve(
        dir.path(),
        &root,
        json!({}),
        &[("CODESPACE_TEST_PATCH_GATE", &gate)],
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
    let workers = env.worker_pids().unwrap();
    assert_eq!(workers.len(), 1, "{workers:?}");
    let pid = workers[0];
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
