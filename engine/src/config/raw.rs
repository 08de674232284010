//! The config file's serde shapes (`Raw*`, parsed as written) and the JSON Schema derived from them.

use schemars::JsonSchema;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

use super::environments::{RawCommand, RawContainer, RawKubernetes, RawSsh, RawWorker};
use super::limits::Limits;
use super::profiles::RawProfile;
use super::switches::{LeaseScope, SecretMasking};
use codespace_policy::config::{Approvals, EnvironmentKind, Network, SandboxMode};

/// The operator config file (JSON). Every field is optional except at least one workspace.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "CodeSpaceConfig")]
pub(super) struct RawConfig {
    /// Execution environments by id; `local` (kind `host`) always exists.
    #[serde(default)]
    pub(super) environments: BTreeMap<String, RawEnvironment>,
    /// Workspaces by id: the directories the server exposes. At least one is required.
    #[serde(default)]
    #[schemars(extend("minProperties" = 1))]
    pub(super) workspaces: BTreeMap<String, RawWorkspace>,
    /// Operator-written permission profiles by id (the built-ins are `read-only` and
    /// `workspace-write`).
    #[serde(default)]
    pub(super) profiles: BTreeMap<String, RawProfile>,
    /// The policies directory (`base/`, `profiles/`, `tests/`); relative to the config file.
    /// Absent: the shipped policy set embedded in the binary. Or an object: `{dir,
    /// require_signature, allowed_signers, templates}`.
    #[serde(default)]
    pub(super) policies: Option<RawPolicies>,
    /// The Cedar schema file; relative to the config file. Absent: the embedded schema, or
    /// `<policies>/../schema/codespace.cedarschema` when `policies` is set.
    #[serde(default)]
    pub(super) schema: Option<PathBuf>,
    /// The SQLite store (audit log, operations, processes); relative to the config file.
    /// `--store` overrides it. Absent: `<user data dir>/codespace/codespace.db`.
    #[serde(default)]
    pub(super) store: Option<PathBuf>,
    /// Resource limits.
    #[serde(default)]
    pub(super) limits: Limits,
    /// HTTP clients by name, each with a bearer token. None: HTTP is unauthenticated and
    /// loopback-only.
    #[serde(default)]
    pub(super) clients: BTreeMap<String, RawClient>,
    /// Run `<policies>/tests/*.yaml` against a changed policy set before a hot reload swaps
    /// it in; a failing test keeps the running set (default on).
    #[serde(default = "tests_on_reload_default")]
    pub(super) policy_tests_on_reload: bool,
    /// How long the store keeps audit rows, operations and operation keys.
    #[serde(default)]
    pub(super) retention: crate::retention::RawRetention,
    /// The JSON Schema this file follows (for editors); ignored by the server.
    #[serde(default, rename = "$schema")]
    #[allow(dead_code)]
    pub(super) json_schema: Option<String>,
    /// Extra secret patterns redacted from the audit log and error texts.
    #[serde(default)]
    pub(super) redaction: RawRedaction,
    /// Telemetry export: `{otlp: {endpoint, headers, timeout_ms, queue}}` (docs/telemetry.md).
    #[serde(default)]
    pub(super) export: crate::telemetry::ExportConfig,
    /// Who HTTP callers are beyond `clients`: `{oidc: {issuer, audience, jwks_uri, claims,
    /// algorithms}}` (docs/config.md).
    #[serde(default)]
    pub(super) identity: super::identity::Identity,
    /// The web console of `serve --http` (`/console`): `{enabled, operators}` (docs/console.md).
    #[serde(default)]
    pub(super) console: super::switches::ConsoleConfig,
    /// Operator skills (issue 31): an absolute directory of skill folders, each with a
    /// `SKILL.md`, exposed as MCP resources, prompts and SEP-2640 skills (docs/config.md). It
    /// may not lie in (or hold) a workspace root, a command home or a read path.
    #[serde(default)]
    pub(super) skills_dir: Option<PathBuf>,
}

/// `redaction`: extra secret patterns for the audit log and error texts.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(rename = "Redaction")]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawRedaction {
    /// Regular expressions; a named group `secret` marks what to replace.
    pub(super) patterns: Vec<String>,
    /// Keep the built-in patterns [true].
    pub(super) defaults: bool,
}

impl Default for RawRedaction {
    fn default() -> RawRedaction {
        RawRedaction {
            patterns: Vec::new(),
            defaults: true,
        }
    }
}

/// An execution environment.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Environment")]
pub(super) struct RawEnvironment {
    /// `host` [default] (this machine, in-process), `worker`, `ssh`, `container`, `kubernetes`,
    /// `command` (a worker reached through the block of the same name), or `linux-container`
    /// (the old name: loads, but exec and patch fail closed). See docs/environments.md.
    #[serde(default)]
    pub(super) kind: EnvironmentKind,
    /// kind `worker`: `{socket}` (connect) or `{user}` (started as that user).
    #[serde(default)]
    pub(super) worker: Option<RawWorker>,
    /// kind `ssh`: `{host, port, user, identity_file, known_hosts, options, worker_path}`.
    #[serde(default)]
    pub(super) ssh: Option<RawSsh>,
    /// kind `container`: `{engine, name | image | rootfs, keep, worker_path}`.
    #[serde(default)]
    pub(super) container: Option<RawContainer>,
    /// kind `kubernetes`: `{namespace, pod, container, context, kubectl, worker_path}`.
    #[serde(default)]
    pub(super) kubernetes: Option<RawKubernetes>,
    /// kind `command`: `{argv}`, any argv whose stdio is a worker's.
    #[serde(default)]
    pub(super) command: Option<RawCommand>,
    /// Extra read-only paths commands may read (toolchains), by name; absolute.
    #[serde(default)]
    pub(super) read_paths: BTreeMap<String, PathBuf>,
    /// Absolute directories prepended to the commands' `PATH` (toolchain `bin` dirs).
    #[serde(default)]
    pub(super) path: Vec<PathBuf>,
    /// Fixed environment variables of the commands (name → value); the operator's value wins
    /// over a tool call's `env` for the same name.
    #[serde(default)]
    pub(super) env: BTreeMap<String, String>,
    /// The candidate directories of a command's write scope (workspace-relative, `.` for the
    /// root), each decided by Cedar (`process_write`) before a command starts, for every
    /// workspace of this environment that does not set its own [default `["."]`].
    #[serde(default)]
    pub(super) command_write_paths: Option<Vec<String>>,
}

/// A workspace: a directory the server exposes under an id.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Workspace")]
pub(super) struct RawWorkspace {
    /// Absolute path of the directory (required). Never sent to clients.
    #[schemars(with = "PathBuf")]
    pub(super) root: Option<PathBuf>,
    /// The permission profile: a built-in or one under `profiles`.
    #[serde(default)]
    #[schemars(extend("default" = "workspace-write"))]
    pub(super) profile: Option<String>,
    /// The environment id: `local` or one under `environments`.
    #[serde(default)]
    #[schemars(extend("default" = "local"))]
    pub(super) environment: Option<String>,
    /// Whether commands may use the network.
    #[serde(default)]
    pub(super) network: Network,
    /// Whether allowed mutations run at once (`off`) or are held for a human (`confirm`).
    #[serde(default)]
    pub(super) approvals: Approvals,
    /// Extra read-only paths commands may read, by name; added to the environment's.
    #[serde(default)]
    pub(super) read_paths: BTreeMap<String, PathBuf>,
    /// The commands' HOME (absolute, writable by them); default `<store dir>/../homes/<id>`-style
    /// directory the server manages outside every workspace.
    #[serde(default)]
    pub(super) home: Option<PathBuf>,
    /// `required` (default): commands run only inside the sandbox; `off`: the operator's opt-out.
    #[serde(default)]
    pub(super) sandbox: SandboxMode,
    /// `required` (default): commands never see paths policy withholds from `read`; `off`: opt out.
    #[serde(default)]
    pub(super) secret_masking: SecretMasking,
    /// Absolute directories prepended to the commands' `PATH`, before the environment's.
    #[serde(default)]
    pub(super) path: Vec<PathBuf>,
    /// Fixed environment variables of the commands; added to the environment's (the workspace's
    /// value wins); the operator's value wins over a tool call's `env` for the same name.
    #[serde(default)]
    pub(super) env: BTreeMap<String, String>,
    /// Whose live foreground processes block a mutation: every client's (`workspace`) or only
    /// the caller's own (`client`). Background processes never hold the lease.
    #[serde(default)]
    pub(super) lease_scope: LeaseScope,
    /// The candidate directories of a command's write scope (workspace-relative, `.` for the
    /// root): before a command starts, Cedar decides `process_write` for each of them, for the
    /// command's `cwd` and for `.git`; the command may write beneath the allowed ones only, and
    /// a denied one beneath an allowed one is mounted read-only. Default: the environment's,
    /// else `["."]`.
    #[serde(default)]
    pub(super) command_write_paths: Option<Vec<String>>,
    /// Deterministic commands around `apply_patch` (issue 31): `before_patch` ones must exit 0
    /// on the staged patched tree, `after_patch` ones run after the commit. Each is decided by
    /// Cedar (action `hook`) and runs sandboxed.
    #[serde(default)]
    pub(super) hooks: Option<super::hooks::RawHooks>,
}

/// An HTTP client identity: exactly one of `token` and `token_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Client")]
pub(super) struct RawClient {
    /// The bearer token inline (at least 16 characters).
    #[serde(default)]
    pub(super) token: Option<String>,
    /// A file holding the bearer token (read once at start, surrounding whitespace ignored);
    /// relative to the config file.
    #[serde(default)]
    pub(super) token_file: Option<PathBuf>,
}

/// The JSON Schema (draft 2020-12) of the config file, generated from the types `load` parses.
pub fn json_schema() -> serde_json::Value {
    let mut schema = serde_json::to_value(schemars::schema_for!(RawConfig)).unwrap_or_default();
    // `workspaces` has a serde default (so a missing key gets the field-naming error below),
    // but the loader requires at least one workspace: say so in the schema.
    if let Some(top) = schema.as_object_mut() {
        top.insert("required".into(), serde_json::json!(["workspaces"]));
    }
    schema
}

/// `policy_tests_on_reload` when the config does not say: on, so a set that fails its own
/// tests does not go live.
fn tests_on_reload_default() -> bool {
    true
}

/// `policies`: the directory, or the directory with its signature requirement.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(untagged)]
pub(super) enum RawPolicies {
    /// The policies directory.
    Dir(PathBuf),
    /// The directory and how its sets must be signed.
    Block(RawPoliciesBlock),
}

/// `policies` as an object.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPoliciesBlock {
    /// The policies directory; relative to the config file.
    pub(super) dir: PathBuf,
    /// Refuse (at start-up and on every hot reload) a set without a good SSH signature
    /// (`<dir>/policy-set.sig`, made by `codespace policy sign`) by a key of `allowed_signers`.
    #[serde(default)]
    pub(super) require_signature: bool,
    /// Absolute path of an OpenSSH `allowed_signers` file (the format git uses) naming the keys
    /// that may sign a set.
    #[serde(default)]
    pub(super) allowed_signers: Option<PathBuf>,
    /// Links of the set's Cedar templates (policies with `?principal`/`?resource`): each names a
    /// template by `@id`, fills its slots, and with `workspaces` makes one linked policy per
    /// workspace (`?resource` = that workspace). A template no link names never applies.
    #[serde(default)]
    pub(super) templates: Vec<codespace_policy::config::TemplateLink>,
}
