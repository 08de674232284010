//! The file and process tools through every worker transport, through the real binary: the
//! same assertions against a `command` worker, a unix `worker` socket, an `ssh` worker (the
//! loopback sshd fixture) and a `container` worker (podman on a rootfs). Files: find with
//! `path`, grep, find_files, apply_patch with `expected_versions`, an edit in the
//! environment's tree a `VERSION_CONFLICT` before the apply and a `STALE_READ` inside its
//! window, `walk_reason: watcher_unavailable`. Processes: exec_command pipes (stderr apart,
//! exit code, cwd, the worker as the command's parent where its pid is known) and a PTY,
//! write_stdin, read_process cursors, terminate_process, the worker's kernel probe. Approvals:
//! a held exec granted through the CLI runs in the environment, a denied one never runs.
//! Masks and the sandbox: `.env` withheld from read/find/grep and masked from commands, writes
//! outside the scope and into `.git/hooks` refused, the network denied, all as
//! `workspace_info` reports for that environment; an environment that cannot sandbox says so
//! and refuses sandboxed commands. Hooks: a failing `before_patch` hook writes nothing, an
//! `after_patch` formatter's change is versioned. One server per transport per test.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::env_common::{
    EnvSetup, Transport, approvals_cli, open_journals, process_diag, read_until,
    skip_without_masks, tree, wait_journal,
};
use crate::stdio_common::{self, StdioServer};
use serde_json::{Value, json};
use std::time::Duration;

/// Programs the process tests run inside a container (the rootfs has `sh`, `sleep`, `true`).
const PROGRAMS: &[&str] = &["/bin/cat", "/usr/bin/tty", "/bin/bash"];

fn paths(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_string())
        .collect()
}

fn transport_name(t: Transport) -> &'static str {
    match t {
        Transport::Command => "command",
        Transport::Worker | Transport::WorkerUser => "unix",
        Transport::Ssh => "ssh",
        Transport::Container => "podman",
    }
}

/// The environment's worker is up and was reached through `t`.
fn assert_transport(s: &mut StdioServer, t: Transport) {
    let info = s.tool_ok("workspace_info", json!({"workspace_id": "w"}));
    let env = &info["environment"];
    assert_eq!(env["worker"]["state"], "ready", "{info}");
    if t != Transport::Command {
        assert_eq!(env["transport"], transport_name(t), "{info}");
    }
}

fn files(t: Transport, test: &str) {
    let dir = tempfile::tempdir().unwrap();
    let Some(env) = EnvSetup::new(t, test, dir.path(), PROGRAMS) else {
        return;
    };
    let root = tree(dir.path());
    let mut s = env.serve(dir.path(), &root, json!({}), &[]);
    assert_transport(&mut s, env.transport);

    let found = s.tool_ok("find", json!({"workspace_id": "w", "path": "src"}));
    assert_eq!(
        paths(&found["paths"]),
        ["src/lib.rs", "src/main.rs"],
        "{found}"
    );
    // The gateway keeps no listing of a worker's tree: every find is a walk there.
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
    // An edit made in the environment's tree: the version the client holds is stale.
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
    s.close_and_wait(Duration::from_secs(60));
}

fn stale_read(t: Transport, test: &str) {
    if !stdio_common::test_hooks_or_skip(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(env) = EnvSetup::new(t, test, dir.path(), PROGRAMS) else {
        return;
    };
    let root = tree(dir.path());
    let gate = dir.path().join("gate");
    let store = dir.path().join("store.db");
    let mut s = env.serve(
        dir.path(),
        &root,
        json!({}),
        &[("CODESPACE_TEST_PATCH_GATE", &gate)],
    );
    let patch = "*** Begin Patch\n*** Update File: src/lib.rs\n-pub fn hello() {}\n+pub fn hello() { 1 }\n*** Update File: README.md\n-hello readme\n+bye\n*** End Patch";
    let id = s.send_request(
        "tools/call",
        json!({"name": "apply_patch", "arguments": {"workspace_id": "w", "patch": patch}}),
    );
    wait_journal(&store);
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
    assert_eq!(open_journals(&store), 0);
    s.close_and_wait(Duration::from_secs(60));
}

fn processes(t: Transport, test: &str) {
    let dir = tempfile::tempdir().unwrap();
    let Some(env) = EnvSetup::new(t, test, dir.path(), PROGRAMS) else {
        return;
    };
    let root = tree(dir.path());
    let mut s = env.serve(dir.path(), &root, json!({}), &[]);
    assert_transport(&mut s, env.transport);
    // Pipes, stderr apart, the exit code, the cwd; where the test sees the worker's pid, the
    // command's parent is the worker, not the server.
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
    let mut lines = r["chunk"].as_str().unwrap().lines();
    let ppid = lines.next().unwrap().to_string();
    if let Some(workers) = env.worker_pids() {
        assert_eq!(workers.len(), 1, "{workers:?}");
        assert_eq!(ppid, workers[0].to_string(), "{r}");
    }
    assert_eq!(
        lines.next(),
        Some(root.join("sub").display().to_string().as_str()),
        "{r}"
    );
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
    if !text.contains("got:abc") {
        let diag = process_diag(&mut s, &id, dir.path());
        panic!("{text:?} has no got:abc\n{diag}");
    }
    let st = s.tool_ok("process_status", json!({"process_id": id}));
    assert_eq!(st["tty"], true, "{st}");
    // The environment's kernel, as its worker probed it.
    let info = s.tool_ok("workspace_info", json!({"workspace_id": "w"}));
    assert!(
        info["execution"]["isolation"]["kernel"]["seccomp"].is_boolean(),
        "{info}"
    );
    if let Some(workers) = env.worker_pids() {
        assert_eq!(workers.len(), 1, "one worker served it all: {workers:?}");
    }
    s.close_and_wait(Duration::from_secs(60));
}

/// `exec_command` of `sh -c script` in `w`, to its end: its exit code and output.
fn run_sh(s: &mut StdioServer, script: &str) -> (Value, String) {
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

/// Held execs through each transport: granted through the CLI, the command runs in the
/// environment (its parent is the worker, in a container beside the mounted worker binary);
/// denied, it never runs.
fn approvals(t: Transport, test: &str) {
    let dir = tempfile::tempdir().unwrap();
    let Some(env) = EnvSetup::new(t, test, dir.path(), PROGRAMS) else {
        return;
    };
    let root = tree(dir.path());
    let mut s = env.serve(dir.path(), &root, json!({"approvals": "confirm"}), &[]);
    let script = "echo $PPID > held.txt; cat /proc/$PPID/cmdline >> held.txt; \
                  test -x /codespace && echo in-container >> held.txt; true";
    let e = s.tool_err(
        "exec_command",
        json!({"workspace_id": "w", "command": ["sh", "-c", script], "yield_ms": 10000}),
    );
    assert_eq!(e["code"], "APPROVAL_REQUIRED", "{e}");
    let id = e["approval_id"].as_str().unwrap().to_string();
    assert!(!root.join("held.txt").exists(), "a held command ran");
    approvals_cli(dir.path(), "grant", &id);
    let r = s.tool_ok("operation_resume", json!({"approval_id": id}));
    assert_eq!(r["exec_command"]["state"], "exited", "{r}");
    let held = std::fs::read_to_string(root.join("held.txt")).unwrap();
    // Its parent is the environment's worker (`... worker --stdio` / `--socket`).
    assert!(held.contains("worker\0--"), "{held:?}");
    if let Some(workers) = env.worker_pids() {
        assert_eq!(held.lines().next(), Some(workers[0].to_string().as_str()));
    }
    assert_eq!(
        held.contains("in-container"),
        t == Transport::Container,
        "{held:?}"
    );
    // Denied: never runs, not even once the hold is resumed.
    let e = s.tool_err(
        "exec_command",
        json!({"workspace_id": "w", "command": ["sh", "-c", "echo ran > denied.txt"],
               "yield_ms": 10000}),
    );
    assert_eq!(e["code"], "APPROVAL_REQUIRED", "{e}");
    let id = e["approval_id"].as_str().unwrap().to_string();
    approvals_cli(dir.path(), "deny", &id);
    let e = s.tool_err("operation_resume", json!({"approval_id": id}));
    assert_eq!(e["code"], "APPROVAL_CONFLICT", "{e}");
    assert!(e["message"].as_str().unwrap().contains("denied"), "{e}");
    assert!(!root.join("denied.txt").exists(), "a denied command ran");
    s.close_and_wait(Duration::from_secs(60));
}

/// The secret file withheld from the file tools and masked from commands, the write scope,
/// `.git` read-only and the network denied, in each transport's environment as far as its
/// kernel allows: what `workspace_info.execution.isolation` reports is what is enforced, and
/// where the environment cannot sandbox (reported so), a command of a workspace that requires
/// the sandbox fails closed instead of running unsandboxed.
fn masks_and_sandbox(t: Transport, test: &str) {
    if skip_without_masks(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(env) = EnvSetup::new(t, test, dir.path(), PROGRAMS) else {
        return;
    };
    let root = tree(dir.path());
    std::fs::write(root.join(".env"), "TOKEN=hunter2\n").unwrap();
    std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
    let mut s = env.serve(
        dir.path(),
        &root,
        json!({"sandbox": "required", "secret_masking": "required", "network": "restricted",
               "command_write_paths": ["."]}),
        &[],
    );
    // The file tools: withheld from read, find and grep.
    let e = s.tool_err("read", json!({"workspace_id": "w", "path": ".env"}));
    assert_eq!(e["code"], "UNAUTHORIZED", "{e}");
    let found = s.tool_ok("find", json!({"workspace_id": "w"}));
    assert!(
        !paths(&found["paths"]).contains(&".env".to_string()),
        "{found}"
    );
    let grep = s.tool_ok("grep", json!({"workspace_id": "w", "pattern": "hunter2"}));
    assert_eq!(grep["matches"], json!([]), "{grep}");

    let info = s.tool_ok("workspace_info", json!({"workspace_id": "w"}));
    let iso = &info["execution"]["isolation"];
    let kernel = &iso["kernel"];
    let sandboxes = kernel["landlock_abi"].as_u64().is_some_and(|a| a >= 1)
        && kernel["seccomp"] == true
        && kernel["mount_namespaces"] == true;
    eprintln!("{test}: isolation {iso}");
    if t != Transport::Container {
        // The same kernel as this test's, which sandboxes (checked above).
        assert!(sandboxes, "{info}");
    }
    if !sandboxes {
        assert_reported_and_fails_closed(&mut s, &info, &root);
        s.close_and_wait(Duration::from_secs(60));
        return;
    }
    assert_eq!(iso["command_sandbox"], "linux-sandbox", "{info}");
    assert_eq!(
        info["execution"]["network"]["enforcement"], "enforced",
        "{info}"
    );
    assert_eq!(iso["secret_masking"], "enforced", "{info}");
    assert_eq!(iso["write_paths"]["read_only"], json!([".git"]), "{info}");
    // Masked from a command's view inside the environment.
    let (_, out) = run_sh(&mut s, "cat .env; echo; echo done");
    assert!(!out.contains("hunter2"), "{out}");
    assert!(out.contains("done"), "{out}");
    // Inside the write scope: written; outside the workspace and in `.git/hooks`: refused.
    let (code, out) = run_sh(&mut s, "echo in > inside.txt");
    assert_eq!(code, json!(0), "{out}");
    assert_eq!(
        std::fs::read_to_string(root.join("inside.txt")).unwrap(),
        "in\n"
    );
    let (code, out) = run_sh(&mut s, "echo out > ../outside.txt");
    assert_ne!(code, json!(0), "{out}");
    assert!(!root.parent().unwrap().join("outside.txt").exists());
    let (code, out) = run_sh(&mut s, "echo x > .git/hooks/pre-commit");
    assert_ne!(code, json!(0), "{out}");
    assert!(!root.join(".git/hooks/pre-commit").exists());
    // The network is denied by the sandbox (a socket is refused with EPERM), also where the
    // environment could reach the listener (everything but the container, whose network
    // namespace is its own).
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let r = s.tool_ok(
        "exec_command",
        json!({"workspace_id": "w", "yield_ms": 20000, "command": ["bash", "-c",
               format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected")]}),
    );
    let out = r["chunk"].as_str().unwrap();
    assert_ne!(r["exit_code"], json!(0), "{r}");
    assert!(out.contains("Operation not permitted"), "{r}");
    drop(listener);
    s.close_and_wait(Duration::from_secs(60));
}

/// The operator's `apply_patch` hooks run in the environment (through its runner, sandboxed
/// there): a failing `before_patch` hook sees the patched tree and leaves every file untouched
/// (`HOOK_FAILED`, the operation `failed`); an `after_patch` formatter's rewrite is read back
/// with a new version, and a patch pinned to the patch's own version is a `VERSION_CONFLICT`.
/// Shell builtins only, so the container's rootfs needs nothing more.
fn hooks(t: Transport, test: &str) {
    if skip_without_masks(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(env) = EnvSetup::new(t, test, dir.path(), PROGRAMS) else {
        return;
    };
    let root = tree(dir.path());
    let hooks = json!({
        "before_patch": [{
            "command": ["sh", "-c", "echo checking; read -r l < README.md; echo \"saw $l\"; exit 3"],
            "paths": ["*.md"],
        }],
        "after_patch": [{
            "command": ["sh", "-c", "read -r l < src/lib.rs; printf '%s // formatted\\n' \"$l\" > src/lib.rs; echo formatted"],
            "paths": ["src/**"],
        }],
    });
    let mut s = env.serve(
        dir.path(),
        &root,
        json!({"sandbox": "required", "secret_masking": "required", "hooks": hooks}),
        &[],
    );
    assert_transport(&mut s, t);
    // before_patch fails: nothing of the patch is written in the environment.
    let was: Vec<String> = ["src/lib.rs", "README.md"]
        .iter()
        .map(|p| std::fs::read_to_string(root.join(p)).unwrap())
        .collect();
    let patch = "*** Begin Patch\n*** Update File: src/lib.rs\n-pub fn hello() {}\n+pub fn hello() { 1 }\n*** Update File: README.md\n-hello readme\n+bye readme\n*** Add File: new.txt\n+new\n*** End Patch";
    let e = s.tool_err("apply_patch", json!({"workspace_id": "w", "patch": patch}));
    assert_eq!(e["code"], "HOOK_FAILED", "{e}");
    let msg = e["message"].as_str().unwrap();
    assert!(
        msg.contains("exited with 3") && msg.contains("checking") && msg.contains("saw bye readme"),
        "the exit code and the output, run on the patched tree: {msg}"
    );
    let now: Vec<String> = ["src/lib.rs", "README.md"]
        .iter()
        .map(|p| std::fs::read_to_string(root.join(p)).unwrap())
        .collect();
    assert_eq!(now, was, "a file was written");
    assert!(!root.join("new.txt").exists());
    let op = e["operation_id"].as_str().unwrap().to_string();
    let st = s.tool_ok("operation_status", json!({"operation_id": op}));
    assert_eq!(st["status"], "failed", "{st}");
    assert_eq!(open_journals(&dir.path().join("store.db")), 0);
    // after_patch: the formatter's rewrite is a new version.
    let patch = "*** Begin Patch\n*** Update File: src/lib.rs\n-pub fn hello() {}\n+pub fn hello() { 1 }\n*** End Patch";
    let r = s.tool_ok("apply_patch", json!({"workspace_id": "w", "patch": patch}));
    assert_eq!(r["status"], "applied", "{r}");
    let h = &r["hooks"][0];
    assert_eq!(
        (h["stage"].clone(), h["exit_code"].clone()),
        (json!("after_patch"), json!(0)),
        "{r}"
    );
    assert!(h["output"].as_str().unwrap().contains("formatted"), "{r}");
    let want = "pub fn hello() { 1 } // formatted\n";
    assert_eq!(
        std::fs::read_to_string(root.join("src/lib.rs")).unwrap(),
        want
    );
    let after = r["changes"][0]["after_version"]
        .as_str()
        .unwrap()
        .to_string();
    let now = s.tool_ok("read", json!({"workspace_id": "w", "path": "src/lib.rs"}));
    assert_eq!(now["content"], want, "{now}");
    assert_ne!(
        now["version"], after,
        "the formatter's write is a new version"
    );
    let stale = s.tool_err(
        "apply_patch",
        json!({"workspace_id": "w",
               "patch": "*** Begin Patch\n*** Update File: src/lib.rs\n-pub fn hello() { 1 } // formatted\n+x\n*** End Patch",
               "expected_versions": {"src/lib.rs": after}}),
    );
    assert_eq!(stale["code"], "VERSION_CONFLICT", "{stale}");
    // Not asserted here: the ledger row of the formatter's change. In a worker's workspace
    // it is recorded only if the worker's watcher event reached the gateway before the hook's
    // exit (no fence across the wire; docs/environments.md).
    s.close_and_wait(Duration::from_secs(60));
}

/// An environment that cannot hold the sandbox says so in `workspace_info` (no command
/// sandbox, no write scope, no network enforcement), and a command of a workspace that
/// requires the sandbox fails closed there: it never runs unsandboxed.
fn assert_reported_and_fails_closed(s: &mut StdioServer, info: &Value, root: &std::path::Path) {
    let iso = &info["execution"]["isolation"];
    assert_eq!(iso["command_sandbox"], "none", "{info}");
    assert!(iso["write_paths"].is_null(), "{info}");
    assert_eq!(
        info["execution"]["network"]["enforcement"], "none",
        "{info}"
    );
    let e = s.tool_err(
        "exec_command",
        json!({"workspace_id": "w", "command": ["sh", "-c", "echo ran > ran.txt"],
               "yield_ms": 10000}),
    );
    assert_eq!(e["code"], "PROCESS_SPAWN_FAILED", "{e}");
    assert!(
        e["message"].as_str().unwrap().contains("environment `e`"),
        "{e}"
    );
    assert!(!root.join("ran.txt").exists(), "an unsandboxed command ran");
}

/// A worker whose kernel cannot sandbox (its probe says so: the `test-hooks` build's
/// `CODESPACE_TEST_WORKER_NO_SANDBOX`), on a host that can: the report is the environment's,
/// not this host's, and a command that needs the sandbox is refused, never run without it.
#[test]
fn an_environment_that_cannot_sandbox_reports_it_and_refuses_sandboxed_commands() {
    let test =
        "env_matrix::an_environment_that_cannot_sandbox_reports_it_and_refuses_sandboxed_commands";
    if !stdio_common::test_hooks_or_skip(test) || skip_without_masks(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let env = EnvSetup::new(Transport::Command, test, dir.path(), &[]).unwrap();
    let root = tree(dir.path());
    let mut s = env.serve(
        dir.path(),
        &root,
        json!({"sandbox": "required", "secret_masking": "required", "network": "restricted"}),
        &[(
            "CODESPACE_TEST_WORKER_NO_SANDBOX",
            std::path::Path::new("1"),
        )],
    );
    let info = s.tool_ok("workspace_info", json!({"workspace_id": "w"}));
    assert_eq!(
        info["execution"]["isolation"]["kernel"]["seccomp"], false,
        "the environment's probe, not this host's: {info}"
    );
    // The commands' task limit is the worker's too (its hook reports 7, not enforced).
    assert_eq!(
        info["execution"]["isolation"]["pids"],
        json!({"limit": 7, "mechanism": "none"}),
        "the environment's pids, not this host's: {info}"
    );
    assert_reported_and_fails_closed(&mut s, &info, &root);
    s.close_and_wait(Duration::from_secs(60));
}

macro_rules! transport {
    ($module:ident, $t:expr) => {
        mod $module {
            use super::*;

            #[test]
            fn find_grep_find_files_and_apply_patch_with_expected_versions() {
                files(
                    $t,
                    concat!(
                        "env_matrix::",
                        stringify!($module),
                        "::find_grep_find_files_and_apply_patch_with_expected_versions"
                    ),
                );
            }

            #[test]
            fn an_edit_in_the_environment_during_the_apply_is_stale_read() {
                stale_read(
                    $t,
                    concat!(
                        "env_matrix::",
                        stringify!($module),
                        "::an_edit_in_the_environment_during_the_apply_is_stale_read"
                    ),
                );
            }

            #[test]
            fn a_held_exec_runs_in_the_environment_once_granted_and_never_when_denied() {
                approvals(
                    $t,
                    concat!(
                        "env_matrix::",
                        stringify!($module),
                        "::a_held_exec_runs_in_the_environment_once_granted_and_never_when_denied"
                    ),
                );
            }

            #[test]
            fn masks_write_scope_and_network_are_enforced_as_reported() {
                masks_and_sandbox(
                    $t,
                    concat!(
                        "env_matrix::",
                        stringify!($module),
                        "::masks_write_scope_and_network_are_enforced_as_reported"
                    ),
                );
            }

            #[test]
            fn a_failing_before_patch_hook_writes_nothing_and_an_after_patch_change_is_versioned() {
                hooks(
                    $t,
                    concat!(
                        "env_matrix::",
                        stringify!($module),
                        "::a_failing_before_patch_hook_writes_nothing_and_an_after_patch_change_is_versioned"
                    ),
                );
            }

            #[test]
            fn exec_pipes_pty_write_stdin_read_process_and_terminate() {
                processes(
                    $t,
                    concat!(
                        "env_matrix::",
                        stringify!($module),
                        "::exec_pipes_pty_write_stdin_read_process_and_terminate"
                    ),
                );
            }
        }
    };
}

transport!(command, Transport::Command);
transport!(worker, Transport::Worker);
transport!(ssh, Transport::Ssh);
transport!(container, Transport::Container);
