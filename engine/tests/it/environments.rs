//! Environments: the per-kind config blocks (typed after load, errors naming the field path,
//! an unreachable environment still loads) and the argv builders run for real: ssh through a
//! loopback sshd (host key checked, one multiplexed session), and a podman container started
//! from a rootfs of host files with the worker mounted, exec'd into, and removed.

use codespace_engine::Config;
use codespace_engine::config::KubernetesSpec;
use codespace_engine::config::{
    ContainerEngine, ContainerSpec, ContainerTarget, EnvironmentKind, EnvironmentSpec,
    EnvironmentTransport, SshSpec, WorkerSpec,
};
use codespace_engine::environments as envs;
use codespace_engine::environments::{
    ArgvContext, container_exec_argv, container_exists_argv, container_name, container_remove_argv,
    container_run_argv, container_start_argv, container_stop_argv, kubernetes_argv, ssh_argv,
    ssh_close_argv, ssh_run_argv, stdio_argv,
};
use codespace_test_fixtures::{PodmanRootfs, Sshd};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn load(dir: &Path, environments: Value) -> Result<Config, String> {
    let root = dir.join("ws");
    std::fs::create_dir_all(&root).unwrap();
    let env_ids: Vec<String> = environments
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    let mut workspaces = serde_json::Map::new();
    for id in env_ids {
        workspaces.insert(id.clone(), json!({"root": root, "environment": id}));
    }
    if workspaces.is_empty() {
        workspaces.insert("w".into(), json!({"root": root}));
    }
    let cfg = json!({"environments": environments, "workspaces": workspaces});
    Config::from_json(&cfg.to_string(), dir).map_err(|e| e.to_string())
}

#[test]
fn every_kind_loads_typed_with_its_defaults_and_facts() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = load(
        dir.path(),
        json!({
            "plain": {},
            "sock": {"kind": "worker", "worker": {"socket": "/run/cs/w.sock"}},
            "asuser": {"kind": "worker", "worker": {"user": "codespace-worker"}},
            "remote": {"kind": "ssh", "ssh": {"host": "Build-1.Example",
                       "known_hosts": "/etc/cs/known_hosts"}},
            "named": {"kind": "container", "container": {"name": "dev"}},
            "img": {"kind": "container", "container": {"engine": "docker", "image": "debian:12",
                    "keep": true}},
            "fs": {"kind": "container", "container": {"rootfs": "/srv/rootfs"}},
            "pod": {"kind": "kubernetes", "kubernetes": {"namespace": "agents", "pod": "hands-0"}},
            "cmd": {"kind": "command", "command": {"argv": ["sudo", "-u", "w", "codespace", "worker", "--stdio"]}},
            "old": {"kind": "linux-container"},
        }),
    )
    .unwrap();
    let spec = |id: &str| cfg.environments[id].spec.clone();
    assert_eq!(spec("plain"), EnvironmentSpec::Host);
    assert_eq!(cfg.environments["plain"].kind, EnvironmentKind::Host);
    assert_eq!(
        spec("sock"),
        EnvironmentSpec::Worker(WorkerSpec::Socket {
            path: "/run/cs/w.sock".into(),
            secret_file: None,
            uid: None
        })
    );
    assert_eq!(
        spec("asuser"),
        EnvironmentSpec::Worker(WorkerSpec::User("codespace-worker".into()))
    );
    let EnvironmentSpec::Ssh(ssh) = spec("remote") else {
        panic!("{:?}", spec("remote"))
    };
    assert_eq!(
        (ssh.port, ssh.user.as_deref(), ssh.worker_path.as_str()),
        (22, None, "codespace")
    );
    assert_eq!(spec("remote").host_fact(), "build-1.example");
    assert_eq!(spec("remote").transport(), EnvironmentTransport::Ssh);
    let EnvironmentSpec::Container(named) = spec("named") else {
        panic!()
    };
    assert_eq!(
        (named.engine, named.worker_path.as_str(), named.keep),
        (ContainerEngine::Podman, "codespace", false)
    );
    let EnvironmentSpec::Container(img) = spec("img") else {
        panic!()
    };
    assert_eq!(img.target, ContainerTarget::Image("debian:12".into()));
    assert_eq!((img.worker_path.as_str(), img.keep), ("/codespace", true));
    assert_eq!(spec("img").transport(), EnvironmentTransport::Docker);
    assert_eq!(spec("fs").host_fact(), "/srv/rootfs");
    assert_eq!(spec("pod").host_fact(), "agents/hands-0");
    assert_eq!(spec("pod").transport(), EnvironmentTransport::Kubectl);
    assert_eq!(spec("cmd").kind(), EnvironmentKind::Command);
    assert_eq!(spec("old"), EnvironmentSpec::LinuxContainer);
    assert_eq!(spec("old").transport(), EnvironmentTransport::None);
    // Only the in-process kinds are reachable in this build; the others are unavailable, which
    // is a run-time state, not a load error.
    assert!(envs::availability(&spec("plain"), None).is_ok());
    assert!(envs::availability(&spec("remote"), None).is_err());
}

#[test]
fn bad_kinds_and_blocks_are_load_errors_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let kh = "/etc/cs/known_hosts";
    for (envs, want) in [
        (
            json!({"e": {"kind": "vm"}}),
            "environments.e.kind: unknown variant `vm`",
        ),
        (
            json!({"e": {"kind": "ssh"}}),
            "environments.e.ssh: required for kind `ssh`",
        ),
        (
            json!({"e": {"kind": "host", "container": {"name": "x"}}}),
            "environments.e.container: only for kind `container` (this environment's kind is `host`)",
        ),
        (
            json!({"e": {"kind": "ssh", "ssh": {"known_hosts": kh}}}),
            "environments.e.ssh.host: missing",
        ),
        (
            json!({"e": {"kind": "ssh", "ssh": {"host": "h"}}}),
            "environments.e.ssh.known_hosts: required",
        ),
        (
            json!({"e": {"kind": "ssh", "ssh": {"host": "-oProxyCommand=x", "known_hosts": kh}}}),
            "environments.e.ssh.host: `-oProxyCommand=x` must not start with `-`",
        ),
        (
            json!({"e": {"kind": "ssh", "ssh": {"host": "u@h", "known_hosts": kh}}}),
            "environments.e.ssh.host: `u@h` must be a host alone",
        ),
        (
            json!({"e": {"kind": "ssh", "ssh": {"host": "h", "known_hosts": "rel/kh"}}}),
            "environments.e.ssh.known_hosts: must be an absolute path",
        ),
        (
            json!({"e": {"kind": "ssh", "ssh": {"host": "h", "known_hosts": kh,
                   "options": ["ConnectTimeout=5", "StrictHostKeyChecking=no"]}}}),
            "environments.e.ssh.options[1]: `StrictHostKeyChecking` is set by the server",
        ),
        (
            json!({"e": {"kind": "ssh", "ssh": {"host": "h", "known_hosts": kh,
                   "worker_path": "codespace; rm -rf ~"}}}),
            "environments.e.ssh.worker_path: `codespace; rm -rf ~` must be a program name",
        ),
        (
            json!({"e": {"kind": "ssh", "ssh": {"host": "h", "known_hosts": kh, "port": 0}}}),
            "environments.e.ssh.port: must be 1-65535",
        ),
        (
            json!({"e": {"kind": "container", "container": {"name": "a", "image": "b"}}}),
            "environments.e.container: set exactly one of `name`, `image` and `rootfs`",
        ),
        (
            json!({"e": {"kind": "container", "container": {"name": "a", "keep": true}}}),
            "environments.e.container.keep: only for a container the server starts",
        ),
        (
            json!({"e": {"kind": "container", "container": {"engine": "lxc", "name": "a"}}}),
            "environments.e.container.engine: unknown variant `lxc`",
        ),
        (
            json!({"e": {"kind": "kubernetes", "kubernetes": {"namespace": "n"}}}),
            "environments.e.kubernetes.pod: missing",
        ),
        (
            json!({"e": {"kind": "command", "command": {"argv": []}}}),
            "environments.e.command.argv: must name at least the program",
        ),
        (
            json!({"e": {"kind": "worker", "worker": {"socket": "/s", "user": "u"}}}),
            "environments.e.worker: set exactly one of `socket` and `user`",
        ),
        (
            json!({"e": {"kind": "worker", "worker": {"sockt": "/s"}}}),
            "environments.e.worker.sockt: unknown field `sockt`",
        ),
    ] {
        let err = load(dir.path(), envs.clone()).expect_err(&envs.to_string());
        assert!(err.contains(want), "{envs}\nwant: {want}\ngot:  {err}");
    }
}

/// `argv` run with `input` on stdin: (success, stdout, stderr).
fn pipe(argv: &[String], input: &[u8]) -> (bool, String, String) {
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (child.wait().unwrap().success(), out, err)
}

/// A stand-in worker: says how it was called, then echoes its stdin (the stdio a worker
/// serves on).
fn stand_in_worker(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, "#!/bin/sh\necho \"called: $*\"\nexec cat\n").unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn the_ssh_argv_reaches_a_worker_through_a_loopback_sshd_and_checks_its_host_key() {
    let test = "the_ssh_argv_reaches_a_worker_through_a_loopback_sshd_and_checks_its_host_key";
    let sshd = match Sshd::start() {
        Ok(s) => s,
        Err(why) => return codespace_test_skip::skip(test, why),
    };
    let worker = sshd.dir().join("worker.sh");
    stand_in_worker(&worker);
    let spec = SshSpec {
        host: "127.0.0.1".into(),
        port: sshd.port,
        user: Some(sshd.user.clone()),
        identity_file: Some(sshd.identity_file.clone()),
        known_hosts: sshd.known_hosts.clone(),
        options: vec!["ConnectTimeout=10".into()],
        worker_path: worker.display().to_string(),
    };
    let control = sshd.dir().join("cm");
    // `true` through the environment's connection.
    let (ok, _, err) = pipe(&envs::ssh_run_argv(&spec, &control, &["true"]), b"");
    assert!(ok, "ssh true failed: {err}\nsshd: {}", sshd.log_text());
    // The worker argv: the worker runs with `worker --stdio` and its stdio is ours.
    let (ok, out, err) = pipe(&envs::ssh_argv(&spec, &control), b"ping\n");
    assert!(ok, "{err}\nsshd: {}", sshd.log_text());
    assert_eq!(out, "called: worker --stdio\nping\n");
    // One master connection serves both: its socket exists while it persists, and the close
    // argv ends it.
    assert!(
        control.exists(),
        "no control socket at {}",
        control.display()
    );
    let (ok, _, err) = pipe(&envs::ssh_close_argv(&spec, &control), b"");
    assert!(ok, "{err}");

    // A host key the operator did not list: refused, nothing runs (no trust on first use).
    let other = sshd.dir().join("other_known_hosts");
    std::fs::write(
        &other,
        format!(
            "[127.0.0.1]:{} ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n",
            sshd.port
        ),
    )
    .unwrap();
    let wrong = SshSpec {
        known_hosts: other,
        ..spec.clone()
    };
    let marker = sshd.dir().join("ran");
    let touch = format!("touch {}", marker.display());
    let (ok, _, err) = pipe(
        &envs::ssh_run_argv(&wrong, &sshd.dir().join("cm2"), &[&touch]),
        b"",
    );
    assert!(!ok);
    assert!(err.contains("Host key verification failed"), "{err}");
    assert!(!marker.exists());
}

/// Removes the container when the test ends, however it ends.
struct Removal<'a>(&'a PodmanRootfs, Vec<String>);

impl Drop for Removal<'_> {
    fn drop(&mut self) {
        let _ = self.0.run(&self.1);
    }
}

#[test]
fn a_rootfs_container_starts_with_the_worker_mounted_serves_its_stdio_and_is_removed() {
    let test = "a_rootfs_container_starts_with_the_worker_mounted_serves_its_stdio_and_is_removed";
    let pod = match PodmanRootfs::build(&["/bin/cat"]) {
        Ok(p) => p,
        Err(why) => return codespace_test_skip::skip(test, why),
    };
    let worker = pod.dir().join("worker.sh");
    stand_in_worker(&worker);
    let root: PathBuf = pod.dir().join("ws");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("a.txt"), "alpha\n").unwrap();
    let spec = ContainerSpec {
        engine: ContainerEngine::Podman,
        target: ContainerTarget::Rootfs(pod.rootfs.clone()),
        keep: false,
        worker_path: codespace_engine::config::CONTAINER_WORKER_MOUNT.into(),
    };
    let name = envs::container_name("fixture", false, &format!("{}", std::process::id()));
    let run = envs::container_run_argv(&spec, &name, &worker, std::slice::from_ref(&root)).unwrap();
    let stop = envs::container_stop_argv(&spec, &name).unwrap();
    pod.run(&run).unwrap();
    let _removal = Removal(&pod, stop.clone());
    pod.run(&envs::container_exists_argv(&spec, &name)).unwrap();
    // The worker argv: the mounted binary runs with `worker --stdio`, its stdio is ours.
    let ctx = envs::ArgvContext {
        ssh_control_path: PathBuf::new(),
        container_name: name.clone(),
    };
    let exec = envs::stdio_argv(&EnvironmentSpec::Container(spec.clone()), &ctx).unwrap();
    assert_eq!(exec[..4], ["podman", "exec", "-i", name.as_str()]);
    let out = pod.pipe(&exec, b"ping\n").unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out),
        "called: worker --stdio\nping\n"
    );
    // The workspace root is mounted at its own path.
    let mut cat = vec![
        "podman".to_string(),
        "exec".into(),
        name.clone(),
        "/bin/cat".into(),
    ];
    cat.push(root.join("a.txt").display().to_string());
    assert_eq!(pod.run(&cat).unwrap(), "alpha\n");
    // Stopping removes it (not kept).
    pod.run(&stop).unwrap();
    assert!(pod.run(&envs::container_exists_argv(&spec, &name)).is_err());
}

// The argv builders, word for word.

fn ssh() -> SshSpec {
    SshSpec {
        host: "build-1.example".into(),
        port: 2222,
        user: Some("ci".into()),
        identity_file: Some("/etc/codespace/id_ed25519".into()),
        known_hosts: "/etc/codespace/known_hosts".into(),
        options: vec!["ConnectTimeout=5".into()],
        worker_path: "/opt/codespace/bin/codespace".into(),
    }
}

fn words(v: &[String]) -> String {
    v.join(" ")
}

#[test]
fn the_ssh_argv_checks_the_host_key_and_multiplexes_one_session() {
    let argv = ssh_argv(&ssh(), Path::new("/run/cs/ssh-b1"));
    assert_eq!(
        words(&argv),
        "ssh -T -o BatchMode=yes -o StrictHostKeyChecking=yes \
         -o UserKnownHostsFile=/etc/codespace/known_hosts -o GlobalKnownHostsFile=/dev/null \
         -o ControlMaster=auto -o ControlPath=/run/cs/ssh-b1 -o ControlPersist=60 \
         -o ConnectTimeout=5 -p 2222 -i /etc/codespace/id_ed25519 -o IdentitiesOnly=yes \
         ci@build-1.example /opt/codespace/bin/codespace worker --stdio"
    );
    let mut bare = ssh();
    bare.user = None;
    bare.identity_file = None;
    bare.options.clear();
    bare.port = 22;
    bare.worker_path = "codespace".into();
    let argv = ssh_argv(&bare, Path::new("/c"));
    assert_eq!(
        argv[argv.len() - 6..].join(" "),
        "-p 22 build-1.example codespace worker --stdio"
    );
    assert!(!argv.contains(&"-i".to_string()));
    assert_eq!(
        words(&ssh_run_argv(&bare, Path::new("/c"), &["true"]))
            .rsplit_once(' ')
            .map(|x| x.1),
        Some("true")
    );
    assert_eq!(
        words(&ssh_close_argv(&ssh(), Path::new("/c"))),
        "ssh -O exit -o ControlPath=/c ci@build-1.example"
    );
}

fn container(target: ContainerTarget, keep: bool) -> ContainerSpec {
    ContainerSpec {
        engine: ContainerEngine::Podman,
        worker_path: match target {
            ContainerTarget::Named(_) => "codespace".into(),
            _ => "/codespace".into(),
        },
        target,
        keep,
    }
}

#[test]
fn a_named_container_is_exec_ed_into_and_never_started_or_removed() {
    let c = container(ContainerTarget::Named("dev".into()), false);
    assert_eq!(
        words(&container_exec_argv(&c, "dev")),
        "podman exec -i dev codespace worker --stdio"
    );
    assert_eq!(
        container_run_argv(&c, "dev", Path::new("/bin/cs"), &[]),
        None
    );
    assert_eq!(container_stop_argv(&c, "dev"), None);
    let ctx = ArgvContext {
        ssh_control_path: "/c".into(),
        container_name: "ignored".into(),
    };
    assert_eq!(
        stdio_argv(&EnvironmentSpec::Container(c), &ctx).map(|a| words(&a)),
        Some("podman exec -i dev codespace worker --stdio".into())
    );
}

#[test]
fn an_image_or_rootfs_container_is_started_with_the_worker_mounted_and_removed_unless_kept() {
    let c = container(ContainerTarget::Rootfs("/srv/rootfs".into()), false);
    let run = container_run_argv(
        &c,
        "codespace-box-abc",
        Path::new("/usr/local/bin/codespace"),
        &["/home/me/proj".into()],
    );
    assert_eq!(
        run.map(|a| words(&a)),
        Some(
            "podman run -d --rm --name codespace-box-abc \
             -v /usr/local/bin/codespace:/codespace:ro -v /home/me/proj:/home/me/proj \
             --rootfs /srv/rootfs sleep infinity"
                .into()
        )
    );
    assert_eq!(
        container_stop_argv(&c, "codespace-box-abc").map(|a| words(&a)),
        Some("podman rm -f -t 0 codespace-box-abc".into())
    );
    let mut kept = container(ContainerTarget::Image("localhost/dev:1".into()), true);
    kept.engine = ContainerEngine::Docker;
    let run = container_run_argv(&kept, "codespace-box", Path::new("/cs"), &[]);
    assert_eq!(
        run.map(|a| words(&a)),
        Some(
            "docker run -d --name codespace-box -v /cs:/codespace:ro localhost/dev:1 \
             sleep infinity"
                .into()
        )
    );
    assert_eq!(
        container_stop_argv(&kept, "codespace-box").map(|a| words(&a)),
        Some("docker stop -t 0 codespace-box".into())
    );
    assert_eq!(
        words(&container_exists_argv(&kept, "codespace-box")),
        "docker container inspect --format {{.State.Running}} codespace-box"
    );
    assert_eq!(
        words(&container_remove_argv(&kept, "codespace-box")),
        "docker rm -f codespace-box"
    );
    assert_eq!(
        words(&container_start_argv(&kept, "codespace-box")),
        "docker start codespace-box"
    );
    let ctx = ArgvContext {
        ssh_control_path: "/c".into(),
        container_name: "codespace-box".into(),
    };
    assert_eq!(
        stdio_argv(&EnvironmentSpec::Container(kept), &ctx).map(|a| words(&a)),
        Some("docker exec -i codespace-box /codespace worker --stdio".into())
    );
}

#[test]
fn container_names_are_stable_when_kept_and_per_instance_otherwise() {
    assert_eq!(container_name("box", true, "inst-1234"), "codespace-box");
    assert_eq!(
        container_name("a b/c", false, "0f3a-99c1-77aa-bb01"),
        "codespace-a_b_c-0f3a99c177aa"
    );
}

#[test]
fn the_kubectl_argv_names_namespace_pod_and_optional_context_and_container() {
    let mut k = KubernetesSpec {
        namespace: "agents".into(),
        pod: "hands-0".into(),
        container: None,
        context: None,
        kubectl: "kubectl".into(),
        worker_path: "codespace".into(),
    };
    assert_eq!(
        words(&kubernetes_argv(&k)),
        "kubectl exec -i -n agents hands-0 -- codespace worker --stdio"
    );
    k.context = Some("prod".into());
    k.container = Some("worker".into());
    k.kubectl = "/usr/local/bin/kubectl".into();
    assert_eq!(
        words(&kubernetes_argv(&k)),
        "/usr/local/bin/kubectl --context prod exec -i -n agents hands-0 -c worker -- \
         codespace worker --stdio"
    );
}

#[test]
fn a_command_is_its_argv_and_in_process_kinds_have_none() {
    let ctx = ArgvContext {
        ssh_control_path: "/c".into(),
        container_name: String::new(),
    };
    let argv = vec!["sudo".to_string(), "-u".into(), "cs".into()];
    assert_eq!(
        stdio_argv(&EnvironmentSpec::Command(argv.clone()), &ctx),
        Some(argv)
    );
    assert_eq!(stdio_argv(&EnvironmentSpec::Host, &ctx), None);
    assert_eq!(stdio_argv(&EnvironmentSpec::LinuxContainer, &ctx), None);
    assert!(
        stdio_argv(&EnvironmentSpec::Ssh(ssh()), &ctx)
            .is_some_and(|a| a.first().is_some_and(|p| p == "ssh"))
    );
}
