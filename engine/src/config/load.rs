//! Loading a config: the embedded default, a file, a `redaction` reload, and `from_json`, which
//! resolves environments, workspaces, limits and clients from the file's shapes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::environments::{EnvironmentSpec, RawBlocks, resolve as resolve_environment};
use super::limits::Limits;
use super::profiles;
use super::raw::RawConfig;
use super::switches::{LeaseScope, SecretMasking};
use super::validate::{
    canonical_root, command_env, command_path, command_write_paths, default_command_write_paths,
    io_reason, read_paths, worker_root,
};
use super::{Client, Config, ConfigError, Environment, LOCAL_ENVIRONMENT, Workspace};
use codespace_policy::config::builtin_profiles;
use codespace_policy::config::{Approvals, EnvironmentKind, Network, SandboxMode};

fn local_environments() -> BTreeMap<String, Environment> {
    let mut m = BTreeMap::new();
    m.insert(
        LOCAL_ENVIRONMENT.to_string(),
        Environment {
            id: LOCAL_ENVIRONMENT.to_string(),
            kind: EnvironmentKind::Host,
            spec: EnvironmentSpec::Host,
            read_paths: BTreeMap::new(),
            path: Vec::new(),
            env: BTreeMap::new(),
            command_write_paths: None,
        },
    );
    m
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
                hooks: super::hooks::Hooks::default(),
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
            policy_tests_on_reload: true,
            policy_signing: None,
            policy_templates: Vec::new(),
            retention: crate::retention::Retention::default(),
            redaction: crate::redact::LiveRedactor::default(),
            export: crate::telemetry::ExportConfig::default(),
            identity: super::Identity::default(),
            console: super::switches::ConsoleConfig::default(),
            skills_dir: None,
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
            let spec = resolve_environment(
                &id,
                env.kind,
                RawBlocks {
                    worker: env.worker,
                    ssh: env.ssh,
                    container: env.container,
                    kubernetes: env.kubernetes,
                    command: env.command,
                },
            )?;
            environments.insert(
                id.clone(),
                Environment {
                    id,
                    kind: env.kind,
                    spec,
                    read_paths,
                    path,
                    env: vars,
                    command_write_paths,
                },
            );
        }

        let profiles = profiles::resolve(&raw.profiles)?;

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
            let on_host = w
                .environment
                .as_deref()
                .and_then(|e| environments.get(e))
                .is_none_or(|e| {
                    matches!(
                        e.spec,
                        EnvironmentSpec::Host | EnvironmentSpec::LinuxContainer
                    )
                });
            // A worker's workspace root is the worker's path: never resolved on this host.
            let root = if on_host {
                canonical_root(&format!("workspaces.{id}.root"), &root)?
            } else {
                worker_root(&format!("workspaces.{id}.root"), &root)?
            };
            let host_root = on_host.then_some(root.as_path());
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
                    host_root,
                )?,
                (None, Some(list)) => command_write_paths(
                    &format!("environments.{environment}.command_write_paths"),
                    list,
                    host_root,
                )?,
                (None, None) => default_command_write_paths(),
            };
            let hooks =
                super::hooks::hooks(&format!("workspaces.{id}.hooks"), w.hooks, host_root, &path)?;
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
                    hooks,
                },
            );
        }

        let skills_dir = match &raw.skills_dir {
            None => None,
            Some(d) => {
                let mut apart: Vec<(String, &Path)> = Vec::new();
                for (id, w) in &workspaces {
                    apart.push((format!("the root of workspace `{id}`"), &w.root));
                    if let Some(home) = &w.home {
                        apart.push((format!("workspaces.{id}.home"), home));
                    }
                    for (name, p) in &w.read_paths {
                        apart.push((format!("workspaces.{id}.read_paths.{name}"), p));
                    }
                }
                for (id, e) in &environments {
                    for (name, p) in &e.read_paths {
                        apart.push((format!("environments.{id}.read_paths.{name}"), p));
                    }
                }
                Some(super::validate::skills_dir(d, &apart)?)
            }
        };
        let limits = raw.limits;
        limits.check()?;

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

        let (policies_dir, policy_signing, policy_templates) = match raw.policies {
            None => (None, None, Vec::new()),
            Some(super::raw::RawPolicies::Dir(d)) => (Some(resolve(d)), None, Vec::new()),
            Some(super::raw::RawPolicies::Block(b)) => {
                for (i, link) in b.templates.iter().enumerate() {
                    for w in &link.workspaces {
                        if !workspaces.contains_key(w) {
                            return Err(ConfigError(format!(
                                "policies.templates[{i}] (template {}): unknown workspace `{w}`{}",
                                link.template,
                                codespace_policy::suggest::hint(
                                    w,
                                    workspaces.keys().map(String::as_str)
                                )
                            )));
                        }
                    }
                }
                let signing = match (b.require_signature, b.allowed_signers) {
                    (false, None) => None,
                    (false, Some(_)) => {
                        return Err(ConfigError(
                            "policies.allowed_signers is only read with policies.require_signature: true"
                                .into(),
                        ));
                    }
                    (true, None) => {
                        return Err(ConfigError(
                            "policies.require_signature needs policies.allowed_signers (an absolute path)"
                                .into(),
                        ));
                    }
                    (true, Some(p)) if !p.is_absolute() => {
                        return Err(ConfigError(format!(
                            "policies.allowed_signers must be an absolute path, not {}",
                            p.display()
                        )));
                    }
                    (true, Some(p)) => {
                        Some(codespace_policy::set_signature::SigningRule { allowed_signers: p })
                    }
                };
                (Some(resolve(b.dir)), signing, b.templates)
            }
        };
        Ok(Config {
            environments,
            workspaces,
            profiles,
            policies_dir,
            policy_signing,
            policy_templates,
            schema_file: raw.schema.map(resolve),
            store: raw.store.map(resolve),
            limits,
            clients,
            config_file: None,
            policy_tests_on_reload: raw.policy_tests_on_reload,
            retention: raw.retention.resolve().map_err(ConfigError)?,
            export: {
                if let Some(o) = &raw.export.otlp {
                    o.check().map_err(ConfigError)?;
                }
                raw.export
            },
            identity: {
                if let Some(o) = &raw.identity.oidc {
                    o.check().map_err(ConfigError)?;
                }
                raw.identity
            },
            console: {
                if let Some(o) = raw.console.operators.iter().find(|o| o.trim().is_empty()) {
                    return Err(ConfigError(format!("console.operators: empty name `{o}`")));
                }
                raw.console
            },
            skills_dir,
            redaction: crate::redact::Redactor::new(
                &raw.redaction.patterns,
                raw.redaction.defaults,
            )
            .map_err(|e| ConfigError(format!("redaction.patterns[{}]: {}", e.index, e.message)))?
            .into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::*;
    use std::path::Path;

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
}
