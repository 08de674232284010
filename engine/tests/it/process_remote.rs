//! The process tools through a worker's runner: the gateway's workspace is served by a
//! `RemoteRunner` over an in-memory wire whose every call and reply crosses as JSON and is
//! answered by `serve_call` on a host runner of its own (the worker's table, not the
//! gateway's). Pipes, a PTY, stdin, output cursors, terminate; and a dropped connection (the
//! worker died, its children with it): the processes are `lost`, their lease is free, the store
//! says `lost`, and the next call runs on a new worker.

use codespace_engine::host_runner::HostRunner;
use codespace_engine::{Config, ErrorCode, Gateway, PolicySource, PolicyStore, SandboxFacts};
use codespace_engine::{Session, ToolCall, ToolError};
use codespace_runner_api::{
    BoxFuture, Call, EventSink, RemoteRunner, Reply, Runner, RunnerError, Wire, serve_call,
};
use codespace_store::Store;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// One connection to a worker: its runner and the switch that cuts it.
struct Conn {
    worker: Arc<HostRunner>,
    /// Set: the transport saw the end (calls in flight and later fail `Unavailable`).
    gone: watch::Sender<bool>,
    /// Set: the worker died but the transport has not noticed (a worker that hangs, until the
    /// supervisor's ping gives up): no call, in flight or later, ever answers.
    hung: Arc<std::sync::atomic::AtomicBool>,
}

/// A wire to an in-memory worker, which can be cut (the worker dies with its children) and
/// connected again (a new worker).
struct MemWire {
    root: PathBuf,
    conn: Mutex<Conn>,
    /// The methods called, in order.
    seen: Mutex<Vec<&'static str>>,
}

fn worker(root: &Path) -> Conn {
    let runner = HostRunner::serving(
        &codespace_engine::config::Limits::default(),
        None,
        &[("w".to_string(), root.to_path_buf())],
    )
    .unwrap();
    Conn {
        worker: Arc::new(runner),
        gone: watch::channel(false).0,
        hung: Arc::new(std::sync::atomic::AtomicBool::new(false)),
    }
}

impl MemWire {
    fn new(root: &Path) -> Arc<MemWire> {
        Arc::new(MemWire {
            root: root.to_path_buf(),
            conn: Mutex::new(worker(root)),
            seen: Mutex::new(Vec::new()),
        })
    }

    /// The connection drops: every call in flight and every later one fails `Unavailable`,
    /// and the worker kills its children as it dies.
    async fn cut(&self) {
        let (worker, gone) = {
            let c = self.conn.lock().unwrap();
            (Arc::clone(&c.worker), c.gone.clone())
        };
        gone.send_replace(true);
        worker.shutdown().await;
    }

    /// The worker dies and the transport does not notice: nothing answers any more.
    async fn hang(&self) {
        let (worker, hung) = {
            let c = self.conn.lock().unwrap();
            (Arc::clone(&c.worker), Arc::clone(&c.hung))
        };
        hung.store(true, std::sync::atomic::Ordering::SeqCst);
        worker.shutdown().await;
    }

    /// A new worker behind the same wire (the supervisor's restart).
    fn reconnect(&self) {
        *self.conn.lock().unwrap() = worker(&self.root);
    }

    fn seen(&self) -> Vec<&'static str> {
        self.seen.lock().unwrap().clone()
    }
}

/// The wire as the gateway holds it.
struct Shared(Arc<MemWire>);

impl Wire for Shared {
    fn call(&self, call: Call) -> BoxFuture<'_, Result<Reply, RunnerError>> {
        Box::pin(async move {
            self.0.seen.lock().unwrap().push(call.method());
            let (worker, mut gone, hung) = {
                let c = self.0.conn.lock().unwrap();
                (
                    Arc::clone(&c.worker),
                    c.gone.subscribe(),
                    Arc::clone(&c.hung),
                )
            };
            if hung.load(std::sync::atomic::Ordering::SeqCst) {
                // A hung worker answers nothing, however late the call.
                std::future::pending::<()>().await;
            }
            if *gone.borrow() {
                return Err(RunnerError::unavailable("the worker disconnected"));
            }
            // Both ways in the worker wire's encoding (MessagePack, bytes as binary strings).
            use codespace_runner_worker::frame::{decode_body, encode_body};
            let sent = encode_body(&call).unwrap();
            let call: Call = decode_body(&sent).unwrap();
            let served = async move {
                let reply = serve_call(&*worker, call).await;
                encode_body(&reply).unwrap()
            };
            let back = tokio::select! {
                back = served => Some(back),
                _ = gone.changed() => None,
            };
            let gone_now = *gone.borrow();
            match back {
                Some(_) if hung.load(std::sync::atomic::Ordering::SeqCst) => {
                    // A dead worker answers nothing.
                    std::future::pending::<()>().await;
                    unreachable!()
                }
                Some(back) if !gone_now => Ok(decode_body(&back).unwrap()),
                _ => Err(RunnerError::unavailable("the worker disconnected")),
            }
        })
    }
    fn subscribe(&self, _sink: EventSink) {}
}

struct Env {
    _dir: tempfile::TempDir,
    store: Arc<Store>,
    wire: Arc<MemWire>,
    gw: Gateway,
}

fn env() -> Env {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    std::fs::create_dir(&root).unwrap();
    let root = std::fs::canonicalize(&root).unwrap();
    let store = Arc::new(Store::open(&dir.path().join("store.db")).unwrap());
    let json = format!(
        r#"{{"environments": {{"box": {{"kind": "host"}}}},
            "workspaces": {{"w": {{"root": "{}", "profile": "workspace-write",
            "environment": "box", "sandbox": "off", "secret_masking": "off"}}}}}}"#,
        root.display()
    );
    let cfg = Config::from_json(&json, Path::new("/")).unwrap();
    let wire = MemWire::new(&root);
    let remote: Arc<dyn Runner> = Arc::new(RemoteRunner::new(Shared(Arc::clone(&wire))));
    let gw = Gateway::new(
        cfg,
        Arc::new(PolicyStore::load(PolicySource::Embedded).unwrap()),
        Some(Arc::clone(&store)),
        SandboxFacts {
            sandbox_enforced: false,
            network_enforced: false,
            masking_enforced: false,
        },
    )
    .unwrap();
    let gw = codespace_engine::gateway::processes::with_runner(gw, "box", remote);
    Env {
        _dir: dir,
        store,
        wire,
        gw,
    }
}

async fn call(gw: &Gateway, name: &str, args: Value) -> Result<Value, ToolError> {
    gw.call(&Session::stdio(), ToolCall::parse(name, &args).unwrap())
        .await
        .map(|r| serde_json::to_value(r).unwrap())
}

async fn exec(gw: &Gateway, args: Value) -> Value {
    let mut args = args;
    args["workspace_id"] = json!("w");
    call(gw, "exec_command", args).await.unwrap()
}

/// Reads from `cursor` until `want` shows up in the output or it ends.
async fn read_until(gw: &Gateway, id: &str, cursor: u64, want: &str) -> (String, u64) {
    let mut text = String::new();
    let mut cursor = cursor;
    loop {
        let r = call(
            gw,
            "read_process",
            json!({"process_id": id, "cursor": cursor, "wait_ms": 10000}),
        )
        .await
        .unwrap();
        text.push_str(r["chunk"].as_str().unwrap());
        cursor = r["cursor"].as_u64().unwrap();
        if text.contains(want) || r["eof"] == json!(true) {
            return (text, cursor);
        }
    }
}

#[tokio::test]
async fn pipes_a_pty_stdin_cursors_and_terminate_run_in_the_workers_table() {
    let e = env();
    // Pipes, stderr apart, waited for.
    let r = exec(
        &e.gw,
        json!({"command": ["sh", "-c", "echo out; echo err >&2; exit 3"],
               "stderr": "separate", "yield_ms": 10000}),
    )
    .await;
    assert_eq!(r["state"], "exited", "{r}");
    assert_eq!(r["exit_code"], 3, "{r}");
    assert_eq!(r["chunk"], "out\n", "{r}");
    assert_eq!(r["stderr_chunk"], "err\n", "{r}");
    // stdin and cursors.
    let r = exec(&e.gw, json!({"command": ["cat"]})).await;
    let id = r["process_id"].as_str().unwrap().to_string();
    call(
        &e.gw,
        "write_stdin",
        json!({"process_id": id, "data": "hello\n"}),
    )
    .await
    .unwrap();
    let (text, c1) = read_until(&e.gw, &id, 0, "hello\n").await;
    assert_eq!((text.as_str(), c1), ("hello\n", 6));
    call(
        &e.gw,
        "write_stdin",
        json!({"process_id": id, "data": "x\n"}),
    )
    .await
    .unwrap();
    let (text, c2) = read_until(&e.gw, &id, c1, "x\n").await;
    assert_eq!((text.as_str(), c2), ("x\n", 8));
    let again = call(
        &e.gw,
        "read_process",
        json!({"process_id": id, "cursor": 0}),
    )
    .await
    .unwrap();
    assert_eq!(again["chunk"], "hello\nx\n");
    let tail = call(
        &e.gw,
        "read_process",
        json!({"process_id": id, "tail": true, "max_bytes": 2}),
    )
    .await
    .unwrap();
    assert_eq!(tail["chunk"], "x\n", "{tail}");
    let st = call(&e.gw, "process_status", json!({"process_id": id}))
        .await
        .unwrap();
    assert_eq!(
        (st["state"].clone(), st["output_total"].clone()),
        (json!("running"), json!(8))
    );
    let t = call(&e.gw, "terminate_process", json!({"process_id": id}))
        .await
        .unwrap();
    assert_eq!(t["state"], "exited", "{t}");
    assert_eq!(t["termination"], "terminated", "{t}");
    // A terminal.
    let r = exec(
        &e.gw,
        json!({"command": ["sh", "-c", "tty; read l; echo got:$l"], "tty": true}),
    )
    .await;
    let id = r["process_id"].as_str().unwrap().to_string();
    let (text, cursor) = read_until(&e.gw, &id, 0, "/dev/pts/").await;
    assert!(text.contains("/dev/pts/"), "{text}");
    call(
        &e.gw,
        "process_resize",
        json!({"process_id": id, "rows": 40, "cols": 100}),
    )
    .await
    .unwrap();
    call(
        &e.gw,
        "write_stdin",
        json!({"process_id": id, "data": "abc\n"}),
    )
    .await
    .unwrap();
    let (text, _) = read_until(&e.gw, &id, cursor, "got:abc").await;
    assert!(text.contains("got:abc"), "{text}");
    // Every step crossed the wire; the gateway's own table ran nothing.
    let seen = e.wire.seen();
    for m in [
        "spawn",
        "write_stdin",
        "read_output",
        "status",
        "terminate",
        "resize",
        "wait",
    ] {
        assert!(seen.contains(&m), "{m} never crossed the wire: {seen:?}");
    }
    e.gw.shutdown().await;
    e.wire.cut().await;
}

#[tokio::test]
async fn a_dropped_worker_loses_its_processes_frees_the_lease_and_the_next_call_restarts() {
    let e = env();
    let r = exec(&e.gw, json!({"command": ["sleep", "60"]})).await;
    let id = r["process_id"].as_str().unwrap().to_string();
    // The live foreground process holds the workspace.
    let busy = call(
        &e.gw,
        "exec_command",
        json!({"workspace_id": "w", "command": ["true"]}),
    )
    .await
    .unwrap_err();
    assert_eq!(busy.code, ErrorCode::WorkspaceBusy, "{busy:?}");
    // The worker dies; its supervisor (not the transport) notices, and its disconnect hook
    // tells the gateway.
    e.wire.hang().await;
    assert_eq!(e.gw.environment_lost("box"), 1);
    assert_eq!(e.gw.environment_lost("box"), 0, "lost once");
    let st = call(&e.gw, "process_status", json!({"process_id": id}))
        .await
        .unwrap();
    assert_eq!(st["state"], "lost", "{st}");
    let rd = call(
        &e.gw,
        "read_process",
        json!({"process_id": id, "wait_ms": 1000}),
    )
    .await
    .unwrap();
    assert_eq!(
        (rd["state"].clone(), rd["eof"].clone()),
        (json!("lost"), json!(true)),
        "{rd}"
    );
    let w = call(&e.gw, "write_stdin", json!({"process_id": id, "data": "x"}))
        .await
        .unwrap_err();
    assert_eq!(w.code, ErrorCode::ProcessNotRunning, "{w:?}");
    let t = call(&e.gw, "terminate_process", json!({"process_id": id}))
        .await
        .unwrap();
    assert_eq!(t["state"], "lost", "{t}");
    // The store says lost (written off the async workers: wait for it).
    let mut row = None;
    for _ in 0..200 {
        row = e.store.process(&id).unwrap();
        if row.as_ref().is_some_and(|r| r.state == "lost") {
            break;
        }
        tokio::task::yield_now().await;
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(row.map(|r| r.state), Some("lost".to_string()));
    // The next call runs on a new worker: the lease was released.
    e.wire.reconnect();
    let r = exec(
        &e.gw,
        json!({"command": ["sh", "-c", "echo again"], "yield_ms": 10000}),
    )
    .await;
    assert_eq!(
        (r["state"].clone(), r["chunk"].clone()),
        (json!("exited"), json!("again\n")),
        "{r}"
    );
    // The lost id is never served by the new worker.
    let st = call(&e.gw, "process_status", json!({"process_id": id}))
        .await
        .unwrap();
    assert_eq!(st["state"], "lost", "{st}");
    e.gw.shutdown().await;
    e.wire.cut().await;
}

#[tokio::test]
async fn a_call_that_finds_the_worker_gone_reports_the_process_lost_without_the_hook() {
    let e = env();
    let r = exec(&e.gw, json!({"command": ["sleep", "60"]})).await;
    let id = r["process_id"].as_str().unwrap().to_string();
    e.wire.cut().await;
    let rd = call(&e.gw, "read_process", json!({"process_id": id}))
        .await
        .unwrap();
    assert_eq!(rd["state"], "lost", "{rd}");
    let st = call(&e.gw, "process_status", json!({"process_id": id}))
        .await
        .unwrap();
    assert_eq!(st["state"], "lost", "{st}");
    // Already lost: the hook finds nothing left to lose.
    assert_eq!(e.gw.environment_lost("box"), 0);
    e.wire.reconnect();
    let r = exec(&e.gw, json!({"command": ["true"], "yield_ms": 10000})).await;
    assert_eq!(r["state"], "exited", "{r}");
    e.gw.shutdown().await;
    e.wire.cut().await;
}
