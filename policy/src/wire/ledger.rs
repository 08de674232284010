//! Wire types of the operation ledger's tools: `operation_diff` (the unified diff of a recorded
//! operation, paged by lines; withheld files named, never shown) and `operation_revert` (the
//! reverse of an `apply_patch` operation, applied as a new patch operation).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Default `operation_diff` page, in lines.
pub const OPERATION_DIFF_DEFAULT_LINES: u64 = 2_000;
/// Largest `operation_diff` page, in lines.
pub const OPERATION_DIFF_MAX_LINES: u64 = 10_000;

/// Parameters of `operation_diff`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OperationDiffParams {
    /// The operation id (`op-…`) of one of the caller's operations.
    pub operation_id: String,
    /// First line of the diff to return (0-based; `next_offset` of the previous page).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// Most lines to return (default 2000, max 10000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
}

/// Parameters of `operation_revert`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OperationRevertParams {
    /// The `apply_patch` operation to revert (one of the caller's).
    pub operation_id: String,
    /// Idempotency key of the revert: the same key and operation replay the stored result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation_key: Option<String>,
}

/// One file of an operation as the ledger recorded it.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct LedgerFileView {
    /// Workspace-relative path (for a move: the destination).
    pub path: String,
    /// add / update / delete / move (a patch); changed (a command).
    pub kind: String,
    /// For a move: the source path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Version before (absent for an add and for withheld files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before_version: Option<String>,
    /// Version after (absent for a delete and for withheld files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_version: Option<String>,
    /// The content is not shown: never stored (a secret file), or policy withholds the path
    /// from this caller.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub withheld: bool,
    /// The command that changed the file (a command's operation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_id: Option<String>,
    /// Recorded from the file watcher while a command ran: may miss or over-report files.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub best_effort: bool,
}

/// Result of `operation_diff`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct OperationDiffResult {
    /// The operation.
    pub operation_id: String,
    /// The tool that recorded it.
    pub tool: String,
    /// Its workspace.
    pub workspace_id: String,
    /// Every file the ledger recorded for it (withheld ones named as such).
    pub files: Vec<LedgerFileView>,
    /// This page of the unified diff (lines `offset` .. `offset + lines`).
    pub diff: String,
    /// First line of this page.
    pub offset: u64,
    /// Lines in this page.
    pub lines: u64,
    /// Lines of the whole diff.
    pub total_lines: u64,
    /// Where the next page starts; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_offset: Option<u64>,
}
