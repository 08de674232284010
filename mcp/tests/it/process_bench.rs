//! Figures for the process tools (run by scripts/bench-exec.py in release; in the normal test
//! run it does a few iterations as a smoke test): the round trip of `exec_command ["true"]` with
//! `yield_ms` through the gateway (sandboxed when the kernel allows) against a raw fork+exec of
//! `true` (`std::process::Command`) and the raw `ProcessTable` spawn without a launcher, all in
//! the same run, and the read_process drain rate.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::process_common;

use codespace_runner_process::{Launcher, ProcessTable, SpawnSpec, TableLimits};
use process_common::*;
use serde_json::json;
use std::time::{Duration, Instant};

fn iters() -> usize {
    std::env::var("BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn spec(launcher: Option<Launcher>, dir: &std::path::Path) -> SpawnSpec {
    SpawnSpec {
        argv: vec!["true".into()],
        cwd: dir.to_path_buf(),
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        tty: false,
        timeout: None,
        launcher,
        owner: "bench".into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_round_trip_and_drain_rate() {
    let n = iters();
    let e = env();
    let table = ProcessTable::new(TableLimits::default());
    let bare_table = ProcessTable::new(TableLimits {
        cgroups: false,
        ..TableLimits::default()
    });
    let mut bare = Vec::new();
    let mut raw = Vec::new();
    let mut fork_exec = Vec::new();
    let mut gw = Vec::new();
    for _ in 0..n {
        // Baseline: a bare fork+exec+wait of `true`, no table, no cgroup, no sandbox.
        let t = Instant::now();
        let status = tokio::task::spawn_blocking(|| std::process::Command::new("true").status())
            .await
            .unwrap()
            .unwrap();
        fork_exec.push(t.elapsed());
        assert!(status.success());
        // Baseline: the raw table spawn + exit, no launcher, no gateway.
        let t = Instant::now();
        let s = table.spawn(spec(None, &e.root)).await.unwrap();
        let info = table.wait_exit(&s.id).await.unwrap();
        raw.push(t.elapsed());
        assert_eq!(info.exit_code, Some(0));
        // The same without a per-process cgroup (what the cgroup costs).
        let t = Instant::now();
        let s = bare_table.spawn(spec(None, &e.root)).await.unwrap();
        bare_table.wait_exit(&s.id).await.unwrap();
        bare.push(t.elapsed());
        // The whole tool call: authorize, lease, operation rows, sandbox helper, wait for exit.
        let t = Instant::now();
        let r = call(
            &e.gw,
            "exec_command",
            json!({"workspace_id": "w", "command": ["true"], "yield_ms": 10_000}),
        )
        .await;
        let elapsed = t.elapsed();
        match r {
            Ok(r) => {
                assert_eq!(r["exit_code"], 0);
                gw.push(elapsed);
            }
            // The previous process's exit watcher may not have released the lease yet.
            Err(err) => assert_eq!(err.code, codespace_engine::ErrorCode::WorkspaceBusy),
        }
        exec_when_free(&e.gw, "w", &["true"]).await;
    }
    let (raw_m, gw_m, fe_m) = (median(raw), median(gw), median(fork_exec));
    let mode = if sandbox_available() {
        "sandboxed"
    } else {
        "unsandboxed (no sandbox here)"
    };
    println!(
        "BENCH table_spawn_true without_cgroup_median_ms={:.2} with_cgroup_median_ms={:.2}",
        median(bare).as_secs_f64() * 1e3,
        raw_m.as_secs_f64() * 1e3,
    );
    println!(
        "BENCH exec_true raw_fork_exec_median_ms={:.2} raw_table_spawn_median_ms={:.2} gateway_exec_yield_median_ms={:.2} ({mode}, pids: {}) ratio_vs_fork_exec={:.1} ratio_vs_table={:.1}",
        fe_m.as_secs_f64() * 1e3,
        raw_m.as_secs_f64() * 1e3,
        gw_m.as_secs_f64() * 1e3,
        e.gw.pids_isolation().mechanism.as_str(),
        gw_m.as_secs_f64() / fe_m.as_secs_f64(),
        gw_m.as_secs_f64() / raw_m.as_secs_f64()
    );

    // Drain: 64 MiB (smoke: 4 MiB) through read_process cursors with a 16 MiB ring.
    let total: u64 = if n >= 20 { 64 << 20 } else { 4 << 20 };
    let e = env_with(Opts {
        limits: json!({"output_ring_bytes": 16 << 20}),
        ..Opts::default()
    });
    let t = Instant::now();
    let r = run(
        &e.gw,
        &[
            "sh",
            "-c",
            &format!("head -c {total} /dev/zero | tr '\\0' a"),
        ],
        0,
    )
    .await;
    let id = r["process_id"].as_str().unwrap().to_string();
    let (mut cursor, mut got) = (0u64, 0u64);
    loop {
        let c = call(
            &e.gw,
            "read_process",
            json!({"process_id": id, "cursor": cursor, "wait_ms": 5000}),
        )
        .await
        .unwrap();
        got += c["chunk"].as_str().unwrap().len() as u64;
        cursor = c["cursor"].as_u64().unwrap();
        if c["eof"] == true {
            break;
        }
    }
    let secs = t.elapsed().as_secs_f64();
    assert_eq!(cursor, total);
    println!(
        "BENCH read_process drain bytes={total} returned={got} seconds={secs:.3} rate_MBps={:.1}",
        got as f64 / secs / 1e6
    );
}
