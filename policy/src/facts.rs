//! The typed facts a decision reads about a workspace's environment: what the start-up probe
//! found (sandbox, network enforcement, secret masking), and where an operation ended. The
//! operator's switches are the config's own enums; each fact has one spelling, its `as_str`, used
//! for Cedar, the store and the wire alike.

use serde::{Deserialize, Serialize};

/// What the start-up probe found about the command sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SandboxFacts {
    /// Landlock + seccomp can be enforced.
    pub sandbox_enforced: bool,
    /// Network restrictions can be enforced.
    pub network_enforced: bool,
    /// Secret masks can be enforced (the sandbox helper runs and mount namespaces work).
    pub masking_enforced: bool,
}

/// `resource.workspace.environment.sandbox`: can the command sandbox (Landlock + seccomp) be
/// enforced on this host?
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SandboxFact {
    /// It can.
    Enforced,
    /// It cannot (commands of workspaces that require it fail closed).
    #[default]
    Unavailable,
}

impl SandboxFact {
    /// Cedar and wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxFact::Enforced => "enforced",
            SandboxFact::Unavailable => "unavailable",
        }
    }
}

/// `resource.workspace.environment.network_enforcement`: can a command's network be cut off?
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NetworkEnforcement {
    /// Network restrictions are enforced (private network namespace).
    Enforced,
    /// They are not (no namespace support, or the workspace runs commands without the sandbox).
    #[default]
    None,
}

impl NetworkEnforcement {
    /// Cedar and wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            NetworkEnforcement::Enforced => "enforced",
            NetworkEnforcement::None => "none",
        }
    }
}

/// `resource.workspace.environment.secret_masking`: do commands get the paths policy withholds
/// from `read` masked?
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MaskingFact {
    /// Masks are enforced.
    Enforced,
    /// The workspace requires masks and this host cannot enforce them.
    #[default]
    Unavailable,
    /// The operator turned masking off for this workspace.
    Off,
}

impl MaskingFact {
    /// Cedar and wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            MaskingFact::Enforced => "enforced",
            MaskingFact::Unavailable => "unavailable",
            MaskingFact::Off => "off",
        }
    }
}

/// Where an operation (one mutating call) ended, as the store records it and
/// `operation_status` / `apply_patch` report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OperationStatus {
    /// Not finished yet.
    Running,
    /// `apply_patch` with `check_only`: planned and authorized, nothing written.
    Checked,
    /// `apply_patch`: every change written.
    Applied,
    /// `apply_patch`: refused before anything was written (stale versions, a patch that does
    /// not apply).
    Rejected,
    /// `apply_patch`: a write failed and every file was restored.
    FailedRolledBack,
    /// `apply_patch`: a write failed and some files could not be restored.
    FailedPartial,
    /// The server cannot tell (it stopped while the operation ran).
    Unknown,
    /// `exec_command`: the process started.
    Started,
    /// A process tool's action failed.
    Failed,
    /// `write_stdin`: the bytes were written.
    Written,
    /// `terminate_process`: the process was terminated.
    Terminated,
}

impl OperationStatus {
    /// Store and wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            OperationStatus::Running => "running",
            OperationStatus::Checked => "checked",
            OperationStatus::Applied => "applied",
            OperationStatus::Rejected => "rejected",
            OperationStatus::FailedRolledBack => "failed_rolled_back",
            OperationStatus::FailedPartial => "failed_partial",
            OperationStatus::Unknown => "unknown",
            OperationStatus::Started => "started",
            OperationStatus::Failed => "failed",
            OperationStatus::Written => "written",
            OperationStatus::Terminated => "terminated",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The serde spelling (policy test fixtures) and the Cedar spelling are the same.
    #[test]
    fn serde_and_cedar_spellings_agree() {
        for f in [SandboxFact::Enforced, SandboxFact::Unavailable] {
            assert_eq!(serde_json::to_value(f).unwrap(), f.as_str());
        }
        for f in [NetworkEnforcement::Enforced, NetworkEnforcement::None] {
            assert_eq!(serde_json::to_value(f).unwrap(), f.as_str());
        }
        for f in [
            MaskingFact::Enforced,
            MaskingFact::Unavailable,
            MaskingFact::Off,
        ] {
            assert_eq!(serde_json::to_value(f).unwrap(), f.as_str());
        }
        use OperationStatus as S;
        for f in [
            S::Running,
            S::Checked,
            S::Applied,
            S::Rejected,
            S::FailedRolledBack,
            S::FailedPartial,
            S::Unknown,
            S::Started,
            S::Failed,
            S::Written,
            S::Terminated,
        ] {
            assert_eq!(serde_json::to_value(f).unwrap(), f.as_str());
        }
    }
}
