//! Descriptors are bounded by live processes: an exited process keeps no stdin pipe, terminal
//! or cgroup descriptor open, however many exited handles the table keeps. (Its own test binary:
//! other tests running in parallel would change the descriptor count.)
// Test helpers outside #[test] fns assert with unwrap/panic like the tests themselves.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "it/common/mod.rs"]
mod common;

use std::time::Duration;

use codespace_runner_process::{ProcState, ProcessTable, TableLimits};
use common::*;

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exited_processes_keep_no_descriptors_open() {
    const N: usize = 24;
    let (_d, cwd) = workdir();
    let table = ProcessTable::new(TableLimits {
        max_exited_kept: 1000,
        ..fast_limits()
    });
    // Warm up once (runtime threads, lazily opened files) before counting.
    let w = table.spawn(spec(&cwd, &["true"])).await.unwrap();
    table.wait_exit(&w.id).await.unwrap();
    read_all(&table, &w.id).await;
    let before = open_fds();
    let mut ids = Vec::new();
    for i in 0..N {
        let s = if i % 4 == 0 {
            tty_spec(&cwd, &["sh", "-c", "echo tty"])
        } else {
            spec(&cwd, &["sh", "-c", "echo pipe"])
        };
        let p = table.spawn(s).await.unwrap();
        table.wait_exit(&p.id).await.unwrap();
        read_all(&table, &p.id).await;
        ids.push(p.id);
    }
    for id in &ids {
        assert_eq!(table.status(id).await.unwrap().state, ProcState::Exited);
    }
    // Descriptors closed by background tasks (pumps, cgroup removal) may lag a moment.
    let settled = wait_until(Duration::from_secs(10), || open_fds() <= before + 2).await;
    let after = open_fds();
    println!("open fds: before {before}, after {N} exited processes {after}");
    assert!(
        settled,
        "fds grew from {before} to {after} with {N} exited processes kept"
    );
}
