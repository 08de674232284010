//! `WorkerError`: what a call, a handshake or a transport can fail with.

use thiserror::Error;

/// A worker-protocol failure.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum WorkerError {
    /// The connection is gone (the worker died, the stream closed): every in-flight call fails
    /// with this, and every later call on the same client.
    #[error("worker disconnected: {0}")]
    Disconnected(String),
    /// Protocol version or build id differ.
    #[error("worker protocol mismatch: gateway {gateway} met worker {worker}")]
    Mismatch {
        /// `<protocol>/<build id>` of this side.
        gateway: String,
        /// `<protocol>/<build id>` the worker announced.
        worker: String,
    },
    /// The handshake did not complete (the worker closed without an answer: a wrong secret,
    /// a worker that did not start; `detail` holds what it printed on stderr, if anything).
    #[error("worker handshake failed: {0}")]
    Handshake(String),
    /// A frame could not be encoded or decoded, or was too large.
    #[error("worker protocol error: {0}")]
    Protocol(String),
    /// The transport could not be set up (spawn, bind, connect).
    #[error("worker transport: {0}")]
    Transport(String),
    /// The worker is down and the supervisor waits before the next attempt.
    #[error("worker unavailable: {reason} (next attempt in {retry_in_ms} ms)")]
    Unavailable {
        /// The last error.
        reason: String,
        /// Milliseconds until the supervisor tries again.
        retry_in_ms: u64,
    },
}

impl WorkerError {
    pub(crate) fn io(what: &str, e: &std::io::Error) -> WorkerError {
        WorkerError::Transport(format!("{what}: {e}"))
    }
}
