//! The exec handshake between the server and the sandbox helper.
//!
//! The server creates a pipe (both ends close-on-exec) and hands the write end to the helper
//! alone (the process runner clears its close-on-exec flag in the forked child only) and names
//! it after [`HANDSHAKE_ARG`]. The helper takes the descriptor first thing and marks it
//! close-on-exec again, so the one `execve` it makes, the target's, closes it: the server reads
//! end of file with nothing written. When the helper refuses (any failure before or of that
//! `execve`), it writes the error message to the pipe and exits; the server turns the message
//! into the spawn error. Nothing else holds the write end: the relay of a `network: proxy`
//! command closes it right after its fork. The server waits on the read end without polling; the
//! wait also ends when the helper process exits (a helper that hangs is bounded by the process
//! timeout).

use std::ffi::OsStr;
use std::future::Future;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use tokio::io::AsyncReadExt;

use crate::error::SandboxError;

/// The helper argument (before `--`) whose value is the number of the handshake descriptor.
pub const HANDSHAKE_ARG: &str = "--handshake-fd";

/// Most bytes of a refusal message the helper writes and the server reads (one atomic pipe
/// write: `PIPE_BUF`).
pub const MAX_REFUSAL_BYTES: usize = 4096;

/// What the helper did with the command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HelperOutcome {
    /// The helper exec'd the target (or exited without a word: then the target never ran and
    /// the process's exit status tells the rest).
    Executed,
    /// The helper refused to run the target: the first line of its message.
    Refused(String),
}

/// The server's end of one command's handshake (the read end of the pipe).
#[derive(Debug)]
pub struct Handshake {
    read: OwnedFd,
}

/// A fresh handshake: the server's end and the helper's end (both close-on-exec; hand the
/// helper's end to that one child only).
pub fn handshake_pipe() -> Result<(Handshake, OwnedFd), SandboxError> {
    let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| {
        SandboxError::Hardening(format!("cannot create the helper handshake pipe: {e}"))
    })?;
    Ok((Handshake { read }, write))
}

impl Handshake {
    /// Waits for the helper's verdict: [`HelperOutcome::Executed`] once the write end closed
    /// with nothing written (the target was exec'd), [`HelperOutcome::Refused`] with the
    /// helper's message. `helper_exited` resolves when the process has exited: then whatever the
    /// helper wrote is taken without waiting further, so a descriptor leaked to a descendant
    /// could not hang the caller either. Needs a tokio runtime with I/O enabled.
    pub async fn outcome(self, helper_exited: impl Future<Output = ()>) -> HelperOutcome {
        let rx = match tokio::net::unix::pipe::Receiver::from_owned_fd(self.read) {
            Ok(rx) => rx,
            Err(e) => {
                return HelperOutcome::Refused(format!(
                    "cannot read the sandbox helper's handshake: {}",
                    e.kind()
                ));
            }
        };
        let mut rx = rx;
        let mut message: Vec<u8> = Vec::new();
        let mut buf = [0u8; 512];
        let mut exited = false;
        tokio::pin!(helper_exited);
        loop {
            let step = if exited {
                // A plain non-blocking read(2): tokio's `try_read` answers "would block" until
                // the reactor has seen the pipe readable, and bytes written just before the
                // exit would be missed.
                match rustix::io::read(std::os::fd::AsFd::as_fd(&rx), &mut buf) {
                    Err(rustix::io::Errno::AGAIN) => break,
                    r => r.map_err(std::io::Error::from),
                }
            } else {
                tokio::select! {
                    r = rx.read(&mut buf) => r,
                    () = &mut helper_exited => {
                        exited = true;
                        continue;
                    }
                }
            };
            match step {
                Ok(0) => break,
                Ok(n) => {
                    message.extend_from_slice(buf.get(..n).unwrap_or_default());
                    if message.len() >= MAX_REFUSAL_BYTES {
                        break;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        if message.is_empty() {
            return HelperOutcome::Executed;
        }
        let text = String::from_utf8_lossy(&message);
        HelperOutcome::Refused(text.lines().next().unwrap_or("").trim().to_owned())
    }
}

/// The helper's end of the handshake.
#[derive(Debug)]
pub(crate) struct HelperEnd {
    write: OwnedFd,
}

impl HelperEnd {
    /// Takes the descriptor named after [`HANDSHAKE_ARG`]: checks it is an open pipe and marks
    /// it close-on-exec (the target's `execve` closes it; nothing else is exec'd).
    pub(crate) fn take(number: &OsStr) -> Result<HelperEnd, SandboxError> {
        let write = take_inherited_fd(
            number,
            HANDSHAKE_ARG,
            Some((rustix::fs::FileType::Fifo, "a pipe")),
        )?;
        Ok(HelperEnd { write })
    }

    /// The descriptor's number (the relay closes it after its fork).
    pub(crate) fn raw(&self) -> RawFd {
        self.write.as_raw_fd()
    }

    /// Writes the refusal message (at most [`MAX_REFUSAL_BYTES`], one write) and closes the
    /// descriptor. A server that went away is not an error here.
    pub(crate) fn refuse(self, err: &SandboxError) {
        let text = err.to_string();
        let mut end = text.len().min(MAX_REFUSAL_BYTES);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let mut file = std::fs::File::from(self.write);
        let _ = file.write_all(text.get(..end).unwrap_or_default().as_bytes());
    }
}

/// Takes a descriptor the runner handed this helper by number (after `arg`): a number above 2,
/// open, of file type `kind.0` when a type is given (`kind.1` names it in the refusal), marked
/// close-on-exec so the target's `execve` closes it. The runner cleared close-on-exec on it for this helper alone, so nothing
/// else in this process owns it.
pub(crate) fn take_inherited_fd(
    number: &OsStr,
    arg: &str,
    kind: Option<(rustix::fs::FileType, &str)>,
) -> Result<OwnedFd, SandboxError> {
    let bad = |what: &str| SandboxError::Usage(format!("{arg}: {what}"));
    let fd: RawFd = number
        .to_str()
        .and_then(|s| s.parse().ok())
        .filter(|fd| *fd > 2)
        .ok_or_else(|| bad("not a descriptor number above 2"))?;
    // SAFETY: F_GETFD only reads the descriptor's flags; a closed number fails with EBADF.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
        return Err(bad("the descriptor is not open"));
    }
    // SAFETY: the descriptor is open (checked above) and nothing else in this process owns it:
    // the runner handed it to this helper alone.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    if let Some((kind, kind_name)) = kind {
        let stat = rustix::fs::fstat(&owned).map_err(|_| bad("fstat failed"))?;
        if rustix::fs::FileType::from_raw_mode(stat.st_mode) != kind {
            return Err(bad(&format!("the descriptor is not {kind_name}")));
        }
    }
    rustix::io::fcntl_setfd(&owned, rustix::io::FdFlags::CLOEXEC)
        .map_err(|_| bad("cannot mark it close-on-exec"))?;
    Ok(owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn helper_end(write: OwnedFd) -> HelperEnd {
        HelperEnd { write }
    }

    #[tokio::test]
    async fn end_of_file_with_nothing_written_is_an_exec() {
        let (handshake, write) = handshake_pipe().unwrap();
        drop(write);
        assert_eq!(
            handshake.outcome(std::future::pending()).await,
            HelperOutcome::Executed
        );
    }

    #[tokio::test]
    async fn a_message_is_a_refusal_and_only_its_first_line_counts() {
        let (handshake, write) = handshake_pipe().unwrap();
        helper_end(write).refuse(&SandboxError::Unavailable("no Landlock\nsecond".into()));
        assert_eq!(
            handshake.outcome(std::future::pending()).await,
            HelperOutcome::Refused("sandbox unavailable: no Landlock".into())
        );
    }

    #[tokio::test]
    async fn the_helpers_exit_ends_the_wait_even_if_the_write_end_leaked() {
        // Something still holds the write end (a leaked copy): without the exit, no end of
        // file would ever come. The exit ends the wait, with what was written so far.
        let (handshake, write) = handshake_pipe().unwrap();
        assert_eq!(
            handshake.outcome(std::future::ready(())).await,
            HelperOutcome::Executed
        );
        let (handshake, other) = handshake_pipe().unwrap();
        let mut file = std::fs::File::from(other);
        file.write_all(b"refused: x").unwrap();
        assert_eq!(
            handshake.outcome(std::future::ready(())).await,
            HelperOutcome::Refused("refused: x".into())
        );
        drop((write, file));
    }

    #[tokio::test]
    async fn a_long_message_is_cut_at_the_cap_on_a_character_boundary() {
        let (handshake, write) = handshake_pipe().unwrap();
        helper_end(write).refuse(&SandboxError::Usage("é".repeat(MAX_REFUSAL_BYTES)));
        match handshake.outcome(std::future::pending()).await {
            HelperOutcome::Refused(m) => {
                assert!(m.len() <= MAX_REFUSAL_BYTES, "{}", m.len());
                assert!(m.starts_with("bad helper invocation: é"), "{m}");
                assert!(!m.contains('\u{fffd}'), "cut inside a character");
            }
            HelperOutcome::Executed => panic!("a refusal read as an exec"),
        }
    }
}
