//! The exec handshake: the target's exec closes the pipe with nothing written (the target never
//! holds the descriptor), a refusal arrives as the helper's message, and the proxy relay keeps no
//! copy of the write end.
// Helper functions of this test crate are test code too (clippy.toml only covers #[test] fns).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::common;

use std::os::fd::{AsRawFd, OwnedFd};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use codespace_runner_sandbox::{
    ARGV_SEPARATOR, Handshake, HelperOutcome, NetworkMode, SandboxCommand, SandboxPlan,
};
use common::{Fixture, SYSTEM_PATH, control_pair, helper_exe, proxy_mode_or_skip, sandbox_or_skip};
use tokio::io::AsyncWriteExt;

/// Generous bound on a wait that must end on an event (a hang guard, not a timing assertion).
const HANG_GUARD: Duration = Duration::from_secs(60);

/// Starts `argv` under the helper the way the process runner does: the launch's descriptors
/// are kept across `exec` in the child only, and the server's copies are closed once spawned.
fn spawn(
    plan: SandboxPlan,
    proxy_control: Option<Arc<OwnedFd>>,
    argv: &[&str],
) -> (tokio::process::Child, Handshake, i32) {
    let launch = SandboxCommand {
        helper: helper_exe().to_path_buf(),
        plan,
        proxy_control,
    }
    .launch()
    .unwrap();
    let handshake_fd = launch.inherit_fds[0].as_raw_fd();
    let keep: Vec<i32> = launch.inherit_fds.iter().map(|f| f.as_raw_fd()).collect();
    let mut cmd = tokio::process::Command::new(&launch.program);
    cmd.args(&launch.args)
        .arg(ARGV_SEPARATOR)
        .args(argv)
        .envs(launch.env.iter().cloned())
        .env("PATH", SYSTEM_PATH)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: fcntl(F_SETFD) is async-signal-safe; it only clears the flag in the child.
    unsafe {
        cmd.pre_exec(move || {
            for fd in &keep {
                if libc::fcntl(*fd, libc::F_SETFD, 0) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let child = cmd.spawn().unwrap();
    drop(launch.inherit_fds);
    (child, launch.handshake, handshake_fd)
}

/// Waits for the handshake while the target is still running: only the pipe's end of file can
/// end this wait (the exit future never resolves).
async fn outcome_while_running(handshake: Handshake) -> HelperOutcome {
    tokio::time::timeout(HANG_GUARD, handshake.outcome(std::future::pending()))
        .await
        .expect("the handshake ended while the target still ran")
}

#[tokio::test]
async fn the_targets_exec_closes_the_handshake_and_the_target_never_holds_it() {
    let name = "the_targets_exec_closes_the_handshake_and_the_target_never_holds_it";
    if !sandbox_or_skip(name) {
        return;
    }
    let fx = Fixture::new();
    // The target lists its own descriptors, then waits on stdin (it runs until we close it).
    let (mut child, handshake, fd) = spawn(
        fx.plan(false, NetworkMode::Restricted),
        None,
        &["sh", "-c", "ls /proc/$$/fd; exec cat"],
    );
    assert_eq!(
        outcome_while_running(handshake).await,
        HelperOutcome::Executed
    );
    child.stdin.take().unwrap().shutdown().await.unwrap();
    let out = child.wait_with_output().await.unwrap();
    assert!(out.status.success(), "{out:?}");
    let fds: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    assert!(fds.contains(&"0".to_owned()), "{fds:?}");
    assert!(
        !fds.contains(&fd.to_string()),
        "the target holds the handshake descriptor {fd}: {fds:?}"
    );
}

#[tokio::test]
async fn a_refusal_reaches_the_server_as_the_helpers_message() {
    let name = "a_refusal_reaches_the_server_as_the_helpers_message";
    if !sandbox_or_skip(name) {
        return;
    }
    let fx = Fixture::new();
    let mut plan = fx.plan(true, NetworkMode::Restricted);
    plan.force_landlock_unavailable = true;
    let marker = fx.ws.join("ran");
    let (mut child, handshake, _) = spawn(
        plan,
        None,
        &["sh", "-c", &format!("touch {}", marker.display())],
    );
    let exited = async {
        let _ = child.wait().await;
    };
    let outcome = tokio::time::timeout(HANG_GUARD, handshake.outcome(exited))
        .await
        .unwrap();
    match outcome {
        HelperOutcome::Refused(why) => {
            assert!(why.contains("Landlock"), "{why}");
            assert!(!why.contains("codespace-sandbox:"), "{why}");
        }
        HelperOutcome::Executed => panic!("a refusal read as an exec"),
    }
    let out = child.wait_with_output().await.unwrap();
    assert_eq!(out.status.code(), Some(126));
    // The human-readable line stays on stderr; the target never ran.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("codespace-sandbox: "), "{stderr}");
    assert!(!marker.exists(), "the target ran");
}

#[tokio::test]
async fn a_bad_handshake_descriptor_is_refused_before_anything_runs() {
    let name = "a_bad_handshake_descriptor_is_refused_before_anything_runs";
    if !sandbox_or_skip(name) {
        return;
    }
    let fx = Fixture::new();
    let plan = fx.plan(false, NetworkMode::Restricted);
    let (program, args, env) =
        codespace_runner_sandbox::launcher_parts(&plan, helper_exe()).unwrap();
    // A regular file is open in the child but is not a pipe.
    let file = std::fs::File::open("/dev/null").unwrap();
    for number in ["x".to_owned(), "2".to_owned(), file.as_raw_fd().to_string()] {
        let out = std::process::Command::new(&program)
            .args(&args)
            .args([codespace_runner_sandbox::HANDSHAKE_ARG, number.as_str()])
            .arg(ARGV_SEPARATOR)
            .args(["echo", "ran"])
            .envs(env.iter().cloned())
            .env("PATH", SYSTEM_PATH)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(126), "{number}: {out:?}");
        assert!(out.stdout.is_empty(), "{number}: the target ran");
    }
}

#[tokio::test]
async fn the_proxy_relay_keeps_no_copy_of_the_handshake() {
    let name = "the_proxy_relay_keeps_no_copy_of_the_handshake";
    if !proxy_mode_or_skip(name) {
        return;
    }
    let (relay_end, server_end) = control_pair();
    let fx = Fixture::new();
    let (mut child, handshake, _) = spawn(
        fx.plan(false, NetworkMode::Proxy),
        Some(Arc::new(relay_end)),
        &["cat"],
    );
    // The relay (a detached process that lives until the server closes its control socket)
    // forked before the exec: had it kept the write end, this wait would never end.
    assert_eq!(
        outcome_while_running(handshake).await,
        HelperOutcome::Executed
    );
    child.stdin.take().unwrap().shutdown().await.unwrap();
    let out = child.wait_with_output().await.unwrap();
    assert!(out.status.success(), "{out:?}");
    drop(server_end);
}
