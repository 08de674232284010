//! One process's proxy: counters, connection cap, and the life of one connection (head, a
//! decision on the name, lookup, a decision on the address, connect, then the byte relay of
//! [`crate::pump`]).

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

use crate::http::{self, CONNECT_ESTABLISHED, HeadError};
use crate::pump::{self, Meters, Mode};
use crate::target::{Name, Scheme, Target, classify};

/// A decider's answer for one target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Connect to `Target::addr`.
    Allow,
    /// Answer `403` with this body (the caller's error document) and close.
    Deny {
        /// The response body (JSON).
        body: String,
    },
}

/// A refusal the proxy makes on its own (not a policy decision).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The request head could not be parsed or is not a proxy request (`400`).
    BadRequest,
    /// The head exceeds [`crate::MAX_HEAD_BYTES`] (`431`).
    HeadTooLarge,
    /// The process already has its maximum number of open connections (`429`).
    TooManyConnections,
    /// The host did not resolve or the target did not answer (`502`).
    Unreachable,
    /// The decision itself failed (`403`: fail closed).
    DecisionFailed,
}

impl Refusal {
    /// The HTTP status and reason phrase.
    pub fn status(self) -> (u16, &'static str) {
        match self {
            Refusal::BadRequest => (400, "Bad Request"),
            Refusal::HeadTooLarge => (431, "Request Header Fields Too Large"),
            Refusal::TooManyConnections => (429, "Too Many Requests"),
            Refusal::Unreachable => (502, "Bad Gateway"),
            Refusal::DecisionFailed => (403, "Forbidden"),
        }
    }
}

/// Decides each connection of one process. Implemented by the engine (Cedar + audit).
///
/// A connection to a host *name* is decided twice: [`Decider::decide_name`] before the name is
/// looked up (a refusal there sends no DNS query), then [`Decider::decide`] on the address it
/// resolved to. A connection to an address literal is decided once, by [`Decider::decide`].
pub trait Decider: Send + Sync + 'static {
    /// Decides `target` (its address known). Runs on the blocking pool: it may evaluate policy
    /// and write an audit row. Anything but [`Verdict::Allow`] refuses the connection.
    fn decide(&self, target: &Target) -> Verdict;
    /// Decides whether `name` may be looked up at all, before any DNS query. Runs on the
    /// blocking pool; a refusal must be audited by the decider. Anything but
    /// [`Verdict::Allow`] refuses the connection without a lookup.
    fn decide_name(&self, name: &Name) -> Verdict;
    /// `name` was allowed to be looked up but did not resolve (`message` says why): the
    /// decider audits the refusal and returns the `502` body. Runs on the blocking pool.
    fn unresolved(&self, name: &Name, message: &str) -> String;
    /// The body of a refusal the proxy makes on its own.
    fn refusal_body(&self, refusal: Refusal, message: &str) -> String;
}

/// A resolver's answer: the addresses of a name, in the resolver's order.
pub type Lookup<'a> = Pin<Box<dyn Future<Output = std::io::Result<Vec<SocketAddr>>> + Send + 'a>>;

/// How the proxy looks names up (the system resolver unless a caller supplies another, e.g. to
/// observe which names reach DNS).
pub trait Resolver: Send + Sync + 'static {
    /// The addresses of `host` (a name, never an address literal) on `port`.
    fn lookup<'a>(&'a self, host: &'a str, port: u16) -> Lookup<'a>;
}

/// The system resolver (`getaddrinfo` on the blocking pool, through tokio).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

impl Resolver for SystemResolver {
    fn lookup<'a>(&'a self, host: &'a str, port: u16) -> Lookup<'a> {
        Box::pin(async move { Ok(tokio::net::lookup_host((host, port)).await?.collect()) })
    }
}

/// Limits of one process's proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProxyLimits {
    /// Connections open at once; more get `429`.
    pub max_connections: usize,
    /// A connection with no byte in either direction for this long is closed (also bounds how
    /// long the proxy waits for a request head).
    pub idle_timeout: Duration,
    /// How long connecting to the target may take.
    pub connect_timeout: Duration,
}

impl Default for ProxyLimits {
    fn default() -> Self {
        ProxyLimits {
            max_connections: 64,
            idle_timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(10),
        }
    }
}

/// The counters of one process (`process_status.network`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CounterSnapshot {
    /// Connections the process opened to the proxy (allowed or not).
    pub connections: u64,
    /// Bytes sent by the process to its targets (a forwarded request head included).
    pub bytes_out: u64,
    /// Bytes received by the process from its targets.
    pub bytes_in: u64,
    /// Connections refused: by the decider, or by the proxy's own limits.
    pub denied: u64,
}

#[derive(Debug, Default)]
struct Counters {
    connections: AtomicU64,
    bytes_out: AtomicU64,
    bytes_in: AtomicU64,
    denied: AtomicU64,
}

/// The egress proxy of one process.
pub struct ProcessProxy {
    decider: Arc<dyn Decider>,
    resolver: Arc<dyn Resolver>,
    limits: ProxyLimits,
    counters: Counters,
    open: Arc<Semaphore>,
}

impl std::fmt::Debug for ProcessProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessProxy")
            .field("limits", &self.limits)
            .field("counters", &self.counters())
            .finish()
    }
}

fn add(counter: &AtomicU64, n: usize) {
    counter.fetch_add(u64::try_from(n).unwrap_or(u64::MAX), Ordering::Relaxed);
}

impl ProcessProxy {
    /// A proxy for one process, looking names up with the system resolver.
    pub fn new(decider: Arc<dyn Decider>, limits: ProxyLimits) -> Arc<ProcessProxy> {
        ProcessProxy::with_resolver(decider, Arc::new(SystemResolver), limits)
    }

    /// A proxy for one process that looks names up with `resolver`.
    pub fn with_resolver(
        decider: Arc<dyn Decider>,
        resolver: Arc<dyn Resolver>,
        limits: ProxyLimits,
    ) -> Arc<ProcessProxy> {
        Arc::new(ProcessProxy {
            decider,
            resolver,
            limits,
            counters: Counters::default(),
            open: Arc::new(Semaphore::new(limits.max_connections)),
        })
    }

    /// The counters so far.
    pub fn counters(&self) -> CounterSnapshot {
        CounterSnapshot {
            connections: self.counters.connections.load(Ordering::Relaxed),
            bytes_out: self.counters.bytes_out.load(Ordering::Relaxed),
            bytes_in: self.counters.bytes_in.load(Ordering::Relaxed),
            denied: self.counters.denied.load(Ordering::Relaxed),
        }
    }

    async fn refuse(&self, client: &mut TcpStream, refusal: Refusal, message: &str) {
        let (status, reason) = refusal.status();
        let body = self.decider.refusal_body(refusal, message);
        let _ = client
            .write_all(&http::response(status, reason, &body))
            .await;
        let _ = client.shutdown().await;
    }

    /// Serves one client connection to its end.
    pub async fn serve(self: Arc<Self>, mut client: TcpStream) {
        self.counters.connections.fetch_add(1, Ordering::Relaxed);
        let Ok(_permit) = Arc::clone(&self.open).try_acquire_owned() else {
            self.counters.denied.fetch_add(1, Ordering::Relaxed);
            let msg = format!(
                "this process already has {} proxy connections open",
                self.limits.max_connections
            );
            self.refuse(&mut client, Refusal::TooManyConnections, &msg)
                .await;
            return;
        };
        let mut buf = Vec::new();
        let head = tokio::time::timeout(
            self.limits.idle_timeout,
            http::read_head(&mut client, &mut buf),
        )
        .await;
        let head_len = match head {
            Ok(Ok(n)) => n,
            Ok(Err(HeadError::TooLarge)) => {
                let msg = format!("request head larger than {} bytes", http::MAX_HEAD_BYTES);
                self.refuse(&mut client, Refusal::HeadTooLarge, &msg).await;
                return;
            }
            Ok(Err(HeadError::Closed)) | Err(_) => return,
        };
        let request = match http::parse_request(buf.get(..head_len).unwrap_or_default()) {
            Ok(r) => r,
            Err(why) => {
                self.refuse(&mut client, Refusal::BadRequest, &why).await;
                return;
            }
        };
        let addr = match request.host.parse::<IpAddr>() {
            Ok(ip) => SocketAddr::new(ip, request.port),
            Err(_) => {
                let name = Name {
                    host: request.host.clone(),
                    port: request.port,
                    scheme: request.scheme,
                };
                match self.name_phase(&mut client, name).await {
                    Some(addr) => addr,
                    None => return,
                }
            }
        };
        let target = Target {
            host: request.host.clone(),
            port: request.port,
            scheme: request.scheme,
            addr,
            ip_class: classify(addr.ip()),
        };
        let decider = Arc::clone(&self.decider);
        let decided = target.clone();
        let verdict = tokio::task::spawn_blocking(move || decider.decide(&decided)).await;
        if !self.allowed(&mut client, verdict).await {
            return;
        }
        let connected =
            tokio::time::timeout(self.limits.connect_timeout, TcpStream::connect(addr)).await;
        let mut upstream = match connected {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                let msg = format!(
                    "cannot connect to {}:{}: {}",
                    target.host,
                    target.port,
                    e.kind()
                );
                self.refuse(&mut client, Refusal::Unreachable, &msg).await;
                return;
            }
            Err(_) => {
                let msg = format!("connecting to {}:{} timed out", target.host, target.port);
                self.refuse(&mut client, Refusal::Unreachable, &msg).await;
                return;
            }
        };
        let _ = upstream.set_nodelay(true);
        let _ = client.set_nodelay(true);
        let rest = buf.get(head_len..).unwrap_or_default();
        let sent = match target.scheme {
            Scheme::Connect => {
                if client.write_all(CONNECT_ESTABLISHED).await.is_err() {
                    return;
                }
                upstream.write_all(rest).await.map(|()| rest.len())
            }
            Scheme::Http => {
                let head = &request.forward_head;
                match upstream.write_all(head).await {
                    Ok(()) => upstream
                        .write_all(rest)
                        .await
                        .map(|()| head.len() + rest.len()),
                    Err(e) => Err(e),
                }
            }
        };
        match sent {
            Ok(n) => add(&self.counters.bytes_out, n),
            Err(_) => return,
        }
        drop(buf);
        let meters = Meters {
            out: &self.counters.bytes_out,
            inn: &self.counters.bytes_in,
        };
        let paths = pump::relay(
            &client,
            &upstream,
            meters,
            self.limits.idle_timeout,
            Mode::Splice,
        )
        .await;
        match paths {
            Some((out, inn)) => tracing::debug!(?out, ?inn, "proxied connection ended"),
            None => tracing::debug!("proxied connection closed after the idle timeout"),
        }
    }
}

impl ProcessProxy {
    /// Answers a verdict: true on an allow; otherwise the refusal is sent (`403`, counted as
    /// denied) and false returned.
    async fn allowed(
        &self,
        client: &mut TcpStream,
        verdict: Result<Verdict, tokio::task::JoinError>,
    ) -> bool {
        match verdict {
            Ok(Verdict::Allow) => true,
            Ok(Verdict::Deny { body }) => {
                self.counters.denied.fetch_add(1, Ordering::Relaxed);
                let _ = client
                    .write_all(&http::response(403, "Forbidden", &body))
                    .await;
                let _ = client.shutdown().await;
                false
            }
            Err(_) => {
                self.counters.denied.fetch_add(1, Ordering::Relaxed);
                self.refuse(client, Refusal::DecisionFailed, "the decision failed")
                    .await;
                false
            }
        }
    }

    /// The name phase of a connection to a host name: the decider is asked before any lookup;
    /// only an allowed name is resolved, once (the first address the resolver returns). A name
    /// that does not resolve is reported to the decider (which audits it) and answered `502`.
    /// `None` when the connection was refused (the answer is already sent).
    async fn name_phase(&self, client: &mut TcpStream, name: Name) -> Option<SocketAddr> {
        let decider = Arc::clone(&self.decider);
        let asked = name.clone();
        let verdict = tokio::task::spawn_blocking(move || decider.decide_name(&asked)).await;
        if !self.allowed(client, verdict).await {
            return None;
        }
        let why = match self.resolver.lookup(&name.host, name.port).await {
            Ok(addrs) => match addrs.first() {
                Some(addr) => return Some(*addr),
                None => format!("cannot resolve {}: no address", name.host),
            },
            Err(e) => format!("cannot resolve {}: {e}", name.host),
        };
        let decider = Arc::clone(&self.decider);
        let message = why.clone();
        let body = tokio::task::spawn_blocking(move || decider.unresolved(&name, &message))
            .await
            .unwrap_or_else(|_| self.decider.refusal_body(Refusal::Unreachable, &why));
        let (status, reason) = Refusal::Unreachable.status();
        let _ = client
            .write_all(&http::response(status, reason, &body))
            .await;
        let _ = client.shutdown().await;
        None
    }
}
