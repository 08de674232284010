//! Gateway benchmarks (run by hand: `cargo bench -p codespace-engine`). Every figure is printed
//! with a baseline measured in the same run: Cedar decision latency, `read` through the gateway
//! vs a bare read+hash, `find` over a 50 000-entry tree vs the bare walk, and `apply_patch` of
//! 200 files / 1 000 hunks vs writing the same results directly.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use codespace_engine::policy::{Decider, NoRows};
use codespace_engine::request::{Session, WorkspaceFacts, path_request};
use codespace_engine::{Config, Gateway, PolicySource, PolicyStore, SandboxFacts, ToolCall};
use serde_json::json;
use sha2::Digest;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn pct(mut v: Vec<Duration>, p: f64) -> Duration {
    v.sort();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i]
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

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap().join("ws");
    std::fs::create_dir(&root).unwrap();
    let gw = gateway(&root, &dir.path().join("s.db"));
    let session = Session::stdio();

    // 1. Cedar decision for a shipped profile (prebuilt workspace entities, one Operation).
    let snap = gw.policy().snapshot();
    let facts = WorkspaceFacts {
        id: "w".into(),
        profile: "workspace-write".into(),
        environment: "local".into(),
        environment_kind: codespace_engine::config::EnvironmentKind::Host,
        environment_transport: codespace_engine::config::EnvironmentTransport::InProcess,
        environment_host: String::new(),
        sandbox: codespace_engine::facts::SandboxFact::Enforced,
        network_enforcement: codespace_engine::facts::NetworkEnforcement::Enforced,
        network: codespace_engine::config::Network::Restricted,
        approvals: codespace_engine::config::Approvals::Off,
        server_owned: vec![],
        workspace_sandbox: codespace_engine::config::SandboxMode::Required,
        secret_masking: codespace_engine::facts::MaskingFact::Enforced,
    };
    let decider = Decider::over(
        Arc::clone(&snap),
        gw.config().profiles.clone(),
        Arc::new(NoRows),
    );
    let req = [path_request(
        codespace_engine::policy::Action::READ,
        "src/main.rs",
        "",
        &session,
    )];
    let mut lat = Vec::new();
    for _ in 0..20_000 {
        let t = Instant::now();
        let d = decider.probe_uncached(&snap, &facts, "read", &req, &session);
        lat.push(t.elapsed());
        assert!(d.allowed());
    }
    println!(
        "cedar decision (read, workspace-write, {} policies): p50 {:?} p99 {:?}",
        snap.meta.len(),
        pct(lat.clone(), 0.5),
        pct(lat, 0.99)
    );

    // 2. read of a 10 KB file: gateway vs bare read + sha256.
    let body: String = (0..10_240)
        .map(|i| (b'a' + (i % 26) as u8) as char)
        .collect();
    std::fs::write(root.join("ten.txt"), &body).unwrap();
    let n = 5_000;
    let t = Instant::now();
    for _ in 0..n {
        let data = std::fs::read(root.join("ten.txt")).unwrap();
        let _ = sha2::Sha256::digest(&data);
    }
    let bare = t.elapsed() / n;
    let call = ToolCall::parse("read", &json!({"workspace_id": "w", "path": "ten.txt"})).unwrap();
    let t = Instant::now();
    for _ in 0..n {
        rt.block_on(gw.call(&session, call.clone())).unwrap();
    }
    let via = t.elapsed() / n;
    println!(
        "read 10 KB: gateway {via:?}/call vs bare read+hash {bare:?} (overhead {:?}, ratio {:.2}x; includes an audit row)",
        via.saturating_sub(bare),
        via.as_secs_f64() / bare.as_secs_f64()
    );

    // 3. find over a 50 000-entry tree: gateway (walk + policy filter) vs bare walk.
    let big = root.join("big");
    for d in 0..250 {
        let sub = big.join(format!("d{d:03}"));
        std::fs::create_dir_all(&sub).unwrap();
        for f in 0..199 {
            std::fs::write(sub.join(format!("f{f:03}.rs")), b"x").unwrap();
        }
    }
    let fsroot = codespace_runner_fs::Root::open(&root).unwrap();
    let t = Instant::now();
    let w = fsroot
        .walk(&codespace_runner_fs::WalkLimits::default())
        .unwrap();
    let walk_only = t.elapsed();
    let call = ToolCall::parse("find", &json!({"workspace_id": "w", "limit": 10000})).unwrap();
    let t = Instant::now();
    let out = rt.block_on(gw.call(&session, call)).unwrap();
    let via = t.elapsed();
    let out = serde_json::to_value(out).unwrap();
    let rg = std::process::Command::new("rg")
        .arg("--files")
        .current_dir(&root)
        .output()
        .ok()
        .map(|_| {
            let t = Instant::now();
            let _ = std::process::Command::new("rg")
                .arg("--files")
                .current_dir(&root)
                .output();
            t.elapsed()
        });
    println!(
        "find over {} entries: gateway {via:?} vs bare walk {walk_only:?} (ratio {:.2}x){}; incomplete={}",
        w.entries.len(),
        via.as_secs_f64() / walk_only.as_secs_f64(),
        rg.map(|d| format!(
            ", rg --files {d:?} (ratio {:.2}x)",
            via.as_secs_f64() / d.as_secs_f64()
        ))
        .unwrap_or_default(),
        out["incomplete"]
    );
    std::fs::remove_dir_all(&big).unwrap();

    // 4. apply_patch of 200 files / 1 000 hunks vs writing the same results directly.
    let pdir = root.join("p");
    std::fs::create_dir(&pdir).unwrap();
    let mut patch = String::from("*** Begin Patch\n");
    let mut finals = Vec::new();
    for f in 0..200 {
        let lines: Vec<String> = (0..100).map(|l| format!("file {f} line {l}")).collect();
        std::fs::write(pdir.join(format!("f{f}.txt")), lines.join("\n") + "\n").unwrap();
        patch.push_str(&format!("*** Update File: p/f{f}.txt\n"));
        let mut new_lines = lines.clone();
        for h in 0..5 {
            let l = h * 20 + 10;
            patch.push_str(&format!(
                "@@\n file {f} line {}\n-file {f} line {l}\n+changed {f} {l}\n",
                l - 1
            ));
            new_lines[l] = format!("changed {f} {l}");
        }
        finals.push((pdir.join(format!("f{f}.txt")), new_lines.join("\n") + "\n"));
    }
    patch.push_str("*** End Patch\n");
    let call =
        ToolCall::parse("apply_patch", &json!({"workspace_id": "w", "patch": patch})).unwrap();
    let t = Instant::now();
    let out = rt.block_on(gw.call(&session, call)).unwrap();
    let via = t.elapsed();
    let out = serde_json::to_value(out).unwrap();
    assert_eq!(out["status"], "applied");
    let t = Instant::now();
    for (p, body) in &finals {
        let tmp = p.with_extension("tmp");
        std::fs::write(&tmp, body).unwrap();
        std::fs::rename(&tmp, p).unwrap();
    }
    let bare = t.elapsed();
    println!(
        "apply_patch 200 files / 1000 hunks: {via:?} (parse+plan+1 Cedar request per file+journal+atomic writes) vs bare temp+rename writes {bare:?} (ratio {:.1}x)",
        via.as_secs_f64() / bare.as_secs_f64()
    );
}
