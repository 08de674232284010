//! The result of `workspace_info`: the server block (always) and, for a selected workspace, its
//! profile and effective execution contract. Fields the old JSON sent as `null` stay `null`
//! (`workspace_id` without a workspace, `write_paths` without a sandbox, unknown oldest rows).

use super::process::WritePaths;
use serde::Serialize;
use std::collections::BTreeMap;

/// Result of `workspace_info`.
#[derive(Debug, Clone, Serialize)]
pub struct WorkspaceInfoResult {
    /// Always `codespace`.
    pub server: &'static str,
    /// The server's version.
    pub version: &'static str,
    /// Always false: the server never calls a model.
    pub internal_model_calls: bool,
    /// The tools this build exposes.
    pub tools_exposed: Vec<&'static str>,
    /// The transports this server serves.
    pub transports: Vec<String>,
    /// The selected workspace (`null` without one).
    pub workspace_id: Option<String>,
    /// Always false: a workspace id grants nothing by itself.
    pub workspace_id_is_credential: bool,
    /// A sentence about what the server is.
    pub note: &'static str,
    /// The policy set in force.
    pub policy: PolicyInfo,
    /// The store's retention and row counts (with a store).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub store: Option<StoreInfo>,
    /// The selected workspace's profile.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// The selected workspace's effective execution contract.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub execution: Option<Box<ExecutionInfo>>,
    /// The selected workspace's environment and the state of its worker.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub environment: Option<EnvironmentStatus>,
    /// What telemetry lost or sent since the server started: present when `export.otlp` is
    /// configured or an audit write failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub telemetry: Option<TelemetryInfo>,
}

/// `workspace_info.telemetry`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TelemetryInfo {
    /// Decisions whose audit rows the store refused (each also an `audit_write_failed` event).
    pub audit_write_failures: u64,
    /// The OTLP export (absent without `export.otlp`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub otlp: Option<OtlpInfo>,
}

/// `workspace_info.telemetry.otlp`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OtlpInfo {
    /// The collector's scheme, host and port (no user info, no path).
    pub endpoint: String,
    /// Decision rows and operation events.
    pub logs: OtlpSignalInfo,
    /// Tool-call spans.
    pub spans: OtlpSignalInfo,
}

/// Records of one OTLP signal since start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct OtlpSignalInfo {
    /// Accepted into the export queue.
    pub queued: u64,
    /// Dropped at a full queue.
    pub dropped: u64,
    /// Accepted by the collector.
    pub exported: u64,
    /// Lost with a batch whose export failed.
    pub failed: u64,
}

/// `workspace_info.environment`: where the selected workspace's files live and its commands
/// run (the same three facts Cedar sees as `resource.workspace.environment`), and its worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EnvironmentStatus {
    /// The environment id.
    pub id: String,
    /// `host`, `worker`, `ssh`, `container`, `kubernetes`, `command` or `linux-container`.
    pub kind: &'static str,
    /// `in-process`, `unix`, `ssh`, `podman`, `docker`, `kubectl`, `command` or `none`.
    pub transport: &'static str,
    /// The ssh host, the container, `namespace/pod`; "" for `host`, `worker` and `command`.
    pub host: String,
    /// The worker serving it.
    pub worker: WorkerStatus,
}

/// The state of an environment's worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkerState {
    /// No worker: the server serves the environment itself (`host`, and `linux-container`,
    /// whose reads the server serves and whose writes and commands a guardrail refuses).
    InProcess,
    /// The worker is being started (or its handshake is under way).
    Starting,
    /// The worker answered the handshake and serves calls.
    Ready,
    /// The worker died or disconnected; it is started again on the next call, after a backoff.
    Restarting,
    /// The worker cannot be reached; calls fail with `ENVIRONMENT_UNAVAILABLE` (`reason`).
    Unavailable,
}

/// `workspace_info.environment.worker`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorkerStatus {
    /// Its state.
    pub state: WorkerState,
    /// The worker's version (from its handshake; the server's own for `in-process`); `null`
    /// before a handshake.
    pub version: Option<String>,
    /// How many times it was started again after dying or disconnecting.
    pub restarts: u64,
    /// Why it is unavailable (a message safe to show a model), when it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `workspace_info.policy`.
#[derive(Debug, Clone, Serialize)]
pub struct PolicyInfo {
    /// Digest of the policy set.
    pub set_sha256: String,
    /// RFC 3339 time it was loaded.
    pub loaded_at: String,
    /// The last reload that was refused, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_reload_rejected: Option<RejectedReloadInfo>,
    /// Who signed the set in force (only when the config requires a signature).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signer: Option<SignerInfo>,
}

/// `workspace_info.policy.signer`.
#[derive(Debug, Clone, Serialize)]
pub struct SignerInfo {
    /// The `allowed_signers` principal whose key signed the set.
    pub principal: String,
    /// The key (`ED25519 key SHA256:…`).
    pub key: String,
}

/// `workspace_info.policy.last_reload_rejected`.
#[derive(Debug, Clone, Serialize)]
pub struct RejectedReloadInfo {
    /// RFC 3339 time of the attempt.
    pub at: String,
    /// Its diagnostics.
    pub errors: Vec<String>,
}

/// `workspace_info.store`.
#[derive(Debug, Clone, Serialize)]
pub struct StoreInfo {
    /// How long each kind of row is kept.
    pub retention: RetentionInfo,
    /// The row counts the background pruner last took.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rows: Option<StoreRows>,
}

/// `workspace_info.store.retention`.
#[derive(Debug, Clone, Serialize)]
pub struct RetentionInfo {
    /// Audit rows.
    pub audit: String,
    /// Operations.
    pub operations: String,
    /// Operation keys.
    pub operation_keys: String,
}

/// `workspace_info.store.rows`.
#[derive(Debug, Clone, Serialize)]
pub struct StoreRows {
    /// RFC 3339 time of the count.
    pub counted_at: String,
    /// Audit rows.
    pub audit: i64,
    /// The oldest audit row (`null` when none).
    pub oldest_audit_at: Option<String>,
    /// Operations.
    pub operations: i64,
    /// The oldest operation (`null` when none).
    pub oldest_operation_at: Option<String>,
    /// Process rows.
    pub processes: i64,
    /// Event rows.
    pub events: i64,
    /// Operation keys.
    pub operation_keys: i64,
}

/// One capability's verdict (`workspace_info.execution.capabilities`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Capability {
    /// `allowed`, `denied` or `conditional`.
    pub decision: &'static str,
    /// The policies that decided the probes (permits of allowed probes, forbids of denied
    /// ones; a default deny has none), sorted.
    pub policy_ids: Vec<String>,
}

impl Capability {
    /// True when allowed or conditional (the booleans of `permissions` and `*.available`).
    pub fn possible(&self) -> bool {
        self.decision != "denied"
    }
}

/// `workspace_info.execution`.
#[derive(Debug, Clone, Serialize)]
pub struct ExecutionInfo {
    /// Where commands run.
    pub environment: EnvironmentInfo,
    /// read / write / exec: allowed or conditional.
    pub permissions: Permissions,
    /// Each capability's verdict over its probe set.
    pub capabilities: BTreeMap<&'static str, Capability>,
    /// The file tools.
    pub files: FilesInfo,
    /// The process tools.
    pub process: ProcessInfo,
    /// How calls on one workspace are serialized.
    pub serialization: SerializationInfo,
    /// What confines commands and file tools.
    pub isolation: IsolationInfo,
    /// Commands' network.
    pub network: NetworkInfo,
    /// The workspace's approvals setting.
    pub approvals: &'static str,
    /// The channels a hold can be answered on.
    pub approval_channels: &'static [&'static str],
}

/// `workspace_info.execution.environment`.
#[derive(Debug, Clone, Serialize)]
pub struct EnvironmentInfo {
    /// The environment kind.
    pub kind: &'static str,
    /// Always false.
    pub client_selectable: bool,
    /// Whether commands run.
    pub exec_supported: bool,
    /// Always true.
    pub file_read_supported: bool,
    /// Whether files can be written.
    pub file_write_supported: bool,
}

/// `workspace_info.execution.permissions`.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Permissions {
    /// `read` may be allowed.
    pub read: bool,
    /// `apply_patch` may be allowed.
    pub write: bool,
    /// `exec_command` may be allowed.
    pub exec: bool,
}

/// `{available}` of one tool.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Available {
    /// Whether a call may be allowed.
    pub available: bool,
}

/// `workspace_info.execution.files`.
#[derive(Debug, Clone, Serialize)]
pub struct FilesInfo {
    /// `read`.
    pub read: Available,
    /// `find`.
    pub find: Available,
    /// `apply_patch`.
    pub patch: Available,
    /// `grep`.
    pub grep: Available,
    /// `find_files`.
    pub find_files: Available,
    /// Limits and features of the file tools.
    pub capabilities: FileCapabilities,
}

/// `workspace_info.execution.files.capabilities`.
#[derive(Debug, Clone, Serialize)]
pub struct FileCapabilities {
    /// Always true.
    pub read_range: bool,
    /// Always true.
    pub find_pagination: bool,
    /// Largest `read` window.
    pub read_max_bytes: u64,
    /// Largest `find` page.
    pub find_max_paths: u64,
    /// Larger files are FILE_TOO_LARGE for read / apply_patch.
    pub max_hash_bytes: u64,
    /// Largest file a patch may touch.
    pub max_patch_file_bytes: u64,
    /// Largest `grep` page.
    pub grep_max_matches: u64,
    /// Largest file `grep` searches.
    pub grep_max_file_bytes: u64,
    /// Longest line `grep` returns.
    pub grep_max_line_chars: usize,
    /// Most entries a walk visits.
    pub max_walk_entries: usize,
}

/// `workspace_info.execution.process`.
#[derive(Debug, Clone, Serialize)]
pub struct ProcessInfo {
    /// Whether the process tools may be used.
    pub available: bool,
    /// What they can do (when available).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<ProcessCapabilities>,
}

/// `workspace_info.execution.process.capabilities`.
#[derive(Debug, Clone, Serialize)]
pub struct ProcessCapabilities {
    /// Processes are handles.
    pub handles: bool,
    /// They outlive the request.
    pub survives_request_end: bool,
    /// `write_stdin` works.
    pub write_stdin: bool,
    /// `read_process` reads from a cursor.
    pub incremental_read: bool,
    /// `terminate_process` works.
    pub terminate: bool,
    /// stdout and stderr are one stream unless asked apart.
    pub output_combined: bool,
    /// Terminals.
    pub tty: TtyCapabilities,
    /// Who owns a process and when it ends.
    pub lifetime: ProcessLifetime,
}

/// `workspace_info.execution.process.capabilities.tty`.
#[derive(Debug, Clone, Serialize)]
pub struct TtyCapabilities {
    /// Terminals are supported.
    pub supported: bool,
    /// `tty` defaults to false.
    pub default: bool,
    /// Rows of a new terminal.
    pub initial_rows: u16,
    /// Columns of a new terminal.
    pub initial_cols: u16,
    /// `process_resize` works.
    pub resize_supported: bool,
}

/// `workspace_info.execution.process.capabilities.lifetime`.
#[derive(Debug, Clone, Serialize)]
pub struct ProcessLifetime {
    /// Who owns processes.
    pub owner: &'static str,
    /// What a client's disconnect does to them.
    pub client_disconnect: &'static str,
    /// What the server's shutdown does to them.
    pub gateway_shutdown: &'static str,
    /// What a restart recovers.
    pub restart_recovery: &'static str,
}

/// `workspace_info.execution.serialization`.
#[derive(Debug, Clone, Serialize)]
pub struct SerializationInfo {
    /// What is serialized.
    pub scope: &'static str,
    /// What a conflicting request does.
    pub request_conflict: &'static str,
    /// What a conflicting process does.
    pub process_conflict: &'static str,
    /// Whether the queue survives a restart.
    pub queue_durable: bool,
    /// Waiters per resource.
    pub max_waiters_per_resource: usize,
    /// The error of a full queue.
    pub queue_full_error: &'static str,
    /// The error of a conflict.
    pub conflict_error: &'static str,
    /// A live process holds the mutation lease.
    pub live_process_holds_mutation_lease: bool,
    /// `read` runs beside a live process.
    pub read_while_process_live: bool,
    /// `find` runs beside a live process.
    pub find_while_process_live: bool,
    /// `apply_patch` runs beside a live process.
    pub patch_while_process_live: bool,
    /// Whose live foreground processes block a mutation (the operator's switch).
    pub lease_scope: &'static str,
    /// Background processes (`exec_command` `background: true`) never hold the lease.
    pub background_process_holds_mutation_lease: bool,
}

/// `workspace_info.execution.isolation`.
#[derive(Debug, Clone, Serialize)]
pub struct IsolationInfo {
    /// Always true.
    pub file_tools_workspace_scoped: bool,
    /// `linux-sandbox` or `none`.
    pub command_sandbox: &'static str,
    /// The workspace's sandbox setting.
    pub sandbox: &'static str,
    /// The read paths' names (never their paths).
    pub read_paths: Vec<String>,
    /// The write scope of a command at the root (`null` without the sandbox).
    pub write_paths: Option<WritePaths>,
    /// The toolchains found at start: names and the read path each became.
    pub toolchains: Vec<ToolchainInfo>,
    /// The per-process task limit.
    pub pids: PidsInfo,
    /// The secret-masking fact.
    pub secret_masking: &'static str,
    /// What the kernel of the workspace's environment offers the command sandbox, as its
    /// runner probed it (absent when the runner cannot be reached).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel: Option<KernelInfo>,
    /// How sandboxed commands start: `dedicated` (the `codespace-sandbox-helper` binary beside
    /// the server) or `self-exec` (the server binary as its own helper: slower starts);
    /// `null` without the sandbox.
    pub sandbox_helper: Option<&'static str>,
}

/// `workspace_info.execution.isolation.kernel`: the environment's kernel, probed by its runner.
#[derive(Debug, Clone, Serialize)]
pub struct KernelInfo {
    /// Landlock ABI version, if any.
    pub landlock_abi: Option<u32>,
    /// seccomp filters.
    pub seccomp: bool,
    /// User namespaces.
    pub user_namespaces: bool,
    /// Network namespaces.
    pub net_namespaces: bool,
    /// Mount namespaces (secret masks, write scopes).
    pub mount_namespaces: bool,
}

/// One toolchain of `workspace_info.execution.isolation.toolchains`.
#[derive(Debug, Clone, Serialize)]
pub struct ToolchainInfo {
    /// Its name.
    pub name: String,
    /// The read path it became.
    pub read_path: String,
}

/// `workspace_info.execution.isolation.pids`.
#[derive(Debug, Clone, Serialize)]
pub struct PidsInfo {
    /// Most tasks one process tree may have.
    pub limit: u32,
    /// How the limit is enforced.
    pub mechanism: &'static str,
}

/// `workspace_info.execution.network`.
#[derive(Debug, Clone, Serialize)]
pub struct NetworkInfo {
    /// The network policy.
    pub policy: &'static str,
    /// How it is enforced.
    pub enforcement: &'static str,
    /// Always false.
    pub client_may_escalate: bool,
    /// `network: proxy` with the sandbox: the proxy's address inside each command's namespace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proxy: Option<String>,
}
