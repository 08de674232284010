//! Process-level restrictions seen from a sandboxed command: ptrace, namespaces, signals, privileges.
// Helper functions of this test crate are test code too (clippy.toml only covers #[test] fns).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Stdio};

use codespace_runner_sandbox::{NetworkMode, probe};
use common::{Fixture, python_or_skip, run, sandbox_or_skip, stderr, stdout};

const PY_PTRACE: &str = "import ctypes, sys\n\
libc = ctypes.CDLL(None, use_errno=True)\n\
r = libc.ptrace(16, int(sys.argv[1]), None, None)\n\
print('ok' if r == 0 else 'errno %d' % ctypes.get_errno())";

/// A process outside the sandbox, killed on drop.
struct Victim(Child);

impl Victim {
    fn spawn() -> Self {
        Self(
            Command::new("sleep")
                .arg("60")
                .stdin(Stdio::null())
                .spawn()
                .unwrap(),
        )
    }

    fn pid(&self) -> String {
        self.0.id().to_string()
    }
}

impl Drop for Victim {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn ptrace_of_another_process_is_denied_in_both_modes() {
    let name = "ptrace_of_another_process_is_denied_in_both_modes";
    if !sandbox_or_skip(name) || !python_or_skip(name) {
        return;
    }
    let victim = Victim::spawn();
    let control = Command::new("python3")
        .args(["-c", PY_PTRACE, &victim.pid()])
        .output()
        .unwrap();
    println!("unsandboxed PTRACE_ATTACH: {}", stdout(&control));
    let fx = Fixture::new();
    for mode in [NetworkMode::Restricted, NetworkMode::Enabled] {
        let out = run(
            &fx.plan(true, mode),
            &["python3", "-c", PY_PTRACE, &victim.pid()],
        );
        assert_eq!(stdout(&out), "errno 1", "{mode:?}: {}", stderr(&out));
    }
}

#[test]
fn no_new_privs_is_set() {
    let name = "no_new_privs_is_set";
    if !sandbox_or_skip(name) {
        return;
    }
    let fx = Fixture::new();
    let out = run(
        &fx.plan(false, NetworkMode::Enabled),
        &["sh", "-c", "cat /proc/self/status | grep NoNewPrivs"],
    );
    assert_eq!(
        stdout(&out).split_whitespace().collect::<Vec<_>>(),
        vec!["NoNewPrivs:", "1"]
    );
}

#[test]
fn namespace_syscalls_are_denied_and_clone3_falls_back() {
    let name = "namespace_syscalls_are_denied_and_clone3_falls_back";
    if !sandbox_or_skip(name) || !python_or_skip(name) {
        return;
    }
    let clone_nr = if cfg!(target_arch = "aarch64") {
        220
    } else {
        56
    };
    let script = format!(
        "import ctypes, os, threading\n\
libc = ctypes.CDLL(None, use_errno=True)\n\
def err(r):\n    return 'ok' if r >= 0 else str(ctypes.get_errno())\n\
u = err(libc.unshare(0x40000000))\n\
r = libc.syscall({clone_nr}, 0x10000000 | 17, 0, 0, 0, 0)\n\
if r == 0:\n    os._exit(0)\n\
if r > 0:\n    os.waitpid(r, 0)\n\
c = err(r)\n\
c3 = err(libc.syscall(435, None, 0))\n\
io = err(libc.syscall(425, 1, None))\n\
out = []\n\
t = threading.Thread(target=out.append, args=('thread',)); t.start(); t.join()\n\
print(u, c, c3, io, out[0])"
    );
    let fx = Fixture::new();
    let out = run(
        &fx.plan(false, NetworkMode::Enabled),
        &["python3", "-c", &script],
    );
    // unshare → EPERM, clone(CLONE_NEWUSER) → EPERM, clone3 → ENOSYS, io_uring_setup → EPERM,
    // and threads still start (glibc falls back from clone3 to clone).
    assert_eq!(stdout(&out), "1 1 38 1 thread", "{}", stderr(&out));
}

#[test]
fn signals_to_processes_outside_the_sandbox_are_denied() {
    let name = "signals_to_processes_outside_the_sandbox_are_denied";
    if !sandbox_or_skip(name) {
        return;
    }
    if probe().landlock_abi.is_none_or(|abi| abi < 6) {
        codespace_test_skip::skip(name, "Landlock signal scoping needs ABI 6");
        return;
    }
    let victim = Victim::spawn();
    let fx = Fixture::new();
    let script = format!(
        "kill -0 {} && echo sent; sleep 0 & kill -0 $! && echo own",
        victim.pid()
    );
    let out = run(&fx.plan(true, NetworkMode::Enabled), &["sh", "-c", &script]);
    assert_eq!(stdout(&out), "own", "{}", stderr(&out));
    assert!(stderr(&out).contains("not permitted"), "{}", stderr(&out));
}

#[test]
fn helper_works_unprivileged_and_leaves_no_capabilities() {
    let name = "helper_works_unprivileged_and_leaves_no_capabilities";
    if !sandbox_or_skip(name) {
        return;
    }
    let has_setpriv = Command::new("setpriv")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !rustix::process::geteuid().is_root() || !has_setpriv {
        codespace_test_skip::skip(name, "needs root and setpriv to drop to uid 65534");
        return;
    }
    let fx = Fixture::new();
    for dir in [fx.base.path(), &fx.ws, &fx.tmp] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let inside = fx.ws.join("inside.txt");
    let outside = fx.outside("outside.txt");
    let script = format!(
        "id -u; echo x > '{}' && echo inside-ok; echo y > '{}' || echo outside-denied; grep CapEff /proc/self/status",
        inside.display(),
        outside.display()
    );
    let cmd = common::sandboxed(
        &fx.plan(true, NetworkMode::Restricted),
        &["sh", "-c", &script],
    );
    // Re-root the launch under setpriv: setpriv … <helper> __sandbox-exec -- sh -c …
    let helper = cmd.get_program().to_owned();
    let args: Vec<_> = cmd.get_args().map(|a| a.to_owned()).collect();
    let envs: Vec<_> = cmd
        .get_envs()
        .filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned())))
        .collect();
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(helper)
        .args(args)
        .envs(envs)
        .output()
        .unwrap();
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.first(), Some(&"65534"), "{text} / {}", stderr(&out));
    assert!(lines.contains(&"inside-ok"), "{text} / {}", stderr(&out));
    assert!(lines.contains(&"outside-denied"), "{text}");
    assert!(text.contains("CapEff:\t0000000000000000"), "{text}");
    assert!(inside.exists() && !outside.exists());
}

/// Only on x86_64: the x32 ABI exists nowhere else (not a skip: there is nothing to test).
#[cfg(target_arch = "x86_64")]
#[test]
fn x32_abi_syscalls_are_denied() {
    let name = "x32_abi_syscalls_are_denied";
    if !sandbox_or_skip(name) || !python_or_skip(name) {
        return;
    }
    // getpid through the x32 numbering (0x40000000 | 39): the kernel gives a pid or ENOSYS (38);
    // the sandbox's filter answers EPERM (1) before the kernel sees it.
    let script = "import ctypes\n\
libc = ctypes.CDLL(None, use_errno=True)\n\
r = libc.syscall(0x40000000 | 39)\n\
print('ok' if r >= 0 else 'errno %d' % ctypes.get_errno())";
    let control = Command::new("python3")
        .args(["-c", script])
        .output()
        .unwrap();
    assert_ne!(
        stdout(&control),
        "errno 1",
        "control must not already be EPERM"
    );
    let fx = Fixture::new();
    let out = run(
        &fx.plan(false, NetworkMode::Enabled),
        &["python3", "-c", script],
    );
    assert_eq!(stdout(&out), "errno 1", "{}", stderr(&out));
}

fn root_or_skip(test: &str) -> bool {
    let root = rustix::process::geteuid().is_root();
    if !root {
        codespace_test_skip::skip(
            test,
            "needs root (the capabilities to drop exist only there)",
        );
    }
    root
}

#[test]
fn a_root_helper_leaves_no_capability_in_any_set() {
    let name = "a_root_helper_leaves_no_capability_in_any_set";
    if !sandbox_or_skip(name) || !root_or_skip(name) {
        return;
    }
    // Control: unsandboxed, root holds capabilities.
    let control = std::fs::read_to_string("/proc/self/status").unwrap();
    assert!(
        control
            .lines()
            .any(|l| l.starts_with("CapEff:") && !l.ends_with("0000000000000000")),
        "{control}"
    );
    let fx = Fixture::new();
    for mode in [NetworkMode::Restricted, NetworkMode::Enabled] {
        let out = run(
            &fx.plan(true, mode),
            &[
                "sh",
                "-c",
                "grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb):' /proc/self/status",
            ],
        );
        let text = stdout(&out);
        let sets: Vec<(&str, &str)> = text
            .lines()
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k, v.trim()))
            .collect();
        assert_eq!(sets.len(), 5, "{mode:?}: {text} / {}", stderr(&out));
        for (set, value) in sets {
            assert_eq!(value, "0000000000000000", "{mode:?}: {set}");
        }
    }
}

#[test]
fn mknod_inside_a_writable_workspace_fails_as_root() {
    let name = "mknod_inside_a_writable_workspace_fails_as_root";
    if !sandbox_or_skip(name) || !root_or_skip(name) {
        return;
    }
    let fx = Fixture::new();
    // Control: outside the sandbox, root can create a block device node in the workspace.
    let control = fx.ws.join("control-blk");
    let made = Command::new("mknod")
        .arg(&control)
        .args(["b", "7", "200"])
        .status()
        .unwrap();
    assert!(made.success() && control.exists());
    std::fs::remove_file(&control).unwrap();
    let script = "mknod blk b 7 200 || echo block-denied; mknod chr c 1 3 || echo char-denied; \
                  mkfifo fifo && echo fifo-ok";
    let out = common::sandboxed(&fx.plan(true, NetworkMode::Enabled), &["sh", "-c", script])
        .current_dir(&fx.ws)
        .output()
        .unwrap();
    assert_eq!(
        stdout(&out).lines().collect::<Vec<_>>(),
        vec!["block-denied", "char-denied", "fifo-ok"],
        "{}",
        stderr(&out)
    );
    assert!(!fx.ws.join("blk").exists() && !fx.ws.join("chr").exists());
}

#[test]
fn writing_to_a_block_device_fails_as_root() {
    let name = "writing_to_a_block_device_fails_as_root";
    if !sandbox_or_skip(name) || !root_or_skip(name) || !python_or_skip(name) {
        return;
    }
    let fx = Fixture::new();
    // A block device node beside the workspace (loop minor 200: no such device is attached, so
    // even an unsandboxed write could not reach a disk), plus every real block device in /dev.
    let node = fx.outside("disk");
    let made = Command::new("mknod")
        .arg(&node)
        .args(["b", "7", "200"])
        .status()
        .unwrap();
    assert!(made.success());
    let mut targets = vec![node.display().to_string()];
    for entry in std::fs::read_dir("/dev").unwrap().flatten() {
        use std::os::unix::fs::FileTypeExt;
        if entry.file_type().is_ok_and(|t| t.is_block_device()) {
            targets.push(entry.path().display().to_string());
        }
    }
    // O_WRONLY without O_TRUNC/O_CREAT: the open alone is what must fail.
    let script = r#"import os, sys
for path in sys.argv[1:]:
    try:
        os.close(os.open(path, os.O_WRONLY))
        print(path, 'opened')
    except OSError as e:
        print(path, 'errno', e.errno)
"#;
    let mut argv = vec!["python3", "-c", script];
    argv.extend(targets.iter().map(String::as_str));
    let out = run(&fx.plan(true, NetworkMode::Enabled), &argv);
    let text = stdout(&out);
    assert_eq!(
        text.lines().count(),
        targets.len(),
        "{text} / {}",
        stderr(&out)
    );
    for line in text.lines() {
        assert!(line.ends_with("errno 13"), "{line}");
    }
}

/// CI ran the suite in a PID namespace whose session leader lives outside it: `getsid` reports 0
/// there, and the helper panicked on it. The helper must start a session of its own instead.
#[test]
fn helper_runs_when_its_session_leader_is_outside_its_pid_namespace() {
    let name = "helper_runs_when_its_session_leader_is_outside_its_pid_namespace";
    if !sandbox_or_skip(name) {
        return;
    }
    let unshare_works = Command::new("unshare")
        .args(["--pid", "--fork", "true"])
        .stdin(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !unshare_works {
        codespace_test_skip::skip(name, "`unshare --pid --fork` is not available here");
        return;
    }
    let fx = Fixture::new();
    let inner = common::sandboxed(
        &fx.plan(false, NetworkMode::Enabled),
        &["sh", "-c", "cut -d' ' -f6 /proc/self/stat; echo ran"],
    );
    // Re-issue the same helper command line under `unshare --pid --fork`: the helper becomes PID 1
    // of a new namespace while its session stays in ours.
    let mut cmd = Command::new("unshare");
    cmd.args(["--pid", "--fork", "--"])
        .arg(inner.get_program())
        .args(inner.get_args())
        .stdin(Stdio::null());
    for (k, v) in inner.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "helper failed: {}", stderr(&out));
    let text = stdout(&out);
    let mut lines = text.lines();
    let sid: i64 = lines.next().unwrap().parse().unwrap();
    assert!(
        sid > 0,
        "the command leads a session of its own (sid {sid})"
    );
    assert_eq!(lines.next(), Some("ran"));
}
