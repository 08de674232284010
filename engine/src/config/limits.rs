//! `limits`: the operator's resource limits, their defaults and the minimum each must respect.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::error::ConfigError;

/// Default `limits.max_hash_bytes`: 1 GiB.
pub const DEFAULT_MAX_HASH_BYTES: u64 = 1 << 30;
/// Default `limits.max_patch_file_bytes`: 64 MiB.
pub const DEFAULT_MAX_PATCH_FILE_BYTES: u64 = 64 << 20;
/// Default `limits.max_message_bytes`: 16 MiB.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 16 << 20;
/// Default `limits.max_sessions_per_client`.
pub const DEFAULT_MAX_SESSIONS_PER_CLIENT: usize = 64;

/// Operator limits.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Live processes per server.
    #[schemars(range(min = 1))]
    pub max_live_processes: usize,
    /// Bytes of output kept per process.
    #[schemars(range(min = 1024))]
    pub output_ring_bytes: usize,
    /// Default and maximum process run time in milliseconds.
    pub process_timeout_ms: u64,
    /// Exited process handles kept.
    pub max_exited_processes: usize,
    /// Waiters per workspace lease queue.
    pub max_waiters: usize,
    /// Largest file `read` hashes for its version (`FILE_TOO_LARGE` beyond).
    pub max_hash_bytes: u64,
    /// Largest file `apply_patch` may touch (`FILE_TOO_LARGE` beyond).
    pub max_patch_file_bytes: u64,
    /// Largest JSON-RPC message: one stdio line, one HTTP request body.
    pub max_message_bytes: usize,
    /// HTTP sessions one client may hold open at once (429 beyond).
    pub max_sessions_per_client: usize,
    /// Most tasks (processes and threads) one command and its descendants may have.
    pub max_pids_per_process: u32,
    /// Most entries a workspace listing (walk or path index) holds; past it listings say `incomplete`.
    pub max_walk_entries: usize,
    /// How long an approval hold stays pending or granted, in milliseconds (`APPROVAL_CONFLICT` after).
    #[schemars(range(min = 1))]
    pub approval_ttl_ms: u64,
    /// `network: proxy`: connections one process may have open through the egress proxy at
    /// once (more get `429`).
    #[schemars(range(min = 1))]
    pub proxy_max_connections_per_process: usize,
    /// `network: proxy`: a proxied connection idle in both directions this long is closed.
    #[schemars(range(min = 1))]
    pub proxy_idle_timeout_ms: u64,
    /// `serve --http`: an HTTP/1 request head must be complete this long after the server
    /// starts reading it (an idle keep-alive connection is closed after it too), and a new
    /// connection must have sent an authenticated request within it.
    #[schemars(range(min = 1))]
    pub http_header_timeout_ms: u64,
    /// `serve --http`: connections open at once that have not sent an authenticated request
    /// yet; at the cap the oldest of them is closed to make room.
    #[schemars(range(min = 1))]
    pub http_max_unauthenticated_connections: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_live_processes: 8,
            output_ring_bytes: 1024 * 1024,
            process_timeout_ms: 10 * 60 * 1000,
            max_exited_processes: 64,
            max_waiters: 64,
            max_hash_bytes: DEFAULT_MAX_HASH_BYTES,
            max_patch_file_bytes: DEFAULT_MAX_PATCH_FILE_BYTES,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            max_sessions_per_client: DEFAULT_MAX_SESSIONS_PER_CLIENT,
            max_pids_per_process: 512,
            max_walk_entries: 1_000_000,
            approval_ttl_ms: 3_600_000,
            proxy_max_connections_per_process: 64,
            proxy_idle_timeout_ms: 60_000,
            http_header_timeout_ms: 10_000,
            http_max_unauthenticated_connections: 64,
        }
    }
}

impl Limits {
    /// Refuses a limit below its minimum, naming it.
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        let limits = self;
        if limits.max_live_processes == 0 {
            return Err(ConfigError(
                "limits.max_live_processes: must be at least 1".into(),
            ));
        }
        if limits.max_pids_per_process == 0 {
            return Err(ConfigError(
                "limits.max_pids_per_process: must be at least 1".into(),
            ));
        }
        if limits.output_ring_bytes < 1024 {
            return Err(ConfigError(
                "limits.output_ring_bytes: must be at least 1024".into(),
            ));
        }
        for (name, value, min) in [
            ("max_hash_bytes", limits.max_hash_bytes, 1),
            ("max_patch_file_bytes", limits.max_patch_file_bytes, 1),
            ("max_message_bytes", limits.max_message_bytes as u64, 1024),
            (
                "max_sessions_per_client",
                limits.max_sessions_per_client as u64,
                1,
            ),
            ("http_header_timeout_ms", limits.http_header_timeout_ms, 1),
            (
                "http_max_unauthenticated_connections",
                limits.http_max_unauthenticated_connections as u64,
                1,
            ),
        ] {
            if value < min {
                return Err(ConfigError(format!(
                    "limits.{name}: must be at least {min}"
                )));
            }
        }
        if limits.max_walk_entries == 0 {
            return Err(ConfigError(
                "limits.max_walk_entries: must be at least 1".into(),
            ));
        }
        if limits.approval_ttl_ms == 0 {
            return Err(ConfigError(
                "limits.approval_ttl_ms: must be at least 1".into(),
            ));
        }
        if limits.proxy_max_connections_per_process == 0 || limits.proxy_idle_timeout_ms == 0 {
            return Err(ConfigError(
            "limits.proxy_max_connections_per_process and limits.proxy_idle_timeout_ms: must be at least 1"
                .into(),
        ));
        }
        Ok(())
    }
}
