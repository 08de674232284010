//! Command-line interface: argument parsing and the sub-commands.

use crate::server::CodeSpaceServer;
use anyhow::{Context, Result, anyhow};
use clap::{Parser, Subcommand};
use codespace_engine::policy::{PolicySource, compile};
use codespace_engine::policy_test::{parse_file, run_file};
use codespace_engine::{Config, Gateway, PolicyStore, SandboxFacts, Session};
use rmcp::ServiceExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

#[derive(Parser)]
#[command(name = "codespace", version, about = "Execution-only MCP server with Cedar policy")]
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
    },
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
    /// Run policy test files (default: every .yaml under <policies>/tests).
    Test {
        /// Test files.
        files: Vec<PathBuf>,
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
        Command::Serve { dir, config, store } => serve(dir, config, store).map(|_| ExitCode::SUCCESS),
        Command::Policy { command } => match command {
            PolicyCommand::Validate { loc } => policy_validate(&loc),
            PolicyCommand::Test { files, loc } => policy_test(&files, &loc),
        },
    };
    match result {
        Ok(code) => code,
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

fn serve(dir: Option<PathBuf>, config: Option<PathBuf>, store: Option<PathBuf>) -> Result<()> {
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
    let policy = PolicyStore::load(source).map_err(|e| anyhow!("policies rejected:\n{e}"))?;
    let store = codespace_store::Store::open(&store_path)
        .with_context(|| "cannot open the store (pass --store FILE)".to_string())?;
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
    let gateway = Arc::new(Gateway::new(
        cfg,
        Arc::new(policy),
        Some(Arc::new(store)),
        sandbox,
    )?);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("tokio runtime")?;
    rt.block_on(async move {
        let server = CodeSpaceServer::new(gateway, Session::stdio());
        let running = server
            .serve(rmcp::transport::stdio())
            .await
            .map_err(|e| anyhow!("MCP initialize failed: {e}"))?;
        tokio::select! {
            r = running.waiting() => { r.map_err(|e| anyhow!("MCP service: {e}"))?; }
            _ = shutdown_signal() => { tracing::info!("signal received, shutting down"); }
        }
        anyhow::Ok(())
    })?;
    Ok(())
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
        }
        _ => std::future::pending::<()>().await,
    }
}

fn policy_validate(loc: &PolicyLocation) -> Result<ExitCode> {
    let source = loc.source()?;
    match source.read().and_then(compile) {
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
            Ok(ExitCode::SUCCESS)
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

fn default_test_files(source: &PolicySource) -> Result<Vec<PathBuf>> {
    let dir = match source {
        PolicySource::Dir { policies, .. } => policies.join("tests"),
        PolicySource::Embedded => return Ok(Vec::new()),
    };
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    Ok(files)
}

fn policy_test(files: &[PathBuf], loc: &PolicyLocation) -> Result<ExitCode> {
    let source = loc.source()?;
    let snap = match source.read().and_then(compile) {
        Ok(s) => s,
        Err(e) => {
            for line in &e.0 {
                eprintln!("{line}");
            }
            return Err(anyhow!("policies rejected; no test ran"));
        }
    };
    let files = if files.is_empty() {
        default_test_files(&source)?
    } else {
        files.to_vec()
    };
    let (mut passed, mut failed) = (0usize, 0usize);
    for f in &files {
        let name = f.display().to_string();
        let text = std::fs::read_to_string(f).with_context(|| format!("cannot read {name}"))?;
        let parsed = match parse_file(&text) {
            Ok(p) => p,
            Err(e) => {
                println!("FAILED {name}: cannot parse: {e}");
                failed += 1;
                continue;
            }
        };
        for r in run_file(&snap, &name, &parsed) {
            if r.passed {
                passed += 1;
                println!("ok     {} :: {}", r.file, r.name);
            } else {
                failed += 1;
                println!("FAILED {} :: {}", r.file, r.name);
                for why in &r.failures {
                    println!("         {why}");
                }
            }
        }
    }
    println!("{passed} passed, {failed} failed");
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
