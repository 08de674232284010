//! Connections handed over by the sandbox relay: each arrives as a TCP socket descriptor in an
//! `SCM_RIGHTS` message on the process's Unix control socket (`SOCK_SEQPACKET`).

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SocketType,
};

use crate::proxy::ProcessProxy;

/// A fresh control socket pair (`SOCK_SEQPACKET`, close-on-exec): `(relay end, server end)`.
/// The relay end goes to the sandbox helper (inherited by that one child); the server end to
/// [`ProcessProxy::serve_control`].
pub fn control_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )
    .map_err(io::Error::from)
}

/// What one `recvmsg` on the control socket brought.
enum Received {
    /// The relay closed its end (the process is gone).
    Eof,
    /// A message, with the descriptor it carried if any.
    Message(Option<OwnedFd>),
}

fn receive(control: BorrowedFd<'_>) -> io::Result<Received> {
    let mut byte = [0u8; 1];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut ancillary = RecvAncillaryBuffer::new(&mut space);
    let msg = rustix::net::recvmsg(
        control,
        &mut [io::IoSliceMut::new(&mut byte)],
        &mut ancillary,
        RecvFlags::CMSG_CLOEXEC | RecvFlags::DONTWAIT,
    )?;
    let mut fd = None;
    for message in ancillary.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = message {
            // Keep the first descriptor; any extra ones are closed as the iterator drops them.
            for received in fds {
                if fd.is_none() {
                    fd = Some(received);
                }
            }
        }
    }
    if msg.bytes == 0 && fd.is_none() {
        return Ok(Received::Eof);
    }
    Ok(Received::Message(fd))
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
    /// the returned future is dropped). Each connection runs in its own task.
    pub async fn serve_control(self: Arc<Self>, control: OwnedFd) {
        // A SOCK_SEQPACKET socket registered through tokio's Unix stream type: only its
        // readiness and `try_io` are used, never its stream reads.
        let std_socket = std::os::unix::net::UnixStream::from(control);
        if std_socket.set_nonblocking(true).is_err() {
            tracing::warn!("cannot make the proxy control socket non-blocking");
            return;
        }
        let Ok(control) = tokio::net::UnixStream::from_std(std_socket) else {
            tracing::warn!("cannot register the proxy control socket");
            return;
        };
        loop {
            if control.readable().await.is_err() {
                return;
            }
            let fd = control.as_fd();
            match control.try_io(tokio::io::Interest::READABLE, || receive(fd)) {
                Ok(Received::Eof) => return,
                Ok(Received::Message(Some(fd))) => match into_tcp(fd) {
                    Some(stream) => {
                        tokio::spawn(Arc::clone(&self).serve(stream));
                    }
                    None => tracing::debug!("the relay passed a descriptor that is not TCP"),
                },
                Ok(Received::Message(None)) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => return,
            }
        }
    }
}
