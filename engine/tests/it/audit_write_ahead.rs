//! The audit log off the read path: an allowed mutation's decision is on disk before the runner
//! acts (write-ahead, with the read rows queued before it), and shutdown drains the queue.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use codespace_engine::gateway::patches::PatchHooks;
use codespace_engine::{
    Config, Gateway, PolicySource, PolicyStore, SandboxFacts, Session, ToolCall,
};
use codespace_store::{AuditWriterConfig, DecisionQuery, Store};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn gateway(root: &Path, store_path: &Path, hooks: PatchHooks) -> Gateway {
    let json = format!(
        r#"{{"workspaces": {{"w": {{"root": "{}", "profile": "workspace-write"}}}}}}"#,
        root.display()
    );
    let cfg = Config::from_json(&json, Path::new("/")).unwrap();
    let policy = Arc::new(PolicyStore::load(PolicySource::Embedded).unwrap());
    let store = Store::open(store_path).unwrap();
    // The writer started first wins over the gateway's: with an hour's delay, a row is on disk
    // only when someone waited for it (write-ahead, flush, shutdown), never by the clock.
    store
        .start_audit_writer(AuditWriterConfig {
            max_delay: Duration::from_secs(3600),
            ..AuditWriterConfig::default()
        })
        .unwrap();
    Gateway::new(
        cfg,
        policy,
        Some(Arc::new(store)),
        SandboxFacts {
            sandbox_enforced: true,
            network_enforced: true,
            masking_enforced: true,
        },
    )
    .unwrap()
    .with_patch_hooks(hooks)
}

/// (tool, decision) of every row committed to the file, through a separate connection that
/// flushes nothing.
fn on_disk(store_path: &Path) -> Vec<(String, String)> {
    Store::open(store_path)
        .unwrap()
        .query_decisions(&DecisionQuery::default())
        .unwrap()
        .into_iter()
        .map(|r| (r.tool, r.decision))
        .collect()
}

async fn call(gw: &Gateway, name: &str, args: Value) -> Value {
    let r = gw
        .call(&Session::stdio(), ToolCall::parse(name, &args).unwrap())
        .await
        .unwrap();
    serde_json::to_value(r).unwrap()
}

/// (tool, decision) rows seen on disk when the patch runner was about to write.
type Seen = Arc<Mutex<Option<Vec<(String, String)>>>>;

struct Fixture {
    _dir: tempfile::TempDir,
    store_path: PathBuf,
    gw: Gateway,
    seen_at_apply: Seen,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("a.txt"), "one\n").unwrap();
    let root = std::fs::canonicalize(&root).unwrap();
    let store_path = dir.path().join("store.db");
    let seen_at_apply: Seen = Arc::new(Mutex::new(None));
    let (seen, path) = (Arc::clone(&seen_at_apply), store_path.clone());
    let hooks = PatchHooks {
        // The runner is about to write: what does the store hold now?
        before_commit: Some(Box::new(move || {
            *seen.lock().unwrap() = Some(on_disk(&path));
        })),
        fault: None,
    };
    let gw = gateway(&root, &store_path, hooks);
    Fixture {
        _dir: dir,
        store_path,
        gw,
        seen_at_apply,
    }
}

async fn mutation_is_written_ahead() {
    let f = fixture();
    call(&f.gw, "read", json!({"workspace_id": "w", "path": "a.txt"})).await;
    let patch = "*** Begin Patch\n*** Add File: b.txt\n+two\n*** End Patch\n";
    let r = call(
        &f.gw,
        "apply_patch",
        json!({"workspace_id": "w", "patch": patch}),
    )
    .await;
    assert_eq!(r["status"], "applied", "{r}");
    let seen = f.seen_at_apply.lock().unwrap().clone().expect("hook ran");
    assert!(
        seen.contains(&("apply_patch".to_string(), "allow".to_string())),
        "the patch's decision was not on disk when the runner acted: {seen:?}"
    );
    // The read queued before it went in the same group commit.
    assert!(
        seen.contains(&("read".to_string(), "allow".to_string())),
        "{seen:?}"
    );
}

#[tokio::test]
async fn an_allowed_patch_is_audited_before_it_writes_current_thread() {
    mutation_is_written_ahead().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_patch_is_audited_before_it_writes_multi_thread() {
    mutation_is_written_ahead().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_the_queued_reads() {
    let f = fixture();
    for _ in 0..20 {
        call(&f.gw, "read", json!({"workspace_id": "w", "path": "a.txt"})).await;
    }
    f.gw.shutdown().await;
    let rows = on_disk(&f.store_path);
    assert_eq!(
        rows.iter().filter(|(t, _)| t == "read").count(),
        20,
        "{rows:?}"
    );
}

#[tokio::test]
async fn flush_audit_is_a_barrier_for_other_connections() {
    let f = fixture();
    call(&f.gw, "read", json!({"workspace_id": "w", "path": "a.txt"})).await;
    assert!(
        on_disk(&f.store_path).is_empty(),
        "a read waits for its batch"
    );
    f.gw.flush_audit();
    assert_eq!(
        on_disk(&f.store_path),
        vec![("read".to_string(), "allow".to_string())]
    );
}
