//! Connections handed over by the sandbox relay: each arrives as a TCP socket descriptor in an
//! `SCM_RIGHTS` message on the process's Unix control socket (`SOCK_SEQPACKET`).
//!
//! The relay is a child of this server (the sandbox helper creates it with `CLONE_PARENT`). Its
//! first message carries no descriptor; its credentials (`SO_PASSCRED`: the kernel's pid of the
//! sender, not a claim) tell the server which child to reap once the relay exits: when serving
//! ends on the relay's end of stream, or when the serving task is dropped (the process ended),
//! which closes the control socket and so makes the relay exit.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SocketType,
};
use rustix::process::{Pid, WaitOptions, waitpid};

use crate::proxy::ProcessProxy;

/// A fresh control socket pair (`SOCK_SEQPACKET`, close-on-exec): `(relay end, server end)`.
/// The relay end goes to the sandbox helper (inherited by that one child); the server end to
/// [`ProcessProxy::serve_control`]. The server end receives its senders' credentials.
pub fn control_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let (relay, server) = rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )?;
    rustix::net::sockopt::set_socket_passcred(&server, true)?;
    Ok((relay, server))
}

/// What one `recvmsg` on the control socket brought.
enum Received {
    /// The relay closed its end (the process is gone).
    Eof,
    /// A message, with the descriptor it carried if any and its sender's pid (when the socket
    /// receives credentials).
    Message(Option<OwnedFd>, Option<Pid>),
}

fn receive(control: BorrowedFd<'_>) -> io::Result<Received> {
    let mut byte = [0u8; 1];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1), ScmCredentials(1))];
    let mut ancillary = RecvAncillaryBuffer::new(&mut space);
    let msg = rustix::net::recvmsg(
        control,
        &mut [io::IoSliceMut::new(&mut byte)],
        &mut ancillary,
        RecvFlags::CMSG_CLOEXEC | RecvFlags::DONTWAIT,
    )?;
    let mut fd = None;
    let mut sender = None;
    for message in ancillary.drain() {
        match message {
            RecvAncillaryMessage::ScmRights(fds) => {
                // Keep the first descriptor; any extra ones are closed as the iterator drops
                // them.
                for received in fds {
                    if fd.is_none() {
                        fd = Some(received);
                    }
                }
            }
            RecvAncillaryMessage::ScmCredentials(cred) => sender = Some(cred.pid),
            _ => {}
        }
    }
    if msg.bytes == 0 && fd.is_none() {
        return Ok(Received::Eof);
    }
    Ok(Received::Message(fd, sender))
}

/// How many queued messages closing the control socket reads at most.
const MAX_DRAINED: usize = 1024;

/// The control socket being served, and the relay process its first message named.
struct Control {
    socket: Socket,
    relay: Option<Pid>,
}

/// The control socket, before and after it is registered with tokio.
enum Socket {
    /// As received: serving has not started (the task may be dropped before its first poll).
    Unregistered(OwnedFd),
    /// A `SOCK_SEQPACKET` socket registered through tokio's Unix stream type: only its
    /// readiness and `try_io` are used, never its stream reads.
    Registered(tokio::net::UnixStream),
    /// Closed.
    Closed,
}

impl Socket {
    fn fd(&self) -> Option<BorrowedFd<'_>> {
        match self {
            Socket::Unregistered(fd) => Some(fd.as_fd()),
            Socket::Registered(stream) => Some(stream.as_fd()),
            Socket::Closed => None,
        }
    }
}

impl Control {
    /// Records the sender of the first message (later senders are the same relay).
    fn introduced(&mut self, sender: Option<Pid>) {
        if self.relay.is_none() {
            self.relay = sender;
        }
    }

    /// Closes the socket (so the relay, if alive, leaves) and returns the relay's pid when it
    /// is this server's child still to reap. Messages still queued are read first for the
    /// relay's introduction (a relay that failed early sent only that) and their descriptors
    /// closed.
    fn close(&mut self) -> Option<Pid> {
        let socket = std::mem::replace(&mut self.socket, Socket::Closed);
        if let Some(fd) = socket.fd() {
            // Bounded: a live relay could keep queueing connections while this drains.
            for _ in 0..MAX_DRAINED {
                match receive(fd) {
                    Ok(Received::Message(_, sender)) => self.introduced(sender),
                    Ok(Received::Eof) | Err(_) => break,
                }
            }
        }
        drop(socket);
        let pid = self.relay.take()?;
        // Not this server's child (`ECHILD`: a relay started by something else, or a test's own
        // sender), or already reaped by this very call: nothing left to wait for.
        matches!(waitpid(Some(pid), WaitOptions::NOHANG), Ok(None)).then_some(pid)
    }
}

impl Drop for Control {
    /// The serving task was dropped (the process ended): reap the relay on the blocking pool.
    fn drop(&mut self) {
        let Some(pid) = self.close() else { return };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn_blocking(move || reap(pid));
            }
            Err(_) => {
                let _ = std::thread::Builder::new()
                    .name("relay-reap".to_owned())
                    .spawn(move || reap(pid));
            }
        }
    }
}

/// Waits for the relay child `pid` to exit and reaps it. The control socket is closed by now,
/// so the relay is on its way out (it exits on end of stream).
fn reap(pid: Pid) {
    while let Err(rustix::io::Errno::INTR) = waitpid(Some(pid), WaitOptions::empty()) {}
}

/// A descriptor is served only when it is a TCP stream socket.
fn into_tcp(fd: OwnedFd) -> Option<tokio::net::TcpStream> {
    let ty = rustix::net::sockopt::socket_type(&fd).ok()?;
    let domain = rustix::net::sockopt::socket_domain(&fd).ok()?;
    if ty != SocketType::STREAM
        || !(domain == AddressFamily::INET || domain == AddressFamily::INET6)
    {
        return None;
    }
    let stream = std::net::TcpStream::from(fd);
    stream.set_nonblocking(true).ok()?;
    tokio::net::TcpStream::from_std(stream).ok()
}

impl ProcessProxy {
    /// Serves every connection the relay hands over `control` until the relay closes it (or
    /// the returned future is dropped). Each connection runs in its own task. Either way the
    /// relay process is reaped once it exits (see the module documentation), even when the
    /// future is dropped before it ran.
    pub fn serve_control(
        self: Arc<Self>,
        control: OwnedFd,
    ) -> impl Future<Output = ()> + Send + 'static {
        let mut control = Control {
            socket: Socket::Unregistered(control),
            relay: None,
        };
        async move {
            if let Socket::Unregistered(fd) = std::mem::replace(&mut control.socket, Socket::Closed)
            {
                match register(fd) {
                    Ok(stream) => control.socket = Socket::Registered(stream),
                    Err(e) => {
                        tracing::warn!(%e, "cannot register the proxy control socket");
                        return;
                    }
                }
            }
            self.serve_registered(&mut control).await;
            // End of stream: the relay is gone or going; reap it before returning.
            if let Some(pid) = control.close() {
                let _ = tokio::task::spawn_blocking(move || reap(pid)).await;
            }
        }
    }

    async fn serve_registered(self: &Arc<Self>, control: &mut Control) {
        while let Socket::Registered(socket) = &control.socket {
            if socket.readable().await.is_err() {
                break;
            }
            let fd = socket.as_fd();
            match socket.try_io(tokio::io::Interest::READABLE, || receive(fd)) {
                Ok(Received::Eof) => break,
                Ok(Received::Message(Some(fd), sender)) => {
                    control.introduced(sender);
                    match into_tcp(fd) {
                        Some(stream) => {
                            tokio::spawn(Arc::clone(self).serve(stream));
                        }
                        None => tracing::debug!("the relay passed a descriptor that is not TCP"),
                    }
                }
                Ok(Received::Message(None, sender)) => control.introduced(sender),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => break,
            }
        }
    }
}

/// Registers the control socket with tokio's reactor (made non-blocking first). On failure the
/// socket is closed.
fn register(fd: OwnedFd) -> io::Result<tokio::net::UnixStream> {
    let std_socket = std::os::unix::net::UnixStream::from(fd);
    std_socket.set_nonblocking(true)?;
    tokio::net::UnixStream::from_std(std_socket)
}
