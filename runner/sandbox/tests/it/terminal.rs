//! Terminals seen from a sandboxed command: no controlling terminal in pipe mode (the helper
//! leaves the caller's session), `TIOCSTI`/`TIOCLINUX` refused by seccomp, no ioctls through
//! `/dev/tty`, and its own terminal (PTY mode) still usable. The terminal is made by an
//! unsandboxed Python harness (`pty.fork`), which then runs the helper on it.
// Helper functions of this test crate are test code too (clippy.toml only covers #[test] fns).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::common;

use std::process::Command;

use codespace_runner_sandbox::{NetworkMode, SandboxPlan, launcher_parts};
use common::{Fixture, SYSTEM_PATH, helper_exe, python_or_skip, sandbox_or_skip, stderr};

/// Outer harness: `python3 -c HARNESS leader|member argv…` runs argv on a fresh terminal, either
/// as the session leader (PTY mode) or as a second process of that session that is not its
/// leader (how a pipe-mode child used to inherit the server's terminal). Prints what argv wrote.
const HARNESS: &str = r#"import os, pty, sys
mode, argv = sys.argv[1], sys.argv[2:]
pid, fd = pty.fork()
if pid == 0:
    if mode == 'member':
        child = os.fork()
        if child:
            _, status = os.waitpid(child, 0)
            os._exit(os.waitstatus_to_exitcode(status) & 0xff)
    os.execvp(argv[0], argv)
out = b''
while True:
    try:
        data = os.read(fd, 4096)
    except OSError:
        break
    if not data:
        break
    out += data
os.waitpid(pid, 0)
sys.stdout.write(out.decode(errors='replace'))
"#;

/// Inner probe: one `result …` line with the outcome of each terminal operation.
const PROBE: &str = r#"import fcntl, os, termios
def attempt(f):
    try:
        f()
        return 'ok'
    except OSError as e:
        return 'errno%d' % e.errno
def via_alias():
    fd = os.open('/dev/tty', os.O_RDWR)
    try:
        fcntl.ioctl(fd, termios.TIOCGWINSZ, b'\0' * 8)
    finally:
        os.close(fd)
def reopen_own():
    os.close(os.open(os.ttyname(0), os.O_RDWR))
r = {
    'sti': attempt(lambda: fcntl.ioctl(0, termios.TIOCSTI, b'#')),
    'linux': attempt(lambda: fcntl.ioctl(0, termios.TIOCLINUX, b'\x0b')),
    'open_tty': attempt(lambda: os.close(os.open('/dev/tty', os.O_RDWR))),
    'alias_ioctl': attempt(via_alias),
    'own_ioctl': attempt(lambda: fcntl.ioctl(0, termios.TIOCGWINSZ, b'\0' * 8)),
    'reopen_own': attempt(reopen_own),
}
print('result', ' '.join('%s=%s' % kv for kv in sorted(r.items())))
"#;

/// Runs PROBE on a terminal (`mode` as in HARNESS), sandboxed with `plan` or not at all.
fn probe_on_terminal(mode: &str, plan: Option<&SandboxPlan>) -> String {
    let mut cmd = Command::new("python3");
    cmd.env("PATH", SYSTEM_PATH).args(["-c", HARNESS, mode]);
    if let Some(plan) = plan {
        let (program, args, env) = launcher_parts(plan, helper_exe()).unwrap();
        cmd.arg(program).args(args).arg("--").envs(env);
    }
    cmd.args(["python3", "-c", PROBE]);
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .map(|l| l.trim_matches(|c| c == '\r' || c == '\n' || c == '#'))
        .find_map(|l| l.find("result ").map(|i| l[i + 7..].to_owned()))
        .unwrap_or_else(|| panic!("no result line: {text:?} / {}", stderr(&out)))
}

fn field<'a>(result: &'a str, name: &str) -> &'a str {
    result
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("{name} missing in {result}"))
}

#[test]
fn a_pipe_mode_command_has_no_controlling_terminal() {
    let name = "a_pipe_mode_command_has_no_controlling_terminal";
    if !sandbox_or_skip(name) || !python_or_skip(name) {
        return;
    }
    // Control: a process of the terminal's session that is not its leader can open /dev/tty.
    let control = probe_on_terminal("member", None);
    assert_eq!(field(&control, "open_tty"), "ok", "{control}");
    let fx = Fixture::new();
    for mode in [NetworkMode::Restricted, NetworkMode::Enabled] {
        let sandboxed = probe_on_terminal("member", Some(&fx.plan(true, mode)));
        // ENXIO: the helper left the session, so there is no controlling terminal at all.
        assert_eq!(
            field(&sandboxed, "open_tty"),
            "errno6",
            "{mode:?}: {sandboxed}"
        );
        // The terminal fd it inherited is not its own: TIOCSTI is refused (seccomp, and the
        // kernel too without CAP_SYS_ADMIN), and its path is not granted by Landlock.
        assert_eq!(field(&sandboxed, "sti"), "errno1", "{mode:?}: {sandboxed}");
        assert_eq!(
            field(&sandboxed, "reopen_own"),
            "errno13",
            "{mode:?}: {sandboxed}"
        );
    }
}

#[test]
fn tiocsti_on_its_own_pty_is_refused_but_the_pty_stays_usable() {
    let name = "tiocsti_on_its_own_pty_is_refused_but_the_pty_stays_usable";
    if !sandbox_or_skip(name) || !python_or_skip(name) {
        return;
    }
    let control = probe_on_terminal("leader", None);
    let fx = Fixture::new();
    let sandboxed = probe_on_terminal("leader", Some(&fx.plan(true, NetworkMode::Restricted)));
    if field(&control, "sti") == "ok" {
        println!("control (unsandboxed) TIOCSTI on its own terminal: ok");
    } else {
        codespace_test_skip::skip(
            name,
            format!(
                "the kernel already refuses TIOCSTI here (dev.tty.legacy_tiocsti=0?): \
                 control {control}; the sandboxed refusal below is not discriminating"
            ),
        );
    }
    assert_eq!(field(&sandboxed, "sti"), "errno1", "{sandboxed}");
    assert_eq!(field(&sandboxed, "linux"), "errno1", "{sandboxed}");
    // Its own terminal: reachable through /dev/tty for read/write, but ioctls only on the real
    // device path (granted) and the inherited descriptors.
    assert_eq!(field(&sandboxed, "open_tty"), "ok", "{sandboxed}");
    assert_eq!(field(&sandboxed, "alias_ioctl"), "errno13", "{sandboxed}");
    assert_eq!(field(&sandboxed, "own_ioctl"), "ok", "{sandboxed}");
    assert_eq!(field(&sandboxed, "reopen_own"), "ok", "{sandboxed}");
}
