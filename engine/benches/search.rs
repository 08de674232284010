//! Search benchmarks (run by `scripts/bench-search.sh`, which installs `rg` for the baselines):
//! every figure is printed with its baseline measured in the same run and the ratio.
//!
//! 1. `grep` for a literal over a 50 000-file / ~200 MB tree vs `rg PATTERN` (and `rg -n`).
//! 2. First `find` over 50 000 entries (a fresh gateway: watcher start + walk + policy filter +
//!    page) vs `rg --files`; a repeat and a next page read from the index.
//! 3. `find_files` over 100 000 indexed paths, p50 over varied queries.
//! 4. Index memory: RSS delta per indexed path.
//!
//! Trees live on /dev/shm when it exists (a tmpfs), so disk noise does not dominate.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use codespace_engine::{
    Config, Gateway, PolicySource, PolicyStore, SandboxFacts, Session, ToolCall,
};
use serde_json::{Value, json};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PATTERN: &str = "NEEDLE_7f3a";

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn gateway(root: &Path, store: &Path) -> Gateway {
    let json = format!(
        r#"{{"workspaces": {{"w": {{"root": "{}"}}}}}}"#,
        root.display()
    );
    let cfg = Config::from_json(&json, Path::new("/")).unwrap();
    let policy = Arc::new(PolicyStore::load(PolicySource::Embedded).unwrap());
    let store = Arc::new(codespace_store::Store::open(store).unwrap());
    Gateway::new(
        cfg,
        policy,
        Some(store),
        SandboxFacts {
            sandbox_enforced: true,
            network_enforced: true,
            masking_enforced: true,
        },
    )
    .unwrap()
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// Deterministic pseudo-random text.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

const WORDS: &[&str] = &[
    "fn", "let", "mut", "self", "struct", "impl", "match", "return", "value", "result", "error",
    "path", "index", "search", "buffer", "line", "count", "offset", "config", "server",
];

/// One timed `rg` run in `dir` (output discarded); None when it did not run.
fn time_once(dir: &Path, args: &[&str]) -> Option<Duration> {
    let t = Instant::now();
    let st = Command::new("rg")
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .ok()?;
    // rg exits 1 when nothing matched; both are fine.
    st.code().is_some_and(|c| c <= 1).then(|| t.elapsed())
}

fn call(rt: &tokio::runtime::Runtime, gw: &Gateway, tool: &str, args: Value) -> (Duration, Value) {
    let session = Session::stdio();
    let c = ToolCall::parse(tool, &args).unwrap();
    let t = Instant::now();
    let out = rt.block_on(gw.call(&session, c)).unwrap();
    let took = t.elapsed();
    (took, serde_json::to_value(out).unwrap())
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64()
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let shm = Path::new("/dev/shm");
    let base = if shm.is_dir() {
        tempfile::tempdir_in(shm).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };
    let store_dir = tempfile::tempdir().unwrap();
    let have_rg = Command::new("rg").arg("--version").output().is_ok();
    if !have_rg {
        println!("skip: rg not installed (scripts/bench-search.sh installs it); baselines omitted");
    }

    // ---- A 50 000-file, ~200 MB tree: 1 000 directories of 50 files of ~4 KB.
    let root = base.path().join("grep");
    let mut rng = Lcg(42);
    let mut bytes = 0usize;
    let mut planted = 0usize;
    for d in 0..1000 {
        let dir = root.join(format!("m{d:03}/src"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..50 {
            let mut text = String::with_capacity(4300);
            while text.len() < 4000 {
                let n = 4 + rng.next() % 8;
                for _ in 0..n {
                    text.push_str(WORDS[(rng.next() % WORDS.len() as u64) as usize]);
                    text.push(' ');
                }
                text.push('\n');
            }
            if (d * 50 + f) % 500 == 7 {
                text.push_str(&format!("let x = \"{PATTERN}\";\n"));
                planted += 1;
            }
            bytes += text.len();
            std::fs::write(dir.join(format!("f{f:02}.rs")), text).unwrap();
        }
    }
    let root = std::fs::canonicalize(&root).unwrap();
    println!(
        "tree: 50000 files, {} dirs, {:.0} MB, {planted} files hold the literal",
        2000,
        bytes as f64 / 1e6
    );

    // 1. grep.
    let gw = gateway(&root, &store_dir.path().join("g.db"));
    let args = json!({"workspace_id": "w", "pattern": PATTERN, "max_matches": 10000});
    let (first, out) = call(&rt, &gw, "grep", args.clone());
    assert_eq!(out["matches"].as_array().unwrap().len(), planted, "{out}");
    // Interleaved rounds (ours, rg, rg -n) so machine load hits all three alike.
    let mut sources = Vec::new();
    let (mut ours, mut rgs, mut rgns) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..7 {
        let (t, out) = call(&rt, &gw, "grep", args.clone());
        sources.push(format!(
            "{}{}",
            out["listing_source"].as_str().unwrap_or(""),
            out.get("walk_reason")
                .and_then(Value::as_str)
                .map(|r| format!("/{r}"))
                .unwrap_or_default()
        ));
        ours.push(t);
        if have_rg {
            rgs.extend(time_once(&root, &[PATTERN]));
            rgns.extend(time_once(&root, &["-n", PATTERN]));
        }
    }
    println!("grep warm calls listed from: {}", sources.join(", "));
    let warm = median(ours);
    if have_rg && !rgs.is_empty() && !rgns.is_empty() {
        let (rg, rg_n) = (median(rgs), median(rgns));
        println!(
            "grep literal: first call {first:?} (also builds the index), warm p50 {warm:?} | rg p50 {rg:?} -> ratio {:.2}x (first {:.2}x) | rg -n p50 {rg_n:?} -> {:.2}x",
            ratio(warm, rg),
            ratio(first, rg),
            ratio(warm, rg_n)
        );
    } else {
        println!("grep literal: first call {first:?}, warm {warm:?}");
    }
    drop(gw);

    // 2. First find over 50 000 files + 2 000 dirs (fresh gateway each time) vs rg --files.
    let mut firsts = Vec::new();
    let mut rg_files = Vec::new();
    for i in 0..7 {
        let gw = gateway(&root, &store_dir.path().join(format!("f{i}.db")));
        let (t, out) = call(&rt, &gw, "find", json!({"workspace_id": "w"}));
        assert_eq!(out["incomplete"], false);
        assert_eq!(out["paths"].as_array().unwrap().len(), 10_000);
        firsts.push(t);
        // Let the background index build finish before the next fresh gateway is measured.
        call(&rt, &gw, "find", json!({"workspace_id": "w", "limit": 1}));
        if have_rg {
            rg_files.extend(time_once(&root, &["--files"]));
        }
    }
    let first = median(firsts);
    let gw = gateway(&root, &store_dir.path().join("f.db"));
    call(&rt, &gw, "find", json!({"workspace_id": "w"}));
    let repeat = median(
        (0..20)
            .map(|_| call(&rt, &gw, "find", json!({"workspace_id": "w"})).0)
            .collect(),
    );
    let next = median(
        (0..20)
            .map(|i| {
                call(
                    &rt,
                    &gw,
                    "find",
                    json!({"workspace_id": "w", "offset": 10_000 * (1 + i % 4)}),
                )
                .0
            })
            .collect(),
    );
    let files = (!rg_files.is_empty()).then(|| median(rg_files));
    match files {
        Some(rgf) => println!(
            "find first page (52 000 entries): {first:?} | rg --files {rgf:?} -> ratio {:.2}x; repeat {repeat:?}, next page {next:?} (from the index)",
            ratio(first, rgf)
        ),
        None => println!("find first page: {first:?}; repeat {repeat:?}, next page {next:?}"),
    }
    drop(gw);
    std::fs::remove_dir_all(&root).unwrap();

    // 3 + 4. 100 000 indexed paths: find_files p50 and index memory.
    let root = base.path().join("ff");
    for d in 0..1000 {
        let dir = root.join(format!("pkg{d:03}/mod{}", d % 7));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..100 {
            let name = format!("{}_{f:02}.rs", WORDS[(f + d) % WORDS.len()]);
            std::fs::write(dir.join(name), b"").unwrap();
        }
    }
    let root = std::fs::canonicalize(&root).unwrap();
    let gw = gateway(&root, &store_dir.path().join("ff.db"));
    let before = rss_bytes();
    let (build, out) = call(&rt, &gw, "find", json!({"workspace_id": "w", "limit": 1}));
    // The second call waits for the background index build.
    let (index_ready, _) = call(&rt, &gw, "find", json!({"workspace_id": "w", "limit": 1}));
    let after = rss_bytes();
    assert_eq!(out["incomplete"], false);
    let entries = 100_000 + 2_000;
    println!(
        "index of {entries} entries: first call {build:?}, index ready {index_ready:?} later; RSS delta {:.1} MB = {:.0} bytes per path (index + signature groups + derived listing; the first call's own walk is freed)",
        (after.saturating_sub(before)) as f64 / 1e6,
        after.saturating_sub(before) as f64 / entries as f64
    );
    let queries = [
        "search",
        "pkg12 mod3",
        "cfg",
        "srvr",
        "idx_4",
        "pkg999",
        "mod6 line",
        "resu",
        "pat of",
        "xyz",
    ];
    let mut lat = Vec::new();
    for round in 0..5 {
        for q in queries {
            let (t, out) = call(
                &rt,
                &gw,
                "find_files",
                json!({"workspace_id": "w", "query": q, "limit": 50}),
            );
            if round == 0 && q == "search" {
                assert!(!out["matches"].as_array().unwrap().is_empty());
            }
            lat.push(t);
        }
    }
    lat.sort();
    println!(
        "find_files over {entries} indexed paths: p50 {:?}, p90 {:?} ({} queries)",
        lat[lat.len() / 2],
        lat[lat.len() * 9 / 10],
        lat.len()
    );
}
