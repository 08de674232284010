//! The server's temporary files through the gateway: `find` never lists a known instance's temp file
//! (and paging is not shifted by one), the start-up sweep removes only a dead instance's files, and a
//! clean shutdown records that the instance left nothing behind.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use codespace_engine::{
    Config, Gateway, PolicySource, PolicyStore, SandboxFacts, Session, ToolCall,
};
use codespace_runner_fs::TEMP_PREFIX;
use codespace_store::Store;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// An instance id no store records.
const UNKNOWN: &str = "00000000000000cc";
/// An instance recorded as started by a process that no longer exists.
const DEAD: &str = "00000000000000dd";

struct Env {
    _dir: tempfile::TempDir,
    root: PathBuf,
    store: Arc<Store>,
}

fn env() -> Env {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    std::fs::create_dir(&root).unwrap();
    let root = std::fs::canonicalize(&root).unwrap();
    let store = Arc::new(Store::open(&dir.path().join("store.db")).unwrap());
    Env {
        _dir: dir,
        root,
        store,
    }
}

fn gateway(e: &Env) -> Gateway {
    let json = format!(
        r#"{{"workspaces": {{"w": {{"root": "{}", "profile": "workspace-write"}}}}}}"#,
        e.root.display()
    );
    let cfg = Config::from_json(&json, Path::new("/")).unwrap();
    let policy = Arc::new(PolicyStore::load(PolicySource::Embedded).unwrap());
    Gateway::new(
        cfg,
        policy,
        Some(Arc::clone(&e.store)),
        SandboxFacts {
            sandbox_enforced: true,
            network_enforced: true,
            masking_enforced: true,
        },
    )
    .unwrap()
}

fn write(root: &Path, rel: &str, data: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, data).unwrap();
}

async fn call(gw: &Gateway, name: &str, args: Value) -> Value {
    let r = gw
        .call(&Session::stdio(), ToolCall::parse(name, &args).unwrap())
        .await
        .unwrap_or_else(|e| panic!("{name}: {e:?}"));
    serde_json::to_value(r).unwrap()
}

async fn find(gw: &Gateway, offset: u64, limit: u64) -> Vec<String> {
    let v = call(
        gw,
        "find",
        json!({"workspace_id": "w", "offset": offset, "limit": limit}),
    )
    .await;
    v["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_string())
        .collect()
}

fn temp(id: &str, n: u64) -> String {
    format!("{TEMP_PREFIX}{id}-{n}")
}

#[tokio::test]
async fn find_never_lists_server_temp_files_and_paging_is_not_shifted() {
    let e = env();
    // An earlier instance recorded in the store (its leftovers are the server's too).
    e.store
        .insert_instance(DEAD, i64::MAX, "no-such-boot:0")
        .unwrap();
    let gw = gateway(&e);
    let own = gw.temp_names().instance().to_string();
    for f in ["a.txt", "b.txt", "c.txt", "d/e.txt"] {
        write(&e.root, f, "x\n");
    }
    // Server temp files sort first (a dot): exactly what shifted a paged listing.
    write(&e.root, &temp(&own, 1), "in flight");
    write(&e.root, &format!("d/{}", temp(DEAD, 3)), "left behind");
    // A user's files with similar names are listed like any file.
    write(&e.root, &format!("{TEMP_PREFIX}foo"), "user");
    write(&e.root, &temp(UNKNOWN, 1), "user");
    let all = vec![
        format!("{TEMP_PREFIX}{UNKNOWN}-1"),
        format!("{TEMP_PREFIX}foo"),
        "a.txt".to_string(),
        "b.txt".to_string(),
        "c.txt".to_string(),
        "d/e.txt".to_string(),
    ];
    assert_eq!(find(&gw, 0, 100).await, all);
    assert_eq!(find(&gw, 1, 3).await, all[1..4].to_vec());
    assert_eq!(find(&gw, 3, 3).await, all[3..6].to_vec());
    // The walk only hides them: they are still on disk.
    assert!(e.root.join(temp(&own, 1)).exists());
}

#[tokio::test]
async fn start_up_sweep_removes_only_a_dead_instances_files() {
    let e = env();
    e.store
        .insert_instance(DEAD, i64::MAX, "no-such-boot:0")
        .unwrap();
    // A live instance: a gateway in this very process (its start token matches this process).
    let live = gateway(&e);
    let live_id = live.temp_names().instance().to_string();
    write(&e.root, "keep.txt", "k");
    write(&e.root, &temp(DEAD, 1), "dead");
    write(&e.root, &format!("deep/er/{}", temp(DEAD, 2)), "dead");
    write(&e.root, &temp(&live_id, 1), "a live writer's");
    write(&e.root, &temp(UNKNOWN, 1), "user");
    write(&e.root, &format!("{TEMP_PREFIX}foo"), "user");
    std::fs::create_dir_all(e.root.join(temp(DEAD, 9))).unwrap();

    let gw = gateway(&e);
    assert!(codespace_engine::gateway::patches::recover(&gw).is_empty());
    assert!(!e.root.join(temp(DEAD, 1)).exists());
    assert!(!e.root.join(format!("deep/er/{}", temp(DEAD, 2))).exists());
    for kept in [
        "keep.txt".to_string(),
        temp(&live_id, 1),
        temp(UNKNOWN, 1),
        format!("{TEMP_PREFIX}foo"),
        temp(DEAD, 9),
    ] {
        assert!(e.root.join(&kept).exists(), "{kept} was removed");
    }
    let events = e.store.events(Some("temp_sweep"), 10).unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].detail["removed"], 2);
    assert_eq!(events[0].detail["instances"], json!([DEAD]));
    let dead = e
        .store
        .instances()
        .unwrap()
        .into_iter()
        .find(|r| r.instance_id == DEAD)
        .unwrap();
    assert!(dead.swept_ms.is_some());
    // The next start has nothing to look for: no walk, no event.
    let again = gateway(&e);
    let report = codespace_engine::gateway::temp_files::sweep_temp_files(&again);
    assert!(report.instances.is_empty() && report.complete);
    assert_eq!(e.store.events(Some("temp_sweep"), 10).unwrap().len(), 1);
}

#[tokio::test]
async fn a_clean_shutdown_records_that_nothing_was_left_and_refuses_later_writes() {
    let e = env();
    let gw = gateway(&e);
    let own = gw.temp_names().instance().to_string();
    let v = call(
        &gw,
        "apply_patch",
        json!({"workspace_id": "w", "patch": "*** Begin Patch\n*** Add File: n.txt\n+n\n*** End Patch\n"}),
    )
    .await;
    assert_eq!(v["status"], "applied");
    assert!(gw.seal_temp_files());
    let row = e
        .store
        .instances()
        .unwrap()
        .into_iter()
        .find(|r| r.instance_id == own)
        .unwrap();
    assert!(row.ended_ms.is_some());
    let refused = gw
        .call(
            &Session::stdio(),
            ToolCall::parse(
                "apply_patch",
                &json!({"workspace_id": "w", "patch": "*** Begin Patch\n*** Add File: m.txt\n+m\n*** End Patch\n"}),
            )
            .unwrap(),
        )
        .await;
    assert!(refused.is_err(), "{refused:?}");
    assert!(!e.root.join("m.txt").exists());
}
