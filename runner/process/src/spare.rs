//! Warm spare launchers ([`crate::Launcher::warm_spare`]): after a command of such a launcher
//! starts, the table starts the next one ahead (`posix_spawn`, its three stdio pipes made, its
//! session its own, its parent-death signal armed by itself), blocked reading one command from a
//! control descriptor, so the launcher's exec and load leave the next command's start. A spare
//! knows nothing of any command until it is used: the hand-over sends it the launcher's
//! arguments, the environment, the working directory and the inherited descriptors (the
//! cgroup's among them: it joins its cgroup then, as a cold launcher does). A spare serves one
//! command and is gone; at most one waits per launcher program and shape (the launcher's
//! `spare_args`, e.g. the sandbox helper's private network made ahead; one table per
//! environment), and a command is handed only to a spare of its own shape.
//!
//! The control descriptor is one end of an anonymous `socketpair(AF_UNIX, SOCK_STREAM)` (a pipe
//! cannot carry descriptors), close-on-exec in the server and handed to that spare alone: it is
//! never bound or named, so nothing but the server can talk to a spare. The wire is the
//! sandbox crate's `spare.rs` description.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use rustix::net::{
    AddressFamily, SendAncillaryBuffer, SendAncillaryMessage, SendFlags, SocketFlags, SocketType,
    sendmsg, socketpair,
};

use crate::error::SpawnError;
use crate::pipe::{ExecPlan, PipeChild, spawn_pipe_lean};

/// The argument that starts a launcher as a spare (the sandbox crate's `SPARE_ARG`).
pub const SPARE_ARG: &str = "__sandbox-spare";

/// One waiting spare.
pub(crate) struct Spare {
    pid: u32,
    /// `None` once handed over (the command's process now).
    child: Option<PipeChild>,
    control: OwnedFd,
}

impl Drop for Spare {
    fn drop(&mut self) {
        // Unused (shutdown, a failed hand-over): it leads its own group; reaped by `reap`.
        if self.child.is_some() {
            crate::pipe::signal_pid_group(self.pid);
        }
    }
}

/// The spares of one table, by launcher program and shape.
#[derive(Default)]
pub(crate) struct Spares {
    state: Mutex<State>,
}

/// A launcher program and the arguments its spare starts with ([`crate::Launcher::spare_args`]).
type Shape = (PathBuf, Vec<String>);

#[derive(Default)]
struct State {
    ready: HashMap<Shape, Spare>,
    starting: HashSet<Shape>,
    closed: bool,
}

impl Spares {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The spare of `program` started with `args`, if one waits: never one of another shape.
    pub(crate) fn take(&self, program: &Path, args: &[String]) -> Option<Spare> {
        self.state()
            .ready
            .remove(&(program.to_path_buf(), args.to_vec()))
    }

    /// Starts a spare of `program` with `args` in the background unless one of that shape waits
    /// or is starting. It runs on a runtime worker thread (a long-lived one: the spare's
    /// parent-death signal follows the thread that started it).
    pub(crate) fn refill(self: &Arc<Self>, program: &Path, arg0: &OsStr, args: &[String]) {
        let shape: Shape = (program.to_path_buf(), args.to_vec());
        {
            let mut state = self.state();
            if state.closed || state.ready.contains_key(&shape) || state.starting.contains(&shape) {
                return;
            }
            state.starting.insert(shape.clone());
        }
        let me = Arc::clone(self);
        let arg0 = arg0.to_os_string();
        tokio::spawn(async move {
            let started = start(&shape.0, &arg0, &shape.1);
            let mut state = me.state();
            state.starting.remove(&shape);
            match started {
                Ok(spare) if !state.closed => {
                    state.ready.insert(shape, spare);
                }
                Ok(spare) => {
                    drop(state);
                    reap(spare);
                }
                Err(err) => tracing::debug!(%err, "could not start a spare launcher"),
            }
        });
    }

    /// Kills every waiting spare and starts no more (shutdown).
    pub(crate) fn close(&self) {
        let spares: Vec<Spare> = {
            let mut state = self.state();
            state.closed = true;
            state.ready.drain().map(|(_, s)| s).collect()
        };
        spares.into_iter().for_each(reap);
    }
}

/// Starts `program SPARE_ARG <control> --parent-pid <server> <shape…>` with no environment.
fn start(program: &Path, arg0: &OsStr, shape: &[String]) -> Result<Spare, SpawnError> {
    let (mine, theirs) = socketpair(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )
    .map_err(|e| SpawnError::SpawnFailed(format!("cannot create a spare's control: {e}")))?;
    let number = theirs.as_raw_fd();
    let mut args = vec![
        SPARE_ARG.to_owned(),
        number.to_string(),
        crate::types::SELF_START_PARENT_ARG.to_owned(),
        rustix::process::getpid().as_raw_nonzero().get().to_string(),
    ];
    args.extend(shape.iter().cloned());
    let child = spawn_pipe_lean(&ExecPlan {
        program,
        arg0,
        args: &args,
        cwd: Path::new("/"),
        env: &[],
        join: crate::cgroup::JoinFds::default(),
        inherit_fds: &[number],
    })?;
    drop(theirs);
    Ok(Spare {
        pid: child.pid,
        child: Some(child),
        control: mine,
    })
}

/// Kills a spare that will not be used and reaps it off the caller's thread.
fn reap(spare: Spare) {
    let pid = spare.pid;
    drop(spare);
    let wait = move || {
        if let Some(p) = i32::try_from(pid)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
        {
            let _ = rustix::process::waitpid(Some(p), rustix::process::WaitOptions::empty());
        }
    };
    if tokio::runtime::Handle::try_current().is_ok() {
        tokio::task::spawn_blocking(wait);
    } else {
        wait();
    }
}

/// What a spare is handed: the launcher's arguments, the environment, the working directory,
/// and the descriptors it keeps under their numbers.
pub(crate) struct HandOver<'a> {
    pub(crate) args: &'a [String],
    pub(crate) env: &'a [(String, String)],
    pub(crate) cwd: &'a Path,
    pub(crate) fds: &'a [RawFd],
}

impl Spare {
    /// Sends the command; on success the spare is the command's process (its pid and pipes).
    /// On failure the spare is killed and reaped, and the caller starts the command cold.
    pub(crate) fn hand_over(mut self, what: &HandOver<'_>) -> Result<PipeChild, SpawnError> {
        let sent = send(&self.control, what);
        match (sent, self.child.take()) {
            (Ok(()), Some(child)) => Ok(child),
            (sent, child) => {
                self.child = child;
                reap(self);
                Err(SpawnError::SpawnFailed(format!(
                    "the spare launcher did not take the command: {}",
                    sent.err()
                        .map_or_else(|| "it was used".to_owned(), |e| e.to_string())
                )))
            }
        }
    }
}

fn field(out: &mut Vec<u8>, bytes: &[u8]) -> Result<(), std::io::Error> {
    let len = u32::try_from(bytes.len())
        .map_err(|_| std::io::Error::other("a field is too long for a spare"))?;
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(bytes);
    Ok(())
}

/// The message (see the module's wire description).
fn encode(what: &HandOver<'_>) -> Result<Vec<u8>, std::io::Error> {
    let mut body = Vec::new();
    field(&mut body, what.cwd.as_os_str().as_bytes())?;
    field(&mut body, what.args.len().to_string().as_bytes())?;
    for a in what.args {
        field(&mut body, a.as_bytes())?;
    }
    field(&mut body, what.env.len().to_string().as_bytes())?;
    for (k, v) in what.env {
        field(&mut body, format!("{k}={v}").as_bytes())?;
    }
    field(&mut body, what.fds.len().to_string().as_bytes())?;
    for fd in what.fds {
        field(&mut body, fd.to_string().as_bytes())?;
    }
    let mut out = Vec::with_capacity(body.len().saturating_add(4));
    field(&mut out, &body)?;
    Ok(out)
}

/// Writes the whole message, the descriptors with its first bytes.
fn send(control: &OwnedFd, what: &HandOver<'_>) -> std::io::Result<()> {
    let bytes = encode(what)?;
    let fds: Vec<BorrowedFd<'_>> = what
        .fds
        .iter()
        // SAFETY: the descriptors are open for the call: the caller holds them (the spec's
        // launcher) until the spawn returns.
        .map(|fd| unsafe { BorrowedFd::borrow_raw(*fd) })
        .collect();
    let mut space =
        vec![std::mem::MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(fds.len()))];
    let mut ancillary = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !ancillary.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(std::io::Error::other("too many descriptors for a spare"));
    }
    let mut sent = loop {
        match sendmsg(
            control.as_fd(),
            &[std::io::IoSlice::new(&bytes)],
            &mut ancillary,
            SendFlags::NOSIGNAL,
        ) {
            Err(rustix::io::Errno::INTR) => continue,
            r => break r?,
        }
    };
    while let Some(rest) = bytes.get(sent..).filter(|r| !r.is_empty()) {
        match rustix::net::send(control.as_fd(), rest, SendFlags::NOSIGNAL) {
            Err(rustix::io::Errno::INTR) => continue,
            r => sent = sent.saturating_add(r?),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_is_length_prefixed_fields() {
        let msg = encode(&HandOver {
            args: &["a".to_owned(), "bc".to_owned()],
            env: &[("K".to_owned(), "v".to_owned())],
            cwd: Path::new("/w"),
            fds: &[7],
        })
        .unwrap();
        let body_len = u32::from_le_bytes(msg[..4].try_into().unwrap()) as usize;
        assert_eq!(body_len, msg.len() - 4);
        let body = &msg[4..];
        // cwd
        assert_eq!(&body[..4], &2u32.to_le_bytes());
        assert_eq!(&body[4..6], b"/w");
        // the argument count
        assert_eq!(&body[6..10], &1u32.to_le_bytes());
        assert_eq!(&body[10..11], b"2");
        assert!(body.ends_with(b"7"));
        let k = body.windows(3).position(|w| w == b"K=v");
        assert!(k.is_some());
    }
}
