//! Figures for secret masks (run by scripts/bench-masks.py in release on 50 000 files; in the
//! normal test run it does a few iterations on a small tree as a smoke test): the round trip of
//! `exec_command ["true"]` with `yield_ms` on a workspace of `BENCH_FILES` files holding 10
//! withheld ones, with masking on against the same exec with masking off, measured in the same
//! run, plus the raw `ProcessTable` spawn of `true` (no launcher, no gateway) and the bare
//! no-follow walk of the same tree for reference; and the same round trip on a workspace with a
//! `.git` directory whose write scope has 4 candidates (`command_write_paths`
//! `[".", "target", "src", "tmp"]`) against the default `["."]`, with a plain fork+exec of `true`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::process_common;

use codespace_runner_fs::{Root, WalkLimits};
use codespace_runner_process::{ProcessTable, SpawnSpec, TableLimits};
use process_common::*;
use std::path::Path;
use std::time::{Duration, Instant};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// `files` ordinary files, 100 per directory in two levels, plus 10 files policy withholds.
fn populate(root: &Path, files: usize) {
    for i in 0..files {
        let dir = root.join(format!("src/m{}/d{}", i / 5000, i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&dir).unwrap();
        }
        std::fs::write(dir.join(format!("f{i}.rs")), "x").unwrap();
    }
    let withheld = [
        ".env",
        "src/.env",
        "src/m0/.env.local",
        "config/.env.production",
        "certs/server.key",
        "certs/ca.pem",
        "deploy/id_rsa",
        "home/.ssh/id_ed25519",
        "home/.netrc",
        "src/m0/d1/secret.pem",
    ];
    for w in withheld {
        let p = root.join(w);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, "secret").unwrap();
    }
}

async fn exec_true(e: &Env) -> Duration {
    loop {
        let t = Instant::now();
        let r = call(
            &e.gw,
            "exec_command",
            serde_json::json!({"workspace_id": "w", "command": ["true"], "yield_ms": 10_000}),
        )
        .await;
        let elapsed = t.elapsed();
        match r {
            Ok(r) => {
                assert_eq!(r["exit_code"], 0, "{r}");
                return elapsed;
            }
            // The previous process's exit watcher may not have released the lease yet.
            Err(err) if err.code == codespace_engine::ErrorCode::WorkspaceBusy => {
                tokio::task::yield_now().await;
            }
            Err(err) => panic!("exec: {err}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_round_trip_with_and_without_masks() {
    if skip_without_sandbox("exec_round_trip_with_and_without_masks") {
        return;
    }
    if !codespace_runner_sandbox::probe().masking_available() {
        codespace_test_skip::skip(
            "exec_round_trip_with_and_without_masks",
            "no mount namespaces here",
        );
        return;
    }
    let files = env_usize("BENCH_FILES", 2_000);
    let n = env_usize("BENCH_ITERS", 5);
    let masked = env();
    let unmasked = env_with(Opts {
        secret_masking: Some("off"),
        ..Opts::default()
    });
    populate(&masked.root, files);
    populate(&unmasked.root, files);
    // Warm both (page cache, decision cache), then alternate so both see the same machine state.
    exec_true(&masked).await;
    exec_true(&unmasked).await;
    let (mut on, mut off, mut walks, mut raw) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut fork_exec = Vec::new();
    let mut walks_links = Vec::new();
    let root = Root::open(&masked.root).unwrap();
    let table = ProcessTable::new(TableLimits::default());
    for _ in 0..n {
        let t = Instant::now();
        let s = table
            .spawn(SpawnSpec {
                argv: vec!["true".into()],
                cwd: masked.root.clone(),
                env: vec![("PATH".into(), "/usr/bin:/bin".into())],
                tty: false,
                timeout: None,
                launcher: None,
                owner: "bench".into(),
            })
            .await
            .unwrap();
        assert_eq!(table.wait_exit(&s.id).await.unwrap().exit_code, Some(0));
        raw.push(t.elapsed());
        // The floor: a plain fork+exec of `true` and its wait, nothing else.
        fork_exec.push(
            tokio::task::spawn_blocking(|| {
                let t = Instant::now();
                let st = std::process::Command::new("true").status().unwrap();
                assert!(st.success());
                t.elapsed()
            })
            .await
            .unwrap(),
        );
        on.push(exec_true(&masked).await);
        off.push(exec_true(&unmasked).await);
        let t = Instant::now();
        let limits = WalkLimits {
            max_entries: 1_000_000,
            ..WalkLimits::default()
        };
        let w = root.walk(&limits).unwrap();
        walks.push(t.elapsed());
        assert!(!w.incomplete);
        // What `find` pays when a policy reads `resource.links`: one lstat per file.
        let t = Instant::now();
        let w = root
            .walk(&WalkLimits {
                stat_links: true,
                ..limits
            })
            .unwrap();
        walks_links.push(t.elapsed());
        assert!(!w.incomplete);
    }
    // Every exec of the masked workspace carried exactly the 10 withheld files.
    let rows = masked
        .gw
        .store()
        .unwrap()
        .query_decisions(&codespace_store::DecisionQuery {
            tool: Some("exec_command".into()),
            ..Default::default()
        })
        .unwrap();
    let execs = rows.iter().filter(|r| r.action == "exec_command").count();
    let masks = rows.iter().filter(|r| r.action == "read").count();
    assert_eq!(masks, 10 * execs, "10 masks per exec");
    let (on_m, off_m, walk_m, raw_m) = (median(on), median(off), median(walks), median(raw));
    let walk_links_m = median(walks_links);
    let fork_m = median(fork_exec);
    println!(
        "BENCH exec_masks files={files} withheld=10 iters={n} masked_median_ms={:.2} \
         unmasked_median_ms={:.2} ratio={:.2} added_ms={:.2} bare_walk_median_ms={:.2} \
         raw_spawn_true_median_ms={:.2} masked_vs_raw={:.1} walk_with_link_counts_median_ms={:.2} \
         fork_exec_true_median_ms={:.2} masked_vs_fork_exec={:.1}",
        ms(on_m),
        ms(off_m),
        on_m.as_secs_f64() / off_m.as_secs_f64(),
        ms(on_m) - ms(off_m),
        ms(walk_m),
        ms(raw_m),
        on_m.as_secs_f64() / raw_m.as_secs_f64(),
        ms(walk_links_m),
        ms(fork_m),
        on_m.as_secs_f64() / fork_m.as_secs_f64()
    );
}

/// `files` ordinary files as in [`populate`], no withheld ones, plus a `.git` directory and the
/// `target` and `tmp` directories of the 4-candidate write scope.
fn populate_repo(root: &Path, files: usize) {
    for i in 0..files {
        let dir = root.join(format!("src/m{}/d{}", i / 5000, i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&dir).unwrap();
        }
        std::fs::write(dir.join(format!("f{i}.rs")), "x").unwrap();
    }
    for d in [
        "src",
        "target",
        "tmp",
        ".git/hooks",
        ".git/objects",
        ".git/refs/heads",
    ] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::write(root.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_round_trip_with_write_scope() {
    if skip_without_sandbox("exec_round_trip_with_write_scope") {
        return;
    }
    let files = env_usize("BENCH_FILES", 2_000);
    let n = env_usize("BENCH_ITERS", 5);
    // Shipped policy, shipped masking default; the tree holds nothing withheld, so the two differ
    // only in the write scope's candidates.
    let scoped = env_with(Opts {
        workspace: serde_json::json!({"command_write_paths": [".", "target", "src", "tmp"]}),
        ..Opts::default()
    });
    let plain = env();
    populate_repo(&scoped.root, files);
    populate_repo(&plain.root, files);
    exec_true(&scoped).await;
    exec_true(&plain).await;
    let (mut four, mut one, mut fork_exec) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..n {
        fork_exec.push(
            tokio::task::spawn_blocking(|| {
                let t = Instant::now();
                let st = std::process::Command::new("true").status().unwrap();
                assert!(st.success());
                t.elapsed()
            })
            .await
            .unwrap(),
        );
        four.push(exec_true(&scoped).await);
        one.push(exec_true(&plain).await);
    }
    let (four_m, one_m, fork_m) = (median(four), median(one), median(fork_exec));
    println!(
        "BENCH exec_write_scope files={files} iters={n} git=yes \
         scope4_median_ms={:.2} scope_default_median_ms={:.2} ratio={:.2} \
         fork_exec_true_median_ms={:.2} scope4_vs_fork_exec={:.1} default_vs_fork_exec={:.1}",
        ms(four_m),
        ms(one_m),
        four_m.as_secs_f64() / one_m.as_secs_f64(),
        ms(fork_m),
        four_m.as_secs_f64() / fork_m.as_secs_f64(),
        one_m.as_secs_f64() / fork_m.as_secs_f64()
    );
}
