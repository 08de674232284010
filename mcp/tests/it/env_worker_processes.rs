//! The process tools in a worker's environment, through the real binary: a `command`
//! environment whose argv is `codespace worker --stdio` (the gateway starts it; its pid is
//! written to a file first). `exec_command` pipes and a PTY, `write_stdin`, `read_process`
//! cursors, `terminate_process` run in the worker's own process table (the command's parent is
//! the worker); a held exec granted through the CLI runs there; a sandboxed workspace in a
//! worker environment runs the command in the worker's sandbox (secret masks from the
//! runner-backed listing, the write scope stat'ed and made through the runner); `kill -9` of the worker mid-command
//! makes the process `lost`, frees the lease, and the next call starts a new worker.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::stdio_common::{BIN, StdioServer};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A config of workspace `w` in a `command` environment running the worker, the pid of each
/// worker started appended to `pids`.
fn config(dir: &Path, extra_ws: Value) -> (PathBuf, PathBuf, PathBuf) {
    let root = dir.join("root");
    std::fs::create_dir_all(root.join("sub")).unwrap();
    let pids = dir.join("pids");
    let script = format!(
        "echo $$ >> '{}'; exec \"$0\" worker --stdio",
        pids.display()
    );
    let mut ws = json!({"root": root, "environment": "e", "profile": "workspace-write",
                        "sandbox": "off", "secret_masking": "off"});
    if let (Value::Object(w), Value::Object(x)) = (&mut ws, extra_ws) {
        w.extend(x);
    }
    let cfg = json!({
        "store": dir.join("store.db"),
        "environments": {"e": {"kind": "command",
                               "command": {"argv": ["sh", "-c", script, BIN]}}},
        "workspaces": {"w": ws},
    });
    let path = dir.join("config.json");
    std::fs::write(&path, cfg.to_string()).unwrap();
    (path, root, pids)
}

fn serve(dir: &Path, cfg: &Path) -> StdioServer {
    let mut s = StdioServer::serve()
        .arg("--config")
        .arg(cfg)
        .stderr_file(dir.join("stderr.log"))
        .spawn();
    s.initialize("t");
    s
}

/// The pids of the workers started so far.
fn worker_pids(pids: &Path) -> Vec<u32> {
    std::fs::read_to_string(pids)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Reads from `cursor` until `want` shows up or the output ends.
fn read_until(s: &mut StdioServer, id: &str, cursor: u64, want: &str) -> (String, u64) {
    let mut text = String::new();
    let mut cursor = cursor;
    loop {
        let r = s.tool_ok(
            "read_process",
            json!({"process_id": id, "cursor": cursor, "wait_ms": 10000}),
        );
        text.push_str(r["chunk"].as_str().unwrap());
        cursor = r["cursor"].as_u64().unwrap();
        if text.contains(want) || r["eof"] == json!(true) {
            return (text, cursor);
        }
    }
}

#[test]
fn pipes_a_pty_stdin_and_terminate_run_in_the_workers_table() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, _root, pids) = config(dir.path(), json!({}));
    let mut s = serve(dir.path(), &cfg);
    // Pipes, stderr apart; the command's parent is the worker, not the server.
    let r = s.tool_ok(
        "exec_command",
        json!({"workspace_id": "w", "cwd": "sub",
               "command": ["sh", "-c", "echo $PPID; pwd; echo err >&2; exit 3"],
               "stderr": "separate", "yield_ms": 10000}),
    );
    assert_eq!(
        (r["state"].clone(), r["exit_code"].clone()),
        (json!("exited"), json!(3)),
        "{r}"
    );
    let workers = worker_pids(&pids);
    assert_eq!(workers.len(), 1, "{workers:?}");
    let chunk = r["chunk"].as_str().unwrap();
    let mut lines = chunk.lines();
    assert_eq!(lines.next(), Some(workers[0].to_string().as_str()), "{r}");
    assert!(lines.next().unwrap().ends_with("/root/sub"), "{r}");
    assert_eq!(r["stderr_chunk"], "err\n", "{r}");
    // stdin and cursors.
    let r = s.tool_ok(
        "exec_command",
        json!({"workspace_id": "w", "command": ["cat"]}),
    );
    let id = r["process_id"].as_str().unwrap().to_string();
    s.tool_ok("write_stdin", json!({"process_id": id, "data": "hello\n"}));
    let (text, c1) = read_until(&mut s, &id, 0, "hello\n");
    assert_eq!((text.as_str(), c1), ("hello\n", 6));
    s.tool_ok("write_stdin", json!({"process_id": id, "data": "x\n"}));
    let (text, _) = read_until(&mut s, &id, c1, "x\n");
    assert_eq!(text, "x\n");
    let t = s.tool_ok("terminate_process", json!({"process_id": id}));
    assert_eq!(
        (t["state"].clone(), t["termination"].clone()),
        (json!("exited"), json!("terminated")),
        "{t}"
    );
    // A terminal.
    let r = s.tool_ok(
        "exec_command",
        json!({"workspace_id": "w", "command": ["sh", "-c", "tty; read l; echo got:$l"],
               "tty": true}),
    );
    let id = r["process_id"].as_str().unwrap().to_string();
    let (text, cursor) = read_until(&mut s, &id, 0, "/dev/pts/");
    assert!(text.contains("/dev/pts/"), "{text}");
    s.tool_ok("write_stdin", json!({"process_id": id, "data": "abc\n"}));
    let (text, _) = read_until(&mut s, &id, cursor, "got:abc");
    assert!(text.contains("got:abc"), "{text}");
    let st = s.tool_ok("process_status", json!({"process_id": id}));
    assert_eq!(st["tty"], true, "{st}");
    // The environment's kernel, as its worker probed it.
    let info = s.tool_ok("workspace_info", json!({"workspace_id": "w"}));
    assert!(
        info["execution"]["isolation"]["kernel"]["seccomp"].is_boolean(),
        "{info}"
    );
    assert_eq!(worker_pids(&pids).len(), 1, "one worker served it all");
    s.close_and_wait(Duration::from_secs(30));
}

#[test]
fn a_held_exec_granted_through_the_cli_runs_in_the_worker() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, root, pids) = config(dir.path(), json!({"approvals": "confirm"}));
    let mut s = serve(dir.path(), &cfg);
    let e = s.tool_err(
        "exec_command",
        json!({"workspace_id": "w", "command": ["sh", "-c", "echo $PPID > held.txt"],
               "yield_ms": 10000}),
    );
    assert_eq!(e["code"], "APPROVAL_REQUIRED", "{e}");
    let id = e["approval_id"].as_str().unwrap().to_string();
    let o = std::process::Command::new(BIN)
        .args(["approvals", "grant", &id, "--config"])
        .arg(&cfg)
        .env("USER", "alice")
        .env("CODESPACE_LOG", "warn")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r = s.tool_ok("operation_resume", json!({"approval_id": id}));
    assert_eq!(r["exec_command"]["state"], "exited", "{r}");
    let ppid: u32 = std::fs::read_to_string(root.join("held.txt"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(
        vec![ppid],
        worker_pids(&pids),
        "the granted command ran in the worker"
    );
    s.close_and_wait(Duration::from_secs(30));
}

/// True (after a `skip:`, which fails under `CI=true`) when this kernel cannot sandbox a
/// command with masks (the worker runs on this same kernel).
fn skip_without_masks(test: &str) -> bool {
    if crate::process_common::skip_without_sandbox(test) {
        return true;
    }
    let probe = codespace_runner_sandbox::probe();
    !codespace_test_skip::require(
        probe.masking_available(),
        test,
        format!("no mount namespaces for secret masks ({probe:?})"),
    )
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
    let (cfg, root, pids) = config(
        dir.path(),
        json!({"sandbox": "required", "secret_masking": "required",
               "command_write_paths": [".", "build/out"]}),
    );
    std::fs::write(root.join(".env"), "TOKEN=hunter2\n").unwrap();
    std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
    let outside = dir.path().join("outside.txt");
    let mut s = serve(dir.path(), &cfg);
    // The secret is masked in the worker's sandbox.
    let (_, out) = run(&mut s, "cat .env; echo; echo done");
    assert!(!out.contains("hunter2"), "{out}");
    assert!(out.contains("done"), "{out}");
    // The command ran in the worker (its parent is the worker).
    let (_, out) = run(&mut s, "echo $PPID");
    assert_eq!(out.trim(), worker_pids(&pids)[0].to_string(), "{out}");
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
    let (cfg, _root, pids) = config(dir.path(), json!({}));
    let mut s = serve(dir.path(), &cfg);
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
    let first = worker_pids(&pids);
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
    let now = worker_pids(&pids);
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
