//! `kill -9` of an environment's far end while it serves, through the real binary: `container`
//! (the whole podman container the server started from a rootfs, `podman kill -s KILL`), `ssh`
//! (the worker the loopback sshd started) and `unix` (the `worker {user}` socket worker the
//! server started through setpriv). Mid-command: the process becomes `lost`, its lease
//! is freed, and the next call restarts the environment (the container is re-created) and
//! works. Mid-patch (held between snapshot and apply by the patch gate hook): after the next
//! call's recovery the files are all old or all new, no journal is left and the operation is
//! `unknown` unless it applied whole. The `command` worker's variants are in `env_files.rs`
//! and `env_worker_processes.rs`; setup in `env_common.rs`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::env_common::{EnvSetup, Transport, open_journals, tree, wait_journal};
use crate::stdio_common::{self, StdioServer};
use serde_json::json;
use std::path::Path;
use std::time::Duration;

/// What identifies this incarnation of the far end: the container's id, or the ssh worker's
/// pid.
fn incarnation(env: &EnvSetup, root: &Path) -> String {
    match env.transport {
        Transport::Container => env.container_id(root).expect("the container runs"),
        Transport::WorkerUser => format!("{:?}", env.worker_pids()),
        _ => format!("{:?}", env.ssh_worker_pids()),
    }
}

/// The worker's restarts as `workspace_info` reports them (its state ready).
fn restarts(s: &mut StdioServer) -> u64 {
    let info = s.tool_ok("workspace_info", json!({"workspace_id": "w"}));
    assert_eq!(info["environment"]["worker"]["state"], "ready", "{info}");
    info["environment"]["worker"]["restarts"].as_u64().unwrap()
}

fn mid_command(t: Transport, test: &str) {
    let dir = tempfile::tempdir().unwrap();
    let Some(env) = EnvSetup::new(t, test, dir.path(), &[]) else {
        return;
    };
    let root = tree(dir.path());
    let mut s = env.serve(dir.path(), &root, json!({}), &[]);
    let r = s.tool_ok(
        "exec_command",
        json!({"workspace_id": "w", "command": ["sleep", "60"]}),
    );
    let id = r["process_id"].as_str().unwrap().to_string();
    let busy = s.tool_err(
        "exec_command",
        json!({"workspace_id": "w", "command": ["true"]}),
    );
    assert_eq!(busy["code"], "WORKSPACE_BUSY", "{busy}");
    let before = incarnation(&env, &root);
    env.kill_nine(&root);
    // Whether the disconnect hook or this call notices first, the process is lost.
    let st = s.tool_ok("process_status", json!({"process_id": id}));
    assert_eq!(st["state"], "lost", "{st}");
    let rd = s.tool_ok("read_process", json!({"process_id": id, "wait_ms": 1000}));
    assert_eq!(
        (rd["state"].clone(), rd["eof"].clone()),
        (json!("lost"), json!(true)),
        "{rd}"
    );
    let w = s.tool_err("write_stdin", json!({"process_id": id, "data": "x"}));
    assert_eq!(w["code"], "PROCESS_NOT_RUNNING", "{w}");
    // The lease is free and the next call restarts the environment, which works.
    let r = s.tool_ok(
        "exec_command",
        json!({"workspace_id": "w", "command": ["sh", "-c", "echo again"], "yield_ms": 10000}),
    );
    assert_eq!(
        (r["state"].clone(), r["chunk"].clone()),
        (json!("exited"), json!("again\n")),
        "{r}"
    );
    assert!(restarts(&mut s) >= 1);
    let after = incarnation(&env, &root);
    assert_ne!(before, after, "a new container / worker serves");
    let st = s.tool_ok("process_status", json!({"process_id": id}));
    assert_eq!(st["state"], "lost", "{st}");
    s.close_and_wait(Duration::from_secs(60));
}

fn mid_patch(t: Transport, test: &str) {
    if !stdio_common::test_hooks_or_skip(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(env) = EnvSetup::new(t, test, dir.path(), &[]) else {
        return;
    };
    let root = tree(dir.path());
    let store = dir.path().join("store.db");
    let gate = dir.path().join("gate");
    let mut s = env.serve(
        dir.path(),
        &root,
        json!({}),
        &[("CODESPACE_TEST_PATCH_GATE", &gate)],
    );
    let was: Vec<String> = ["src/lib.rs", "README.md"]
        .iter()
        .map(|p| std::fs::read_to_string(root.join(p)).unwrap())
        .collect();
    let patch = "*** Begin Patch\n*** Update File: src/lib.rs\n-pub fn hello() {}\n+pub fn hello() { 1 }\n*** Update File: README.md\n-hello readme\n+bye\n*** Add File: new.txt\n+new\n*** End Patch";
    let id = s.send_request(
        "tools/call",
        json!({"name": "apply_patch", "arguments": {"workspace_id": "w", "patch": patch,
               "operation_key": "kill-1"}}),
    );
    // Snapshot taken and journaled; the apply waits at the gate: kill the far end now.
    wait_journal(&store);
    let before = incarnation(&env, &root);
    env.kill_nine(&root);
    std::fs::write(&gate, "").unwrap();
    let r = s.response(id);
    // Either the environment was gone (unavailable: nothing applied, the journal kept for the
    // recovery) or it was started again and the apply landed whole.
    let applied = r["result"]["structuredContent"]["status"] == "applied";
    if !applied {
        let body = stdio_common::error_body(&r["result"]);
        assert_eq!(body["code"], "ENVIRONMENT_UNAVAILABLE", "{r}");
    }
    // The next call reaches a new far end, which recovers the journal before serving.
    let read = s.tool_ok("read", json!({"workspace_id": "w", "path": "README.md"}));
    let now: Vec<String> = ["src/lib.rs", "README.md"]
        .iter()
        .map(|p| std::fs::read_to_string(root.join(p)).unwrap())
        .collect();
    let new = vec!["pub fn hello() { 1 }\n".to_string(), "bye\n".to_string()];
    let all_old = now == was && !root.join("new.txt").exists();
    let all_new = now == new && root.join("new.txt").exists();
    assert!(
        all_old || all_new,
        "files are neither all old nor all new: {now:?}"
    );
    assert_eq!(read["content"], now[1], "{read}");
    assert_eq!(open_journals(&store), 0);
    let op = s.tool_ok("operation_status", json!({"operation_key": "kill-1"}));
    if all_old {
        assert_eq!(op["status"], "unknown", "{op}");
    }
    assert!(restarts(&mut s) >= 1);
    assert_ne!(before, incarnation(&env, &root), "a new container / worker");
    s.close_and_wait(Duration::from_secs(60));
}

macro_rules! transport {
    ($module:ident, $t:expr) => {
        mod $module {
            use super::*;

            #[test]
            fn kill_nine_mid_command_loses_the_process_frees_the_lease_and_restarts() {
                mid_command(
                    $t,
                    concat!(
                        "env_kill::",
                        stringify!($module),
                        "::kill_nine_mid_command_loses_the_process_frees_the_lease_and_restarts"
                    ),
                );
            }

            #[test]
            fn kill_nine_mid_patch_leaves_all_old_or_all_new_after_recovery() {
                mid_patch(
                    $t,
                    concat!(
                        "env_kill::",
                        stringify!($module),
                        "::kill_nine_mid_patch_leaves_all_old_or_all_new_after_recovery"
                    ),
                );
            }
        }
    };
}

transport!(unix, Transport::WorkerUser);
transport!(ssh, Transport::Ssh);
transport!(container, Transport::Container);
