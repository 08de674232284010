//! The operator's typed switches: environment kind, network, approvals, sandbox, secret masking
//! and lease scope, each with its one spelling for the config, Cedar and the wire.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Environment kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum EnvironmentKind {
    /// The local host.
    #[default]
    Host,
    /// Loads, but exec and patch fail closed.
    LinuxContainer,
}

impl EnvironmentKind {
    /// Wire and Cedar spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            EnvironmentKind::Host => "host",
            EnvironmentKind::LinuxContainer => "linux-container",
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

/// The operator's secret-masking switch for a workspace: whether commands must have the paths
/// policy withholds from `read` masked (see docs/security.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum SecretMasking {
    /// Commands run only with masks in place; where masks cannot be enforced the shipped
    /// guardrail refuses `exec_command`.
    #[default]
    Required,
    /// The operator opted out: commands see every file of the workspace.
    Off,
}

impl SecretMasking {
    /// Config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            SecretMasking::Required => "required",
            SecretMasking::Off => "off",
        }
    }
}

/// Whose live foreground processes block a workspace's mutations (`workspaces.<id>.lease_scope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum LeaseScope {
    /// A live foreground process blocks every client's patches and commands in its workspace.
    #[default]
    Workspace,
    /// A live foreground process blocks only its own client's patches and commands.
    Client,
}

impl LeaseScope {
    /// Config and wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            LeaseScope::Workspace => "workspace",
            LeaseScope::Client => "client",
        }
    }
}
