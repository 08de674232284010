//! `network: "proxy"`: the engine side of the egress proxy. Every connection a command opens
//! through its sandbox relay becomes a Cedar request (action `network_connect`, the target as
//! Operation attributes, the process in the context), decided under the live policy set and
//! written to the audit log like every other decision; a deny is a `403` whose body is the
//! ErrorBody JSON. The proxy itself (`runner/netproxy`) knows nothing of Cedar.
//!
//! A host *name* is first decided before it is looked up (the name phase): the request is asked
//! once per address class it could resolve to (`ip_class` public, private, loopback, link_local;
//! `server_owned` both ways when this server listens on that port), and when every one is denied
//! the name is refused without a DNS query, audited as one row (the request without `ip_class`,
//! the policies that refused every class, or the default deny). Otherwise the name is looked up and the connection decided on
//! its address as before; a name that does not resolve is audited as a refusal too.

use crate::config::{Limits, Profile};
use crate::error::{ErrorCode, ToolError};
use crate::policy::decide::{Decision, SubDecision, decide, workspace_entities};
use crate::policy::{PolicySnapshot, PolicyStore};
use crate::redact::LiveRedactor;
use crate::request::{
    NetTarget, ProcessFacts, Session, SubRequest, WorkspaceFacts, connect_request,
};
use cedar_policy::Entities;
use codespace_runner_netproxy::{Decider, Name, ProxyLimits, Refusal, Target, Verdict};
use codespace_store::Store;
use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

/// The address commands of a `network: proxy` workspace use (inside their own namespace).
pub fn proxy_address() -> String {
    format!("127.0.0.1:{}", codespace_runner_sandbox::PROXY_PORT)
}

/// What every process's decider shares: the policy store, the profile tree, the store, the
/// redactor, this server's own HTTP listener and the proxy limits.
#[derive(Debug)]
pub(crate) struct NetState {
    policy: Arc<PolicyStore>,
    profiles: BTreeMap<String, Profile>,
    store: Option<Arc<Store>>,
    redaction: LiveRedactor,
    listeners: Mutex<Vec<SocketAddr>>,
    entities: Mutex<HashMap<String, (String, Entities)>>,
    pub(crate) limits: ProxyLimits,
}

impl NetState {
    pub(crate) fn new(
        policy: Arc<PolicyStore>,
        profiles: BTreeMap<String, Profile>,
        store: Option<Arc<Store>>,
        redaction: LiveRedactor,
        limits: &Limits,
    ) -> NetState {
        NetState {
            policy,
            profiles,
            store,
            redaction,
            listeners: Mutex::new(Vec::new()),
            entities: Mutex::new(HashMap::new()),
            limits: ProxyLimits {
                max_connections: limits.proxy_max_connections_per_process,
                idle_timeout: Duration::from_millis(limits.proxy_idle_timeout_ms),
                ..ProxyLimits::default()
            },
        }
    }

    /// Records an HTTP listener of this server: connections to it are `server_owned`.
    pub(crate) fn add_listener(&self, addr: SocketAddr) {
        self.listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(addr);
    }

    /// Whether `addr` may be this server's own HTTP listener: the same port on the listener's
    /// address, on a loopback or unspecified address, or on any address when the listener is
    /// bound to all of them (over-approximated: a remote host on that port is refused too).
    pub(crate) fn is_server_listener(&self, addr: SocketAddr) -> bool {
        let ip = canonical(addr.ip());
        self.listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .any(|l| {
                let lip = canonical(l.ip());
                l.port() == addr.port()
                    && (lip == ip
                        || ip.is_loopback()
                        || ip.is_unspecified()
                        || lip.is_unspecified())
            })
    }

    fn entities(&self, snap: &PolicySnapshot, facts: &WorkspaceFacts) -> Result<Entities, String> {
        let mut cache = self.entities.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((sha, e)) = cache.get(&facts.id)
            && *sha == snap.sha256
        {
            return Ok(e.clone());
        }
        let e = workspace_entities(snap, &self.profiles, facts)?;
        cache.insert(facts.id.clone(), (snap.sha256.clone(), e.clone()));
        Ok(e)
    }

    /// Decides one connection request under the live set (and the shadow set, logged only),
    /// and writes its audit row.
    pub(crate) fn decide(
        &self,
        facts: &WorkspaceFacts,
        session: &Session,
        req: SubRequest,
    ) -> (Arc<PolicySnapshot>, Decision) {
        let snap = self.policy.snapshot();
        let reqs = [req];
        let decision = self.evaluate(&snap, facts, &reqs);
        let shadow = self.policy.shadow().map(|sh| {
            let base = workspace_entities(&sh, &self.profiles, facts)
                .unwrap_or_else(|_| Entities::empty());
            decide(&sh, &base, facts, "network_connect", &reqs)
        });
        self.audit(
            &snap,
            &decision,
            shadow.as_ref(),
            facts,
            &reqs,
            session,
            None,
        );
        (snap, decision)
    }

    /// Decides `reqs` under `snap` without writing anything.
    fn evaluate(
        &self,
        snap: &PolicySnapshot,
        facts: &WorkspaceFacts,
        reqs: &[SubRequest],
    ) -> Decision {
        match self.entities(snap, facts) {
            Ok(base) => decide(snap, &base, facts, "network_connect", reqs),
            Err(e) => {
                let mut d = decide(snap, &Entities::empty(), facts, "network_connect", &[]);
                d.subs = reqs
                    .iter()
                    .enumerate()
                    .map(|(i, r)| SubDecision::refused(i, r, format!("entities: {e}")))
                    .collect();
                d
            }
        }
    }

    /// The name phase: `name_req` (no `ip_class`) asked once per request of `variants` (one
    /// per address class it could resolve to). `None` when any variant is allowed (the name
    /// may be looked up; no row is written). Otherwise the refusal, audited as one row for
    /// `name_req` naming the policies that refused every variant (none: the default deny).
    pub(crate) fn decide_name(
        &self,
        facts: &WorkspaceFacts,
        session: &Session,
        name_req: SubRequest,
        variants: &[SubRequest],
    ) -> Option<(Arc<PolicySnapshot>, Decision)> {
        let snap = self.policy.snapshot();
        let decided = self.evaluate(&snap, facts, variants);
        if decided.subs.iter().any(|s| s.allowed) || decided.subs.is_empty() {
            return None;
        }
        // The policies that refused every class (e.g. a forbid on the host) are the row's
        // determining policies; when none refused them all, no permit covers any class: the
        // default deny.
        let mut sub = SubDecision::refused(0, &name_req, String::new());
        sub.errors.clear();
        sub.policy_ids = decided
            .subs
            .first()
            .map(|s| s.policy_ids.clone())
            .unwrap_or_default();
        for s in &decided.subs {
            sub.policy_ids.retain(|id| s.policy_ids.contains(id));
            for e in &s.errors {
                if !sub.errors.contains(e) {
                    sub.errors.push(e.clone());
                }
            }
            sub.duration_us = sub.duration_us.saturating_add(s.duration_us);
        }
        sub.default_deny = sub.policy_ids.is_empty() && sub.errors.is_empty();
        let decision = Decision {
            subs: vec![sub],
            ..decided
        };
        self.audit(&snap, &decision, None, facts, &[name_req], session, None);
        Some((snap, decision))
    }

    /// A name the name phase allowed did not resolve: audited as a refusal of `name_req` with
    /// `message`; returns the decision id of that row.
    pub(crate) fn unresolved(
        &self,
        facts: &WorkspaceFacts,
        session: &Session,
        name_req: SubRequest,
        message: &str,
    ) -> String {
        let snap = self.policy.snapshot();
        let mut d = decide(&snap, &Entities::empty(), facts, "network_connect", &[]);
        d.subs = vec![SubDecision::refused(0, &name_req, message.to_string())];
        let reason = format!(
            "refused by the egress proxy: the name may be looked up but did not resolve ({message}); no connection was made"
        );
        self.audit(&snap, &d, None, facts, &[name_req], session, Some(reason));
        d.decision_id
    }

    #[allow(clippy::too_many_arguments)]
    fn audit(
        &self,
        snap: &PolicySnapshot,
        d: &Decision,
        shadow: Option<&Decision>,
        facts: &WorkspaceFacts,
        reqs: &[SubRequest],
        session: &Session,
        reason: Option<String>,
    ) {
        let Some(store) = &self.store else { return };
        let at = crate::gateway::RowContext::now(snap, facts, session);
        let redactor = self.redaction.current();
        let mut rows =
            crate::gateway::rows_with_shadow(&self.profiles, &redactor, &at, d, shadow, reqs);
        if let Some(reason) = reason {
            for row in &mut rows {
                row.reason = Some(redactor.text(&reason).into_owned());
            }
        }
        crate::audit::append(store, rows, &d.decision_id, false);
    }

    /// Whether this server has an HTTP listener on `port` (a name on that port may resolve to
    /// it, so the name phase asks both ways).
    fn listens_on(&self, port: u16) -> bool {
        self.listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .any(|l| l.port() == port)
    }
}

/// Every `ip_class` a resolved address can have (the name phase asks each).
const IP_CLASSES: [codespace_runner_netproxy::IpClass; 4] = [
    codespace_runner_netproxy::IpClass::Public,
    codespace_runner_netproxy::IpClass::Private,
    codespace_runner_netproxy::IpClass::Loopback,
    codespace_runner_netproxy::IpClass::LinkLocal,
];

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The decider of one process: its workspace, the client that started it, and (once spawned)
/// its process facts.
#[derive(Debug)]
pub(crate) struct ProcessDecider {
    pub(crate) net: Arc<NetState>,
    pub(crate) facts: WorkspaceFacts,
    pub(crate) session: Session,
    pub(crate) process: OnceLock<ProcessFacts>,
}

impl Decider for ProcessDecider {
    fn decide(&self, target: &Target) -> Verdict {
        let Some(process) = self.process.get() else {
            return Verdict::Deny {
                body: ToolError::new(
                    ErrorCode::Unauthorized,
                    "the connection's process is not registered yet",
                )
                .to_json(),
            };
        };
        let net = NetTarget {
            host: target.host.clone(),
            port: target.port,
            scheme: target.scheme.as_str().to_string(),
            ip_class: target.ip_class.as_str().to_string(),
            server_owned: self.net.is_server_listener(target.addr),
        };
        let req = connect_request(&self.session, process, &net);
        let (snap, decision) = self.net.decide(&self.facts, &self.session, req);
        if decision.allowed() {
            Verdict::Allow
        } else {
            let mut e = decision.to_error(&snap);
            if let std::borrow::Cow::Owned(red) = self.net.redaction.text(&e.message) {
                e.message = red;
            }
            Verdict::Deny { body: e.to_json() }
        }
    }

    fn decide_name(&self, name: &Name) -> Verdict {
        let Some(process) = self.process.get() else {
            return Verdict::Deny {
                body: ToolError::new(
                    ErrorCode::Unauthorized,
                    "the connection's process is not registered yet",
                )
                .to_json(),
            };
        };
        let owned: &[bool] = if self.net.listens_on(name.port) {
            &[false, true]
        } else {
            &[false]
        };
        let mut variants = Vec::with_capacity(IP_CLASSES.len() * owned.len());
        for class in IP_CLASSES {
            for server_owned in owned {
                let net = NetTarget {
                    host: name.host.clone(),
                    port: name.port,
                    scheme: name.scheme.as_str().to_string(),
                    ip_class: class.as_str().to_string(),
                    server_owned: *server_owned,
                };
                variants.push(connect_request(&self.session, process, &net));
            }
        }
        let name_req = name_request(&self.session, process, name);
        match self
            .net
            .decide_name(&self.facts, &self.session, name_req, &variants)
        {
            None => Verdict::Allow,
            Some((snap, decision)) => {
                let mut e = decision.to_error(&snap);
                e.message = format!(
                    "{} (refused before the name was looked up: no address it could resolve to would be allowed)",
                    e.message
                );
                if let std::borrow::Cow::Owned(red) = self.net.redaction.text(&e.message) {
                    e.message = red;
                }
                Verdict::Deny { body: e.to_json() }
            }
        }
    }

    fn unresolved(&self, name: &Name, message: &str) -> String {
        let mut e = ToolError::new(
            ErrorCode::Internal,
            format!(
                "egress proxy: {}",
                self.net.redaction.text(message).into_owned()
            ),
        );
        if let Some(process) = self.process.get() {
            let name_req = name_request(&self.session, process, name);
            let id = self
                .net
                .unresolved(&self.facts, &self.session, name_req, message);
            e.decision_id = Some(id);
        }
        e.to_json()
    }

    fn refusal_body(&self, refusal: Refusal, message: &str) -> String {
        let code = match refusal {
            Refusal::BadRequest | Refusal::HeadTooLarge => ErrorCode::InvalidArguments,
            Refusal::TooManyConnections => ErrorCode::ResourceQueueFull,
            Refusal::Unreachable => ErrorCode::Internal,
            Refusal::DecisionFailed => ErrorCode::Unauthorized,
        };
        let message = self.net.redaction.text(message).into_owned();
        ToolError::new(code, format!("egress proxy: {message}")).to_json()
    }
}

/// The name-phase request of `name`: no `ip_class` (nothing was looked up), not `server_owned`.
fn name_request(session: &Session, process: &ProcessFacts, name: &Name) -> SubRequest {
    let net = NetTarget {
        host: name.host.clone(),
        port: name.port,
        scheme: name.scheme.as_str().to_string(),
        ip_class: String::new(),
        server_owned: false,
    };
    let mut req = connect_request(session, process, &net);
    req.subject = format!("{} before lookup", req.subject);
    req
}

/// The `ip_class` spelling of an address (`policy explain --connect`).
pub fn ip_class_of(ip: IpAddr) -> &'static str {
    codespace_runner_netproxy::classify(ip).as_str()
}

impl crate::gateway::Gateway {
    /// Explains the `network_connect` request a process of `workspace` would make for `target`,
    /// under the policy set in force, with the facts the server would use (the target is this
    /// server's listener only when `target.server_owned` says so). Writes no audit row.
    pub fn explain_connect(
        &self,
        workspace: &str,
        session: &Session,
        process: &ProcessFacts,
        target: &NetTarget,
    ) -> Result<crate::policy::explain::Explanation, ToolError> {
        let ws = self.workspace(workspace)?;
        let snap = self.policy.snapshot();
        let req = connect_request(session, process, target);
        Ok(crate::policy::explain::explain_requests(
            &snap,
            &self.config.profiles,
            &ws.facts,
            "network_connect",
            &[req],
        ))
    }
}
