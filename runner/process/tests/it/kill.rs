//! Kill tests: timeout, terminate and shutdown reach grandchildren (process group and PTY session).
// Test helpers outside #[test] fns assert with unwrap/panic like the tests themselves.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::{Duration, Instant};

use codespace_runner_process::{ProcState, ProcessTable, TableLimits, Termination};
use common::*;

/// Reads the first line the child prints (a pid) with a long-poll.
async fn first_pid(table: &ProcessTable, id: &str) -> u32 {
    let mut cursor = 0;
    let text = read_until(table, id, &mut cursor, "\n", Duration::from_secs(10)).await;
    text.trim().lines().last().unwrap().trim().parse().unwrap()
}

/// Reads until `marker` followed by digits and a line end appears (the echoed input line shows
/// the unexpanded command, so only the command's output matches); returns the number.
async fn pid_after_marker(table: &ProcessTable, id: &str, cursor: &mut u64, marker: &str) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut text = String::new();
    while Instant::now() < deadline {
        let chunk = table
            .read(id, *cursor, Some(Duration::from_millis(500)))
            .await
            .unwrap();
        *cursor = chunk.cursor;
        text.push_str(&chunk.chunk);
        for part in text.split(marker).skip(1) {
            let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
            let rest = part.get(digits.len()..).unwrap_or("");
            if !digits.is_empty() && (rest.starts_with('\r') || rest.starts_with('\n')) {
                return digits.parse().unwrap();
            }
        }
    }
    panic!("no {marker}<pid> line in {text:?}");
}

#[tokio::test]
async fn timeout_kills_a_term_ignoring_process_and_its_grandchild() {
    let (_d, cwd) = workdir();
    let table = ProcessTable::new(TableLimits {
        kill_grace: Duration::from_millis(300),
        ..TableLimits::default()
    });
    let mut s = spec(
        &cwd,
        // Both sleeps are started before the pid line, so the group is complete when we look.
        &[
            "sh",
            "-c",
            "trap '' TERM; sleep 1000 & sleep 1000 & echo $!; wait",
        ],
    );
    s.timeout = Some(Duration::from_secs(1));
    let start = Instant::now();
    let p = table.spawn(s).await.unwrap();
    let bg = first_pid(&table, &p.id).await;
    let members = group_members(p.pid);
    assert!(
        members.contains(&p.pid) && members.contains(&bg),
        "group {members:?}"
    );
    assert!(
        members.len() >= 3,
        "sh + two sleeps expected, got {members:?}"
    );
    let info = tokio::time::timeout(Duration::from_secs(20), table.wait_exit(&p.id))
        .await
        .expect("timeout did not kill the process")
        .unwrap();
    assert!(start.elapsed() >= Duration::from_secs(1));
    assert_eq!(info.termination, Some(Termination::Timeout));
    assert_eq!(info.exit_code, None);
    let alive = wait_gone(&members, Duration::from_secs(5)).await;
    assert!(alive.is_empty(), "still alive: {alive:?}");
    assert!(!pid_alive(p.pid) && !pid_alive(bg));
}

#[tokio::test]
async fn a_spawn_timeout_cannot_extend_the_default() {
    let (_d, cwd) = workdir();
    let table = ProcessTable::new(TableLimits {
        default_timeout: Duration::from_millis(500),
        kill_grace: Duration::from_millis(200),
        ..TableLimits::default()
    });
    let mut s = spec(&cwd, &["sleep", "1000"]);
    s.timeout = Some(Duration::from_secs(3600));
    let p = table.spawn(s).await.unwrap();
    let info = tokio::time::timeout(Duration::from_secs(20), table.wait_exit(&p.id))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(info.termination, Some(Termination::Timeout));
}

#[tokio::test]
async fn terminate_kills_the_group_and_reports_terminated() {
    let (_d, cwd) = workdir();
    let table = ProcessTable::new(fast_limits());
    let p = table
        .spawn(spec(
            &cwd,
            &["sh", "-c", "sleep 1000 & sleep 1000 & echo $!; wait"],
        ))
        .await
        .unwrap();
    let bg = first_pid(&table, &p.id).await;
    let members = group_members(p.pid);
    let start = Instant::now();
    table.terminate(&p.id).await.unwrap();
    assert!(
        start.elapsed() < Duration::from_millis(250),
        "terminate must not block the grace"
    );
    let info = table.wait_exit(&p.id).await.unwrap();
    assert_eq!(info.state, ProcState::Exited);
    assert_eq!(info.termination, Some(Termination::Terminated));
    let alive = wait_gone(&members, Duration::from_secs(5)).await;
    assert!(alive.is_empty(), "still alive: {alive:?}");
    assert!(!pid_alive(bg));
    // Terminating an exited process is a harmless no-op.
    table.terminate(&p.id).await.unwrap();
}

#[tokio::test]
async fn terminate_escalates_to_sigkill_after_the_grace() {
    let (_d, cwd) = workdir();
    let table = ProcessTable::new(fast_limits());
    let p = table
        .spawn(spec(
            &cwd,
            &["sh", "-c", "trap '' TERM; echo ready; sleep 1000"],
        ))
        .await
        .unwrap();
    let mut cursor = 0;
    read_until(&table, &p.id, &mut cursor, "ready", Duration::from_secs(10)).await;
    let members = group_members(p.pid);
    table.terminate(&p.id).await.unwrap();
    let info = tokio::time::timeout(Duration::from_secs(10), table.wait_exit(&p.id))
        .await
        .expect("SIGKILL escalation did not happen")
        .unwrap();
    assert_eq!(info.termination, Some(Termination::Terminated));
    assert!(wait_gone(&members, Duration::from_secs(5)).await.is_empty());
}

#[tokio::test]
async fn terminate_on_a_pty_kills_background_jobs_in_the_session() {
    let (_d, cwd) = workdir();
    let table = ProcessTable::new(fast_limits());
    let p = table
        .spawn(tty_spec(&cwd, &["bash", "--norc", "--noprofile", "-i"]))
        .await
        .unwrap();
    let mut cursor = 0;
    // A job-control background job gets its own process group inside the session.
    table
        .write_stdin(&p.id, b"trap '' HUP TERM; sleep 1000 & echo bg=$((0+$!))\n")
        .await
        .unwrap();
    let bg = pid_after_marker(&table, &p.id, &mut cursor, "bg=").await;
    let session = session_members(p.pid);
    assert!(
        session.contains(&bg),
        "bg job {bg} not in session {session:?}"
    );
    assert!(
        !group_members(p.pid).contains(&bg),
        "bg job should have its own group"
    );
    table.terminate(&p.id).await.unwrap();
    let info = table.wait_exit(&p.id).await.unwrap();
    assert_eq!(info.termination, Some(Termination::Terminated));
    let alive = wait_gone(&session, Duration::from_secs(5)).await;
    assert!(alive.is_empty(), "session members still alive: {alive:?}");
}

#[tokio::test]
async fn shutdown_kills_everything() {
    let (_d, cwd) = workdir();
    let table = ProcessTable::new(fast_limits());
    let a = table.spawn(spec(&cwd, &["sleep", "1000"])).await.unwrap();
    let b = table
        .spawn(spec(
            &cwd,
            // Both sleeps are started before the pid line, so the group is complete when we look.
            &[
                "sh",
                "-c",
                "trap '' TERM; sleep 1000 & sleep 1000 & echo $!; wait",
            ],
        ))
        .await
        .unwrap();
    let c = table
        .spawn(tty_spec(&cwd, &["bash", "--norc", "--noprofile", "-i"]))
        .await
        .unwrap();
    let bg = first_pid(&table, &b.id).await;
    let mut pids = vec![a.pid, b.pid, c.pid, bg];
    pids.extend(group_members(b.pid));
    assert_eq!(table.live_count(), 3);
    tokio::time::timeout(Duration::from_secs(20), table.shutdown())
        .await
        .expect("shutdown hung");
    assert_eq!(table.live_count(), 0);
    for id in [&a.id, &b.id, &c.id] {
        let info = table.status(id).await.unwrap();
        assert_eq!(info.state, ProcState::Exited);
        assert_eq!(info.termination, Some(Termination::Terminated));
    }
    let alive = wait_gone(&pids, Duration::from_secs(5)).await;
    assert!(alive.is_empty(), "still alive after shutdown: {alive:?}");
}

#[tokio::test]
async fn leftover_group_members_are_killed_when_the_leader_exits() {
    let (_d, cwd) = workdir();
    let table = ProcessTable::new(fast_limits());
    let p = table
        .spawn(spec(&cwd, &["sh", "-c", "sleep 1000 & echo $!"]))
        .await
        .unwrap();
    let bg = first_pid(&table, &p.id).await;
    let info = table.wait_exit(&p.id).await.unwrap();
    assert_eq!(info.termination, Some(Termination::Exited));
    assert_eq!(info.exit_code, Some(0));
    assert!(
        wait_gone(&[bg], Duration::from_secs(5)).await.is_empty(),
        "grandchild survived"
    );
    // With the grandchild gone, its copy of the stdout pipe closed and collection finished.
    let end = table
        .read(&p.id, 0, Some(Duration::from_secs(5)))
        .await
        .unwrap();
    let end = table
        .read(&p.id, end.cursor, Some(Duration::from_secs(5)))
        .await
        .unwrap();
    assert!(end.eof);
}

#[tokio::test]
async fn an_escaped_process_holding_the_pipe_does_not_block_eof_forever() {
    let (_d, cwd) = workdir();
    // Without cgroups (as on a host that has none writable), an escapee survives the group kill.
    let table = ProcessTable::new(TableLimits {
        cgroups: false,
        ..fast_limits()
    });
    // setsid leaves the process group, so the group kill cannot reach it; it keeps stdout open.
    let p = table
        // Wait until the escapee has really left the group (it touches `escaped` after setsid),
        // so the group kill at exit cannot race it.
        .spawn(spec(
            &cwd,
            &[
                "sh",
                "-c",
                "setsid sh -c 'touch escaped; exec sleep 1000' & while [ ! -e escaped ]; do sleep 0.01; done; echo $!",
            ],
        ))
        .await
        .unwrap();
    let escapee = first_pid(&table, &p.id).await;
    table.wait_exit(&p.id).await.unwrap();
    let start = Instant::now();
    let mut cursor = 0;
    let eof = loop {
        let chunk = table
            .read(&p.id, cursor, Some(Duration::from_secs(5)))
            .await
            .unwrap();
        cursor = chunk.cursor;
        if chunk.eof || start.elapsed() > Duration::from_secs(10) {
            break chunk.eof;
        }
    };
    let escaped = pid_alive(escapee);
    // Clean up the escapee ourselves before asserting.
    if let Ok(pid) = i32::try_from(escapee) {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
    assert!(
        escaped,
        "the setsid child should have survived the group kill"
    );
    assert!(eof, "collection should end within the grace after exit");
    assert!(table.status(&p.id).await.unwrap().eof);
}

/// A table with cgroups, or None (after a skip) when this host has no writable cgroup.
fn tracked_table_or_skip(test: &str, limits: TableLimits) -> Option<ProcessTable> {
    let table = ProcessTable::new(limits);
    let iso = table.pids_isolation();
    if iso.tracked {
        Some(table)
    } else {
        codespace_test_skip::skip(test, format!("no writable cgroup here ({iso:?})"));
        None
    }
}

/// A leader that starts a `setsid -f` escapee, prints `esc=<pid>` once the escapee runs in its
/// own session, then `then`.
fn escapee_script(then: &str) -> Vec<String> {
    vec![
        "sh".into(),
        "-c".into(),
        format!("setsid -f sh -c 'echo esc=$$; exec sleep 1000'; {then}"),
    ]
}

/// Reads `esc=<pid>` and checks that the escapee left the leader's group and session.
async fn escapee_pid(table: &ProcessTable, id: &str, leader: u32) -> u32 {
    let mut cursor = 0;
    let pid = pid_after_marker(table, id, &mut cursor, "esc=").await;
    assert!(
        wait_until(Duration::from_secs(10), || pid_alive(pid)
            && !session_members(leader).contains(&pid)
            && !group_members(leader).contains(&pid))
        .await,
        "the escapee did not leave the group and session"
    );
    pid
}

fn kill_stray(pid: u32) {
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status();
}

#[tokio::test]
async fn terminate_kills_a_setsid_escapee() {
    let name = "terminate_kills_a_setsid_escapee";
    let Some(table) = tracked_table_or_skip(name, fast_limits()) else {
        return;
    };
    let (_d, cwd) = workdir();
    let argv = escapee_script("sleep 1000");
    let words: Vec<&str> = argv.iter().map(String::as_str).collect();
    let p = table.spawn(spec(&cwd, &words)).await.unwrap();
    let esc = escapee_pid(&table, &p.id, p.pid).await;
    table.terminate(&p.id).await.unwrap();
    let info = table.wait_exit(&p.id).await.unwrap();
    assert_eq!(info.termination, Some(Termination::Terminated));
    let alive = wait_gone(&[esc], Duration::from_secs(5)).await;
    kill_stray(esc);
    assert!(alive.is_empty(), "the setsid escapee survived terminate");
}

#[tokio::test]
async fn timeout_kills_a_setsid_escapee() {
    let name = "timeout_kills_a_setsid_escapee";
    let Some(table) = tracked_table_or_skip(name, fast_limits()) else {
        return;
    };
    let (_d, cwd) = workdir();
    let argv = escapee_script("sleep 1000");
    let words: Vec<&str> = argv.iter().map(String::as_str).collect();
    let mut s = spec(&cwd, &words);
    s.timeout = Some(Duration::from_secs(2));
    let p = table.spawn(s).await.unwrap();
    let esc = escapee_pid(&table, &p.id, p.pid).await;
    let info = tokio::time::timeout(Duration::from_secs(30), table.wait_exit(&p.id))
        .await
        .expect("the timeout did not fire")
        .unwrap();
    assert_eq!(info.termination, Some(Termination::Timeout));
    let alive = wait_gone(&[esc], Duration::from_secs(5)).await;
    kill_stray(esc);
    assert!(alive.is_empty(), "the setsid escapee survived the timeout");
}

#[tokio::test]
async fn shutdown_kills_a_setsid_escapee() {
    let name = "shutdown_kills_a_setsid_escapee";
    let Some(table) = tracked_table_or_skip(name, fast_limits()) else {
        return;
    };
    let (_d, cwd) = workdir();
    let argv = escapee_script("sleep 1000");
    let words: Vec<&str> = argv.iter().map(String::as_str).collect();
    let p = table.spawn(spec(&cwd, &words)).await.unwrap();
    let esc = escapee_pid(&table, &p.id, p.pid).await;
    tokio::time::timeout(Duration::from_secs(20), table.shutdown())
        .await
        .expect("shutdown hung");
    let alive = wait_gone(&[esc, p.pid], Duration::from_secs(5)).await;
    kill_stray(esc);
    assert!(alive.is_empty(), "still alive after shutdown: {alive:?}");
}

#[tokio::test]
async fn an_escapee_dies_when_its_leader_exits() {
    let name = "an_escapee_dies_when_its_leader_exits";
    let Some(table) = tracked_table_or_skip(name, fast_limits()) else {
        return;
    };
    let (_d, cwd) = workdir();
    // The leader waits for a line on stdin, so the escapee is seen alive before it exits.
    let argv = escapee_script("read line; exit 3");
    let words: Vec<&str> = argv.iter().map(String::as_str).collect();
    let p = table.spawn(spec(&cwd, &words)).await.unwrap();
    let esc = escapee_pid(&table, &p.id, p.pid).await;
    table.write_stdin(&p.id, b"go\n").await.unwrap();
    let info = table.wait_exit(&p.id).await.unwrap();
    assert_eq!(info.exit_code, Some(3));
    let alive = wait_gone(&[esc], Duration::from_secs(5)).await;
    kill_stray(esc);
    assert!(alive.is_empty(), "the escapee outlived its process");
    // Its copy of the output pipe closed with it, so collection ended by itself: reading on
    // from the start reaches end of output (each read waits for new output or the end).
    let mut cursor = 0;
    let mut eof = false;
    for _ in 0..100 {
        let r = table
            .read(&p.id, cursor, Some(Duration::from_secs(5)))
            .await
            .unwrap();
        cursor = r.cursor;
        if r.eof {
            eof = true;
            break;
        }
    }
    assert!(eof, "output collection never ended");
}
