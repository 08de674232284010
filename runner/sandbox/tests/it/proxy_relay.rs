//! `NetworkMode::Proxy` at the helper level: the relay on 127.0.0.1:3128 hands connections over
//! the control socket; nothing else is reachable; the command holds no descriptor of the relay's.
// Helper functions of this test crate are test code too (clippy.toml only covers #[test] fns).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::common;

use std::io::{IoSliceMut, Write};
use std::mem::MaybeUninit;
use std::net::TcpListener;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;

use codespace_runner_sandbox::{NetworkMode, PROXY_PORT};
use common::{
    Fixture, control_pair, proxy_mode_or_skip, python_or_skip, sandbox_or_skip, sandboxed, stderr,
    stdout,
};
use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};

/// One message from the control socket: the descriptor it carried and its sender's pid (the
/// socket must have `SO_PASSCRED` for the pid). `None` on end of stream.
fn receive_message(server: &OwnedFd) -> Option<(Option<OwnedFd>, Option<i32>)> {
    let mut byte = [0u8; 1];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1), ScmCredentials(1))];
    let mut anc = RecvAncillaryBuffer::new(&mut space);
    let msg = rustix::net::recvmsg(
        server,
        &mut [IoSliceMut::new(&mut byte)],
        &mut anc,
        RecvFlags::CMSG_CLOEXEC,
    )
    .ok()?;
    let mut fd = None;
    let mut pid = None;
    for m in anc.drain() {
        match m {
            RecvAncillaryMessage::ScmRights(mut fds) => fd = fd.or(fds.next()),
            RecvAncillaryMessage::ScmCredentials(cred) => {
                pid = Some(cred.pid.as_raw_nonzero().get())
            }
            _ => {}
        }
    }
    (msg.bytes > 0 || fd.is_some()).then_some((fd, pid))
}

/// Receives one passed descriptor from the control socket, skipping the relay's introduction
/// (a message without one). None on EOF.
fn receive(server: &OwnedFd) -> Option<OwnedFd> {
    loop {
        if let (Some(fd), _) = receive_message(server)? {
            return Some(fd);
        }
    }
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
    if !proxy_mode_or_skip(name) || !python_or_skip(name) {
        return;
    }
    let host_listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let host_port = host_listener.local_addr().unwrap().port();
    let (relay_end, server_end) = control_pair();
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

/// The state and parent pid of `pid`, from `/proc/<pid>/stat`.
fn state_and_parent(pid: i32) -> (char, i32) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let mut fields = after.split(' ');
    let state = fields.next().unwrap().chars().next().unwrap();
    (state, fields.next().unwrap().parse().unwrap())
}

#[test]
fn the_relay_is_a_child_of_the_helpers_parent_which_reaps_it() {
    let name = "the_relay_is_a_child_of_the_helpers_parent_which_reaps_it";
    if !proxy_mode_or_skip(name) {
        return;
    }
    let (relay_end, server_end) = control_pair();
    rustix::net::sockopt::set_socket_passcred(&server_end, true).unwrap();
    // Bounds the wait for the introduction (a relay that never sends one fails the test
    // instead of hanging it).
    rustix::net::sockopt::set_socket_timeout(
        &server_end,
        rustix::net::sockopt::Timeout::Recv,
        Some(std::time::Duration::from_secs(60)),
    )
    .unwrap();
    let fx = Fixture::new();
    let mut plan = fx.plan(false, NetworkMode::Proxy);
    plan.proxy_control_fd = Some(relay_end.as_raw_fd());
    let mut cmd = sandboxed(&plan, &["true"]);
    let raw = relay_end.as_raw_fd();
    // SAFETY: as in the first test.
    unsafe {
        cmd.pre_exec(move || {
            if libc::fcntl(raw, libc::F_SETFD, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    // The command (the helper's pid) exits at once; the relay lives on until the control
    // socket closes.
    let out = cmd.output().unwrap();
    drop(relay_end);
    assert!(out.status.success(), "{}", stderr(&out));
    let (fd, pid) = receive_message(&server_end).expect("the relay introduced itself");
    assert!(fd.is_none(), "the introduction carries no descriptor");
    let relay = pid.expect("the introduction carries the relay's credentials");
    // Not the command's child, nor an orphan under PID 1: this process (the server's role)
    // is its parent.
    let (state, parent) = state_and_parent(relay);
    assert_eq!(parent, std::process::id() as i32, "state {state}");
    // Closing the control socket ends the relay, and its parent reaps it: waitpid blocks until
    // it exits and reports a clean exit.
    drop(server_end);
    let pid = rustix::process::Pid::from_raw(relay).unwrap();
    let (reaped, status) =
        rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty())
            .unwrap()
            .unwrap();
    assert_eq!(reaped, pid);
    assert_eq!(status.exit_status(), Some(0));
}
