//! Error types of the process table, with the tool-contract error code each one maps to.

use thiserror::Error;

/// Why a spawn did not start a process. In every case nothing is running afterwards.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum SpawnError {
    /// The argv is empty or its first element is empty.
    #[error("the command must be a non-empty argv whose first element is a program name")]
    InvalidCommand,
    /// The table already holds `max_live` running processes.
    #[error("too many processes are running; wait for one to exit or terminate one")]
    LimitReached,
    /// The process could not be started (program not found, bad working directory, OS error).
    #[error("the process could not be started: {0}")]
    SpawnFailed(String),
}

impl SpawnError {
    /// The tool-contract error code for this error.
    pub fn code(&self) -> &'static str {
        match self {
            SpawnError::InvalidCommand => "INVALID_COMMAND",
            SpawnError::LimitReached | SpawnError::SpawnFailed(_) => "PROCESS_SPAWN_FAILED",
        }
    }
}

/// Errors of operations on an existing process handle.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ProcError {
    /// No handle with this id (never existed, or evicted after exit).
    #[error("no process with this id")]
    NotFound,
    /// The process was not started with a terminal.
    #[error("the process is not attached to a terminal")]
    NotTty,
    /// The process has already exited.
    #[error("the process is not running")]
    NotRunning,
    /// The process's standard input is closed (it exited or closed its end).
    #[error("the process's standard input is closed")]
    StdinClosed,
    /// An I/O failure talking to the process.
    #[error("process I/O failed: {0}")]
    Io(String),
}

impl ProcError {
    /// The tool-contract error code for this error.
    pub fn code(&self) -> &'static str {
        match self {
            ProcError::NotFound | ProcError::StdinClosed => "PROCESS_NOT_FOUND",
            ProcError::NotTty => "PROCESS_NOT_TTY",
            ProcError::NotRunning => "PROCESS_NOT_RUNNING",
            ProcError::Io(_) => "INTERNAL",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_match_the_contract() {
        assert_eq!(SpawnError::InvalidCommand.code(), "INVALID_COMMAND");
        assert_eq!(
            SpawnError::SpawnFailed("x".into()).code(),
            "PROCESS_SPAWN_FAILED"
        );
        assert_eq!(ProcError::NotFound.code(), "PROCESS_NOT_FOUND");
        assert_eq!(ProcError::StdinClosed.code(), "PROCESS_NOT_FOUND");
        assert_eq!(ProcError::NotTty.code(), "PROCESS_NOT_TTY");
        assert_eq!(ProcError::NotRunning.code(), "PROCESS_NOT_RUNNING");
    }
}
