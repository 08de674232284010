//! Error types of the parser and the planner, with their wire error codes.

/// A syntax error in the patch text.
///
/// `line` is 1-based and counts lines of the text handed to [`crate::parse`] (including a heredoc
/// opener and leading blank lines). The message reads "expected …, found …".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct ParseError {
    /// 1-based line number in the patch text.
    pub line: usize,
    /// What was expected and what was found.
    pub message: String,
}

/// Why a patch cannot be applied. `E` is the caller's lookup error.
///
/// The `String` of the path variants is the path as spelled in the patch (never absolute unless
/// the patch itself was); `InvalidPatch` carries a full message.
#[derive(Debug, thiserror::Error)]
pub enum PlanError<E> {
    /// The patch text did not parse.
    #[error("invalid patch: {0}")]
    Parse(#[from] ParseError),
    /// The patch is well-formed but cannot be applied (context not found, conflicting hunks, …).
    #[error("invalid patch: {0}")]
    InvalidPatch(String),
    /// An Update or Delete names a path that does not exist.
    #[error("'{0}' does not exist")]
    FileNotFound(String),
    /// An Add names a path that already exists.
    #[error("cannot add '{0}': the path already exists (use '*** Update File:' to change a file)")]
    AddFileExists(String),
    /// A `*** Move to:` destination already exists.
    #[error("cannot move to '{0}': the destination already exists")]
    MoveDestinationExists(String),
    /// A touched path is a symbolic link.
    #[error("'{0}' is a symbolic link; patches never follow or change symlinks")]
    SymlinkRejected(String),
    /// A touched path is not a regular file (device, socket, fifo, …).
    #[error("'{0}' is not a regular file")]
    SpecialFileRejected(String),
    /// The caller's lookup failed.
    #[error("{0}")]
    Lookup(E),
}

impl<E> PlanError<E> {
    /// The wire error code for this error.
    ///
    /// `Lookup` has no code of its own: callers should map their lookup error themselves; this
    /// returns `FILE_OPERATION_FAILED` for it as a fallback.
    pub fn code(&self) -> &'static str {
        match self {
            PlanError::Parse(_) | PlanError::InvalidPatch(_) => "INVALID_PATCH",
            PlanError::FileNotFound(_) => "FILE_NOT_FOUND",
            PlanError::AddFileExists(_) => "ADD_FILE_EXISTS",
            PlanError::MoveDestinationExists(_) => "MOVE_DESTINATION_EXISTS",
            PlanError::SymlinkRejected(_) => "SYMLINK_REJECTED",
            PlanError::SpecialFileRejected(_) => "SPECIAL_FILE_REJECTED",
            PlanError::Lookup(_) => "FILE_OPERATION_FAILED",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_error_display_has_line_prefix() {
        let e = ParseError {
            line: 3,
            message: "expected x, found y".into(),
        };
        assert_eq!(e.to_string(), "line 3: expected x, found y");
    }

    #[test]
    fn codes_match_the_tool_contract() {
        let cases: Vec<(PlanError<String>, &str)> = vec![
            (
                PlanError::Parse(ParseError {
                    line: 1,
                    message: String::new(),
                }),
                "INVALID_PATCH",
            ),
            (PlanError::InvalidPatch("x".into()), "INVALID_PATCH"),
            (PlanError::FileNotFound("a".into()), "FILE_NOT_FOUND"),
            (PlanError::AddFileExists("a".into()), "ADD_FILE_EXISTS"),
            (
                PlanError::MoveDestinationExists("a".into()),
                "MOVE_DESTINATION_EXISTS",
            ),
            (PlanError::SymlinkRejected("a".into()), "SYMLINK_REJECTED"),
            (
                PlanError::SpecialFileRejected("a".into()),
                "SPECIAL_FILE_REJECTED",
            ),
            (PlanError::Lookup("io".into()), "FILE_OPERATION_FAILED"),
        ];
        for (err, code) in cases {
            assert_eq!(err.code(), code, "{err}");
        }
    }
}
