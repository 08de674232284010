//! Shared fixtures for the sandbox integration tests: temp layout, plan builder, helper runner.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use codespace_runner_sandbox::{ARGV_SEPARATOR, NetworkMode, SandboxPlan, launcher_parts, probe};

/// The `PATH` of every sandboxed test command (as the engine gives its children): system
/// programs only, because reads are narrowed to the system trees (a toolchain elsewhere, e.g. a
/// pyenv Python in a home directory, would need to be declared as an extra read path).
pub const SYSTEM_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Path of the test-only helper binary.
pub fn helper_exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_sandbox-test-helper"))
}

/// A temp layout: `<base>/ws` (workspace), `<base>/tmp` (private temp), `<base>/home` (home),
/// `<base>` itself is outside.
pub struct Fixture {
    pub base: tempfile::TempDir,
    pub ws: PathBuf,
    pub tmp: PathBuf,
    pub home: PathBuf,
}

impl Fixture {
    pub fn new() -> Self {
        let base = tempfile::tempdir().unwrap();
        let ws = base.path().join("ws");
        let tmp = base.path().join("tmp");
        let home = base.path().join("home");
        std::fs::create_dir(&ws).unwrap();
        std::fs::create_dir(&tmp).unwrap();
        std::fs::create_dir(&home).unwrap();
        Self {
            base,
            ws,
            tmp,
            home,
        }
    }

    /// A path outside both the workspace and the temp dir.
    pub fn outside(&self, name: &str) -> PathBuf {
        self.base.path().join(name)
    }

    pub fn plan(&self, write_workspace: bool, network: NetworkMode) -> SandboxPlan {
        SandboxPlan {
            workspace_root: self.ws.clone(),
            write_workspace,
            network,
            tmp_dir: Some(self.tmp.clone()),
            extra_read: Vec::new(),
            home_dir: Some(self.home.clone()),
            force_landlock_unavailable: false,
            masks: Vec::new(),
            mask_non_utf8_top_level: false,
            proxy_control_fd: None,
            mount_ns_fd: None,
            stage_dir: None,
            write_paths: Vec::new(),
            read_only: Vec::new(),
        }
    }
}

/// The command that runs `argv` under the sandbox helper with `plan`, as the process runner would.
pub fn sandboxed(plan: &SandboxPlan, argv: &[&str]) -> Command {
    let (program, args, env) = launcher_parts(plan, helper_exe()).unwrap();
    let mut cmd = Command::new(program);
    cmd.args(args)
        .arg(ARGV_SEPARATOR)
        .args(argv)
        .envs(env)
        .env("PATH", SYSTEM_PATH);
    cmd
}

/// Runs `argv` under the sandbox and returns its output.
pub fn run(plan: &SandboxPlan, argv: &[&str]) -> Output {
    sandboxed(plan, argv).output().unwrap()
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).trim().to_owned()
}

/// True when the sandbox can run here; otherwise skips (`codespace_test_skip`).
pub fn sandbox_or_skip(test: &str) -> bool {
    let p = probe();
    if p.sandbox_available() {
        true
    } else {
        codespace_test_skip::skip(test, format!("kernel lacks Landlock or seccomp ({p:?})"));
        false
    }
}

/// True when the sandbox can run in proxy mode here (it needs a network namespace); otherwise
/// skips (`codespace_test_skip`).
#[allow(dead_code)] // not every test binary runs the proxy relay
pub fn proxy_mode_or_skip(test: &str) -> bool {
    if !sandbox_or_skip(test) {
        return false;
    }
    if !probe().net_namespaces {
        codespace_test_skip::skip(
            test,
            "network namespaces unavailable (proxy mode needs one)",
        );
        return false;
    }
    true
}

/// A control socket pair like the server's (SEQPACKET, close-on-exec): the relay's end, the
/// server's end.
#[allow(dead_code)] // not every test binary runs the proxy relay
pub fn control_pair() -> (std::os::fd::OwnedFd, std::os::fd::OwnedFd) {
    use rustix::net::{AddressFamily, SocketFlags, SocketType};
    rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )
    .unwrap()
}

/// True when python3 is on PATH; otherwise skips (`codespace_test_skip`).
pub fn python_or_skip(test: &str) -> bool {
    let ok = Command::new("python3")
        .arg("-c")
        .arg("pass")
        .env("PATH", SYSTEM_PATH)
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        codespace_test_skip::skip(test, "python3 not found");
    }
    ok
}

/// Python snippet: open argv[1] for writing; prints `ok` or `errno N`.
pub const PY_WRITE: &str = "import sys\ntry:\n    open(sys.argv[1], 'w').write('x'); print('ok')\nexcept OSError as e:\n    print('errno', e.errno)";
