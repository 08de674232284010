//! The command sandbox seen from inside exec_command: Landlock confines writes to the workspace
//! (when policy grants `process_write`) and a private temp dir, seccomp takes inet sockets away
//! unless policy grants `process_network`, AF_UNIX keeps working, exec chains stay confined,
//! ptrace is denied and no_new_privs is set. Each test skips where the kernel cannot.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::process_common;

use process_common::*;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn python3() -> bool {
    let found = std::process::Command::new("python3")
        .arg("-c")
        .arg("pass")
        .status()
        .is_ok_and(|s| s.success());
    codespace_test_skip::require(
        found,
        &codespace_test_skip::this_test(),
        "python3 is not installed",
    )
}

fn sh(script: &str) -> Vec<String> {
    vec!["sh".into(), "-c".into(), script.into()]
}

async fn run_script(e: &Env, script: &str) -> (Option<i64>, String) {
    let words = sh(script);
    let refs: Vec<&str> = words.iter().map(String::as_str).collect();
    run_to_end(&e.gw, &refs).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_land_only_inside_the_workspace() {
    if skip_without_sandbox("writes_land_only_inside_the_workspace") {
        return;
    }
    let e = env();
    let outside = e.dir.path().join("outside.txt");
    let (code, out) = run_script(
        &e,
        &format!(
            "echo in > inside.txt && echo wrote-inside; echo out > '{}'",
            outside.display()
        ),
    )
    .await;
    assert!(out.contains("wrote-inside"), "{out}");
    assert!(
        out.contains("Permission denied") || out.contains("Read-only"),
        "{out}"
    );
    assert_ne!(code, Some(0));
    assert_eq!(
        std::fs::read_to_string(e.root.join("inside.txt")).unwrap(),
        "in\n"
    );
    assert!(!outside.exists(), "a file appeared outside the workspace");
    // The server's own temp dir and the user's home are not writable either.
    let (code, _) = run_script(&e, "echo x > /tmp/codespace-sandbox-probe-$$").await;
    assert_ne!(code, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_private_temp_dir_is_writable_and_removed_after_exit() {
    if skip_without_sandbox("the_private_temp_dir_is_writable_and_removed_after_exit") {
        return;
    }
    let e = env();
    let (code, out) = run_script(
        &e,
        "echo t > \"$TMPDIR/x\" && cat \"$TMPDIR/x\" && echo \"$TMPDIR\"",
    )
    .await;
    assert_eq!(code, Some(0), "{out}");
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("t"));
    let tmp = PathBuf::from(lines.next().unwrap());
    let deadline = Instant::now() + Duration::from_secs(10);
    while tmp.exists() {
        assert!(Instant::now() < deadline, "temp dir not removed after exit");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_cannot_touch_another_commands_temp_dir() {
    if skip_without_sandbox("a_command_cannot_touch_another_commands_temp_dir") {
        return;
    }
    let e = env();
    // A service holds its temp dir while the next command runs.
    let svc = call(
        &e.gw,
        "exec_command",
        json!({"workspace_id": "w", "background": true,
               "command": ["sh", "-c", "echo \"TMP $TMPDIR\"; exec sleep 600"]}),
    )
    .await
    .unwrap();
    let svc_id = svc["process_id"].as_str().unwrap().to_string();
    let (out, _) = read_until(&e.gw, &svc_id, 0, "\n").await;
    let theirs = PathBuf::from(out.trim().strip_prefix("TMP ").unwrap());
    assert!(theirs.is_dir(), "{out}");
    let t = theirs.display();
    let (code, out) = run_script(
        &e,
        &format!(
            "echo \"TMP $TMPDIR\"; \
             if (echo x > '{t}/planted') 2>/dev/null; then echo WROTE; fi; \
             if ls '{t}' >/dev/null 2>&1; then echo LISTED; fi; \
             if ls \"$(dirname \"$TMPDIR\")\" >/dev/null 2>&1; then echo LISTED-PARENT; fi"
        ),
    )
    .await;
    assert_eq!(code, Some(0), "{out}");
    let mine = out
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("TMP "))
        .unwrap();
    assert_ne!(Path::new(mine), theirs, "two commands share a temp dir");
    assert!(!out.contains("WROTE") && !out.contains("LISTED"), "{out}");
    assert!(!theirs.join("planted").exists());
    call(&e.gw, "terminate_process", json!({"process_id": svc_id}))
        .await
        .unwrap();
}

/// A copy of the shipped policies plus an operator profile that may run commands but has no
/// `process_write` permit (a read-only-shaped sandbox).
fn policies_with_exec_no_write(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let policies = dir.join("policies");
    for sub in ["base", "profiles"] {
        std::fs::create_dir_all(policies.join(sub)).unwrap();
        for f in std::fs::read_dir(src.join("policies").join(sub)).unwrap() {
            let f = f.unwrap().path();
            if f.extension().is_some_and(|x| x == "cedar") {
                std::fs::copy(&f, policies.join(sub).join(f.file_name().unwrap())).unwrap();
            }
        }
    }
    std::fs::write(
        policies.join("profiles/exec-no-write.cedar"),
        r#"@id("exec-no-write.permit.exec")
permit (principal in CodeSpace::PermissionProfile::"exec-no-write", action in CodeSpace::Action::"proc_spawn", resource);

@id("exec-no-write.permit.own-process-io")
permit (principal in CodeSpace::PermissionProfile::"exec-no-write", action in CodeSpace::Action::"proc_io", resource)
when { context has process && context.process.same_client };
"#,
    )
    .unwrap();
    std::fs::create_dir_all(dir.join("schema")).unwrap();
    std::fs::copy(
        src.join("schema/codespace.cedarschema"),
        dir.join("schema/codespace.cedarschema"),
    )
    .unwrap();
    policies
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_process_write_the_command_cannot_write_at_all() {
    if skip_without_sandbox("without_process_write_the_command_cannot_write_at_all") {
        return;
    }
    let pdir = tempfile::tempdir().unwrap();
    let policies = policies_with_exec_no_write(pdir.path());
    let e = env_with(Opts {
        profile: "exec-no-write",
        policies: Some((policies, json!({"exec-no-write": {"extends": "read-only"}}))),
        ..Opts::default()
    });
    std::fs::write(e.root.join("existing.txt"), "keep\n").unwrap();
    let (code, out) = run_script(
        &e,
        "cat existing.txt; echo x > new.txt; echo y >> existing.txt; mkdir d; rm existing.txt",
    )
    .await;
    // stdout and stderr are two pipes read into one ring: their relative order is not fixed.
    assert!(out.lines().any(|l| l == "keep"), "reads still work: {out}");
    assert_ne!(code, Some(0), "{out}");
    assert!(!e.root.join("new.txt").exists());
    assert!(!e.root.join("d").exists());
    assert_eq!(
        std::fs::read_to_string(e.root.join("existing.txt")).unwrap(),
        "keep\n"
    );
}

const CONNECT: &str = "import socket,sys\n\
try:\n    socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=5).close(); print('connected')\n\
except OSError as e:\n    print('refused', e.errno)\n";

async fn connect_from_sandbox(network: &'static str) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let e = env_with(Opts {
        network,
        ..Opts::default()
    });
    let (_, out) = run_to_end(&e.gw, &["python3", "-c", CONNECT, &port]).await;
    drop(listener);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restricted_network_refuses_inet_connect_and_enabled_allows_it() {
    if skip_without_sandbox("restricted_network_refuses_inet_connect_and_enabled_allows_it")
        || !python3()
    {
        return;
    }
    let restricted = connect_from_sandbox("restricted").await;
    assert!(restricted.starts_with("refused"), "{restricted}");
    let enabled = connect_from_sandbox("enabled").await;
    assert_eq!(enabled.trim(), "connected");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unix_sockets_still_work_under_restricted_network() {
    if skip_without_sandbox("unix_sockets_still_work_under_restricted_network") || !python3() {
        return;
    }
    let e = env();
    let script = "import socket\n\
a, b = socket.socketpair(socket.AF_UNIX)\na.sendall(b'pair-ok'); print(b.recv(16).decode())\n\
s = socket.socket(socket.AF_UNIX); s.bind('sock'); s.listen(1)\n\
c = socket.socket(socket.AF_UNIX); c.connect('sock'); print('path-ok')\n\
try:\n    socket.socket(socket.AF_INET6)\n    print('inet6-open')\nexcept OSError as e:\n    print('inet6-denied', e.errno)\n";
    let (code, out) = run_to_end(&e.gw, &["python3", "-c", script]).await;
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(out, "pair-ok\npath-ok\ninet6-denied 1\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sandbox_survives_exec_chains() {
    if skip_without_sandbox("the_sandbox_survives_exec_chains") {
        return;
    }
    let e = env();
    let outside = e.dir.path().join("chain.txt");
    let inner = format!("echo chained > '{}'", outside.display());
    let middle = format!("exec bash -c \"{inner}\"");
    let (code, out) = run_to_end(
        &e.gw,
        &[
            "bash",
            "-c",
            &format!("bash -c '{}'", middle.replace('\'', "'\\''")),
        ],
    )
    .await;
    assert_ne!(code, Some(0), "{out}");
    assert!(!outside.exists());
    let (_, status) = run_script(&e, "exec bash -c 'exec grep NoNewPrivs /proc/self/status'").await;
    assert_eq!(
        status.split_whitespace().collect::<Vec<_>>(),
        ["NoNewPrivs:", "1"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ptrace_of_another_process_is_denied() {
    if skip_without_sandbox("ptrace_of_another_process_is_denied") || !python3() {
        return;
    }
    let mut victim = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let e = env();
    let script = "import ctypes, sys\n\
libc = ctypes.CDLL(None, use_errno=True)\n\
r = libc.ptrace(16, int(sys.argv[1]), 0, 0)\nprint('attach', r, ctypes.get_errno())\n";
    let (_, out) = run_to_end(&e.gw, &["python3", "-c", script, &victim.id().to_string()]).await;
    victim.kill().unwrap();
    let _ = victim.wait();
    assert!(
        out.starts_with("attach -1 1\n"),
        "ptrace must fail with EPERM: {out}"
    );
}
