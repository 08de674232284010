//! Landlock filesystem rules seen from a sandboxed command: what it may read and write.
// Helper functions of this test crate are test code too (clippy.toml only covers #[test] fns).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use codespace_runner_sandbox::NetworkMode;
use common::{Fixture, PY_WRITE, python_or_skip, run, sandbox_or_skip, stderr, stdout};

#[test]
fn write_outside_workspace_fails_and_file_does_not_appear() {
    let name = "write_outside_workspace_fails_and_file_does_not_appear";
    if !sandbox_or_skip(name) || !python_or_skip(name) {
        return;
    }
    let fx = Fixture::new();
    let target = fx.outside("outside.txt");
    let out = run(
        &fx.plan(true, NetworkMode::Restricted),
        &["python3", "-c", PY_WRITE, target.to_str().unwrap()],
    );
    let text = stdout(&out);
    assert!(
        text == "errno 13" || text == "errno 30",
        "{text} / {}",
        stderr(&out)
    );
    assert!(!target.exists());
}

#[test]
fn write_inside_workspace_works_when_writable() {
    let name = "write_inside_workspace_works_when_writable";
    if !sandbox_or_skip(name) {
        return;
    }
    let fx = Fixture::new();
    let target = fx.ws.join("sub/inside.txt");
    let script = format!(
        "mkdir -p '{}' && echo hello > '{}'",
        fx.ws.join("sub").display(),
        target.display()
    );
    let out = run(
        &fx.plan(true, NetworkMode::Restricted),
        &["sh", "-c", &script],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "hello\n");
}

#[test]
fn write_inside_workspace_fails_when_read_only_but_reads_work() {
    let name = "write_inside_workspace_fails_when_read_only_but_reads_work";
    if !sandbox_or_skip(name) || !python_or_skip(name) {
        return;
    }
    let fx = Fixture::new();
    let existing = fx.ws.join("existing.txt");
    std::fs::write(&existing, "keep").unwrap();
    let plan = fx.plan(false, NetworkMode::Restricted);

    let new_file = fx.ws.join("new.txt");
    let out = run(
        &plan,
        &["python3", "-c", PY_WRITE, new_file.to_str().unwrap()],
    );
    assert_eq!(stdout(&out), "errno 13", "{}", stderr(&out));
    assert!(!new_file.exists());

    let out = run(
        &plan,
        &["python3", "-c", PY_WRITE, existing.to_str().unwrap()],
    );
    assert_eq!(stdout(&out), "errno 13");
    let out = run(&plan, &["rm", "-f", existing.to_str().unwrap()]);
    assert!(!out.status.success());
    assert_eq!(std::fs::read_to_string(&existing).unwrap(), "keep");

    let out = run(&plan, &["cat", existing.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "keep");
}

#[test]
fn tmp_dir_is_writable_even_with_read_only_workspace() {
    let name = "tmp_dir_is_writable_even_with_read_only_workspace";
    if !sandbox_or_skip(name) {
        return;
    }
    let fx = Fixture::new();
    let target = fx.tmp.join("scratch.txt");
    let script = format!(
        "echo scratch > '{}' && rm '{}' && echo again > '{}'",
        target.display(),
        target.display(),
        target.display()
    );
    let out = run(
        &fx.plan(false, NetworkMode::Restricted),
        &["sh", "-c", &script],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "again\n");
}

#[test]
fn sandbox_survives_exec_chains() {
    let name = "sandbox_survives_exec_chains";
    if !sandbox_or_skip(name) {
        return;
    }
    let fx = Fixture::new();
    let target = fx.outside("chained.txt");
    let inner = format!("bash -c 'echo x > {}'", target.display());
    let out = run(
        &fx.plan(true, NetworkMode::Enabled),
        &["bash", "-c", &inner],
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("Permission denied"),
        "{}",
        stderr(&out)
    );
    assert!(!target.exists());
}

#[test]
fn device_files_stay_usable() {
    let name = "device_files_stay_usable";
    if !sandbox_or_skip(name) {
        return;
    }
    let fx = Fixture::new();
    // `>` opens for writing (with O_TRUNC); reads of the random/zero devices keep working.
    let script =
        "echo x > /dev/null && head -c 4 /dev/zero | wc -c && head -c 4 /dev/urandom | wc -c";
    let out = run(
        &fx.plan(false, NetworkMode::Restricted),
        &["sh", "-c", script],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out).split_whitespace().collect::<Vec<_>>(),
        vec!["4", "4"]
    );
}

#[test]
fn pty_allocation_and_terminal_ioctls_work() {
    let name = "pty_allocation_and_terminal_ioctls_work";
    if !sandbox_or_skip(name) || !python_or_skip(name) {
        return;
    }
    let fx = Fixture::new();
    let script = "import os, pty, termios, struct, fcntl\n\
m, s = pty.openpty()\n\
termios.tcgetattr(s)\n\
fcntl.ioctl(s, termios.TIOCSWINSZ, struct.pack('HHHH', 30, 100, 0, 0))\n\
rows, cols, _, _ = struct.unpack('HHHH', fcntl.ioctl(s, termios.TIOCGWINSZ, b'\\0' * 8))\n\
os.write(s, b'hi\\n')\n\
print(rows, cols, os.read(m, 16).strip().decode())";
    let out = run(
        &fx.plan(false, NetworkMode::Restricted),
        &["python3", "-c", script],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "30 100 hi");
}
