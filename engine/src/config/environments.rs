//! `environments.<id>`'s per-kind blocks (`worker`, `ssh`, `container`, `kubernetes`, `command`):
//! their serde shapes, the typed [`EnvironmentSpec`] they resolve to, and the checks, each error
//! naming the field path. A well-formed environment is never refused at load for what only a run
//! can tell (a missing binary, a host key, a container that does not exist): that makes it
//! unavailable at run time (`ENVIRONMENT_UNAVAILABLE`), see docs/environments.md.

use codespace_policy::config::{EnvironmentKind, EnvironmentTransport};
use schemars::JsonSchema;
use serde::Deserialize;
use std::path::PathBuf;

use super::error::ConfigError;

/// The worker path an `ssh`, named-`container` or `kubernetes` environment runs by default.
pub const DEFAULT_WORKER_PATH: &str = "codespace";
/// Where a container the server starts sees the host's worker binary (mounted read-only).
pub const CONTAINER_WORKER_MOUNT: &str = "/codespace";

/// `environments.<id>.worker`: a `codespace worker` on this machine.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "WorkerEnvironment")]
pub(super) struct RawWorker {
    /// Connect to a worker already listening on this Unix socket (absolute path).
    #[serde(default)]
    pub(super) socket: Option<PathBuf>,
    /// Start `codespace worker --socket` as this user.
    #[serde(default)]
    pub(super) user: Option<String>,
    /// With `socket`: the file holding the secret line the worker was started with (absolute
    /// path; without it the environment is unavailable: the worker answers no one else).
    #[serde(default)]
    pub(super) secret_file: Option<PathBuf>,
    /// With `socket`: the uid the worker must run as (its peer credentials) [the server's own].
    #[serde(default)]
    pub(super) uid: Option<u32>,
}

/// `environments.<id>.ssh`: a worker on a remote host over one multiplexed ssh session.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "SshEnvironment")]
pub(super) struct RawSsh {
    /// The host name or address (required).
    #[serde(default)]
    pub(super) host: Option<String>,
    /// The port [22].
    #[serde(default)]
    pub(super) port: Option<u16>,
    /// The remote user (else ssh's default).
    #[serde(default)]
    pub(super) user: Option<String>,
    /// The private key (absolute path; else ssh's default keys).
    #[serde(default)]
    pub(super) identity_file: Option<PathBuf>,
    /// The `known_hosts` file the host key is checked against (absolute path; required).
    #[serde(default)]
    pub(super) known_hosts: Option<PathBuf>,
    /// Extra ssh options, each `Name=value` (passed as `-o Name=value`); the host-key, batch and
    /// multiplexing options are the server's and cannot be overridden.
    #[serde(default)]
    pub(super) options: Vec<String>,
    /// The worker binary on the host ["codespace"].
    #[serde(default)]
    pub(super) worker_path: Option<String>,
}

/// The container engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ContainerEngine {
    /// `podman` (the default).
    #[default]
    Podman,
    /// `docker`.
    Docker,
}

impl ContainerEngine {
    /// The program (and config spelling).
    pub fn as_str(self) -> &'static str {
        match self {
            ContainerEngine::Podman => "podman",
            ContainerEngine::Docker => "docker",
        }
    }
}

/// `environments.<id>.container`: a worker in a podman or docker container.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "ContainerEnvironment")]
pub(super) struct RawContainer {
    /// `podman` [default] or `docker`.
    #[serde(default)]
    pub(super) engine: ContainerEngine,
    /// Exec into this running container (exclusive with `image` and `rootfs`).
    #[serde(default)]
    pub(super) name: Option<String>,
    /// Start a container from this image (no pull is forced; the engine's rules apply).
    #[serde(default)]
    pub(super) image: Option<String>,
    /// Start a container from this root file system (absolute path).
    #[serde(default)]
    pub(super) rootfs: Option<PathBuf>,
    /// Keep the started container when the server stops (stopped, not removed) [false].
    #[serde(default)]
    pub(super) keep: bool,
    /// The worker binary in the container ["codespace" for `name`, "/codespace" (the host's
    /// binary, mounted read-only) for `image` and `rootfs`].
    #[serde(default)]
    pub(super) worker_path: Option<String>,
}

/// `environments.<id>.kubernetes`: a worker in a pod, through `kubectl exec -i`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "KubernetesEnvironment")]
pub(super) struct RawKubernetes {
    /// The namespace (required).
    #[serde(default)]
    pub(super) namespace: Option<String>,
    /// The pod (required).
    #[serde(default)]
    pub(super) pod: Option<String>,
    /// The container in the pod (else the pod's default).
    #[serde(default)]
    pub(super) container: Option<String>,
    /// The kubeconfig context (else the current one).
    #[serde(default)]
    pub(super) context: Option<String>,
    /// The kubectl program ["kubectl"].
    #[serde(default)]
    pub(super) kubectl: Option<String>,
    /// The worker binary in the container ["codespace"].
    #[serde(default)]
    pub(super) worker_path: Option<String>,
}

/// `environments.<id>.command`: any argv whose stdio is a worker's.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "CommandEnvironment")]
pub(super) struct RawCommand {
    /// The argv (required, non-empty; `argv[0]` is looked up on the server's `PATH`).
    #[serde(default)]
    pub(super) argv: Vec<String>,
}

/// The per-kind blocks of one `environments.<id>` as written.
#[derive(Debug, Default)]
pub(super) struct RawBlocks {
    pub(super) worker: Option<RawWorker>,
    pub(super) ssh: Option<RawSsh>,
    pub(super) container: Option<RawContainer>,
    pub(super) kubernetes: Option<RawKubernetes>,
    pub(super) command: Option<RawCommand>,
}

/// How a `worker` environment's worker is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkerSpec {
    /// Connect to this socket.
    Socket {
        /// The socket.
        path: PathBuf,
        /// The secret line's file.
        secret_file: Option<PathBuf>,
        /// The worker's uid (else the server's own).
        uid: Option<u32>,
    },
    /// Start `codespace worker --socket` as this user.
    User(String),
}

/// A resolved `ssh` block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshSpec {
    /// Host name or address.
    pub host: String,
    /// Port.
    pub port: u16,
    /// Remote user.
    pub user: Option<String>,
    /// Private key.
    pub identity_file: Option<PathBuf>,
    /// The `known_hosts` the host key is checked against.
    pub known_hosts: PathBuf,
    /// Extra `-o` options (`Name=value`).
    pub options: Vec<String>,
    /// The worker binary on the host.
    pub worker_path: String,
}

/// Which container a `container` environment's worker runs in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContainerTarget {
    /// A running container, by name (`exec -i` into it).
    Named(String),
    /// A container the server starts from this image.
    Image(String),
    /// A container the server starts from this root file system.
    Rootfs(PathBuf),
}

/// A resolved `container` block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerSpec {
    /// podman or docker.
    pub engine: ContainerEngine,
    /// Which container.
    pub target: ContainerTarget,
    /// Keep a started container when the server stops.
    pub keep: bool,
    /// The worker binary in the container.
    pub worker_path: String,
}

/// A resolved `kubernetes` block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubernetesSpec {
    /// Namespace.
    pub namespace: String,
    /// Pod.
    pub pod: String,
    /// Container in the pod.
    pub container: Option<String>,
    /// kubeconfig context.
    pub context: Option<String>,
    /// The kubectl program.
    pub kubectl: String,
    /// The worker binary in the container.
    pub worker_path: String,
}

/// What an environment is and how the server reaches its worker, typed after parse.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum EnvironmentSpec {
    /// In-process on this host.
    #[default]
    Host,
    /// A worker on this machine over a Unix socket.
    Worker(WorkerSpec),
    /// A worker over ssh.
    Ssh(SshSpec),
    /// A worker in a container.
    Container(ContainerSpec),
    /// A worker in a Kubernetes pod.
    Kubernetes(KubernetesSpec),
    /// A worker on the stdio of this argv.
    Command(Vec<String>),
    /// The old `linux-container`: loads, exec and patch fail closed.
    LinuxContainer,
}

impl EnvironmentSpec {
    /// The kind.
    pub fn kind(&self) -> EnvironmentKind {
        match self {
            EnvironmentSpec::Host => EnvironmentKind::Host,
            EnvironmentSpec::Worker(_) => EnvironmentKind::Worker,
            EnvironmentSpec::Ssh(_) => EnvironmentKind::Ssh,
            EnvironmentSpec::Container(_) => EnvironmentKind::Container,
            EnvironmentSpec::Kubernetes(_) => EnvironmentKind::Kubernetes,
            EnvironmentSpec::Command(_) => EnvironmentKind::Command,
            EnvironmentSpec::LinuxContainer => EnvironmentKind::LinuxContainer,
        }
    }

    /// `resource.workspace.environment.transport`.
    pub fn transport(&self) -> EnvironmentTransport {
        match self {
            EnvironmentSpec::Host => EnvironmentTransport::InProcess,
            EnvironmentSpec::Worker(_) => EnvironmentTransport::Unix,
            EnvironmentSpec::Ssh(_) => EnvironmentTransport::Ssh,
            EnvironmentSpec::Container(c) => match c.engine {
                ContainerEngine::Podman => EnvironmentTransport::Podman,
                ContainerEngine::Docker => EnvironmentTransport::Docker,
            },
            EnvironmentSpec::Kubernetes(_) => EnvironmentTransport::Kubectl,
            EnvironmentSpec::Command(_) => EnvironmentTransport::Command,
            EnvironmentSpec::LinuxContainer => EnvironmentTransport::None,
        }
    }

    /// `resource.workspace.environment.host`: the ssh host (lower-cased), the container's name
    /// (or its image / root file system), `namespace/pod`; "" where the worker runs on this
    /// machine or behind an operator's argv.
    pub fn host_fact(&self) -> String {
        match self {
            EnvironmentSpec::Ssh(s) => s.host.to_ascii_lowercase(),
            EnvironmentSpec::Container(c) => match &c.target {
                ContainerTarget::Named(n) => n.clone(),
                ContainerTarget::Image(i) => i.clone(),
                ContainerTarget::Rootfs(p) => p.display().to_string(),
            },
            EnvironmentSpec::Kubernetes(k) => format!("{}/{}", k.namespace, k.pod),
            EnvironmentSpec::Host
            | EnvironmentSpec::Worker(_)
            | EnvironmentSpec::Command(_)
            | EnvironmentSpec::LinuxContainer => String::new(),
        }
    }
}

/// A word that becomes one argv element of ssh, podman or kubectl: non-empty, no whitespace or
/// control characters, and not starting with `-` (it would be read as an option).
fn word(field: &str, value: &str) -> Result<String, ConfigError> {
    if value.is_empty() {
        return Err(ConfigError(format!("{field}: must not be empty")));
    }
    if value.starts_with('-') {
        return Err(ConfigError(format!(
            "{field}: `{value}` must not start with `-` (it would be read as an option)"
        )));
    }
    if value.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(ConfigError(format!(
            "{field}: `{value}` must not contain spaces or control characters"
        )));
    }
    Ok(value.to_string())
}

/// A worker path: a bare program name or an absolute path of letters, digits and `/._+-` (an
/// ssh remote command goes through the remote shell: nothing in it may be shell syntax).
fn worker_path(field: &str, value: Option<String>, default: &str) -> Result<String, ConfigError> {
    let value = value.unwrap_or_else(|| default.to_string());
    let ok = !value.is_empty()
        && !value.starts_with('-')
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '_' | '+' | '-'));
    if !ok {
        return Err(ConfigError(format!(
            "{field}: `{value}` must be a program name or an absolute path of letters, digits and `/._+-`"
        )));
    }
    Ok(value)
}

fn absolute(field: &str, path: PathBuf) -> Result<PathBuf, ConfigError> {
    if !path.is_absolute() {
        return Err(ConfigError(format!("{field}: must be an absolute path")));
    }
    Ok(path)
}

/// ssh options the server sets itself (host-key checking, batch mode, multiplexing).
const RESERVED_SSH_OPTIONS: &[&str] = &[
    "batchmode",
    "stricthostkeychecking",
    "userknownhostsfile",
    "globalknownhostsfile",
    "controlmaster",
    "controlpath",
    "controlpersist",
    "port",
    "identityfile",
    "user",
    "hostname",
];

fn ssh_option(field: &str, opt: &str) -> Result<String, ConfigError> {
    let Some((name, value)) = opt.split_once('=') else {
        return Err(ConfigError(format!(
            "{field}: `{opt}` must be `Name=value`"
        )));
    };
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric()) || value.is_empty() {
        return Err(ConfigError(format!(
            "{field}: `{opt}` must be `Name=value`"
        )));
    }
    if RESERVED_SSH_OPTIONS.contains(&name.to_ascii_lowercase().as_str()) {
        return Err(ConfigError(format!(
            "{field}: `{name}` is set by the server (host keys are always checked against `known_hosts`)"
        )));
    }
    if opt.chars().any(char::is_control) {
        return Err(ConfigError(format!(
            "{field}: `{opt}` must not contain control characters"
        )));
    }
    Ok(opt.to_string())
}

/// Resolves `environments.<id>`'s kind and blocks: the block of its kind is required (but for
/// `host` and `linux-container`, which have none), a block of another kind is an error.
pub(super) fn resolve(
    id: &str,
    kind: EnvironmentKind,
    blocks: RawBlocks,
) -> Result<EnvironmentSpec, ConfigError> {
    let at = |block: &str| format!("environments.{id}.{block}");
    let given = [
        ("worker", blocks.worker.is_some(), EnvironmentKind::Worker),
        ("ssh", blocks.ssh.is_some(), EnvironmentKind::Ssh),
        (
            "container",
            blocks.container.is_some(),
            EnvironmentKind::Container,
        ),
        (
            "kubernetes",
            blocks.kubernetes.is_some(),
            EnvironmentKind::Kubernetes,
        ),
        (
            "command",
            blocks.command.is_some(),
            EnvironmentKind::Command,
        ),
    ];
    for (name, set, its_kind) in given {
        if set && its_kind != kind {
            return Err(ConfigError(format!(
                "{}: only for kind `{name}` (this environment's kind is `{}`)",
                at(name),
                kind.as_str()
            )));
        }
    }
    let missing = |name: &str| ConfigError(format!("{}: required for kind `{name}`", at(name)));
    match kind {
        EnvironmentKind::Host => Ok(EnvironmentSpec::Host),
        EnvironmentKind::LinuxContainer => Ok(EnvironmentSpec::LinuxContainer),
        EnvironmentKind::Worker => {
            let w = blocks.worker.ok_or_else(|| missing("worker"))?;
            match (w.socket, w.user) {
                (Some(socket), None) => Ok(EnvironmentSpec::Worker(WorkerSpec::Socket {
                    path: absolute(&format!("{}.socket", at("worker")), socket)?,
                    secret_file: w
                        .secret_file
                        .map(|f| absolute(&format!("{}.secret_file", at("worker")), f))
                        .transpose()?,
                    uid: w.uid,
                })),
                (None, Some(_)) if w.secret_file.is_some() || w.uid.is_some() => {
                    Err(ConfigError(format!(
                        "{}: `secret_file` and `uid` go with `socket` (the server makes the secret \
                         of a worker it starts)",
                        at("worker")
                    )))
                }
                (None, Some(user)) => Ok(EnvironmentSpec::Worker(WorkerSpec::User(word(
                    &format!("{}.user", at("worker")),
                    &user,
                )?))),
                _ => Err(ConfigError(format!(
                    "{}: set exactly one of `socket` and `user`",
                    at("worker")
                ))),
            }
        }
        EnvironmentKind::Ssh => {
            let s = blocks.ssh.ok_or_else(|| missing("ssh"))?;
            let f = |name: &str| format!("{}.{name}", at("ssh"));
            let host = s
                .host
                .ok_or_else(|| ConfigError(format!("{}: missing", f("host"))))?;
            let host = word(&f("host"), &host)?;
            if host.contains('@') {
                return Err(ConfigError(format!(
                    "{}: `{host}` must be a host alone (the user goes in `user`)",
                    f("host")
                )));
            }
            let port = s.port.unwrap_or(22);
            if port == 0 {
                return Err(ConfigError(format!("{}: must be 1-65535", f("port"))));
            }
            let user = s.user.map(|u| word(&f("user"), &u)).transpose()?;
            if let Some(u) = &user
                && u.contains('@')
            {
                return Err(ConfigError(format!(
                    "{}: `{u}` must not contain `@`",
                    f("user")
                )));
            }
            let identity_file = s
                .identity_file
                .map(|p| absolute(&f("identity_file"), p))
                .transpose()?;
            let known_hosts = s.known_hosts.ok_or_else(|| {
                ConfigError(format!(
                    "{}: required (the host key is checked against it; no key is trusted on first use)",
                    f("known_hosts")
                ))
            })?;
            let known_hosts = absolute(&f("known_hosts"), known_hosts)?;
            let options = s
                .options
                .iter()
                .enumerate()
                .map(|(i, o)| ssh_option(&format!("{}[{i}]", f("options")), o))
                .collect::<Result<Vec<_>, _>>()?;
            let worker_path = worker_path(&f("worker_path"), s.worker_path, DEFAULT_WORKER_PATH)?;
            Ok(EnvironmentSpec::Ssh(SshSpec {
                host,
                port,
                user,
                identity_file,
                known_hosts,
                options,
                worker_path,
            }))
        }
        EnvironmentKind::Container => {
            let c = blocks.container.ok_or_else(|| missing("container"))?;
            let f = |name: &str| format!("{}.{name}", at("container"));
            let target = match (c.name, c.image, c.rootfs) {
                (Some(name), None, None) => {
                    if c.keep {
                        return Err(ConfigError(format!(
                            "{}: only for a container the server starts (`image` or `rootfs`)",
                            f("keep")
                        )));
                    }
                    ContainerTarget::Named(word(&f("name"), &name)?)
                }
                (None, Some(image), None) => ContainerTarget::Image(word(&f("image"), &image)?),
                (None, None, Some(rootfs)) => {
                    ContainerTarget::Rootfs(absolute(&f("rootfs"), rootfs)?)
                }
                _ => {
                    return Err(ConfigError(format!(
                        "{}: set exactly one of `name`, `image` and `rootfs`",
                        at("container")
                    )));
                }
            };
            let default = match target {
                ContainerTarget::Named(_) => DEFAULT_WORKER_PATH,
                ContainerTarget::Image(_) | ContainerTarget::Rootfs(_) => CONTAINER_WORKER_MOUNT,
            };
            let worker_path = worker_path(&f("worker_path"), c.worker_path, default)?;
            Ok(EnvironmentSpec::Container(ContainerSpec {
                engine: c.engine,
                target,
                keep: c.keep,
                worker_path,
            }))
        }
        EnvironmentKind::Kubernetes => {
            let k = blocks.kubernetes.ok_or_else(|| missing("kubernetes"))?;
            let f = |name: &str| format!("{}.{name}", at("kubernetes"));
            let req = |name: &str, v: Option<String>| {
                let v = v.ok_or_else(|| ConfigError(format!("{}: missing", f(name))))?;
                word(&f(name), &v)
            };
            let namespace = req("namespace", k.namespace)?;
            let pod = req("pod", k.pod)?;
            let container = k.container.map(|c| word(&f("container"), &c)).transpose()?;
            let context = k.context.map(|c| word(&f("context"), &c)).transpose()?;
            let kubectl = word(&f("kubectl"), k.kubectl.as_deref().unwrap_or("kubectl"))?;
            let worker_path = worker_path(&f("worker_path"), k.worker_path, DEFAULT_WORKER_PATH)?;
            Ok(EnvironmentSpec::Kubernetes(KubernetesSpec {
                namespace,
                pod,
                container,
                context,
                kubectl,
                worker_path,
            }))
        }
        EnvironmentKind::Command => {
            let c = blocks.command.ok_or_else(|| missing("command"))?;
            let Some(first) = c.argv.first() else {
                return Err(ConfigError(format!(
                    "{}.argv: must name at least the program",
                    at("command")
                )));
            };
            if first.is_empty() {
                return Err(ConfigError(format!(
                    "{}.argv[0]: must not be empty",
                    at("command")
                )));
            }
            if let Some(i) = c.argv.iter().position(|a| a.contains('\0')) {
                return Err(ConfigError(format!(
                    "{}.argv[{i}]: must not contain NUL",
                    at("command")
                )));
            }
            Ok(EnvironmentSpec::Command(c.argv))
        }
    }
}
