//! Error codes of the tool contract and the ErrorBody every failed tool call carries.

use serde::Serialize;

/// The product error codes (SCREAMING_SNAKE_CASE on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[allow(missing_docs)]
pub enum ErrorCode {
    Unauthorized,
    WorkspaceNotFound,
    WorkspaceBusy,
    ResourceQueueFull,
    InvalidPatch,
    InvalidCommand,
    ProcessSpawnFailed,
    PathEscape,
    FileNotFound,
    PathNotDirectory,
    FileOperationFailed,
    SymlinkRejected,
    SpecialFileRejected,
    AddFileExists,
    MoveDestinationExists,
    VersionConflict,
    StaleRead,
    OperationKeyConflict,
    OperationNotFound,
    ProcessNotFound,
    ProcessNotTty,
    ProcessNotRunning,
    OutputLimit,
    Timeout,
    ApprovalRequired,
    ApprovalNotFound,
    ApprovalConflict,
    ApprovalAmbiguous,
    InvalidArguments,
    Internal,
    FileTooLarge,
    BinaryFile,
    /// The workspace's environment cannot be reached (no worker, a worker of another version,
    /// a host key that does not match, a container that does not exist, ...). Nothing ran; the
    /// call never falls back to the host.
    EnvironmentUnavailable,
    /// An operator-configured hook (issue 31) failed or was denied: a `before_patch` hook
    /// leaves the workspace untouched.
    HookFailed,
}

impl ErrorCode {
    /// The wire spelling of the code.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::Unauthorized => "UNAUTHORIZED",
            ErrorCode::WorkspaceNotFound => "WORKSPACE_NOT_FOUND",
            ErrorCode::WorkspaceBusy => "WORKSPACE_BUSY",
            ErrorCode::ResourceQueueFull => "RESOURCE_QUEUE_FULL",
            ErrorCode::InvalidPatch => "INVALID_PATCH",
            ErrorCode::InvalidCommand => "INVALID_COMMAND",
            ErrorCode::ProcessSpawnFailed => "PROCESS_SPAWN_FAILED",
            ErrorCode::PathEscape => "PATH_ESCAPE",
            ErrorCode::FileNotFound => "FILE_NOT_FOUND",
            ErrorCode::PathNotDirectory => "PATH_NOT_DIRECTORY",
            ErrorCode::FileOperationFailed => "FILE_OPERATION_FAILED",
            ErrorCode::SymlinkRejected => "SYMLINK_REJECTED",
            ErrorCode::SpecialFileRejected => "SPECIAL_FILE_REJECTED",
            ErrorCode::AddFileExists => "ADD_FILE_EXISTS",
            ErrorCode::MoveDestinationExists => "MOVE_DESTINATION_EXISTS",
            ErrorCode::VersionConflict => "VERSION_CONFLICT",
            ErrorCode::StaleRead => "STALE_READ",
            ErrorCode::OperationKeyConflict => "OPERATION_KEY_CONFLICT",
            ErrorCode::OperationNotFound => "OPERATION_NOT_FOUND",
            ErrorCode::ProcessNotFound => "PROCESS_NOT_FOUND",
            ErrorCode::ProcessNotTty => "PROCESS_NOT_TTY",
            ErrorCode::ProcessNotRunning => "PROCESS_NOT_RUNNING",
            ErrorCode::OutputLimit => "OUTPUT_LIMIT",
            ErrorCode::Timeout => "TIMEOUT",
            ErrorCode::ApprovalRequired => "APPROVAL_REQUIRED",
            ErrorCode::ApprovalNotFound => "APPROVAL_NOT_FOUND",
            ErrorCode::ApprovalConflict => "APPROVAL_CONFLICT",
            ErrorCode::ApprovalAmbiguous => "APPROVAL_AMBIGUOUS",
            ErrorCode::InvalidArguments => "INVALID_ARGUMENTS",
            ErrorCode::Internal => "INTERNAL",
            ErrorCode::FileTooLarge => "FILE_TOO_LARGE",
            ErrorCode::BinaryFile => "BINARY_FILE",
            ErrorCode::EnvironmentUnavailable => "ENVIRONMENT_UNAVAILABLE",
            ErrorCode::HookFailed => "HOOK_FAILED",
        }
    }

    /// Every code, in contract order.
    pub const ALL: &'static [ErrorCode] = &[
        ErrorCode::Unauthorized,
        ErrorCode::WorkspaceNotFound,
        ErrorCode::WorkspaceBusy,
        ErrorCode::ResourceQueueFull,
        ErrorCode::InvalidPatch,
        ErrorCode::InvalidCommand,
        ErrorCode::ProcessSpawnFailed,
        ErrorCode::PathEscape,
        ErrorCode::FileNotFound,
        ErrorCode::PathNotDirectory,
        ErrorCode::FileOperationFailed,
        ErrorCode::SymlinkRejected,
        ErrorCode::SpecialFileRejected,
        ErrorCode::AddFileExists,
        ErrorCode::MoveDestinationExists,
        ErrorCode::VersionConflict,
        ErrorCode::StaleRead,
        ErrorCode::OperationKeyConflict,
        ErrorCode::OperationNotFound,
        ErrorCode::ProcessNotFound,
        ErrorCode::ProcessNotTty,
        ErrorCode::ProcessNotRunning,
        ErrorCode::OutputLimit,
        ErrorCode::Timeout,
        ErrorCode::ApprovalRequired,
        ErrorCode::ApprovalNotFound,
        ErrorCode::ApprovalConflict,
        ErrorCode::ApprovalAmbiguous,
        ErrorCode::InvalidArguments,
        ErrorCode::Internal,
        ErrorCode::FileTooLarge,
        ErrorCode::BinaryFile,
        ErrorCode::EnvironmentUnavailable,
        ErrorCode::HookFailed,
    ];

    /// Maps a code string (runner crates and stored results speak the same codes) onto the
    /// enum; unknown strings are `INTERNAL`.
    pub fn from_code(code: &str) -> ErrorCode {
        ErrorCode::ALL
            .iter()
            .copied()
            .find(|c| c.as_str() == code)
            .unwrap_or(ErrorCode::Internal)
    }
}

/// The ErrorBody of a failed tool call: `{code, message, operation_id?, approval_id?,
/// decision_id?, policy_ids?}`. Messages never contain absolute paths.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolError {
    /// The product error code.
    pub code: ErrorCode,
    /// A message safe to show a model.
    pub message: String,
    /// Set when the failure happened after an operation was minted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operation_id: Option<String>,
    /// Set on approval holds (later).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
    /// The Cedar decision behind an `UNAUTHORIZED`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision_id: Option<String>,
    /// The determining policy ids behind an `UNAUTHORIZED`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy_ids: Option<Vec<String>>,
}

impl ToolError {
    /// A plain error with a code and a message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ToolError {
        ToolError {
            code,
            message: message.into(),
            operation_id: None,
            approval_id: None,
            decision_id: None,
            policy_ids: None,
        }
    }

    /// Attaches the operation id.
    pub fn with_operation(mut self, operation_id: impl Into<String>) -> ToolError {
        self.operation_id = Some(operation_id.into());
        self
    }

    /// The ErrorBody as JSON text.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| {
            format!(
                "{{\"code\":\"{}\",\"message\":\"error\"}}",
                self.code.as_str()
            )
        })
    }
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.message)
    }
}

impl std::error::Error for ToolError {}

impl From<codespace_runner_fs::FsError> for ToolError {
    fn from(e: codespace_runner_fs::FsError) -> ToolError {
        ToolError::new(ErrorCode::from(&e), e.to_string())
    }
}

// Runner errors map onto codes by variant, exhaustively: a new variant in a runner crate does not
// compile until it has a code here. (The runners' own `code()` strings must agree; the unit tests
// below check every variant.)

impl From<&codespace_runner_fs::FsError> for ErrorCode {
    fn from(e: &codespace_runner_fs::FsError) -> ErrorCode {
        use codespace_runner_fs::FsError as E;
        match e {
            E::PathEscape { .. } => ErrorCode::PathEscape,
            E::NotFound { .. } => ErrorCode::FileNotFound,
            E::NotDirectory { .. } => ErrorCode::PathNotDirectory,
            E::SymlinkRejected { .. } => ErrorCode::SymlinkRejected,
            E::NotRegularFile { .. } => ErrorCode::SpecialFileRejected,
            E::AlreadyExists { .. } | E::Io { .. } => ErrorCode::FileOperationFailed,
            E::TooLarge { .. } => ErrorCode::FileTooLarge,
        }
    }
}

impl<L> From<&codespace_runner_patch::PlanError<L>> for ErrorCode {
    fn from(e: &codespace_runner_patch::PlanError<L>) -> ErrorCode {
        use codespace_runner_patch::PlanError as E;
        match e {
            E::Parse(_) | E::InvalidPatch(_) => ErrorCode::InvalidPatch,
            E::FileNotFound(_) => ErrorCode::FileNotFound,
            E::AddFileExists(_) => ErrorCode::AddFileExists,
            E::MoveDestinationExists(_) => ErrorCode::MoveDestinationExists,
            E::SymlinkRejected(_) => ErrorCode::SymlinkRejected,
            E::SpecialFileRejected(_) => ErrorCode::SpecialFileRejected,
            E::Lookup(_) => ErrorCode::FileOperationFailed,
        }
    }
}

impl From<&codespace_runner_process::SpawnError> for ErrorCode {
    fn from(e: &codespace_runner_process::SpawnError) -> ErrorCode {
        use codespace_runner_process::SpawnError as E;
        match e {
            E::InvalidCommand => ErrorCode::InvalidCommand,
            E::LimitReached | E::SpawnFailed(_) => ErrorCode::ProcessSpawnFailed,
        }
    }
}

impl From<&codespace_runner_process::ProcError> for ErrorCode {
    fn from(e: &codespace_runner_process::ProcError) -> ErrorCode {
        use codespace_runner_process::ProcError as E;
        match e {
            E::NotFound | E::StdinClosed => ErrorCode::ProcessNotFound,
            E::NotTty => ErrorCode::ProcessNotTty,
            E::NotRunning => ErrorCode::ProcessNotRunning,
            E::Io(_) => ErrorCode::Internal,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use codespace_runner_fs::FsError;
    use codespace_runner_patch::PlanError;
    use codespace_runner_process::{ProcError, SpawnError};

    /// The engine's variant mapping and the runners' own code strings agree for every variant, so
    /// a stored result (which keeps the string) replays with the code the call returned.
    #[test]
    fn runner_error_codes_agree_with_the_runners_strings() {
        let p = || "a.txt".to_string();
        let fs = [
            FsError::PathEscape {
                path: p(),
                reason: "r",
            },
            FsError::NotFound { path: p() },
            FsError::NotDirectory { path: p() },
            FsError::SymlinkRejected { path: p() },
            FsError::NotRegularFile { path: p() },
            FsError::AlreadyExists { path: p() },
            FsError::too_large("a.txt", 2, 1),
            FsError::Io {
                path: p(),
                message: "m".into(),
            },
        ];
        for e in &fs {
            assert_eq!(ErrorCode::from(e).as_str(), e.code(), "{e:?}");
        }
        let plans: Vec<PlanError<FsError>> = vec![
            PlanError::InvalidPatch(p()),
            PlanError::FileNotFound(p()),
            PlanError::AddFileExists(p()),
            PlanError::MoveDestinationExists(p()),
            PlanError::SymlinkRejected(p()),
            PlanError::SpecialFileRejected(p()),
            PlanError::Lookup(FsError::NotFound { path: p() }),
        ];
        for e in &plans {
            assert_eq!(ErrorCode::from(e).as_str(), e.code(), "{e:?}");
        }
        for e in [
            SpawnError::InvalidCommand,
            SpawnError::LimitReached,
            SpawnError::SpawnFailed("x".into()),
        ] {
            assert_eq!(ErrorCode::from(&e).as_str(), e.code(), "{e:?}");
        }
        for e in [
            ProcError::NotFound,
            ProcError::NotTty,
            ProcError::NotRunning,
            ProcError::StdinClosed,
            ProcError::Io("x".into()),
        ] {
            assert_eq!(ErrorCode::from(&e).as_str(), e.code(), "{e:?}");
        }
    }
}
