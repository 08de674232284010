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

/// What a command reads from the store file the moment it starts: its own call's allowing
/// decision rows and operation rows (the command runs unsandboxed here, so it can open the
/// store; a sandboxed command never can).
const PY_SEEN_AT_START: &str = "import sqlite3, sys\n\
c = sqlite3.connect('file:' + sys.argv[1] + '?mode=ro', uri=True)\n\
d = c.execute(\"SELECT count(DISTINCT decision_id) FROM decisions WHERE tool = 'exec_command' AND decision = 'allow'\").fetchone()[0]\n\
o = c.execute(\"SELECT count(*) FROM operations WHERE tool = 'exec_command'\").fetchone()[0]\n\
print('decisions=%d operations=%d' % (d, o))";

/// `exec_command` is a mutation: the command finds its call's allowing decision and its
/// operation on disk when it starts. With the writer's delay at an hour, only a wait on them
/// puts them there. Both runtime flavours; with and without an operation key (the keyed call
/// stores its operation at once, the other on the blocking pool while the command is
/// prepared).
async fn a_command_finds_its_decision_on_disk_when_it_starts() {
    let python = std::process::Command::new("python3")
        .args(["-c", "import sqlite3"])
        .status()
        .is_ok_and(|s| s.success());
    if !codespace_test_skip::require(
        python,
        "a_command_finds_its_decision_on_disk_when_it_starts",
        "python3 with sqlite3 is not installed",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    std::fs::create_dir(&root).unwrap();
    let root = std::fs::canonicalize(&root).unwrap();
    let store_path = dir.path().join("store.db");
    let json = format!(
        r#"{{"workspaces": {{"w": {{"root": "{}", "profile": "workspace-write",
            "sandbox": "off", "secret_masking": "off"}}}}}}"#,
        root.display()
    );
    let cfg = Config::from_json(&json, Path::new("/")).unwrap();
    let policy = Arc::new(PolicyStore::load(PolicySource::Embedded).unwrap());
    let store = Store::open(&store_path).unwrap();
    store
        .start_audit_writer(AuditWriterConfig {
            max_delay: Duration::from_secs(3600),
            ..AuditWriterConfig::default()
        })
        .unwrap();
    let gw = Gateway::new(
        cfg,
        policy,
        Some(Arc::new(store)),
        SandboxFacts {
            sandbox_enforced: false,
            network_enforced: false,
            masking_enforced: false,
        },
    )
    .unwrap();
    let db = store_path.to_str().unwrap();
    for (n, key) in [(1, None), (2, Some("k-1"))] {
        let mut args = json!({"workspace_id": "w", "yield_ms": 30000,
            "command": ["python3", "-c", PY_SEEN_AT_START, db]});
        if let Some(k) = key {
            args["operation_key"] = json!(k);
        }
        let r = call(&gw, "exec_command", args).await;
        assert_eq!(r["exit_code"], 0, "{r}");
        assert_eq!(
            r["chunk"].as_str().unwrap().trim(),
            format!("decisions={n} operations={n}"),
            "call {n} (key {key:?}): the command started before its decision and operation \
             were on disk: {r}"
        );
    }
}

#[tokio::test]
async fn a_command_finds_its_decision_on_disk_when_it_starts_current_thread() {
    a_command_finds_its_decision_on_disk_when_it_starts().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_finds_its_decision_on_disk_when_it_starts_multi_thread() {
    a_command_finds_its_decision_on_disk_when_it_starts().await;
}
