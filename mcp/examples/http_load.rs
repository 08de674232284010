//! HTTP load driver: N clients, each on its own keep-alive connection with its own session (and
//! its own bearer token), call a tool in a loop for a fixed time; prints calls/s, p50, p99, max
//! and the error count. Starts its own server from a binary on a free loopback port with a
//! temporary workspace, config and store (or drives a running one with `--url`).
//!
//! ```text
//! cargo build --release -p codespace-mcp
//! cargo run --release -p codespace-mcp --example http_load -- \
//!     --bin target/release/codespace --clients 32 --seconds 10
//! cargo run --release -p codespace-mcp --example http_load -- --clients 1 --tool ping
//! ```
//!
//! Exit status 1 when any call failed.
#![allow(clippy::print_stdout, clippy::print_stderr)]

#[path = "../tests/it/http_common/keepalive.rs"]
#[allow(dead_code)]
mod keepalive;

use anyhow::{Context, Result, anyhow, bail};
use keepalive::Conn;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
struct Args {
    bin: Option<String>,
    url: Option<SocketAddr>,
    token: Option<String>,
    clients: usize,
    seconds: f64,
    warmup: f64,
    tool: String,
    file_bytes: usize,
}

fn usage() -> &'static str {
    "usage: http_load [--bin PATH | --url 127.0.0.1:PORT [--token T]] [--clients N] [--seconds S] \
     [--warmup S] [--tool read|ping] [--file-bytes N]"
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        bin: None,
        url: None,
        token: None,
        clients: 32,
        seconds: 10.0,
        warmup: 1.0,
        tool: "read".into(),
        file_bytes: 10 * 1024,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .ok_or_else(|| anyhow!("{flag} needs a value\n{}", usage()))
        };
        match flag.as_str() {
            "--bin" => a.bin = Some(value()?),
            "--url" => {
                let v = value()?;
                let v = v.trim_start_matches("http://").trim_end_matches("/mcp");
                a.url = Some(v.parse().context("--url: expected IP:PORT")?);
            }
            "--token" => a.token = Some(value()?),
            "--clients" => a.clients = value()?.parse()?,
            "--seconds" => a.seconds = value()?.parse()?,
            "--warmup" => a.warmup = value()?.parse()?,
            "--tool" => a.tool = value()?,
            "--file-bytes" => a.file_bytes = value()?.parse()?,
            "-h" | "--help" => {
                println!("{}", usage());
                std::process::exit(0);
            }
            other => bail!("unknown argument {other}\n{}", usage()),
        }
    }
    if !matches!(a.tool.as_str(), "read" | "ping") {
        bail!("--tool must be read or ping");
    }
    if a.clients == 0 {
        bail!("--clients must be at least 1");
    }
    Ok(a)
}

/// A server started for the run, stopped (SIGTERM) when dropped.
struct Server {
    child: Child,
    addr: SocketAddr,
    tokens: Vec<String>,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            // SIGTERM: a clean shutdown drains the audit queue.
            let _ = Command::new("kill").arg(pid.to_string()).status();
        }
        let _ = self.child.wait();
    }
}

fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

fn start_server(bin: &str, clients: usize, file_bytes: usize) -> Result<Server> {
    let dir = tempfile::tempdir()?;
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws)?;
    std::fs::write(ws.join("a.txt"), "x".repeat(file_bytes))?;
    let tokens: Vec<String> = (0..clients)
        .map(|i| format!("load-token-{i:04}-0123456789abcdef"))
        .collect();
    let mut cl = serde_json::Map::new();
    for (i, t) in tokens.iter().enumerate() {
        cl.insert(format!("load{i}"), serde_json::json!({ "token": t }));
    }
    let cfg = serde_json::json!({
        "workspaces": {"main": {"root": ws, "profile": "read-only"}},
        "store": dir.path().join("store.db"),
        "clients": cl,
    });
    let cfg_path = dir.path().join("config.json");
    std::fs::write(&cfg_path, serde_json::to_vec(&cfg)?)?;
    let mut child = Command::new(bin)
        .arg("serve")
        .arg("--config")
        .arg(&cfg_path)
        .args(["--http", "127.0.0.1:0"])
        .env("HOME", dir.path())
        .env("XDG_DATA_HOME", dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start {bin}"))?;
    let stderr = child.stderr.take().ok_or_else(|| anyhow!("no stderr"))?;
    let mut lines = BufReader::new(stderr).lines();
    let addr = loop {
        let Some(line) = lines.next() else {
            bail!("the server exited before listening");
        };
        let line = line?;
        if let Some(rest) = line.split("http://").nth(1) {
            break rest.trim_end_matches("/mcp").parse::<SocketAddr>()?;
        }
    };
    // Keep draining stderr so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Ok(Server {
        child,
        addr,
        tokens,
        _dir: dir,
    })
}

fn request_body(tool: &str, id: u64) -> Vec<u8> {
    match tool {
        "ping" => format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#).into_bytes(),
        _ => format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"read","arguments":{{"workspace_id":"main","path":"a.txt"}}}}}}"#
        )
        .into_bytes(),
    }
}

/// One client: its connection, its session, calls until `end`; latencies of the calls that
/// started after `measure_from`, and errors.
async fn client(
    addr: SocketAddr,
    token: Option<String>,
    tool: String,
    start: Arc<tokio::sync::Barrier>,
    measure_from: Instant,
    end: Instant,
) -> (Vec<Duration>, Vec<String>) {
    let mut lat = Vec::new();
    let mut errors = Vec::new();
    let setup = async {
        let mut c = Conn::connect(addr).await?;
        let sid = c.initialize(token.as_deref()).await?;
        std::io::Result::Ok((c, sid))
    };
    let (mut c, sid) = match setup.await {
        Ok(x) => x,
        Err(e) => {
            start.wait().await;
            return (lat, vec![format!("session: {e}")]);
        }
    };
    start.wait().await;
    let mut id = 0u64;
    while Instant::now() < end {
        id += 1;
        let body = request_body(&tool, id);
        let t = Instant::now();
        let r = c.post(token.as_deref(), Some(&sid), &body).await;
        let took = t.elapsed();
        let ok = match r {
            Err(e) => {
                errors.push(format!("transport: {e}"));
                // The connection is unusable; stop this client.
                break;
            }
            Ok(r) if r.status != 200 => Err(format!("HTTP {}", r.status)),
            Ok(r) => {
                let msgs = r.messages();
                let reply = msgs.iter().find(|m| m.contains(&format!("\"id\":{id}")));
                match reply {
                    None => Err("no reply".to_string()),
                    Some(m) if m.contains("\"error\"") || m.contains("\"isError\":true") => {
                        Err(m.chars().take(200).collect())
                    }
                    Some(_) => Ok(()),
                }
            }
        };
        if let Err(e) = ok {
            errors.push(e);
        }
        if t >= measure_from {
            lat.push(took);
        }
    }
    (lat, errors)
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64) * p / 100.0) as usize;
    sorted
        .get(i.min(sorted.len() - 1))
        .copied()
        .unwrap_or_default()
}

fn main() -> Result<()> {
    let a = parse_args()?;
    let server = match (&a.url, &a.bin) {
        (Some(_), _) => None,
        (None, Some(bin)) => Some(start_server(bin, a.clients, a.file_bytes)?),
        (None, None) => {
            let bin = std::env::var("CODESPACE_BIN").unwrap_or_else(|_| {
                let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
                format!("{target}/release/codespace")
            });
            Some(start_server(&bin, a.clients, a.file_bytes)?)
        }
    };
    let addr = match (&server, a.url) {
        (Some(s), _) => s.addr,
        (None, Some(u)) => u,
        (None, None) => bail!("no server"),
    };
    let token_of = |i: usize| -> Option<String> {
        match &server {
            Some(s) => s.tokens.get(i).cloned(),
            None => a.token.clone(),
        }
    };
    let pid = server.as_ref().map(|s| s.child.id());
    let rss_before = pid.and_then(rss_kib);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let (lat, errors, measured) = rt.block_on(async {
        let start = Arc::new(tokio::sync::Barrier::new(a.clients + 1));
        // Sessions are set up before the clock starts.
        let far = Instant::now() + Duration::from_secs(3600);
        let (measure_tx, measure_rx) = tokio::sync::watch::channel((far, far));
        let mut tasks = Vec::new();
        for i in 0..a.clients {
            let (start, tool, token) = (Arc::clone(&start), a.tool.clone(), token_of(i));
            let mut rx = measure_rx.clone();
            tasks.push(tokio::spawn(async move {
                let _ = rx.changed().await;
                let (from, end) = *rx.borrow();
                client(addr, token, tool, start, from, end).await
            }));
        }
        let begin = Instant::now();
        let from = begin + Duration::from_secs_f64(a.warmup);
        let end = from + Duration::from_secs_f64(a.seconds);
        let _ = measure_tx.send((from, end));
        start.wait().await;
        let mut lat = Vec::new();
        let mut errors = Vec::new();
        for t in tasks {
            match t.await {
                Ok((l, e)) => {
                    lat.extend(l);
                    errors.extend(e);
                }
                Err(e) => errors.push(format!("client task: {e}")),
            }
        }
        (lat, errors, a.seconds)
    });
    let rss_after = pid.and_then(rss_kib);
    let mut lat = lat;
    lat.sort();
    println!(
        "http_load: {} clients, tool {}, {:.1} s measured: {} calls, {:.0} calls/s, {} errors",
        a.clients,
        a.tool,
        measured,
        lat.len(),
        lat.len() as f64 / measured,
        errors.len()
    );
    println!(
        "http_load: latency p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        pct(&lat, 50.0).as_secs_f64() * 1e3,
        pct(&lat, 90.0).as_secs_f64() * 1e3,
        pct(&lat, 99.0).as_secs_f64() * 1e3,
        lat.last().copied().unwrap_or_default().as_secs_f64() * 1e3
    );
    if let (Some(b), Some(e)) = (rss_before, rss_after) {
        println!("http_load: server RSS {b} KiB before, {e} KiB after");
    }
    for e in errors.iter().take(5) {
        println!("http_load: error: {e}");
    }
    drop(server);
    if errors.is_empty() {
        Ok(())
    } else {
        std::process::exit(1)
    }
}
