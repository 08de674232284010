//! Network modes seen from a sandboxed command: inet sockets denied when Restricted, open when
//! Enabled; Restricted commands in the server's shared namespace keep their abstract sockets apart.
// Helper functions of this test crate are test code too (clippy.toml only covers #[test] fns).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::common;

use std::net::TcpListener;
use std::process::Stdio;
use std::time::{Duration, Instant};

use codespace_runner_sandbox::{
    ARGV_SEPARATOR, NETNS_ARG, NetworkMode, SandboxCommand, SandboxPlan,
    prepare_shared_network_namespace, probe,
};
use common::{
    Fixture, SYSTEM_PATH, helper_exe, python_or_skip, run, sandbox_or_skip, stderr, stdout,
};

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

/// Starts `argv` through [`SandboxCommand::launch`] the way the process runner does (the
/// launch's descriptors kept across `exec` in the child only), piped stdio.
fn spawn_launched(plan: SandboxPlan, argv: &[&str]) -> std::process::Child {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let launch = SandboxCommand {
        helper: helper_exe().to_path_buf(),
        plan,
        proxy_control: None,
    }
    .launch()
    .unwrap();
    assert!(
        launch.args.iter().any(|a| a == NETNS_ARG),
        "the launch names the shared namespace: {:?}",
        launch.args
    );
    let keep: Vec<i32> = launch.inherit_fds.iter().map(|f| f.as_raw_fd()).collect();
    let mut cmd = std::process::Command::new(&launch.program);
    cmd.args(&launch.args)
        .arg(ARGV_SEPARATOR)
        .args(argv)
        .envs(launch.env.iter().cloned())
        .env("PATH", SYSTEM_PATH)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: fcntl(F_SETFD) is async-signal-safe; it only clears the flag in the child.
    unsafe {
        cmd.pre_exec(move || {
            for fd in &keep {
                if libc::fcntl(*fd, libc::F_SETFD, 0) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    cmd.spawn().unwrap()
}

const PY_ABSTRACT_LISTEN: &str = "import socket, sys\ns = socket.socket(socket.AF_UNIX)\ns.bind('\\0' + sys.argv[1])\ns.listen(1)\nprint('ready', flush=True)\nsys.stdin.read()";
const PY_ABSTRACT_CONNECT: &str = "import socket, sys\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect('\\0' + sys.argv[1]); print('ok')\nexcept OSError as e:\n    print('errno', e.errno)";

/// `Restricted` commands share the server's one empty network namespace (not the host's) where
/// Landlock scopes abstract sockets, and one command cannot reach another's abstract socket in
/// it; the target never holds the namespace's descriptor.
#[test]
fn restricted_commands_share_one_namespace_but_not_their_abstract_sockets() {
    let name = "restricted_commands_share_one_namespace_but_not_their_abstract_sockets";
    if !sandbox_or_skip(name) || !python_or_skip(name) {
        return;
    }
    if probe().landlock_abi.unwrap_or(0) < 6 || !prepare_shared_network_namespace() {
        codespace_test_skip::skip(
            name,
            "no shared network namespace here (Landlock ABI < 6 or no CAP_SYS_ADMIN)",
        );
        return;
    }
    let fx = Fixture::new();
    let plan = || fx.plan(false, NetworkMode::Restricted);
    let own = std::fs::read_link("/proc/self/ns/net").unwrap();
    let ns_of = |argv: &[&str]| {
        let out = spawn_launched(plan(), argv).wait_with_output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out)
    };
    let first = ns_of(&["readlink", "/proc/self/ns/net"]);
    let second = ns_of(&["readlink", "/proc/self/ns/net"]);
    assert_eq!(first, second, "both commands are in the shared namespace");
    assert_ne!(first, own.to_string_lossy(), "not the host's namespace");
    let fds = ns_of(&["ls", "-l", "/proc/self/fd/"]);
    assert!(
        !fds.contains("net:["),
        "the target holds no namespace: {fds}"
    );

    let socket = format!("codespace-shared-netns-{}", std::process::id());
    let mut listener = spawn_launched(plan(), &["python3", "-c", PY_ABSTRACT_LISTEN, &socket]);
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(listener.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "ready");
    let reached = ns_of(&["python3", "-c", PY_ABSTRACT_CONNECT, &socket]);
    drop(listener.stdin.take());
    let out = listener.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        reached, "errno 1",
        "another command's abstract socket is out of reach"
    );
}
