//! The egress proxy of `network: "proxy"` workspaces: HTTP `CONNECT` (TLS passes through
//! untouched) and absolute-form HTTP requests, each connection decided by a caller-supplied
//! [`Decider`] before anything is sent to the target.
//!
//! The crate knows nothing of Cedar, MCP or JSON-RPC. Per connection it parses the request head
//! (bounded); for a host name it first asks the decider about the name alone
//! ([`Decider::decide_name`]: a refused name is never looked up), then resolves it **once**
//! (through a [`Resolver`], the system one by default), classifies the resolved address
//! ([`IpClass`]), asks the decider again, and on an allow connects to exactly the address that
//! was decided (no second lookup); on a deny it answers `403` with the decider's body. Bytes then move in both directions by
//! `splice(2)` through a bounded pipe per direction (bodies are never buffered whole, and never
//! copied through the proxy's memory), with an idle timeout. Every process
//! has its own [`ProcessProxy`] with its counters and connection cap.
//!
//! Connections arrive either as accepted TCP streams ([`ProcessProxy::serve`]) or as descriptors
//! handed over a Unix control socket by the sandbox relay ([`ProcessProxy::serve_control`]).

#![forbid(unsafe_code)]

mod control;
mod http;
mod proxy;
mod pump;
mod target;

pub use control::control_pair;
pub use http::MAX_HEAD_BYTES;
pub use proxy::{
    CounterSnapshot, Decider, Lookup, ProcessProxy, ProxyLimits, Refusal, Resolver, SystemResolver,
    Verdict,
};
pub use target::{IpClass, Name, Scheme, Target, classify};
