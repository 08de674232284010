//! Operator configuration: environments, workspaces, profiles, limits and file locations, loaded
//! from JSON and validated so that an invalid config names the offending field in one line.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use codespace_policy::config::{
    Approvals, BUILTIN_PROFILES, EnvironmentKind, Network, Profile, SandboxMode, builtin_profiles,
    is_env_name,
};

/// The id of the implicit local host environment.
pub const LOCAL_ENVIRONMENT: &str = "local";

/// A config that cannot be used; the message names the field.
#[derive(Debug, thiserror::Error)]
#[error("invalid config: {0}")]
pub struct ConfigError(pub String);

/// The operator config file (JSON). Every field is optional except at least one workspace.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "CodeSpaceConfig")]
struct RawConfig {
    /// Execution environments by id; `local` (kind `host`) always exists.
    #[serde(default)]
    environments: BTreeMap<String, RawEnvironment>,
    /// Workspaces by id: the directories the server exposes. At least one is required.
    #[serde(default)]
    #[schemars(extend("minProperties" = 1))]
    workspaces: BTreeMap<String, RawWorkspace>,
    /// Operator-written permission profiles by id (the built-ins are `read-only` and
    /// `workspace-write`).
    #[serde(default)]
    profiles: BTreeMap<String, RawProfile>,
    /// The policies directory (`base/`, `profiles/`, `tests/`); relative to the config file.
    /// Absent: the shipped policy set embedded in the binary.
    #[serde(default)]
    policies: Option<PathBuf>,
    /// The Cedar schema file; relative to the config file. Absent: the embedded schema, or
    /// `<policies>/../schema/codespace.cedarschema` when `policies` is set.
    #[serde(default)]
    schema: Option<PathBuf>,
    /// The SQLite store (audit log, operations, processes); relative to the config file.
    /// `--store` overrides it. Absent: `<user data dir>/codespace/codespace.db`.
    #[serde(default)]
    store: Option<PathBuf>,
    /// Resource limits.
    #[serde(default)]
    limits: Limits,
    /// HTTP clients by name, each with a bearer token. None: HTTP is unauthenticated and
    /// loopback-only.
    #[serde(default)]
    clients: BTreeMap<String, RawClient>,
    /// Run `<policies>/tests/*.yaml` against a changed policy set before a hot reload swaps
    /// it in; a failing test keeps the running set.
    #[serde(default)]
    policy_tests_on_reload: bool,
    /// How long the store keeps audit rows, operations and operation keys.
    #[serde(default)]
    retention: crate::retention::RawRetention,
    /// The JSON Schema this file follows (for editors); ignored by the server.
    #[serde(default, rename = "$schema")]
    #[allow(dead_code)]
    json_schema: Option<String>,
    /// Extra secret patterns redacted from the audit log and error texts.
    #[serde(default)]
    redaction: RawRedaction,
}

/// `redaction`: extra secret patterns for the audit log and error texts.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(rename = "Redaction")]
#[serde(deny_unknown_fields, default)]
struct RawRedaction {
    /// Regular expressions; a named group `secret` marks what to replace.
    patterns: Vec<String>,
    /// Keep the built-in patterns [true].
    defaults: bool,
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
struct RawEnvironment {
    /// `host` (the local machine) or `linux-container` (loads, but exec and patch fail closed).
    kind: EnvironmentKind,
    /// Extra read-only paths commands may read (toolchains), by name; absolute.
    #[serde(default)]
    read_paths: BTreeMap<String, PathBuf>,
    /// Absolute directories prepended to the commands' `PATH` (toolchain `bin` dirs).
    #[serde(default)]
    path: Vec<PathBuf>,
    /// Fixed environment variables of the commands (name → value); the operator's value wins
    /// over a tool call's `env` for the same name.
    #[serde(default)]
    env: BTreeMap<String, String>,
    /// The candidate directories of a command's write scope (workspace-relative, `.` for the
    /// root), each decided by Cedar (`process_write`) before a command starts, for every
    /// workspace of this environment that does not set its own [default `["."]`].
    #[serde(default)]
    command_write_paths: Option<Vec<String>>,
}

/// A workspace: a directory the server exposes under an id.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Workspace")]
struct RawWorkspace {
    /// Absolute path of the directory (required). Never sent to clients.
    #[schemars(with = "PathBuf")]
    root: Option<PathBuf>,
    /// The permission profile: a built-in or one under `profiles`.
    #[serde(default)]
    #[schemars(extend("default" = "workspace-write"))]
    profile: Option<String>,
    /// The environment id: `local` or one under `environments`.
    #[serde(default)]
    #[schemars(extend("default" = "local"))]
    environment: Option<String>,
    /// Whether commands may use the network.
    #[serde(default)]
    network: Network,
    /// Whether allowed mutations run at once (`off`) or are held for a human (`confirm`).
    #[serde(default)]
    approvals: Approvals,
    /// Extra read-only paths commands may read, by name; added to the environment's.
    #[serde(default)]
    read_paths: BTreeMap<String, PathBuf>,
    /// The commands' HOME (absolute, writable by them); default `<store dir>/../homes/<id>`-style
    /// directory the server manages outside every workspace.
    #[serde(default)]
    home: Option<PathBuf>,
    /// `required` (default): commands run only inside the sandbox; `off`: the operator's opt-out.
    #[serde(default)]
    sandbox: SandboxMode,
    /// `required` (default): commands never see paths policy withholds from `read`; `off`: opt out.
    #[serde(default)]
    secret_masking: SecretMasking,
    /// Absolute directories prepended to the commands' `PATH`, before the environment's.
    #[serde(default)]
    path: Vec<PathBuf>,
    /// Fixed environment variables of the commands; added to the environment's (the workspace's
    /// value wins); the operator's value wins over a tool call's `env` for the same name.
    #[serde(default)]
    env: BTreeMap<String, String>,
    /// Whose live foreground processes block a mutation: every client's (`workspace`) or only
    /// the caller's own (`client`). Background processes never hold the lease.
    #[serde(default)]
    lease_scope: LeaseScope,
    /// The candidate directories of a command's write scope (workspace-relative, `.` for the
    /// root): before a command starts, Cedar decides `process_write` for each of them, for the
    /// command's `cwd` and for `.git`; the command may write beneath the allowed ones only, and
    /// a denied one beneath an allowed one is mounted read-only. Default: the environment's,
    /// else `["."]`.
    #[serde(default)]
    command_write_paths: Option<Vec<String>>,
}

/// An operator-written permission profile.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Profile")]
struct RawProfile {
    /// The parent profile (its Cedar entity parent): policies on the parent apply to this one.
    #[serde(default)]
    extends: Option<String>,
    /// Free text shown to operators.
    #[serde(default)]
    description: Option<String>,
}

/// An HTTP client identity: exactly one of `token` and `token_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Client")]
struct RawClient {
    /// The bearer token inline (at least 16 characters).
    #[serde(default)]
    token: Option<String>,
    /// A file holding the bearer token (read once at start, surrounding whitespace ignored);
    /// relative to the config file.
    #[serde(default)]
    token_file: Option<PathBuf>,
}

/// Default `limits.max_hash_bytes`: 1 GiB.
pub const DEFAULT_MAX_HASH_BYTES: u64 = 1 << 30;
/// Default `limits.max_patch_file_bytes`: 64 MiB.
pub const DEFAULT_MAX_PATCH_FILE_BYTES: u64 = 64 << 20;
/// Default `limits.max_message_bytes`: 16 MiB.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 16 << 20;
/// Default `limits.max_sessions_per_client`.
pub const DEFAULT_MAX_SESSIONS_PER_CLIENT: usize = 64;
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

/// Operator limits.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Live processes per server.
    #[schemars(range(min = 1))]
    pub max_live_processes: usize,
    /// Bytes of output kept per process.
    #[schemars(range(min = 1024))]
    pub output_ring_bytes: usize,
    /// Default and maximum process run time in milliseconds.
    pub process_timeout_ms: u64,
    /// Exited process handles kept.
    pub max_exited_processes: usize,
    /// Waiters per workspace lease queue.
    pub max_waiters: usize,
    /// Largest file `read` hashes for its version (`FILE_TOO_LARGE` beyond).
    pub max_hash_bytes: u64,
    /// Largest file `apply_patch` may touch (`FILE_TOO_LARGE` beyond).
    pub max_patch_file_bytes: u64,
    /// Largest JSON-RPC message: one stdio line, one HTTP request body.
    pub max_message_bytes: usize,
    /// HTTP sessions one client may hold open at once (429 beyond).
    pub max_sessions_per_client: usize,
    /// Most tasks (processes and threads) one command and its descendants may have.
    pub max_pids_per_process: u32,
    /// Most entries a workspace listing (walk or path index) holds; past it listings say `incomplete`.
    pub max_walk_entries: usize,
    /// How long an approval hold stays pending or granted, in milliseconds (`APPROVAL_CONFLICT` after).
    #[schemars(range(min = 1))]
    pub approval_ttl_ms: u64,
    /// `network: proxy`: connections one process may have open through the egress proxy at
    /// once (more get `429`).
    #[schemars(range(min = 1))]
    pub proxy_max_connections_per_process: usize,
    /// `network: proxy`: a proxied connection idle in both directions this long is closed.
    #[schemars(range(min = 1))]
    pub proxy_idle_timeout_ms: u64,
    /// `serve --http`: an HTTP/1 request head must be complete this long after the server
    /// starts reading it (an idle keep-alive connection is closed after it too), and a new
    /// connection must have sent an authenticated request within it.
    #[schemars(range(min = 1))]
    pub http_header_timeout_ms: u64,
    /// `serve --http`: connections open at once that have not sent an authenticated request
    /// yet; at the cap the oldest of them is closed to make room.
    #[schemars(range(min = 1))]
    pub http_max_unauthenticated_connections: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_live_processes: 8,
            output_ring_bytes: 1024 * 1024,
            process_timeout_ms: 10 * 60 * 1000,
            max_exited_processes: 64,
            max_waiters: 64,
            max_hash_bytes: DEFAULT_MAX_HASH_BYTES,
            max_patch_file_bytes: DEFAULT_MAX_PATCH_FILE_BYTES,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            max_sessions_per_client: DEFAULT_MAX_SESSIONS_PER_CLIENT,
            max_pids_per_process: 512,
            max_walk_entries: 1_000_000,
            approval_ttl_ms: 3_600_000,
            proxy_max_connections_per_process: 64,
            proxy_idle_timeout_ms: 60_000,
            http_header_timeout_ms: 10_000,
            http_max_unauthenticated_connections: 64,
        }
    }
}

/// A resolved environment.
#[derive(Debug, Clone)]
pub struct Environment {
    /// Its id.
    pub id: String,
    /// Its kind.
    pub kind: EnvironmentKind,
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
    /// How long the store keeps audit rows, operations and operation keys.
    pub retention: crate::retention::Retention,
    /// Secret patterns redacted from audit rows and error texts; swapped in place when the
    /// config is reloaded (every clone of the config shares it).
    pub redaction: crate::redact::LiveRedactor,
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

/// Most candidates of a command's write scope one workspace may list.
pub const MAX_COMMAND_WRITE_PATHS: usize = 64;

/// `["."]`: the whole workspace is the one candidate (the behaviour before write scopes).
pub fn default_command_write_paths() -> Vec<String> {
    vec![".".to_string()]
}

/// Checks a `command_write_paths` list: each entry workspace-relative (not absolute, no `..`),
/// at most [`MAX_COMMAND_WRITE_PATHS`]; with the workspace `root`, no symlink anywhere on the
/// way and a directory where it exists (a candidate that does not exist yet is kept: it is
/// decided at every command start, and created for a command whose policy allows it). Returns
/// the normalized paths, each once, in the given order.
fn command_write_paths(
    field: &str,
    list: &[String],
    root: Option<&Path>,
) -> Result<Vec<String>, ConfigError> {
    if list.len() > MAX_COMMAND_WRITE_PATHS {
        return Err(ConfigError(format!(
            "{field}: {} entries, more than the {MAX_COMMAND_WRITE_PATHS} allowed",
            list.len()
        )));
    }
    let mut out: Vec<String> = Vec::new();
    for (i, entry) in list.iter().enumerate() {
        let at = format!("{field}[{i}]");
        let rel = codespace_runner_fs::RelPath::parse(entry).map_err(|e| {
            ConfigError(format!(
                "{at}: `{entry}` must be a workspace-relative directory ({e})"
            ))
        })?;
        if let Some(root) = root {
            let mut cur = root.to_path_buf();
            for comp in rel.as_str().split('/').filter(|c| *c != ".") {
                cur.push(comp);
                match std::fs::symlink_metadata(&cur) {
                    Ok(m) if m.file_type().is_symlink() => {
                        return Err(ConfigError(format!(
                            "{at}: `{entry}` goes through a symlink; name the real directory"
                        )));
                    }
                    Ok(m) if !m.is_dir() => {
                        return Err(ConfigError(format!("{at}: `{entry}` is not a directory")));
                    }
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                    Err(e) => {
                        return Err(ConfigError(format!("{at}: `{entry}` cannot be read: {e}")));
                    }
                }
            }
        }
        let rel = rel.as_str().to_string();
        if !out.contains(&rel) {
            out.push(rel);
        }
    }
    Ok(out)
}

fn local_environments() -> BTreeMap<String, Environment> {
    let mut m = BTreeMap::new();
    m.insert(
        LOCAL_ENVIRONMENT.to_string(),
        Environment {
            id: LOCAL_ENVIRONMENT.to_string(),
            kind: EnvironmentKind::Host,
            read_paths: BTreeMap::new(),
            path: Vec::new(),
            env: BTreeMap::new(),
            command_write_paths: None,
        },
    );
    m
}

/// An I/O failure in an operator's words: "does not exist", "is not readable (permission
/// denied)", … (no Rust error wording, no OS error number).
pub fn io_reason(e: &std::io::Error) -> String {
    use std::io::ErrorKind as K;
    match e.kind() {
        K::NotFound => "does not exist".into(),
        K::PermissionDenied => "is not accessible (permission denied)".into(),
        K::NotADirectory => "is not reachable (a parent is not a directory)".into(),
        K::IsADirectory => "is a directory, not a file".into(),
        _ => {
            let text = e.to_string();
            let text = text
                .split(" (os error")
                .next()
                .unwrap_or(&text)
                .to_lowercase();
            format!("cannot be opened ({text})")
        }
    }
}

fn canonical_root(field: &str, root: &Path) -> Result<PathBuf, ConfigError> {
    if !root.is_absolute() {
        return Err(ConfigError(format!("{field}: must be an absolute path")));
    }
    let canon = std::fs::canonicalize(root).map_err(|e| {
        ConfigError(format!(
            "{field}: directory \"{}\" {}",
            root.display(),
            io_reason(&e)
        ))
    })?;
    if !canon.is_dir() {
        return Err(ConfigError(format!(
            "{field}: \"{}\" is not a directory",
            root.display()
        )));
    }
    Ok(canon)
}

/// Validates operator read paths: names of letters, digits, `.`, `_`, `-`; absolute paths that
/// exist (canonicalized); never `/` (it would undo the read allow-list) nor anything under `/dev`
/// (a readable device node can be a whole disk).
fn read_paths(
    field: &str,
    raw: BTreeMap<String, PathBuf>,
) -> Result<BTreeMap<String, PathBuf>, ConfigError> {
    let mut out = BTreeMap::new();
    for (name, path) in raw {
        let valid_name = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        if !valid_name {
            return Err(ConfigError(format!(
                "{field}.{name}: a name may use only letters, digits, `.`, `_` and `-`"
            )));
        }
        if !path.is_absolute() {
            return Err(ConfigError(format!(
                "{field}.{name}: must be an absolute path"
            )));
        }
        let canon = std::fs::canonicalize(&path)
            .map_err(|e| ConfigError(format!("{field}.{name}: cannot be opened ({})", e.kind())))?;
        if canon == Path::new("/") {
            return Err(ConfigError(format!(
                "{field}.{name}: `/` would make every file readable; declare narrower paths"
            )));
        }
        if canon.starts_with("/dev") {
            return Err(ConfigError(format!(
                "{field}.{name}: device paths cannot be declared readable"
            )));
        }
        out.insert(name, canon);
    }
    Ok(out)
}

/// Validates operator `path` entries: absolute, no `:` (the `PATH` separator), no NUL.
fn command_path(field: &str, raw: Vec<PathBuf>) -> Result<Vec<PathBuf>, ConfigError> {
    for (i, p) in raw.iter().enumerate() {
        let text = p.to_string_lossy();
        if !p.is_absolute() {
            return Err(ConfigError(format!(
                "{field}[{i}]: must be an absolute path"
            )));
        }
        if text.contains(':') || text.contains('\0') {
            return Err(ConfigError(format!(
                "{field}[{i}]: must not contain `:` or NUL"
            )));
        }
    }
    Ok(raw)
}

/// Validates operator `env` entries: names per [`is_env_name`], values without NUL.
fn command_env(
    field: &str,
    raw: BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, ConfigError> {
    for (name, value) in &raw {
        if !is_env_name(name) {
            return Err(ConfigError(format!(
                "{field}.{name}: a variable name is a letter or `_` followed by letters, digits and `_`"
            )));
        }
        if value.contains('\0') {
            return Err(ConfigError(format!(
                "{field}.{name}: the value must not contain NUL"
            )));
        }
    }
    Ok(raw)
}

impl Config {
    /// The embedded default: `dir` as workspace `default`, profile `workspace-write`, local host.
    pub fn embedded_default(dir: &Path) -> Result<Config, ConfigError> {
        let abs = if dir.is_absolute() {
            dir.to_path_buf()
        } else {
            std::env::current_dir()
                .map_err(|e| ConfigError(format!("current directory: {e}")))?
                .join(dir)
        };
        let root = canonical_root("workspace root", &abs)?;
        let mut workspaces = BTreeMap::new();
        workspaces.insert(
            "default".to_string(),
            Workspace {
                id: "default".to_string(),
                root,
                profile: "workspace-write".to_string(),
                environment: LOCAL_ENVIRONMENT.to_string(),
                network: Network::Restricted,
                approvals: Approvals::Off,
                read_paths: BTreeMap::new(),
                home: None,
                sandbox: SandboxMode::Required,
                secret_masking: SecretMasking::Required,
                path: Vec::new(),
                env: BTreeMap::new(),
                lease_scope: LeaseScope::Workspace,
                command_write_paths: default_command_write_paths(),
                toolchains: Vec::new(),
            },
        );
        Ok(Config {
            environments: local_environments(),
            workspaces,
            profiles: builtin_profiles(),
            policies_dir: None,
            schema_file: None,
            store: None,
            limits: Limits::default(),
            clients: BTreeMap::new(),
            config_file: None,
            policy_tests_on_reload: false,
            retention: crate::retention::Retention::default(),
            redaction: crate::redact::LiveRedactor::default(),
        })
    }

    /// Loads and validates a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigError(format!(
                "config file \"{}\" {}",
                path.display(),
                io_reason(&e)
            ))
        })?;
        let base = path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."));
        let mut cfg = Config::from_json(&text, &base)?;
        cfg.config_file = std::fs::canonicalize(path).ok();
        Ok(cfg)
    }

    /// Re-reads the config file and puts its `redaction` patterns in force for every holder of
    /// this config (the gateway, the egress proxy, the approvals). The whole file must still be
    /// valid; nothing else of it changes until a restart. Returns how many rules are in force.
    /// Blocking (reads the file).
    pub fn reload_redaction(&self) -> Result<usize, ConfigError> {
        let Some(path) = &self.config_file else {
            return Err(ConfigError(
                "no config file: the redaction patterns are the built-in ones".into(),
            ));
        };
        let fresh = Config::load(path)?;
        let rules = fresh.redaction.current();
        let count = rules.rule_count();
        self.redaction.replace(rules.as_ref().clone());
        Ok(count)
    }

    /// Parses and validates config JSON; relative file locations resolve against `base`.
    pub fn from_json(text: &str, base: &Path) -> Result<Config, ConfigError> {
        let de = &mut serde_json::Deserializer::from_str(text);
        let raw: RawConfig = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            let msg = inner.to_string();
            // serde_json appends " at line L column C"; keep it, it helps operators.
            if path == "." || path.is_empty() {
                ConfigError(msg)
            } else {
                ConfigError(format!("{path}: {msg}"))
            }
        })?;
        let resolve = |p: PathBuf| if p.is_absolute() { p } else { base.join(p) };

        let mut environments = local_environments();
        for (id, env) in raw.environments {
            let read_paths = read_paths(&format!("environments.{id}.read_paths"), env.read_paths)?;
            let path = command_path(&format!("environments.{id}.path"), env.path)?;
            let vars = command_env(&format!("environments.{id}.env"), env.env)?;
            let command_write_paths = env
                .command_write_paths
                .map(|list| {
                    command_write_paths(
                        &format!("environments.{id}.command_write_paths"),
                        &list,
                        None,
                    )
                })
                .transpose()?;
            environments.insert(
                id.clone(),
                Environment {
                    id,
                    kind: env.kind,
                    read_paths,
                    path,
                    env: vars,
                    command_write_paths,
                },
            );
        }

        let mut profiles = builtin_profiles();
        for (id, p) in &raw.profiles {
            if profiles.contains_key(id) && BUILTIN_PROFILES.iter().any(|(b, _)| b == id) {
                return Err(ConfigError(format!(
                    "profiles.{id}: redefines a built-in profile"
                )));
            }
            if id.is_empty() || id.contains('"') || id.contains('\\') {
                return Err(ConfigError(format!("profiles.{id}: invalid profile id")));
            }
            profiles.insert(
                id.clone(),
                Profile {
                    id: id.clone(),
                    extends: p.extends.clone(),
                    description: p.description.clone(),
                },
            );
        }
        for (id, p) in &profiles {
            if let Some(parent) = &p.extends
                && !profiles.contains_key(parent)
            {
                return Err(ConfigError(format!(
                    "profiles.{id}.extends: unknown profile `{parent}`{}",
                    crate::suggest::did_you_mean(parent, profiles.keys().map(String::as_str))
                )));
            }
            // Cycle check: follow parents at most profiles.len() steps.
            let mut cur = p.extends.clone();
            let mut steps = 0;
            while let Some(c) = cur {
                steps += 1;
                if c == *id || steps > profiles.len() {
                    return Err(ConfigError(format!(
                        "profiles.{id}.extends: profiles extend each other in a cycle"
                    )));
                }
                cur = profiles.get(&c).and_then(|x| x.extends.clone());
            }
        }

        if raw.workspaces.is_empty() {
            return Err(ConfigError(
                "workspaces: at least one workspace is required".into(),
            ));
        }
        let mut workspaces = BTreeMap::new();
        for (id, w) in raw.workspaces {
            if id.is_empty() {
                return Err(ConfigError("workspaces: empty workspace id".into()));
            }
            let root = w
                .root
                .ok_or_else(|| ConfigError(format!("workspaces.{id}.root: missing")))?;
            let root = canonical_root(&format!("workspaces.{id}.root"), &root)?;
            let profile = w.profile.unwrap_or_else(|| "workspace-write".to_string());
            if !profiles.contains_key(&profile) {
                return Err(ConfigError(format!(
                    "workspaces.{id}.profile: unknown profile `{profile}`{}",
                    crate::suggest::did_you_mean(&profile, profiles.keys().map(String::as_str))
                )));
            }
            let environment = w
                .environment
                .unwrap_or_else(|| LOCAL_ENVIRONMENT.to_string());
            let Some(env) = environments.get(&environment) else {
                return Err(ConfigError(format!(
                    "workspaces.{id}.environment: unknown environment `{environment}`{}",
                    crate::suggest::did_you_mean(
                        &environment,
                        environments.keys().map(String::as_str)
                    )
                )));
            };
            let mut all_read_paths = env.read_paths.clone();
            for (name, path) in read_paths(&format!("workspaces.{id}.read_paths"), w.read_paths)? {
                if all_read_paths.contains_key(&name) {
                    return Err(ConfigError(format!(
                        "workspaces.{id}.read_paths.{name}: already declared by environment `{environment}`"
                    )));
                }
                all_read_paths.insert(name, path);
            }
            if let Some(home) = &w.home
                && !home.is_absolute()
            {
                return Err(ConfigError(format!(
                    "workspaces.{id}.home: must be an absolute path"
                )));
            }
            let mut path = command_path(&format!("workspaces.{id}.path"), w.path)?;
            path.extend(env.path.iter().cloned());
            let mut vars = env.env.clone();
            vars.extend(command_env(&format!("workspaces.{id}.env"), w.env)?);
            let write_paths = match (&w.command_write_paths, &env.command_write_paths) {
                (Some(list), _) => command_write_paths(
                    &format!("workspaces.{id}.command_write_paths"),
                    list,
                    Some(&root),
                )?,
                (None, Some(list)) => command_write_paths(
                    &format!("environments.{environment}.command_write_paths"),
                    list,
                    Some(&root),
                )?,
                (None, None) => default_command_write_paths(),
            };
            workspaces.insert(
                id.clone(),
                Workspace {
                    id,
                    root,
                    profile,
                    environment,
                    network: w.network,
                    approvals: w.approvals,
                    read_paths: all_read_paths,
                    home: w.home,
                    sandbox: w.sandbox,
                    secret_masking: w.secret_masking,
                    path,
                    env: vars,
                    lease_scope: w.lease_scope,
                    command_write_paths: write_paths,
                    toolchains: Vec::new(),
                },
            );
        }

        let limits = raw.limits;
        if limits.max_live_processes == 0 {
            return Err(ConfigError(
                "limits.max_live_processes: must be at least 1".into(),
            ));
        }
        if limits.max_pids_per_process == 0 {
            return Err(ConfigError(
                "limits.max_pids_per_process: must be at least 1".into(),
            ));
        }
        if limits.output_ring_bytes < 1024 {
            return Err(ConfigError(
                "limits.output_ring_bytes: must be at least 1024".into(),
            ));
        }
        for (name, value, min) in [
            ("max_hash_bytes", limits.max_hash_bytes, 1),
            ("max_patch_file_bytes", limits.max_patch_file_bytes, 1),
            ("max_message_bytes", limits.max_message_bytes as u64, 1024),
            (
                "max_sessions_per_client",
                limits.max_sessions_per_client as u64,
                1,
            ),
            ("http_header_timeout_ms", limits.http_header_timeout_ms, 1),
            (
                "http_max_unauthenticated_connections",
                limits.http_max_unauthenticated_connections as u64,
                1,
            ),
        ] {
            if value < min {
                return Err(ConfigError(format!(
                    "limits.{name}: must be at least {min}"
                )));
            }
        }
        if limits.max_walk_entries == 0 {
            return Err(ConfigError(
                "limits.max_walk_entries: must be at least 1".into(),
            ));
        }
        if limits.approval_ttl_ms == 0 {
            return Err(ConfigError(
                "limits.approval_ttl_ms: must be at least 1".into(),
            ));
        }
        if limits.proxy_max_connections_per_process == 0 || limits.proxy_idle_timeout_ms == 0 {
            return Err(ConfigError(
                "limits.proxy_max_connections_per_process and limits.proxy_idle_timeout_ms: must be at least 1"
                    .into(),
            ));
        }

        let mut clients = BTreeMap::new();
        for (name, c) in raw.clients {
            let token_file = c.token_file.clone().map(resolve);
            let token = match (c.token, c.token_file) {
                (Some(t), None) => t,
                (None, Some(f)) => std::fs::read_to_string(resolve(f))
                    .map_err(|e| {
                        ConfigError(format!("clients.{name}.token_file: file {}", io_reason(&e)))
                    })?
                    .trim()
                    .to_string(),
                _ => {
                    return Err(ConfigError(format!(
                        "clients.{name}: exactly one of token and token_file is required"
                    )));
                }
            };
            if token.len() < 16 {
                return Err(ConfigError(format!(
                    "clients.{name}: token must be at least 16 characters"
                )));
            }
            clients.insert(
                name.clone(),
                Client {
                    name,
                    token,
                    token_file,
                },
            );
        }

        Ok(Config {
            environments,
            workspaces,
            profiles,
            policies_dir: raw.policies.map(resolve),
            schema_file: raw.schema.map(resolve),
            store: raw.store.map(resolve),
            limits,
            clients,
            config_file: None,
            policy_tests_on_reload: raw.policy_tests_on_reload,
            retention: raw.retention.resolve().map_err(ConfigError)?,
            redaction: crate::redact::Redactor::new(
                &raw.redaction.patterns,
                raw.redaction.defaults,
            )
            .map_err(|e| ConfigError(format!("redaction.patterns[{}]: {}", e.index, e.message)))?
            .into(),
        })
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn load(json: &str) -> Result<Config, ConfigError> {
        Config::from_json(json, Path::new("/"))
    }

    #[test]
    fn valid_config_resolves_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let json = format!(
            r#"{{"workspaces": {{"w": {{"root": "{}"}}}}}}"#,
            dir.path().display()
        );
        let cfg = load(&json).unwrap();
        let w = &cfg.workspaces["w"];
        assert_eq!(w.profile, "workspace-write");
        assert_eq!(w.environment, "local");
        assert_eq!(w.network, Network::Restricted);
    }

    #[test]
    fn errors_name_the_field() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display();
        let cases = [
            (
                r#"{"workspaces": {"w": {"root": "rel/dir"}}}"#.to_string(),
                "workspaces.w.root: must be an absolute path",
            ),
            (
                r#"{"workspaces": {"w": {}}}"#.to_string(),
                "workspaces.w.root: missing",
            ),
            (
                format!(r#"{{"workspaces": {{"w": {{"root": "{d}", "environment": "mars"}}}}}}"#),
                "workspaces.w.environment: unknown environment `mars`",
            ),
            (
                format!(r#"{{"workspaces": {{"w": {{"root": "{d}", "profile": "god"}}}}}}"#),
                "workspaces.w.profile: unknown profile `god`",
            ),
            (
                format!(r#"{{"workspaces": {{"w": {{"root": "{d}", "colour": "red"}}}}}}"#),
                "workspaces.w.colour: unknown field `colour`",
            ),
            (
                format!(r#"{{"workspaces": {{"w": {{"root": "{d}"}}}}, "bogus": 1}}"#),
                "unknown field `bogus`",
            ),
            (
                format!(
                    r#"{{"workspaces": {{"w": {{"root": "{d}"}}}}, "profiles": {{"a": {{"extends": "b"}}, "b": {{"extends": "a"}}}}}}"#
                ),
                "cycle",
            ),
            (
                format!(r#"{{"workspaces": {{"w": {{"root": "{d}", "network": "open"}}}}}}"#),
                "workspaces.w.network",
            ),
            (
                r#"{"workspaces": {}}"#.to_string(),
                "at least one workspace",
            ),
        ];
        for (json, want) in cases {
            let err = load(&json).unwrap_err().to_string();
            assert!(
                err.contains(want),
                "config {json}: got `{err}`, want `{want}`"
            );
            assert!(!err.contains('\n'), "one line: {err}");
        }
    }

    #[test]
    fn read_paths_home_sandbox_and_pids_limit_are_parsed_and_merged() {
        let dir = tempfile::tempdir().unwrap();
        let tool = dir.path().join("tool");
        let extra = dir.path().join("extra");
        std::fs::create_dir(&tool).unwrap();
        std::fs::create_dir(&extra).unwrap();
        let json = format!(
            r#"{{"environments": {{"local": {{"kind": "host", "read_paths": {{"tool": "{t}"}}}}}},
                "workspaces": {{"w": {{"root": "{d}", "read_paths": {{"extra": "{e}"}},
                                      "home": "/srv/homes/w", "sandbox": "off"}},
                               "v": {{"root": "{d}"}}}},
                "limits": {{"max_pids_per_process": 32}}}}"#,
            t = tool.display(),
            e = extra.display(),
            d = dir.path().display()
        );
        let cfg = load(&json).unwrap();
        let w = &cfg.workspaces["w"];
        assert_eq!(
            w.read_paths.keys().collect::<Vec<_>>(),
            vec!["extra", "tool"]
        );
        assert_eq!(w.read_paths["tool"], std::fs::canonicalize(&tool).unwrap());
        assert_eq!(w.home.as_deref(), Some(Path::new("/srv/homes/w")));
        assert_eq!(w.sandbox, SandboxMode::Off);
        let v = &cfg.workspaces["v"];
        assert_eq!(v.read_paths.keys().collect::<Vec<_>>(), vec!["tool"]);
        assert_eq!(v.sandbox, SandboxMode::Required);
        assert!(v.home.is_none());
        assert_eq!(cfg.limits.max_pids_per_process, 32);
        assert_eq!(Limits::default().max_pids_per_process, 512);
    }

    #[test]
    fn bad_read_paths_home_and_sandbox_name_the_field() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display();
        let ws = |extra: &str| format!(r#"{{"workspaces": {{"w": {{"root": "{d}"{extra}}}}}}}"#);
        let cases = [
            (
                ws(r#", "read_paths": {"x": "rel"}"#),
                "workspaces.w.read_paths.x: must be an absolute path",
            ),
            (
                ws(r#", "read_paths": {"x": "/no/such/dir"}"#),
                "workspaces.w.read_paths.x: cannot be opened",
            ),
            (
                ws(r#", "read_paths": {"x": "/"}"#),
                "workspaces.w.read_paths.x: `/`",
            ),
            (
                ws(r#", "read_paths": {"x": "/dev"}"#),
                "workspaces.w.read_paths.x: device",
            ),
            (
                ws(r#", "read_paths": {"a b": "/usr"}"#),
                "workspaces.w.read_paths.a b: a name",
            ),
            (
                ws(r#", "home": "homes/w""#),
                "workspaces.w.home: must be an absolute path",
            ),
            (ws(r#", "sandbox": "maybe""#), "workspaces.w.sandbox"),
            (
                format!(
                    r#"{{"environments": {{"local": {{"kind": "host", "read_paths": {{"u": "/usr"}}}}}}, "workspaces": {{"w": {{"root": "{d}", "read_paths": {{"u": "/usr"}}}}}}}}"#
                ),
                "workspaces.w.read_paths.u: already declared by environment `local`",
            ),
            (
                format!(
                    r#"{{"workspaces": {{"w": {{"root": "{d}"}}}}, "limits": {{"max_pids_per_process": 0}}}}"#
                ),
                "limits.max_pids_per_process: must be at least 1",
            ),
        ];
        for (json, want) in cases {
            let err = load(&json).unwrap_err().to_string();
            assert!(
                err.contains(want),
                "config {json}: got `{err}`, want `{want}`"
            );
            assert!(!err.contains('\n'), "one line: {err}");
        }
    }

    #[test]
    fn operator_profile_extends_builtin() {
        let dir = tempfile::tempdir().unwrap();
        let json = format!(
            r#"{{"workspaces": {{"w": {{"root": "{}", "profile": "ci"}}}}, "profiles": {{"ci": {{"extends": "read-only", "description": "x"}}}}}}"#,
            dir.path().display()
        );
        let cfg = load(&json).unwrap();
        assert_eq!(cfg.profiles["ci"].extends.as_deref(), Some("read-only"));
    }

    #[test]
    fn path_and_env_merge_workspace_over_environment() {
        let dir = tempfile::tempdir().unwrap();
        let json = format!(
            r#"{{"environments": {{"local": {{"kind": "host", "path": ["/opt/env/bin"],
                                             "env": {{"A": "env", "B": "env"}}}}}},
                "workspaces": {{"w": {{"root": "{d}", "path": ["/opt/ws/bin"], "env": {{"B": "ws", "C": "ws"}}}},
                               "v": {{"root": "{d}"}}}}}}"#,
            d = dir.path().display()
        );
        let cfg = load(&json).unwrap();
        let w = &cfg.workspaces["w"];
        assert_eq!(
            w.path,
            vec![PathBuf::from("/opt/ws/bin"), PathBuf::from("/opt/env/bin")]
        );
        assert_eq!(w.env["A"], "env");
        assert_eq!(w.env["B"], "ws");
        assert_eq!(w.env["C"], "ws");
        let v = &cfg.workspaces["v"];
        assert_eq!(v.path, vec![PathBuf::from("/opt/env/bin")]);
        assert_eq!(v.env.len(), 2);
    }

    #[test]
    fn bad_path_and_env_name_the_field() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display();
        let ws = |extra: &str| format!(r#"{{"workspaces": {{"w": {{"root": "{d}"{extra}}}}}}}"#);
        let cases = [
            (
                ws(r#", "path": ["bin"]"#),
                "workspaces.w.path[0]: must be an absolute path",
            ),
            (
                ws(r#", "path": ["/a:/b"]"#),
                "workspaces.w.path[0]: must not contain",
            ),
            (
                ws(r#", "env": {"1X": "v"}"#),
                "workspaces.w.env.1X: a variable name",
            ),
            (
                ws(r#", "env": {"A=B": "v"}"#),
                "workspaces.w.env.A=B: a variable name",
            ),
            (
                ws(r#", "env": {"X": "a\u0000b"}"#),
                "workspaces.w.env.X: the value must not contain NUL",
            ),
            (
                format!(
                    r#"{{"environments": {{"e": {{"kind": "host", "path": ["rel"]}}}}, "workspaces": {{"w": {{"root": "{d}"}}}}}}"#
                ),
                "environments.e.path[0]: must be an absolute path",
            ),
        ];
        for (json, want) in cases {
            let err = load(&json).unwrap_err().to_string();
            assert!(
                err.contains(want),
                "config {json}: got `{err}`, want `{want}`"
            );
        }
        assert!(is_env_name("CARGO_HOME") && is_env_name("_x1"));
        assert!(!is_env_name("") && !is_env_name("A-B") && !is_env_name("Ä"));
    }
}
