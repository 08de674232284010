//! [`RunnerError`]: every way a runner method fails, one variant per error code the engine maps
//! (its message is the text the tool's error carries), plus [`RunnerError::Unavailable`] for a
//! worker that is dead or cannot be reached.

use serde::{Deserialize, Serialize};

/// Why a runner method failed. Each variant keeps the message the engine puts on the wire.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "code", rename_all = "snake_case")]
pub enum RunnerError {
    /// The path is not a workspace path or resolves outside it (`PATH_ESCAPE`).
    #[error("{message}")]
    PathEscape {
        /// The message.
        message: String,
    },
    /// The path does not exist (`FILE_NOT_FOUND`).
    #[error("{message}")]
    NotFound {
        /// The message.
        message: String,
    },
    /// A component used as a directory is not one (`PATH_NOT_DIRECTORY`).
    #[error("{message}")]
    NotDirectory {
        /// The message.
        message: String,
    },
    /// The path crosses a symlink (`SYMLINK_REJECTED`).
    #[error("{message}")]
    Symlink {
        /// The message.
        message: String,
    },
    /// Not a regular file (`SPECIAL_FILE_REJECTED`).
    #[error("{message}")]
    SpecialFile {
        /// The message.
        message: String,
    },
    /// Over a size limit (`FILE_TOO_LARGE`).
    #[error("{message}")]
    TooLarge {
        /// The message.
        message: String,
    },
    /// A file changed under the call (`STALE_READ`).
    #[error("{message}")]
    Stale {
        /// The message.
        message: String,
    },
    /// An added file exists (`ADD_FILE_EXISTS`).
    #[error("{message}")]
    AddFileExists {
        /// The message.
        message: String,
    },
    /// A move's destination exists (`MOVE_DESTINATION_EXISTS`).
    #[error("{message}")]
    MoveDestinationExists {
        /// The message.
        message: String,
    },
    /// Any other file operation failed (`FILE_OPERATION_FAILED`).
    #[error("{message}")]
    FileOperation {
        /// The message.
        message: String,
    },
    /// The argv is not a command (`INVALID_COMMAND`).
    #[error("{message}")]
    InvalidCommand {
        /// The message.
        message: String,
    },
    /// The arguments of the method are invalid (`INVALID_ARGUMENTS`).
    #[error("{message}")]
    InvalidArguments {
        /// The message.
        message: String,
    },
    /// The process could not start (`PROCESS_SPAWN_FAILED`).
    #[error("{message}")]
    SpawnFailed {
        /// The message.
        message: String,
    },
    /// No such process (`PROCESS_NOT_FOUND`).
    #[error("{message}")]
    ProcessNotFound {
        /// The message.
        message: String,
    },
    /// The process has no terminal (`PROCESS_NOT_TTY`).
    #[error("{message}")]
    ProcessNotTty {
        /// The message.
        message: String,
    },
    /// The process is not running (`PROCESS_NOT_RUNNING`).
    #[error("{message}")]
    ProcessNotRunning {
        /// The message.
        message: String,
    },
    /// The runner already runs its maximum number of live processes (`WORKSPACE_BUSY`).
    #[error("{message}")]
    Busy {
        /// The message.
        message: String,
    },
    /// Anything else (`INTERNAL`).
    #[error("{message}")]
    Internal {
        /// The message.
        message: String,
    },
    /// The runner cannot be reached: a worker that died, disconnected or never started
    /// (`ENVIRONMENT_UNAVAILABLE`). Nothing ran.
    #[error("environment unavailable: {reason}")]
    Unavailable {
        /// Why.
        reason: String,
    },
}

impl RunnerError {
    /// The tool-contract error code of this error.
    pub fn code(&self) -> &'static str {
        match self {
            RunnerError::PathEscape { .. } => "PATH_ESCAPE",
            RunnerError::NotFound { .. } => "FILE_NOT_FOUND",
            RunnerError::NotDirectory { .. } => "PATH_NOT_DIRECTORY",
            RunnerError::Symlink { .. } => "SYMLINK_REJECTED",
            RunnerError::SpecialFile { .. } => "SPECIAL_FILE_REJECTED",
            RunnerError::TooLarge { .. } => "FILE_TOO_LARGE",
            RunnerError::Stale { .. } => "STALE_READ",
            RunnerError::AddFileExists { .. } => "ADD_FILE_EXISTS",
            RunnerError::MoveDestinationExists { .. } => "MOVE_DESTINATION_EXISTS",
            RunnerError::FileOperation { .. } => "FILE_OPERATION_FAILED",
            RunnerError::InvalidCommand { .. } => "INVALID_COMMAND",
            RunnerError::InvalidArguments { .. } => "INVALID_ARGUMENTS",
            RunnerError::SpawnFailed { .. } => "PROCESS_SPAWN_FAILED",
            RunnerError::ProcessNotFound { .. } => "PROCESS_NOT_FOUND",
            RunnerError::ProcessNotTty { .. } => "PROCESS_NOT_TTY",
            RunnerError::ProcessNotRunning { .. } => "PROCESS_NOT_RUNNING",
            RunnerError::Busy { .. } => "WORKSPACE_BUSY",
            RunnerError::Internal { .. } => "INTERNAL",
            RunnerError::Unavailable { .. } => "ENVIRONMENT_UNAVAILABLE",
        }
    }

    /// An `Internal` error with `message`.
    pub fn internal(message: impl Into<String>) -> RunnerError {
        RunnerError::Internal {
            message: message.into(),
        }
    }

    /// An `Unavailable` error with `reason`.
    pub fn unavailable(reason: impl Into<String>) -> RunnerError {
        RunnerError::Unavailable {
            reason: reason.into(),
        }
    }
}
