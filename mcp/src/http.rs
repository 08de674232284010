//! Streamable HTTP transport: rmcp's `StreamableHttpService` at `/mcp` under axum, behind one
//! gate that runs before any MCP handling: DNS-rebinding guard (Host/Origin), bearer tokens of
//! the configured clients (constant-time), request body cap, per-client in-flight cap and
//! session ownership. The authenticated client name reaches `call_tool` as an [`HttpClient`]
//! extension of the request parts and becomes `Session.client` (transport `streamable-http`).
//! With `identity.oidc`, a JWT access token of the issuer is accepted too ([`crate::oidc`]):
//! its person rides along as an [`HttpUser`] (`Session.user`), the protected resource metadata
//! (RFC 9728) is served without a token, and every 401 names it in `WWW-Authenticate`.

use crate::console::digest_eq;
use crate::server::CodeSpaceServer;
use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use codespace_engine::{Gateway, Session};
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub use crate::server::{HTTP_TRANSPORT as TRANSPORT, HttpClient, HttpUser};
/// Where the protected resource metadata (RFC 9728) is served (also with the resource's path
/// appended, `…/mcp`, as the RFC derives it from the resource URL).
pub const RESOURCE_METADATA_PATH: &str = "/.well-known/oauth-protected-resource";
/// The default listen address of `serve --http`.
pub const DEFAULT_ADDR: &str = "127.0.0.1:8787";
/// The MCP endpoint path.
pub const MCP_PATH: &str = "/mcp";
/// The client name when no clients are configured (loopback only, unauthenticated).
pub const UNAUTHENTICATED_CLIENT: &str = "local";
/// Default number of requests one client may have in flight.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 64;
/// Default idle time after which a session is closed.
pub const DEFAULT_SESSION_IDLE: Duration = Duration::from_secs(30 * 60);
/// How long shutdown waits for open streams before giving up on them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
const SESSION_HEADER: &str = "mcp-session-id";

/// How to serve HTTP.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Listen address (port 0 picks a free port).
    pub addr: SocketAddr,
    /// Operator-listed public hosts (`HOST` any port, or `HOST:PORT`) accepted in Host/Origin.
    pub allowed_hosts: Vec<String>,
    /// Extra browser origins (`scheme://host[:port]`) accepted in Origin.
    pub allowed_origins: Vec<String>,
    /// Request body cap in bytes (413 beyond); None: the config's `limits.max_message_bytes`.
    pub max_body_bytes: Option<usize>,
    /// Requests one client may have in flight (429 beyond).
    pub max_in_flight_per_client: usize,
    /// Idle time after which a session is closed.
    pub session_idle: Duration,
    /// Sessions one client may hold at once (429 beyond); None: the config's
    /// `limits.max_sessions_per_client`.
    pub max_sessions_per_client: Option<usize>,
}

impl HttpOptions {
    /// Defaults for `addr`.
    pub fn new(addr: SocketAddr) -> HttpOptions {
        HttpOptions {
            addr,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            max_body_bytes: None,
            max_in_flight_per_client: DEFAULT_MAX_IN_FLIGHT,
            session_idle: DEFAULT_SESSION_IDLE,
            max_sessions_per_client: None,
        }
    }
}

/// Why the HTTP server could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// No clients are configured and the address is not loopback.
    #[error(
        "refusing to serve unauthenticated HTTP on the non-loopback address {0}: configure `clients` \
         with tokens, or bind a loopback address such as 127.0.0.1:8787"
    )]
    UnauthenticatedNonLoopback(SocketAddr),
    /// No clients are configured and a workspace's commands may use the network: they could
    /// call this server's own unauthenticated loopback endpoint.
    #[error(
        "refusing to serve unauthenticated HTTP: workspaces.{0}.network is not \"restricted\", so \
         its commands could call this server's own endpoint; configure `clients` with tokens, or \
         restrict the network of every workspace"
    )]
    UnauthenticatedWithNetwork(String),
    /// An `--allowed-host` or `--allowed-origin` entry does not parse.
    #[error("invalid {0} `{1}`")]
    BadAllowEntry(&'static str, String),
    /// The address cannot be bound.
    #[error("cannot listen on {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
    /// The server failed while running.
    #[error("HTTP server failed: {0}")]
    Serve(std::io::Error),
}

/// Parses `serve --http` ADDR: `IP:PORT` or `localhost:PORT`.
pub fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    if let Some(Ok(p)) = s.strip_prefix("localhost:").map(str::parse::<u16>) {
        return Ok(SocketAddr::from(([127, 0, 0, 1], p)));
    }
    Err(format!(
        "invalid HTTP address `{s}` (expected IP:PORT such as {DEFAULT_ADDR}; put a directory before --http)"
    ))
}

/// The `serve` flags of the HTTP transport.
#[derive(Debug, Clone, clap::Args)]
pub struct HttpArgs {
    /// Serve MCP over streamable HTTP at ADDR (default 127.0.0.1:8787, path /mcp) instead of stdio.
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = DEFAULT_ADDR)]
    pub http: Option<String>,
    /// A public host (HOST, any port; or HOST:PORT) requests may name in Host/Origin, e.g. the
    /// reverse proxy's name. Repeatable.
    #[arg(long = "allowed-host", value_name = "HOST[:PORT]", requires = "http")]
    pub allowed_hosts: Vec<String>,
    /// A browser origin (scheme://host[:port]) accepted in Origin, e.g. the MCP Inspector's. Repeatable.
    #[arg(long = "allowed-origin", value_name = "ORIGIN", requires = "http")]
    pub allowed_origins: Vec<String>,
    /// HTTP request body cap in bytes (413 beyond; default: the config's
    /// limits.max_message_bytes, 16 MiB).
    #[arg(long, value_name = "BYTES", requires = "http")]
    pub max_body_bytes: Option<usize>,
    /// Requests one HTTP client may have in flight (429 beyond).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_IN_FLIGHT, requires = "http")]
    pub max_in_flight: usize,
    /// Seconds after which an idle HTTP session is closed.
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_SESSION_IDLE.as_secs(), requires = "http")]
    pub session_idle_secs: u64,
}

impl HttpArgs {
    /// The options, or `None` when `--http` is absent.
    pub fn options(&self) -> Result<Option<HttpOptions>, String> {
        let Some(addr) = &self.http else {
            return Ok(None);
        };
        let mut o = HttpOptions::new(parse_addr(addr)?);
        o.allowed_hosts.clone_from(&self.allowed_hosts);
        o.allowed_origins.clone_from(&self.allowed_origins);
        o.max_body_bytes = self.max_body_bytes;
        o.max_in_flight_per_client = self.max_in_flight;
        o.session_idle = Duration::from_secs(self.session_idle_secs.max(1));
        Ok(Some(o))
    }
}

/// Binds, says where on stderr (and that it is unauthenticated when no clients are configured),
/// and serves until `shutdown` completes.
pub async fn serve_until(
    gateway: Arc<Gateway>,
    opts: HttpOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), HttpError> {
    let server = HttpServer::bind(gateway, opts).await?;
    eprintln!(
        "codespace: serving MCP over streamable HTTP at http://{}{MCP_PATH}",
        server.local_addr()
    );
    if !server.authenticated() {
        eprintln!(
            "codespace: no clients configured: HTTP is UNAUTHENTICATED and bound to loopback only"
        );
    }
    server.run(shutdown).await?;
    eprintln!("codespace: HTTP server stopped");
    Ok(())
}

/// `host` lower-cased without IPv6 brackets, and its port when given.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Authority {
    host: String,
    port: Option<u16>,
}

impl Authority {
    fn parse(s: &str) -> Option<Authority> {
        let a = axum::http::uri::Authority::try_from(s.trim()).ok()?;
        if a.as_str().contains('@') {
            return None;
        }
        Some(Authority {
            host: a
                .host()
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_ascii_lowercase(),
            port: a.port_u16(),
        })
    }

    /// An allow entry without a port admits any port.
    fn admits(&self, host: &str, port: Option<u16>) -> bool {
        self.host == host && self.port.is_none_or(|p| Some(p) == port)
    }
}

/// An Origin as (scheme, host, effective port).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Origin {
    scheme: String,
    host: String,
    port: u16,
}

impl Origin {
    fn parse(s: &str) -> Option<Origin> {
        let uri: axum::http::Uri = s.trim().parse().ok()?;
        let scheme = uri.scheme_str()?.to_ascii_lowercase();
        let default_port = match scheme.as_str() {
            "http" => 80,
            "https" => 443,
            _ => return None,
        };
        let auth = Authority::parse(uri.authority()?.as_str())?;
        if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
            return None;
        }
        Some(Origin {
            scheme,
            host: auth.host,
            port: auth.port.unwrap_or(default_port),
        })
    }
}

/// The DNS-rebinding guard: which Host and Origin values are ours.
#[derive(Debug, Clone)]
struct HostGuard {
    hosts: Vec<Authority>,
    origins: Vec<Origin>,
}

/// Why a request was refused before MCP handling.
const HOST_REFUSED: &str = "host not allowed";
const ORIGIN_REFUSED: &str = "origin not allowed";

impl HostGuard {
    /// The loopback names at the bound port, the bound IP when specific, and the operator's.
    fn new(
        bound: SocketAddr,
        allowed_hosts: &[String],
        allowed_origins: &[String],
    ) -> Result<(HostGuard, Vec<String>), HttpError> {
        let port = bound.port();
        let mut entries: Vec<String> = vec![
            format!("127.0.0.1:{port}"),
            format!("localhost:{port}"),
            format!("[::1]:{port}"),
        ];
        if !bound.ip().is_unspecified() && !bound.ip().is_loopback() {
            entries.push(match bound.ip() {
                IpAddr::V4(ip) => format!("{ip}:{port}"),
                IpAddr::V6(ip) => format!("[{ip}]:{port}"),
            });
        }
        entries.extend(allowed_hosts.iter().map(|h| h.trim().to_string()));
        let hosts = entries
            .iter()
            .map(|e| {
                Authority::parse(e)
                    .ok_or_else(|| HttpError::BadAllowEntry("--allowed-host", e.clone()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let origins = allowed_origins
            .iter()
            .map(|o| {
                Origin::parse(o)
                    .ok_or_else(|| HttpError::BadAllowEntry("--allowed-origin", o.clone()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok((HostGuard { hosts, origins }, entries))
    }

    /// The same policy, spelled for rmcp's own checks (`allowed_origins`).
    fn rmcp_origins(&self) -> Vec<String> {
        let mut out = Vec::new();
        for h in &self.hosts {
            let host = if h.host.contains(':') {
                format!("[{}]", h.host)
            } else {
                h.host.clone()
            };
            let port = h.port.map_or("*".to_string(), |p| p.to_string());
            out.push(format!("http://{host}:{port}"));
            out.push(format!("https://{host}:{port}"));
        }
        for o in &self.origins {
            let host = if o.host.contains(':') {
                format!("[{}]", o.host)
            } else {
                o.host.clone()
            };
            out.push(format!("{}://{host}:{}", o.scheme, o.port));
        }
        out
    }

    fn check(&self, headers: &HeaderMap) -> Result<(), &'static str> {
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .and_then(Authority::parse)
            .ok_or(HOST_REFUSED)?;
        if !self.hosts.iter().any(|a| a.admits(&host.host, host.port)) {
            return Err(HOST_REFUSED);
        }
        let Some(origin) = headers.get(header::ORIGIN) else {
            return Ok(());
        };
        let origin = origin
            .to_str()
            .ok()
            .and_then(Origin::parse)
            .ok_or(ORIGIN_REFUSED)?;
        let ok = self.origins.contains(&origin)
            || self
                .hosts
                .iter()
                .any(|a| a.admits(&origin.host, Some(origin.port)));
        if ok { Ok(()) } else { Err(ORIGIN_REFUSED) }
    }
}

/// The tokens as SHA-256 digests, so comparison time depends neither on the content nor on the
/// length of the presented token.
struct Tokens(Vec<(Arc<str>, [u8; 32])>);

impl Tokens {
    fn digest(token: &[u8]) -> [u8; 32] {
        Sha256::digest(token).into()
    }

    /// The client whose token is presented; every configured token is compared.
    fn client_for(&self, presented: &[u8]) -> Option<Arc<str>> {
        let d = Tokens::digest(presented);
        let mut found = None;
        for (name, t) in &self.0 {
            if digest_eq(&d, t) && found.is_none() {
                found = Some(name.clone());
            }
        }
        found
    }
}

/// Who a request's token names: the client (a static token's name, or `oidc:<client_id>`), the
/// person behind an OIDC token, and the key its sessions and in-flight requests are counted
/// under (the person for an OIDC token: two users of one OAuth client share nothing).
#[derive(Clone)]
struct Caller {
    client: Arc<str>,
    user: Option<codespace_engine::policy::user::UserFacts>,
    owner: Arc<str>,
}

impl Caller {
    fn of_client(name: Arc<str>) -> Caller {
        Caller {
            owner: Arc::from(format!("client:{name}")),
            client: name,
            user: None,
        }
    }
}

/// Why a request is unauthenticated (the 401's `WWW-Authenticate` says `invalid_token` for a
/// token that was presented and refused).
enum NoAuth {
    Missing,
    Invalid,
}

/// OIDC users' in-flight semaphores kept before idle ones are dropped.
const OIDC_SEMAPHORES_MAX: usize = 4096;

struct Gate {
    guard: HostGuard,
    /// `None`: no clients configured, every request is [`UNAUTHENTICATED_CLIENT`] (unless OIDC
    /// is configured).
    tokens: Option<Tokens>,
    /// `identity.oidc`: the issuer's tokens are accepted too.
    oidc: Option<Arc<crate::oidc::OidcVerifier>>,
    /// The absolute URL of the protected resource metadata (with OIDC).
    metadata_url: Option<String>,
    /// In-flight semaphores of OIDC users, made on first use.
    user_in_flight: Mutex<HashMap<Arc<str>, Arc<Semaphore>>>,
    max_in_flight_per_client: usize,
    anonymous: Arc<str>,
    in_flight: HashMap<Arc<str>, Arc<Semaphore>>,
    max_body_bytes: usize,
    /// Session id → the client that created it.
    owners: Mutex<HashMap<String, Arc<str>>>,
    sessions: Arc<LocalSessionManager>,
    /// Sessions one client may hold at once.
    max_sessions_per_client: usize,
    /// Session-creating requests in progress per client (counted against the cap).
    opening: Mutex<HashMap<Arc<str>, usize>>,
}

fn plain(status: StatusCode, body: &'static str) -> Response {
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = status;
    r
}

fn json_error(status: StatusCode, error: &'static str) -> Response {
    let mut r = Response::new(Body::from(format!("{{\"error\":\"{error}\"}}")));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

impl Gate {
    /// The 401: the same body whatever the reason (the reason is in the server log); with OIDC,
    /// `WWW-Authenticate` names the protected resource metadata, and `invalid_token` when a
    /// token was presented.
    fn unauthorized(&self, why: NoAuth) -> Response {
        let mut r = json_error(StatusCode::UNAUTHORIZED, "unauthorized");
        let value = match (&self.metadata_url, why) {
            (None, _) => HeaderValue::from_static("Bearer realm=\"codespace\""),
            (Some(url), NoAuth::Missing) => {
                HeaderValue::from_str(&format!("Bearer resource_metadata=\"{url}\""))
                    .unwrap_or_else(|_| HeaderValue::from_static("Bearer"))
            }
            (Some(url), NoAuth::Invalid) => HeaderValue::from_str(&format!(
                "Bearer resource_metadata=\"{url}\", error=\"invalid_token\""
            ))
            .unwrap_or_else(|_| HeaderValue::from_static("Bearer error=\"invalid_token\"")),
        };
        r.headers_mut().insert(header::WWW_AUTHENTICATE, value);
        r
    }

    async fn authenticate(&self, headers: &HeaderMap) -> Result<Caller, NoAuth> {
        if self.tokens.is_none() && self.oidc.is_none() {
            return Ok(Caller::of_client(self.anonymous.clone()));
        }
        let value = headers
            .get(header::AUTHORIZATION)
            .ok_or(NoAuth::Missing)?
            .as_bytes();
        let (scheme, rest) = value.split_at_checked(7).ok_or(NoAuth::Invalid)?;
        if !scheme.eq_ignore_ascii_case(b"bearer ") {
            return Err(NoAuth::Invalid);
        }
        let presented = rest.trim_ascii();
        if let Some(c) = self.tokens.as_ref().and_then(|t| t.client_for(presented)) {
            return Ok(Caller::of_client(c));
        }
        let Some(oidc) = &self.oidc else {
            tracing::warn!("HTTP request refused: unknown bearer token");
            return Err(NoAuth::Invalid);
        };
        let Ok(token) = std::str::from_utf8(presented) else {
            tracing::warn!("HTTP request refused: bearer token is not text");
            return Err(NoAuth::Invalid);
        };
        match oidc.verify(token).await {
            Ok(c) => Ok(Caller {
                owner: Arc::from(format!("user:{}", c.user.id)),
                client: Arc::from(c.client),
                user: Some(c.user),
            }),
            Err(why) => {
                tracing::warn!(reason = %why, "HTTP request refused: OIDC bearer token");
                Err(NoAuth::Invalid)
            }
        }
    }

    /// The in-flight semaphore of `caller`: a configured client's, or an OIDC user's (made on
    /// first use; idle ones dropped past [`OIDC_SEMAPHORES_MAX`]).
    fn semaphore(&self, caller: &Caller) -> Option<Arc<Semaphore>> {
        if caller.user.is_none() {
            return self.in_flight.get(&caller.client).cloned();
        }
        let mut m = self.user_in_flight.lock().ok()?;
        if m.len() >= OIDC_SEMAPHORES_MAX && !m.contains_key(&caller.owner) {
            let max = self.max_in_flight_per_client;
            m.retain(|_, s| s.available_permits() < max);
        }
        Some(Arc::clone(m.entry(caller.owner.clone()).or_insert_with(
            || Arc::new(Semaphore::new(self.max_in_flight_per_client)),
        )))
    }

    /// None when `sid` is a session this client created, else why not. Every session is
    /// created through the gate, which records its owner before the client can learn its id,
    /// so an id without an owner (closed, or never opened) is refused too (fail closed).
    fn owner_mismatch(&self, sid: &str, client: &Arc<str>) -> Option<Mismatch> {
        match self.owners.lock() {
            Ok(o) => match o.get(sid) {
                None => Some(Mismatch::Unknown),
                Some(owner) if owner != client => Some(Mismatch::OtherClient),
                Some(_) => None,
            },
            Err(_) => Some(Mismatch::Unknown),
        }
    }

    /// Drops the owners of sessions rmcp has closed (idle expiry). Runs with `owners` locked
    /// and only when the session table is free at once: a session enters `owners` after rmcp
    /// created it and never comes back once rmcp removed it, so nothing live is dropped.
    fn prune_owners(&self, o: &mut HashMap<String, Arc<str>>) {
        if let Ok(live) = self.sessions.sessions.try_read() {
            o.retain(|k, _| live.contains_key(k.as_str()));
        }
    }

    /// Reserves one session opening for `client`, or None when its live sessions and the
    /// openings in progress already reach the cap.
    fn reserve_session(self: &Arc<Self>, client: &Arc<str>) -> Option<OpeningSlot> {
        let live = match self.owners.lock() {
            Ok(mut o) => {
                self.prune_owners(&mut o);
                o.values().filter(|c| *c == client).count()
            }
            Err(_) => return None,
        };
        let mut opening = self.opening.lock().ok()?;
        let n = opening.entry(client.clone()).or_insert(0);
        if live + *n >= self.max_sessions_per_client {
            return None;
        }
        *n += 1;
        Some(OpeningSlot {
            gate: Arc::clone(self),
            client: client.clone(),
        })
    }

    fn record_owner(&self, sid: String, client: Arc<str>) {
        if let Ok(mut o) = self.owners.lock() {
            if o.len() >= 1024 {
                self.prune_owners(&mut o);
            }
            o.insert(sid, client);
        }
    }

    fn forget_owner(&self, sid: &str) {
        if let Ok(mut o) = self.owners.lock() {
            o.remove(sid);
        }
    }
}

/// Why a request's session id is not the client's own.
enum Mismatch {
    /// No such live session: closed (expired or deleted) or never opened.
    Unknown,
    /// A live session another client opened.
    OtherClient,
}

/// A session opening in progress, counted against its client's session cap until dropped.
struct OpeningSlot {
    gate: Arc<Gate>,
    client: Arc<str>,
}

impl Drop for OpeningSlot {
    fn drop(&mut self) {
        if let Ok(mut opening) = self.gate.opening.lock()
            && let Some(n) = opening.get_mut(&self.client)
        {
            *n = n.saturating_sub(1);
        }
    }
}

/// A response body that holds the client's in-flight permit until it is finished or dropped.
struct PermitBody {
    inner: Body,
    _permit: OwnedSemaphorePermit,
}

impl HttpBody for PermitBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// The gate in front of rmcp: 403 (Host/Origin), 401 (token), 413 (declared body size), 404
/// (another client's session), 429 (in-flight cap); then the request, with the client attached.
async fn gate(State(g): State<Arc<Gate>>, mut req: Request, next: Next) -> Response {
    if let Err(why) = g.guard.check(req.headers()) {
        tracing::warn!(reason = why, "HTTP request refused (DNS-rebinding guard)");
        return plain(StatusCode::FORBIDDEN, why);
    }
    // RFC 9728: the protected resource metadata is public (a client learns from it where to
    // get a token).
    if let Some(oidc) = &g.oidc
        && req.method() == Method::GET
        && is_metadata_path(req.uri().path())
    {
        let mut r = Response::new(Body::from(oidc.resource_metadata().to_string()));
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        return r;
    }
    let caller = match g.authenticate(req.headers()).await {
        Ok(c) => c,
        Err(why) => {
            if matches!(why, NoAuth::Missing) {
                tracing::warn!("HTTP request refused: no bearer token");
            }
            return g.unauthorized(why);
        }
    };
    // Sessions and in-flight requests are counted per owner (the client, or the OIDC user).
    let client = caller.owner.clone();
    // The connection proved who it is: no longer counted against the unauthenticated cap.
    if let Some(conn) = req.extensions().get::<crate::http_conn::ConnAuth>() {
        conn.authenticated();
    }
    // The token goes no further: not into rmcp, tool contexts or logs.
    req.headers_mut().remove(header::AUTHORIZATION);
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > g.max_body_bytes as u64) {
        return json_error(StatusCode::PAYLOAD_TOO_LARGE, "request body too large");
    }
    let sid = req
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    match sid
        .as_deref()
        .and_then(|sid| g.owner_mismatch(sid, &client))
    {
        Some(Mismatch::OtherClient) => {
            tracing::warn!(client = %client, "HTTP request refused: session of another client");
            return plain(StatusCode::NOT_FOUND, "session not found");
        }
        // Closed (expired, deleted before) or never opened: a client that re-sends a DELETE
        // or reuses an old session id, not an intrusion.
        Some(Mismatch::Unknown) => {
            tracing::info!(client = %client, method = %req.method(), "HTTP request refused: unknown or closed session");
            return plain(StatusCode::NOT_FOUND, "session not found");
        }
        None => {}
    }
    let method = req.method().clone();
    if method == Method::DELETE
        && let Some(sid) = &sid
        && !g.sessions.sessions.read().await.contains_key(sid.as_str())
    {
        // Closed already (expired, or deleted before): nothing to terminate.
        return plain(StatusCode::NOT_FOUND, "session not found");
    }
    // A POST without a session opens one (initialize): the client's session cap applies. A
    // request that declares the stateless revision opens none and takes no slot; should it be
    // an `initialize` after all, the session it opened is counted below.
    let stateless = stateless_revision(req.headers());
    let opening = if method == Method::POST && sid.is_none() && !stateless {
        match g.reserve_session(&client) {
            Some(slot) => Some(slot),
            None => {
                tracing::warn!(client = %client, "HTTP request refused: too many sessions");
                return json_error(StatusCode::TOO_MANY_REQUESTS, "too many sessions");
            }
        }
    } else {
        None
    };
    let permit = if method == Method::POST {
        let Some(sem) = g.semaphore(&caller) else {
            return g.unauthorized(NoAuth::Invalid);
        };
        match sem.clone().try_acquire_owned() {
            Ok(p) => Some(p),
            Err(_) => {
                tracing::warn!(client = %client, "HTTP request refused: too many requests in flight");
                let mut r =
                    json_error(StatusCode::TOO_MANY_REQUESTS, "too many requests in flight");
                r.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                return r;
            }
        }
    } else {
        None
    };
    req.extensions_mut()
        .insert(HttpClient(caller.client.clone()));
    if let Some(u) = &caller.user {
        req.extensions_mut().insert(HttpUser(u.clone()));
    }
    let mut resp = next.run(req).await;
    match &sid {
        None => {
            if let Some(new) = resp
                .headers()
                .get(SESSION_HEADER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
            {
                if stateless && opening.is_none() && g.reserve_session(&client).is_none() {
                    // An `initialize` sent under the stateless revision's header opened a
                    // session past the client's cap: close it and refuse, as for any other.
                    let _ = g.sessions.close_session(&Arc::from(new.as_str())).await;
                    tracing::warn!(client = %client, "HTTP request refused: too many sessions");
                    return json_error(StatusCode::TOO_MANY_REQUESTS, "too many sessions");
                }
                g.record_owner(new, client);
            }
        }
        Some(sid) if method == Method::DELETE && resp.status().is_success() => {
            g.forget_owner(sid);
            // The session is gone and there is nothing more to say: 204, not rmcp's 202
            // (clients read 202 as "termination still pending").
            resp = Response::new(Body::empty());
            *resp.status_mut() = StatusCode::NO_CONTENT;
        }
        Some(_) => {}
    }
    drop(opening);
    match permit {
        None => resp,
        Some(permit) => {
            let (parts, body) = resp.into_parts();
            Response::from_parts(
                parts,
                Body::new(PermitBody {
                    inner: body,
                    _permit: permit,
                }),
            )
        }
    }
}

/// True for the protected resource metadata's paths.
fn is_metadata_path(path: &str) -> bool {
    path == RESOURCE_METADATA_PATH
        || path
            .strip_prefix(RESOURCE_METADATA_PATH)
            .is_some_and(|rest| rest == MCP_PATH)
}

/// The metadata's absolute URL for the resource `audience` (RFC 9728 §3.1: the well-known path
/// between the resource's origin and its path), or under this server's address when the
/// audience is not an http(s) URL.
fn metadata_url(audience: &str, local: SocketAddr) -> String {
    let parsed = ["https://", "http://"].iter().find_map(|scheme| {
        let rest = audience.strip_prefix(scheme)?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (rest.get(..i)?, rest.get(i..)?),
            None => (rest, ""),
        };
        (!authority.is_empty()).then(|| (scheme, authority, path.trim_end_matches('/')))
    });
    match parsed {
        Some((scheme, authority, path)) => {
            format!("{scheme}{authority}{RESOURCE_METADATA_PATH}{path}")
        }
        None => format!("http://{local}{RESOURCE_METADATA_PATH}"),
    }
}

/// The DNS-rebinding guard alone, for routes that authenticate by their own means (the
/// console's session cookie).
async fn guard_only(State(g): State<Arc<HostGuard>>, req: Request, next: Next) -> Response {
    if let Err(why) = g.check(req.headers()) {
        tracing::warn!(reason = why, "HTTP request refused (DNS-rebinding guard)");
        return plain(StatusCode::FORBIDDEN, why);
    }
    next.run(req).await
}

/// `router` behind the Host/Origin guard of a server bound at `local` with `opts`' allowed
/// hosts and origins.
pub(crate) fn guarded(
    router: Router,
    local: SocketAddr,
    opts: &HttpOptions,
) -> Result<Router, HttpError> {
    let (guard, _) = HostGuard::new(local, &opts.allowed_hosts, &opts.allowed_origins)?;
    Ok(router.layer(axum::middleware::from_fn_with_state(
        Arc::new(guard),
        guard_only,
    )))
}

/// Where Prometheus scrapes the metrics (docs/telemetry.md).
pub const METRICS_PATH: &str = "/metrics";

/// `GET /metrics`: the Prometheus text format; the gauges are read on the blocking pool (a
/// store query).
async fn metrics_page(gateway: Arc<Gateway>) -> Response {
    let gauges = tokio::task::spawn_blocking(move || codespace_engine::scrape::gauges(&gateway))
        .await
        .unwrap_or_default();
    let mut r = Response::new(Body::from(codespace_engine::telemetry::metrics::render(
        gauges,
    )));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(codespace_engine::telemetry::metrics::CONTENT_TYPE),
    );
    r
}

/// True when the request declares MCP 2026-07-28 or later in `MCP-Protocol-Version`: a stateless
/// request (rmcp requires the header beside `_meta`'s protocol version), which opens no session.
fn stateless_revision(headers: &HeaderMap) -> bool {
    headers
        .get("mcp-protocol-version")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v >= crate::server::NEWEST_PROTOCOL_VERSION.as_str())
}

/// A bound, not yet running HTTP server.
pub struct HttpServer {
    listener: tokio::net::TcpListener,
    router: Router,
    local_addr: SocketAddr,
    authenticated: bool,
    conn_limits: crate::http_conn::ConnLimits,
    cancel: Box<dyn FnOnce() + Send>,
}

impl std::fmt::Debug for HttpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpServer")
            .field("local_addr", &self.local_addr)
            .field("authenticated", &self.authenticated)
            .finish_non_exhaustive()
    }
}

impl HttpServer {
    /// Binds `opts.addr` and builds the service. The gateway's configured `clients` are the
    /// accepted bearer tokens; with none, only a loopback address is accepted.
    pub async fn bind(gateway: Arc<Gateway>, opts: HttpOptions) -> Result<HttpServer, HttpError> {
        let clients = &gateway.config().clients;
        let oidc = gateway
            .config()
            .identity
            .oidc
            .clone()
            .map(|c| Arc::new(crate::oidc::OidcVerifier::new(c)));
        let authenticated = !clients.is_empty() || oidc.is_some();
        if !authenticated && !opts.addr.ip().is_loopback() {
            return Err(HttpError::UnauthenticatedNonLoopback(opts.addr));
        }
        if !authenticated
            && let Some(ws) = gateway
                .config()
                .workspaces
                .values()
                .find(|w| w.network != codespace_engine::config::Network::Restricted)
        {
            return Err(HttpError::UnauthenticatedWithNetwork(ws.id.clone()));
        }
        let listener = tokio::net::TcpListener::bind(opts.addr)
            .await
            .map_err(|e| HttpError::Bind(opts.addr, e))?;
        let local_addr = listener
            .local_addr()
            .map_err(|e| HttpError::Bind(opts.addr, e))?;
        // Egress-proxy connections to this listener are `server_owned` (refused by a guardrail).
        gateway.add_http_listener(local_addr);
        let (guard, host_entries) =
            HostGuard::new(local_addr, &opts.allowed_hosts, &opts.allowed_origins)?;

        let anonymous: Arc<str> = Arc::from(if authenticated {
            "unidentified"
        } else {
            UNAUTHENTICATED_CLIENT
        });
        let names: Vec<Arc<str>> = if authenticated {
            clients.keys().map(|k| Arc::from(k.as_str())).collect()
        } else {
            vec![anonymous.clone()]
        };
        let tokens = (!clients.is_empty()).then(|| {
            Tokens(
                clients
                    .values()
                    .map(|c| {
                        (
                            Arc::from(c.name.as_str()),
                            Tokens::digest(c.token.as_bytes()),
                        )
                    })
                    .collect(),
            )
        });
        let in_flight = names
            .iter()
            .map(|n| {
                (
                    n.clone(),
                    Arc::new(Semaphore::new(opts.max_in_flight_per_client.max(1))),
                )
            })
            .collect();

        let limits = &gateway.config().limits;
        let conn_limits = crate::http_conn::ConnLimits {
            header_timeout: Duration::from_millis(limits.http_header_timeout_ms.max(1)),
            max_unauthenticated: limits.http_max_unauthenticated_connections.max(1),
        };
        let max_body_bytes = opts.max_body_bytes.unwrap_or(limits.max_message_bytes);
        let max_sessions_per_client = opts
            .max_sessions_per_client
            .unwrap_or(limits.max_sessions_per_client)
            .max(1);
        let mut manager = LocalSessionManager::default();
        manager.session_config.keep_alive = Some(opts.session_idle);
        let manager = Arc::new(manager);
        let config = StreamableHttpServerConfig::default()
            .with_allowed_hosts(host_entries)
            .with_allowed_origins(guard.rmcp_origins())
            .with_max_request_body_bytes(max_body_bytes)
            // A stateless (2026-07-28) request's reply is plain JSON unless the call sends
            // progress first; the session era keeps its SSE streams unchanged.
            .with_json_response(true);
        let token = config.cancellation_token.clone();
        let for_metrics = Arc::clone(&gateway);
        let console = (authenticated && gateway.config().console.is_enabled()).then(|| {
            crate::console::Console::with_oidc(
                crate::console::Backend {
                    config: gateway.config().clone(),
                    store: gateway.store().cloned(),
                    policies: Arc::clone(gateway.policy()),
                    live: true,
                },
                Box::new(crate::console::StaticTokens::new(&gateway.config().clients)),
                oidc.clone(),
            )
        });
        let fallback = Session {
            client: anonymous.to_string(),
            transport: TRANSPORT.to_string(),
            user: None,
        };
        let service = StreamableHttpService::new(
            move || Ok(CodeSpaceServer::new(gateway.clone(), fallback.clone())),
            manager.clone(),
            config,
        );
        if let Some(v) = &oidc {
            // The keys are fetched now, so the first caller does not wait for them; a failure
            // is logged and the fetch retried when a token arrives.
            let v = Arc::clone(v);
            tokio::spawn(async move { v.prefetch().await });
        }
        let metadata_url = oidc
            .as_ref()
            .map(|v| metadata_url(&v.config().audience, local_addr));
        let gate_state = Arc::new(Gate {
            guard,
            tokens,
            oidc,
            metadata_url,
            user_in_flight: Mutex::new(HashMap::new()),
            max_in_flight_per_client: opts.max_in_flight_per_client.max(1),
            anonymous,
            in_flight,
            max_body_bytes,
            owners: Mutex::new(HashMap::new()),
            sessions: manager,
            max_sessions_per_client,
            opening: Mutex::new(HashMap::new()),
        });
        let router = Router::new()
            .route_service(MCP_PATH, service)
            // Behind the same gate: any configured client's token may read it.
            // Answered by the gate (without a token) when OIDC is configured; 404 otherwise.
            .route(
                RESOURCE_METADATA_PATH,
                axum::routing::get(|| async { plain(StatusCode::NOT_FOUND, "not found") }),
            )
            .route(
                &format!("{RESOURCE_METADATA_PATH}{MCP_PATH}"),
                axum::routing::get(|| async { plain(StatusCode::NOT_FOUND, "not found") }),
            )
            .route(
                METRICS_PATH,
                axum::routing::get(move || metrics_page(Arc::clone(&for_metrics))),
            )
            .layer(axum::middleware::from_fn_with_state(gate_state, gate));
        // The console signs in with the same tokens (then a session cookie), so it sits beside
        // the bearer gate, behind the same DNS-rebinding guard. Off without clients: there is
        // no identity to sign in with.
        let router = match console {
            Some(c) => router.merge(guarded(crate::console::router(c), local_addr, &opts)?),
            None => router,
        };
        Ok(HttpServer {
            listener,
            router,
            local_addr,
            authenticated,
            conn_limits,
            cancel: Box::new(move || token.cancel()),
        })
    }

    /// The bound address (with the real port when 0 was asked).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Whether bearer tokens are required (clients are configured).
    pub fn authenticated(&self) -> bool {
        self.authenticated
    }

    /// Serves until `shutdown` completes, then closes every session and waits a few seconds
    /// at most for open streams.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), HttpError> {
        let (stopped_tx, stopped_rx) = tokio::sync::oneshot::channel::<()>();
        let cancel = self.cancel;
        // The accept loop: header timeout, the unauthenticated cap, TCP_NODELAY.
        let serve =
            crate::http_conn::serve(self.listener, self.router, self.conn_limits, async move {
                shutdown.await;
                cancel();
                let _ = stopped_tx.send(());
            });
        let grace = async move {
            if stopped_rx.await.is_ok() {
                tokio::time::sleep(SHUTDOWN_GRACE).await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            () = serve => Ok(()),
            _ = grace => {
                tracing::warn!("HTTP shutdown: streams still open after the grace period");
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn guard(hosts: &[&str], origins: &[&str]) -> HostGuard {
        let hosts: Vec<String> = hosts.iter().map(|s| s.to_string()).collect();
        let origins: Vec<String> = origins.iter().map(|s| s.to_string()).collect();
        HostGuard::new("127.0.0.1:8787".parse().unwrap(), &hosts, &origins)
            .unwrap()
            .0
    }

    #[test]
    fn loopback_names_at_the_bound_port_pass() {
        let g = guard(&[], &[]);
        for h in [
            "127.0.0.1:8787",
            "localhost:8787",
            "LOCALHOST:8787",
            "[::1]:8787",
        ] {
            assert_eq!(g.check(&headers(&[("host", h)])), Ok(()), "{h}");
        }
    }

    #[test]
    fn foreign_or_wrong_port_hosts_are_refused() {
        let g = guard(&[], &[]);
        for h in [
            "evil.example:8787",
            "127.0.0.1:9999",
            "localhost",
            "127.0.0.1",
            "user@localhost:8787",
        ] {
            assert_eq!(g.check(&headers(&[("host", h)])), Err(HOST_REFUSED), "{h}");
        }
        assert_eq!(g.check(&HeaderMap::new()), Err(HOST_REFUSED));
    }

    #[test]
    fn operator_hosts_pass_with_any_port_unless_one_is_given() {
        let g = guard(&["mcp.example.com", "other.example:8443"], &[]);
        assert_eq!(g.check(&headers(&[("host", "mcp.example.com")])), Ok(()));
        assert_eq!(
            g.check(&headers(&[("host", "mcp.example.com:443")])),
            Ok(())
        );
        assert_eq!(g.check(&headers(&[("host", "other.example:8443")])), Ok(()));
        assert_eq!(
            g.check(&headers(&[("host", "other.example")])),
            Err(HOST_REFUSED)
        );
    }

    #[test]
    fn origins_must_name_an_allowed_host() {
        let g = guard(&["mcp.example.com"], &["http://localhost:6274"]);
        let ok = |o: &str| g.check(&headers(&[("host", "localhost:8787"), ("origin", o)]));
        assert_eq!(ok("http://localhost:8787"), Ok(()));
        assert_eq!(ok("http://127.0.0.1:8787"), Ok(()));
        assert_eq!(ok("https://mcp.example.com"), Ok(()));
        assert_eq!(ok("http://localhost:6274"), Ok(()));
        assert_eq!(ok("http://localhost:6275"), Err(ORIGIN_REFUSED));
        assert_eq!(ok("http://evil.example"), Err(ORIGIN_REFUSED));
        assert_eq!(ok("http://localhost"), Err(ORIGIN_REFUSED));
        assert_eq!(ok("null"), Err(ORIGIN_REFUSED));
        assert_eq!(ok("file://x"), Err(ORIGIN_REFUSED));
    }

    #[test]
    fn bad_allow_entries_are_errors() {
        let r = HostGuard::new(
            "127.0.0.1:1".parse().unwrap(),
            &["bad host".to_string()],
            &[],
        );
        assert!(matches!(
            r,
            Err(HttpError::BadAllowEntry("--allowed-host", _))
        ));
        let r = HostGuard::new(
            "127.0.0.1:1".parse().unwrap(),
            &[],
            &["localhost".to_string()],
        );
        assert!(matches!(
            r,
            Err(HttpError::BadAllowEntry("--allowed-origin", _))
        ));
    }

    #[test]
    fn tokens_match_only_exactly() {
        let t = Tokens(vec![
            (Arc::from("ci"), Tokens::digest(b"token-for-ci-0123456789")),
            (
                Arc::from("dev"),
                Tokens::digest(b"token-for-dev-0123456789"),
            ),
        ]);
        assert_eq!(
            t.client_for(b"token-for-ci-0123456789").as_deref(),
            Some("ci")
        );
        assert_eq!(
            t.client_for(b"token-for-dev-0123456789").as_deref(),
            Some("dev")
        );
        assert_eq!(t.client_for(b"token-for-ci-012345678"), None);
        assert_eq!(t.client_for(b"token-for-ci-01234567890"), None);
        assert_eq!(t.client_for(b""), None);
    }

    #[test]
    fn digest_eq_compares_every_byte() {
        let a = [7u8; 32];
        let mut b = a;
        assert!(digest_eq(&a, &b));
        b[31] ^= 1;
        assert!(!digest_eq(&a, &b));
        b = a;
        b[0] ^= 0x80;
        assert!(!digest_eq(&a, &b));
    }

    #[test]
    fn addresses_parse() {
        assert_eq!(parse_addr("127.0.0.1:8787").unwrap().port(), 8787);
        assert!(parse_addr("localhost:9").unwrap().ip().is_loopback());
        assert!(parse_addr("[::1]:9").unwrap().ip().is_loopback());
        assert!(parse_addr("/some/dir").is_err());
    }
}
