//! PTY-backend tests: interactive shell, resize seen by the child, resize errors.
// Test helpers outside #[test] fns assert with unwrap/panic like the tests themselves.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::Duration;

use codespace_runner_process::{ProcError, ProcessTable, Termination};
use common::*;

#[tokio::test]
async fn interactive_bash_over_a_pty_driven_by_write_stdin() {
    let (_d, cwd) = workdir();
    let table = ProcessTable::new(fast_limits());
    let p = table
        .spawn(tty_spec(&cwd, &["bash", "--norc", "--noprofile", "-i"]))
        .await
        .unwrap();
    let info = table.status(&p.id).await.unwrap();
    assert!(info.tty);
    let mut cursor = 0;
    table
        .write_stdin(&p.id, b"echo pty-$((6*7))\n")
        .await
        .unwrap();
    // The echoed input shows `$((6*7))`; only the command's output contains `pty-42`.
    read_until(
        &table,
        &p.id,
        &mut cursor,
        "pty-42",
        Duration::from_secs(10),
    )
    .await;
    table.write_stdin(&p.id, b"tty\n").await.unwrap();
    read_until(
        &table,
        &p.id,
        &mut cursor,
        "/dev/pts/",
        Duration::from_secs(10),
    )
    .await;
    table.write_stdin(&p.id, b"exit 4\n").await.unwrap();
    let info = table.wait_exit(&p.id).await.unwrap();
    assert_eq!(info.termination, Some(Termination::Exited));
    assert_eq!(info.exit_code, Some(4));
    // The terminal may still deliver the rest in several pieces; each read returns the next one.
    let mut end = table
        .read(&p.id, cursor, Some(Duration::from_secs(5)))
        .await
        .unwrap();
    for _ in 0..64 {
        if end.eof || end.data.is_empty() {
            break;
        }
        end = table
            .read(&p.id, end.cursor, Some(Duration::from_secs(5)))
            .await
            .unwrap();
    }
    assert!(end.eof, "terminal output should reach eof after exit");
}

#[tokio::test]
async fn resize_is_seen_by_stty_size() {
    let (_d, cwd) = workdir();
    let table = ProcessTable::new(fast_limits());
    let p = table
        .spawn(tty_spec(&cwd, &["bash", "--norc", "--noprofile", "-i"]))
        .await
        .unwrap();
    let mut cursor = 0;
    table.write_stdin(&p.id, b"stty size\n").await.unwrap();
    read_until(&table, &p.id, &mut cursor, "24 80", Duration::from_secs(10)).await;
    table.resize(&p.id, 40, 132).await.unwrap();
    table.write_stdin(&p.id, b"stty size\n").await.unwrap();
    read_until(
        &table,
        &p.id,
        &mut cursor,
        "40 132",
        Duration::from_secs(10),
    )
    .await;
    table.terminate(&p.id).await.unwrap();
    let info = table.wait_exit(&p.id).await.unwrap();
    assert_eq!(info.termination, Some(Termination::Terminated));
}

#[tokio::test]
async fn resize_on_pipes_is_not_tty_and_on_exited_is_not_running() {
    let (_d, cwd) = workdir();
    let table = ProcessTable::new(fast_limits());
    let pipe = table.spawn(spec(&cwd, &["sleep", "30"])).await.unwrap();
    let err = table.resize(&pipe.id, 40, 132).await.unwrap_err();
    assert_eq!(err, ProcError::NotTty);
    assert_eq!(err.code(), "PROCESS_NOT_TTY");

    let done = table.spawn(tty_spec(&cwd, &["true"])).await.unwrap();
    table.wait_exit(&done.id).await.unwrap();
    let err = table.resize(&done.id, 40, 132).await.unwrap_err();
    assert_eq!(err, ProcError::NotRunning);
    assert_eq!(err.code(), "PROCESS_NOT_RUNNING");
    assert_eq!(
        table.resize("proc-missing", 1, 1).await.unwrap_err(),
        ProcError::NotFound
    );
    table.shutdown().await;
}

#[tokio::test]
async fn missing_program_on_a_pty_is_spawn_failed() {
    let (_d, cwd) = workdir();
    let table = ProcessTable::new(fast_limits());
    let err = table
        .spawn(tty_spec(&cwd, &["no-such-program-xyz"]))
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        codespace_runner_process::SpawnError::SpawnFailed(_)
    ));
    assert_eq!(table.live_count(), 0);
}

#[tokio::test]
async fn launcher_wraps_argv_on_a_pty() {
    let env_bin = std::path::PathBuf::from("/usr/bin/env");
    if !env_bin.exists() {
        codespace_test_skip::skip("launcher_wraps_argv_on_a_pty", "/usr/bin/env missing");
        return;
    }
    let (_d, cwd) = workdir();
    let table = ProcessTable::new(fast_limits());
    let mut s = tty_spec(&cwd, &["sh", "-c", "echo launched=$LAUNCHED; tty"]);
    s.launcher = Some(codespace_runner_process::Launcher {
        program: env_bin,
        args: vec![],
        env: vec![("LAUNCHED".into(), "pty".into())],
        inherit_fds: Vec::new(),
        self_start: false,
        warm_spare: false,
        spare_args: Vec::new(),
        recycle_network: false,
    });
    let p = table.spawn(s).await.unwrap();
    let out = String::from_utf8_lossy(&read_all(&table, &p.id).await).into_owned();
    assert!(out.contains("launched=pty"), "{out:?}");
    assert!(out.contains("/dev/pts/"), "{out:?}");
    assert_eq!(table.wait_exit(&p.id).await.unwrap().exit_code, Some(0));
}
