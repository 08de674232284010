//! Wire types of the process tools: `exec_command`, `write_stdin`, `read_process`,
//! `process_status`, `process_resize`, `terminate_process`, `process_list`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Parameters of `exec_command`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecCommandParams {
    /// The workspace id.
    pub workspace_id: String,
    /// Exact argv (no shell); argv[0] is looked up on the runner's PATH.
    pub command: Vec<String>,
    /// Run under a 24x80 pseudo-terminal (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tty: Option<bool>,
    /// Shorten the operator's time limit (milliseconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Wait up to this long for early output or exit and return them in this call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub yield_ms: Option<u64>,
    /// Idempotency key: a retry never starts a second process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation_key: Option<String>,
    /// Extra environment variables (name → value). Each name is a Cedar fact
    /// (`context.command.env_names`); the operator's config `env` wins for the same name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
    /// Working directory, workspace-relative (default the workspace root); the resource path
    /// Cedar sees.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// A service (dev server, watcher, database): it does not hold the workspace's mutation
    /// lease, so patches and other commands run beside it (default false; Cedar sees
    /// `context.command.background`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub background: Option<bool>,
    /// `merge` (default): stderr interleaved into the one output; `separate`: stderr keeps its
    /// own cursor and `read_process` returns `stderr_chunk` (pipes only, not with `tty`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr: Option<StderrMode>,
}

/// How `exec_command` collects stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum StderrMode {
    /// Interleaved with stdout in one output (today's behaviour).
    Merge,
    /// Its own output with its own cursor.
    Separate,
}

/// Parameters of `write_stdin`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteStdinParams {
    /// The process handle (`proc-…`).
    pub process_id: String,
    /// Text to write to the process's stdin (or terminal).
    pub data: String,
}

/// Parameters of `read_process`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadProcessParams {
    /// The process handle.
    pub process_id: String,
    /// Absolute byte offset to read from (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<u64>,
    /// Long-poll: wait up to this long for new output or exit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
    /// At most this many bytes of each stream per call (default: everything retained).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<u64>,
    /// Only the last `max_bytes` (default 65536) before the end, for logs; a later cursor wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tail: Option<bool>,
    /// With `stderr: "separate"`: the stderr offset to read from (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_cursor: Option<u64>,
}

/// Parameters of `process_status` and `terminate_process`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProcessIdParams {
    /// The process handle.
    pub process_id: String,
}

/// Parameters of `process_resize`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProcessResizeParams {
    /// The process handle.
    pub process_id: String,
    /// Terminal rows (>= 1).
    #[schemars(range(min = 1))]
    pub rows: u16,
    /// Terminal columns (>= 1).
    #[schemars(range(min = 1))]
    pub cols: u16,
}

/// Result of `exec_command`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct ExecCommandResult {
    /// The process handle (`proc-…`); it outlives this request.
    pub process_id: String,
    /// `confirmed` (it started) or `unknown` (it may have started: do not start a duplicate).
    pub dispatch_status: String,
    /// The operation id (`op-…`) of this exec (ours).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation_id: Option<String>,
    /// True when this is the stored result of an earlier call with the same operation_key (ours).
    #[serde(default)]
    pub replayed: bool,
    /// With `yield_ms`: the output produced so far (lossy UTF-8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk: Option<String>,
    /// With `yield_ms`: the cursor to pass to read_process next.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<u64>,
    /// With `yield_ms`: `running`, `exited` or `lost` (its environment's worker died while it
    /// ran; see docs/environments.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// With `yield_ms`, once it exited on its own: the exit code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// With `yield_ms`, once exited: exited / signaled / timeout / terminated / unknown (ours).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination: Option<String>,
    /// With `yield_ms`: output collection finished and `cursor` is at the end (ours).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eof: Option<bool>,
    /// With `yield_ms` and `stderr: "separate"`: stderr produced so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_chunk: Option<String>,
    /// With `yield_ms` and `stderr: "separate"`: the stderr cursor to pass to read_process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_cursor: Option<u64>,
    /// Where the command may write in its workspace (sandboxed commands; ours): the candidates
    /// Cedar allowed (`process_write`) and the ones it denied. A write elsewhere in the
    /// workspace fails in the command with `EACCES` or `EROFS`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_paths: Option<WritePaths>,
}

/// A command's write scope in its workspace (workspace-relative directories, `.` for the root).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
pub struct WritePaths {
    /// The command may write beneath each of these (existing directories).
    pub writable: Vec<String>,
    /// The command may not write beneath these: candidates policy denied (`.git` by default).
    /// One that lies beneath a writable one is a read-only mount in the command's sandbox.
    pub read_only: Vec<String>,
}

/// Result of `write_stdin` and `terminate_process`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct ProcessAckResult {
    /// Always true on success.
    pub ok: bool,
    /// The process handle (ours).
    pub process_id: String,
    /// The operation id (`op-…`) of this call (ours).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation_id: Option<String>,
    /// terminate_process: `exited` once it ended (its lease is then free), else `running`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// terminate_process: the exit code, when it exited on its own before the signal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// terminate_process: exited / signaled / timeout / terminated / unknown, once exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination: Option<String>,
    /// terminate_process: the killing signal, when `termination` is `signaled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
}

/// Result of `read_process`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct ReadProcessResult {
    /// The process handle.
    pub process_id: String,
    /// The cursor to pass next (absolute byte offset).
    pub cursor: u64,
    /// The output from the requested cursor (lossy UTF-8).
    pub chunk: String,
    /// Output collection finished and `cursor` is at the end (not an exit status).
    pub eof: bool,
    /// Some bytes before `retained_from` fell out of the retained window.
    pub output_lost: bool,
    /// The first byte offset still retained.
    pub retained_from: u64,
    /// With `stderr: "separate"`: stderr from `stderr_cursor` (lossy UTF-8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_chunk: Option<String>,
    /// With `stderr: "separate"`: the stderr cursor to pass next.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_cursor: Option<u64>,
    /// `"lost"` when the process's environment's worker died or disconnected (then `eof` is
    /// true and no more output comes); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
}

/// Result of `process_status`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct ProcessStatusResult {
    /// The process handle (ours).
    pub process_id: String,
    /// `running`, `exited` or `lost` (its environment's worker died while it ran: killed with
    /// the worker, exit status unknowable, lease released; see docs/environments.md).
    pub state: String,
    /// The exit code, when it exited on its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// exited / signaled / timeout / terminated / unknown, once exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination: Option<String>,
    /// The killing signal, when `termination` is `signaled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// Bytes of output produced so far.
    pub output_total: u64,
    /// The first byte offset still retained.
    pub output_retained_from: u64,
    /// Output collection finished.
    pub eof: bool,
    /// Whether it runs on a terminal (ours).
    pub tty: bool,
    /// `network: proxy` processes: what went through the egress proxy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<ProcessNetwork>,
}

/// `process_status.network`: a process's egress-proxy counters.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
pub struct ProcessNetwork {
    /// Connections the process opened through the proxy (allowed or refused).
    pub connections: u64,
    /// Bytes it sent to its targets (forwarded request heads included).
    pub bytes_out: u64,
    /// Bytes it received from its targets.
    pub bytes_in: u64,
    /// Connections refused (by policy, or by the proxy's connection cap).
    pub denied: u64,
}

/// Result of `process_resize`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct ProcessResizeResult {
    /// Always true on success.
    pub ok: bool,
    /// The new number of rows.
    pub rows: u16,
    /// The new number of columns.
    pub cols: u16,
}

/// Parameters of `process_list`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProcessListParams {
    /// Only this workspace's processes (omit, or send "", for every workspace the caller may
    /// list in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_id: Option<String>,
}

/// Result of `process_list`: the caller's own process handles the server still holds (running,
/// or exited and not yet evicted), newest first; never another client's.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct ProcessListResult {
    /// One entry per handle.
    pub processes: Vec<ProcessListEntry>,
}

/// One handle of `process_list`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct ProcessListEntry {
    /// The process handle (use it with `read_process`, `process_status`, ...).
    pub process_id: String,
    /// Its workspace.
    pub workspace_id: String,
    /// `running`, `exited` or `lost`.
    pub state: String,
    /// The command line, its first 200 characters (redacted as audit lines are).
    pub command: String,
    /// Unix seconds it was started.
    pub started_at: i64,
    /// Whether it runs on a terminal.
    pub tty: bool,
    /// Started with `background: true`.
    pub background: bool,
}
