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

use crate::config::Limits;
use crate::error::{ErrorCode, ToolError};
use crate::redact::LiveRedactor;
use crate::request::{
    NetTarget, ProcessFacts, Session, SubRequest, WorkspaceFacts, connect_request,
};
use codespace_policy::Decider;
use codespace_runner_netproxy::{Name, ProxyLimits, Refusal, Target, Verdict};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

/// The address commands of a `network: proxy` workspace use (inside their own namespace).
pub fn proxy_address() -> String {
    format!("127.0.0.1:{}", codespace_runner_sandbox::PROXY_PORT)
}

/// What every process's egress proxy shares: the one [`Decider`], the redactor of error texts,
/// this server's own HTTP listeners and the proxy limits. It decides nothing itself.
#[derive(Debug)]
pub(crate) struct Egress {
    decider: Arc<Decider>,
    redaction: LiveRedactor,
    listeners: Mutex<Vec<SocketAddr>>,
    pub(crate) limits: ProxyLimits,
}

impl Egress {
    pub(crate) fn new(decider: Arc<Decider>, redaction: LiveRedactor, limits: &Limits) -> Egress {
        Egress {
            decider,
            redaction,
            listeners: Mutex::new(Vec::new()),
            limits: ProxyLimits {
                max_connections: limits.proxy_max_connections_per_process,
                idle_timeout: Duration::from_millis(limits.proxy_idle_timeout_ms),
                ..ProxyLimits::default()
            },
        }
    }

    /// The proxy's decider for one process of `facts`' workspace started by `session` (its
    /// process facts are set once it is spawned).
    pub(crate) fn process_decider(
        self: &Arc<Self>,
        facts: &WorkspaceFacts,
        session: &Session,
    ) -> Arc<ProcessDecider> {
        Arc::new(ProcessDecider {
            net: Arc::clone(self),
            facts: facts.clone(),
            session: session.clone(),
            process: OnceLock::new(),
        })
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

/// The egress proxy's decider of one process: its workspace, the client that started it, and
/// (once spawned) its process facts; it asks the one [`Decider`]. Built by
/// [`Egress::process_decider`].
#[derive(Debug)]
pub(crate) struct ProcessDecider {
    net: Arc<Egress>,
    facts: WorkspaceFacts,
    session: Session,
    pub(crate) process: OnceLock<ProcessFacts>,
}

impl codespace_runner_netproxy::Decider for ProcessDecider {
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
        let (snap, decision) = self
            .net
            .decider
            .decide_connection(&self.facts, &self.session, req);
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
            .decider
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
            let reason = format!(
                "refused by the egress proxy: the name may be looked up but did not resolve ({message}); no connection was made"
            );
            let id = self.net.decider.refuse_unresolved(
                &self.facts,
                &self.session,
                name_req,
                message,
                reason,
            );
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
