//! Shared fixtures of the process and sandbox tests: an in-process gateway whose sandbox helper
//! is the real `codespace` binary, tool-call helpers and bounded polling.
#![allow(dead_code)]

use codespace_engine::{
    Config, ErrorCode, Gateway, PolicySource, PolicyStore, SandboxFacts, Session, ToolCall,
    ToolError,
};
use codespace_store::Store;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The binary under test (also the sandbox helper).
pub const BIN: &str = env!("CARGO_BIN_EXE_codespace");

/// What the kernel offers here.
pub fn sandbox_available() -> bool {
    codespace_runner_sandbox::probe().sandbox_available()
}

/// True (after a skip, which fails under `CODESPACE_REQUIRE_ISOLATION=1`) when the sandbox
/// cannot be enforced here.
pub fn skip_without_sandbox(test: &str) -> bool {
    !codespace_test_skip::require(
        sandbox_available(),
        test,
        "the kernel lacks Landlock or seccomp (codespace_runner_sandbox::probe)",
    )
}

/// One gateway on temp workspaces.
pub struct Env {
    pub dir: tempfile::TempDir,
    /// Root of workspace `w` (canonical).
    pub root: PathBuf,
    pub gw: Arc<Gateway>,
}

/// Options of [`env_with`].
pub struct Opts {
    pub profile: &'static str,
    pub network: &'static str,
    pub limits: Value,
    /// Extra workspaces (ids) sharing the same settings, each with its own root.
    pub extra_workspaces: Vec<&'static str>,
    /// Policies directory to use instead of the embedded set, with operator profiles.
    pub policies: Option<(PathBuf, Value)>,
    /// Extra settings merged into workspace `w`'s config (e.g. `read_paths`, `sandbox`).
    pub workspace: Value,
    /// `secret_masking` of the workspaces (default: `required` where the sandbox runs, else
    /// `off`, because commands cannot be masked without the sandbox helper).
    pub secret_masking: Option<&'static str>,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            profile: "workspace-write",
            network: "restricted",
            limits: json!({}),
            extra_workspaces: Vec::new(),
            policies: None,
            // Without a sandbox the shipped policy forbids every exec; the process tests then
            // run on a workspace whose operator turned the sandbox off (unsandboxed commands).
            workspace: if sandbox_available() {
                json!({})
            } else {
                json!({"sandbox": "off"})
            },
            secret_masking: None,
        }
    }
}

pub fn env() -> Env {
    env_with(Opts::default())
}

pub fn env_with(o: Opts) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let mut workspaces = serde_json::Map::new();
    let mut root0 = PathBuf::new();
    for id in std::iter::once("w").chain(o.extra_workspaces.iter().copied()) {
        let root = dir.path().join(format!("ws-{id}"));
        std::fs::create_dir(&root).unwrap();
        let root = std::fs::canonicalize(&root).unwrap();
        if id == "w" {
            root0 = root.clone();
        }
        let masking = o.secret_masking.unwrap_or(if sandbox_available() {
            "required"
        } else {
            "off"
        });
        let mut ws = json!({"root": root, "profile": o.profile, "network": o.network,
                            "secret_masking": masking});
        if id == "w"
            && let (Value::Object(m), Value::Object(extra)) = (&mut ws, &o.workspace)
        {
            m.extend(extra.clone());
        }
        workspaces.insert(id.to_string(), ws);
    }
    // The store location is in the config as `serve` puts it there, so default homes live beside
    // it (`<dir>/homes/<id>`), outside every path a command may read.
    let store_path = dir.path().join("state").join("store.db");
    std::fs::create_dir(store_path.parent().unwrap()).unwrap();
    let mut cfg = json!({"workspaces": workspaces, "limits": o.limits, "store": store_path});
    let policy = match &o.policies {
        None => PolicySource::Embedded,
        Some((dir, profiles)) => {
            cfg["profiles"] = profiles.clone();
            PolicySource::Dir {
                policies: dir.clone(),
                schema: dir.parent().unwrap().join("schema/codespace.cedarschema"),
            }
        }
    };
    let cfg = Config::from_json(&cfg.to_string(), Path::new("/")).unwrap();
    let policy = Arc::new(PolicyStore::load(policy).unwrap());
    let store = Arc::new(Store::open(&store_path).unwrap());
    let probe = codespace_runner_sandbox::probe();
    let gw = Gateway::new(
        cfg,
        policy,
        Some(store),
        SandboxFacts {
            sandbox_enforced: probe.sandbox_available(),
            network_enforced: probe.network_enforceable(),
            masking_enforced: probe.masking_available(),
        },
    )
    .unwrap()
    .with_helper_exe(PathBuf::from(BIN));
    Env {
        dir,
        root: root0,
        gw: Arc::new(gw),
    }
}

pub fn other_client() -> Session {
    Session {
        client: "someone-else".into(),
        transport: "stdio".into(),
        user: None,
    }
}

pub async fn call_as(
    gw: &Gateway,
    s: &Session,
    name: &str,
    args: Value,
) -> Result<Value, ToolError> {
    gw.call(s, ToolCall::parse(name, &args).unwrap())
        .await
        .map(|r| serde_json::to_value(r).unwrap())
}

pub async fn call(gw: &Gateway, name: &str, args: Value) -> Result<Value, ToolError> {
    call_as(gw, &Session::stdio(), name, args).await
}

pub fn argv(words: &[&str]) -> Value {
    json!(words)
}

/// exec_command on `w` with yield_ms, expecting success.
pub async fn run(gw: &Gateway, words: &[&str], yield_ms: u64) -> Value {
    call(
        gw,
        "exec_command",
        json!({"workspace_id": "w", "command": words, "yield_ms": yield_ms}),
    )
    .await
    .unwrap_or_else(|e| panic!("exec {words:?}: {e}"))
}

/// Runs to completion (bounded) and returns (exit_code, all output).
pub async fn run_to_end(gw: &Gateway, words: &[&str]) -> (Option<i64>, String) {
    let r = run(gw, words, 20_000).await;
    let id = r["process_id"].as_str().unwrap().to_string();
    assert_eq!(
        r["state"], "exited",
        "{words:?} did not finish in time: {r}"
    );
    let mut out = r["chunk"].as_str().unwrap().to_string();
    if r["eof"] != true {
        let (rest, _) = read_all(gw, &id, r["cursor"].as_u64().unwrap()).await;
        out.push_str(&rest);
    }
    (r["exit_code"].as_i64(), out)
}

/// Reads until eof; returns the text and the final cursor.
pub async fn read_all(gw: &Gateway, id: &str, mut cursor: u64) -> (String, u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut out = String::new();
    loop {
        let r = call(
            gw,
            "read_process",
            json!({"process_id": id, "cursor": cursor, "wait_ms": 2000}),
        )
        .await
        .unwrap();
        out.push_str(r["chunk"].as_str().unwrap());
        cursor = r["cursor"].as_u64().unwrap();
        if r["eof"] == true {
            return (out, cursor);
        }
        assert!(Instant::now() < deadline, "no eof in time; got {out:?}");
    }
}

/// Long-polls output until `needle` appears; returns all text read and the cursor.
pub async fn read_until(gw: &Gateway, id: &str, cursor: u64, needle: &str) -> (String, u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut out = String::new();
    let mut cursor = cursor;
    while !out.contains(needle) {
        assert!(
            Instant::now() < deadline,
            "`{needle}` never appeared; got {out:?}"
        );
        let r = call(
            gw,
            "read_process",
            json!({"process_id": id, "cursor": cursor, "wait_ms": 1000}),
        )
        .await
        .unwrap();
        out.push_str(r["chunk"].as_str().unwrap());
        cursor = r["cursor"].as_u64().unwrap();
    }
    (out, cursor)
}

/// Polls process_status until the process exits (bounded); returns the status.
pub async fn wait_exited(gw: &Gateway, id: &str, within: Duration) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let s = call(gw, "process_status", json!({"process_id": id}))
            .await
            .unwrap();
        if s["state"] == "exited" {
            return s;
        }
        assert!(Instant::now() < deadline, "process still running: {s}");
        // Long-poll on output/exit instead of sleeping.
        let _ = call(
            gw,
            "read_process",
            json!({"process_id": id, "cursor": s["output_total"], "wait_ms": 200}),
        )
        .await;
    }
}

/// Retries exec_command until the workspace lease is free (bounded); returns the result.
pub async fn exec_when_free(gw: &Gateway, ws: &str, words: &[&str]) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match call(
            gw,
            "exec_command",
            json!({"workspace_id": ws, "command": words, "yield_ms": 10_000}),
        )
        .await
        {
            Ok(v) => return v,
            Err(e) if e.code == ErrorCode::WorkspaceBusy && Instant::now() < deadline => {
                tokio::task::yield_now().await;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("exec {words:?}: {e}"),
        }
    }
}

/// True while a pid exists and is not a zombie.
pub fn pid_alive(pid: i64) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            // The state follows the `)` that ends the command name.
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z') && !state.starts_with('X')
        }
        Err(_) => false,
    }
}

/// Waits (bounded) until none of `pids` is alive.
pub fn wait_pids_gone(pids: &[i64], within: Duration) -> Vec<i64> {
    let deadline = Instant::now() + within;
    loop {
        let alive: Vec<i64> = pids.iter().copied().filter(|p| pid_alive(*p)).collect();
        if alive.is_empty() || Instant::now() >= deadline {
            return alive;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
