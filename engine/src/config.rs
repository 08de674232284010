//! Operator configuration: environments, workspaces, profiles, limits and file locations, loaded
//! from JSON and validated so that an invalid config names the offending field in one line.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The built-in profiles and their parents.
pub const BUILTIN_PROFILES: &[(&str, Option<&str>)] =
    &[("read-only", None), ("workspace-write", Some("read-only"))];

/// The id of the implicit local host environment.
pub const LOCAL_ENVIRONMENT: &str = "local";

/// A config that cannot be used; the message names the field.
#[derive(Debug, thiserror::Error)]
#[error("invalid config: {0}")]
pub struct ConfigError(pub String);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    environments: BTreeMap<String, RawEnvironment>,
    #[serde(default)]
    workspaces: BTreeMap<String, RawWorkspace>,
    #[serde(default)]
    profiles: BTreeMap<String, RawProfile>,
    #[serde(default)]
    policies: Option<PathBuf>,
    #[serde(default)]
    schema: Option<PathBuf>,
    #[serde(default)]
    store: Option<PathBuf>,
    #[serde(default)]
    limits: Limits,
    #[serde(default)]
    clients: BTreeMap<String, RawClient>,
    #[serde(default)]
    policy_tests_on_reload: bool,
    #[serde(default)]
    redaction: RawRedaction,
}

/// `redaction`: extra secret patterns for the audit log and error texts.
#[derive(Debug, Deserialize)]
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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEnvironment {
    kind: EnvironmentKind,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorkspace {
    root: Option<PathBuf>,
    #[serde(default)]
    profile: Option<String>,
    #[serde(default)]
    environment: Option<String>,
    #[serde(default)]
    network: Network,
    #[serde(default)]
    approvals: Approvals,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProfile {
    #[serde(default)]
    extends: Option<String>,
    #[serde(default)]
    description: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawClient {
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    token_file: Option<PathBuf>,
}

/// Environment kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EnvironmentKind {
    /// The local host.
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Network {
    /// Commands get no network (when the sandbox can enforce it).
    #[default]
    Restricted,
    /// Commands may use the network.
    Enabled,
}

impl Network {
    /// Wire and Cedar spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Network::Restricted => "restricted",
            Network::Enabled => "enabled",
        }
    }
}

/// The operator's approvals switch for a workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
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

/// Operator limits.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Live processes per server.
    pub max_live_processes: usize,
    /// Bytes of output kept per process.
    pub output_ring_bytes: usize,
    /// Default and maximum process run time in milliseconds.
    pub process_timeout_ms: u64,
    /// Exited process handles kept.
    pub max_exited_processes: usize,
    /// Waiters per workspace lease queue.
    pub max_waiters: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_live_processes: 8,
            output_ring_bytes: 1024 * 1024,
            process_timeout_ms: 10 * 60 * 1000,
            max_exited_processes: 64,
            max_waiters: 64,
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

/// An HTTP client identity.
#[derive(Debug, Clone)]
pub struct Client {
    /// The client name (a Cedar fact).
    pub name: String,
    /// Its bearer token.
    pub token: String,
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
    /// Secret patterns redacted from audit rows and error texts.
    pub redaction: crate::redact::Redactor,
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

fn local_environments() -> BTreeMap<String, Environment> {
    let mut m = BTreeMap::new();
    m.insert(
        LOCAL_ENVIRONMENT.to_string(),
        Environment {
            id: LOCAL_ENVIRONMENT.to_string(),
            kind: EnvironmentKind::Host,
        },
    );
    m
}

fn canonical_root(field: &str, root: &Path) -> Result<PathBuf, ConfigError> {
    if !root.is_absolute() {
        return Err(ConfigError(format!("{field}: must be an absolute path")));
    }
    let canon = std::fs::canonicalize(root)
        .map_err(|e| ConfigError(format!("{field}: cannot be opened ({})", e.kind())))?;
    if !canon.is_dir() {
        return Err(ConfigError(format!("{field}: is not a directory")));
    }
    Ok(canon)
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
            redaction: crate::redact::Redactor::default(),
        })
    }

    /// Loads and validates a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError(format!("cannot read {}: {e}", path.display())))?;
        let base = path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."));
        let mut cfg = Config::from_json(&text, &base)?;
        cfg.config_file = std::fs::canonicalize(path).ok();
        Ok(cfg)
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
            environments.insert(id.clone(), Environment { id, kind: env.kind });
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
                    "profiles.{id}.extends: unknown profile `{parent}`"
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
                    "workspaces.{id}.profile: unknown profile `{profile}`"
                )));
            }
            let environment = w
                .environment
                .unwrap_or_else(|| LOCAL_ENVIRONMENT.to_string());
            if !environments.contains_key(&environment) {
                return Err(ConfigError(format!(
                    "workspaces.{id}.environment: unknown environment `{environment}`"
                )));
            }
            workspaces.insert(
                id.clone(),
                Workspace {
                    id,
                    root,
                    profile,
                    environment,
                    network: w.network,
                    approvals: w.approvals,
                },
            );
        }

        let limits = raw.limits;
        if limits.max_live_processes == 0 {
            return Err(ConfigError(
                "limits.max_live_processes: must be at least 1".into(),
            ));
        }
        if limits.output_ring_bytes < 1024 {
            return Err(ConfigError(
                "limits.output_ring_bytes: must be at least 1024".into(),
            ));
        }

        let mut clients = BTreeMap::new();
        for (name, c) in raw.clients {
            let token = match (c.token, c.token_file) {
                (Some(t), None) => t,
                (None, Some(f)) => std::fs::read_to_string(resolve(f))
                    .map_err(|e| {
                        ConfigError(format!("clients.{name}.token_file: cannot be read ({e})"))
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
            clients.insert(name.clone(), Client { name, token });
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
            redaction: crate::redact::Redactor::new(
                &raw.redaction.patterns,
                raw.redaction.defaults,
            )
            .map_err(|e| ConfigError(format!("redaction.patterns[{}]: {}", e.index, e.message)))?,
        })
    }
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
    fn operator_profile_extends_builtin() {
        let dir = tempfile::tempdir().unwrap();
        let json = format!(
            r#"{{"workspaces": {{"w": {{"root": "{}", "profile": "ci"}}}}, "profiles": {{"ci": {{"extends": "read-only", "description": "x"}}}}}}"#,
            dir.path().display()
        );
        let cfg = load(&json).unwrap();
        assert_eq!(cfg.profiles["ci"].extends.as_deref(), Some("read-only"));
    }
}
