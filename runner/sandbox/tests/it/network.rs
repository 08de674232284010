//! Network modes seen from a sandboxed command: inet sockets denied when Restricted, open when Enabled.
// Helper functions of this test crate are test code too (clippy.toml only covers #[test] fns).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::common;

use std::net::TcpListener;
use std::time::{Duration, Instant};

use codespace_runner_sandbox::{NetworkMode, probe};
use common::{Fixture, python_or_skip, run, sandbox_or_skip, stderr, stdout};

const PY_CONNECT: &str = "import socket, sys\ntry:\n    socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=5).close(); print('ok')\nexcept OSError as e:\n    print('errno', e.errno)";

fn connect_under(network: NetworkMode) -> (String, TcpListener) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let fx = Fixture::new();
    let out = run(
        &fx.plan(false, network),
        &["python3", "-c", PY_CONNECT, &port],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    (stdout(&out), listener)
}

/// Accepts the connection the sandboxed command made, if any (bounded polling, no sleep as sync).
fn accepted(listener: &TcpListener) -> bool {
    listener.set_nonblocking(true).unwrap();
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        if listener.accept().is_ok() {
            return true;
        }
        std::thread::yield_now();
    }
    false
}

#[test]
fn tcp_connect_is_denied_under_restricted() {
    let name = "tcp_connect_is_denied_under_restricted";
    if !sandbox_or_skip(name) || !python_or_skip(name) {
        return;
    }
    let (result, listener) = connect_under(NetworkMode::Restricted);
    assert_eq!(result, "errno 1"); // EPERM from the seccomp socket filter
    listener.set_nonblocking(true).unwrap();
    assert!(listener.accept().is_err(), "no connection may arrive");
}

#[test]
fn tcp_connect_succeeds_under_enabled() {
    let name = "tcp_connect_succeeds_under_enabled";
    if !sandbox_or_skip(name) || !python_or_skip(name) {
        return;
    }
    let (result, listener) = connect_under(NetworkMode::Enabled);
    assert_eq!(result, "ok");
    assert!(
        accepted(&listener),
        "the connection should reach the listener"
    );
}

#[test]
fn unix_sockets_still_work_under_restricted() {
    let name = "unix_sockets_still_work_under_restricted";
    if !sandbox_or_skip(name) || !python_or_skip(name) {
        return;
    }
    let fx = Fixture::new();
    let script = "import socket\n\
a, b = socket.socketpair()\n\
a.sendall(b'ping')\n\
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n\
s.close()\n\
try:\n    socket.socket(socket.AF_INET6, socket.SOCK_DGRAM); print('inet6 allowed')\n\
except OSError as e:\n    print(b.recv(4).decode(), e.errno)";
    let out = run(
        &fx.plan(false, NetworkMode::Restricted),
        &["python3", "-c", script],
    );
    assert_eq!(stdout(&out), "ping 1", "{}", stderr(&out));
}

#[test]
fn restricted_mode_gets_a_private_network_namespace() {
    let name = "restricted_mode_gets_a_private_network_namespace";
    if !sandbox_or_skip(name) {
        return;
    }
    if !probe().net_namespaces {
        codespace_test_skip::skip(
            name,
            "network namespaces unavailable (the layer is best-effort)",
        );
        return;
    }
    let own = std::fs::read_link("/proc/self/ns/net").unwrap();
    let own = own.to_string_lossy();
    let fx = Fixture::new();
    let restricted = run(
        &fx.plan(false, NetworkMode::Restricted),
        &["readlink", "/proc/self/ns/net"],
    );
    let enabled = run(
        &fx.plan(false, NetworkMode::Enabled),
        &["readlink", "/proc/self/ns/net"],
    );
    assert_ne!(stdout(&restricted), own, "{}", stderr(&restricted));
    assert_eq!(stdout(&enabled), own, "{}", stderr(&enabled));
}
