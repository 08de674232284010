//! Round trip of a small worker call against a raw write/read echo on the same stream type:
//! over a Unix socket (worker in this process) and over a spawned child's stdio (this example
//! re-executed as the worker). `cargo run -p codespace-runner-worker --example rtt [-- N]`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use codespace_runner_worker::spawn::{SpawnSpec, spawn};
use codespace_runner_worker::{BoxFuture, Client, Handler, Identity, Secret, serve, unix};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};

struct Ping;
impl Handler for Ping {
    type Req = String;
    type Resp = String;
    type Ev = ();
    fn handle(&self, req: String) -> BoxFuture<'_, String> {
        Box::pin(async move { req })
    }
}

/// Raw echo of 4-byte-length frames.
async fn echo<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(mut r: R, mut w: W) {
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let mut len = [0u8; 4];
        if r.read_exact(&mut len).await.is_err() {
            return;
        }
        let n = u32::from_be_bytes(len) as usize;
        r.read_exact(&mut buf[..n]).await.unwrap();
        w.write_all(&len).await.unwrap();
        w.write_all(&buf[..n]).await.unwrap();
        w.flush().await.unwrap();
    }
}

async fn raw_rtt<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    r: &mut R,
    w: &mut W,
    payload: &[u8],
) {
    let mut frame = (payload.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(payload);
    w.write_all(&frame).await.unwrap();
    w.flush().await.unwrap();
    let mut back = vec![0u8; frame.len()];
    r.read_exact(&mut back).await.unwrap();
}

fn summary(name: &str, mut v: Vec<Duration>) -> f64 {
    v.sort();
    let p50 = v[v.len() / 2].as_secs_f64() * 1e6;
    let p99 = v[v.len() * 99 / 100].as_secs_f64() * 1e6;
    println!("{name:<28} p50 {p50:>8.1} us   p99 {p99:>8.1} us");
    p50
}

async fn time<F: AsyncFnMut()>(n: usize, mut f: F) -> Vec<Duration> {
    for _ in 0..n / 10 {
        f().await;
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        f().await;
        out.push(t.elapsed());
    }
    out
}

const CALL: &str = "ping";
const RAW: &[u8] = br#"{"t":"request","id":1,"body":"ping"}"#;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let me = Identity::this_build();
    match args.get(1).map(String::as_str) {
        Some("--serve-stdio") => {
            let mut input = BufReader::new(tokio::io::stdin());
            let secret = codespace_runner_worker::handshake::read_secret_line(&mut input)
                .await
                .unwrap();
            let _ = serve(input, tokio::io::stdout(), Arc::new(Ping), &secret, &me).await;
            return;
        }
        Some("--echo-stdio") => return echo(tokio::io::stdin(), tokio::io::stdout()).await,
        _ => {}
    }
    let n: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(5000);
    let req = CALL.to_string();

    // Unix socket, worker in this process.
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("w").join("sock");
    let l = unix::bind(&path, rustix::process::geteuid().as_raw()).unwrap();
    let secret = Secret::generate().unwrap();
    let (s2, m2) = (secret.clone(), me.clone());
    tokio::spawn(async move { l.serve_forever(Arc::new(Ping), &s2, &m2).await });
    let (c, _ev) = unix::connect::<String, String, ()>(&path, None, &secret, &me)
        .await
        .unwrap();
    let proto = summary(
        "unix socket: worker call",
        time(n, async || {
            c.call(&req).await.unwrap();
        })
        .await,
    );
    let (a, b) = tokio::net::UnixStream::pair().unwrap();
    let (br, bw) = b.into_split();
    tokio::spawn(echo(br, bw));
    let (mut ar, mut aw) = a.into_split();
    let raw = summary(
        "unix socket: raw echo",
        time(n, async || raw_rtt(&mut ar, &mut aw, RAW).await).await,
    );
    println!("unix socket ratio (call / raw): {:.2}", proto / raw);

    // Spawned child's stdio.
    let exe = std::env::current_exe().unwrap();
    let spec = SpawnSpec {
        argv: vec![exe.clone().into(), "--serve-stdio".into()],
        env: vec![],
    };
    let (c, _ev): (Client<String, String, ()>, _) = spawn(&spec, &secret, &me).await.unwrap();
    let proto = summary(
        "stdio: worker call",
        time(n, async || {
            c.call(&req).await.unwrap();
        })
        .await,
    );
    let mut child = tokio::process::Command::new(&exe)
        .arg("--echo-stdio")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let (mut w, mut r) = (child.stdin.take().unwrap(), child.stdout.take().unwrap());
    let raw = summary(
        "stdio: raw echo",
        time(n, async || raw_rtt(&mut r, &mut w, RAW).await).await,
    );
    println!("stdio ratio (call / raw): {:.2}", proto / raw);
}
