//! `NetworkMode::Proxy` at the helper level: the relay on 127.0.0.1:3128 hands connections over
//! the control socket; nothing else is reachable; the command holds no descriptor of the relay's.
// Helper functions of this test crate are test code too (clippy.toml only covers #[test] fns).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::io::{IoSliceMut, Write};
use std::mem::MaybeUninit;
use std::net::TcpListener;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;

use codespace_runner_sandbox::{NetworkMode, PROXY_PORT, probe};
use common::{Fixture, python_or_skip, sandbox_or_skip, sandboxed, stderr, stdout};
use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SocketFlags, SocketType,
};

/// Receives one passed descriptor from the control socket (None on EOF).
fn receive(server: &OwnedFd) -> Option<OwnedFd> {
    let mut byte = [0u8; 1];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut anc = RecvAncillaryBuffer::new(&mut space);
    rustix::net::recvmsg(
        server,
        &mut [IoSliceMut::new(&mut byte)],
        &mut anc,
        RecvFlags::CMSG_CLOEXEC,
    )
    .ok()?;
    anc.drain().find_map(|m| match m {
        RecvAncillaryMessage::ScmRights(mut fds) => fds.next(),
        _ => None,
    })
}

const SCRIPT: &str = r#"
import os, socket, sys
s = socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=5)
data = b''
while True:
    chunk = s.recv(100)
    if not chunk:
        break
    data += chunk
print('relay:', data.decode())
for port in (int(sys.argv[2]), int(sys.argv[1]) + 1):
    try:
        socket.create_connection(('127.0.0.1', port), timeout=2).close()
        print('direct: ok')
    except OSError as e:
        print('direct: errno', e.errno)
fds = []
for f in sorted(os.listdir('/proc/self/fd'), key=int):
    try:
        fds.append(f + '=' + os.readlink('/proc/self/fd/' + f).split('[')[0])
    except OSError:
        pass
print('fds:', ' '.join(fds))
"#;

#[test]
fn the_relay_hands_connections_to_the_server_and_nothing_else_is_reachable() {
    let name = "the_relay_hands_connections_to_the_server_and_nothing_else_is_reachable";
    if !sandbox_or_skip(name) || !python_or_skip(name) {
        return;
    }
    if !probe().net_namespaces {
        println!("SKIP: {name}: network namespaces unavailable (proxy mode needs one)");
        return;
    }
    let host_listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let host_port = host_listener.local_addr().unwrap().port();
    let (relay_end, server_end) = rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )
    .unwrap();
    let fx = Fixture::new();
    let mut plan = fx.plan(false, NetworkMode::Proxy);
    plan.proxy_control_fd = Some(relay_end.as_raw_fd());
    let server = std::thread::spawn(move || {
        let conn = receive(&server_end).expect("the relay passed a connection");
        let mut stream = std::net::TcpStream::from(conn);
        stream.write_all(b"hello from the proxy").unwrap();
        drop(stream);
        // The server keeps its end open until the command is done, then closes it.
        server_end
    });
    let mut cmd = sandboxed(
        &plan,
        &[
            "python3",
            "-c",
            SCRIPT,
            &PROXY_PORT.to_string(),
            &host_port.to_string(),
        ],
    );
    let raw = relay_end.as_raw_fd();
    // SAFETY: fcntl(F_SETFD) is async-signal-safe; it only clears the flag in the child.
    unsafe {
        cmd.pre_exec(move || {
            if libc::fcntl(raw, libc::F_SETFD, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    drop(relay_end);
    let server_end = server.join().unwrap();
    drop(server_end);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}\n{}", stderr(&out));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "relay: hello from the proxy", "{text}");
    // The host's listener is in another namespace; another loopback port is refused by
    // Landlock (EACCES, ABI >= 4) or has no listener (ECONNREFUSED).
    assert!(lines[1].starts_with("direct: errno"), "{text}");
    assert!(
        lines[2] == "direct: errno 13" || lines[2] == "direct: errno 111",
        "{text}"
    );
    host_listener.set_nonblocking(true).unwrap();
    assert!(
        host_listener.accept().is_err(),
        "nothing may reach the host's loopback"
    );
    // The only socket the command holds is its own (the script's first connection): neither
    // the control socket nor the relay's listener reached it.
    assert_eq!(lines[3].matches("socket:").count(), 1, "{text}");
}

#[test]
fn proxy_mode_without_a_control_descriptor_is_refused() {
    let name = "proxy_mode_without_a_control_descriptor_is_refused";
    if !sandbox_or_skip(name) {
        return;
    }
    let fx = Fixture::new();
    let mut plan = fx.plan(false, NetworkMode::Proxy);
    // An open descriptor that is not a socket is refused by the helper (fail closed).
    let file = std::fs::File::open("/dev/null").unwrap();
    plan.proxy_control_fd = Some(file.as_raw_fd());
    let mut cmd = sandboxed(&plan, &["true"]);
    let raw = file.as_raw_fd();
    // SAFETY: as above.
    unsafe {
        cmd.pre_exec(move || {
            libc::fcntl(raw, libc::F_SETFD, 0);
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(126), "{}", stderr(&out));
    assert!(stderr(&out).contains("not a socket"), "{}", stderr(&out));
}
