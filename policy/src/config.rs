//! The operator-config types the Cedar request model and policy loading need (the workspace's
//! switches, the permission profiles); `codespace_engine::config` re-exports them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The built-in profiles and their parents.
pub const BUILTIN_PROFILES: &[(&str, Option<&str>)] =
    &[("read-only", None), ("workspace-write", Some("read-only"))];

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
