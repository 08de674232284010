//! Command-line interface: argument parsing and the sub-commands.

use crate::server::CodeSpaceServer;
use anyhow::{Context, Result, anyhow};
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
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
    about = crate::help::ABOUT,
    after_help = crate::help::TOP
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve MCP over stdio, or over streamable HTTP with --http. Without a config, DIR
    /// (default: the current directory) is workspace `default` with profile `workspace-write`.
    #[command(after_help = crate::help::SERVE)]
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
        toolchains: crate::setup::ToolchainArgs,
        #[command(flatten)]
        http: crate::http::HttpArgs,
    },
    /// Print the decision log (audit) from the store, newest first: a table, or JSON lines
    /// for a SIEM.
    #[command(after_help = crate::help::AUDIT)]
    Audit {
        #[command(subcommand)]
        command: Option<AuditCommand>,
        #[command(flatten)]
        args: crate::policy_cli::AuditArgs,
    },
    /// Policy tools for security teams and CI.
    #[command(after_help = crate::help::POLICY)]
    Policy {
        #[command(subcommand)]
        command: PolicyCommand,
    },
    /// Check a set-up: the effective config, the sandbox probe, the policy set, the store, and
    /// what workspace_info would report for each workspace.
    #[command(after_help = crate::help::DOCTOR)]
    Doctor(crate::doctor::DoctorArgs),
    /// The config file: its JSON Schema.
    #[command(after_help = crate::help::CONFIG)]
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Operator chores on the store: the patch journals other servers left (`ops journals`) and
    /// the operation ledger (`ops list|show|diff`).
    #[command(after_help = crate::help::OPS)]
    Ops {
        #[command(subcommand)]
        command: crate::ops_cli::OpsCommand,
    },
    /// Approval holds: list, show, grant or deny them (channel `cli`), also while the server runs.
    #[command(after_help = crate::help::APPROVALS)]
    Approvals {
        #[command(subcommand)]
        command: crate::approvals_cli::ApprovalsCommand,
    },
    /// Serve the worker protocol (a gateway's hands in a container, over ssh, as another uid):
    /// over stdin/stdout, or on a Unix socket. The secret is the first line of stdin.
    #[command(after_help = crate::help::WORKER)]
    Worker(crate::worker_cli::WorkerArgs),
    /// Environments' chores: put this build's binary on an ssh environment's host (`install`).
    #[command(after_help = crate::help::ENVIRONMENTS)]
    Environments {
        #[command(subcommand)]
        command: EnvironmentsCommand,
    },
    /// The web console, read-only, against a store (no running server needed): decisions,
    /// policies, holds, processes and operations for the operators the config names.
    #[command(after_help = crate::help::CONSOLE)]
    Console(crate::console_cli::ConsoleArgs),
}

#[derive(Subcommand)]
enum AuditCommand {
    /// Re-redact the rows already stored (decisions, approval holds that can no longer run,
    /// operations, events) with the redaction patterns in force now; report how many changed.
    #[command(after_help = crate::help::AUDIT_SCRUB)]
    Scrub(crate::audit_scrub::ScrubArgs),
}

#[derive(Subcommand)]
enum EnvironmentsCommand {
    /// Copy this binary to an ssh environment's host through its own connection, as
    /// `<dir>/codespace-<build id>`; nothing is sent when that copy is already there.
    #[command(after_help = crate::help::ENVIRONMENTS_INSTALL)]
    Install(crate::install_cli::InstallArgs),
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Print the JSON Schema of the config file (for editors and CI validation).
    #[command(after_help = crate::help::CONFIG_SCHEMA)]
    Schema,
}

#[derive(Subcommand)]
enum PolicyCommand {
    /// Parse, lint and strictly validate the schema and policies.
    #[command(after_help = crate::help::POLICY_VALIDATE)]
    Validate {
        /// Also check the set's signature (`<policies>/policy-set.sig`) against this OpenSSH
        /// `allowed_signers` file (default: the config's `policies.allowed_signers` when it
        /// requires a signature) and name the signer.
        #[arg(long, value_name = "FILE")]
        allowed_signers: Option<PathBuf>,
        #[command(flatten)]
        loc: PolicyLocation,
    },
    /// Sign the policy set with an SSH key (`ssh-keygen -Y sign -n codespace-policy` over the
    /// set's manifest): writes `<policies>/policy-set.sig`.
    #[command(after_help = crate::help::POLICY_SIGN)]
    Sign {
        /// The private key (an OpenSSH key file, as for `ssh-keygen -Y sign -f`).
        #[arg(long, value_name = "FILE")]
        key: PathBuf,
        #[command(flatten)]
        loc: PolicyLocation,
    },
    /// Run policy test files (default: every .yaml under <policies>/tests), with coverage.
    #[command(after_help = crate::help::POLICY_TEST)]
    Test {
        #[command(flatten)]
        args: crate::policy_cli::TestArgs,
        #[command(flatten)]
        loc: PolicyLocation,
    },
    /// Explain the decision on one tool call: requests, entities, per-policy evaluation.
    /// Exit 0 allow, 2 deny.
    #[command(after_help = crate::help::POLICY_EXPLAIN)]
    Explain {
        #[command(flatten)]
        args: crate::policy_cli::ExplainArgs,
        #[command(flatten)]
        loc: PolicyLocation,
    },
    /// Re-decide recorded requests (and, with --tests, the policy test cases) under a
    /// candidate set and list what flips. Exit 0 no flip, 2 only narrowing, 3 any widening.
    #[command(after_help = crate::help::POLICY_DIFF)]
    Diff {
        #[command(flatten)]
        args: crate::policy_diff::DiffArgs,
        #[command(flatten)]
        loc: PolicyLocation,
    },
    /// List every policy: id, effect, file:line, reason.
    #[command(after_help = crate::help::POLICY_LS)]
    Ls {
        /// JSON lines.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        loc: PolicyLocation,
    },
    /// Policies that determined no logged decision since T (default 1d).
    #[command(after_help = crate::help::POLICY_UNUSED)]
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
    /// Prove properties with Cedar's symbolic compiler and cvc5 over the config's profile tree
    /// (read-only never mutates; no profile writes git hooks/config or server-owned files; no
    /// command writes .git/**; read-only ⊆ workspace-write; no policy errors; --implies OLD;
    /// --properties FILE). Exit 0 proven, 1 a property fails, 4 no solver found.
    #[command(after_help = crate::help::POLICY_VERIFY)]
    Verify {
        #[command(flatten)]
        args: crate::policy_verify::VerifyArgs,
        #[command(flatten)]
        loc: PolicyLocation,
    },
    /// Write the shipped policies (base, profiles, examples, tests) and schema, as embedded in
    /// this binary, into DIR as a starting point, with a README on what to edit.
    #[command(after_help = crate::help::POLICY_INIT)]
    Init {
        /// A new or empty directory.
        dir: PathBuf,
    },
    /// Format every .cedar file with Cedar's formatter (comments and annotations kept);
    /// --check lists what would change and exits 1 instead.
    #[command(after_help = crate::help::POLICY_FMT)]
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

/// `codespace worker ...` parsed on its own: the worker never builds the other sub-commands'
/// parsers (their code stays out of an idle worker's resident pages).
#[derive(Parser)]
#[command(name = "codespace worker", version, after_help = crate::help::WORKER)]
struct WorkerCli {
    #[command(flatten)]
    args: crate::worker_cli::WorkerArgs,
}

/// Entry point after the helper check.
pub fn main() -> ExitCode {
    let mut argv = std::env::args_os();
    if argv.nth(1).is_some_and(|a| a == "worker") {
        // `codespace worker ARGS`: the same flags and help as the sub-command of the full CLI.
        let cli = WorkerCli::parse_from(std::iter::once("codespace worker".into()).chain(argv));
        return finish(crate::worker_cli::run_runner(&cli.args));
    }
    let matches = Cli::command().get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    let result = match cli.command {
        Command::Serve {
            dir,
            config,
            store,
            toolchains,
            http,
        } => {
            let config_origin = crate::setup::arg_origin(
                matches.subcommand_matches("serve"),
                "config",
                "--config",
                "CODESPACE_CONFIG",
            );
            serve(dir, config, config_origin, store, &toolchains, http).map(|_| ExitCode::SUCCESS)
        }
        Command::Doctor(args) => {
            let config_origin = crate::setup::arg_origin(
                matches.subcommand_matches("doctor"),
                "config",
                "--config",
                "CODESPACE_CONFIG",
            );
            crate::doctor::run(&args, config_origin)
        }
        Command::Config { command } => match command {
            ConfigCommand::Schema => config_schema(),
        },
        Command::Audit {
            command: Some(AuditCommand::Scrub(args)),
            ..
        } => crate::audit_scrub::scrub(&args, crate::setup::default_store_path),
        Command::Audit {
            command: None,
            args,
        } => crate::policy_cli::audit(&args, crate::setup::default_store_path),
        Command::Approvals { command } => crate::approvals_cli::run(command),
        Command::Worker(args) => crate::worker_cli::run_runner(&args),
        Command::Environments {
            command: EnvironmentsCommand::Install(args),
        } => crate::install_cli::run(&args),
        Command::Console(args) => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(anyhow::Error::from)
            .and_then(|rt| rt.block_on(crate::console_cli::run_read_only(args)))
            .map(|()| ExitCode::SUCCESS),
        Command::Ops { command } => crate::ops_cli::run(command),
        Command::Policy { command } => match command {
            PolicyCommand::Validate {
                allowed_signers,
                loc,
            } => policy_validate(&loc, allowed_signers),
            PolicyCommand::Sign { key, loc } => loc
                .source()
                .and_then(|src| crate::policy_admin::sign(&src, &key)),
            PolicyCommand::Test { args, loc } => loc
                .source()
                .and_then(|src| crate::policy_cli::test(&args, &src, loc.config()?.as_ref())),
            PolicyCommand::Explain { args, loc } => loc.source().and_then(|src| {
                crate::policy_cli::explain(
                    &args,
                    loc.config.as_deref(),
                    src,
                    crate::setup::default_store_path,
                )
            }),
            PolicyCommand::Diff { args, loc } => loc.source().and_then(|src| {
                crate::policy_diff::diff(
                    &args,
                    &src,
                    loc.config()?.as_ref(),
                    crate::setup::default_store_path,
                )
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
                    crate::setup::default_store_path,
                )?;
                crate::policy_admin::unused(&src, &path, &since, json)
            }),
            PolicyCommand::Verify { args, loc } => loc
                .source()
                .and_then(|src| crate::policy_verify::verify(&args, &src, loc.config()?.as_ref())),
            PolicyCommand::Init { dir } => crate::policy_admin::init(&dir),
            PolicyCommand::Fmt { check, loc } => loc
                .source()
                .and_then(|src| crate::policy_admin::fmt(&src, check)),
        },
    };
    finish(result)
}

/// The exit code of a sub-command's result; an error is printed first.
fn finish(result: Result<ExitCode>) -> ExitCode {
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

fn config_schema() -> Result<ExitCode> {
    println!(
        "{}",
        serde_json::to_string_pretty(&codespace_engine::config::json_schema())?
    );
    Ok(ExitCode::SUCCESS)
}

fn serve(
    dir: Option<PathBuf>,
    config: Option<PathBuf>,
    config_origin: crate::setup::Origin,
    store: Option<PathBuf>,
    toolchains: &crate::setup::ToolchainArgs,
    http: crate::http::HttpArgs,
) -> Result<()> {
    let http = http.options().map_err(|e| anyhow!(e))?;
    crate::setup::init_logging();
    // Every client is a descriptor (and so is every idle socket before it authenticates): the
    // soft limit goes up to the hard one.
    match crate::http_conn::raise_fd_limit() {
        Ok((before, after)) if after > before => {
            tracing::info!(
                before,
                after,
                "raised the soft open-file limit to the hard limit"
            );
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "cannot raise the soft open-file limit"),
    }
    if let Err(e) = codespace_runner_sandbox::harden_current_process() {
        tracing::warn!(error = %e, "process hardening failed");
    }
    let effective = crate::setup::effective(
        "serve",
        dir.as_deref(),
        config.as_deref(),
        config_origin,
        store.as_deref(),
    )?;
    let (mut cfg, store_path, store_origin) =
        (effective.config, effective.store, effective.store_origin);
    cfg.store = Some(store_path.clone());
    // The invoking user's toolchains, for workspaces whose config sets no command `path`.
    for refused in crate::setup::add_toolchains(&mut cfg, toolchains) {
        tracing::warn!("toolchain: {refused}");
    }
    let banner = (http.is_none() && crate::setup::on_terminal())
        .then(|| crate::setup::stdio_banner(&cfg, &store_path));
    let source = source_from(cfg.policies_dir.clone(), cfg.schema_file.clone());
    // Nothing of the server's own may sit where a command or a patch could rewrite it; checked
    // before the store is created.
    if let Err(e) = codespace_engine::server_files::check_outside_workspaces(&cfg, &source) {
        if store_origin == crate::setup::Origin::Default && e.0.starts_with("store") {
            return Err(anyhow!(
                "{e} (this is the default store location; pass --store FILE outside the workspace)"
            ));
        }
        return Err(e.into());
    }
    let policy = Arc::new(
        PolicyStore::load_linked(
            source,
            cfg.profiles.keys().cloned().collect(),
            cfg.policy_signing.clone(),
            cfg.policy_templates.clone(),
        )
        .map_err(|e| anyhow!("policies rejected:\n{e}"))?,
    );
    let store = Arc::new(codespace_store::Store::open(&store_path).map_err(|e| {
        anyhow!(crate::setup::store_error(
            "serve",
            &store_path,
            store_origin,
            &e
        ))
    })?);
    let tightened = crate::setup::log_tightened(&store);
    if !tightened.is_empty()
        && let Err(e) = store.insert_event(
            "store_permissions_tightened",
            &serde_json::json!({"files": tightened, "mode": "0600"}),
        )
    {
        tracing::error!(error = %e, "cannot log the store permission change");
    }
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
        masking_enforced: probe.masking_available(),
    };
    let helper =
        codespace_runner_sandbox::choose_helper(&std::env::current_exe().unwrap_or_default());
    if let Some(why) = &helper.fallback_reason {
        tracing::warn!(
            helper = %helper.path.display(),
            "sandbox helper: {why}; commands start through this binary instead (slower)"
        );
    }
    // The config reloader's copy shares the redactor with the gateway's (one live set).
    let reload_cfg = cfg.clone();
    let gateway = Gateway::new(cfg, Arc::clone(&policy), Some(Arc::clone(&store)), sandbox)?;
    gateway.record_startup(serde_json::json!({
        "landlock_abi": probe.landlock_abi,
        "seccomp": probe.seccomp,
        "user_namespaces": probe.user_namespaces,
        "net_namespaces": probe.net_namespaces,
        "mount_namespaces": probe.mount_namespaces,
    }));
    #[cfg(feature = "test-hooks")]
    let gateway = gateway.with_patch_hooks(patch_test_hooks());
    let gateway = Arc::new(
        gateway
            .with_transports(match &http {
                Some(_) => vec![crate::http::TRANSPORT.to_string()],
                None => vec!["stdio".to_string()],
            })
            // The sandbox helper: `codespace-sandbox-helper` beside this binary, else this
            // binary (`codespace __sandbox-exec`); without one, sandboxed workspaces refuse
            // every command.
            .with_helper_exe(helper.path),
    );
    // Roll back patches a crash interrupted; mark unfinished operations `unknown`.
    let recovered = codespace_engine::gateway::patches::recover(&gateway);
    if !recovered.is_empty() {
        tracing::warn!(operations = ?recovered, "rolled back interrupted patches at start-up");
    }
    // Retention runs on its own thread and its own connection, off every request path.
    let _pruner = codespace_store::Store::open(&store_path)
        .map_err(|e| anyhow!("cannot open the store for retention: {e}"))
        .and_then(|s| {
            gateway
                .start_retention(Arc::new(s), codespace_engine::retention::PRUNE_INTERVAL)
                .context("retention thread")
        })?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        // Cedar evaluates, validates and drops a policy's expression tree recursively: an
        // operator policy with a long `||` chain overflowed the default 2 MiB worker stack and
        // aborted the server. Stack pages are only committed as they are touched.
        .thread_stack_size(codespace_engine::policy::EVAL_STACK_BYTES)
        // Freed heap pages go back to the kernel (at most once a second), so RSS stays flat.
        .on_thread_park(codespace_engine::heap::release_free_heap_if_due)
        .build()
        .context("tokio runtime")?;
    let config_reloader = {
        let _in_runtime = rt.enter();
        crate::config_reload::start(reload_cfg, Arc::clone(&store))
    };
    rt.spawn(crate::policy_cli::reload_on_sighup(
        Arc::clone(&reloader),
        config_reloader,
    ));
    // OpenTelemetry export (`export.otlp`): its own threads, never on a call's path; a collector
    // that cannot be reached only costs dropped records.
    if let Some(otlp) = &gateway.config().export.otlp
        && let Err(e) = codespace_engine::telemetry::otlp::start(otlp)
    {
        tracing::error!(error = %e, "OTLP export not started");
    }
    let sealer = Arc::clone(&gateway);
    let result = rt.block_on(async move {
        // Whatever ends serving (stdin EOF, SIGTERM, an error), the processes die with it.
        let owner = Arc::clone(&gateway);
        let served = async move {
            if let Some(opts) = http {
                return Ok(crate::http::serve_until(gateway, opts, shutdown_signal()).await?);
            }
            if let Some(line) = &banner {
                eprintln!("{line}");
            }
            let max_message_bytes = gateway.config().limits.max_message_bytes;
            let server = CodeSpaceServer::new(gateway, Session::stdio());
            // The guard refuses longer lines itself; rmcp drains its replies and closes the
            // transport (flushing stdout) before `waiting` returns.
            let transport = crate::stdio::StdioTransport::process_stdio(max_message_bytes);
            let stdout = transport.output();
            let running = match server.serve(transport).await {
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
            let _ = tokio::time::timeout(std::time::Duration::from_secs(2), stdout.flush()).await;
            served
        }
        .await;
        owner.shutdown().await;
        codespace_engine::gateway::save_path_indexes(&owner).await;
        // What the export still holds goes out (bounded by its timeout), off the runtime.
        let _ = tokio::task::spawn_blocking(codespace_engine::telemetry::otlp::flush).await;
        served
    });
    // The stdio transport reads stdin on a blocking thread that a signal does not wake; do not
    // let dropping the runtime wait for it.
    rt.shutdown_timeout(std::time::Duration::from_millis(500));
    // No temporary file after this point; when none is left, the next start need not sweep.
    if !sealer.seal_temp_files() {
        tracing::warn!(
            "a patch was still writing at exit; the next start sweeps its temporary file"
        );
    }
    result
}

/// Test hooks for crash tests: `CODESPACE_TEST_PATCH_STEP_DELAY_MS` makes every apply_patch write
/// step sleep, so a test can kill the server mid-apply; `CODESPACE_TEST_PATCH_GATE=<file>` holds
/// every write step after the first until the file exists. Compiled only with the `test-hooks`
/// feature (scripts/test.sh enables it; release builds do not).
#[cfg(feature = "test-hooks")]
fn patch_test_hooks() -> codespace_engine::gateway::patches::PatchHooks {
    if let Some(gate) = std::env::var_os("CODESPACE_TEST_PATCH_GATE") {
        return codespace_engine::gateway::patches::PatchHooks::gated_after_first_step(gate.into());
    }
    std::env::var("CODESPACE_TEST_PATCH_STEP_DELAY_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map(codespace_engine::gateway::patches::PatchHooks::step_delay)
        .unwrap_or_default()
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

fn policy_validate(loc: &PolicyLocation, allowed_signers: Option<PathBuf>) -> Result<ExitCode> {
    let source = loc.source()?;
    let config = loc.config()?;
    let signing = match allowed_signers {
        Some(p) => Some(codespace_engine::policy::set_signature::SigningRule {
            allowed_signers: std::path::absolute(&p)?,
        }),
        None => config.as_ref().and_then(|c| c.policy_signing.clone()),
    };
    let known = crate::policy_cli::known_profiles(
        &crate::policy_cli::base_profiles(config.as_ref()),
        &crate::policy_cli::parsed_default_tests(&source),
    );
    let links = crate::policy_cli::config_links(config.as_ref());
    let checked = source
        .read()
        .map(|b| b.with_links(&links))
        .and_then(compile)
        .and_then(|mut snap| {
            let errs = codespace_engine::policy::unknown_profile_errors(&snap, &known);
            if !errs.is_empty() {
                return Err(codespace_engine::policy::PolicyErrors(errs));
            }
            if let Some(rule) = &signing {
                snap.signer = Some(
                    codespace_engine::policy::set_signature::verify(&snap.bundle, rule)
                        .map_err(codespace_engine::policy::PolicyErrors::one_line)?,
                );
            }
            Ok(snap)
        });
    match checked {
        Ok(snap) => {
            let forbids = snap.meta.values().filter(|m| m.forbid).count();
            let against = match &source {
                PolicySource::Embedded => format!(
                    "the {} schema (the shipped set compiled into this binary)",
                    codespace_engine::policy::EMBEDDED_NAME
                ),
                PolicySource::Dir { .. } => snap.bundle.schema_name.clone(),
            };
            println!(
                "ok: {} policies ({} forbid, {} permit) validated strictly against {against}; set {}",
                snap.meta.len(),
                forbids,
                snap.meta.len() - forbids,
                snap.sha256
            );
            if let Some(signer) = &snap.signer {
                println!(
                    "ok: signed by {} ({}), checked against {}",
                    signer.principal,
                    signer.key,
                    signing
                        .as_ref()
                        .map(|r| r.allowed_signers.display().to_string())
                        .unwrap_or_default()
                );
            }
            if !snap.templates.is_empty() {
                println!(
                    "ok: {} template(s), {} linked polic{} from policies.templates",
                    snap.templates.len(),
                    snap.meta.values().filter(|m| m.template.is_some()).count(),
                    if snap.meta.values().filter(|m| m.template.is_some()).count() == 1 {
                        "y"
                    } else {
                        "ies"
                    }
                );
            }
            for (id, t) in &snap.templates {
                if !snap
                    .meta
                    .values()
                    .any(|m| m.template.as_deref() == Some(id.as_str()))
                {
                    println!(
                        "warning: {}:{}: template {id} is linked by no entry of policies.templates{}: it never applies",
                        t.file,
                        t.line,
                        if config.is_some() {
                            ""
                        } else {
                            " (no --config given)"
                        }
                    );
                }
            }
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;

    /// `--allow-uid` and `--exit-with-stdin` mean something only for a socket worker: with
    /// `--stdio` they are a usage error, not silently ignored; with `--socket` they parse.
    #[test]
    fn worker_socket_only_flags_are_a_usage_error_with_stdio() {
        let parse = |args: &[&str]| {
            let mut argv = vec!["codespace", "worker"];
            argv.extend_from_slice(args);
            Cli::try_parse_from(argv)
        };
        for bad in [
            &["--stdio", "--exit-with-stdin"][..],
            &["--exit-with-stdin", "--stdio"],
            &["--stdio", "--allow-uid", "5"],
            &["--exit-with-stdin"],
            &["--allow-uid", "5"],
        ] {
            let Err(e) = parse(bad) else {
                panic!("`codespace worker {}` parsed", bad.join(" "));
            };
            assert!(
                matches!(
                    e.kind(),
                    clap::error::ErrorKind::ArgumentConflict
                        | clap::error::ErrorKind::MissingRequiredArgument
                ),
                "{bad:?}: {e}"
            );
        }
        for good in [
            &["--stdio"][..],
            &[
                "--socket",
                "/tmp/w.sock",
                "--exit-with-stdin",
                "--allow-uid",
                "5",
            ],
        ] {
            let Ok(Cli {
                command: Command::Worker(args),
            }) = parse(good)
            else {
                panic!("`codespace worker {}` did not parse", good.join(" "));
            };
            assert_eq!(args.stdio, good == ["--stdio"]);
        }
    }

    /// Every subcommand, at every depth, has an `Examples:` block in its help; the top level
    /// points at the docs and says both transports.
    #[test]
    fn every_subcommand_has_examples_and_the_summary_names_both_transports() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for sub in cmd.get_subcommands() {
                let p = format!("{path} {}", sub.get_name());
                let after = sub
                    .get_after_help()
                    .map(|s| s.to_string())
                    .unwrap_or_default();
                if !after.contains("Examples:") {
                    missing.push(p.clone());
                }
                walk(sub, &p, missing);
            }
        }
        let cmd = Cli::command();
        cmd.clone().debug_assert();
        let mut missing = Vec::new();
        walk(&cmd, "codespace", &mut missing);
        assert!(
            missing.is_empty(),
            "subcommands without an Examples: block (add `after_help`): {missing:?}"
        );
        let top = cmd.clone().render_help().to_string();
        assert!(top.contains("stdio") && top.contains("HTTP"), "{top}");
        assert!(top.contains("docs/"), "{top}");
        let serve = cmd
            .find_subcommand("serve")
            .unwrap()
            .clone()
            .render_help()
            .to_string();
        assert!(
            serve.contains("--http") && serve.contains("stdio"),
            "{serve}"
        );
    }
}
