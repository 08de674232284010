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

use crate::env_common::{SocketWorker, podman_path, podman_rootfs, secret_file};
use crate::stdio_common::{BIN, StdioServer, error_body, test_hooks_or_skip};
use codespace_store::Store;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Whether `unshare -m` works here (a private mount namespace for the worker).
fn unshare_works() -> bool {
    Command::new("unshare")
        .args(["-m", "--propagation", "private", "true"])
        .status()
        .is_ok_and(|s| s.success())
}

/// A socket worker in its own mount namespace, where `root` is a tmpfs holding `a.txt` =
/// "from the worker\n" (the gateway's view of `root` stays empty).
fn private_socket_worker(root: &Path, sock: &Path, secret: &str) -> SocketWorker {
    let script = format!(
        "mount -t tmpfs none '{root}' && printf 'from the worker\\n' > '{root}/a.txt' && exec \"$@\"",
        root = root.display()
    );
    SocketWorker::start_with(
        &[
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            &script,
            "sh",
        ],
        sock,
        secret,
    )
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
    let test =
        "env_workers::read_and_workspace_info_go_through_a_socket_worker_that_alone_sees_the_files";
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
    let _worker = private_socket_worker(&root, &sock, &secret);
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
        env["worker"]["version"].as_str().is_some_and(
            |v| v.starts_with(&format!("{}/", codespace_runner_worker::PROTOCOL_VERSION))
        ),
        "{info}"
    );
    // A path the worker does not have: its error, not the host's.
    let e = s.tool_err("read", json!({"workspace_id": "w", "path": "missing.txt"}));
    assert_eq!(e["code"], "FILE_NOT_FOUND", "{e}");
    s.close_and_wait(std::time::Duration::from_secs(30));
}

fn store_of(dir: &Path) -> Store {
    Store::open(&dir.join("store.db")).unwrap()
}

/// The pids of the server's children whose command line says `worker`.
fn worker_children(server: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // The fields after the command name (which may hold spaces) start after ") ".
        let Some(rest) = stat.rsplit_once(") ").map(|(_, r)| r) else {
            continue;
        };
        let ppid: u32 = rest
            .split(' ')
            .nth(1)
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if ppid == server && String::from_utf8_lossy(&cmd).contains("worker") {
            out.push(pid);
        }
    }
    out
}

fn kill_9(pid: u32) {
    let pid = rustix::process::Pid::from_raw(pid as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
}

/// `workspace_info` until its worker reports `restarts` = `n` (the gateway saw the death and
/// the call reconnected): the state it reports then.
fn until_restarts(s: &mut StdioServer, n: u64) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let info = s.tool_ok("workspace_info", json!({"workspace_id": "w"}));
        if info["environment"]["worker"]["restarts"] == n {
            return info;
        }
        assert!(std::time::Instant::now() < deadline, "no restart: {info}");
        std::thread::yield_now();
    }
}

#[test]
fn a_command_worker_restarts_after_kill_9_and_a_call_killed_mid_way_is_unavailable() {
    let test = "env_workers::a_command_worker_restarts_after_kill_9_and_a_call_killed_mid_way_is_unavailable";
    if !test_hooks_or_skip(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("a.txt"), "alpha\n").unwrap();
    std::fs::write(root.join("slow.txt"), "slow\n").unwrap();
    let fifo = dir.path().join("hang.fifo");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    let cfg = config(
        dir.path(),
        &root,
        json!({"kind": "command", "command": {"argv": [BIN, "worker", "--stdio"]}}),
    );
    // The worker inherits the server's environment: the hang hook is the worker's.
    let mut s = StdioServer::serve()
        .arg("--config")
        .arg(&cfg)
        .arg("--store")
        .arg(dir.path().join("store.db"))
        .env("CODESPACE_TEST_WORKER_HANG_ON", "slow.txt")
        .env("CODESPACE_TEST_WORKER_HANG_MARK", &fifo)
        .stderr_file(dir.path().join("stderr.log"))
        .spawn();
    s.initialize("t");
    let r = s.tool_ok("read", json!({"workspace_id": "w", "path": "a.txt"}));
    assert_eq!(r["content"], "alpha\n");
    let info = s.tool_ok("workspace_info", json!({"workspace_id": "w"}));
    assert_eq!(info["environment"]["kind"], "command", "{info}");
    assert_eq!(info["environment"]["worker"]["state"], "ready", "{info}");
    assert_eq!(info["environment"]["worker"]["restarts"], 0, "{info}");

    // kill -9 between calls: the next call starts it again.
    let workers = worker_children(s.pid());
    assert_eq!(workers.len(), 1, "{workers:?}");
    kill_9(workers[0]);
    let info = until_restarts(&mut s, 1);
    assert_eq!(info["environment"]["worker"]["state"], "ready", "{info}");
    let r = s.tool_ok("read", json!({"workspace_id": "w", "path": "a.txt"}));
    assert_eq!(r["content"], "alpha\n");
    let now = worker_children(s.pid());
    assert_eq!(now.len(), 1);
    assert_ne!(now[0], workers[0]);

    // kill -9 mid-call: the call fails ENVIRONMENT_UNAVAILABLE, the next one restarts it.
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap())
    };
    let id = s.send_request(
        "tools/call",
        json!({"name": "read", "arguments": {"workspace_id": "w", "path": "slow.txt"}}),
    );
    let pid: u32 = reader.join().unwrap().trim().parse().unwrap();
    assert_eq!(pid, now[0], "the hanging call is in the worker");
    kill_9(pid);
    let e = error_body(&s.response(id)["result"]);
    assert_eq!(e["code"], "ENVIRONMENT_UNAVAILABLE", "{e}");
    let r = s.tool_ok("read", json!({"workspace_id": "w", "path": "a.txt"}));
    assert_eq!(r["content"], "alpha\n");
    let info = s.tool_ok("workspace_info", json!({"workspace_id": "w"}));
    assert_eq!(info["environment"]["worker"]["restarts"], 2, "{info}");
    s.close_and_wait(std::time::Duration::from_secs(30));

    let lost = store_of(dir.path())
        .events(Some("environment_worker_lost"), 10)
        .unwrap();
    assert!(lost.len() >= 2, "{lost:?}");
    assert_eq!(lost[0].detail["environment"], "e");
}

#[test]
fn unreachable_workers_are_unavailable_with_their_reason_and_nothing_runs_on_the_host() {
    let test = "env_workers::unreachable_workers_are_unavailable_with_their_reason_and_nothing_runs_on_the_host";
    if !test_hooks_or_skip(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut envs = serde_json::Map::new();
    let mut workspaces = serde_json::Map::new();
    let other_build = "other-build-0";
    let podman = Command::new("podman")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let mut cases = vec![
        (
            "other",
            json!({"kind": "command", "command": {"argv": ["env",
                  format!("CODESPACE_TEST_WORKER_BUILD_ID={other_build}"), BIN, "worker", "--stdio"]}}),
            // Both builds named.
            vec![
                "mismatch".to_string(),
                other_build.to_string(),
                "met worker".to_string(),
            ],
        ),
        (
            "missing",
            json!({"kind": "command", "command": {"argv": ["/nonexistent/codespace", "worker", "--stdio"]}}),
            vec!["/nonexistent/codespace".to_string()],
        ),
        (
            "nosecret",
            json!({"kind": "worker", "worker": {"socket": dir.path().join("none.sock")}}),
            vec!["secret_file".to_string()],
        ),
    ];
    if podman {
        cases.push((
            "nobox",
            json!({"kind": "container", "container": {"name": "codespace-test-no-such-container"}}),
            vec!["codespace-test-no-such-container".to_string()],
        ));
    } else {
        codespace_test_skip::skip(
            test,
            "podman is not installed: the missing-container case is not run",
        );
    }
    for (id, env, _) in &cases {
        let root = dir.path().join("roots").join(id);
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("a.txt"), "alpha\n").unwrap();
        envs.insert(id.to_string(), env.clone());
        workspaces.insert(
            id.to_string(),
            json!({"root": root, "environment": id, "sandbox": "off", "secret_masking": "off"}),
        );
    }
    let cfg = dir.path().join("config.json");
    std::fs::write(
        &cfg,
        json!({"environments": envs, "workspaces": workspaces}).to_string(),
    )
    .unwrap();
    let mut s = serve(dir.path(), &cfg);
    for (id, _, want) in &cases {
        let e = s.tool_err("read", json!({"workspace_id": id, "path": "a.txt"}));
        assert_eq!(e["code"], "ENVIRONMENT_UNAVAILABLE", "{id}: {e}");
        let info = s.tool_ok("workspace_info", json!({"workspace_id": id}));
        let worker = &info["environment"]["worker"];
        assert_eq!(worker["state"], "unavailable", "{id}: {info}");
        let reason = worker["reason"].as_str().unwrap_or_default();
        for w in want {
            assert!(reason.contains(w.as_str()), "{id}: want `{w}` in {reason}");
        }
        // A tool not served through a worker yet is refused too, and runs nothing here.
        let e = s.tool_err(
            "apply_patch",
            json!({"workspace_id": id,
                   "patch": "*** Begin Patch\n*** Add File: b.txt\n+b\n*** End Patch\n"}),
        );
        assert_eq!(e["code"], "ENVIRONMENT_UNAVAILABLE", "{id}: {e}");
        assert!(!dir.path().join("roots").join(id).join("b.txt").exists());
    }
    s.close_and_wait(std::time::Duration::from_secs(30));
    let events = store_of(dir.path())
        .events(Some("environment_unavailable"), 100)
        .unwrap();
    for (id, _, _) in &cases {
        assert!(
            events
                .iter()
                .any(|e| e.detail["workspace"] == *id && e.detail["tool"] == "read"),
            "{id}: {events:?}"
        );
    }
}

#[test]
fn a_socket_of_another_uid_is_not_sent_the_secret() {
    let test = "env_workers::a_socket_of_another_uid_is_not_sent_the_secret";
    let setpriv = Command::new("setpriv")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !codespace_test_skip::require(
        rustix::process::geteuid().is_root() && setpriv,
        test,
        "needs root and setpriv (util-linux) to run a worker as a throwaway uid",
    ) {
        return;
    }
    const OTHER: u32 = 64_999;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("a.txt"), "alpha\n").unwrap();
    let parent = dir.path().join("sockets");
    std::fs::create_dir(&parent).unwrap();
    std::os::unix::fs::chown(&parent, Some(OTHER), Some(OTHER)).unwrap();
    let sock = parent.join("w").join("w.sock");
    let (secret_path, secret) = secret_file(dir.path());
    // A worker of another uid that would even accept us (--allow-uid 0).
    let mut child = Command::new("setpriv")
        .args([
            &format!("--reuid={OTHER}"),
            &format!("--regid={OTHER}"),
            "--clear-groups",
            "--",
            BIN,
            "worker",
            "--socket",
        ])
        .arg(&sock)
        .args(["--allow-uid", "0"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(child.stdin.take().unwrap(), "{secret}").unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "listening");
    let cfg = config(
        dir.path(),
        &root,
        json!({"kind": "worker", "worker": {"socket": sock, "secret_file": secret_path}}),
    );
    let mut s = serve(dir.path(), &cfg);
    let e = s.tool_err("read", json!({"workspace_id": "w", "path": "a.txt"}));
    assert_eq!(e["code"], "ENVIRONMENT_UNAVAILABLE", "{e}");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains(&format!("runs as uid {OTHER}")),
        "{e}"
    );
    s.close_and_wait(std::time::Duration::from_secs(30));
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn read_goes_through_an_ssh_worker_over_one_session_and_a_bad_host_key_or_binary_is_unavailable() {
    let test = "env_workers::read_goes_through_an_ssh_worker_over_one_session_and_a_bad_host_key_or_binary_is_unavailable";
    let sshd = match codespace_test_fixtures::Sshd::start() {
        Ok(d) => d,
        Err(why) => {
            codespace_test_skip::require(false, test, why);
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    // A known_hosts naming another key for the same host and port.
    let wrong = dir.path().join("wrong_key");
    let o = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(&wrong)
        .output()
        .unwrap();
    assert!(o.status.success());
    let wrong_pub = std::fs::read_to_string(dir.path().join("wrong_key.pub")).unwrap();
    let mut parts = wrong_pub.split_whitespace();
    let wrong_known = dir.path().join("wrong_known_hosts");
    std::fs::write(
        &wrong_known,
        format!(
            "[127.0.0.1]:{} {} {}\n",
            sshd.port,
            parts.next().unwrap(),
            parts.next().unwrap()
        ),
    )
    .unwrap();
    let ssh = |known: &Path, worker: &str| {
        json!({"kind": "ssh", "ssh": {"host": "127.0.0.1", "port": sshd.port, "user": sshd.user,
               "identity_file": sshd.identity_file, "known_hosts": known, "worker_path": worker}})
    };
    let mut envs = serde_json::Map::new();
    let mut workspaces = serde_json::Map::new();
    for (id, env) in [
        ("w", ssh(&sshd.known_hosts, BIN)),
        ("badkey", ssh(&wrong_known, BIN)),
        ("nobin", ssh(&sshd.known_hosts, "/nonexistent/codespace")),
    ] {
        let root = dir.path().join("roots").join(id);
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("a.txt"), format!("{id}\n")).unwrap();
        envs.insert(id.to_string(), env);
        workspaces.insert(
            id.to_string(),
            json!({"root": root, "environment": id, "sandbox": "off", "secret_masking": "off"}),
        );
    }
    let cfg = dir.path().join("config.json");
    std::fs::write(
        &cfg,
        json!({"environments": envs, "workspaces": workspaces}).to_string(),
    )
    .unwrap();
    let mut s = serve(dir.path(), &cfg);
    for _ in 0..3 {
        let r = s.tool_ok("read", json!({"workspace_id": "w", "path": "a.txt"}));
        assert_eq!(r["content"], "w\n", "{r}");
    }
    let info = s.tool_ok("workspace_info", json!({"workspace_id": "w"}));
    assert_eq!(info["environment"]["transport"], "ssh", "{info}");
    assert_eq!(info["environment"]["host"], "127.0.0.1", "{info}");
    assert_eq!(info["environment"]["worker"]["state"], "ready", "{info}");
    assert_eq!(info["environment"]["worker"]["restarts"], 0, "{info}");
    // One ssh session served every call (one login in the daemon's log).
    let logins = sshd.log_text().matches("Accepted publickey").count();
    // The fixture's own readiness login is one of them.
    assert_eq!(logins, 2, "{}", sshd.log_text());

    for (id, want) in [
        ("badkey", "Host key verification failed"),
        ("nobin", "/nonexistent/codespace"),
    ] {
        let e = s.tool_err("read", json!({"workspace_id": id, "path": "a.txt"}));
        assert_eq!(e["code"], "ENVIRONMENT_UNAVAILABLE", "{id}: {e}");
        assert!(e["message"].as_str().unwrap().contains(want), "{id}: {e}");
    }
    s.close_and_wait(std::time::Duration::from_secs(30));
}

#[test]
fn read_goes_through_a_container_the_server_starts_and_removes() {
    let test = "env_workers::read_goes_through_a_container_the_server_starts_and_removes";
    // The worker binary is mounted; the rootfs needs its shared libraries.
    let fs = match podman_rootfs(&[]) {
        Ok(f) => f,
        Err(why) => {
            codespace_test_skip::require(false, test, why);
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    // This host's podman needs its wrapper (docs/environments.md, "Testing here").
    let path = podman_path(dir.path());
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("a.txt"), "in the box\n").unwrap();
    let cfg = config(
        dir.path(),
        &root,
        json!({"kind": "container", "container": {"rootfs": fs.rootfs}}),
    );
    let mut s = StdioServer::serve()
        .arg("--config")
        .arg(&cfg)
        .arg("--store")
        .arg(dir.path().join("store.db"))
        .env("PATH", &path)
        .env("CONTAINERS_CONF", &fs.conf)
        .stderr_file(dir.path().join("stderr.log"))
        .spawn();
    s.initialize("t");
    let r = s.tool_ok("read", json!({"workspace_id": "w", "path": "a.txt"}));
    assert_eq!(r["content"], "in the box\n", "{r}");
    let info = s.tool_ok("workspace_info", json!({"workspace_id": "w"}));
    assert_eq!(info["environment"]["transport"], "podman", "{info}");
    assert_eq!(info["environment"]["worker"]["state"], "ready", "{info}");
    // Ours is the one that mounts this test's root (other tests run containers too).
    let names = fs
        .run(&[
            "podman".into(),
            "ps".into(),
            "-a".into(),
            "--format".into(),
            "{{.Names}} {{.Mounts}}".into(),
        ])
        .unwrap();
    let root_s = root.display().to_string();
    let ours: Vec<&str> = names
        .lines()
        .filter(|l| l.starts_with("codespace-e-"))
        .filter(|l| l.split([' ', '[', ']']).any(|w| w == root_s))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(ours.len(), 1, "{names}");
    let name = ours[0].to_string();
    s.close_and_wait(std::time::Duration::from_secs(60));
    assert!(
        fs.run(&[
            "podman".into(),
            "container".into(),
            "inspect".into(),
            name.clone()
        ])
        .is_err(),
        "{name} outlived the server"
    );
}

#[test]
fn a_worker_user_is_started_as_that_user_and_serves_read() {
    let test = "env_workers::a_worker_user_is_started_as_that_user_and_serves_read";
    let Some((dir, mut s)) = serve_as_nobody(test) else {
        return;
    };
    let info = s.tool_ok("workspace_info", json!({"workspace_id": "w"}));
    assert_eq!(info["environment"]["worker"]["state"], "ready", "{info}");
    // The worker runs as nobody (its socket's peer uid was checked before the secret went out).
    let workers = worker_children(s.pid());
    assert_eq!(workers.len(), 1, "{workers:?}");
    let status = std::fs::read_to_string(format!("/proc/{}/status", workers[0])).unwrap();
    let uid_line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert!(uid_line.contains("65534"), "{uid_line}");
    s.close_and_wait(std::time::Duration::from_secs(30));
    drop(dir);
}

/// A `worker {user}` never outlives its server, not even one killed with SIGKILL (which runs no
/// clean-up of its own): the worker's stdin, the server's end held open while it lives, ends.
#[test]
fn a_worker_user_dies_with_a_killed_server_and_takes_its_socket_along() {
    let test = "env_workers::a_worker_user_dies_with_a_killed_server_and_takes_its_socket_along";
    let Some((dir, mut s)) = serve_as_nobody(test) else {
        return;
    };
    let workers = worker_children(s.pid());
    assert_eq!(workers.len(), 1, "{workers:?}");
    let pid = rustix::process::Pid::from_raw(i32::try_from(workers[0]).unwrap()).unwrap();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let socket = cmdline
        .split(|b| *b == 0)
        .skip_while(|a| *a != b"--socket")
        .nth(1)
        .map(|p| PathBuf::from(String::from_utf8_lossy(p).into_owned()))
        .expect("the worker names its socket");
    assert!(socket.exists(), "{}", socket.display());
    // Its exit is an event on a pidfd (it is the server's child, not this test's).
    let pidfd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).unwrap();
    s.kill();
    let mut fds = [rustix::event::PollFd::new(
        &pidfd,
        rustix::event::PollFlags::IN,
    )];
    let timeout = rustix::event::Timespec {
        tv_sec: 30,
        tv_nsec: 0,
    };
    let ready = rustix::event::poll(&mut fds, Some(&timeout)).unwrap();
    assert_eq!(
        ready, 1,
        "the worker {pid:?} outlived its killed server by 30 s"
    );
    // The socket went with it, and the directory the worker made for it.
    assert!(!socket.exists(), "{}", socket.display());
    assert!(!socket.parent().unwrap().exists(), "{}", socket.display());
    drop(dir);
}

/// A server whose workspace `w` (a file `a.txt`) lives in a `worker {user: nobody}`
/// environment, that worker started by a first `read`; None (after a `skip:`) without root,
/// `setpriv` or a `nobody` account.
fn serve_as_nobody(test: &str) -> Option<(tempfile::TempDir, StdioServer)> {
    let setpriv = Command::new("setpriv")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let nobody = Command::new("getent")
        .args(["passwd", "nobody"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !codespace_test_skip::require(
        rustix::process::geteuid().is_root() && setpriv && nobody,
        test,
        "needs root, setpriv (util-linux) and a `nobody` account to start a worker as another user",
    ) {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(root.join("a.txt"), "as nobody\n").unwrap();
    let cfg = config(
        dir.path(),
        &root,
        json!({"kind": "worker", "worker": {"user": "nobody"}}),
    );
    let mut s = serve(dir.path(), &cfg);
    let r = s.tool_ok("read", json!({"workspace_id": "w", "path": "a.txt"}));
    assert_eq!(r["content"], "as nobody\n", "{r}");
    Some((dir, s))
}

#[test]
fn environments_install_puts_the_binary_on_an_ssh_host_once_per_build_and_the_worker_runs_it() {
    let test = "env_workers::environments_install_puts_the_binary_on_an_ssh_host_once_per_build_and_the_worker_runs_it";
    let sshd = match codespace_test_fixtures::Sshd::start() {
        Ok(d) => d,
        Err(why) => {
            codespace_test_skip::require(false, test, why);
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let remote_dir = dir.path().join("remote-bin");
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("a.txt"), "over ssh\n").unwrap();
    let config = |worker: &str| {
        json!({
            "environments": {"build-host": {"kind": "ssh", "ssh": {
                "host": "127.0.0.1", "port": sshd.port, "user": sshd.user,
                "identity_file": sshd.identity_file, "known_hosts": sshd.known_hosts,
                "worker_path": worker}}},
            "workspaces": {"w": {"root": root, "environment": "build-host",
                                 "sandbox": "off", "secret_masking": "off"}}
        })
        .to_string()
    };
    let cfg = dir.path().join("config.json");
    std::fs::write(&cfg, config("/nonexistent/codespace")).unwrap();
    let install = || {
        let o = Command::new(BIN)
            .args(["environments", "install", "--config"])
            .arg(&cfg)
            .args(["--environment", "build-host", "--dir"])
            .arg(&remote_dir)
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(
            o.status.success(),
            "{out}\n{}\nsshd: {}",
            String::from_utf8_lossy(&o.stderr),
            sshd.log_text()
        );
        out
    };
    let first = install();
    assert!(first.starts_with("installed: "), "{first}");
    let installed: Vec<PathBuf> = std::fs::read_dir(&remote_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(
        installed.len(),
        1,
        "one file, no partial copy: {installed:?}"
    );
    let target = installed[0].clone();
    let name = target.file_name().unwrap().to_str().unwrap().to_string();
    assert!(name.starts_with("codespace-"), "{name}");
    assert!(first.contains(target.to_str().unwrap()), "{first}");
    assert_eq!(std::fs::read(&target).unwrap(), std::fs::read(BIN).unwrap());
    let meta = std::fs::metadata(&target).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o700);
    // The same build again: nothing is sent, the copy is the same file.
    let second = install();
    assert!(second.starts_with("present: "), "{second}");
    let again = std::fs::metadata(&target).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        (again.ino(), again.mtime_nsec()),
        (meta.ino(), meta.mtime_nsec())
    );
    // A copy that differs (another binary under this build's name) is replaced.
    std::fs::write(&target, "#!/bin/sh\nexit 1\n").unwrap();
    let third = install();
    assert!(third.starts_with("installed: "), "{third}");
    assert_eq!(std::fs::read(&target).unwrap(), std::fs::read(BIN).unwrap());
    // The worker the server starts over ssh is the installed copy.
    std::fs::write(&cfg, config(target.to_str().unwrap())).unwrap();
    let mut s = serve(dir.path(), &cfg);
    let r = s.tool_ok("read", json!({"workspace_id": "w", "path": "a.txt"}));
    assert_eq!(r["content"], "over ssh\n", "{r}");
    s.close_and_wait(std::time::Duration::from_secs(30));
    // Only ssh environments: a host environment is refused with a reason.
    let host_cfg = dir.path().join("host.json");
    std::fs::write(
        &host_cfg,
        json!({"environments": {"h": {"kind": "host"}},
               "workspaces": {"w": {"root": root, "environment": "h"}}})
        .to_string(),
    )
    .unwrap();
    let o = Command::new(BIN)
        .args(["environments", "install", "--config"])
        .arg(&host_cfg)
        .args(["--environment", "h"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("not an ssh environment"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
