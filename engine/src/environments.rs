//! The argvs that reach an environment's worker, one pure function per kind: the argv whose
//! stdio is a `codespace worker --stdio` (ssh, container exec, kubectl exec, the operator's
//! command), and the lifecycle of a container the server starts (run, exists, start, stop or
//! remove). Nothing here runs a program; the worker transport spawns what these return. The
//! exact argvs are documented in docs/environments.md.

use crate::config::{
    CONTAINER_WORKER_MOUNT, ContainerSpec, ContainerTarget, EnvironmentSpec, KubernetesSpec,
    SshSpec,
};
use std::path::{Path, PathBuf};

/// The arguments after the worker path: serve the runner protocol on stdin/stdout.
pub const WORKER_STDIO_ARGS: [&str; 2] = ["worker", "--stdio"];

/// How long an idle ssh master connection outlives its last session (seconds).
pub const SSH_CONTROL_PERSIST_SECS: u32 = 60;

/// What the argvs of one environment need beyond its config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgvContext {
    /// The ssh control socket of this environment (one multiplexed session): a short path in
    /// a directory only the server can write (a Unix socket path is at most 107 bytes).
    pub ssh_control_path: PathBuf,
    /// The name of the container the server starts for an `image` / `rootfs` environment.
    pub container_name: String,
}

/// The name of the container the server starts for environment `env_id`: stable for a kept
/// container (the next server start finds it), else unique to this server instance.
pub fn container_name(env_id: &str, keep: bool, instance: &str) -> String {
    let clean: String = env_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if keep {
        format!("codespace-{clean}")
    } else {
        let short: String = instance
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .take(12)
            .collect();
        format!("codespace-{clean}-{short}")
    }
}

fn worker_tail(worker_path: &str) -> impl Iterator<Item = String> + '_ {
    std::iter::once(worker_path.to_string()).chain(WORKER_STDIO_ARGS.iter().map(|s| s.to_string()))
}

fn ssh_common(spec: &SshSpec, control_path: &Path) -> Vec<String> {
    let mut argv: Vec<String> = vec!["ssh".into(), "-T".into()];
    let mut opt = |o: String| {
        argv.push("-o".into());
        argv.push(o);
    };
    opt("BatchMode=yes".into());
    opt("StrictHostKeyChecking=yes".into());
    opt(format!("UserKnownHostsFile={}", spec.known_hosts.display()));
    opt("GlobalKnownHostsFile=/dev/null".into());
    opt("ControlMaster=auto".into());
    opt(format!("ControlPath={}", control_path.display()));
    opt(format!("ControlPersist={SSH_CONTROL_PERSIST_SECS}"));
    for o in &spec.options {
        opt(o.clone());
    }
    argv.push("-p".into());
    argv.push(spec.port.to_string());
    if let Some(key) = &spec.identity_file {
        argv.push("-i".into());
        argv.push(key.display().to_string());
        argv.push("-o".into());
        argv.push("IdentitiesOnly=yes".into());
    }
    argv.push(match &spec.user {
        Some(u) => format!("{u}@{}", spec.host),
        None => spec.host.clone(),
    });
    argv
}

/// `ssh -T -o BatchMode=yes -o StrictHostKeyChecking=yes -o UserKnownHostsFile=KNOWN_HOSTS
/// -o GlobalKnownHostsFile=/dev/null -o ControlMaster=auto -o ControlPath=P -o ControlPersist=60
/// [-o OPTION]... -p PORT [-i IDENTITY -o IdentitiesOnly=yes] [USER@]HOST WORKER_PATH worker
/// --stdio`: the host key must already be in the operator's `known_hosts`; no password or
/// passphrase prompt (batch mode); one master connection per environment.
pub fn ssh_argv(spec: &SshSpec, control_path: &Path) -> Vec<String> {
    let mut argv = ssh_common(spec, control_path);
    argv.extend(worker_tail(&spec.worker_path));
    argv
}

/// The same connection running `REMOTE...` instead of the worker (the install step, a
/// probe); the argv words are sent as ssh sends them (joined by spaces for the remote shell).
pub fn ssh_run_argv(spec: &SshSpec, control_path: &Path, remote: &[&str]) -> Vec<String> {
    let mut argv = ssh_common(spec, control_path);
    argv.extend(remote.iter().map(|s| s.to_string()));
    argv
}

/// `ssh -O exit -o ControlPath=P [USER@]HOST`: closes the environment's master connection.
pub fn ssh_close_argv(spec: &SshSpec, control_path: &Path) -> Vec<String> {
    vec![
        "ssh".into(),
        "-O".into(),
        "exit".into(),
        "-o".into(),
        format!("ControlPath={}", control_path.display()),
        match &spec.user {
            Some(u) => format!("{u}@{}", spec.host),
            None => spec.host.clone(),
        },
    ]
}

/// `ENGINE exec -i NAME WORKER_PATH worker --stdio` (`NAME` the configured container, or the
/// one the server started).
pub fn container_exec_argv(spec: &ContainerSpec, name: &str) -> Vec<String> {
    let mut argv = vec![
        spec.engine.as_str().to_string(),
        "exec".into(),
        "-i".into(),
        name.to_string(),
    ];
    argv.extend(worker_tail(&spec.worker_path));
    argv
}

/// For an `image` / `rootfs` environment, the argv that starts its container, detached:
/// `ENGINE run -d [--rm] --name NAME -v WORKER_BINARY:/codespace:ro [-v ROOT:ROOT]...
/// (--rootfs ROOTFS | IMAGE) sleep infinity` — the host's worker binary mounted read-only, each
/// workspace root of the environment mounted at the same path, `sleep` keeping it up while the
/// worker runs through `exec`. `--rm` unless `keep`. None for a named container.
pub fn container_run_argv(
    spec: &ContainerSpec,
    name: &str,
    worker_binary: &Path,
    roots: &[PathBuf],
) -> Option<Vec<String>> {
    let mut argv: Vec<String> = vec![spec.engine.as_str().to_string(), "run".into(), "-d".into()];
    if !spec.keep {
        argv.push("--rm".into());
    }
    argv.push("--name".into());
    argv.push(name.to_string());
    argv.push("-v".into());
    argv.push(format!(
        "{}:{CONTAINER_WORKER_MOUNT}:ro",
        worker_binary.display()
    ));
    for root in roots {
        argv.push("-v".into());
        argv.push(format!("{}:{}", root.display(), root.display()));
    }
    match &spec.target {
        ContainerTarget::Named(_) => return None,
        ContainerTarget::Image(image) => argv.push(image.clone()),
        ContainerTarget::Rootfs(dir) => {
            argv.push("--rootfs".into());
            argv.push(dir.display().to_string());
        }
    }
    argv.push("sleep".into());
    argv.push("infinity".into());
    Some(argv)
}

/// `ENGINE container inspect --format {{.State.Running}} NAME`: exits 0 when the container
/// exists, printing `true` while it runs (a kept one from an earlier start is started again
/// instead of run; a stopped one of the server's own is removed and run again).
pub fn container_exists_argv(spec: &ContainerSpec, name: &str) -> Vec<String> {
    vec![
        spec.engine.as_str().to_string(),
        "container".into(),
        "inspect".into(),
        "--format".into(),
        "{{.State.Running}}".into(),
        name.to_string(),
    ]
}

/// `podman rm -f -t 0 NAME` / `docker rm -f NAME`: removes a container the server started
/// (`--rm`) that stopped or was killed, whose removal its engine may not have finished.
pub fn container_remove_argv(spec: &ContainerSpec, name: &str) -> Vec<String> {
    let mut argv = vec![spec.engine.as_str().to_string(), "rm".into(), "-f".into()];
    if spec.engine == crate::config::ContainerEngine::Podman {
        argv.extend(["-t".into(), "0".into()]);
    }
    argv.push(name.to_string());
    argv
}

/// `ENGINE start NAME`: starts a kept container again.
pub fn container_start_argv(spec: &ContainerSpec, name: &str) -> Vec<String> {
    vec![
        spec.engine.as_str().to_string(),
        "start".into(),
        name.to_string(),
    ]
}

/// When the server stops: `podman rm -f -t 0 NAME` / `docker rm -f NAME` for a container it
/// started (killed at once and removed: `sleep` as PID 1 ignores SIGTERM), `ENGINE stop -t 0
/// NAME` for a kept one (stopped, not removed); None for a named container (not the server's).
pub fn container_stop_argv(spec: &ContainerSpec, name: &str) -> Option<Vec<String>> {
    let engine = spec.engine.as_str().to_string();
    match (&spec.target, spec.keep) {
        (ContainerTarget::Named(_), _) => None,
        (_, true) => Some(vec![
            engine,
            "stop".into(),
            "-t".into(),
            "0".into(),
            name.to_string(),
        ]),
        (_, false) => Some(container_remove_argv(spec, name)),
    }
}

/// `KUBECTL [--context CONTEXT] exec -i -n NAMESPACE POD [-c CONTAINER] -- WORKER_PATH worker
/// --stdio`.
pub fn kubernetes_argv(spec: &KubernetesSpec) -> Vec<String> {
    let mut argv = vec![spec.kubectl.clone()];
    if let Some(ctx) = &spec.context {
        argv.push("--context".into());
        argv.push(ctx.clone());
    }
    argv.extend([
        "exec".into(),
        "-i".into(),
        "-n".into(),
        spec.namespace.clone(),
        spec.pod.clone(),
    ]);
    if let Some(c) = &spec.container {
        argv.push("-c".into());
        argv.push(c.clone());
    }
    argv.push("--".into());
    argv.extend(worker_tail(&spec.worker_path));
    argv
}

/// The argv whose stdio is the environment's worker; None for `host` (in-process), `worker`
/// (a Unix socket, no argv) and `linux-container` (nothing reaches it).
pub fn stdio_argv(spec: &EnvironmentSpec, ctx: &ArgvContext) -> Option<Vec<String>> {
    match spec {
        EnvironmentSpec::Ssh(s) => Some(ssh_argv(s, &ctx.ssh_control_path)),
        EnvironmentSpec::Container(c) => Some(match &c.target {
            ContainerTarget::Named(n) => container_exec_argv(c, n),
            ContainerTarget::Image(_) | ContainerTarget::Rootfs(_) => {
                container_exec_argv(c, &ctx.container_name)
            }
        }),
        EnvironmentSpec::Kubernetes(k) => Some(kubernetes_argv(k)),
        EnvironmentSpec::Command(argv) => Some(argv.clone()),
        EnvironmentSpec::Host | EnvironmentSpec::Worker(_) | EnvironmentSpec::LinuxContainer => {
            None
        }
    }
}

/// Whether calls that need the environment can run now, and else why (the message of their
/// `ENVIRONMENT_UNAVAILABLE`): `host` (and `linux-container`'s reads) are served in-process;
/// a worker kind is available unless its worker's state (`worker`, from its supervisor) is
/// `unavailable`, and a worker kind without a worker is never available. Nothing ever falls
/// back to the host.
pub fn availability(
    spec: &EnvironmentSpec,
    worker: Option<&crate::wire::WorkerStatus>,
) -> Result<(), String> {
    use crate::wire::WorkerState;
    match (spec, worker) {
        (EnvironmentSpec::Host | EnvironmentSpec::LinuxContainer, _) => Ok(()),
        (_, Some(w)) if w.state == WorkerState::Unavailable => Err(w
            .reason
            .clone()
            .unwrap_or_else(|| "the worker cannot be reached".into())),
        (_, Some(_)) => Ok(()),
        (other, None) => Err(format!(
            "environment kind `{}` has no worker; nothing ran, and nothing runs on the \
             server's host instead",
            other.kind().as_str()
        )),
    }
}

/// `workspace_info.environment` of environment `env`, whose worker (if it has one) is in state
/// `worker`.
pub fn environment_status(
    env: &crate::config::Environment,
    worker: Option<crate::wire::WorkerStatus>,
) -> crate::wire::EnvironmentStatus {
    use crate::wire::{WorkerState, WorkerStatus};
    let worker = match (&env.spec, worker) {
        (EnvironmentSpec::Host | EnvironmentSpec::LinuxContainer, _) => WorkerStatus {
            state: WorkerState::InProcess,
            version: Some(env!("CARGO_PKG_VERSION").to_string()),
            restarts: 0,
            reason: None,
        },
        (_, Some(w)) => w,
        (spec, None) => WorkerStatus {
            state: WorkerState::Unavailable,
            version: None,
            restarts: 0,
            reason: availability(spec, None).err(),
        },
    };
    crate::wire::EnvironmentStatus {
        id: env.id.clone(),
        kind: env.spec.kind().as_str(),
        transport: env.spec.transport().as_str(),
        host: env.spec.host_fact(),
        worker,
    }
}

/// Whether `call`, on a workspace whose environment is served by a worker, is served through
/// the `Runner` seam in this build (so it reaches the worker). A tool still on a host code path
/// is refused with `ENVIRONMENT_UNAVAILABLE` (a worker's workspace has no host root to touch).
/// Routing a tool through the runner adds it here.
pub fn served_through_runner(call: &crate::wire::ToolCall) -> bool {
    use crate::wire::ToolCall as T;
    matches!(
        call,
        T::Read(_)
            | T::Find(_)
            | T::Grep(_)
            | T::FindFiles(_)
            | T::ApplyPatch(_)
            | T::WriteFile(_)
            | T::ExecCommand(_)
            | T::WriteStdin(_)
            | T::ReadProcess(_)
            | T::ProcessStatus(_)
            | T::ProcessResize(_)
            | T::TerminateProcess(_)
    ) || !needs_environment(call)
}

/// Whether `call` needs its workspace's environment (files or processes): every tool but
/// `workspace_info`, `operation_status` and the approval tools, which the server answers itself.
pub fn needs_environment(call: &crate::wire::ToolCall) -> bool {
    use crate::wire::ToolCall as T;
    match call {
        T::Read(_)
        | T::Find(_)
        | T::Grep(_)
        | T::FindFiles(_)
        | T::ApplyPatch(_)
        | T::WriteFile(_)
        | T::ExecCommand(_)
        | T::WriteStdin(_)
        | T::ReadProcess(_)
        | T::ProcessStatus(_)
        | T::ProcessResize(_)
        | T::TerminateProcess(_) => true,
        // The operation ledger (issue 31): a revert writes files; a diff reads the store.
        T::OperationRevert(_) => true,
        T::OperationDiff(_) => false,
        T::WorkspaceInfo(_)
        | T::OperationStatus(_)
        | T::ApprovalCreate(_)
        | T::ApprovalResolve(_)
        | T::OperationResume(_)
        | T::ProcessList(_) => false,
    }
}
