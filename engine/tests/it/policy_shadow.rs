//! The shadow set: `policies/shadow/` over the live files, never part of the live set; hot
//! reload picks up shadow-only edits (logged as `shadow_reload` events), keeps the last good
//! shadow set when an edit does not compile, and drops it when the directory goes away.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use codespace_engine::policy::reload::{ReloadOptions, Reloader};
use codespace_engine::policy::{EMBEDDED_POLICIES, EMBEDDED_SCHEMA};
use codespace_engine::{PolicySource, PolicyStore};
use codespace_store::Store;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

const NO_TXT: &str = "@id(\"base.forbid.txt\")\n@reason(\"r\")\nforbid (principal, action == CodeSpace::Action::\"read\", resource) when { resource.ext == \"txt\" };\n";

fn setup() -> (tempfile::TempDir, PathBuf, PolicySource) {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let policies = root.join("policies");
    for (name, text) in EMBEDDED_POLICIES {
        let p = policies.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    let schema = root.join("codespace.cedarschema");
    std::fs::write(&schema, EMBEDDED_SCHEMA).unwrap();
    (
        dir,
        policies.clone(),
        PolicySource::Dir { policies, schema },
    )
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn shadow_files_replace_or_add_to_the_live_files_and_are_never_live() {
    let (_d, policies, source) = setup();
    std::fs::create_dir_all(policies.join("shadow/base")).unwrap();
    std::fs::write(policies.join("shadow/base/extra.cedar"), NO_TXT).unwrap();
    // Same relative path as a live file: replaces it (read-only loses its info permit).
    let ro = EMBEDDED_POLICIES
        .iter()
        .find(|(n, _)| *n == "profiles/read-only.cedar")
        .unwrap()
        .1;
    let without_info = ro.replace("read-only.permit.info", "read-only.permit.info-v2");
    std::fs::create_dir_all(policies.join("shadow/profiles")).unwrap();
    std::fs::write(
        policies.join("shadow/profiles/read-only.cedar"),
        &without_info,
    )
    .unwrap();
    let store = PolicyStore::load(source).unwrap();
    let live = store.snapshot();
    assert!(!live.meta.contains_key("base.forbid.txt"));
    let shadow = store.shadow().expect("a shadow set");
    assert!(shadow.meta.contains_key("base.forbid.txt"));
    assert!(shadow.meta.contains_key("read-only.permit.info-v2"));
    assert!(!shadow.meta.contains_key("read-only.permit.info"));
    assert_eq!(shadow.meta["base.forbid.txt"].file, "base/extra.cedar");
}

#[test]
fn hot_reload_reloads_the_shadow_set_too() {
    let (_d, policies, source) = setup();
    let policy = Arc::new(PolicyStore::load(source).unwrap());
    assert!(policy.shadow().is_none());
    let db = Arc::new(Store::open_in_memory().unwrap());
    let _r = Reloader::start(
        Arc::clone(&policy),
        Some(Arc::clone(&db)),
        ReloadOptions::default(),
    )
    .unwrap();
    let live = policy.snapshot().sha256.clone();
    std::fs::create_dir_all(policies.join("shadow/base")).unwrap();
    std::fs::write(policies.join("shadow/base/extra.cedar"), NO_TXT).unwrap();
    wait_for("the shadow set", || policy.shadow().is_some());
    assert_eq!(policy.snapshot().sha256, live, "the live set never changes");
    // The event is written just after the new set is installed (it names the set in force):
    // wait for it rather than expecting it the moment the set is visible.
    wait_for("the shadow_reload event", || {
        !db.events(Some("shadow_reload"), 10).unwrap().is_empty()
    });
    let good = policy.shadow().unwrap().sha256.clone();
    // A broken shadow edit: the last good shadow set stays, the refusal is recorded.
    std::fs::write(policies.join("shadow/base/extra.cedar"), "forbid (").unwrap();
    wait_for("the refusal", || policy.shadow_rejected().is_some());
    assert_eq!(policy.shadow().unwrap().sha256, good);
    assert_eq!(policy.snapshot().sha256, live);
    // Removing the directory ends shadow evaluation.
    std::fs::remove_dir_all(policies.join("shadow")).unwrap();
    wait_for("no shadow set", || policy.shadow().is_none());
}
