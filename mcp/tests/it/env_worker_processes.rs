//! The process tools in a worker's environment, through the real binary: a `command`
//! environment whose argv is `codespace worker --stdio` (the gateway starts it; its pid is
//! written to a file first; setup in `env_common.rs`). Pipes, a PTY, the worker as the
//! command's parent, held execs and masks are in `env_matrix.rs` (every transport); here a
//! sandboxed workspace in a worker environment runs the command
//! in the worker's sandbox (secret masks from the runner-backed listing, the write scope
//! stat'ed and made through the runner); `kill -9` of the worker mid-command makes the process
//! `lost`, frees the lease, and the next call starts a new worker.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::env_common::{EnvSetup, Transport, skip_without_masks, tree};
use crate::stdio_common::StdioServer;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A server whose workspace `w` (root `dir/ws`, `extra_ws` merged into its config, written
/// to `dir/config.json`) lives in a `command` environment running `codespace worker --stdio`;
/// `prepare` fills the root first.
fn serve(
    dir: &Path,
    test: &str,
    extra_ws: Value,
    prepare: impl FnOnce(&Path),
) -> (EnvSetup, StdioServer, PathBuf) {
    let env = EnvSetup::new(Transport::Command, test, dir, &[]).unwrap();
    let root = tree(dir);
    prepare(&root);
    let s = env.serve(dir, &root, extra_ws, &[]);
    (env, s, root)
}

/// The pids of the workers started so far.
fn worker_pids(env: &EnvSetup) -> Vec<u32> {
    env.worker_pids().unwrap()
}

/// Runs `script` in `w` and returns its exit code and output.
fn run(s: &mut StdioServer, script: &str) -> (Value, String) {
    let r = s.tool_ok(
        "exec_command",
        json!({"workspace_id": "w", "command": ["sh", "-c", script], "yield_ms": 20000}),
    );
    assert_eq!(r["state"], "exited", "{r}");
    (
        r["exit_code"].clone(),
        r["chunk"].as_str().unwrap().to_string(),
    )
}

#[test]
fn a_sandboxed_command_in_a_worker_runs_in_the_workers_sandbox() {
    let test = "env_worker_processes::a_sandboxed_command_in_a_worker_runs_in_the_workers_sandbox";
    if skip_without_masks(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (env, mut s, root) = serve(
        dir.path(),
        test,
        json!({"sandbox": "required", "secret_masking": "required",
               "command_write_paths": [".", "build/out"]}),
        |root| {
            std::fs::write(root.join(".env"), "TOKEN=hunter2\n").unwrap();
            std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
        },
    );
    let outside = dir.path().join("outside.txt");
    // The secret is masked in the worker's sandbox.
    let (_, out) = run(&mut s, "cat .env; echo; echo done");
    assert!(!out.contains("hunter2"), "{out}");
    assert!(out.contains("done"), "{out}");
    // The command ran in the worker (its parent is the worker).
    let (_, out) = run(&mut s, "echo $PPID");
    assert_eq!(out.trim(), worker_pids(&env)[0].to_string(), "{out}");
    // Inside the write scope: written.
    let (code, out) = run(&mut s, "echo in > inside.txt");
    assert_eq!(code, json!(0), "{out}");
    assert_eq!(
        std::fs::read_to_string(root.join("inside.txt")).unwrap(),
        "in\n"
    );
    // The operator's missing write path was made by the worker's runner, and is writable.
    assert!(root.join("build/out").is_dir());
    let (code, out) = run(&mut s, "echo b > build/out/b.txt");
    assert_eq!(code, json!(0), "{out}");
    // Outside the workspace: refused.
    let script = format!("echo out > '{}'", outside.display());
    let (code, out) = run(&mut s, &script);
    assert_ne!(code, json!(0), "{out}");
    assert!(!outside.exists(), "a write outside the write scope landed");
    // `.git/hooks` is read-only.
    let (code, out) = run(&mut s, "echo x > .git/hooks/pre-commit");
    assert_ne!(code, json!(0), "{out}");
    assert!(!root.join(".git/hooks/pre-commit").exists());
    s.close_and_wait(Duration::from_secs(30));
}

#[test]
fn kill_nine_of_the_worker_mid_command_loses_the_process_frees_the_lease_and_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let (env, mut s, _root) = serve(
        dir.path(),
        "env_worker_processes::kill_nine_of_the_worker_mid_command_loses_the_process_frees_the_lease_and_restarts",
        json!({}),
        |_| {},
    );
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
    let first = worker_pids(&env);
    assert_eq!(first.len(), 1, "{first:?}");
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(i32::try_from(first[0]).unwrap()).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
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
    // The lease is free and the next call starts a new worker.
    let r = s.tool_ok(
        "exec_command",
        json!({"workspace_id": "w", "command": ["sh", "-c", "echo again"], "yield_ms": 10000}),
    );
    assert_eq!(
        (r["state"].clone(), r["chunk"].clone()),
        (json!("exited"), json!("again\n")),
        "{r}"
    );
    let now = worker_pids(&env);
    assert_eq!(now.len(), 2, "a new worker: {now:?}");
    let info = s.tool_ok("workspace_info", json!({"workspace_id": "w"}));
    assert!(
        info["environment"]["worker"]["restarts"].as_u64().unwrap() >= 1,
        "{info}"
    );
    // The lost id is never served again.
    let st = s.tool_ok("process_status", json!({"process_id": id}));
    assert_eq!(st["state"], "lost", "{st}");
    s.close_and_wait(Duration::from_secs(30));
}
