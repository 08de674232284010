//! The web console at `/console` (issue #33): sign-in with the identities the HTTP transport
//! accepts, a server-side session behind an HttpOnly SameSite=Strict cookie, a per-session CSRF
//! token on every state-changing POST, a strict CSP with the assets embedded in the binary, and
//! the operator pages (approvals queue with grant/deny over channel `web`, decisions, policies,
//! processes and operations). `serve --http` mounts it live; `codespace console` serves the same
//! pages read-only against a store. Rendering is in `pages.rs`, the store reads in `data.rs`.

mod data;
mod pages;

pub use data::{Backend, Identity};
use pages::Signed;

use axum::Router;
use axum::body::Body;
use axum::extract::{Form, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::{get, post};
use codespace_engine::config::Client;
use codespace_engine::gateway::approvals::OperatorChannel;
use codespace_engine::wire::ApprovalDecision;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where the console is mounted.
pub const CONSOLE_PATH: &str = "/console";
/// The session cookie's name.
pub const COOKIE: &str = "codespace_console";
/// A session ends this long after its last request.
const IDLE: Duration = Duration::from_secs(30 * 60);
/// ... and at the latest this long after sign-in.
const ABSOLUTE: Duration = Duration::from_secs(12 * 60 * 60);
/// Sessions kept at once (sign-in is refused beyond, after expired ones are dropped).
const MAX_SESSIONS: usize = 256;
/// The sign-in form's body cap (a token, a CSRF field).
const MAX_FORM_BYTES: usize = 16 * 1024;

/// The Content-Security-Policy of every console response: nothing but the console's own
/// scripts, styles and same-origin form posts; no framing, no inline script or style.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
     connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// Where sign-in credentials are checked: the static bearer tokens of `clients` today; an OIDC
/// verifier implements the same trait.
pub trait IdentitySource: Send + Sync {
    /// The identity a presented credential proves, or None.
    fn identify(&self, credential: &str) -> Option<Identity>;
}

/// The configured clients' bearer tokens, compared as SHA-256 digests over every entry.
pub struct StaticTokens(Vec<(String, [u8; 32])>);

impl StaticTokens {
    /// The tokens of `clients`.
    pub fn new(clients: &BTreeMap<String, Client>) -> StaticTokens {
        StaticTokens(
            clients
                .values()
                .map(|c| (c.name.clone(), Sha256::digest(c.token.as_bytes()).into()))
                .collect(),
        )
    }
}

impl IdentitySource for StaticTokens {
    fn identify(&self, credential: &str) -> Option<Identity> {
        let d: [u8; 32] = Sha256::digest(credential.trim().as_bytes()).into();
        let mut found = None;
        for (name, t) in &self.0 {
            if digest_eq(&d, t) && found.is_none() {
                found = Some(name.clone());
            }
        }
        found.map(|name| Identity {
            name,
            groups: Vec::new(),
            user: None,
        })
    }
}

struct Session {
    identity: Identity,
    operator: bool,
    csrf: String,
    created: Instant,
    last: Instant,
}

/// The console's state: its backend, identities and sessions.
pub struct Console {
    backend: Backend,
    identities: Box<dyn IdentitySource>,
    /// OIDC access tokens are accepted too when `identity.oidc` is configured (checked after
    /// the static tokens; verification may fetch the issuer's keys, so it is async).
    oidc: Option<Arc<crate::oidc::OidcVerifier>>,
    sessions: Mutex<HashMap<String, Session>>,
}

/// Equality of two digests in time independent of where they differ.
pub fn digest_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let diff = a
        .iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

fn random_hex() -> Option<String> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).ok()?;
    Some(hex::encode(b))
}

fn cookie_of(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v.to_string())
}

impl Console {
    /// A console over `backend`, signing in through `identities`.
    pub fn new(backend: Backend, identities: Box<dyn IdentitySource>) -> Arc<Console> {
        Console::with_oidc(backend, identities, None)
    }

    /// A console that also signs in with OIDC access tokens checked by `oidc`: the identity is
    /// the user (`sub` or the mapped claim), with the user's groups.
    pub fn with_oidc(
        backend: Backend,
        identities: Box<dyn IdentitySource>,
        oidc: Option<Arc<crate::oidc::OidcVerifier>>,
    ) -> Arc<Console> {
        Arc::new(Console {
            backend,
            identities,
            oidc,
            sessions: Mutex::new(HashMap::new()),
        })
    }

    /// The identity `token` proves: a static client token, else (with OIDC configured) an
    /// access token of the issuer, whose user signs in. Why a token was refused is logged,
    /// never shown.
    async fn identify(&self, token: &str) -> Option<Identity> {
        if let Some(i) = self.identities.identify(token) {
            return Some(i);
        }
        let v = self.oidc.as_ref()?;
        match v.verify(token.trim()).await {
            Ok(caller) => Some(Identity {
                name: caller.user.id.clone(),
                groups: caller.user.groups.clone(),
                user: Some(caller.user),
            }),
            Err(e) => {
                tracing::warn!(reason = %e, "console sign-in refused: OIDC token rejected");
                None
            }
        }
    }

    fn session(&self, headers: &HeaderMap) -> Option<Signed> {
        let id = cookie_of(headers)?;
        let mut s = self.sessions.lock().ok()?;
        let now = Instant::now();
        let live = s.get(&id).is_some_and(|x| {
            now.duration_since(x.last) < IDLE && now.duration_since(x.created) < ABSOLUTE
        });
        if !live {
            s.remove(&id);
            return None;
        }
        let x = s.get_mut(&id)?;
        x.last = now;
        Some(Signed {
            identity: x.identity.clone(),
            operator: x.operator,
            csrf: x.csrf.clone(),
        })
    }

    fn sign_in(&self, identity: Identity) -> Option<String> {
        let operator = self.backend.config.console.is_operator(
            std::iter::once(identity.name.as_str())
                .chain(identity.groups.iter().map(String::as_str)),
        );
        let id = random_hex()?;
        let csrf = random_hex()?;
        let mut s = self.sessions.lock().ok()?;
        let now = Instant::now();
        s.retain(|_, x| {
            now.duration_since(x.last) < IDLE && now.duration_since(x.created) < ABSOLUTE
        });
        if s.len() >= MAX_SESSIONS {
            return None;
        }
        s.insert(
            id.clone(),
            Session {
                identity,
                operator,
                csrf,
                created: now,
                last: now,
            },
        );
        Some(id)
    }

    fn sign_out(&self, headers: &HeaderMap) {
        if let (Some(id), Ok(mut s)) = (cookie_of(headers), self.sessions.lock()) {
            s.remove(&id);
        }
    }
}

/// True when the presented CSRF token is the session's (compared as digests).
fn csrf_ok(signed: &Signed, presented: Option<&str>) -> bool {
    let Some(p) = presented else { return false };
    let a: [u8; 32] = Sha256::digest(p.as_bytes()).into();
    let b: [u8; 32] = Sha256::digest(signed.csrf.as_bytes()).into();
    digest_eq(&a, &b)
}

/// The headers of every console response: CSP, no framing, no sniffing, no caching, no
/// referrer.
async fn headers_layer(req: Request, next: Next) -> Response {
    let mut r = next.run(req).await;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // `same-origin`, not `no-referrer`: under `no-referrer` a browser sends `Origin: null` with
    // the form posts, which the Host/Origin guard refuses.
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(
        "cross-origin-opener-policy",
        HeaderValue::from_static("same-origin"),
    );
    r
}

fn html(status: StatusCode, markup: maud::Markup) -> Response {
    let mut r = Response::new(Body::from(markup.into_string()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    r
}

fn redirect(to: &'static str) -> Response {
    let mut r = Response::new(Body::empty());
    *r.status_mut() = StatusCode::SEE_OTHER;
    r.headers_mut()
        .insert(header::LOCATION, HeaderValue::from_static(to));
    r
}

fn asset(body: &'static str, content_type: &'static str) -> Response {
    let mut r = Response::new(Body::from(body));
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

type Shared = State<Arc<Console>>;

/// The signed-in operator, or the response to send instead (sign-in redirect, 403 page).
fn operator(c: &Console, headers: &HeaderMap) -> Result<Signed, Response> {
    match c.session(headers) {
        None => Err(redirect("/console/sign-in")),
        Some(s) if !s.operator => Err(html(
            StatusCode::FORBIDDEN,
            pages::forbidden(&s, c.backend.live),
        )),
        Some(s) => Ok(s),
    }
}

/// Runs a store read off the async workers.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| e.to_string())?
}

fn failed(s: &Signed, live: bool, why: &str) -> Response {
    html(
        StatusCode::INTERNAL_SERVER_ERROR,
        pages::message(s, live, "Error", why),
    )
}

async fn root(State(c): Shared, headers: HeaderMap) -> Response {
    match c.session(&headers) {
        None => redirect("/console/sign-in"),
        Some(_) => redirect("/console/approvals"),
    }
}

async fn sign_in_page(State(c): Shared) -> Response {
    html(StatusCode::OK, pages::sign_in(None, c.backend.live))
}

#[derive(serde::Deserialize)]
struct SignInForm {
    token: String,
}

async fn sign_in(State(c): Shared, Form(f): Form<SignInForm>) -> Response {
    let Some(identity) = c.identify(&f.token).await else {
        tracing::warn!("console sign-in refused: unknown token");
        return html(
            StatusCode::UNAUTHORIZED,
            pages::sign_in(
                Some("That token is not one this server accepts."),
                c.backend.live,
            ),
        );
    };
    let name = identity.name.clone();
    let Some(id) = c.sign_in(identity) else {
        return html(
            StatusCode::SERVICE_UNAVAILABLE,
            pages::sign_in(
                Some("Too many console sessions; try again later."),
                c.backend.live,
            ),
        );
    };
    tracing::info!(client = %name, "console sign-in");
    let mut r = redirect("/console/approvals");
    let cookie = format!(
        "{COOKIE}={id}; HttpOnly; SameSite=Strict; Path={CONSOLE_PATH}; Max-Age={}",
        ABSOLUTE.as_secs()
    );
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

#[derive(serde::Deserialize)]
struct CsrfForm {
    csrf: Option<String>,
    decision: Option<String>,
}

async fn sign_out(State(c): Shared, headers: HeaderMap, Form(f): Form<CsrfForm>) -> Response {
    let Some(s) = c.session(&headers) else {
        return redirect("/console/sign-in");
    };
    if !csrf_ok(&s, f.csrf.as_deref()) {
        return html(
            StatusCode::FORBIDDEN,
            pages::message(
                &s,
                c.backend.live,
                "Refused",
                "The form's CSRF token is missing or wrong.",
            ),
        );
    }
    c.sign_out(&headers);
    let mut r = redirect("/console/sign-in");
    r.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static(
            "codespace_console=; HttpOnly; SameSite=Strict; Path=/console; Max-Age=0",
        ),
    );
    r
}

async fn approvals(State(c): Shared, headers: HeaderMap) -> Response {
    let s = match operator(&c, &headers) {
        Ok(s) => s,
        Err(r) => return r,
    };
    let c2 = Arc::clone(&c);
    match blocking(move || data::pending_holds(&c2.backend)).await {
        Ok(holds) => html(StatusCode::OK, pages::approvals(&s, c.backend.live, &holds)),
        Err(e) => failed(&s, c.backend.live, &e),
    }
}

async fn resolve(
    State(c): Shared,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(f): Form<CsrfForm>,
) -> Response {
    let s = match operator(&c, &headers) {
        Ok(s) => s,
        Err(r) => return r,
    };
    let live = c.backend.live;
    if !csrf_ok(&s, f.csrf.as_deref()) {
        tracing::warn!(client = %s.identity.name, "console POST refused: missing or wrong CSRF token");
        return html(
            StatusCode::FORBIDDEN,
            pages::message(
                &s,
                live,
                "Refused",
                "The form's CSRF token is missing or wrong.",
            ),
        );
    }
    if !live {
        return html(
            StatusCode::METHOD_NOT_ALLOWED,
            pages::message(
                &s,
                live,
                "Read-only",
                "This console reads the store only; grant and deny from `codespace serve --http`'s console or `codespace approvals`.",
            ),
        );
    }
    let decision = match f.decision.as_deref() {
        Some("grant") => ApprovalDecision::Grant,
        Some("deny") => ApprovalDecision::Deny,
        _ => {
            return html(
                StatusCode::BAD_REQUEST,
                pages::message(&s, live, "Refused", "decision must be grant or deny"),
            );
        }
    };
    let c2 = Arc::clone(&c);
    let who = s.identity.name.clone();
    let user = s.identity.user.clone();
    let out = blocking(move || {
        let b = &c2.backend;
        let store = b.store.as_ref().ok_or("no store")?;
        codespace_engine::gateway::approvals::operator_resolve(
            &b.config,
            &b.policies.snapshot(),
            store,
            &id,
            decision,
            codespace_engine::gateway::approvals::Operator { name: &who, user },
            OperatorChannel::Web,
        )
        .map_err(|e| format!("{}: {}", e.code.as_str(), e.message))
    })
    .await;
    match out {
        Ok(r) => {
            tracing::info!(approval_id = %r.approval_id, state = %r.state, by = %s.identity.name, "hold resolved from the console");
            redirect("/console/approvals")
        }
        Err(e) => html(
            StatusCode::FORBIDDEN,
            pages::message(&s, live, "Refused", &e),
        ),
    }
}

async fn decisions(
    State(c): Shared,
    headers: HeaderMap,
    Query(q): Query<data::DecisionFilter>,
) -> Response {
    let s = match operator(&c, &headers) {
        Ok(s) => s,
        Err(r) => return r,
    };
    let c2 = Arc::clone(&c);
    let q2 = q.clone();
    match blocking(move || data::decisions(&c2.backend, &q2)).await {
        Ok(v) => html(StatusCode::OK, pages::decisions(&s, c.backend.live, &q, &v)),
        Err(e) => failed(&s, c.backend.live, &e),
    }
}

async fn decision(State(c): Shared, headers: HeaderMap, Path(id): Path<String>) -> Response {
    let s = match operator(&c, &headers) {
        Ok(s) => s,
        Err(r) => return r,
    };
    let c2 = Arc::clone(&c);
    let id2 = id.clone();
    match blocking(move || data::decision(&c2.backend, &id2)).await {
        Ok(v) => html(StatusCode::OK, pages::decision(&s, c.backend.live, &id, &v)),
        Err(e) => failed(&s, c.backend.live, &e),
    }
}

async fn policies(State(c): Shared, headers: HeaderMap) -> Response {
    let s = match operator(&c, &headers) {
        Ok(s) => s,
        Err(r) => return r,
    };
    let c2 = Arc::clone(&c);
    match blocking(move || data::policies(&c2.backend)).await {
        Ok(v) => html(StatusCode::OK, pages::policies(&s, c.backend.live, &v)),
        Err(e) => failed(&s, c.backend.live, &e),
    }
}

async fn processes(State(c): Shared, headers: HeaderMap) -> Response {
    let s = match operator(&c, &headers) {
        Ok(s) => s,
        Err(r) => return r,
    };
    let c2 = Arc::clone(&c);
    match blocking(move || data::processes(&c2.backend)).await {
        Ok(v) => html(StatusCode::OK, pages::processes(&s, c.backend.live, &v)),
        Err(e) => failed(&s, c.backend.live, &e),
    }
}

async fn operation(State(c): Shared, headers: HeaderMap, Path(id): Path<String>) -> Response {
    let s = match operator(&c, &headers) {
        Ok(s) => s,
        Err(r) => return r,
    };
    let c2 = Arc::clone(&c);
    let id2 = id.clone();
    match blocking(move || data::operation(&c2.backend, &id2)).await {
        Ok(v) => html(
            StatusCode::OK,
            pages::operation(&s, c.backend.live, &id, &v),
        ),
        Err(e) => failed(&s, c.backend.live, &e),
    }
}

async fn not_found(State(c): Shared, headers: HeaderMap) -> Response {
    match c.session(&headers) {
        Some(s) => html(
            StatusCode::NOT_FOUND,
            pages::message(&s, c.backend.live, "Not found", "No such console page."),
        ),
        None => redirect("/console/sign-in"),
    }
}

/// The console's routes (to be mounted at the server root; every path is under `/console`),
/// with their security headers. The caller puts the DNS-rebinding guard in front.
pub fn router(console: Arc<Console>) -> Router {
    Router::new()
        .route(CONSOLE_PATH, get(root))
        .route("/console/", get(root))
        .route("/console/sign-in", get(sign_in_page).post(sign_in))
        .route("/console/sign-out", post(sign_out))
        .route("/console/approvals", get(approvals))
        .route("/console/approvals/{id}", post(resolve))
        .route("/console/decisions", get(decisions))
        .route("/console/decisions/{id}", get(decision))
        .route("/console/policies", get(policies))
        .route("/console/processes", get(processes))
        .route("/console/operations/{id}", get(operation))
        .route(
            "/console/assets/console.css",
            get(|| async {
                asset(
                    include_str!("assets/console.css"),
                    "text/css; charset=utf-8",
                )
            }),
        )
        .route(
            "/console/assets/console.js",
            get(|| async {
                asset(
                    include_str!("assets/console.js"),
                    "text/javascript; charset=utf-8",
                )
            }),
        )
        .route("/console/{*rest}", get(not_found))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_FORM_BYTES))
        .layer(axum::middleware::from_fn(headers_layer))
        .with_state(console)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_cookie_is_found_among_others_and_only_by_its_exact_name() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; codespace_console_x=2; codespace_console=abc ; b=3"),
        );
        assert_eq!(cookie_of(&h).as_deref(), Some("abc"));
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("xcodespace_console=1"),
        );
        assert_eq!(cookie_of(&h), None);
    }

    #[test]
    fn a_csrf_token_matches_only_exactly() {
        let s = Signed {
            identity: Identity {
                name: "op".into(),
                groups: Vec::new(),
                user: None,
            },
            operator: true,
            csrf: "0123abcd".into(),
        };
        assert!(csrf_ok(&s, Some("0123abcd")));
        for bad in [
            None,
            Some(""),
            Some("0123abc"),
            Some("0123abcd "),
            Some("0123ABCD"),
        ] {
            assert!(!csrf_ok(&s, bad), "{bad:?}");
        }
    }

    #[test]
    fn static_tokens_name_their_client_and_nothing_else() {
        let t = StaticTokens(vec![
            ("a".into(), Sha256::digest(b"token-of-a-0123456789").into()),
            ("b".into(), Sha256::digest(b"token-of-b-0123456789").into()),
        ]);
        assert_eq!(
            t.identify("token-of-b-0123456789").map(|i| i.name),
            Some("b".into())
        );
        assert!(t.identify("token-of-c-0123456789").is_none());
        assert!(t.identify("").is_none());
    }
}
