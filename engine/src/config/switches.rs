//! The operator's typed switches: environment kind, network, approvals, sandbox, secret masking
//! and lease scope, each with its one spelling for the config, Cedar and the wire.

use schemars::JsonSchema;
use serde::Deserialize;

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
