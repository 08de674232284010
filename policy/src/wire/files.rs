//! Wire types of the file tools: `workspace_info`'s parameters, `read`, `find`, `grep`,
//! `find_files`, `apply_patch` and `operation_status`'s parameters.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Parameters of `workspace_info`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceInfoParams {
    /// The workspace to describe; omit (or send "") for server identity only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_id: Option<String>,
}

/// Parameters of `read`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
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
    /// Omitted: text, with invalid UTF-8 replaced and `content_lossy` set; a whole-file read of
    /// an image (PNG, JPEG, GIF, WebP, up to 3 MiB) is MCP image content, and a window holding a
    /// NUL byte (a binary file) is `BINARY_FILE` with its size and sha256.
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
    /// An image (`image/png`, `image/jpeg`, `image/gif`, `image/webp`, told by its first bytes)
    /// read whole with `encoding` omitted: its bytes are the result's MCP image content item,
    /// `content` is empty (omitted otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// The image's bytes (not serialized: the MCP layer sends them as an image content item).
    #[serde(skip)]
    #[schemars(skip)]
    pub image: Option<Vec<u8>>,
}

/// Parameters of `find`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
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
#[serde(deny_unknown_fields)]
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
#[serde(deny_unknown_fields)]
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
#[serde(deny_unknown_fields)]
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

/// How `write_file` changes its file.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum WriteFileMode {
    /// The existing file's bytes become exactly `content` (FILE_NOT_FOUND when there is none:
    /// a new file is `create`).
    #[default]
    Replace,
    /// `content` is added after the existing file's last byte (FILE_NOT_FOUND when none).
    Append,
    /// A new file holding exactly `content` (ADD_FILE_EXISTS when anything is at the path).
    Create,
}

impl WriteFileMode {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            WriteFileMode::Replace => "replace",
            WriteFileMode::Append => "append",
            WriteFileMode::Create => "create",
        }
    }
}

/// How `write_file`'s `content` is spelled.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum WriteFileEncoding {
    /// `content` is the text itself (its UTF-8 bytes are written).
    #[default]
    Text,
    /// `content` is standard base64 of the bytes (any bytes).
    Base64,
}

/// Parameters of `write_file`: a whole-file write or append with exact bytes (no line ending
/// added or converted), run as a one-file patch operation (versions, journal, approvals,
/// guardrails and the ledger as for `apply_patch`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteFileParams {
    /// The workspace id.
    pub workspace_id: String,
    /// Workspace-relative path of the file.
    pub path: String,
    /// The bytes to write or append, as `encoding` says.
    pub content: String,
    /// `replace` (default), `append` or `create`.
    #[serde(default)]
    pub mode: WriteFileMode,
    /// `text` (default) or `base64`.
    #[serde(default)]
    pub encoding: WriteFileEncoding,
    /// The file's version the caller read (`sha256:<hex>`, or `"absent"` with `create`); a
    /// mismatch is VERSION_CONFLICT and nothing is written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_version: Option<String>,
    /// Idempotency key: the same key and request replay the stored result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation_key: Option<String>,
    /// Plan and authorize only; write nothing (`status: checked`, with `diff`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check_only: Option<bool>,
}

impl WriteFileParams {
    /// The bytes `content` spells (`INVALID_ARGUMENTS` for base64 that does not decode).
    pub fn bytes(&self) -> Result<Vec<u8>, crate::error::ToolError> {
        use base64::Engine as _;
        match self.encoding {
            WriteFileEncoding::Text => Ok(self.content.as_bytes().to_vec()),
            WriteFileEncoding::Base64 => base64::engine::general_purpose::STANDARD
                .decode(self.content.as_bytes())
                .map_err(|e| {
                    crate::error::ToolError::new(
                        crate::error::ErrorCode::InvalidArguments,
                        format!("content is not standard base64: {e}"),
                    )
                }),
        }
    }
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
    /// `check_only`: the unified diff the patch would apply (files the caller may not `read`
    /// are named as withheld, their content never shown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
    /// The operator's hooks that ran for this patch (issue 31), in order: the `before_patch`
    /// ones (all passed, or the patch was refused with `HOOK_FAILED`), then the `after_patch`
    /// ones (a failure is reported here, the patch stays applied).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<HookRun>,
}

/// One hook run (issue 31).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct HookRun {
    /// `before_patch` or `after_patch`.
    pub stage: String,
    /// The hook's argv, as configured.
    pub command: Vec<String>,
    /// Its exit code (`None`: killed by a signal, timed out, or never started).
    pub exit_code: Option<i32>,
    /// The end of its output (stdout and stderr together), at most 8 KiB.
    pub output: String,
    /// True when `output` lost its beginning to the cap.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub output_truncated: bool,
    /// Set when the hook did not run or did not finish: `denied` (Cedar), `spawn_failed`,
    /// `timed_out`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Parameters of `operation_status`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OperationStatusParams {
    /// The operation id (`op-…`); give exactly one of id and key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation_id: Option<String>,
    /// The operation key given to the mutating call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation_key: Option<String>,
}
