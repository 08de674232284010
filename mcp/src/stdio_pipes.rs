//! stdin and stdout as non-blocking pipes driven by tokio's reactor, when they are pipes (the
//! usual way an MCP host starts a stdio server). tokio's `Stdin`/`Stdout` hand every read and
//! write to the blocking pool; a pipe registered with the reactor wakes the reading task itself.

use std::os::fd::AsFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use tokio::net::unix::pipe;

/// A duplicate of `fd` as a file, when it is a pipe (FIFO).
fn pipe_file(fd: std::os::fd::BorrowedFd<'_>) -> Option<(std::fs::File, std::fs::Metadata)> {
    let file = std::fs::File::from(fd.try_clone_to_owned().ok()?);
    let meta = file.metadata().ok()?;
    meta.file_type().is_fifo().then_some((file, meta))
}

/// stdin as a reactor-driven pipe; None when it is not a pipe or no runtime runs.
pub(crate) fn stdin_pipe() -> Option<pipe::Receiver> {
    tokio::runtime::Handle::try_current().ok()?;
    let (file, _) = pipe_file(std::io::stdin().as_fd())?;
    pipe::Receiver::from_file(file).ok()
}

/// stdout as a reactor-driven pipe; None when it is not a pipe, when no runtime runs, or when
/// stderr is the same pipe (being non-blocking is a property of the open pipe, and a log line
/// written to stderr must never fail for a full pipe).
pub(crate) fn stdout_pipe() -> Option<pipe::Sender> {
    tokio::runtime::Handle::try_current().ok()?;
    let (file, meta) = pipe_file(std::io::stdout().as_fd())?;
    let shared_with_stderr = std::io::stderr()
        .as_fd()
        .try_clone_to_owned()
        .ok()
        .map(std::fs::File::from)
        .and_then(|f| f.metadata().ok())
        .is_none_or(|m| m.dev() == meta.dev() && m.ino() == meta.ino());
    if shared_with_stderr {
        return None;
    }
    pipe::Sender::from_file(file).ok()
}
