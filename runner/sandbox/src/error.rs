//! The error type of the sandbox crate and the exit codes the helper reports with.

use std::io;

/// Exit code of the helper when the sandbox could not be set up (the target never ran).
pub const HELPER_FAILURE_EXIT: i32 = 126;

/// Exit code of the helper when the target program was not found (shell convention).
pub const HELPER_NOT_FOUND_EXIT: i32 = 127;

/// Prefix of the single stderr line the helper prints before exiting on failure.
pub const HELPER_STDERR_PREFIX: &str = "codespace-sandbox:";

/// Everything that can go wrong while planning, applying or launching the sandbox.
///
/// Messages never carry absolute paths: paths are named by their role ("workspace root", "temp dir").
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The kernel cannot enforce what the plan needs (no Landlock, partial enforcement, …): fail closed.
    #[error("sandbox unavailable: {0}")]
    Unavailable(String),
    /// The plan is malformed (relative path, bad JSON, missing environment variable, …).
    #[error("invalid sandbox plan: {0}")]
    InvalidPlan(String),
    /// The helper was invoked with arguments it does not understand.
    #[error("bad helper invocation: {0}")]
    Usage(String),
    /// Building or applying the Landlock ruleset failed.
    #[error("landlock: {0}")]
    Landlock(String),
    /// Building or installing the seccomp filter failed.
    #[error("seccomp: {0}")]
    Seccomp(String),
    /// A process-hardening step (prctl, setrlimit, namespaces) failed.
    #[error("process hardening: {0}")]
    Hardening(String),
    /// Secret masks could not be put in place (the command must not run with a secret visible).
    #[error("secret masking: {0}")]
    Masking(String),
    /// The final `execvp` of the target failed.
    #[error("cannot execute `{program}`: {source}")]
    Exec {
        /// The program as given (the first word of the target argv).
        program: String,
        /// The error `execvp` returned.
        #[source]
        source: io::Error,
    },
}

impl SandboxError {
    /// The exit code the helper uses for this error: 127 when the target program does not
    /// exist, 126 for every other failure (including every sandbox set-up failure).
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::Exec { source, .. } if source.kind() == io::ErrorKind::NotFound => {
                HELPER_NOT_FOUND_EXIT
            }
            _ => HELPER_FAILURE_EXIT,
        }
    }

    /// The one line the helper writes to stderr: `codespace-sandbox: <message>`.
    pub fn stderr_line(&self) -> String {
        format!("{HELPER_STDERR_PREFIX} {self}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_exec_maps_to_127_and_others_to_126() {
        let missing = SandboxError::Exec {
            program: "nope".into(),
            source: io::Error::from(io::ErrorKind::NotFound),
        };
        assert_eq!(missing.exit_code(), 127);
        assert_eq!(SandboxError::Unavailable("x".into()).exit_code(), 126);
        let denied = SandboxError::Exec {
            program: "x".into(),
            source: io::Error::from(io::ErrorKind::PermissionDenied),
        };
        assert_eq!(denied.exit_code(), 126);
    }

    #[test]
    fn stderr_line_starts_with_prefix() {
        let line = SandboxError::Usage("missing --".into()).stderr_line();
        assert!(line.starts_with("codespace-sandbox: "), "{line}");
    }
}
