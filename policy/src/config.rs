//! The operator-config types the Cedar request model and policy loading need (the workspace's
//! switches, the permission profiles); `codespace_engine::config` re-exports them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The built-in profiles and their parents.
pub const BUILTIN_PROFILES: &[(&str, Option<&str>)] =
    &[("read-only", None), ("workspace-write", Some("read-only"))];

/// Environment kinds (`environments.<id>.kind`): where a workspace's files live and its
/// commands run. Spelled the same in the config, Cedar (`resource.workspace.environment.kind`),
/// the audit rows and `workspace_info`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum EnvironmentKind {
    /// The local host, served in-process.
    #[default]
    Host,
    /// A `codespace worker` on this machine reached over a Unix socket (`worker.socket`), or
    /// started by the server as another user (`worker.user`).
    Worker,
    /// A `codespace worker --stdio` on a remote host over one multiplexed `ssh` session.
    Ssh,
    /// A worker inside a podman or docker container (`exec -i` into a named one, or one the
    /// server starts from an image or a root file system).
    Container,
    /// A worker inside a Kubernetes pod (`kubectl exec -i`).
    Kubernetes,
    /// Any argv whose stdio is a worker's.
    Command,
    /// The old name (kept so existing configs load): exec and patch fail closed.
    LinuxContainer,
}

impl EnvironmentKind {
    /// Every kind, in documentation order.
    pub const ALL: &'static [EnvironmentKind] = &[
        EnvironmentKind::Host,
        EnvironmentKind::Worker,
        EnvironmentKind::Ssh,
        EnvironmentKind::Container,
        EnvironmentKind::Kubernetes,
        EnvironmentKind::Command,
        EnvironmentKind::LinuxContainer,
    ];

    /// Wire and Cedar spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            EnvironmentKind::Host => "host",
            EnvironmentKind::Worker => "worker",
            EnvironmentKind::Ssh => "ssh",
            EnvironmentKind::Container => "container",
            EnvironmentKind::Kubernetes => "kubernetes",
            EnvironmentKind::Command => "command",
            EnvironmentKind::LinuxContainer => "linux-container",
        }
    }
}

/// How the server reaches an environment's worker
/// (`resource.workspace.environment.transport`): the program or channel that carries its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum EnvironmentTransport {
    /// No worker: the server itself (`host`).
    #[default]
    InProcess,
    /// A Unix socket to a worker on this machine (`worker`).
    Unix,
    /// `ssh` (`ssh`).
    Ssh,
    /// `podman exec -i` (`container` with engine podman).
    Podman,
    /// `docker exec -i` (`container` with engine docker).
    Docker,
    /// `kubectl exec -i` (`kubernetes`).
    Kubectl,
    /// The operator's argv (`command`).
    Command,
    /// Nothing reaches it (`linux-container`, which fails closed).
    None,
}

impl EnvironmentTransport {
    /// Wire and Cedar spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            EnvironmentTransport::InProcess => "in-process",
            EnvironmentTransport::Unix => "unix",
            EnvironmentTransport::Ssh => "ssh",
            EnvironmentTransport::Podman => "podman",
            EnvironmentTransport::Docker => "docker",
            EnvironmentTransport::Kubectl => "kubectl",
            EnvironmentTransport::Command => "command",
            EnvironmentTransport::None => "none",
        }
    }
}

/// The operator's network switch for a workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Network {
    /// Commands get no network (when the sandbox can enforce it).
    #[default]
    Restricted,
    /// Commands may use the network.
    Enabled,
    /// Commands reach the network only through the server's egress proxy, one Cedar decision
    /// (`network_connect`) per connection (see docs/security.md).
    Proxy,
}

impl Network {
    /// Wire and Cedar spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Network::Restricted => "restricted",
            Network::Enabled => "enabled",
            Network::Proxy => "proxy",
        }
    }
}

/// The operator's approvals switch for a workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Approvals {
    /// Allowed mutations run.
    #[default]
    Off,
    /// Allowed mutations are held for a human (approval tools come later; until then they fail closed).
    Confirm,
}

impl Approvals {
    /// Wire and Cedar spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Approvals::Off => "off",
            Approvals::Confirm => "confirm",
        }
    }
}

/// The operator's sandbox switch for a workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// Commands run only inside the command sandbox; where it is unavailable they are refused.
    #[default]
    Required,
    /// The operator's explicit opt-out: commands run without the command sandbox.
    Off,
}

impl SandboxMode {
    /// Wire and Cedar spelling (`resource.workspace.sandbox`).
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::Required => "required",
            SandboxMode::Off => "off",
        }
    }
}

/// A permission profile (built-in or operator-written).
#[derive(Debug, Clone)]
pub struct Profile {
    /// Its id.
    pub id: String,
    /// The profile it extends (its Cedar entity parent).
    pub extends: Option<String>,
    /// Free text.
    pub description: Option<String>,
}

/// The built-in profiles (`read-only`, and `workspace-write` extending it).
pub fn builtin_profiles() -> BTreeMap<String, Profile> {
    BUILTIN_PROFILES
        .iter()
        .map(|(id, parent)| {
            (
                (*id).to_string(),
                Profile {
                    id: (*id).to_string(),
                    extends: parent.map(str::to_string),
                    description: None,
                },
            )
        })
        .collect()
}

/// Whether `name` is a valid environment variable name: a letter or `_`, then letters, digits
/// and `_` (the portable shell rule), at most 256 bytes.
pub fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= 256
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// One link of `policies.templates`: a template of the policy set (by its `@id`) with its slots
/// filled. `workspaces` fills `?resource` with each listed workspace (one linked policy per
/// workspace); `slots.resource` fills it with any entity. Give one of the two for a template
/// with `?resource`, neither for one without.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TemplateLink {
    /// The `@id` of a template (a policy with `?principal` and/or `?resource`) of the set.
    pub template: String,
    /// Slot values as Cedar entity uids (`PermissionProfile::"tester"`; the `CodeSpace::`
    /// namespace is added when the type names none).
    #[serde(default)]
    pub slots: TemplateSlots,
    /// Workspace ids: one linked policy per workspace with `?resource` =
    /// `Workspace::"<id>"` (so it applies to that workspace's operations only).
    #[serde(default)]
    pub workspaces: Vec<String>,
}

/// The slot values of a [`TemplateLink`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TemplateSlots {
    /// `?principal`, e.g. `PermissionProfile::"tester"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// `?resource`, e.g. `Workspace::"api"` (exclusive with the link's `workspaces`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
}
