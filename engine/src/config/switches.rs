//! The operator's typed switches: environment kind, network, approvals, sandbox, secret masking,
//! lease scope and the web console's, each with its one spelling for the config, Cedar and the wire.

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

/// `console`: the web console served by `serve --http` at `/console` (docs/console.md).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Console")]
pub struct ConsoleConfig {
    /// Serve the console at `/console` (default: true whenever `--http` is on and clients with
    /// tokens are configured).
    #[serde(default)]
    pub enabled: Option<bool>,
    /// The client (or group) names that see the operator pages: the approvals queue with
    /// grant/deny, decisions, policies, processes and operations. Anyone else who signs in
    /// gets 403.
    #[serde(default)]
    pub operators: Vec<String>,
}

impl ConsoleConfig {
    /// Whether `/console` is served (on unless `enabled: false`).
    pub fn is_enabled(&self) -> bool {
        self.enabled.unwrap_or(true)
    }

    /// Whether a signed-in identity (its client name and groups) is an operator.
    pub fn is_operator<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> bool {
        names
            .into_iter()
            .any(|n| self.operators.iter().any(|o| o == n))
    }
}
