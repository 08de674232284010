//! Shared helpers of the end-to-end tests: a real gateway (engine + embedded policies + SQLite
//! store) on a temporary workspace, served by `CodeSpaceServer` to an rmcp client over an
//! in-memory duplex pipe whose server-to-client bytes are recorded for wire-level checks.

#![forbid(unsafe_code)]

use anyhow::{Context, Result, anyhow, bail};
use codespace_engine::policy::PolicySource;
use codespace_engine::{Config, Gateway, PolicyStore, SandboxFacts, Session};
use codespace_mcp::server::CodeSpaceServer;
use codespace_store::{DecisionQuery, DecisionRow, Store};
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock};
use rmcp::service::{RoleClient, RunningService};
use rmcp::{ServiceError, ServiceExt};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Longest a single tool call may take before the test fails (a hang is a failure, not a wait).
pub const CALL_DEADLINE: std::time::Duration = std::time::Duration::from_secs(20);

/// Id of the workspace every harness serves.
pub const WS: &str = "w";

/// A connected client, its server and the temporary workspace they share.
pub struct Harness {
    /// Keeps the temporary directory (workspace root, store) alive.
    pub dir: tempfile::TempDir,
    /// The canonical workspace root (must never appear on the wire).
    pub root: PathBuf,
    /// The audit/operation store the gateway writes.
    pub store: Arc<Store>,
    /// The rmcp client.
    pub client: RunningService<RoleClient, ()>,
    wire: Arc<Mutex<Vec<u8>>>,
}

/// How to build a harness.
#[derive(Debug, Clone)]
pub struct Options {
    /// The workspace's permission profile.
    pub profile: String,
    /// Extra fields of the workspace entry in the operator config (e.g. `network`).
    pub workspace_extra: Value,
    /// Place the operator config file inside the workspace (as `codespace.json`).
    pub config_in_workspace: bool,
    /// Create the temporary directory here instead of the system temp dir (e.g. a tmpfs for trees
    /// of tens of thousands of files).
    pub temp_in: Option<PathBuf>,
    /// Load policies from `(policies dir, schema file)` instead of the embedded set.
    pub policies: Option<(PathBuf, PathBuf)>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            profile: "workspace-write".into(),
            workspace_extra: json!({}),
            config_in_workspace: false,
            temp_in: None,
            policies: None,
        }
    }
}

/// The runtime the harness's servers run on, built as `codespace serve` builds its own: worker
/// and blocking threads with `EVAL_STACK_BYTES` of stack, because Cedar evaluates on them (a
/// test thread's default 2 MiB is not what the server decides on, and a debug build's deep
/// futures leave Cedar's stack guard too little of it). One per test process, never dropped.
fn server_runtime() -> Result<&'static tokio::runtime::Runtime> {
    // Built inside `get_or_init`, so a second one is never made and dropped on an async thread.
    static RUNTIME: std::sync::OnceLock<Result<tokio::runtime::Runtime, String>> =
        std::sync::OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("harness-server")
                .thread_stack_size(codespace_engine::policy::EVAL_STACK_BYTES)
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| anyhow!("server runtime: {e}"))
}

/// Copies bytes from `from` to `to`, appending everything to `log`.
async fn pump<R, W>(mut from: R, mut to: W, log: Option<Arc<Mutex<Vec<u8>>>>)
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let Some(chunk) = buf.get(..n) else { break };
        if let Some(Ok(mut l)) = log.as_ref().map(|l| l.lock()) {
            l.extend_from_slice(chunk);
        }
        if to.write_all(chunk).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

impl Harness {
    /// A harness with default options (`workspace-write`); `setup` populates the workspace root.
    pub async fn start(setup: impl FnOnce(&Path) -> Result<()>) -> Result<Harness> {
        Harness::start_with(Options::default(), setup).await
    }

    /// A harness on profile `profile`.
    pub async fn with_profile(
        profile: &str,
        setup: impl FnOnce(&Path) -> Result<()>,
    ) -> Result<Harness> {
        let opts = Options {
            profile: profile.into(),
            ..Options::default()
        };
        Harness::start_with(opts, setup).await
    }

    /// A harness built from `opts`.
    pub async fn start_with(
        opts: Options,
        setup: impl FnOnce(&Path) -> Result<()>,
    ) -> Result<Harness> {
        let dir = match &opts.temp_in {
            Some(base) => tempfile::tempdir_in(base),
            None => tempfile::tempdir(),
        }
        .context("temp dir")?;
        let ws_dir = dir.path().join("ws");
        std::fs::create_dir(&ws_dir)?;
        setup(&ws_dir)?;
        let root = std::fs::canonicalize(&ws_dir)?;
        let store_path = dir.path().join("codespace.db");

        let mut ws_entry = json!({"root": root, "profile": opts.profile});
        if let (Some(entry), Some(extra)) =
            (ws_entry.as_object_mut(), opts.workspace_extra.as_object())
        {
            for (k, v) in extra {
                entry.insert(k.clone(), v.clone());
            }
        }
        let config_json = json!({"workspaces": {WS: ws_entry}, "store": store_path});
        let config_path = if opts.config_in_workspace {
            root.join("codespace.json")
        } else {
            dir.path().join("codespace.json")
        };
        std::fs::write(&config_path, serde_json::to_vec_pretty(&config_json)?)?;
        let config = Config::load(&config_path)?;

        let source = match &opts.policies {
            Some((policies, schema)) => PolicySource::Dir {
                policies: policies.clone(),
                schema: schema.clone(),
            },
            None => PolicySource::Embedded,
        };
        let policy = PolicyStore::load(source)
            .map_err(|e| anyhow!("policies rejected: {}", e.0.join("; ")))?;
        let store = Arc::new(Store::open(&store_path)?);
        let sandbox = SandboxFacts {
            sandbox_enforced: true,
            network_enforced: true,
            masking_enforced: true,
        };
        let gateway = Arc::new(Gateway::new(
            config,
            Arc::new(policy),
            Some(store.clone()),
            sandbox,
        )?);
        let server = CodeSpaceServer::new(gateway, Session::stdio());

        // client <-> tap <-> server; the tap records what the server sends.
        let (server_io, tap_server_side) = tokio::io::duplex(256 * 1024);
        let (tap_client_side, client_io) = tokio::io::duplex(256 * 1024);
        let wire = Arc::new(Mutex::new(Vec::new()));
        let (s_read, s_write) = tokio::io::split(tap_server_side);
        let (c_read, c_write) = tokio::io::split(tap_client_side);
        tokio::spawn(pump(s_read, c_write, Some(wire.clone())));
        tokio::spawn(pump(c_read, s_write, None));
        server_runtime()?.spawn(async move {
            if let Ok(running) = server.serve(server_io).await {
                let _ = running.waiting().await;
            }
        });
        let client = ().serve(client_io).await.context("client initialize")?;
        Ok(Harness {
            dir,
            root,
            store,
            client,
            wire,
        })
    }

    /// Calls `tool` with `args` and returns the raw result.
    pub async fn call(&self, tool: &str, args: Value) -> Result<CallToolResult, ServiceError> {
        let mut params = CallToolRequestParams::new(tool.to_string());
        if let Value::Object(map) = args {
            params = params.with_arguments(map);
        }
        match tokio::time::timeout(CALL_DEADLINE, self.client.call_tool(params)).await {
            Ok(r) => r,
            Err(_) => Err(ServiceError::Timeout {
                timeout: CALL_DEADLINE,
            }),
        }
    }

    /// Calls `tool` and returns its structured result; fails on a tool error.
    pub async fn ok(&self, tool: &str, args: Value) -> Result<Value> {
        let res = self.call(tool, args.clone()).await?;
        if res.is_error == Some(true) {
            bail!("{tool} {args} failed: {}", text_of(&res));
        }
        let structured = res
            .structured_content
            .clone()
            .ok_or_else(|| anyhow!("{tool}: no structuredContent"))?;
        // The text item carries the same JSON.
        let from_text: Value = serde_json::from_str(&text_of(&res))
            .with_context(|| format!("{tool}: text item is not JSON"))?;
        if from_text != structured {
            bail!("{tool}: text item differs from structuredContent");
        }
        Ok(structured)
    }

    /// Calls `tool`, expects a tool error, and returns the parsed ErrorBody.
    pub async fn err(&self, tool: &str, args: Value) -> Result<Value> {
        let res = self.call(tool, args.clone()).await?;
        if res.is_error != Some(true) {
            bail!(
                "{tool} {args}: expected a tool error, got {}",
                serde_json::to_string(&res)?
            );
        }
        let body: Value = serde_json::from_str(&text_of(&res))
            .with_context(|| format!("{tool}: ErrorBody is not JSON"))?;
        Ok(body)
    }

    /// Calls `tool` and returns the ErrorBody code (failing when the call succeeded).
    pub async fn err_code(&self, tool: &str, args: Value) -> Result<String> {
        let body = self.err(tool, args).await?;
        body.get("code")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| anyhow!("ErrorBody without code: {body}"))
    }

    /// Everything the server has sent so far, as text.
    pub fn wire_text(&self) -> String {
        self.wire
            .lock()
            .map(|w| String::from_utf8_lossy(&w).into_owned())
            .unwrap_or_default()
    }

    /// The absolute forms of the workspace location that must never appear on the wire.
    pub fn forbidden_paths(&self) -> Vec<String> {
        let mut v = vec![
            self.root.display().to_string(),
            self.dir.path().display().to_string(),
        ];
        if let Ok(c) = std::fs::canonicalize(self.dir.path()) {
            v.push(c.display().to_string());
        }
        v.sort();
        v.dedup();
        v
    }

    /// Fails when any server output so far contains the workspace's absolute location.
    pub fn check_no_absolute_paths(&self) -> Result<()> {
        let wire = self.wire_text();
        if wire.is_empty() {
            bail!("no server output was recorded");
        }
        for p in self.forbidden_paths() {
            if let Some(at) = wire.find(&p) {
                let from = at.saturating_sub(120);
                let ctx: String = wire.chars().skip(from).take(360).collect();
                bail!("absolute path {p} on the wire: …{ctx}…");
            }
        }
        Ok(())
    }

    /// All audit rows of this harness's store.
    pub fn decisions(&self) -> Result<Vec<DecisionRow>> {
        // Read-only calls' rows are group-committed by the audit writer: flush them first.
        self.store.flush_decisions();
        Ok(self.store.query_decisions(&DecisionQuery::default())?)
    }

    /// Closes the client connection.
    pub async fn close(self) -> Result<()> {
        self.client.cancel().await?;
        Ok(())
    }
}

/// The concatenated text items of a result.
pub fn text_of(res: &CallToolResult) -> String {
    res.content
        .iter()
        .filter_map(|c| match c {
            ContentBlock::Text(t) => Some(t.text.clone()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("")
}

/// Writes `content` to `root/rel`, creating parent directories.
pub fn write_file(root: &Path, rel: &str, content: impl AsRef<[u8]>) -> Result<()> {
    let p = root.join(rel);
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&p, content)?;
    Ok(())
}

/// Creates a FIFO at `root/rel` with the `mkfifo` tool.
pub fn make_fifo(root: &Path, rel: &str) -> Result<()> {
    let status = std::process::Command::new("mkfifo")
        .arg(root.join(rel))
        .status()
        .context("mkfifo")?;
    if !status.success() {
        bail!("mkfifo failed: {status}");
    }
    Ok(())
}

/// Every `null` anywhere in `v`, as JSON pointers.
pub fn null_pointers(v: &Value) -> Vec<String> {
    fn walk(v: &Value, at: String, out: &mut Vec<String>) {
        match v {
            Value::Null => out.push(at),
            Value::Array(a) => {
                for (i, x) in a.iter().enumerate() {
                    walk(x, format!("{at}/{i}"), out);
                }
            }
            Value::Object(m) => {
                for (k, x) in m {
                    walk(x, format!("{at}/{k}"), out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(v, String::new(), &mut out);
    out
}
