//! Environments served by a real worker, through the real binary: `read` and `workspace_info`
//! through a `worker {socket}` worker whose files only it can see (a tmpfs in its own mount
//! namespace), a `command` worker, an `ssh` worker through the loopback sshd fixture and a
//! `container` worker through podman; bad input (a worker of another build, a missing binary,
//! a wrong host key, a socket of another uid, a container that does not exist) leaves the
//! environment unavailable with its reason and nothing on the host; `kill -9` of a worker
//! between calls restarts it, mid-call fails the call with `ENVIRONMENT_UNAVAILABLE`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::stdio_common::{BIN, StdioServer};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A secret line in a file only its owner may read.
fn secret_file(dir: &Path) -> (PathBuf, String) {
    let secret = "0123456789abcdef0123456789abcdef".to_string();
    let path = dir.join("worker.secret");
    std::fs::write(&path, format!("{secret}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    (path, secret)
}

/// Whether `unshare -m` works here (a private mount namespace for the worker).
fn unshare_works() -> bool {
    Command::new("unshare")
        .args(["-m", "--propagation", "private", "true"])
        .status()
        .is_ok_and(|s| s.success())
}

/// A socket worker started by the test: `codespace worker --socket SOCK` in its own mount
/// namespace, where `root` is a tmpfs holding `a.txt` = "from the worker\n" (the gateway's
/// view of `root` stays empty). Ready once it printed `listening`.
struct SocketWorker {
    child: Child,
}

impl SocketWorker {
    fn start(root: &Path, sock: &Path, secret: &str, env: &[(&str, &str)]) -> SocketWorker {
        let script = format!(
            "mount -t tmpfs none '{root}' && printf 'from the worker\\n' > '{root}/a.txt' && exec \"$@\"",
            root = root.display()
        );
        let mut cmd = Command::new("unshare");
        cmd.args(["-m", "--propagation", "private", "sh", "-c", &script, "sh", BIN])
            .args(["worker", "--socket"])
            .arg(sock)
            .envs(env.iter().copied())
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

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for SocketWorker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A config of one workspace `w` (root `root`) in environment `e` = `env`.
fn config(dir: &Path, root: &Path, env: Value) -> PathBuf {
    let cfg = json!({
        "environments": {"e": env},
        "workspaces": {"w": {"root": root, "environment": "e", "sandbox": "off",
                              "secret_masking": "off"}},
    });
    let path = dir.join("config.json");
    std::fs::write(&path, cfg.to_string()).unwrap();
    path
}

fn serve(dir: &Path, cfg: &Path) -> StdioServer {
    let mut s = StdioServer::serve()
        .arg("--config")
        .arg(cfg)
        .arg("--store")
        .arg(dir.join("store.db"))
        .stderr_file(dir.join("stderr.log"))
        .spawn();
    s.initialize("t");
    s
}

#[test]
fn read_and_workspace_info_go_through_a_socket_worker_that_alone_sees_the_files() {
    let test = "env_workers::read_and_workspace_info_go_through_a_socket_worker_that_alone_sees_the_files";
    if !codespace_test_skip::require(
        rustix::process::geteuid().is_root() && unshare_works(),
        test,
        "needs root and `unshare -m` to give the worker files the gateway cannot see",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let sock = dir.path().join("wdir").join("w.sock");
    let (secret_path, secret) = secret_file(dir.path());
    let _worker = SocketWorker::start(&root, &sock, &secret, &[]);
    let cfg = config(
        dir.path(),
        &root,
        json!({"kind": "worker", "worker": {"socket": sock, "secret_file": secret_path}}),
    );
    let mut s = serve(dir.path(), &cfg);

    let r = s.tool_ok("read", json!({"workspace_id": "w", "path": "a.txt"}));
    assert_eq!(r["content"], "from the worker\n", "{r}");
    assert!(
        !root.join("a.txt").exists(),
        "the gateway's view of the root stays empty"
    );
    let info = s.tool_ok("workspace_info", json!({"workspace_id": "w"}));
    let env = &info["environment"];
    assert_eq!(env["kind"], "worker", "{info}");
    assert_eq!(env["transport"], "unix", "{info}");
    assert_eq!(env["worker"]["state"], "ready", "{info}");
    assert_eq!(env["worker"]["restarts"], 0, "{info}");
    assert!(
        env["worker"]["version"]
            .as_str()
            .is_some_and(|v| v.starts_with("1/")),
        "{info}"
    );
    // A path the worker does not have: its error, not the host's.
    let e = s.tool_err("read", json!({"workspace_id": "w", "path": "missing.txt"}));
    assert_eq!(e["code"], "FILE_NOT_FOUND", "{e}");
    s.close_and_wait(std::time::Duration::from_secs(30));
}
