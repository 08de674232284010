//! The relay of a `network: proxy` command. Inside the command's private network namespace it
//! listens on `127.0.0.1:`[`PROXY_PORT`] and hands every accepted connection, as a descriptor
//! (`SCM_RIGHTS`), to the server's egress proxy over the control socket the server gave this
//! process. It copies no byte itself: the server reads and writes the passed socket directly.
//!
//! The helper starts it after entering the namespace and before masks, Landlock and seccomp.
//! The relay is the server's child, not the command's (`CLONE_PARENT`: the command never sees
//! it as a child to reap; the server reaps it, see [`start`]), keeps
//! the command's session, process group and cgroup (so terminate, timeout and the leader's exit
//! kill it), points its stdio at `/dev/null` (so it never holds the command's output open), is
//! not dumpable, drops every capability, restricts itself with a Landlock ruleset that grants
//! nothing (no file, no TCP bind or connect, scoped signals and abstract sockets) and installs
//! the command's own seccomp filter. It then only `accept`s and `sendmsg`s. It exits when the
//! server closes the control socket (the process ended) or the socket fails.

use std::io::{IoSlice, Read, Write};
use std::mem::MaybeUninit;
use std::net::TcpListener;
use std::os::fd::{AsFd, FromRawFd, OwnedFd};

use rustix::event::{PollFd, PollFlags};
use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};

use crate::caps;
use crate::error::SandboxError;
use crate::fs_rules;
use crate::plan::PROXY_PORT;
use crate::seccomp::Filters;

/// The relay's first message on the control socket (no descriptor): it carries the relay's
/// credentials to the server (`SO_PASSCRED`), so the server knows which child to reap.
const HELLO: &[u8] = b"p";

fn hardening(what: &str, e: impl std::fmt::Display) -> SandboxError {
    SandboxError::Hardening(format!("proxy relay: {what}: {e}"))
}

/// Takes ownership of the inherited control descriptor after checking it is an open socket.
fn control_socket(fd: i32) -> Result<OwnedFd, SandboxError> {
    // SAFETY: F_GETFD only reads the descriptor's flags; a closed number fails with EBADF.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
        return Err(hardening(
            "the control descriptor is not open",
            std::io::Error::last_os_error(),
        ));
    }
    // SAFETY: the descriptor is open (checked above) and nothing else in this process owns it:
    // the runner cleared its close-on-exec flag for this helper alone.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let stat = rustix::fs::fstat(&owned).map_err(|e| hardening("fstat", e))?;
    if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::Socket {
        return Err(hardening("the control descriptor", "is not a socket"));
    }
    rustix::io::fcntl_setfd(&owned, rustix::io::FdFlags::CLOEXEC)
        .map_err(|e| hardening("fcntl", e))?;
    Ok(owned)
}

/// Brings the namespace's loopback interface up (a fresh namespace has it down).
fn loopback_up() -> Result<(), SandboxError> {
    // SAFETY: plain socket(2); the result is checked.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(hardening("socket", std::io::Error::last_os_error()));
    }
    // SAFETY: `raw` is a fresh descriptor owned by nobody else.
    let sock = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: an all-zero ifreq is a valid value of this plain C struct.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (slot, byte) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *slot = libc::c_char::from_ne_bytes([*byte]);
    }
    let fd = std::os::fd::AsRawFd::as_raw_fd(&sock);
    // The request's type is the C library's (`unsigned long` in glibc, `int` in musl, which the
    // static helper links: scripts/build-static-helper.sh).
    #[allow(clippy::useless_conversion)]
    let request = |r: libc::c_ulong| {
        libc::Ioctl::try_from(r).map_err(|_| hardening("ioctl", "a request out of range"))
    };
    let (get, set) = (request(libc::SIOCGIFFLAGS)?, request(libc::SIOCSIFFLAGS)?);
    // SAFETY: SIOCGIFFLAGS/SIOCSIFFLAGS read and write the ifreq we own, nothing else.
    unsafe {
        if libc::ioctl(fd, get, &mut req) == -1 {
            return Err(hardening("SIOCGIFFLAGS", std::io::Error::last_os_error()));
        }
        let up = libc::c_short::try_from(libc::IFF_UP).unwrap_or(1);
        req.ifr_ifru.ifru_flags |= up;
        if libc::ioctl(fd, set, &req) == -1 {
            return Err(hardening("SIOCSIFFLAGS", std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

/// Starts the relay; returns once it runs sandboxed and listens (or fails closed). The
/// helper's copies of the listener and the control socket are closed before it returns, so the
/// command holds neither. `handshake_fd` (the helper's end of the exec handshake) is closed in
/// the relay at once: a relay holding it would keep the server from ever seeing its end of file.
///
/// The relay is created with `CLONE_PARENT`: its parent is the helper's parent (the server),
/// not the helper, so it is never the command's child, and the server, which learns its pid
/// from the first message on the control socket, reaps it when it exits. (A detached relay
/// would be reparented to PID 1, which does not reap in every container.)
pub(crate) fn start(
    control_fd: i32,
    kernel_abi: u32,
    filters: &Filters,
    handshake_fd: Option<i32>,
) -> Result<(), SandboxError> {
    let control = control_socket(control_fd)?;
    loopback_up()?;
    let listener = TcpListener::bind(("127.0.0.1", PROXY_PORT))
        .map_err(|e| hardening("cannot listen on the relay port", e))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| hardening("listener", e))?;
    let (mut ready_rx, ready_tx) = std::io::pipe().map_err(|e| hardening("pipe", e))?;
    let flags = libc::c_ulong::try_from(libc::CLONE_PARENT | libc::SIGCHLD).unwrap_or(0);
    // SAFETY: a fork-like clone (no new stack: the child runs on a copy of this one, like
    // fork(2)); the helper is single-threaded here, so the child may run arbitrary code. No
    // pointer argument is passed.
    let child = unsafe { libc::syscall(libc::SYS_clone, flags, 0usize, 0usize, 0usize, 0usize) };
    match child {
        -1 => return Err(hardening("clone", std::io::Error::last_os_error())),
        0 => {
            // The relay never keeps the handshake descriptor.
            if let Some(fd) = handshake_fd {
                // SAFETY: closes this child's copy of a descriptor the helper owns; the child
                // never touches it again (its `OwnedFd` lives in the parent's code path only,
                // and this child leaves through `_exit`).
                unsafe { libc::close(fd) };
            }
            drop(ready_rx);
            let code = match run(listener, control, ready_tx, kernel_abi, filters) {
                Ok(()) => 0,
                Err(_) => 126,
            };
            // SAFETY: _exit ends the relay without running the helper's exit path.
            unsafe { libc::_exit(code) };
        }
        _ => {}
    }
    drop(ready_tx);
    drop(listener);
    drop(control);
    let mut byte = [0u8; 1];
    match ready_rx.read(&mut byte) {
        Ok(1) => Ok(()),
        _ => Err(SandboxError::Hardening(
            "proxy relay: the relay could not be sandboxed".into(),
        )),
    }
}

/// The relay process: introduce itself to the server, sandbox itself, say ready, then hand
/// connections over until the server closes the control socket.
fn run(
    listener: TcpListener,
    control: OwnedFd,
    mut ready: std::io::PipeWriter,
    kernel_abi: u32,
    filters: &Filters,
) -> Result<(), SandboxError> {
    // First, before anything can fail: the server reads this relay's pid from the message's
    // credentials (the kernel's, not a claim) and reaps it once it exits.
    rustix::net::send(&control, HELLO, SendFlags::NOSIGNAL).map_err(|e| hardening("hello", e))?;
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .map_err(|e| hardening("/dev/null", e))?;
    for target in 0..3 {
        // SAFETY: dup2 onto the standard descriptors of this process only.
        if unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&null), target) } == -1 {
            return Err(hardening("dup2", std::io::Error::last_os_error()));
        }
    }
    drop(null);
    // SAFETY: prctl(PR_SET_DUMPABLE, 0) changes only this process's dumpable flag.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } == -1 {
        return Err(hardening(
            "PR_SET_DUMPABLE",
            std::io::Error::last_os_error(),
        ));
    }
    caps::drop_all_capabilities()?;
    fs_rules::restrict_relay(kernel_abi)?;
    filters.apply()?;
    ready.write_all(b"r").map_err(|e| hardening("ready", e))?;
    drop(ready);
    loop {
        let mut fds = [
            PollFd::new(&listener, PollFlags::IN),
            PollFd::new(&control, PollFlags::IN),
        ];
        match rustix::event::poll(&mut fds, None) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return Ok(()),
        }
        let [listen_ready, control_ready] = fds.map(|f| f.revents());
        // The server never writes: anything on the control socket means it closed or failed.
        if !control_ready.is_empty() {
            return Ok(());
        }
        if listen_ready.is_empty() {
            continue;
        }
        let Ok((conn, _)) = listener.accept() else {
            continue;
        };
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut ancillary = SendAncillaryBuffer::new(&mut space);
        let passed = [conn.as_fd()];
        if !ancillary.push(SendAncillaryMessage::ScmRights(&passed)) {
            return Ok(());
        }
        if rustix::net::sendmsg(
            &control,
            &[IoSlice::new(b"c")],
            &mut ancillary,
            SendFlags::NOSIGNAL,
        )
        .is_err()
        {
            return Ok(());
        }
    }
}
