//! Start-up resolution shared by `serve` and `doctor`: which config, which store, where each
//! came from, errors that name the path the operator gave and the argument it came from, the
//! one-line stdio banner, and the log format (no colour unless stderr is a terminal).

use anyhow::{Result, anyhow};
use clap::ArgMatches;
use clap::parser::ValueSource;
use codespace_engine::Config;
use codespace_engine::config::io_reason;
use std::fmt;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

/// Where a value the server uses came from, in the operator's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A command-line flag, e.g. `--config`.
    Flag(&'static str),
    /// An environment variable, e.g. `CODESPACE_CONFIG`.
    Env(&'static str),
    /// A positional argument, e.g. `DIR`.
    Positional(&'static str),
    /// A field of the config file, e.g. `store`.
    ConfigField(&'static str),
    /// The built-in default.
    Default,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Flag(flag) => write!(f, "{flag}"),
            Origin::Env(var) => write!(f, "the {var} environment variable"),
            Origin::Positional(name) => write!(f, "the {name} argument"),
            Origin::ConfigField(field) => write!(f, "the config's `{field}`"),
            Origin::Default => write!(f, "the default location"),
        }
    }
}

/// Whether the argument `id` of `matches` came from the command line (`flag`) or from its
/// environment variable (`env`).
pub fn arg_origin(
    matches: Option<&ArgMatches>,
    id: &str,
    flag: &'static str,
    env: &'static str,
) -> Origin {
    match matches.and_then(|m| m.value_source(id)) {
        Some(ValueSource::EnvVariable) => Origin::Env(env),
        _ => Origin::Flag(flag),
    }
}

/// What `serve` (and `doctor`) will use: the resolved config and the store location.
#[derive(Debug)]
pub struct Effective {
    /// The validated config (the embedded default for a directory).
    pub config: Config,
    /// Where the config came from (`None`: no config file, the DIR form).
    pub config_origin: Option<Origin>,
    /// The store file.
    pub store: PathBuf,
    /// Where the store location came from.
    pub store_origin: Origin,
}

/// The toolchain flags of `serve` (and `doctor`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ToolchainArgs {
    /// Add a toolchain directory for the commands of workspaces whose config sets no `path`:
    /// read-only, its `bin` (or itself) on the commands' `PATH`. Repeatable.
    #[arg(long = "toolchain", value_name = "DIR")]
    pub toolchain: Vec<PathBuf>,
    /// Do not look for the invoking user's toolchains (`CARGO_HOME`, `RUSTUP_HOME`, `cargo`,
    /// `rustc`, `python3`, `node`, `go` on this process's `PATH`).
    #[arg(long)]
    pub no_toolchains: bool,
}

/// The policy set `cfg` names: its policies directory (and schema, by default beside it), or
/// the embedded set.
pub fn policy_source(cfg: &Config) -> codespace_engine::policy::PolicySource {
    use codespace_engine::policy::PolicySource;
    match &cfg.policies_dir {
        None => PolicySource::Embedded,
        Some(p) => PolicySource::Dir {
            policies: p.clone(),
            schema: cfg.schema_file.clone().unwrap_or_else(|| {
                p.parent()
                    .unwrap_or(Path::new("."))
                    .join("schema/codespace.cedarschema")
            }),
        },
    }
}

/// Finds the invoking user's toolchains (unless `--no-toolchains`) and the `--toolchain`
/// directories, and adds them to every workspace of `cfg` whose config sets no command `path`
/// (`cfg.store` is the store in use: no toolchain directory may hold it, the config or a token
/// file). Returns one line per directory refused.
pub fn add_toolchains(cfg: &mut Config, args: &ToolchainArgs) -> Vec<String> {
    use codespace_engine::toolchains::{Sources, apply, discover};
    let env = |k: &str| std::env::var_os(k);
    let found = discover(&Sources {
        env: &env,
        extra: &args.toolchain,
        discover: !args.no_toolchains,
    });
    let own = codespace_engine::server_files::server_files(cfg, &policy_source(cfg));
    let home = std::env::var_os("HOME").map(PathBuf::from);
    apply(cfg, &found, &own, home.as_deref())
}

/// `serve: ` before a message, or nothing for an empty command name.
fn prefix(cmd: &str) -> String {
    if cmd.is_empty() {
        String::new()
    } else {
        format!("{cmd}: ")
    }
}

/// Checks that `dir` (given as `origin`) is a directory; the error names both.
pub fn check_workspace_dir(cmd: &str, dir: &Path, origin: Origin) -> Result<()> {
    let cmd = prefix(cmd);
    match std::fs::metadata(dir) {
        Err(e) => Err(anyhow!(
            "{cmd}workspace directory \"{}\" ({origin}) {}",
            dir.display(),
            io_reason(&e)
        )),
        Ok(m) if !m.is_dir() => Err(anyhow!(
            "{cmd}workspace directory \"{}\" ({origin}) is not a directory",
            dir.display()
        )),
        Ok(_) => Ok(()),
    }
}

/// Loads the config `serve` would use: `config` (from `config_origin`) or `dir` as workspace
/// `default`; then the store location (`--store`, else the config's `store`, else the default).
pub fn effective(
    cmd: &str,
    dir: Option<&Path>,
    config: Option<&Path>,
    config_origin: Origin,
    store: Option<&Path>,
) -> Result<Effective> {
    let pre = prefix(cmd);
    let (config, config_origin) = match (config, dir) {
        (Some(_), Some(d)) => {
            return Err(anyhow!(
                "{pre}give either a config ({config_origin}) or a directory (\"{}\", the DIR \
                 argument), not both",
                d.display()
            ));
        }
        (Some(path), None) => {
            if let Err(e) = std::fs::metadata(path) {
                return Err(anyhow!(
                    "{pre}config file \"{}\" ({config_origin}) {}",
                    path.display(),
                    io_reason(&e)
                ));
            }
            let cfg = Config::load(path).map_err(|e| {
                anyhow!(
                    "{pre}{e} (in \"{}\", given by {config_origin})",
                    path.display()
                )
            })?;
            (cfg, Some(config_origin))
        }
        (None, d) => {
            let (dir, origin) = match d {
                Some(d) => (d, Origin::Positional("DIR")),
                None => (Path::new("."), Origin::Default),
            };
            check_workspace_dir(cmd, dir, origin)?;
            (
                Config::embedded_default(dir).map_err(|e| anyhow!("{pre}{e}"))?,
                None,
            )
        }
    };
    let (store, store_origin) = match (store, &config.store) {
        (Some(s), _) => (s.to_path_buf(), Origin::Flag("--store")),
        (None, Some(s)) => (s.clone(), Origin::ConfigField("store")),
        (None, None) => (default_store_path()?, Origin::Default),
    };
    Ok(Effective {
        config,
        config_origin,
        store,
        store_origin,
    })
}

/// The context of a store that cannot be opened: the path and where it came from.
pub fn store_error(cmd: &str, store: &Path, origin: Origin, err: &dyn fmt::Display) -> String {
    format!(
        "{}cannot open the store \"{}\" ({origin}): {err}; pass --store FILE",
        prefix(cmd),
        store.display()
    )
}

/// Logs (warn) each store file `Store::open` found readable or writable by others and tightened
/// to 0600, and returns them as `name (was 0644)` for the caller's own report.
pub fn log_tightened(store: &codespace_store::Store) -> Vec<String> {
    store
        .permissions_tightened()
        .iter()
        .map(|t| {
            tracing::warn!(
                file = %t.path.display(),
                old_mode = %format!("{:04o}", t.old_mode),
                "the store file was readable or writable by others; its permissions are now 0600"
            );
            let name = t
                .path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            format!("{name} (was {:04o})", t.old_mode)
        })
        .collect()
}

/// Installs the stderr log subscriber (`CODESPACE_LOG`, default `warn`); colour only when
/// stderr is a terminal.
pub fn init_logging() {
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("CODESPACE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .try_init();
}

/// The one-line stderr banner of stdio `serve`: what it serves, how to stop, where the audit
/// log is.
pub fn stdio_banner(config: &Config, store: &Path) -> String {
    let served: Vec<String> = config
        .workspaces
        .values()
        .map(|w| format!("`{}` = {} (profile {})", w.id, w.root.display(), w.profile))
        .collect();
    format!(
        "codespace: serving MCP over stdio, workspace{} {}; waiting for an MCP client on \
         stdin (stop: Ctrl-C, or Ctrl-D); audit log: {} (read it with `codespace audit`)",
        if served.len() == 1 { "" } else { "s" },
        served.join(", "),
        store.display()
    )
}

/// Whether stdio `serve` runs on a terminal (a person, not an MCP host, started it).
pub fn on_terminal() -> bool {
    std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
}

/// Where `serve` keeps the store when neither `--store` nor the config names one.
pub fn default_store_path() -> Result<PathBuf> {
    let base = dirs::data_dir()
        .or_else(|| dirs::home_dir().map(|h| h.join(".local/share")))
        .ok_or_else(|| anyhow!("no user data directory; pass --store FILE"))?;
    Ok(base.join("codespace").join("codespace.db"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn banner_names_workspace_stop_keys_and_audit_log() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = Config::embedded_default(dir.path()).unwrap();
        let line = stdio_banner(&cfg, Path::new("/var/lib/codespace/codespace.db"));
        assert!(!line.contains('\n'), "{line}");
        assert!(line.contains("stdio"), "{line}");
        assert!(line.contains("`default`"), "{line}");
        assert!(line.contains("workspace-write"), "{line}");
        assert!(line.contains("Ctrl-C"), "{line}");
        assert!(line.contains("/var/lib/codespace/codespace.db"), "{line}");
    }

    #[test]
    fn a_missing_directory_names_the_path_and_the_argument() {
        let err = check_workspace_dir(
            "serve",
            Path::new("/nonexistent/x"),
            Origin::Positional("DIR"),
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "serve: workspace directory \"/nonexistent/x\" (the DIR argument) does not exist"
        );
    }
}
