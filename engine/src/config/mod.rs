//! Operator configuration: environments, workspaces, profiles, limits and file locations, loaded
//! from JSON and validated so that an invalid config names the offending field in one line.
//!
//! `error.rs` `ConfigError`; `raw.rs` the file's serde shapes and its JSON Schema; `switches.rs`
//! the typed switches; `environments.rs` the per-kind blocks of an environment; `limits.rs` the limits; `profiles.rs` the profiles; `validate.rs` the
//! checks of single fields; `load.rs` loading and resolving. This file holds the resolved types.
//! The children it re-exports never use an item defined here (that would be an import circle);
//! `load.rs` does, and this file names nothing of it.

use std::collections::BTreeMap;
use std::path::PathBuf;

mod environments;
mod error;
mod hooks;
mod identity;
mod limits;
mod load;
mod profiles;
mod raw;
mod switches;
mod validate;

pub use codespace_policy::config::EnvironmentTransport;
pub use codespace_policy::config::{
    Approvals, BUILTIN_PROFILES, EnvironmentKind, Network, Profile, SandboxMode, TemplateLink,
    TemplateSlots, builtin_profiles, is_env_name,
};
pub use environments::{
    CONTAINER_WORKER_MOUNT, ContainerEngine, ContainerSpec, ContainerTarget, DEFAULT_WORKER_PATH,
    EnvironmentSpec, KubernetesSpec, SshSpec, WorkerSpec,
};
pub use error::ConfigError;
pub use hooks::{Hook, Hooks, MAX_HOOKS_PER_STAGE, SYSTEM_PATH};
pub use identity::{ClaimMap, Identity, OidcAlgorithm, OidcConfig};
pub use limits::{
    DEFAULT_MAX_HASH_BYTES, DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_MAX_PATCH_FILE_BYTES,
    DEFAULT_MAX_SESSIONS_PER_CLIENT, Limits,
};
pub use raw::json_schema;
pub use switches::{ConsoleConfig, LeaseScope, SecretMasking};
pub use validate::{MAX_COMMAND_WRITE_PATHS, default_command_write_paths, io_reason};

/// The id of the implicit local host environment.
pub const LOCAL_ENVIRONMENT: &str = "local";

/// A resolved environment.
#[derive(Debug, Clone)]
pub struct Environment {
    /// Its id.
    pub id: String,
    /// Its kind.
    pub kind: EnvironmentKind,
    /// Its kind's block, typed: how the server reaches its worker.
    pub spec: EnvironmentSpec,
    /// Operator-declared read-only paths of every workspace in it (name → canonical path).
    pub read_paths: BTreeMap<String, PathBuf>,
    /// Directories prepended to its commands' `PATH`.
    pub path: Vec<PathBuf>,
    /// Fixed environment variables of its commands.
    pub env: BTreeMap<String, String>,
    /// The candidate directories of its workspaces' command write scopes, when set.
    pub command_write_paths: Option<Vec<String>>,
}

/// A resolved workspace.
#[derive(Debug, Clone)]
pub struct Workspace {
    /// Its id (a selector, not a credential).
    pub id: String,
    /// Canonical absolute root (never sent on the wire).
    pub root: PathBuf,
    /// Its permission profile.
    pub profile: String,
    /// Its environment id.
    pub environment: String,
    /// The network switch.
    pub network: Network,
    /// The approvals switch.
    pub approvals: Approvals,
    /// Read-only paths its commands may read: its environment's plus its own (name → canonical
    /// path; the names are shown in `workspace_info`, the paths never).
    pub read_paths: BTreeMap<String, PathBuf>,
    /// Its commands' home directory, when the operator set one (else the server picks one
    /// beside the store).
    pub home: Option<PathBuf>,
    /// The sandbox switch.
    pub sandbox: SandboxMode,
    /// The secret-masking switch.
    pub secret_masking: SecretMasking,
    /// Directories prepended to its commands' `PATH`: its own, then its environment's.
    pub path: Vec<PathBuf>,
    /// Fixed environment variables of its commands: its environment's with its own on top.
    pub env: BTreeMap<String, String>,
    /// Whose live foreground processes block its mutations.
    pub lease_scope: LeaseScope,
    /// The candidate directories of its commands' write scopes (normalized workspace-relative
    /// paths, `.` for the root; each checked at load: no symlink on the way, a directory or not
    /// yet there).
    pub command_write_paths: Vec<String>,
    /// The toolchains found at start and added to its read paths (name, read-path name);
    /// see `toolchains.rs`. Empty when the config sets a command `path`.
    pub toolchains: Vec<(String, String)>,
    /// The operator's `before_patch` / `after_patch` hooks (issue 31).
    pub hooks: Hooks,
}

/// An HTTP client identity.
#[derive(Debug, Clone)]
pub struct Client {
    /// The client name (a Cedar fact).
    pub name: String,
    /// Its bearer token.
    pub token: String,
    /// The file the token was read from, when it came from one (a server-owned file).
    pub token_file: Option<PathBuf>,
}

/// The resolved, validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Environments by id (always contains `local`).
    pub environments: BTreeMap<String, Environment>,
    /// Workspaces by id.
    pub workspaces: BTreeMap<String, Workspace>,
    /// Profiles by id (built-ins included).
    pub profiles: BTreeMap<String, Profile>,
    /// The policies directory, or None for the embedded shipped set.
    pub policies_dir: Option<PathBuf>,
    /// The schema file, or None for the embedded schema.
    pub schema_file: Option<PathBuf>,
    /// The store file, or None for the default location.
    pub store: Option<PathBuf>,
    /// Limits.
    pub limits: Limits,
    /// HTTP clients.
    pub clients: BTreeMap<String, Client>,
    /// The config file, when there is one (a server-owned file).
    pub config_file: Option<PathBuf>,
    /// Run `<policies>/tests/*.yaml` against a changed policy set before swapping it in.
    pub policy_tests_on_reload: bool,
    /// `policies.require_signature` with its `allowed_signers`: every live set must be signed.
    pub policy_signing: Option<codespace_policy::set_signature::SigningRule>,
    /// `policies.templates`: the links of the set's templates, linked into every set loaded.
    pub policy_templates: Vec<codespace_policy::config::TemplateLink>,
    /// How long the store keeps audit rows, operations and operation keys.
    pub retention: crate::retention::Retention,
    /// Secret patterns redacted from audit rows and error texts; swapped in place when the
    /// config is reloaded (every clone of the config shares it).
    pub redaction: crate::redact::LiveRedactor,
    /// `export`: the OTLP collector, if any (started by `serve`).
    pub export: crate::telemetry::ExportConfig,
    /// `identity`: the OIDC issuer whose access tokens identify HTTP callers, if any.
    pub identity: Identity,
    /// `console`: the web console of `serve --http` and who operates it.
    pub console: ConsoleConfig,
    /// `skills_dir`: the canonical directory of operator skills, checked at load to lie apart
    /// from everything a command may write or read (issue 31).
    pub skills_dir: Option<PathBuf>,
}

impl Config {
    /// The candidates of the write scope of workspace `id`'s commands (`["."]` for an unknown
    /// workspace).
    pub fn command_write_paths(&self, id: &str) -> Vec<String> {
        self.workspaces
            .get(id)
            .map(|w| w.command_write_paths.clone())
            .unwrap_or_else(default_command_write_paths)
    }
}
