//! Shared helpers of the HTTP transport tests: an in-process server on a free loopback port,
//! a raw HTTP/1.1 client (so every header is under the test's control) and MCP call helpers.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    dead_code
)]

pub mod keepalive;

use codespace_engine::policy::{PolicySource, PolicyStore};
use codespace_engine::{Config, Gateway, SandboxFacts};
use codespace_mcp::http::{HttpOptions, HttpServer, TRANSPORT};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub const ACCEPT: &str = "application/json, text/event-stream";

/// A running in-process server and the files behind it.
pub struct TestServer {
    pub addr: SocketAddr,
    pub store: PathBuf,
    pub root: PathBuf,
    pub gateway: Arc<Gateway>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl TestServer {
    /// Commits the queued audit rows, so another connection to the store sees them.
    pub fn flush_audit(&self) {
        self.gateway.flush_audit();
    }

    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            tokio::time::timeout(std::time::Duration::from_secs(10), t)
                .await
                .expect("server stops within 10 s")
                .unwrap();
        }
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

/// Builder of a test server.
pub struct Setup {
    pub clients: Vec<(&'static str, &'static str)>,
    /// Extra base policy files (name, text) added to a copy of the shipped policies.
    pub base_policies: Vec<(&'static str, &'static str)>,
    /// Extra profile policy files (name, text), the same way.
    pub profile_policies: Vec<(&'static str, &'static str)>,
    pub tweak: Box<dyn FnOnce(&mut HttpOptions) + Send>,
    /// Run commands in the real command sandbox (helper = the built `codespace` binary).
    pub sandbox: bool,
    /// The config's `limits` object.
    pub limits: Value,
}

impl Default for Setup {
    fn default() -> Setup {
        Setup {
            clients: Vec::new(),
            base_policies: Vec::new(),
            profile_policies: Vec::new(),
            tweak: Box::new(|_| {}),
            sandbox: false,
            limits: json!({}),
        }
    }
}

impl Setup {
    pub async fn start(self) -> TestServer {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("a.txt"), "hello over http\n").unwrap();
        std::fs::write(root.join("secret-for-ci.txt"), "ci eyes only\n").unwrap();
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        copy_dir(&repo.join("policies"), &dir.path().join("policies"));
        copy_dir(&repo.join("schema"), &dir.path().join("schema"));
        for (name, text) in &self.base_policies {
            std::fs::write(dir.path().join("policies/base").join(name), text).unwrap();
        }
        for (name, text) in &self.profile_policies {
            std::fs::write(dir.path().join("policies/profiles").join(name), text).unwrap();
        }
        let store = dir.path().join("store.db");
        let mut clients = serde_json::Map::new();
        for (name, token) in &self.clients {
            clients.insert((*name).to_string(), json!({ "token": token }));
        }
        let cfg = json!({
            "workspaces": { "main": { "root": root, "profile": "workspace-write" } },
            "policies": dir.path().join("policies"),
            "schema": dir.path().join("schema/codespace.cedarschema"),
            "store": store,
            "clients": clients,
            "limits": self.limits,
        });
        let cfg_path = dir.path().join("config.json");
        std::fs::write(&cfg_path, serde_json::to_vec_pretty(&cfg).unwrap()).unwrap();
        let cfg = Config::load(&cfg_path).unwrap();
        let policy = PolicyStore::load(PolicySource::Dir {
            policies: dir.path().join("policies"),
            schema: dir.path().join("schema/codespace.cedarschema"),
        })
        .unwrap();
        let st = codespace_store::Store::open(&store).unwrap();
        let gateway = Gateway::new(
            cfg,
            Arc::new(policy),
            Some(Arc::new(st)),
            SandboxFacts {
                sandbox_enforced: self.sandbox,
                network_enforced: self.sandbox,
                masking_enforced: self.sandbox,
            },
        )
        .unwrap()
        .with_transports(vec![TRANSPORT.to_string()])
        .with_helper_exe(PathBuf::from(env!("CARGO_BIN_EXE_codespace")));
        let mut opts = HttpOptions::new("127.0.0.1:0".parse().unwrap());
        (self.tweak)(&mut opts);
        let gateway = Arc::new(gateway);
        let server = HttpServer::bind(Arc::clone(&gateway), opts).await.unwrap();
        let addr = server.local_addr();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            server
                .run(async move {
                    let _ = rx.await;
                })
                .await
                .unwrap();
        });
        TestServer {
            addr,
            store,
            root,
            gateway,
            stop: Some(tx),
            task: Some(task),
            _dir: dir,
        }
    }
}

/// One HTTP response.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The JSON-RPC messages in an SSE or JSON body.
    pub fn messages(&self) -> Vec<Value> {
        if self
            .header("content-type")
            .is_some_and(|c| c.starts_with("application/json"))
        {
            return vec![serde_json::from_str(&self.body).unwrap()];
        }
        self.body
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(str::trim)
            .filter(|d| !d.is_empty())
            .map(|d| serde_json::from_str(d).unwrap())
            .collect()
    }

    /// The JSON-RPC response with `id`.
    pub fn reply(&self, id: i64) -> Value {
        self.messages()
            .into_iter()
            .find(|m| m["id"] == json!(id))
            .unwrap_or_else(|| panic!("no reply with id {id} in {self:?}"))
    }
}

fn decode_chunked(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(pos) = raw.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size_line = std::str::from_utf8(&raw[..pos]).unwrap();
        let size = usize::from_str_radix(size_line.split(';').next().unwrap().trim(), 16).unwrap();
        raw = &raw[pos + 2..];
        if size == 0 || raw.len() < size {
            return out;
        }
        out.extend_from_slice(&raw[..size]);
        raw = &raw[(size + 2).min(raw.len())..];
    }
}

/// Parses a complete HTTP/1.1 response read to EOF.
pub fn parse_response(raw: &[u8]) -> Resp {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {:?}", String::from_utf8_lossy(raw)));
    let head = std::str::from_utf8(&raw[..split]).unwrap();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let body_raw = &raw[split + 4..];
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked {
        decode_chunked(body_raw)
    } else {
        body_raw.to_vec()
    };
    Resp {
        status,
        headers,
        body: String::from_utf8_lossy(&body).to_string(),
    }
}

/// Sends one request with `Connection: close` and reads the whole response. `Host` defaults
/// to the bound address; pass `("host", ..)` to override it.
pub async fn http(addr: SocketAddr, method: &str, headers: &[(&str, &str)], body: &str) -> Resp {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut req = format!("{method} /mcp HTTP/1.1\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("Host: {addr}\r\n"));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if method == "POST" {
        req.push_str("Content-Type: application/json\r\n");
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("Connection: close\r\n\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(std::time::Duration::from_secs(20), s.read_to_end(&mut raw))
        .await
        .expect("response within 20 s")
        .unwrap();
    parse_response(&raw)
}

pub fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// POSTs one JSON-RPC message as `token` (None: no Authorization) in session `sid`.
pub async fn post(addr: SocketAddr, token: Option<&str>, sid: Option<&str>, msg: &Value) -> Resp {
    let auth = token.map(bearer);
    let mut h: Vec<(&str, &str)> = vec![("Accept", ACCEPT)];
    if let Some(a) = &auth {
        h.push(("Authorization", a));
    }
    if let Some(s) = sid {
        h.push(("Mcp-Session-Id", s));
        h.push(("MCP-Protocol-Version", "2025-11-25"));
    }
    http(addr, "POST", &h, &msg.to_string()).await
}

pub fn initialize_msg(id: i64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "http-test", "version": "1"}}})
}

/// Initializes a session as `token`; returns its id.
pub async fn initialize(addr: SocketAddr, token: Option<&str>) -> String {
    let r = post(addr, token, None, &initialize_msg(1)).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.reply(1)["result"]["protocolVersion"], "2025-11-25");
    let sid = r.header("mcp-session-id").expect("session id").to_string();
    let n = post(
        addr,
        token,
        Some(&sid),
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    assert_eq!(n.status, 202, "{n:?}");
    sid
}

/// Calls `tool` and returns the JSON-RPC reply.
pub async fn call(
    addr: SocketAddr,
    token: Option<&str>,
    sid: &str,
    id: i64,
    tool: &str,
    args: Value,
) -> Value {
    let r = post(
        addr,
        token,
        Some(sid),
        &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": {"name": tool, "arguments": args}}),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    r.reply(id)
}
