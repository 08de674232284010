//! Command-line interface: argument parsing and the sub-commands.

use crate::server::CodeSpaceServer;
use anyhow::{Context, Result, anyhow};
use clap::{Parser, Subcommand};
use codespace_engine::policy::{PolicySource, compile};
use codespace_engine::{Config, Gateway, PolicyStore, SandboxFacts, Session};
use rmcp::ServiceExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

#[derive(Parser)]
#[command(
    name = "codespace",
    version,
    about = "Execution-only MCP server with Cedar policy"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve MCP over stdio. Without a config, DIR (default: the current directory) is
    /// workspace `default` with profile `workspace-write`.
    Serve {
        /// The directory to serve when no config is given.
        dir: Option<PathBuf>,
        /// Operator config (JSON).
        #[arg(long, env = "CODESPACE_CONFIG")]
        config: Option<PathBuf>,
        /// SQLite store file (default: the config's `store`, else the user data dir).
        #[arg(long)]
        store: Option<PathBuf>,
        #[command(flatten)]
        http: crate::http::HttpArgs,
    },
    /// Print the decision log (audit) from the store: a table, or JSON lines for a SIEM.
    Audit(crate::policy_cli::AuditArgs),
    /// Policy tools for security teams and CI.
    Policy {
        #[command(subcommand)]
        command: PolicyCommand,
    },
}

#[derive(Subcommand)]
enum PolicyCommand {
    /// Parse, lint and strictly validate the schema and policies.
    Validate {
        #[command(flatten)]
        loc: PolicyLocation,
    },
    /// Run policy test files (default: every .yaml under <policies>/tests), with coverage.
    Test {
        #[command(flatten)]
        args: crate::policy_cli::TestArgs,
        #[command(flatten)]
        loc: PolicyLocation,
    },
    /// Explain the decision on one tool call: requests, entities, per-policy evaluation.
    /// Exit 0 allow, 2 deny.
    Explain {
        #[command(flatten)]
        args: crate::policy_cli::ExplainArgs,
        #[command(flatten)]
        loc: PolicyLocation,
    },
    /// Re-decide recorded requests (and, with --tests, the policy test cases) under a
    /// candidate set and list what flips. Exit 0 no flip, 2 only narrowing, 3 any widening.
    Diff {
        #[command(flatten)]
        args: crate::policy_diff::DiffArgs,
        #[command(flatten)]
        loc: PolicyLocation,
    },
    /// List every policy: id, effect, file:line, reason.
    Ls {
        /// JSON lines.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        loc: PolicyLocation,
    },
    /// Policies that determined no logged decision since T (default 1d).
    Unused {
        /// RFC 3339, unix ms, or an age like 1d.
        #[arg(long, value_name = "T", default_value = "1d")]
        since: String,
        /// The store (default: the config's `store`, else the one `serve` uses).
        #[arg(long)]
        store: Option<PathBuf>,
        /// One JSON document.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        loc: PolicyLocation,
    },
    /// Prove properties with Cedar's symbolic compiler and cvc5 (read-only never mutates; no
    /// profile writes git hooks/config or server-owned files; no policy errors; --implies OLD).
    /// Exit 0 proven, 1 a property fails, 4 no solver found.
    Verify {
        #[command(flatten)]
        args: crate::policy_verify::VerifyArgs,
        #[command(flatten)]
        loc: PolicyLocation,
    },
    /// Format every .cedar file with Cedar's formatter (comments and annotations kept);
    /// --check lists what would change and exits 1 instead.
    Fmt {
        /// Change nothing; exit 1 when a file is not formatted.
        #[arg(long)]
        check: bool,
        #[command(flatten)]
        loc: PolicyLocation,
    },
}

#[derive(clap::Args)]
struct PolicyLocation {
    /// The policies directory (default: ./policies when it exists, else the shipped set).
    #[arg(long)]
    policies: Option<PathBuf>,
    /// The schema file (default: <policies>/../schema/codespace.cedarschema).
    #[arg(long)]
    schema: Option<PathBuf>,
    /// Take the locations from an operator config.
    #[arg(long, env = "CODESPACE_CONFIG")]
    config: Option<PathBuf>,
}

impl PolicyLocation {
    /// The operator config named by `--config`, when there is one.
    fn config(&self) -> Result<Option<Config>> {
        self.config
            .as_deref()
            .map(Config::load)
            .transpose()
            .map_err(Into::into)
    }

    fn source(&self) -> Result<PolicySource> {
        let (mut policies, mut schema) = (self.policies.clone(), self.schema.clone());
        if let Some(cfg) = &self.config {
            let cfg = Config::load(cfg)?;
            policies = policies.or(cfg.policies_dir);
            schema = schema.or(cfg.schema_file);
        }
        if policies.is_none() && Path::new("policies/profiles").is_dir() {
            policies = Some(PathBuf::from("policies"));
        }
        Ok(source_from(policies, schema))
    }
}

fn source_from(policies: Option<PathBuf>, schema: Option<PathBuf>) -> PolicySource {
    match policies {
        None => PolicySource::Embedded,
        Some(p) => {
            let schema = schema.unwrap_or_else(|| {
                p.parent()
                    .unwrap_or(Path::new("."))
                    .join("schema/codespace.cedarschema")
            });
            PolicySource::Dir {
                policies: p,
                schema,
            }
        }
    }
}

/// Entry point after the helper check.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve {
            dir,
            config,
            store,
            http,
        } => serve(dir, config, store, http).map(|_| ExitCode::SUCCESS),
        Command::Audit(args) => crate::policy_cli::audit(&args, default_store_path),
        Command::Policy { command } => match command {
            PolicyCommand::Validate { loc } => policy_validate(&loc),
            PolicyCommand::Test { args, loc } => loc
                .source()
                .and_then(|src| crate::policy_cli::test(&args, &src, loc.config()?.as_ref())),
            PolicyCommand::Explain { args, loc } => loc.source().and_then(|src| {
                crate::policy_cli::explain(&args, loc.config.as_deref(), src, default_store_path)
            }),
            PolicyCommand::Diff { args, loc } => loc.source().and_then(|src| {
                crate::policy_diff::diff(&args, &src, loc.config()?.as_ref(), default_store_path)
            }),
            PolicyCommand::Ls { json, loc } => loc
                .source()
                .and_then(|src| crate::policy_admin::ls(&src, json)),
            PolicyCommand::Unused {
                since,
                store,
                json,
                loc,
            } => loc.source().and_then(|src| {
                let path = crate::policy_admin::store_path(
                    store,
                    loc.config()?.as_ref(),
                    default_store_path,
                )?;
                crate::policy_admin::unused(&src, &path, &since, json)
            }),
            PolicyCommand::Verify { args, loc } => loc
                .source()
                .and_then(|src| crate::policy_verify::verify(&args, &src, loc.config()?.as_ref())),
            PolicyCommand::Fmt { check, loc } => loc
                .source()
                .and_then(|src| crate::policy_admin::fmt(&src, check)),
        },
    };
    match result {
        Ok(code) => code,
        // The reader went away (`codespace audit --json | head -3`): stop quietly.
        Err(e) if crate::policy_cli::is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("codespace: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn default_store_path() -> Result<PathBuf> {
    let base = dirs::data_dir()
        .or_else(|| dirs::home_dir().map(|h| h.join(".local/share")))
        .ok_or_else(|| anyhow!("no user data directory; pass --store FILE"))?;
    Ok(base.join("codespace").join("codespace.db"))
}

fn serve(
    dir: Option<PathBuf>,
    config: Option<PathBuf>,
    store: Option<PathBuf>,
    http: crate::http::HttpArgs,
) -> Result<()> {
    let http = http.options().map_err(|e| anyhow!(e))?;
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("CODESPACE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    if let Err(e) = codespace_runner_sandbox::harden_current_process() {
        tracing::warn!(error = %e, "process hardening failed");
    }
    let mut cfg = match (&config, &dir) {
        (Some(path), None) => Config::load(path)?,
        (Some(_), Some(_)) => return Err(anyhow!("give either a config or a directory, not both")),
        (None, d) => Config::embedded_default(d.as_deref().unwrap_or(Path::new(".")))?,
    };
    let store_path = match store.or_else(|| cfg.store.clone()) {
        Some(p) => p,
        None => default_store_path()?,
    };
    cfg.store = Some(store_path.clone());
    let source = source_from(cfg.policies_dir.clone(), cfg.schema_file.clone());
    let policy = Arc::new(
        PolicyStore::load_for_profiles(source, cfg.profiles.keys().cloned().collect())
            .map_err(|e| anyhow!("policies rejected:\n{e}"))?,
    );
    let store = Arc::new(
        codespace_store::Store::open(&store_path)
            .with_context(|| "cannot open the store (pass --store FILE)".to_string())?,
    );
    // Hot reload: file watching plus SIGHUP, debounced; every attempt is a policy_reload event.
    let reloader = Arc::new(crate::policy_cli::start_reloader(
        &policy,
        &store,
        cfg.policy_tests_on_reload,
        &cfg.profiles,
    )?);
    let probe = codespace_runner_sandbox::probe();
    let sandbox = SandboxFacts {
        sandbox_enforced: probe.sandbox_available(),
        network_enforced: probe.network_enforceable(),
    };
    let snap = policy.snapshot();
    let _ = store.insert_event(
        "startup",
        &serde_json::json!({
            "version": env!("CARGO_PKG_VERSION"),
            "policy_set_sha256": snap.sha256,
            "probe": {
                "landlock_abi": probe.landlock_abi,
                "seccomp": probe.seccomp,
                "user_namespaces": probe.user_namespaces,
                "net_namespaces": probe.net_namespaces,
            },
            "workspaces": cfg.workspaces.keys().collect::<Vec<_>>(),
        }),
    );
    let gateway = Arc::new(
        Gateway::new(cfg, Arc::clone(&policy), Some(Arc::clone(&store)), sandbox)?
            .with_transports(match &http {
                Some(_) => vec![crate::http::TRANSPORT.to_string()],
                None => vec!["stdio".to_string()],
            })
            .with_patch_hooks(patch_test_hooks())
            // The sandbox helper is this binary (`codespace __sandbox-exec`); without it,
            // sandboxed workspaces refuse every command.
            .with_helper_exe(std::env::current_exe().unwrap_or_default()),
    );
    // Roll back patches a crash interrupted; mark unfinished operations `unknown`.
    let recovered = gateway.recover();
    if !recovered.is_empty() {
        tracing::warn!(operations = ?recovered, "rolled back interrupted patches at start-up");
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("tokio runtime")?;
    rt.spawn(crate::policy_cli::reload_on_sighup(Arc::clone(&reloader)));
    let result = rt.block_on(async move {
        // Whatever ends serving (stdin EOF, SIGTERM, an error), the processes die with it.
        let owner = Arc::clone(&gateway);
        let served = async move {
            if let Some(opts) = http {
                return Ok(crate::http::serve_until(gateway, opts, shutdown_signal()).await?);
            }
            let server = CodeSpaceServer::new(gateway, Session::stdio());
            let guarded = crate::stdio::guarded(tokio::io::stdin(), tokio::io::stdout());
            let flushed = guarded.flushed;
            let running = match server.serve(guarded.transport).await {
                Ok(r) => r,
                // stdin closed before a client initialized: nothing to serve, a clean exit.
                Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => {
                    tracing::info!("stdin closed before initialize");
                    return anyhow::Ok(());
                }
                Err(e) => return Err(anyhow!("MCP initialize failed: {e}")),
            };
            let served = tokio::select! {
                r = running.waiting() => r.map(|_| ()).map_err(|e| anyhow!("MCP service: {e}")),
                _ = shutdown_signal() => {
                    tracing::info!("signal received, shutting down");
                    Ok(())
                }
            };
            // Let the last replies reach stdout before the process exits.
            let _ = tokio::time::timeout(std::time::Duration::from_secs(2), flushed).await;
            served
        }
        .await;
        owner.shutdown().await;
        served
    });
    // The stdio transport reads stdin on a blocking thread that a signal does not wake; do not
    // let dropping the runtime wait for it.
    rt.shutdown_timeout(std::time::Duration::from_millis(500));
    result
}

/// Test hook for crash tests: `CODESPACE_TEST_PATCH_STEP_DELAY_MS` makes every apply_patch write
/// step sleep, so a test can kill the server mid-apply. Unset in normal runs.
fn patch_test_hooks() -> codespace_engine::patch_tool::PatchHooks {
    let delay = std::env::var("CODESPACE_TEST_PATCH_STEP_DELAY_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok());
    codespace_engine::patch_tool::PatchHooks {
        before_commit: None,
        fault: delay.map(|ms| {
            Box::new(move |_step: usize| {
                std::thread::sleep(std::time::Duration::from_millis(ms));
                Ok(())
            })
                as Box<dyn Fn(usize) -> Result<(), codespace_runner_fs::FsError> + Send + Sync>
        }),
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
        }
        _ => std::future::pending::<()>().await,
    }
}

fn policy_validate(loc: &PolicyLocation) -> Result<ExitCode> {
    let source = loc.source()?;
    let config = loc.config()?;
    let known = crate::policy_cli::known_profiles(
        &crate::policy_cli::base_profiles(config.as_ref()),
        &crate::policy_cli::parsed_default_tests(&source),
    );
    let checked = source.read().and_then(compile).and_then(|snap| {
        let errs = codespace_engine::policy::unknown_profile_errors(&snap, &known);
        if errs.is_empty() {
            Ok(snap)
        } else {
            Err(codespace_engine::policy::PolicyErrors(errs))
        }
    });
    match checked {
        Ok(snap) => {
            let forbids = snap.meta.values().filter(|m| m.forbid).count();
            println!(
                "ok: {} policies ({} forbid, {} permit) validated strictly against {}; set {}",
                snap.meta.len(),
                forbids,
                snap.meta.len() - forbids,
                snap.bundle.schema_name,
                snap.sha256
            );
            crate::policy_cli::validate_shadow(&source, &known)
        }
        Err(e) => {
            for line in &e.0 {
                eprintln!("{line}");
            }
            eprintln!("policy validation failed: {} problem(s)", e.0.len());
            Ok(ExitCode::from(1))
        }
    }
}
