//! Hot reload: an accepted change swaps the set and logs an event; a rejected one keeps the last
//! good set, logs diagnostics and shows in workspace_info; the shipped tests can veto a change;
//! and calls running while a policy file is rewritten in many small writes are only ever decided
//! by one of the complete sets.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use codespace_engine::policy::reload::{ReloadOptions, Reloader};
use codespace_engine::policy::{EMBEDDED_POLICIES, EMBEDDED_SCHEMA, PolicyBundle, bundle_hash};
use codespace_engine::{
    Config, ErrorCode, Gateway, PolicySource, PolicyStore, SandboxFacts, Session, ToolCall,
};
use codespace_store::{DecisionQuery, Store};
use serde_json::json;
use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(30);

struct Env {
    _dir: tempfile::TempDir,
    policies: PathBuf,
    ws: PathBuf,
    policy: Arc<PolicyStore>,
    store: Arc<Store>,
}

fn env() -> Env {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let policies = root.join("policies");
    for (name, text) in EMBEDDED_POLICIES {
        let p = policies.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    std::fs::create_dir_all(root.join("schema")).unwrap();
    let schema = root.join("schema/codespace.cedarschema");
    std::fs::write(&schema, EMBEDDED_SCHEMA).unwrap();
    let ws = root.join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("a.txt"), "a\n").unwrap();
    std::fs::write(ws.join("b.txt"), "b\n").unwrap();
    let policy = Arc::new(
        PolicyStore::load(PolicySource::Dir {
            policies: policies.clone(),
            schema,
        })
        .unwrap(),
    );
    Env {
        _dir: dir,
        policies,
        ws,
        policy,
        store: Arc::new(Store::open_in_memory().unwrap()),
    }
}

fn opts() -> ReloadOptions {
    ReloadOptions {
        quiet: Duration::from_millis(200),
        settle: Duration::from_millis(50),
        tests_dir: None,
        profiles: None,
        test_gate: Some(codespace_policy_tools::reload_gate),
        on_rejected: None,
    }
}

fn start(e: &Env, opts: ReloadOptions) -> Reloader {
    Reloader::start(Arc::clone(&e.policy), Some(Arc::clone(&e.store)), opts).unwrap()
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + DEADLINE;
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn gateway(e: &Env) -> Gateway {
    let cfg = Config::from_json(
        &format!(
            r#"{{"workspaces": {{"w": {{"root": "{}", "profile": "read-only"}}}}}}"#,
            e.ws.display()
        ),
        Path::new("/"),
    )
    .unwrap();
    Gateway::new(
        cfg,
        Arc::clone(&e.policy),
        Some(Arc::clone(&e.store)),
        SandboxFacts {
            sandbox_enforced: true,
            network_enforced: true,
            masking_enforced: true,
        },
    )
    .unwrap()
}

const EXTRA: &str = "@id(\"extra.permit.info\")\npermit (principal, action == CodeSpace::Action::\"workspace_info\", resource);\n";

#[test]
fn an_accepted_reload_swaps_the_set_and_logs_old_and_new_hash() {
    let e = env();
    let r = start(&e, opts());
    let old = e.policy.snapshot().sha256.clone();
    std::fs::write(e.policies.join("profiles/extra.cedar"), EXTRA).unwrap();
    wait_for("the swap", || e.policy.snapshot().sha256 != old);
    let snap = e.policy.snapshot();
    assert!(snap.meta.contains_key("extra.permit.info"));
    assert!(e.policy.last_rejected().is_none());
    wait_for("the event", || r.attempts() >= 1);
    let ev = e.store.events(Some("policy_reload"), 10).unwrap();
    assert_eq!(ev.len(), 1, "{ev:#?}");
    assert_eq!(ev[0].detail["accepted"], true);
    assert_eq!(ev[0].detail["old_sha256"], json!(old));
    assert_eq!(ev[0].detail["new_sha256"], json!(snap.sha256));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_reload_keeps_the_last_good_set_and_shows_in_workspace_info() {
    let e = env();
    let gw = gateway(&e);
    let r = start(&e, opts());
    let good = e.policy.snapshot().sha256.clone();
    let bad = e.policies.join("profiles/bad.cedar");
    std::fs::write(
        &bad,
        "@id(\"bad.permit\")\npermit (principal, action, resource) when { resource.nosuch };\n",
    )
    .unwrap();
    wait_for("the rejection", || r.attempts() >= 1);
    assert_eq!(e.policy.snapshot().sha256, good, "the last good set stays");
    let rej = e.policy.last_rejected().unwrap();
    assert!(
        rej.errors
            .iter()
            .any(|l| l.contains("profiles/bad.cedar") && l.contains("bad.permit")),
        "{rej:?}"
    );
    let ev = e.store.events(Some("policy_reload"), 10).unwrap();
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].detail["accepted"], false);
    assert_eq!(ev[0].detail["old_sha256"], json!(good));
    assert_eq!(ev[0].detail["in_force_sha256"], json!(good));
    assert_ne!(ev[0].detail["new_sha256"], json!(good));
    assert!(
        ev[0].detail["diagnostics"]
            .to_string()
            .contains("validation error"),
        "{}",
        ev[0].detail
    );

    // Calls are still decided by the good set, and workspace_info says a reload was refused.
    let s = Session::stdio();
    let call = |n: &str, a: serde_json::Value| ToolCall::parse(n, &a).unwrap();
    gw.call(
        &s,
        call("read", json!({"workspace_id": "w", "path": "a.txt"})),
    )
    .await
    .unwrap();
    let info = gw
        .call(&s, call("workspace_info", json!({"workspace_id": "w"})))
        .await
        .unwrap();
    let info = serde_json::to_value(info).unwrap();
    assert_eq!(info["policy"]["set_sha256"], json!(good));
    let shown = info["policy"]["last_reload_rejected"]["errors"].to_string();
    assert!(shown.contains("profiles/bad.cedar"), "{info}");
    assert!(
        !shown.contains(e.policies.to_str().unwrap()),
        "no absolute paths on the wire: {shown}"
    );

    // Removing the bad file returns to the set in force and clears the rejection.
    std::fs::remove_file(&bad).unwrap();
    wait_for("the rejection to clear", || {
        e.policy.last_rejected().is_none()
    });
    assert_eq!(e.policy.snapshot().sha256, good);
}

#[test]
fn the_shipped_tests_can_veto_a_valid_change() {
    let e = env();
    let tests = e.policies.join("tests");
    std::fs::create_dir(&tests).unwrap();
    std::fs::write(
        tests.join("ro.yaml"),
        "workspace: { id: w, profile: read-only }\ncases:\n  - name: reads\n    call: { name: read, arguments: { workspace_id: w, path: a.txt } }\n    decision: allow\n",
    )
    .unwrap();
    let r = start(
        &e,
        ReloadOptions {
            tests_dir: Some(tests),
            ..opts()
        },
    );
    let good = e.policy.snapshot().sha256.clone();
    // Valid Cedar, but read-only no longer reads: the test fails, so the set is refused.
    std::fs::write(
        e.policies.join("profiles/read-only.cedar"),
        "@id(\"read-only.permit.info\")\npermit (principal in CodeSpace::PermissionProfile::\"read-only\", action in CodeSpace::Action::\"info\", resource);\n",
    )
    .unwrap();
    wait_for("the veto", || r.attempts() >= 1);
    assert_eq!(e.policy.snapshot().sha256, good);
    let rej = e.policy.last_rejected().unwrap();
    assert!(
        rej.errors
            .iter()
            .any(|l| l.contains("tests/ro.yaml :: reads")),
        "{rej:?}"
    );
}

fn policy_b(a: &str) -> String {
    let old = "permit (\n  principal in CodeSpace::PermissionProfile::\"read-only\",\n  action in CodeSpace::Action::\"fs_read\",\n  resource\n);";
    assert!(a.contains(old), "shipped read-only.cedar changed shape");
    a.replace(
        old,
        "permit (\n  principal in CodeSpace::PermissionProfile::\"read-only\",\n  action in CodeSpace::Action::\"fs_read\",\n  resource\n)\nwhen { resource.path != \"b.txt\" };",
    )
}

/// Rewrites `path` with `text` in small writes, the way a slow editor or a copy would.
fn write_slowly(path: &Path, text: &str) {
    let mut f = std::fs::File::create(path).unwrap();
    for chunk in text.as_bytes().chunks(16) {
        f.write_all(chunk).unwrap();
        f.flush().unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_during_many_small_writes_are_decided_only_by_complete_sets() {
    let e = env();
    let gw = Arc::new(gateway(&e));
    let r = start(&e, opts());
    let file = e.policies.join("profiles/read-only.cedar");
    let text_a = std::fs::read_to_string(&file).unwrap();
    let text_b = policy_b(&text_a);
    let bundle_a: PolicyBundle = e.policy.source().read().unwrap();
    let hash_a = bundle_hash(&bundle_a);
    let mut bundle_b = bundle_a.clone();
    for f in &mut bundle_b.files {
        if f.name == "profiles/read-only.cedar" {
            f.text = text_b.clone();
        }
    }
    let hash_b = bundle_hash(&bundle_b);
    assert_eq!(e.policy.snapshot().sha256, hash_a);

    let done = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for _ in 0..3 {
        let (gw, done) = (Arc::clone(&gw), Arc::clone(&done));
        readers.push(tokio::spawn(async move {
            let s = Session::stdio();
            let mut unexpected = Vec::new();
            while !done.load(Ordering::SeqCst) {
                for path in ["a.txt", "b.txt"] {
                    let c = ToolCall::parse("read", &json!({"workspace_id": "w", "path": path}))
                        .unwrap();
                    if let Err(err) = gw.call(&s, c).await
                        && (err.code != ErrorCode::Unauthorized || path != "b.txt")
                    {
                        unexpected.push(format!("{path}: {err:?}"));
                    }
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            unexpected
        }));
    }

    let (store, policy, file2) = (Arc::clone(&e.store), Arc::clone(&e.policy), file.clone());
    let (ha, hb) = (hash_a.clone(), hash_b.clone());
    let broken_holds = tokio::task::spawn_blocking(move || {
        let mut broken = 0u64;
        let seen = |h: &str| {
            store
                .query_decisions(&DecisionQuery::default())
                .unwrap()
                .iter()
                .any(|r| r.policy_set_sha256 == h)
        };
        for round in 0..4 {
            let (text, hash) = if round % 2 == 0 {
                (&text_b, &hb)
            } else {
                (&text_a, &ha)
            };
            if round % 2 == 1 {
                // A broken state that stays on disk long enough to be read and refused.
                let before = policy.last_rejected().map(|x| x.at_ms);
                write_slowly(&file2, &text[..text.len() / 2]);
                wait_for("a refused half file", || {
                    policy.last_rejected().map(|x| x.at_ms) != before
                        && policy.last_rejected().is_some()
                });
                broken += 1;
            }
            write_slowly(&file2, text);
            wait_for("the complete set", || policy.snapshot().sha256 == *hash);
            wait_for("a decision under it", || seen(hash));
        }
        broken
    })
    .await
    .unwrap();
    done.store(true, Ordering::SeqCst);
    for t in readers {
        let unexpected = t.await.unwrap();
        assert!(unexpected.is_empty(), "{unexpected:?}");
    }

    let rows = e.store.query_decisions(&DecisionQuery::default()).unwrap();
    assert!(rows.len() > 20, "too few calls ran: {}", rows.len());
    let mut hashes = BTreeSet::new();
    for row in &rows {
        hashes.insert(row.policy_set_sha256.clone());
        let want_allow = !(row.policy_set_sha256 == hash_b && row.subject == "b.txt");
        assert!(
            row.policy_set_sha256 == hash_a || row.policy_set_sha256 == hash_b,
            "a decision under a set that is neither complete set: {row:?}"
        );
        assert_eq!(row.decision == "allow", want_allow, "{row:?}");
    }
    assert_eq!(hashes, BTreeSet::from([hash_a.clone(), hash_b.clone()]));
    let events = e.store.events(Some("policy_reload"), 1000).unwrap();
    let accepted = events
        .iter()
        .filter(|v| v.detail["accepted"] == true)
        .count();
    let rejected = events
        .iter()
        .filter(|v| v.detail["accepted"] == false)
        .count();
    assert_eq!(accepted, 4, "{events:#?}");
    assert!(
        rejected as u64 >= broken_holds && broken_holds == 2,
        "{events:#?}"
    );
    for ev in events.iter().filter(|v| v.detail["accepted"] == true) {
        let new = ev.detail["new_sha256"].as_str().unwrap();
        assert!(
            new == hash_a || new == hash_b,
            "accepted a partial set: {ev:?}"
        );
    }
    drop(r);
}
