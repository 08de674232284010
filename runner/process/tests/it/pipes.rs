//! Pipe-backend tests: output, exit status, spawn errors, stdin, long-poll, UTF-8, limits, launcher.
// Test helpers outside #[test] fns assert with unwrap/panic like the tests themselves.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use codespace_runner_process::{
    InheritedFd, Launcher, ProcError, ProcState, ProcessTable, SpawnError, TableLimits, Termination,
};
use common::*;

#[tokio::test]
async fn echo_over_pipes_gives_output_exit_zero_and_eof() {
    let (_d, cwd) = workdir();
    let table = ProcessTable::new(fast_limits());
    let spawned = table
        .spawn(spec(&cwd, &["echo", "hello", "world"]))
        .await
        .unwrap();
    assert!(spawned.id.starts_with("proc-"));
    let info = table.wait_exit(&spawned.id).await.unwrap();
    assert_eq!(info.state, ProcState::Exited);
    assert_eq!(info.termination, Some(Termination::Exited));
    assert_eq!(info.exit_code, Some(0));
    assert_eq!(info.pid, spawned.pid);
    assert_eq!(read_all(&table, &spawned.id).await, b"hello world\n");
    let last = table.read(&spawned.id, 12, None).await.unwrap();
    assert!(last.eof);
    assert_eq!(last.cursor, 12);
    assert!(!last.output_lost);
    assert_eq!(table.live_count(), 0);
}

#[tokio::test]
async fn nonzero_exit_and_foreign_signal_are_reported() {
    let (_d, cwd) = workdir();
    let table = ProcessTable::new(fast_limits());
    let a = table
        .spawn(spec(&cwd, &["sh", "-c", "exit 7"]))
        .await
        .unwrap();
    let info = table.wait_exit(&a.id).await.unwrap();
    assert_eq!(
        (info.termination, info.exit_code),
        (Some(Termination::Exited), Some(7))
    );
    let b = table
        .spawn(spec(&cwd, &["sh", "-c", "kill -KILL $$"]))
        .await
        .unwrap();
    let info = table.wait_exit(&b.id).await.unwrap();
    assert_eq!(info.termination, Some(Termination::Signaled));
    assert_eq!(info.signal, Some(9));
    assert_eq!(info.exit_code, None);
}

#[tokio::test]
async fn missing_program_is_spawn_failed() {
    let (_d, cwd) = workdir();
    let table = ProcessTable::new(fast_limits());
    let err = table
        .spawn(spec(&cwd, &["definitely-not-a-program-xyz"]))
        .await
        .unwrap_err();
    assert!(matches!(err, SpawnError::SpawnFailed(_)), "{err:?}");
    assert_eq!(err.code(), "PROCESS_SPAWN_FAILED");
    let err = table
        .spawn(spec(&cwd, &["/nonexistent/dir/tool"]))
        .await
        .unwrap_err();
    assert!(matches!(err, SpawnError::SpawnFailed(_)));
    assert!(
        !err.to_string().contains("/nonexistent"),
        "absolute path leaked: {err}"
    );
    assert_eq!(
        table.live_count(),
        0,
        "a failed spawn must release its slot"
    );
}

#[tokio::test]
async fn missing_cwd_is_spawn_failed() {
    let (_d, cwd) = workdir();
    let table = ProcessTable::new(fast_limits());
    let err = table
        .spawn(spec(&cwd.join("nope"), &["true"]))
        .await
        .unwrap_err();
    assert!(matches!(err, SpawnError::SpawnFailed(_)));
}

#[tokio::test]
async fn empty_argv_is_invalid_command() {
    let (_d, cwd) = workdir();
    let table = ProcessTable::new(fast_limits());
    assert_eq!(
        table.spawn(spec(&cwd, &[])).await.unwrap_err(),
        SpawnError::InvalidCommand
    );
    assert_eq!(
        table.spawn(spec(&cwd, &[""])).await.unwrap_err(),
        SpawnError::InvalidCommand
    );
    assert_eq!(SpawnError::InvalidCommand.code(), "INVALID_COMMAND");
}

#[tokio::test]
async fn env_is_exactly_the_spec_env_and_cwd_is_applied() {
    let (_d, cwd) = workdir();
    let table = ProcessTable::new(fast_limits());
    let p = table
        .spawn(spec(&cwd, &["sh", "-c", "env | sort; pwd"]))
        .await
        .unwrap();
    let out = String::from_utf8(read_all(&table, &p.id).await).unwrap();
    let mut lines: Vec<&str> = out.lines().collect();
    let pwd = lines.pop().unwrap();
    assert_eq!(
        std::fs::canonicalize(pwd).unwrap(),
        std::fs::canonicalize(&cwd).unwrap()
    );
    let vars: Vec<&str> = lines.iter().map(|l| l.split('=').next().unwrap()).collect();
    // sh itself adds PWD (and possibly OLDPWD/SHLVL/_); nothing from the test process leaks in.
    for v in &vars {
        assert!(
            ["HOME", "LANG", "PATH", "PWD", "OLDPWD", "SHLVL", "_"].contains(v),
            "unexpected variable {v} in {out}"
        );
    }
    assert!(vars.contains(&"HOME") && vars.contains(&"LANG") && vars.contains(&"PATH"));
}

#[tokio::test]
async fn interactive_bash_over_pipes_driven_by_write_stdin() {
    let (_d, cwd) = workdir();
    let table = ProcessTable::new(fast_limits());
    let p = table
        .spawn(spec(&cwd, &["bash", "--norc", "--noprofile"]))
        .await
        .unwrap();
    let mut cursor = 0;
    table
        .write_stdin(&p.id, b"echo pipe-$((6*7))\n")
        .await
        .unwrap();
    read_until(
        &table,
        &p.id,
        &mut cursor,
        "pipe-42\n",
        Duration::from_secs(10),
    )
    .await;
    table
        .write_stdin(&p.id, b"echo err-$((2+3)) >&2\n")
        .await
        .unwrap();
    read_until(
        &table,
        &p.id,
        &mut cursor,
        "err-5\n",
        Duration::from_secs(10),
    )
    .await;
    table.write_stdin(&p.id, b"exit 3\n").await.unwrap();
    let info = table.wait_exit(&p.id).await.unwrap();
    assert_eq!(info.exit_code, Some(3));
    assert_eq!(
        table.write_stdin(&p.id, b"echo late\n").await,
        Err(ProcError::StdinClosed)
    );
}

#[tokio::test]
async fn unknown_ids_are_not_found() {
    let table = ProcessTable::new(fast_limits());
    assert_eq!(
        table.status("proc-nope").await.unwrap_err(),
        ProcError::NotFound
    );
    assert_eq!(
        table.read("proc-nope", 0, None).await.unwrap_err(),
        ProcError::NotFound
    );
    assert_eq!(
        table.write_stdin("proc-nope", b"x").await.unwrap_err(),
        ProcError::NotFound
    );
    assert_eq!(
        table.terminate("proc-nope").await.unwrap_err(),
        ProcError::NotFound
    );
    assert_eq!(ProcError::NotFound.code(), "PROCESS_NOT_FOUND");
}

#[tokio::test]
async fn stderr_flood_does_not_deadlock() {
    let (_d, cwd) = workdir();
    let table = ProcessTable::new(fast_limits());
    let script = "head -c 10000000 /dev/zero >&2; head -c 10000000 /dev/zero; echo done";
    let p = table
        .spawn(spec(&cwd, &["sh", "-c", script]))
        .await
        .unwrap();
    // Nobody reads: the pumps alone must drain both pipes.
    let info = tokio::time::timeout(Duration::from_secs(60), table.wait_exit(&p.id))
        .await
        .expect("child blocked on a full pipe")
        .unwrap();
    assert_eq!(info.exit_code, Some(0));
    let last = read_all(&table, &p.id).await;
    assert!(last.ends_with(b"done\n"));
    let status = table.status(&p.id).await.unwrap();
    assert!(status.eof);
    assert_eq!(status.output_total, 20_000_005);
}

#[tokio::test]
async fn max_live_limit_is_enforced_and_released() {
    let (_d, cwd) = workdir();
    let table = ProcessTable::new(TableLimits {
        max_live: 2,
        ..fast_limits()
    });
    let a = table.spawn(spec(&cwd, &["sleep", "30"])).await.unwrap();
    let _b = table.spawn(spec(&cwd, &["sleep", "30"])).await.unwrap();
    assert_eq!(table.live_count(), 2);
    assert_eq!(
        table.spawn(spec(&cwd, &["sleep", "30"])).await.unwrap_err(),
        SpawnError::LimitReached
    );
    table.terminate(&a.id).await.unwrap();
    table.wait_exit(&a.id).await.unwrap();
    assert_eq!(table.live_count(), 1);
    let c = table.spawn(spec(&cwd, &["sleep", "30"])).await.unwrap();
    assert!(table.status(&c.id).await.is_ok());
    table.shutdown().await;
    assert_eq!(table.live_count(), 0);
}

#[tokio::test]
async fn long_poll_returns_when_output_arrives() {
    let (_d, cwd) = workdir();
    let table = ProcessTable::new(fast_limits());
    let p = table
        .spawn(spec(&cwd, &["sh", "-c", "read x; echo got-$x; read y"]))
        .await
        .unwrap();
    let start = Instant::now();
    let reader = table.read(&p.id, 0, Some(Duration::from_secs(20)));
    let writer = async {
        // The read is already parked when this runs (join polls the reader first).
        table.write_stdin(&p.id, b"ping\n").await.unwrap();
    };
    let (chunk, ()) = tokio::join!(reader, writer);
    let chunk = chunk.unwrap();
    let elapsed = start.elapsed();
    assert_eq!(chunk.chunk, "got-ping\n");
    assert!(!chunk.eof);
    assert!(
        elapsed < Duration::from_secs(5),
        "long poll took {elapsed:?}"
    );
    table.shutdown().await;
}

#[tokio::test]
async fn long_poll_returns_empty_at_the_deadline() {
    let (_d, cwd) = workdir();
    let table = ProcessTable::new(fast_limits());
    let p = table.spawn(spec(&cwd, &["sleep", "30"])).await.unwrap();
    let start = Instant::now();
    let chunk = table
        .read(&p.id, 0, Some(Duration::from_millis(400)))
        .await
        .unwrap();
    let elapsed = start.elapsed();
    assert!(chunk.data.is_empty() && !chunk.eof && chunk.cursor == 0);
    assert!(
        elapsed >= Duration::from_millis(400),
        "returned early: {elapsed:?}"
    );
    assert!(
        elapsed < Duration::from_secs(3),
        "returned late: {elapsed:?}"
    );
    table.shutdown().await;
}

#[tokio::test]
async fn long_poll_returns_at_eof_without_waiting_the_full_deadline() {
    let (_d, cwd) = workdir();
    let table = ProcessTable::new(fast_limits());
    let p = table.spawn(spec(&cwd, &["true"])).await.unwrap();
    let start = Instant::now();
    let chunk = table
        .read(&p.id, 0, Some(Duration::from_secs(20)))
        .await
        .unwrap();
    assert!(chunk.eof);
    assert!(start.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn utf8_is_never_split_across_chunks() {
    let (_d, cwd) = workdir();
    let table = ProcessTable::new(fast_limits());
    let text = "h\u{e9}llo \u{20ac}uro \u{1F600} \u{4e2d}\u{6587} ok";
    // One byte per printf, with pauses, so reads land inside multi-byte characters.
    let script: String = text
        .bytes()
        .map(|b| format!("printf '\\{b:03o}'; sleep 0.01; "))
        .collect();
    let p = table
        .spawn(spec(&cwd, &["sh", "-c", &script]))
        .await
        .unwrap();
    let mut cursor = 0;
    let mut joined = String::new();
    let mut reads = 0;
    loop {
        let chunk = table
            .read(&p.id, cursor, Some(Duration::from_secs(10)))
            .await
            .unwrap();
        assert!(
            !chunk.chunk.contains('\u{FFFD}'),
            "split character in {:?}",
            chunk.data
        );
        assert_eq!(chunk.chunk.as_bytes(), chunk.data.as_slice());
        joined.push_str(&chunk.chunk);
        cursor = chunk.cursor;
        reads += 1;
        if chunk.eof {
            break;
        }
    }
    assert_eq!(joined, text);
    assert!(reads > 3, "expected many small reads, got {reads}");
}

#[tokio::test]
async fn launcher_wraps_argv() {
    let env_bin = PathBuf::from("/usr/bin/env");
    if !env_bin.exists() {
        codespace_test_skip::skip("launcher_wraps_argv", "/usr/bin/env missing");
        return;
    }
    let (_d, cwd) = workdir();
    let table = ProcessTable::new(fast_limits());
    let mut s = spec(&cwd, &["sh", "-c", "echo launched=$LAUNCHED argv=$0"]);
    s.launcher = Some(Launcher {
        program: env_bin.clone(),
        args: vec![],
        env: vec![("LAUNCHED".into(), "yes".into())],
        inherit_fds: Vec::new(),
        self_start: false,
        warm_spare: false,
        spare_args: Vec::new(),
        recycle_network: false,
    });
    let p = table.spawn(s.clone()).await.unwrap();
    let out = String::from_utf8(read_all(&table, &p.id).await).unwrap();
    assert_eq!(out, "launched=yes argv=sh\n");
    let info = table.status(&p.id).await.unwrap();
    assert_eq!(
        info.argv,
        vec!["sh", "-c", "echo launched=$LAUNCHED argv=$0"]
    );
    // argv[0] is still checked up front when a launcher is used.
    s.argv = vec!["no-such-program-xyz".into()];
    assert!(matches!(
        table.spawn(s).await.unwrap_err(),
        SpawnError::SpawnFailed(_)
    ));
}

#[tokio::test]
async fn a_launcher_descriptor_reaches_only_its_own_child() {
    use std::io::Read;
    use std::os::fd::{AsRawFd, OwnedFd};
    let (_d, cwd) = workdir();
    let table = ProcessTable::new(fast_limits());
    let (mut reader, writer) = std::io::pipe().unwrap();
    let writer = OwnedFd::from(writer);
    let launcher = |inherit: Option<InheritedFd>, fd: i32| Launcher {
        program: PathBuf::from("/bin/sh"),
        args: vec![
            "-c".into(),
            "printf kept > /proc/self/fd/$FD && echo wrote".into(),
        ],
        env: vec![("FD".into(), fd.to_string())],
        inherit_fds: inherit.into_iter().collect(),
        self_start: false,
        warm_spare: false,
        spare_args: Vec::new(),
        recycle_network: false,
    };
    // Without the descriptor handed over, the child cannot write to it (close-on-exec).
    let mut s = spec(&cwd, &["true"]);
    s.launcher = Some(launcher(None, writer.as_raw_fd()));
    let p = table.spawn(s).await.unwrap();
    let out = String::from_utf8(read_all(&table, &p.id).await).unwrap();
    assert!(!out.contains("wrote"), "{out}");
    let mut s = spec(&cwd, &["true"]);
    let handed = InheritedFd(std::sync::Arc::new(writer.try_clone().unwrap()));
    let fd = handed.raw();
    s.launcher = Some(launcher(Some(handed), fd));
    let p = table.spawn(s).await.unwrap();
    let out = String::from_utf8(read_all(&table, &p.id).await).unwrap();
    assert!(out.contains("wrote"), "{out}");
    drop(writer);
    let mut got = String::new();
    reader.read_to_string(&mut got).unwrap();
    assert_eq!(got, "kept");
}

#[tokio::test]
async fn exited_handles_are_evicted_by_count_and_ttl() {
    let (_d, cwd) = workdir();
    let table = ProcessTable::new(TableLimits {
        max_exited_kept: 1,
        ..fast_limits()
    });
    let a = table.spawn(spec(&cwd, &["true"])).await.unwrap();
    table.wait_exit(&a.id).await.unwrap();
    let b = table.spawn(spec(&cwd, &["true"])).await.unwrap();
    table.wait_exit(&b.id).await.unwrap();
    assert_eq!(table.status(&a.id).await.unwrap_err(), ProcError::NotFound);
    assert!(table.status(&b.id).await.is_ok());

    let table = ProcessTable::new(TableLimits {
        exited_ttl: Duration::from_millis(200),
        ..fast_limits()
    });
    let c = table.spawn(spec(&cwd, &["true"])).await.unwrap();
    table.wait_exit(&c.id).await.unwrap();
    assert!(
        table.status(&c.id).await.is_ok(),
        "still readable right after exit"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match table.status(&c.id).await {
            Err(ProcError::NotFound) => break,
            Ok(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            other => panic!("handle not evicted after ttl: {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_pipe_child_leads_its_own_session_without_a_terminal() {
    let (_d, cwd) = workdir();
    let table = ProcessTable::new(fast_limits());
    let p = table
        .spawn(spec(&cwd, &["sh", "-c", "read line"]))
        .await
        .unwrap();
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", p.pid)).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 1..];
    // Fields after the command name: state ppid pgrp session tty_nr …
    let fields: Vec<&str> = after.split_whitespace().collect();
    assert_eq!(fields[2], p.pid.to_string(), "process group: {stat}");
    assert_eq!(fields[3], p.pid.to_string(), "session: {stat}");
    assert_eq!(fields[4], "0", "a controlling terminal: {stat}");
    table.write_stdin(&p.id, b"\n").await.unwrap();
    table.wait_exit(&p.id).await.unwrap();
}

#[tokio::test]
async fn a_self_starting_launcher_is_spawned_with_its_cgroup_and_parent_named_and_its_own_session()
{
    use std::io::Read;
    use std::os::fd::OwnedFd;
    let (_d, cwd) = workdir();
    let table = ProcessTable::new(fast_limits());
    let (mut reader, writer) = std::io::pipe().unwrap();
    let writer = OwnedFd::from(writer);
    let handed = InheritedFd(std::sync::Arc::new(writer.try_clone().unwrap()));
    let fd = handed.raw();
    // The launcher prints what the table inserted before `--`, its session and cwd, writes to
    // the handed descriptor, reads stdin, and exits 7 (reaped by pid, not by tokio).
    let script = "printf kept > /proc/self/fd/$FD; \
                  echo \"args=$*\"; \
                  echo \"sid=$(cut -d' ' -f6 /proc/$$/stat) me=$$\"; \
                  echo \"cwd=$(pwd)\"; read line; echo \"in=$line\"; exit 7";
    let mut s = spec(&cwd, &["true", "x"]);
    s.launcher = Some(Launcher {
        program: PathBuf::from("/bin/sh"),
        args: vec!["-c".into(), script.into(), "launcher".into()],
        env: vec![("FD".into(), fd.to_string())],
        inherit_fds: vec![handed],
        self_start: true,
        warm_spare: false,
        spare_args: Vec::new(),
        recycle_network: false,
    });
    let p = table.spawn(s).await.unwrap();
    table.write_stdin(&p.id, b"hello\n").await.unwrap();
    let out = String::from_utf8(read_all(&table, &p.id).await).unwrap();
    let server = std::process::id();
    let args = out.lines().find(|l| l.starts_with("args=")).unwrap();
    assert!(
        args.ends_with(&format!("--parent-pid {server} -- true x")),
        "{out}"
    );
    let cgroups = table.pids_isolation().mechanism != codespace_runner_process::PidsMechanism::None;
    assert_eq!(args.contains("--cgroup-fd "), cgroups, "{out}");
    assert!(
        out.contains(&format!("sid={} me={}", p.pid, p.pid)),
        "{out}"
    );
    assert!(out.contains(&format!("cwd={}", cwd.display())), "{out}");
    assert!(out.contains("in=hello"), "{out}");
    let info = table.wait_exit(&p.id).await.unwrap();
    assert_eq!(info.exit_code, Some(7), "{info:?}");
    drop(writer);
    let mut got = String::new();
    reader.read_to_string(&mut got).unwrap();
    assert_eq!(got, "kept");
}
