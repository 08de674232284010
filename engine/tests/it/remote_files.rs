//! The file tools of a worker's workspace through the `Runner` seam: a gateway whose workspace
//! root does not exist on this host, served by a `RemoteRunner` over an in-memory `Wire` whose
//! worker end is `serve_call` on a real `HostRunner` (every call and reply goes through the worker
//! wire's encoding, MessagePack: the protocol, not a mock). find, grep, find_files and apply_patch must give
//! what the same tree gives on the host; patch journals are recovered through the runner.

use codespace_engine::gateway::patches::PatchHooks;
use codespace_engine::{
    Config, ErrorCode, Gateway, PolicySource, PolicyStore, SandboxFacts, Session, ToolCall,
    ToolError,
};
use codespace_runner_api::{
    BoxFuture, Call, Event, EventSink, RemoteRunner, Reply, Runner, RunnerError, Wire, serve_call,
};
use codespace_store::Store;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// What the in-memory wire does with an `apply` call.
#[derive(Clone, Copy, PartialEq, Eq)]
enum OnApply {
    Serve,
    /// The worker dies in the middle of the apply: the first write lands in its tree, then
    /// the connection is gone.
    DieHalfway,
}

/// The gateway's end of an in-memory worker: each call is serialized as on the worker wire,
/// answered by `serve_call`
/// on the worker's runner, and the reply serialized back.
struct MemWire {
    worker: Arc<dyn Runner>,
    /// The worker's tree (for the half-way death).
    tree: PathBuf,
    alive: Arc<AtomicBool>,
    on_apply: Arc<Mutex<OnApply>>,
    sink: Arc<Mutex<Option<EventSink>>>,
    calls: Arc<AtomicUsize>,
}

/// Through the worker wire's encoding of a frame body (MessagePack, bytes as binary strings).
fn round_trip<T: serde::Serialize + serde::de::DeserializeOwned>(v: &T) -> T {
    use codespace_runner_worker::frame::{decode_body, encode_body};
    decode_body(&encode_body(v).unwrap()).unwrap()
}

impl Wire for MemWire {
    fn call(&self, call: Call) -> BoxFuture<'_, Result<Reply, RunnerError>> {
        Box::pin(async move {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let dead = || RunnerError::Unavailable {
                reason: "the worker is gone".into(),
            };
            if !self.alive.load(Ordering::SeqCst) {
                return Err(dead());
            }
            let call: Call = round_trip(&call);
            if let Call::Apply(req) = &call
                && *self.on_apply.lock().unwrap() == OnApply::DieHalfway
            {
                if let Some(codespace_runner_api::FileChange::Write { path, data, .. }) =
                    req.changes.first()
                {
                    std::fs::write(self.tree.join(path), data).unwrap();
                }
                self.alive.store(false, Ordering::SeqCst);
                return Err(dead());
            }
            let reply = serve_call(self.worker.as_ref(), call).await;
            Ok(round_trip(&reply))
        })
    }
    fn subscribe(&self, sink: EventSink) {
        *self.sink.lock().unwrap() = Some(sink);
    }
}

struct Setup {
    _dir: tempfile::TempDir,
    /// The worker's tree (where the files really are).
    tree: PathBuf,
    store_path: PathBuf,
    host: Gateway,
    remote: Gateway,
    alive: Arc<AtomicBool>,
    on_apply: Arc<Mutex<OnApply>>,
    sink: Arc<Mutex<Option<EventSink>>>,
    calls: Arc<AtomicUsize>,
}

/// The root the remote gateway's config names: it does not exist on this host, so any host
/// access to the workspace would fail.
const NOT_ON_HOST: &str = "/nonexistent-codespace-worker-root/ws";

fn facts() -> SandboxFacts {
    SandboxFacts {
        sandbox_enforced: true,
        network_enforced: true,
        masking_enforced: true,
    }
}

fn policy() -> Arc<PolicyStore> {
    Arc::new(PolicyStore::load(PolicySource::Embedded).unwrap())
}

fn host_gateway(tree: &Path, store: Option<Arc<Store>>) -> Gateway {
    let json = format!(
        r#"{{"workspaces": {{"w": {{"root": "{}", "profile": "workspace-write"}}}}}}"#,
        tree.display()
    );
    Gateway::new(
        Config::from_json(&json, Path::new("/")).unwrap(),
        policy(),
        store,
        facts(),
    )
    .unwrap()
}

fn remote_gateway(store_path: &Path, hooks: PatchHooks) -> Gateway {
    let json = format!(
        r#"{{"environments": {{"box": {{"kind": "worker", "worker": {{"socket": "/nonexistent-codespace-worker.sock"}}}}}},
            "workspaces": {{"w": {{"root": "{NOT_ON_HOST}", "profile": "workspace-write", "environment": "box",
                                "command_write_paths": [".", "gen/out"]}}}}}}"#
    );
    Gateway::new(
        Config::from_json(&json, Path::new("/")).unwrap(),
        policy(),
        Some(Arc::new(Store::open(store_path).unwrap())),
        facts(),
    )
    .unwrap()
    .with_patch_hooks(hooks)
}

fn setup_with(hooks: PatchHooks) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("tree");
    std::fs::create_dir_all(tree.join("src/deep")).unwrap();
    std::fs::create_dir_all(tree.join("target")).unwrap();
    std::fs::write(tree.join(".gitignore"), "target/\n").unwrap();
    std::fs::write(tree.join("src/main.rs"), "fn main() {\n    hello();\n}\n").unwrap();
    std::fs::write(tree.join("src/lib.rs"), "pub fn hello() {}\n").unwrap();
    std::fs::write(tree.join("src/deep/util.rs"), "// hello there\n").unwrap();
    std::fs::write(tree.join("target/out.rs"), "hello ignored\n").unwrap();
    std::fs::write(tree.join("README.md"), "Hello, world\n").unwrap();
    let tree = std::fs::canonicalize(&tree).unwrap();
    let store_path = dir.path().join("store.db");
    // The worker: a host gateway over the tree lends its in-process runner.
    let worker = host_gateway(&tree, None);
    let host = host_gateway(&tree, None);
    let alive = Arc::new(AtomicBool::new(true));
    let on_apply = Arc::new(Mutex::new(OnApply::Serve));
    let sink = Arc::new(Mutex::new(None));
    let calls = Arc::new(AtomicUsize::new(0));
    let wire = MemWire {
        worker: codespace_engine::gateway::remote::host_runner(&worker),
        tree: tree.clone(),
        alive: Arc::clone(&alive),
        on_apply: Arc::clone(&on_apply),
        sink: Arc::clone(&sink),
        calls: Arc::clone(&calls),
    };
    let remote = codespace_engine::gateway::remote::with_worker_runner(
        remote_gateway(&store_path, hooks),
        "w",
        Arc::new(RemoteRunner::new(wire)),
    )
    .unwrap();
    Setup {
        _dir: dir,
        tree,
        store_path,
        host,
        remote,
        alive,
        on_apply,
        sink,
        calls,
    }
}

fn setup() -> Setup {
    setup_with(PatchHooks::default())
}

async fn call(gw: &Gateway, name: &str, args: Value) -> Result<Value, ToolError> {
    gw.call(&Session::stdio(), ToolCall::parse(name, &args).unwrap())
        .await
        .map(|r| serde_json::to_value(r).unwrap())
}

/// A listing result without the fields that say how it was produced.
fn answer(mut v: Value) -> Value {
    if let Value::Object(m) = &mut v {
        m.remove("listing_source");
        m.remove("walk_reason");
    }
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn find_grep_and_find_files_through_the_runner_match_the_host() {
    let s = setup();
    let calls: Vec<(&str, Value)> = vec![
        ("find", json!({"workspace_id": "w"})),
        ("find", json!({"workspace_id": "w", "path": "src"})),
        (
            "find",
            json!({"workspace_id": "w", "respect_gitignore": true, "details": true}),
        ),
        (
            "find",
            json!({"workspace_id": "w", "glob": "**/*.rs", "limit": 2}),
        ),
        ("grep", json!({"workspace_id": "w", "pattern": "hello"})),
        (
            "grep",
            json!({"workspace_id": "w", "pattern": "HELLO", "case_insensitive": true, "respect_gitignore": false, "context_lines": 1}),
        ),
        (
            "grep",
            json!({"workspace_id": "w", "pattern": "hel+o", "regex": true, "path": "src"}),
        ),
        ("find_files", json!({"workspace_id": "w", "query": "util"})),
        ("find_files", json!({"workspace_id": "w", "query": "main"})),
    ];
    for (tool, args) in calls {
        let on_host = call(&s.host, tool, args.clone()).await.unwrap();
        let before = s.calls.load(Ordering::SeqCst);
        let remote = call(&s.remote, tool, args.clone()).await.unwrap();
        assert!(
            s.calls.load(Ordering::SeqCst) > before,
            "{tool} {args}: nothing went through the runner"
        );
        if tool != "find_files" {
            assert_eq!(remote["walk_reason"], "watcher_unavailable", "{remote}");
        }
        assert_eq!(answer(remote), answer(on_host), "{tool} {args}");
    }
    // A change made in the worker's tree is in the next listing (no event needed).
    std::fs::write(s.tree.join("src/new.rs"), "hello again\n").unwrap();
    let found = call(
        &s.remote,
        "find",
        json!({"workspace_id": "w", "path": "src"}),
    )
    .await
    .unwrap();
    assert!(
        found["paths"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p == "src/new.rs"),
        "{found}"
    );
    let named = call(
        &s.remote,
        "find",
        json!({"workspace_id": "w", "path": "src/main.rs"}),
    )
    .await
    .unwrap_err();
    assert_eq!(named.code, ErrorCode::PathNotDirectory);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_patch_through_the_runner_with_expected_versions() {
    let s = setup();
    let read = call(
        &s.remote,
        "read",
        json!({"workspace_id": "w", "path": "src/lib.rs"}),
    )
    .await
    .unwrap();
    let v = read["version"].as_str().unwrap().to_string();
    let patch = "*** Begin Patch\n*** Update File: src/lib.rs\n-pub fn hello() {}\n+pub fn hello() { println!(\"hi\"); }\n*** Add File: src/added.rs\n+// added\n*** End Patch";
    let out = call(
        &s.remote,
        "apply_patch",
        json!({"workspace_id": "w", "patch": patch, "expected_versions": {"src/lib.rs": v, "src/added.rs": "absent"}}),
    )
    .await
    .unwrap();
    assert_eq!(out["status"], "applied", "{out}");
    assert_eq!(
        std::fs::read_to_string(s.tree.join("src/lib.rs")).unwrap(),
        "pub fn hello() { println!(\"hi\"); }\n"
    );
    assert_eq!(
        std::fs::read_to_string(s.tree.join("src/added.rs")).unwrap(),
        "// added\n"
    );
    // The version the patch reports is the one a read through the runner sees.
    let after = call(
        &s.remote,
        "read",
        json!({"workspace_id": "w", "path": "src/lib.rs"}),
    )
    .await
    .unwrap();
    assert_eq!(out["changes"][0]["after_version"], after["version"]);
    // An edit made inside the environment: the version pinned by the earlier read no longer
    // holds, whether the path is touched by the patch or not, and whatever events said.
    std::fs::write(s.tree.join("README.md"), "edited in the worker\n").unwrap();
    if let Some(sink) = s.sink.lock().unwrap().clone() {
        sink(Event::FileChanged {
            workspace: "w".into(),
            paths: vec!["README.md".into()],
        });
        sink(Event::WatchLost {
            workspace: "w".into(),
        });
    }
    let old_readme = "sha256:".to_string() + &hex(b"Hello, world\n");
    let refused = call(
        &s.remote,
        "apply_patch",
        json!({"workspace_id": "w", "patch": "*** Begin Patch\n*** Add File: other.txt\n+x\n*** End Patch", "expected_versions": {"README.md": old_readme}}),
    )
    .await
    .unwrap_err();
    assert_eq!(refused.code, ErrorCode::VersionConflict, "{refused:?}");
    assert!(!s.tree.join("other.txt").exists());
}

fn hex(data: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(data))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_inside_the_environment_during_the_apply_is_stale_read_and_kept() {
    let tree_slot: Arc<Mutex<Option<PathBuf>>> = Arc::new(Mutex::new(None));
    let slot = Arc::clone(&tree_slot);
    let hooks = PatchHooks {
        before_commit: Some(Box::new(move || {
            if let Some(t) = slot.lock().unwrap().as_ref() {
                std::fs::write(t.join("src/lib.rs"), "outside edit\n").unwrap();
            }
        })),
        fault: None,
    };
    let s = setup_with(hooks);
    *tree_slot.lock().unwrap() = Some(s.tree.clone());
    let patch = "*** Begin Patch\n*** Update File: src/lib.rs\n-pub fn hello() {}\n+pub fn hello() { 1 }\n*** Add File: b.txt\n+b\n*** End Patch";
    let err = call(
        &s.remote,
        "apply_patch",
        json!({"workspace_id": "w", "patch": patch}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::StaleRead, "{err:?}");
    assert_eq!(
        std::fs::read_to_string(s.tree.join("src/lib.rs")).unwrap(),
        "outside edit\n"
    );
    assert!(!s.tree.join("b.txt").exists());
    // No journal is left behind.
    let store = Store::open(&s.store_path).unwrap();
    assert!(store.open_journals().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_dying_mid_apply_is_rolled_back_by_the_runner_once_it_is_back() {
    let s = setup();
    *s.on_apply.lock().unwrap() = OnApply::DieHalfway;
    let patch = "*** Begin Patch\n*** Update File: src/lib.rs\n-pub fn hello() {}\n+pub fn hello() { 2 }\n*** Update File: README.md\n-Hello, world\n+Bye\n*** End Patch";
    let err = call(
        &s.remote,
        "apply_patch",
        json!({"workspace_id": "w", "patch": patch}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::EnvironmentUnavailable, "{err:?}");
    // Half-way: the first file is new, the second old, and the journal is kept.
    assert_eq!(
        std::fs::read_to_string(s.tree.join("src/lib.rs")).unwrap(),
        "pub fn hello() { 2 }\n"
    );
    let store = Store::open(&s.store_path).unwrap();
    assert_eq!(store.open_journals().unwrap().len(), 1);
    // Nothing is recovered from this host while the worker is away.
    assert!(codespace_engine::gateway::patches::recover(&s.remote).is_empty());
    assert_eq!(store.open_journals().unwrap().len(), 1);
    assert!(
        codespace_engine::gateway::patches::recover_worker(&s.remote, "w")
            .await
            .is_empty()
    );
    // The worker is back: its runner restores the journal.
    *s.on_apply.lock().unwrap() = OnApply::Serve;
    s.alive.store(true, Ordering::SeqCst);
    let recovered = codespace_engine::gateway::patches::recover_worker(&s.remote, "w").await;
    assert_eq!(recovered.len(), 1);
    assert_eq!(
        std::fs::read_to_string(s.tree.join("src/lib.rs")).unwrap(),
        "pub fn hello() {}\n"
    );
    assert_eq!(
        std::fs::read_to_string(s.tree.join("README.md")).unwrap(),
        "Hello, world\n"
    );
    assert!(store.open_journals().unwrap().is_empty());
    let st = call(
        &s.remote,
        "operation_status",
        json!({"operation_id": recovered[0]}),
    )
    .await
    .unwrap();
    assert_eq!(st["status"], "unknown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_workspace_is_never_touched_on_the_host() {
    // The config's root does not exist here; the gateway starts, and every tool reaches the
    // files through the runner alone.
    assert!(!Path::new(NOT_ON_HOST).exists());
    let s = setup();
    call(
        &s.remote,
        "read",
        json!({"workspace_id": "w", "path": "README.md"}),
    )
    .await
    .unwrap();
    call(&s.remote, "find", json!({"workspace_id": "w"}))
        .await
        .unwrap();
    // A sandboxed command's write scope and masks are computed through the runner: the
    // operator's missing write path is made in the worker's tree (never on this host). This
    // gateway has no sandbox helper, so the command itself does not start.
    let before = s.calls.load(Ordering::SeqCst);
    let err = call(
        &s.remote,
        "exec_command",
        json!({"workspace_id": "w", "command": ["true"]}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::ProcessSpawnFailed, "{err:?}");
    assert!(err.message.contains("sandbox helper"), "{err:?}");
    assert!(
        s.calls.load(Ordering::SeqCst) > before,
        "the runner was asked"
    );
    assert!(s.tree.join("gen/out").is_dir(), "made through the runner");
    assert!(!Path::new(NOT_ON_HOST).exists());
    assert!(!Path::new(NOT_ON_HOST).parent().unwrap().exists());
    // Without a runner attached, a worker's workspace is unavailable, never served by the host.
    let dir = tempfile::tempdir().unwrap();
    let bare = remote_gateway(&dir.path().join("store.db"), PatchHooks::default());
    let err = call(&bare, "find", json!({"workspace_id": "w"}))
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::EnvironmentUnavailable);
}

/// A `read` window's bytes cross the worker wire as one binary string: 10 KB of file is about
/// 10 KB of frame (JSON made it an array of numbers, ~40 KB), and every byte value survives.
#[test]
fn a_window_crosses_the_wire_at_its_own_size() {
    use codespace_runner_worker::frame::{ServerFrame, decode_body, encode_body};
    let data: Vec<u8> = (0..10_240u32).map(|i| (i % 256) as u8).collect();
    let reply = Reply::Window(codespace_runner_api::FileWindow {
        data: data.clone(),
        size: 10_240,
        version: format!("sha256:{}", "0".repeat(64)),
        links: 1,
    });
    let frame = ServerFrame::<&Reply, ()>::Response {
        id: 1,
        body: &reply,
    };
    let bytes = encode_body(&frame).unwrap();
    assert!(bytes.len() < 10_240 + 256, "{} bytes", bytes.len());
    match decode_body::<ServerFrame<Reply, ()>>(&bytes).unwrap() {
        ServerFrame::Response { id: 1, body } => assert_eq!(body, reply),
        _ => panic!("not the response"),
    }
}
