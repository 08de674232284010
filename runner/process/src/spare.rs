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
//! A network namespace is used again, never shared: a spare that waits in a private one sends
//! it back on its control descriptor (the sandbox crate's `NETWORK_REPORT`). When its launcher
//! allows it ([`crate::Launcher::recycle_network`]: commands that may open nothing but `AF_UNIX`
//! sockets), the hand-over takes that namespace, and the command's supervisor gives it back
//! only once the command's cgroup was removed: the kernel removes a cgroup only when no process
//! is left in it, and every process of the command is in it and cannot leave it, so no process
//! of that command is left in the namespace. The next spare of the shape then enters it
//! (`--network-fd`) instead of making one: making and tearing down a namespace is about a tenth
//! of a command loop's CPU. At most [`MAX_NETWORKS_KEPT`] wait per shape; the rest are closed.
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
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};

use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, SocketFlags, SocketType, recvmsg, sendmsg, socketpair,
};

use crate::error::SpawnError;
use crate::pipe::{ExecPlan, PipeChild, spawn_pipe_lean};

/// The argument that starts a launcher as a spare (the sandbox crate's `SPARE_ARG`).
pub const SPARE_ARG: &str = "__sandbox-spare";

/// The argument that hands a spare a network namespace to enter (the sandbox crate's
/// `NETWORK_FD_ARG`), followed by its descriptor's number, before the shape's arguments.
pub const NETWORK_FD_ARG: &str = "--network-fd";

/// The byte a spare sends with its network namespace (the sandbox crate's `NETWORK_REPORT`).
const NETWORK_REPORT: u8 = b'N';

/// Most network namespaces kept per shape for later spares.
pub const MAX_NETWORKS_KEPT: usize = 2;

/// One waiting spare.
pub(crate) struct Spare {
    pid: u32,
    /// `None` once handed over (the command's process now).
    child: Option<PipeChild>,
    control: OwnedFd,
    /// Its table's spares and its shape, where its network namespace goes back.
    home: Option<(Weak<Spares>, Shape)>,
}

/// A network namespace taken at a hand-over, to be given back ([`Network::give_back`]) once
/// every process of its command is gone, and only then.
pub(crate) struct Network {
    home: (Weak<Spares>, Shape),
    fd: OwnedFd,
}

impl Network {
    /// Keeps the namespace for a later spare of its shape (see the module's description for
    /// when a caller may).
    pub(crate) fn give_back(self) {
        let (spares, shape) = self.home;
        if let Some(spares) = spares.upgrade() {
            let mut state = spares.state();
            if state.closed {
                return;
            }
            let kept = state.networks.entry(shape).or_default();
            if kept.len() < MAX_NETWORKS_KEPT {
                kept.push(self.fd);
            }
        }
    }
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
    /// Network namespaces given back, for the next spares of each shape.
    networks: HashMap<Shape, Vec<OwnedFd>>,
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
        let network = {
            let mut state = self.state();
            if state.closed || state.ready.contains_key(&shape) || state.starting.contains(&shape) {
                return;
            }
            state.starting.insert(shape.clone());
            state.networks.get_mut(&shape).and_then(Vec::pop)
        };
        let me = Arc::clone(self);
        let arg0 = arg0.to_os_string();
        tokio::spawn(async move {
            let started = start(&shape.0, &arg0, &shape.1, network);
            let mut state = me.state();
            state.starting.remove(&shape);
            match started {
                Ok(mut spare) if !state.closed => {
                    spare.home = Some((Arc::downgrade(&me), shape.clone()));
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
            state.networks.clear();
            state.ready.drain().map(|(_, s)| s).collect()
        };
        spares.into_iter().for_each(reap);
    }
}

/// Starts `program SPARE_ARG <control> --parent-pid <server> [--network-fd <n>] <shape…>` with
/// no environment; `network`, a namespace given back, is its descriptor `<n>`.
fn start(
    program: &Path,
    arg0: &OsStr,
    shape: &[String],
    network: Option<OwnedFd>,
) -> Result<Spare, SpawnError> {
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
    let mut inherit_fds = vec![number];
    if let Some(fd) = &network {
        args.push(NETWORK_FD_ARG.to_owned());
        args.push(fd.as_raw_fd().to_string());
        inherit_fds.push(fd.as_raw_fd());
    }
    args.extend(shape.iter().cloned());
    let child = spawn_pipe_lean(&ExecPlan {
        program,
        arg0,
        args: &args,
        cwd: Path::new("/"),
        env: &[],
        join: crate::cgroup::JoinFds::default(),
        inherit_fds: &inherit_fds,
    })?;
    drop(theirs);
    drop(network);
    Ok(Spare {
        pid: child.pid,
        child: Some(child),
        control: mine,
        home: None,
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
    /// Sends the command; on success the spare is the command's process (its pid and pipes),
    /// with its network namespace when `take_network` and it has reported one by now (see the
    /// module's description). On failure the spare is killed and reaped, and the caller starts
    /// the command cold.
    pub(crate) fn hand_over(
        mut self,
        what: &HandOver<'_>,
        take_network: bool,
    ) -> Result<(PipeChild, Option<Network>), SpawnError> {
        let network = match (&self.home, take_network) {
            (Some(home), true) => reported_network(&self.control).map(|fd| Network {
                home: home.clone(),
                fd,
            }),
            _ => None,
        };
        let sent = send(&self.control, what);
        match (sent, self.child.take()) {
            (Ok(()), Some(child)) => Ok((child, network)),
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

/// The network namespace the spare reported on `control`, if its report is there already (never
/// waits), it is a namespace, and it is not this server's own.
fn reported_network(control: &OwnedFd) -> Option<OwnedFd> {
    let mut byte = [0u8; 1];
    let mut space = [std::mem::MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut ancillary = RecvAncillaryBuffer::new(&mut space);
    let got = recvmsg(
        control,
        &mut [std::io::IoSliceMut::new(&mut byte)],
        &mut ancillary,
        RecvFlags::DONTWAIT | RecvFlags::CMSG_CLOEXEC,
    )
    .ok()?;
    let mut fds: Vec<OwnedFd> = Vec::new();
    for message in ancillary.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = message {
            fds.extend(rights);
        }
    }
    let truncated = got.flags.contains(rustix::net::ReturnFlags::CTRUNC);
    if got.bytes != 1 || byte[0] != NETWORK_REPORT || fds.len() != 1 || truncated {
        return None;
    }
    let fd = fds.pop()?;
    let theirs = rustix::fs::fstat(&fd).ok()?;
    let own = own_network()?;
    (theirs.st_dev == own.0 && theirs.st_ino != own.1).then_some(fd)
}

/// The (device, inode) of this server's own network namespace (read once): a namespace a spare
/// reports must be another one on the same namespace file system.
fn own_network() -> Option<(u64, u64)> {
    static OWN: OnceLock<Option<(u64, u64)>> = OnceLock::new();
    *OWN.get_or_init(|| {
        rustix::fs::stat("/proc/self/ns/net")
            .ok()
            .map(|st| (st.st_dev, st.st_ino))
    })
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

    /// `byte` with `fd` (when given) sent to the server's end of a fresh control pair.
    fn reported(byte: Option<u8>, fd: Option<BorrowedFd<'_>>) -> Option<OwnedFd> {
        let (mine, theirs) = socketpair(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        if let Some(byte) = byte {
            let fds: Vec<BorrowedFd<'_>> = fd.into_iter().collect();
            let mut space =
                [std::mem::MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
            let mut ancillary = SendAncillaryBuffer::new(&mut space);
            if !fds.is_empty() {
                assert!(ancillary.push(SendAncillaryMessage::ScmRights(&fds)));
            }
            sendmsg(
                &theirs,
                &[std::io::IoSlice::new(&[byte])],
                &mut ancillary,
                SendFlags::NOSIGNAL,
            )
            .unwrap();
        }
        reported_network(&mine)
    }

    #[test]
    fn only_a_reported_namespace_other_than_the_servers_own_is_taken() {
        let own = std::fs::File::open("/proc/self/ns/net").unwrap();
        let other = std::fs::File::open("/dev/null").unwrap();
        // Nothing reported yet: no wait, nothing taken.
        assert!(reported(None, None).is_none());
        // The server's own namespace, a descriptor that is no namespace, a wrong byte, no
        // descriptor: refused.
        assert!(reported(Some(NETWORK_REPORT), Some(own.as_fd())).is_none());
        assert!(reported(Some(NETWORK_REPORT), Some(other.as_fd())).is_none());
        assert!(reported(Some(b'X'), Some(own.as_fd())).is_none());
        assert!(reported(Some(NETWORK_REPORT), None).is_none());
        // Another namespace file of the same file system passes the check (the user
        // namespace's stands in: a new network namespace needs a privilege the test may lack;
        // the spare that enters a descriptor checks its type with `setns`).
        let user = std::fs::File::open("/proc/self/ns/user").unwrap();
        assert!(reported(Some(NETWORK_REPORT), Some(user.as_fd())).is_some());
    }

    #[test]
    fn a_given_back_namespace_waits_for_its_shape_within_the_bound_and_not_after_close() {
        let spares = Arc::new(Spares::default());
        let shape: Shape = (
            PathBuf::from("/helper"),
            vec!["--private-network".to_owned()],
        );
        let give = |n: usize| {
            for _ in 0..n {
                Network {
                    home: (Arc::downgrade(&spares), shape.clone()),
                    fd: std::fs::File::open("/dev/null").unwrap().into(),
                }
                .give_back();
            }
        };
        give(MAX_NETWORKS_KEPT + 3);
        assert_eq!(spares.state().networks[&shape].len(), MAX_NETWORKS_KEPT);
        assert!(
            !spares
                .state()
                .networks
                .contains_key(&(PathBuf::from("/other"), Vec::new()))
        );
        spares.close();
        give(1);
        assert!(spares.state().networks.is_empty());
    }

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
