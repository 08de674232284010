//! Shared setup for the environment e2e tests: one workspace `w` in an environment `e` reached
//! through each worker transport — `command` (`codespace worker --stdio`), `worker` (a unix
//! socket worker the test starts, or `worker {user}`, one the server starts and restarts),
//! `ssh` (the loopback sshd fixture) and `container` (podman
//! on a rootfs of host files, through this host's podman wrapper). Every transport sees the
//! workspace root at the same path as the test, so a test can edit "inside the environment"
//! by writing the file. A transport this host cannot run prints `skip:` (and fails under
//! `CI=true`) through `codespace_test_skip`. Also the tree, journal and process-output helpers
//! the env_* tests share, `codespace approvals grant|deny` through the CLI, and `kill -9` of
//! each transport's far end (the worker, the ssh worker, the whole podman container). A
//! container a test's server started is removed when the test's `EnvSetup` drops, also after
//! a panic.

use crate::stdio_common::{BIN, StdioServer};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Three files a patch touches, a `.gitignore`, an ignored file and an empty `sub/`; returns
/// the canonical root `dir/ws`.
pub fn tree(dir: &Path) -> PathBuf {
    let root = dir.join("ws");
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::create_dir_all(root.join("sub")).unwrap();
    std::fs::create_dir_all(root.join("target")).unwrap();
    std::fs::write(root.join(".gitignore"), "target/\n").unwrap();
    std::fs::write(root.join("src/main.rs"), "fn main() {\n    hello();\n}\n").unwrap();
    std::fs::write(root.join("src/lib.rs"), "pub fn hello() {}\n").unwrap();
    std::fs::write(root.join("README.md"), "hello readme\n").unwrap();
    std::fs::write(root.join("target/gen.rs"), "hello generated\n").unwrap();
    std::fs::canonicalize(&root).unwrap()
}

/// The patch journals the store at `store` still holds open.
pub fn open_journals(store: &Path) -> usize {
    codespace_store::Store::open(store)
        .unwrap()
        .open_journals()
        .unwrap()
        .len()
}

/// Waits until the gateway wrote the patch's journal (the apply is then held before its
/// `apply` call by the gate hook).
pub fn wait_journal(store: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while open_journals(store) == 0 {
        assert!(Instant::now() < deadline, "no journal was written");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Reads from `cursor` until `want` shows up or the output ends.
pub fn read_until(s: &mut StdioServer, id: &str, cursor: u64, want: &str) -> (String, u64) {
    let mut text = String::new();
    let mut cursor = cursor;
    loop {
        let r = s.tool_ok(
            "read_process",
            json!({"process_id": id, "cursor": cursor, "wait_ms": 10000}),
        );
        text.push_str(r["chunk"].as_str().unwrap());
        cursor = r["cursor"].as_u64().unwrap();
        if text.contains(want) || r["eof"] == json!(true) {
            return (text, cursor);
        }
    }
}

/// What a failed assertion on process `id` shows: its `process_status` and the last lines of
/// the log of the server [`EnvSetup::serve`] started in `dir` (a lost worker says so there).
pub fn process_diag(s: &mut StdioServer, id: &str, dir: &Path) -> String {
    let status = s.tool_ok("process_status", json!({"process_id": id}));
    let log = std::fs::read_to_string(dir.join("stderr.log")).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    let tail = lines[lines.len().saturating_sub(40)..].join("\n");
    format!("status: {status}\nserver log (tail):\n{tail}")
}

/// `codespace approvals VERB ID` (grant or deny, channel `cli`) against the server whose
/// config is `dir/config.json`.
pub fn approvals_cli(dir: &Path, verb: &str, id: &str) {
    let o = Command::new(BIN)
        .args(["approvals", verb, id, "--config"])
        .arg(dir.join("config.json"))
        .env("USER", "alice")
        .env("CODESPACE_LOG", "warn")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// True (after a `skip:`, which fails under `CI=true`) when this host's kernel cannot sandbox
/// a command with masks (the `command`, `worker` and `ssh` workers run on it; a container's
/// worker too, where its runtime lets it).
pub fn skip_without_masks(test: &str) -> bool {
    if crate::process_common::skip_without_sandbox(test) {
        return true;
    }
    let probe = codespace_runner_sandbox::probe();
    !codespace_test_skip::require(
        probe.masking_available(),
        test,
        format!("no mount namespaces for secret masks ({probe:?})"),
    )
}

/// How the gateway reaches the environment's worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Command,
    Worker,
    /// `worker {user}`: the server starts `codespace worker --socket` itself (as this test's
    /// own user, so the worker may write the test's files) and starts it again after a death.
    WorkerUser,
    Ssh,
    Container,
}

/// A secret line in a file only its owner may read (a socket worker's shared secret).
pub fn secret_file(dir: &Path) -> (PathBuf, String) {
    let secret = "0123456789abcdef0123456789abcdef".to_string();
    let path = dir.join("worker.secret");
    std::fs::write(&path, format!("{secret}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    (path, secret)
}

/// `codespace worker --socket SOCK` started by the test (the secret written to its stdin),
/// ready once it printed `listening`; killed on drop.
pub struct SocketWorker {
    child: Child,
}

impl SocketWorker {
    /// Starts `prefix... BIN worker --socket sock` (`prefix` may wrap it, e.g. in `unshare`).
    pub fn start_with(prefix: &[&str], sock: &Path, secret: &str) -> SocketWorker {
        let mut cmd = match prefix.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(BIN);
                c
            }
            None => Command::new(BIN),
        };
        cmd.args(["worker", "--socket"])
            .arg(sock)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd.spawn().unwrap();
        writeln!(child.stdin.take().unwrap(), "{secret}").unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "listening");
        SocketWorker { child }
    }

    /// The worker's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for SocketWorker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The podman rootfs for a container worker: the worker binary's shared libraries (the binary
/// itself is mounted) and `extra` host programs with theirs.
pub fn podman_rootfs(extra: &[&str]) -> Result<codespace_test_fixtures::PodmanRootfs, String> {
    let ldd = Command::new("ldd")
        .arg(BIN)
        .output()
        .map_err(|e| e.to_string())?;
    let libs: Vec<String> = String::from_utf8_lossy(&ldd.stdout)
        .split_whitespace()
        .filter(|w| w.starts_with('/'))
        .map(str::to_string)
        .collect();
    let programs: Vec<&str> = libs
        .iter()
        .map(String::as_str)
        .chain(extra.iter().copied())
        .collect();
    codespace_test_fixtures::PodmanRootfs::build(&programs)
}

/// A `PATH` whose `podman` is this host's wrapper around the real one (docs/environments.md,
/// "Testing here"), the wrapper written under `dir/bin`.
pub fn podman_path(dir: &Path) -> String {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let real = String::from_utf8(
        Command::new("sh")
            .args(["-c", "command -v podman"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
    .trim()
    .to_string();
    let wrapper = bin.join("podman");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nexec unshare -m --propagation private sh -c 'mount -t cgroup2 none /sys/fs/cgroup && exec \"$@\"' sh {real} \"$@\"\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// What keeps a transport's far end up for the test's length.
#[allow(dead_code)]
enum Guard {
    None,
    Socket(SocketWorker),
    Sshd(codespace_test_fixtures::Sshd),
    Rootfs(codespace_test_fixtures::PodmanRootfs),
}

/// One environment `e` of a transport, ready to be named by a config.
pub struct EnvSetup {
    pub transport: Transport,
    /// The `environments.e` config value.
    pub env: Value,
    /// Variables the server needs (the podman wrapper's PATH, CONTAINERS_CONF).
    pub server_env: Vec<(String, String)>,
    /// Where the test learns the worker's pids (None: the far end is not a process the test
    /// can see, as through ssh or in a container).
    pids: Option<WorkerPids>,
    /// The test's directory (every workspace root of the test lies beneath it).
    dir: PathBuf,
    _guard: Guard,
}

impl Drop for EnvSetup {
    /// A container the server started for this test's workspaces is removed, even when the
    /// test panicked before its server stopped (the server removes its own on a clean stop).
    fn drop(&mut self) {
        let Guard::Rootfs(fs) = &self._guard else {
            return;
        };
        let ps: Vec<String> = [
            "podman",
            "ps",
            "-a",
            "--no-trunc",
            "--format",
            "{{.ID}} {{.Mounts}}",
        ]
        .iter()
        .map(|a| (*a).to_string())
        .collect();
        let Ok(out) = fs.run(&ps) else { return };
        let dir = self.dir.display().to_string();
        for line in out.lines() {
            let ours = line
                .split([' ', '[', ']'])
                .any(|w| Path::new(w).starts_with(&dir));
            if let (true, Some(id)) = (ours, line.split_whitespace().next()) {
                let rm = ["podman", "rm", "-f", "-t", "0", id].map(str::to_string);
                let _ = fs.run(&rm);
            }
        }
    }
}

/// How a test learns the pids of the environment's workers.
enum WorkerPids {
    /// A `command` worker appends its pid to this file each time it is started.
    File(PathBuf),
    /// The one socket worker the test started.
    Fixed(u32),
    /// The socket workers the server (its pid set by [`EnvSetup::serve`]) started.
    ServerChildren(std::cell::Cell<u32>),
}

/// This process's user name (`getent passwd EUID`), when it has one.
fn my_user_name() -> Option<String> {
    let uid = rustix::process::geteuid().as_raw().to_string();
    let out = Command::new("getent")
        .args(["passwd", &uid])
        .output()
        .ok()?;
    let line = String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()?
        .to_string();
    let name = line.split(':').next()?.to_string();
    (out.status.success() && !name.is_empty()).then_some(name)
}

/// The live `BIN worker --socket ...` children of `server` (a zombie has no command line).
fn socket_worker_children(server: u32) -> Vec<u32> {
    let want = format!("{BIN}\0worker\0--socket\0");
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // The fields after the command name (which may hold spaces) start after ") ".
        let ppid: u32 = stat
            .rsplit_once(") ")
            .and_then(|(_, r)| r.split(' ').nth(1))
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if ppid == server && cmd.starts_with(want.as_bytes()) {
            out.push(pid);
        }
    }
    out
}

impl EnvSetup {
    /// The environment of `transport` for a test under `dir`; None (after `skip:`, failing
    /// under CI=true) when this host cannot run it. `programs` are host programs the test's
    /// commands need inside a container.
    pub fn new(transport: Transport, test: &str, dir: &Path, programs: &[&str]) -> Option<Self> {
        let mut pids = None;
        let (env, server_env, guard) = match transport {
            Transport::Command => {
                // `codespace worker --stdio`, its pid written to a file first.
                let file = dir.join("pids");
                let script = format!(
                    "echo $$ >> '{}'; exec \"$0\" worker --stdio",
                    file.display()
                );
                pids = Some(WorkerPids::File(file));
                (
                    json!({"kind": "command", "command": {"argv": ["sh", "-c", script, BIN]}}),
                    Vec::new(),
                    Guard::None,
                )
            }
            Transport::Worker => {
                let sock = dir.join("wdir").join("w.sock");
                let (secret_path, secret) = secret_file(dir);
                let worker = SocketWorker::start_with(&[], &sock, &secret);
                pids = Some(WorkerPids::Fixed(worker.pid()));
                (
                    json!({"kind": "worker", "worker": {"socket": sock, "secret_file": secret_path}}),
                    Vec::new(),
                    Guard::Socket(worker),
                )
            }
            Transport::WorkerUser => {
                // `setpriv --clear-groups` needs CAP_SETGID: root.
                let setpriv = Command::new("setpriv")
                    .arg("--version")
                    .output()
                    .is_ok_and(|o| o.status.success());
                let user = my_user_name();
                let Some(user) = user.filter(|_| setpriv && rustix::process::geteuid().is_root())
                else {
                    codespace_test_skip::require(
                        false,
                        test,
                        "a `worker {user}` is started through setpriv (util-linux), which needs root",
                    );
                    return None;
                };
                pids = Some(WorkerPids::ServerChildren(std::cell::Cell::new(0)));
                (
                    json!({"kind": "worker", "worker": {"user": user}}),
                    Vec::new(),
                    Guard::None,
                )
            }
            Transport::Ssh => {
                let sshd = match codespace_test_fixtures::Sshd::start() {
                    Ok(d) => d,
                    Err(why) => {
                        codespace_test_skip::require(false, test, why);
                        return None;
                    }
                };
                (
                    json!({"kind": "ssh", "ssh": {"host": "127.0.0.1", "port": sshd.port,
                           "user": sshd.user, "identity_file": sshd.identity_file,
                           "known_hosts": sshd.known_hosts, "worker_path": BIN}}),
                    Vec::new(),
                    Guard::Sshd(sshd),
                )
            }
            Transport::Container => {
                let fs = match podman_rootfs(programs) {
                    Ok(f) => f,
                    Err(why) => {
                        codespace_test_skip::require(false, test, why);
                        return None;
                    }
                };
                (
                    json!({"kind": "container", "container": {"rootfs": fs.rootfs}}),
                    vec![
                        ("PATH".to_string(), podman_path(dir)),
                        ("CONTAINERS_CONF".to_string(), fs.conf.display().to_string()),
                    ],
                    Guard::Rootfs(fs),
                )
            }
        };
        Some(EnvSetup {
            transport,
            env,
            server_env,
            pids,
            dir: dir.to_path_buf(),
            _guard: guard,
        })
    }

    /// Runs a podman `argv` the way this host needs (container transport only): its stdout.
    pub fn podman(&self, argv: &[&str]) -> Result<String, String> {
        let Guard::Rootfs(fs) = &self._guard else {
            return Err(format!("{:?} has no podman", self.transport));
        };
        let argv: Vec<String> = std::iter::once("podman")
            .chain(argv.iter().copied())
            .map(str::to_string)
            .collect();
        fs.run(&argv)
    }

    /// The id of the running container the server started for the workspace at `root` (the
    /// one that mounts it), if any.
    pub fn container_id(&self, root: &Path) -> Option<String> {
        let out = self
            .podman(&["ps", "--no-trunc", "--format", "{{.ID}} {{.Mounts}}"])
            .unwrap();
        let root = root.display().to_string();
        out.lines()
            .find(|l| l.split([' ', '[', ']']).any(|w| w == root))
            .and_then(|l| l.split_whitespace().next())
            .map(str::to_string)
    }

    /// The pids of the `BIN worker --stdio` processes the loopback sshd of this environment
    /// started (ssh transport only; found by their `SSH_CONNECTION`'s server port).
    pub fn ssh_worker_pids(&self) -> Vec<u32> {
        let Guard::Sshd(sshd) = &self._guard else {
            return Vec::new();
        };
        let port = format!(" {}", sshd.port);
        let want = format!("{BIN}\0worker\0--stdio\0");
        let mut pids = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            if cmdline != want.as_bytes() {
                continue;
            }
            let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
            let ours = environ
                .split(|b| *b == 0)
                .filter_map(|v| std::str::from_utf8(v).ok())
                .any(|v| v.starts_with("SSH_CONNECTION=") && v.ends_with(&port));
            if ours {
                pids.push(pid);
            }
        }
        pids
    }

    /// `kill -9` of the environment's far end while it serves: the worker process (`command`,
    /// `worker`, the one sshd started for `ssh`), or the whole container (`podman kill -s
    /// KILL`) the server started for the workspace at `root`.
    pub fn kill_nine(&self, root: &Path) {
        let pids = match self.transport {
            Transport::Container => {
                let id = self.container_id(root).expect("the container runs");
                self.podman(&["kill", "-s", "KILL", &id]).unwrap();
                return;
            }
            Transport::Ssh => self.ssh_worker_pids(),
            Transport::Command | Transport::Worker | Transport::WorkerUser => {
                self.worker_pids().unwrap()
            }
        };
        assert_eq!(pids.len(), 1, "one live worker: {pids:?}");
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(i32::try_from(pids[0]).unwrap()).unwrap(),
            rustix::process::Signal::KILL,
        )
        .unwrap();
    }

    /// The pids of the workers started so far (`command`), or live (`worker`: the test's;
    /// `worker {user}`: the server's children), when the test can see them.
    pub fn worker_pids(&self) -> Option<Vec<u32>> {
        match self.pids.as_ref()? {
            WorkerPids::File(file) => Some(
                std::fs::read_to_string(file)
                    .unwrap_or_default()
                    .lines()
                    .filter_map(|l| l.trim().parse().ok())
                    .collect(),
            ),
            WorkerPids::Fixed(pid) => Some(vec![*pid]),
            WorkerPids::ServerChildren(server) => Some(socket_worker_children(server.get())),
        }
    }

    /// A server (store `dir/store.db`, config `dir/config.json`) whose workspace `w` (root
    /// `root`, sandbox and masking off, `extra_ws` merged in) lives in this environment;
    /// `hooks` are extra variables for the server.
    pub fn serve(
        &self,
        dir: &Path,
        root: &Path,
        extra_ws: Value,
        hooks: &[(&str, &Path)],
    ) -> StdioServer {
        let mut ws = json!({"root": root, "environment": "e", "profile": "workspace-write",
                            "sandbox": "off", "secret_masking": "off"});
        if let (Value::Object(w), Value::Object(x)) = (&mut ws, extra_ws) {
            w.extend(x);
        }
        let cfg = json!({
            "store": dir.join("store.db"),
            "environments": {"e": self.env},
            "workspaces": {"w": ws},
        });
        let path = dir.join("config.json");
        std::fs::write(&path, cfg.to_string()).unwrap();
        let mut b = StdioServer::serve()
            .arg("--config")
            .arg(&path)
            .stderr_file(dir.join("stderr.log"));
        for (k, v) in &self.server_env {
            b = b.env(k, v);
        }
        for (k, v) in hooks {
            b = b.env(k, v);
        }
        let mut s = b.spawn();
        if let Some(WorkerPids::ServerChildren(server)) = &self.pids {
            server.set(s.pid());
        }
        s.initialize("env-matrix");
        s
    }
}
