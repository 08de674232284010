//! Wire types of the MCP tools: one `<Tool>Params` and `<Tool>Result` per tool, with the JSON
//! schemas the server advertises. Optional result fields are omitted rather than sent as null.

pub use crate::tool_table::ToolName;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Largest `read` window, and its default.
pub const READ_MAX_BYTES: u64 = 1024 * 1024;
/// Largest `find` page, and its default.
pub const FIND_MAX_PATHS: u64 = 10_000;
/// Default `grep` page, in matches.
pub const GREP_DEFAULT_MATCHES: u64 = 200;
/// Largest `grep` page, in matches.
pub const GREP_MAX_MATCHES: u64 = 10_000;
/// Largest file `grep` searches.
pub const GREP_MAX_FILE_BYTES: u64 = 32 * 1024 * 1024;
/// Longest line `grep` returns, in characters.
pub const GREP_MAX_LINE_CHARS: usize = 500;
/// Most bytes of line text one `grep` page carries.
pub const GREP_MAX_OUTPUT_BYTES: usize = 4 * 1024 * 1024;
/// Default `find_files` result count.
pub const FIND_FILES_DEFAULT_LIMIT: u64 = 50;
/// Largest `find_files` result count.
pub const FIND_FILES_MAX_LIMIT: u64 = 1_000;

/// Parameters of `workspace_info`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct WorkspaceInfoParams {
    /// The workspace to describe; omit (or send "") for server identity only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_id: Option<String>,
}

/// Parameters of `read`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ReadParams {
    /// The workspace id (a selector, not a credential).
    pub workspace_id: String,
    /// Workspace-relative path of a regular file (exclusive with `paths`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Several workspace-relative paths read in one call (at most 64, exclusive with `path`); the
    /// result is `{files: [...]}`, one entry per path, each a read's result or an `error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub paths: Option<Vec<String>>,
    /// Byte offset of the window (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// Window size in bytes (default and max 1048576; 0 is OUTPUT_LIMIT).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// Only the first N lines of the file (N ≥ 1; exclusive with `offset`/`limit`/`tail_lines`;
    /// bounded by the 1048576-byte window).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub head_lines: Option<u64>,
    /// Only the last N lines of the file (N ≥ 1; exclusive with `offset`/`limit`/`head_lines`;
    /// bounded by the 1048576-byte window).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub tail_lines: Option<u64>,
    /// `text` (bytes that are not UTF-8 are `BINARY_FILE`) or `base64` (the bytes exactly).
    /// Omitted: text, with invalid UTF-8 replaced and `content_lossy` set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoding: Option<ReadEncoding>,
}

/// Largest `paths` list of one `read`.
pub const READ_MAX_PATHS: usize = 64;

/// How `read` returns content.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ReadEncoding {
    /// UTF-8 text; a window that is not valid UTF-8 is `BINARY_FILE`.
    Text,
    /// The window's bytes, base64 (standard alphabet, padded).
    Base64,
}

/// Result of `read`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct ReadResult {
    /// The normalized workspace-relative path.
    pub path: String,
    /// The window's bytes: UTF-8 text (lossy unless `encoding: "text"`), or base64.
    pub content: String,
    /// `base64` when `content` is base64 (omitted for text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoding: Option<ReadEncoding>,
    /// True when `content` had to replace invalid UTF-8.
    pub content_lossy: bool,
    /// `sha256:<hex>` of the whole file.
    pub version: String,
    /// True when bytes remain after this window.
    pub truncated: bool,
    /// The window's offset (omitted when 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// Where the next window starts (only when more remains).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_offset: Option<u64>,
    /// Bytes of the file in this window.
    pub byte_count: u64,
}

/// Parameters of `find`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct FindParams {
    /// The workspace id.
    pub workspace_id: String,
    /// Workspace-relative directory the listing is rooted at (default: the workspace root);
    /// listed paths, `glob` and `exclude` stay workspace-relative, `max_depth` counts from it.
    /// Not a directory: `PATH_NOT_DIRECTORY`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// A globset pattern over relative paths (`*` stays in one component, `**` crosses; a pattern
    /// without `/` matches the file name at any depth).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub glob: Option<String>,
    /// Offset into the sorted list (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// Page size (default and max 10000; 0 is OUTPUT_LIMIT).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// What to list: `file` (default: files and symlinks), `dir`, or `any`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub entry_type: Option<EntryType>,
    /// Deepest entry listed, in path components (1 = entries of the root; max 64).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_depth: Option<u64>,
    /// Globs (same syntax as `glob`) whose matches are left out; a matching directory leaves out
    /// everything beneath it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
    /// Skip what `.gitignore`/`.ignore`/`.git/info/exclude` exclude, and hidden entries (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub respect_gitignore: Option<bool>,
    /// Add `entries` with kind, size and mtime of each listed path (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<bool>,
}

/// What `find` lists.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum EntryType {
    /// Regular files and symlinks (never followed) — everything but directories and special files.
    #[default]
    File,
    /// Directories.
    Dir,
    /// Everything.
    Any,
}

/// One listed entry with its details (`find` with `details: true`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct FindEntry {
    /// Workspace-relative path.
    pub path: String,
    /// `file`, `dir`, `symlink` or `other` (as seen now, without following a symlink).
    pub kind: String,
    /// Size in bytes (omitted when the entry vanished).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// Last modification time, RFC 3339 UTC (omitted when the entry vanished).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtime: Option<String>,
}

/// Where a listing came from.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ListingSource {
    /// The workspace's path index, kept current by the file watcher.
    Index,
    /// A walk of the tree made for this call (first use, or the index could not be trusted).
    Walk,
}

/// Why a call walked the tree instead of reading the index.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum WalkReason {
    /// The index was built (first use, or after it was dropped when idle).
    Built,
    /// Too many changes at once: rebuilt by a walk.
    ManyChanges,
    /// The file watcher lost events (overflow): rebuilt by a walk.
    WatcherOverflow,
    /// The file watcher could not start: every call walks.
    WatcherUnavailable,
}

/// Result of `find`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct FindResult {
    /// Sorted workspace-relative file paths of this page.
    pub paths: Vec<String>,
    /// True when the walk was capped or more paths follow this page.
    pub truncated: bool,
    /// The page's offset (omitted when 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// Where the next page starts (only when more remains).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_offset: Option<u64>,
    /// True when the walk hit a cap (depth 64, 10000 dirs, 50000 entries).
    pub incomplete: bool,
    /// Identifies this observation; restart at offset 0 when it changes.
    pub listing_version: String,
    /// Entries withheld because policy would not let the caller read them (ours).
    pub withheld: u64,
    /// With `details: true`: kind, size and mtime of each path of this page, in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entries: Option<Vec<FindEntry>>,
    /// `index` or `walk` (ours).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listing_source: Option<ListingSource>,
    /// Why this call walked (ours; only with `listing_source: walk`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub walk_reason: Option<WalkReason>,
}

/// Parameters of `grep`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct GrepParams {
    /// The workspace id.
    pub workspace_id: String,
    /// What to look for: a literal string unless `regex` is true.
    pub pattern: String,
    /// Treat `pattern` as a regular expression (Rust regex syntax; default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex: Option<bool>,
    /// Match without regard to case (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub case_insensitive: Option<bool>,
    /// Only files whose path matches this glob (same syntax as `find`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub glob: Option<String>,
    /// Search only beneath this workspace-relative directory (or only this file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Lines of context before and after each match (default 0, max 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_lines: Option<u64>,
    /// Most matches returned (default 200, max 10000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_matches: Option<u64>,
    /// Matches to skip, in path then line order (default 0); pass `next_offset` to continue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// Skip what `.gitignore`/`.ignore`/`.git/info/exclude` exclude, and hidden entries (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub respect_gitignore: Option<bool>,
}

/// One matching line of `grep`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct GrepMatch {
    /// Workspace-relative path.
    pub path: String,
    /// 1-based line number.
    pub line_number: u64,
    /// The line (lossy UTF-8, without its line terminator, at most 500 characters).
    pub line: String,
    /// Lines before it (`context_lines`).
    pub before: Vec<String>,
    /// Lines after it (`context_lines`).
    pub after: Vec<String>,
    /// True when `line` was cut at 500 characters (ours).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub line_truncated: bool,
}

/// Matches per file of a `grep` page.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct GrepFileCount {
    /// Workspace-relative path.
    pub path: String,
    /// Matching lines in the whole file.
    pub count: u64,
}

/// Files `grep` did not search.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema, PartialEq, Eq, Default)]
pub struct GrepSkipped {
    /// Binary files (a NUL byte).
    pub binary: u64,
    /// Files larger than the search limit (32 MiB).
    pub too_large: u64,
    /// Files that vanished or could not be opened or read.
    pub unreadable: u64,
}

/// Result of `grep`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct GrepResult {
    /// This page's matching lines, in path then line order.
    pub matches: Vec<GrepMatch>,
    /// Each file with a match on this page, with its total count.
    pub files: Vec<GrepFileCount>,
    /// Files passed over, among those searched for this page.
    pub skipped: GrepSkipped,
    /// Files policy would not let the caller read: never opened.
    pub withheld: u64,
    /// True when more matches follow this page.
    pub truncated: bool,
    /// Where the next page starts (only when more remains).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_offset: Option<u64>,
    /// The page's offset (omitted when 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// True when the listing of the tree hit a cap (some files were not searched).
    pub incomplete: bool,
    /// Identifies the set of files searched; restart at offset 0 when it changes (ours).
    pub listing_version: String,
    /// `index` or `walk` (ours).
    pub listing_source: ListingSource,
    /// Why this call walked (ours; only with `listing_source: walk`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub walk_reason: Option<WalkReason>,
}

/// Parameters of `find_files`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct FindFilesParams {
    /// The workspace id.
    pub workspace_id: String,
    /// A fuzzy query over workspace-relative file paths; words separated by spaces must all match.
    pub query: String,
    /// Most results (default 50, max 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
}

/// One ranked path of `find_files`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct FindFilesMatch {
    /// Workspace-relative path.
    pub path: String,
    /// Fuzzy score (higher is better).
    pub score: u64,
    /// Matched character positions in `path` (0-based, counted in Unicode characters).
    pub indices: Vec<u32>,
}

/// Result of `find_files`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct FindFilesResult {
    /// Best matches first.
    pub matches: Vec<FindFilesMatch>,
    /// Files of the workspace policy would not let the caller read (never listed), counted
    /// whatever the query: the figure does not depend on which names match.
    pub withheld: u64,
    /// True when the listing of the tree hit a cap (ours).
    pub incomplete: bool,
    /// `index` or `walk` (ours).
    pub listing_source: ListingSource,
    /// Why this call walked (ours; only with `listing_source: walk`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub walk_reason: Option<WalkReason>,
}

/// Parameters of `apply_patch`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ApplyPatchParams {
    /// The workspace id.
    pub workspace_id: String,
    /// A V4A patch (`*** Begin Patch` … `*** End Patch`).
    pub patch: String,
    /// path → `sha256:<hex>` or `"absent"`; a mismatch is VERSION_CONFLICT and nothing is written.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub expected_versions: BTreeMap<String, String>,
    /// Idempotency key: the same key and request replay the stored result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation_key: Option<String>,
    /// Parse, plan and authorize only; write nothing (`status: checked`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check_only: Option<bool>,
}

/// One file an apply_patch touched.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct FileChange {
    /// Workspace-relative path (for a move: the destination).
    pub path: String,
    /// add / update / delete / move.
    pub kind: String,
    /// For a move: the source path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Version before (absent for an add).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before_version: Option<String>,
    /// Version after (absent for a delete).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_version: Option<String>,
}

/// Result of `apply_patch`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct ApplyPatchResult {
    /// applied / checked / rejected / failed_rolled_back / failed_partial / unknown.
    pub status: crate::facts::OperationStatus,
    /// The operation id (`op-…`).
    pub operation_id: String,
    /// True when this is the stored result of an earlier call with the same operation_key.
    pub replayed: bool,
    /// Every touched path.
    pub files: Vec<String>,
    /// Per-file changes with versions.
    pub changes: Vec<FileChange>,
}

/// Parameters of `operation_status`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct OperationStatusParams {
    /// The operation id (`op-…`); give exactly one of id and key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation_id: Option<String>,
    /// The operation key given to the mutating call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation_key: Option<String>,
}

/// Parameters of `exec_command`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
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
pub struct WriteStdinParams {
    /// The process handle (`proc-…`).
    pub process_id: String,
    /// Text to write to the process's stdin (or terminal).
    pub data: String,
}

/// Parameters of `read_process`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
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
pub struct ProcessIdParams {
    /// The process handle.
    pub process_id: String,
}

/// Parameters of `process_resize`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
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
    /// With `yield_ms`: `running` or `exited`.
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
}

/// Result of `process_status`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct ProcessStatusResult {
    /// The process handle (ours).
    pub process_id: String,
    /// `running` or `exited`.
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

/// The tools an approval hold can pause.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum HeldTool {
    /// `apply_patch`.
    ApplyPatch,
    /// `exec_command`.
    ExecCommand,
}

impl HeldTool {
    /// The tool name.
    pub fn as_str(self) -> &'static str {
        match self {
            HeldTool::ApplyPatch => "apply_patch",
            HeldTool::ExecCommand => "exec_command",
        }
    }
}

/// Parameters of `approval_create`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ApprovalCreateParams {
    /// The tool to hold: `apply_patch` or `exec_command`.
    pub tool: HeldTool,
    /// The same arguments object the named tool takes.
    pub arguments: serde_json::Value,
}

/// A decision on a hold.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalDecision {
    /// Let the held call run (once, through `operation_resume`).
    Grant,
    /// Refuse it for good; the stored arguments are scrubbed.
    Deny,
}

impl ApprovalDecision {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalDecision::Grant => "grant",
            ApprovalDecision::Deny => "deny",
        }
    }
}

/// Parameters of `approval_resolve`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ApprovalResolveParams {
    /// The hold (`appr-…`).
    pub approval_id: String,
    /// `grant` or `deny`.
    pub decision: ApprovalDecision,
}

/// Parameters of `operation_resume`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct OperationResumeParams {
    /// The granted hold (`appr-…`).
    pub approval_id: String,
}

/// Result of `approval_create` and `approval_resolve`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct ApprovalStateResult {
    /// The hold (`appr-…`).
    pub approval_id: String,
    /// pending / granted / denied / consumed / expired.
    pub state: String,
}

/// Result of `operation_resume`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct OperationResumeResult {
    /// The hold (`appr-…`).
    pub approval_id: String,
    /// `consumed`.
    pub state: String,
    /// True when this is the stored result of an earlier resume (ours).
    #[serde(default)]
    pub replayed: bool,
    /// The result of the held apply_patch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apply_patch: Option<ApplyPatchResult>,
    /// The result of the held exec_command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec_command: Option<ExecCommandResult>,
}

/// A parsed tool call: the tool name and its typed parameters. Built from `tools/call` params
/// by the server and from `call:` cases by the policy test runner, so both take the same path.
#[derive(Debug, Clone)]
#[allow(missing_docs)]
pub enum ToolCall {
    WorkspaceInfo(WorkspaceInfoParams),
    Read(ReadParams),
    Find(FindParams),
    ApplyPatch(ApplyPatchParams),
    OperationStatus(OperationStatusParams),
    ExecCommand(ExecCommandParams),
    WriteStdin(WriteStdinParams),
    ReadProcess(ReadProcessParams),
    ProcessStatus(ProcessIdParams),
    ProcessResize(ProcessResizeParams),
    TerminateProcess(ProcessIdParams),
    Grep(GrepParams),
    FindFiles(FindFilesParams),
    ApprovalCreate(ApprovalCreateParams),
    ApprovalResolve(ApprovalResolveParams),
    OperationResume(OperationResumeParams),
}

/// Why a `tools/call` could not become a [`ToolCall`].
#[derive(Debug, Clone, PartialEq)]
pub enum CallParseError {
    /// No such tool (a JSON-RPC error at the transport).
    UnknownTool(String),
    /// The arguments do not match the tool's input schema (`INVALID_ARGUMENTS`).
    InvalidArguments(String),
}

fn parse_args<T: serde::de::DeserializeOwned>(
    args: &serde_json::Value,
) -> Result<T, CallParseError> {
    let value = if args.is_null() {
        serde_json::Value::Object(Default::default())
    } else {
        args.clone()
    };
    if !value.is_object() {
        return Err(CallParseError::InvalidArguments(
            "arguments must be a JSON object".into(),
        ));
    }
    serde_json::from_value(value).map_err(|e| CallParseError::InvalidArguments(e.to_string()))
}

impl ToolCall {
    /// Parses a tool name and its JSON arguments.
    pub fn parse(name: &str, args: &serde_json::Value) -> Result<ToolCall, CallParseError> {
        let Some(tool) = ToolName::parse(name) else {
            return Err(CallParseError::UnknownTool(name.to_string()));
        };
        Ok(match tool {
            ToolName::WorkspaceInfo => ToolCall::WorkspaceInfo(parse_args(args)?),
            ToolName::Read => ToolCall::Read(parse_args(args)?),
            ToolName::Find => ToolCall::Find(parse_args(args)?),
            ToolName::ApplyPatch => ToolCall::ApplyPatch(parse_args(args)?),
            ToolName::OperationStatus => ToolCall::OperationStatus(parse_args(args)?),
            ToolName::ExecCommand => ToolCall::ExecCommand(parse_args(args)?),
            ToolName::WriteStdin => ToolCall::WriteStdin(parse_args(args)?),
            ToolName::ReadProcess => ToolCall::ReadProcess(parse_args(args)?),
            ToolName::ProcessStatus => ToolCall::ProcessStatus(parse_args(args)?),
            ToolName::ProcessResize => ToolCall::ProcessResize(parse_args(args)?),
            ToolName::TerminateProcess => ToolCall::TerminateProcess(parse_args(args)?),
            ToolName::Grep => ToolCall::Grep(parse_args(args)?),
            ToolName::FindFiles => ToolCall::FindFiles(parse_args(args)?),
            ToolName::ApprovalCreate => ToolCall::ApprovalCreate(parse_args(args)?),
            ToolName::ApprovalResolve => ToolCall::ApprovalResolve(parse_args(args)?),
            ToolName::OperationResume => ToolCall::OperationResume(parse_args(args)?),
        })
    }

    /// The tool this call is for.
    pub fn name(&self) -> ToolName {
        match self {
            ToolCall::WorkspaceInfo(_) => ToolName::WorkspaceInfo,
            ToolCall::Read(_) => ToolName::Read,
            ToolCall::Find(_) => ToolName::Find,
            ToolCall::ApplyPatch(_) => ToolName::ApplyPatch,
            ToolCall::OperationStatus(_) => ToolName::OperationStatus,
            ToolCall::ExecCommand(_) => ToolName::ExecCommand,
            ToolCall::WriteStdin(_) => ToolName::WriteStdin,
            ToolCall::ReadProcess(_) => ToolName::ReadProcess,
            ToolCall::ProcessStatus(_) => ToolName::ProcessStatus,
            ToolCall::ProcessResize(_) => ToolName::ProcessResize,
            ToolCall::TerminateProcess(_) => ToolName::TerminateProcess,
            ToolCall::Grep(_) => ToolName::Grep,
            ToolCall::FindFiles(_) => ToolName::FindFiles,
            ToolCall::ApprovalCreate(_) => ToolName::ApprovalCreate,
            ToolCall::ApprovalResolve(_) => ToolName::ApprovalResolve,
            ToolCall::OperationResume(_) => ToolName::OperationResume,
        }
    }

    /// The tool name (= the Cedar action id).
    pub fn tool(&self) -> &'static str {
        self.name().as_str()
    }

    /// The workspace the call names, when it names one.
    pub fn workspace_id(&self) -> Option<&str> {
        match self {
            ToolCall::WorkspaceInfo(p) => p.workspace_id.as_deref().filter(|s| !s.is_empty()),
            ToolCall::Read(p) => Some(&p.workspace_id),
            ToolCall::Find(p) => Some(&p.workspace_id),
            ToolCall::ApplyPatch(p) => Some(&p.workspace_id),
            ToolCall::ExecCommand(p) => Some(&p.workspace_id),
            ToolCall::Grep(p) => Some(&p.workspace_id),
            ToolCall::FindFiles(p) => Some(&p.workspace_id),
            ToolCall::ApprovalCreate(p) => p.arguments.get("workspace_id").and_then(|w| w.as_str()),
            _ => None,
        }
    }
}

/// Milliseconds to an RFC 3339 UTC timestamp.
pub fn rfc3339_ms(ms: i64) -> String {
    let nanos = i128::from(ms) * 1_000_000;
    time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| ms.to_string())
}
