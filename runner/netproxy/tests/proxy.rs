//! The egress proxy against local listeners: tunnels, absolute-form requests, refusals, limits
// Test helpers outside #[test] fns assert with unwrap/panic like the tests themselves.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]
//! and connections handed over a control socket.

use std::io::{ErrorKind, IoSlice};
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use codespace_runner_netproxy::{
    Decider, IpClass, Lookup, Name, ProcessProxy, ProxyLimits, Refusal, Resolver, Scheme,
    SystemResolver, Target, Verdict, control_pair,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Allows one port; records every target it was asked about (names before lookup in `names`,
/// names that did not resolve in `unresolved`).
struct OnePort {
    port: u16,
    seen: Mutex<Vec<Target>>,
    names: Mutex<Vec<Name>>,
    unresolved: Mutex<Vec<(Name, String)>>,
}

impl Decider for OnePort {
    fn decide_name(&self, name: &Name) -> Verdict {
        self.names.lock().unwrap().push(name.clone());
        if name.port == self.port {
            Verdict::Allow
        } else {
            Verdict::Deny {
                body: r#"{"code":"UNAUTHORIZED","policy_ids":["test.forbid.name"]}"#.into(),
            }
        }
    }
    fn unresolved(&self, name: &Name, message: &str) -> String {
        self.unresolved
            .lock()
            .unwrap()
            .push((name.clone(), message.to_string()));
        format!(r#"{{"unresolved":"{}"}}"#, name.host)
    }
    fn decide(&self, target: &Target) -> Verdict {
        self.seen.lock().unwrap().push(target.clone());
        if target.port == self.port {
            Verdict::Allow
        } else {
            Verdict::Deny {
                body: r#"{"code":"UNAUTHORIZED","policy_ids":["test.forbid"]}"#.into(),
            }
        }
    }
    fn refusal_body(&self, refusal: Refusal, message: &str) -> String {
        format!(r#"{{"refusal":"{refusal:?}","message":"{message}"}}"#)
    }
}

/// An echo server: returns its address.
async fn echo_server() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

/// A proxy listening on loopback for `decider`.
async fn proxy(decider: Arc<OnePort>, limits: ProxyLimits) -> (SocketAddr, Arc<ProcessProxy>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let p = ProcessProxy::new(decider, limits);
    let served = Arc::clone(&p);
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = l.accept().await else { return };
            tokio::spawn(Arc::clone(&served).serve(s));
        }
    });
    (addr, p)
}

async fn read_head(s: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let mut b = [0u8; 1];
    while !out.ends_with(b"\r\n\r\n") {
        if s.read(&mut b).await.unwrap() == 0 {
            break;
        }
        out.push(b[0]);
    }
    String::from_utf8(out).unwrap()
}

async fn read_all(s: &mut TcpStream) -> String {
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
        .await
        .unwrap()
        .unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

fn decider(port: u16) -> Arc<OnePort> {
    Arc::new(OnePort {
        port,
        seen: Mutex::new(Vec::new()),
        names: Mutex::new(Vec::new()),
        unresolved: Mutex::new(Vec::new()),
    })
}

/// The system resolver, with a record of every name the proxy handed it (what reached DNS).
#[derive(Default)]
struct Observed {
    asked: Mutex<Vec<String>>,
}

impl Resolver for Observed {
    fn lookup<'a>(&'a self, host: &'a str, port: u16) -> Lookup<'a> {
        self.asked.lock().unwrap().push(host.to_string());
        SystemResolver.lookup(host, port)
    }
}

async fn connect_through(proxy: SocketAddr, authority: &str) -> String {
    let mut c = TcpStream::connect(proxy).await.unwrap();
    c.write_all(format!("CONNECT {authority} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let head = read_head(&mut c).await;
    c.shutdown().await.unwrap();
    head + &read_all(&mut c).await
}

/// Security round 3, item 5: a name is decided before it is looked up. A refused name reaches no
/// resolver (no DNS query leaves), an allowed one is looked up once and decided again on its
/// address, and one that does not resolve is reported to the decider (which audits it) and
/// answered `502` with the decider's body. Address literals are never looked up.
#[tokio::test]
async fn a_name_is_decided_before_it_is_looked_up_and_a_refused_one_never_reaches_dns() {
    // An echo server on the first address `localhost` resolves to (the one the proxy picks).
    let local = tokio::net::lookup_host(("localhost", 0))
        .await
        .unwrap()
        .next()
        .unwrap();
    let l = TcpListener::bind(local).await.unwrap();
    let echo = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    let d = decider(echo.port());
    let resolver = Arc::new(Observed::default());
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let p = ProcessProxy::with_resolver(
        Arc::clone(&d) as Arc<dyn Decider>,
        Arc::clone(&resolver) as Arc<dyn Resolver>,
        ProxyLimits::default(),
    );
    let served = Arc::clone(&p);
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            tokio::spawn(Arc::clone(&served).serve(s));
        }
    });

    // Refused by name: 403 with the decider's body, nothing looked up, never decided on an address.
    let other = echo.port().wrapping_add(1).max(1);
    let out = connect_through(addr, &format!("secret-data.exfil.example:{other}")).await;
    assert!(out.starts_with("HTTP/1.1 403"), "{out}");
    assert!(out.contains("test.forbid.name"), "{out}");
    assert!(
        resolver.asked.lock().unwrap().is_empty(),
        "a refused name reached the resolver"
    );
    assert!(d.seen.lock().unwrap().is_empty());

    // Allowed by name: looked up once, then decided on the address and connected.
    let out = connect_through(addr, &format!("localhost:{}", echo.port())).await;
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert_eq!(
        *resolver.asked.lock().unwrap(),
        vec!["localhost".to_string()]
    );
    let seen = d.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!((seen[0].addr, seen[0].ip_class), (echo, IpClass::Loopback));

    // Allowed by name but unresolvable: 502 with the decider's (audited) body.
    let out = connect_through(addr, &format!("no-such-host.invalid:{}", echo.port())).await;
    assert!(out.starts_with("HTTP/1.1 502"), "{out}");
    assert!(
        out.contains(r#"{"unresolved":"no-such-host.invalid"}"#),
        "{out}"
    );
    let unresolved = d.unresolved.lock().unwrap().clone();
    assert_eq!(unresolved.len(), 1);
    assert_eq!(unresolved[0].0.host, "no-such-host.invalid");
    assert!(
        unresolved[0]
            .1
            .contains("cannot resolve no-such-host.invalid")
    );
    assert_eq!(
        d.seen.lock().unwrap().len(),
        1,
        "an unresolved name was decided"
    );

    // An address literal is never looked up and has no name phase.
    let out = connect_through(addr, &format!("127.0.0.1:{other}")).await;
    assert!(out.starts_with("HTTP/1.1 403"), "{out}");
    assert_eq!(resolver.asked.lock().unwrap().len(), 2);
    let names: Vec<String> = d
        .names
        .lock()
        .unwrap()
        .iter()
        .map(|n| n.host.clone())
        .collect();
    assert_eq!(
        names,
        [
            "secret-data.exfil.example",
            "localhost",
            "no-such-host.invalid"
        ]
    );
    assert_eq!(p.counters().denied, 2);
}

#[tokio::test]
async fn an_allowed_connect_tunnels_bytes_and_counts_them() {
    let echo = echo_server().await;
    let d = decider(echo.port());
    let (addr, p) = proxy(Arc::clone(&d), ProxyLimits::default()).await;
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(
        format!(
            "CONNECT 127.0.0.1:{} HTTP/1.1\r\nHost: x\r\n\r\n",
            echo.port()
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let head = read_head(&mut c).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    c.write_all(b"ping").await.unwrap();
    let mut got = [0u8; 4];
    c.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"ping");
    c.shutdown().await.unwrap();
    let rest = read_all(&mut c).await;
    assert!(rest.is_empty());
    let seen = d.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].scheme, Scheme::Connect);
    assert_eq!(seen[0].ip_class, IpClass::Loopback);
    assert_eq!(seen[0].addr, echo);
    let n = p.counters();
    assert_eq!(
        (n.connections, n.bytes_out, n.bytes_in, n.denied),
        (1, 4, 4, 0)
    );
}

#[tokio::test]
async fn a_denied_target_gets_403_with_the_decider_body_and_is_never_connected() {
    let echo = echo_server().await;
    let unused = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    unused.set_nonblocking(true).unwrap();
    let port = unused.local_addr().unwrap().port();
    let d = decider(echo.port());
    let (addr, p) = proxy(d, ProxyLimits::default()).await;
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let reply = read_all(&mut c).await;
    assert!(reply.starts_with("HTTP/1.1 403 Forbidden"), "{reply}");
    assert!(
        reply.ends_with(r#"{"code":"UNAUTHORIZED","policy_ids":["test.forbid"]}"#),
        "{reply}"
    );
    // The refusal was written before any connect could have been queued on the listener.
    assert_eq!(unused.accept().unwrap_err().kind(), ErrorKind::WouldBlock);
    let n = p.counters();
    assert_eq!((n.connections, n.denied, n.bytes_out), (1, 1, 0));
}

#[tokio::test]
async fn an_absolute_form_request_reaches_the_origin_in_origin_form() {
    let origin = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let oaddr = origin.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (mut s, _) = origin.accept().await.unwrap();
        let head = read_head(&mut s).await;
        s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
            .await
            .unwrap();
        s.shutdown().await.unwrap();
        head
    });
    let (addr, p) = proxy(decider(oaddr.port()), ProxyLimits::default()).await;
    let mut c = TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "GET http://127.0.0.1:{}/file?x=1 HTTP/1.1\r\nHost: 127.0.0.1\r\nProxy-Connection: keep-alive\r\n\r\n",
        oaddr.port()
    );
    c.write_all(req.as_bytes()).await.unwrap();
    let reply = read_all(&mut c).await;
    assert!(reply.ends_with("hello"), "{reply}");
    let head = server.await.unwrap();
    assert!(head.starts_with("GET /file?x=1 HTTP/1.1\r\n"), "{head}");
    assert!(head.contains("Connection: close\r\n"), "{head}");
    assert!(
        !head.to_ascii_lowercase().contains("proxy-connection"),
        "{head}"
    );
    let n = p.counters();
    assert_eq!(n.bytes_in, reply.len() as u64);
    assert_eq!(n.bytes_out, head.len() as u64);
}

#[tokio::test]
async fn bad_requests_get_400_and_are_not_decided() {
    let d = decider(1);
    let (addr, _p) = proxy(Arc::clone(&d), ProxyLimits::default()).await;
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(b"GET /relative HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    let reply = read_all(&mut c).await;
    assert!(reply.starts_with("HTTP/1.1 400"), "{reply}");
    assert!(reply.contains("BadRequest"), "{reply}");
    assert!(d.seen.lock().unwrap().is_empty());
}

#[tokio::test]
async fn connections_over_the_cap_get_429() {
    let echo = echo_server().await;
    let limits = ProxyLimits {
        max_connections: 1,
        ..ProxyLimits::default()
    };
    let (addr, p) = proxy(decider(echo.port()), limits).await;
    let mut first = TcpStream::connect(addr).await.unwrap();
    first
        .write_all(format!("CONNECT 127.0.0.1:{} HTTP/1.1\r\n\r\n", echo.port()).as_bytes())
        .await
        .unwrap();
    assert!(read_head(&mut first).await.starts_with("HTTP/1.1 200"));
    let mut second = TcpStream::connect(addr).await.unwrap();
    let reply = read_all(&mut second).await;
    assert!(reply.starts_with("HTTP/1.1 429"), "{reply}");
    assert_eq!(p.counters().denied, 1);
}

#[tokio::test]
async fn an_idle_tunnel_is_closed() {
    let echo = echo_server().await;
    let limits = ProxyLimits {
        idle_timeout: Duration::from_millis(200),
        ..ProxyLimits::default()
    };
    let (addr, _p) = proxy(decider(echo.port()), limits).await;
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(format!("CONNECT 127.0.0.1:{} HTTP/1.1\r\n\r\n", echo.port()).as_bytes())
        .await
        .unwrap();
    assert!(read_head(&mut c).await.starts_with("HTTP/1.1 200"));
    // Nothing is sent: the proxy closes the tunnel, so the read ends.
    assert_eq!(read_all(&mut c).await, "");
}

#[tokio::test]
async fn a_large_transfer_streams_through_and_is_counted() {
    let echo = echo_server().await;
    let (addr, p) = proxy(decider(echo.port()), ProxyLimits::default()).await;
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(format!("CONNECT 127.0.0.1:{} HTTP/1.1\r\n\r\n", echo.port()).as_bytes())
        .await
        .unwrap();
    assert!(read_head(&mut c).await.starts_with("HTTP/1.1 200"));
    let (mut r, mut w) = c.into_split();
    const N: usize = 16 << 20;
    let writer = tokio::spawn(async move {
        let chunk = vec![7u8; 1 << 16];
        for _ in 0..N / chunk.len() {
            w.write_all(&chunk).await.unwrap();
        }
        w.shutdown().await.unwrap();
    });
    let mut total = 0usize;
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = r.read(&mut buf).await.unwrap();
        if n == 0 {
            break;
        }
        total += n;
    }
    writer.await.unwrap();
    assert_eq!(total, N);
    let n = p.counters();
    assert_eq!((n.bytes_out, n.bytes_in), (N as u64, N as u64));
}

#[tokio::test]
async fn connections_handed_over_the_control_socket_are_served_until_it_closes() {
    use rustix::net::{
        AddressFamily, SendAncillaryBuffer, SendAncillaryMessage, SendFlags, SocketFlags,
        SocketType,
    };
    let echo = echo_server().await;
    let d = decider(echo.port());
    let p = ProcessProxy::new(d, ProxyLimits::default());
    let (relay_end, server_end) = rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )
    .unwrap();
    let served = tokio::spawn(Arc::clone(&p).serve_control(server_end));
    // The relay's side: a listener whose accepted connections are passed as descriptors.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
    let (accepted, _) = l.accept().unwrap();
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut anc = SendAncillaryBuffer::new(&mut space);
    let fds = [accepted.as_fd()];
    assert!(anc.push(SendAncillaryMessage::ScmRights(&fds)));
    rustix::net::sendmsg(
        &relay_end,
        &[IoSlice::new(b"c")],
        &mut anc,
        SendFlags::empty(),
    )
    .unwrap();
    drop(accepted);
    c.write_all(format!("CONNECT 127.0.0.1:{} HTTP/1.1\r\n\r\n", echo.port()).as_bytes())
        .await
        .unwrap();
    assert!(read_head(&mut c).await.starts_with("HTTP/1.1 200"));
    c.write_all(b"via relay").await.unwrap();
    let mut got = [0u8; 9];
    c.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"via relay");
    drop(relay_end);
    tokio::time::timeout(Duration::from_secs(10), served)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(p.counters().connections, 1);
}

/// `len` bytes that differ from offset to offset (a reordered, lost or duplicated block shows).
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i % 251) as u8 ^ seed.wrapping_mul((i / 4096) as u8))
        .collect()
}

/// An origin for one connection: reads to the client's end of stream, then answers `reply`
/// and closes. Returns everything it read.
async fn read_then_answer(reply: Vec<u8>) -> (SocketAddr, tokio::task::JoinHandle<Vec<u8>>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let served = tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.unwrap();
        s.write_all(&reply).await.unwrap();
        s.shutdown().await.unwrap();
        got
    });
    (addr, served)
}

#[tokio::test]
async fn a_connect_tunnel_relays_mebibytes_exactly_both_ways_across_a_half_close() {
    const UP: usize = 6 << 20;
    const DOWN: usize = 9 << 20;
    let up = pattern(UP, 5);
    let down = pattern(DOWN, 11);
    let (origin, received) = read_then_answer(down.clone()).await;
    let (addr, p) = proxy(decider(origin.port()), ProxyLimits::default()).await;
    let mut c = TcpStream::connect(addr).await.unwrap();
    // The first payload bytes ride in the same write as the CONNECT head: the proxy reads them
    // with the head and must send them first.
    let mut first = format!("CONNECT 127.0.0.1:{} HTTP/1.1\r\n\r\n", origin.port()).into_bytes();
    first.extend_from_slice(&up[..1000]);
    c.write_all(&first).await.unwrap();
    assert!(read_head(&mut c).await.starts_with("HTTP/1.1 200"));
    let (mut r, mut w) = c.into_split();
    let rest = up[1000..].to_vec();
    let writer = tokio::spawn(async move {
        w.write_all(&rest).await.unwrap();
        // Half-close: the origin answers only once it saw this end of stream, so the answer
        // proves the proxy passed the shutdown on while keeping the other direction open.
        w.shutdown().await.unwrap();
        w
    });
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), r.read_to_end(&mut got))
        .await
        .unwrap()
        .unwrap();
    let _w = writer.await.unwrap();
    let seen = received.await.unwrap();
    assert_eq!(seen.len(), UP);
    assert!(
        seen == up,
        "the origin got other bytes than the client sent"
    );
    assert_eq!(got.len(), DOWN);
    assert!(
        got == down,
        "the client got other bytes than the origin sent"
    );
    let n = p.counters();
    assert_eq!(
        (n.connections, n.bytes_out, n.bytes_in, n.denied),
        (1, UP as u64, DOWN as u64, 0)
    );
}

#[tokio::test]
async fn an_absolute_form_upload_sends_the_rewritten_head_then_the_body_exactly() {
    const BODY: usize = 4 << 20;
    let body = pattern(BODY, 13);
    let answer = b"HTTP/1.1 204 No Content\r\n\r\n".to_vec();
    let (origin, received) = read_then_answer(answer.clone()).await;
    let (addr, p) = proxy(decider(origin.port()), ProxyLimits::default()).await;
    let c = TcpStream::connect(addr).await.unwrap();
    let (mut r, mut w) = c.into_split();
    // Head and the start of the body in one write, the rest after.
    let mut first = format!(
        "POST http://127.0.0.1:{}/up HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {BODY}\r\n\r\n",
        origin.port()
    )
    .into_bytes();
    first.extend_from_slice(&body[..3000]);
    let rest = body[3000..].to_vec();
    let writer = tokio::spawn(async move {
        w.write_all(&first).await.unwrap();
        w.write_all(&rest).await.unwrap();
        w.shutdown().await.unwrap();
        w
    });
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), r.read_to_end(&mut got))
        .await
        .unwrap()
        .unwrap();
    let _w = writer.await.unwrap();
    assert_eq!(got, answer);
    let seen = received.await.unwrap();
    let split = seen.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8_lossy(&seen[..split]).into_owned();
    assert!(head.starts_with("POST /up HTTP/1.1\r\n"), "{head}");
    assert!(seen[split..] == body[..], "the body arrived altered");
    let n = p.counters();
    assert_eq!(n.bytes_out, seen.len() as u64);
    assert_eq!(n.bytes_in, answer.len() as u64);
}

/// A stand-in for the sandbox relay: a child holding the relay end of a control pair as its
/// stdin. It introduces itself (one message, no descriptor; the server reads its pid from the
/// credentials), prints `sent`, then either exits or waits for the server to close its end.
fn stand_in_relay(relay_end: std::os::fd::OwnedFd, wait: bool) -> std::process::Child {
    let script = if wait {
        "printf p >&0; echo sent; read x"
    } else {
        "printf p >&0; echo sent"
    };
    std::process::Command::new("sh")
        .args(["-c", script])
        .stdin(std::process::Stdio::from(relay_end))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Blocks until `child` printed its `sent` line.
fn wait_sent(child: &mut std::process::Child) {
    use std::io::BufRead;
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "sent\n");
}

fn pid_of(child: &std::process::Child) -> rustix::process::Pid {
    rustix::process::Pid::from_raw(child.id() as i32).unwrap()
}

#[tokio::test]
async fn a_relay_that_closes_its_end_is_reaped_before_serving_returns() {
    let (relay_end, server_end) = control_pair().unwrap();
    let mut child = stand_in_relay(relay_end, false);
    let pid = pid_of(&child);
    let p = ProcessProxy::new(decider(1), ProxyLimits::default());
    tokio::task::spawn_blocking(move || wait_sent(&mut child))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(60), p.serve_control(server_end))
        .await
        .unwrap();
    // The serving task reaped its child (this test process stands in for the server): no
    // zombie is left for anyone to wait for.
    assert_eq!(
        rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::NOHANG).unwrap_err(),
        rustix::io::Errno::CHILD
    );
}

/// Waits (up to a minute) for the process of `pidfd` to be reaped: a pidfd reports POLLHUP once
/// its process is reaped, not merely exited.
async fn reaped(pidfd: std::os::fd::OwnedFd) -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec};
    tokio::task::spawn_blocking(move || {
        let mut fds = [PollFd::new(&pidfd, PollFlags::empty())];
        let limit = Timespec {
            tv_sec: 60,
            tv_nsec: 0,
        };
        rustix::event::poll(&mut fds, Some(&limit)).unwrap();
        fds[0].revents().contains(PollFlags::HUP)
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_is_reaped_once_its_serving_task_is_dropped() {
    let (relay_end, server_end) = control_pair().unwrap();
    let mut child = stand_in_relay(relay_end, true);
    let pidfd =
        rustix::process::pidfd_open(pid_of(&child), rustix::process::PidfdFlags::empty()).unwrap();
    let p = ProcessProxy::new(decider(1), ProxyLimits::default());
    let served = tokio::spawn(p.serve_control(server_end));
    tokio::task::spawn_blocking(move || wait_sent(&mut child))
        .await
        .unwrap();
    // What the server does when the process ends: the serving task is aborted. That closes the
    // control socket (the stand-in's `read` ends) and must leave no zombie behind.
    served.abort();
    assert!(served.await.unwrap_err().is_cancelled());
    assert!(reaped(pidfd).await, "the relay was not reaped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_is_reaped_when_serving_is_dropped_before_it_ever_ran() {
    let (relay_end, server_end) = control_pair().unwrap();
    let mut child = stand_in_relay(relay_end, true);
    let pidfd =
        rustix::process::pidfd_open(pid_of(&child), rustix::process::PidfdFlags::empty()).unwrap();
    tokio::task::spawn_blocking(move || wait_sent(&mut child))
        .await
        .unwrap();
    // The server aborts the task at once when the helper fails: the future may never be polled.
    let p = ProcessProxy::new(decider(1), ProxyLimits::default());
    drop(p.serve_control(server_end));
    assert!(reaped(pidfd).await, "the relay was not reaped");
}
