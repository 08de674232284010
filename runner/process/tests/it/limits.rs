//! The per-process task limit: a fork loop inside one process is capped at `max_pids` by the
//! process's cgroup (`pids.max`), and the cap does not outlive the process.
// Test helpers outside #[test] fns assert with unwrap/panic like the tests themselves.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::Duration;

use codespace_runner_process::{PidsMechanism, ProcessTable, TableLimits};
use common::*;

/// Starts up to 600 `sleep` children (each fork failure is counted, not fatal), then reports
/// `started=N failed=M` and waits for a line on stdin.
const FORK_LOOP: &str = r#"import os, subprocess, sys
started, failed, children = 0, 0, []
for _ in range(600):
    try:
        children.append(subprocess.Popen(['sleep', '1000']))
        started += 1
    except OSError:
        failed += 1
print('started=%d failed=%d' % (started, failed), flush=True)
sys.stdin.readline()
"#;

fn python_or_skip(test: &str) -> bool {
    let ok = std::process::Command::new("/usr/bin/python3")
        .args(["-c", "pass"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        codespace_test_skip::skip(test, "/usr/bin/python3 not found");
    }
    ok
}

#[tokio::test]
async fn a_fork_loop_is_capped_at_the_pids_limit() {
    let name = "a_fork_loop_is_capped_at_the_pids_limit";
    if !python_or_skip(name) {
        return;
    }
    let table = ProcessTable::new(TableLimits {
        max_pids: 32,
        ..fast_limits()
    });
    let iso = table.pids_isolation();
    println!("pids isolation here: {iso:?}");
    if iso.mechanism == PidsMechanism::None {
        codespace_test_skip::skip(name, "no writable cgroup offers a pids controller here");
        return;
    }
    let (_d, cwd) = workdir();
    let p = table
        .spawn(spec(&cwd, &["/usr/bin/python3", "-c", FORK_LOOP]))
        .await
        .unwrap();
    let mut cursor = 0;
    let text = read_until(
        &table,
        &p.id,
        &mut cursor,
        "failed=",
        Duration::from_secs(60),
    )
    .await;
    let line = text.lines().find(|l| l.starts_with("started=")).unwrap();
    let count = |key: &str| -> u32 {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(key)?.parse().ok())
            .unwrap()
    };
    let (started, failed) = (count("started="), count("failed="));
    // Python itself (and its threads) count against the 32 tasks too.
    assert!(started < 32, "{line}");
    assert!(failed > 0 && started + failed == 600, "{line}");
    // The process's session (pipe mode: sid == pid) holds at most the limit.
    let members = session_members(p.pid);
    assert!(
        !members.is_empty() && members.len() <= 32,
        "{} members",
        members.len()
    );
    table.write_stdin(&p.id, b"\n").await.unwrap();
    let info = table.wait_exit(&p.id).await.unwrap();
    assert_eq!(info.exit_code, Some(0));
    let alive = wait_gone(&members, Duration::from_secs(10)).await;
    assert!(alive.is_empty(), "children outlived the process: {alive:?}");
    // The next process starts with a fresh budget.
    let q = table
        .spawn(spec(
            &cwd,
            &["sh", "-c", "sleep 0 & sleep 0 & wait; echo fine"],
        ))
        .await
        .unwrap();
    let mut cursor = 0;
    read_until(&table, &q.id, &mut cursor, "fine", Duration::from_secs(10)).await;
}
