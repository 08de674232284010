//! Wire types of the approval tools: `approval_create`, `approval_resolve`, `operation_resume`.

use super::files::ApplyPatchResult;
use super::process::ExecCommandResult;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The tools an approval hold can pause.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum HeldTool {
    /// `apply_patch`.
    ApplyPatch,
    /// `exec_command`.
    ExecCommand,
    /// `write_file` (its resumed result is in `apply_patch`: the same result shape).
    WriteFile,
}

impl HeldTool {
    /// The tool name.
    pub fn as_str(self) -> &'static str {
        match self {
            HeldTool::ApplyPatch => "apply_patch",
            HeldTool::ExecCommand => "exec_command",
            HeldTool::WriteFile => "write_file",
        }
    }
}

/// Parameters of `approval_create`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApprovalCreateParams {
    /// The tool to hold: `apply_patch`, `exec_command` or `write_file`.
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
#[serde(deny_unknown_fields)]
pub struct ApprovalResolveParams {
    /// The hold (`appr-…`).
    pub approval_id: String,
    /// `grant` or `deny`.
    pub decision: ApprovalDecision,
}

/// Parameters of `operation_resume`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
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
