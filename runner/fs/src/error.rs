//! Error type of the filesystem layer and its mapping to the tool-contract error codes.

use rustix::io::Errno;

/// Longest path echoed back inside an error (longer inputs are cut, so a hostile 5 000-byte path does not
/// bloat messages).
const MAX_ECHO_BYTES: usize = 256;

/// Every failure of the filesystem layer. Paths inside are workspace-relative (or the caller's own input,
/// shortened), never the absolute location of the workspace on the host.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FsError {
    /// The path is not a valid workspace-relative path, or it resolves outside the workspace.
    #[error("path escapes the workspace: {path}: {reason}")]
    PathEscape {
        /// The offending path (caller input, possibly shortened).
        path: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// The path (or one of its parent directories) does not exist.
    #[error("file not found: {path}")]
    NotFound {
        /// The missing path.
        path: String,
    },
    /// A component used as a directory is not a directory.
    #[error("not a directory: {path}")]
    NotDirectory {
        /// The path whose resolution hit a non-directory.
        path: String,
    },
    /// The path or one of its ancestors is a symbolic link; links are never followed.
    #[error("symbolic links are not followed: {path}")]
    SymlinkRejected {
        /// The path that crosses a symlink.
        path: String,
    },
    /// The target is not a regular file (directory, FIFO, socket, device, ...).
    #[error("not a regular file: {path}")]
    NotRegularFile {
        /// The path of the special file.
        path: String,
    },
    /// The destination already exists.
    #[error("already exists: {path}")]
    AlreadyExists {
        /// The existing path.
        path: String,
    },
    /// The file is larger than the limit of the operation (hashing, patching).
    #[error("file too large: {path} is {size} bytes, over the limit of {limit} bytes")]
    TooLarge {
        /// The file.
        path: String,
        /// Its size.
        size: u64,
        /// The limit it exceeds.
        limit: u64,
    },
    /// Any other I/O failure.
    #[error("file operation failed: {path}: {message}")]
    Io {
        /// The path being operated on.
        path: String,
        /// A description of the failure (never contains an absolute path).
        message: String,
    },
}

impl FsError {
    /// The tool-contract error code of this error.
    ///
    /// `AlreadyExists` maps to `FILE_OPERATION_FAILED`; callers that know the context turn it into
    /// `ADD_FILE_EXISTS` or `MOVE_DESTINATION_EXISTS`. Over-long paths and names are reported as
    /// `PATH_ESCAPE`.
    pub fn code(&self) -> &'static str {
        match self {
            FsError::PathEscape { .. } => "PATH_ESCAPE",
            FsError::NotFound { .. } => "FILE_NOT_FOUND",
            FsError::NotDirectory { .. } => "PATH_NOT_DIRECTORY",
            FsError::SymlinkRejected { .. } => "SYMLINK_REJECTED",
            FsError::NotRegularFile { .. } => "SPECIAL_FILE_REJECTED",
            FsError::AlreadyExists { .. } | FsError::Io { .. } => "FILE_OPERATION_FAILED",
            FsError::TooLarge { .. } => "FILE_TOO_LARGE",
        }
    }

    /// The path this error is about.
    pub fn path(&self) -> &str {
        match self {
            FsError::PathEscape { path, .. }
            | FsError::NotFound { path }
            | FsError::NotDirectory { path }
            | FsError::SymlinkRejected { path }
            | FsError::NotRegularFile { path }
            | FsError::AlreadyExists { path }
            | FsError::TooLarge { path, .. }
            | FsError::Io { path, .. } => path,
        }
    }

    /// A `TooLarge` error for `path`.
    pub fn too_large(path: &str, size: u64, limit: u64) -> FsError {
        FsError::TooLarge {
            path: echo(path),
            size,
            limit,
        }
    }

    /// Builds an `Io` error with a fixed message.
    pub(crate) fn io(path: &str, message: impl Into<String>) -> FsError {
        FsError::Io {
            path: echo(path),
            message: message.into(),
        }
    }

    /// Maps an errno from resolving or operating on `path` to the matching error.
    pub(crate) fn from_errno(path: &str, errno: Errno) -> FsError {
        let path = echo(path);
        match errno {
            Errno::NOENT => FsError::NotFound { path },
            Errno::NOTDIR => FsError::NotDirectory { path },
            Errno::LOOP => FsError::SymlinkRejected { path },
            Errno::XDEV => FsError::PathEscape {
                path,
                reason: "resolves outside the workspace",
            },
            Errno::NAMETOOLONG => FsError::PathEscape {
                path,
                reason: "name too long",
            },
            Errno::EXIST => FsError::AlreadyExists { path },
            Errno::NXIO | Errno::ISDIR => FsError::NotRegularFile { path },
            other => FsError::Io {
                path,
                message: errno_message(other),
            },
        }
    }

    /// Maps a `std::io::Error` (from reading or writing an open descriptor) on `path`.
    pub(crate) fn from_std(path: &str, err: &std::io::Error) -> FsError {
        match err.raw_os_error() {
            Some(raw) => FsError::from_errno(path, Errno::from_raw_os_error(raw)),
            None => FsError::io(path, err.kind().to_string()),
        }
    }
}

/// A path-free description of an errno (e.g. `"Permission denied (os error 13)"`).
fn errno_message(errno: Errno) -> String {
    std::io::Error::from(errno).to_string()
}

/// Shortens `path` for inclusion in an error, cutting at a character boundary.
pub(crate) fn echo(path: &str) -> String {
    // An absolute input is never echoed: it may name the host's layout (even the root itself).
    if path.starts_with('/') {
        return "<absolute path>".to_string();
    }
    if path.len() <= MAX_ECHO_BYTES {
        return path.replace('\0', "\\0");
    }
    let mut cut = MAX_ECHO_BYTES;
    while !path.is_char_boundary(cut) {
        cut -= 1;
    }
    let head = path.get(..cut).unwrap_or_default();
    format!("{}…", head.replace('\0', "\\0"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_match_contract() {
        let p = String::from("a");
        assert_eq!(
            FsError::PathEscape {
                path: p.clone(),
                reason: "x"
            }
            .code(),
            "PATH_ESCAPE"
        );
        assert_eq!(
            FsError::NotFound { path: p.clone() }.code(),
            "FILE_NOT_FOUND"
        );
        assert_eq!(
            FsError::NotDirectory { path: p.clone() }.code(),
            "PATH_NOT_DIRECTORY"
        );
        assert_eq!(
            FsError::SymlinkRejected { path: p.clone() }.code(),
            "SYMLINK_REJECTED"
        );
        assert_eq!(
            FsError::NotRegularFile { path: p.clone() }.code(),
            "SPECIAL_FILE_REJECTED"
        );
        assert_eq!(
            FsError::AlreadyExists { path: p.clone() }.code(),
            "FILE_OPERATION_FAILED"
        );
        assert_eq!(FsError::io(&p, "m").code(), "FILE_OPERATION_FAILED");
        assert_eq!(
            FsError::TooLarge {
                path: p.clone(),
                size: 2,
                limit: 1
            }
            .code(),
            "FILE_TOO_LARGE"
        );
    }

    #[test]
    fn errno_mapping() {
        assert_eq!(
            FsError::from_errno("a", Errno::LOOP).code(),
            "SYMLINK_REJECTED"
        );
        assert_eq!(FsError::from_errno("a", Errno::XDEV).code(), "PATH_ESCAPE");
        assert_eq!(
            FsError::from_errno("a", Errno::NOTDIR).code(),
            "PATH_NOT_DIRECTORY"
        );
        assert_eq!(
            FsError::from_errno("a", Errno::NOENT).code(),
            "FILE_NOT_FOUND"
        );
        assert_eq!(
            FsError::from_errno("a", Errno::ACCESS).code(),
            "FILE_OPERATION_FAILED"
        );
    }

    #[test]
    fn echo_shortens_long_paths_at_char_boundary() {
        let long = "é".repeat(300);
        let shown = echo(&long);
        assert!(shown.len() <= MAX_ECHO_BYTES + "…".len());
        assert!(shown.ends_with('…'));
        assert_eq!(echo("a\0b"), "a\\0b");
        assert_eq!(echo("/etc/passwd"), "<absolute path>");
    }
}
