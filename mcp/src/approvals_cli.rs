//! `codespace approvals list|show|grant|deny`: the operator's channel (`cli`) for approval
//! holds, working on the store while the server runs (the server reads a hold's state on every
//! resume). `show` prints the held patch or command line, never environment values.

use anyhow::{Context, Result, anyhow};
use codespace_engine::policy::PolicySource;
use codespace_engine::wire::ApprovalDecision;
use codespace_engine::{Config, PolicyStore};
use codespace_store::{ApprovalRow, Store};
use serde_json::{Value, json};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Where the holds are: the store and the config (policies, profiles, redaction).
#[derive(clap::Args)]
pub struct Location {
    /// Operator config (its `store`, policies and profiles).
    #[arg(long, env = "CODESPACE_CONFIG")]
    pub config: Option<PathBuf>,
    /// The store (default: the config's `store`, else the one `serve` uses).
    #[arg(long)]
    pub store: Option<PathBuf>,
}

/// The sub-commands.
#[derive(clap::Subcommand)]
pub enum ApprovalsCommand {
    /// List holds, newest first (default: pending and granted ones).
    #[command(after_help = crate::help::APPROVALS_LIST)]
    List {
        /// Every state (consumed, denied, expired included).
        #[arg(long)]
        all: bool,
        /// JSON lines.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        loc: Location,
    },
    /// Show one hold: who asked, what it runs or changes, its state.
    #[command(after_help = crate::help::APPROVALS_SHOW)]
    Show {
        /// The hold (`appr-…`).
        id: String,
        /// One JSON document.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        loc: Location,
    },
    /// Grant a pending hold (decided by policy as `approval_resolve` over channel `cli`).
    #[command(after_help = crate::help::APPROVALS_GRANT)]
    Grant {
        /// The hold (`appr-…`).
        id: String,
        /// Who grants (default: $USER).
        #[arg(long = "as", value_name = "NAME")]
        operator: Option<String>,
        #[command(flatten)]
        loc: Location,
    },
    /// Deny a pending hold; final, and its stored arguments are scrubbed.
    #[command(after_help = crate::help::APPROVALS_DENY)]
    Deny {
        /// The hold (`appr-…`).
        id: String,
        /// Who denies (default: $USER).
        #[arg(long = "as", value_name = "NAME")]
        operator: Option<String>,
        #[command(flatten)]
        loc: Location,
    },
}

fn config_of(loc: &Location) -> Result<Config> {
    match &loc.config {
        Some(c) => Config::load(c).with_context(|| format!("config {}", c.display())),
        None => Config::embedded_default(Path::new(".")).map_err(|e| anyhow!("{e}")),
    }
}

fn open_store(loc: &Location, cfg: &Config) -> Result<Store> {
    let path = match loc.store.clone().or_else(|| cfg.store.clone()) {
        Some(p) => p,
        None => crate::setup::default_store_path()?,
    };
    if !path.exists() {
        return Err(anyhow!(
            "no store at {} (pass --store FILE or --config FILE)",
            path.display()
        ));
    }
    Store::open(&path).with_context(|| format!("cannot open {}", path.display()))
}

/// What `show` prints of the held call: the patch text or the argv, with environment names
/// only (their values may be secrets), redacted.
fn held_view(cfg: &Config, row: &ApprovalRow) -> Value {
    let Some(Value::Object(args)) = &row.arguments else {
        return Value::Null;
    };
    let mut out = serde_json::Map::new();
    for (k, v) in args {
        let shown = match (k.as_str(), v) {
            ("env", Value::Object(m)) => json!(m.keys().collect::<Vec<_>>()),
            ("env", _) => json!("(withheld)"),
            (_, Value::String(s)) => json!(cfg.redaction.text(s).into_owned()),
            (_, Value::Array(items)) => json!(
                items
                    .iter()
                    .map(|i| match i {
                        Value::String(s) => json!(cfg.redaction.text(s).into_owned()),
                        other => other.clone(),
                    })
                    .collect::<Vec<_>>()
            ),
            (_, other) => other.clone(),
        };
        let name = if k == "env" { "env_names" } else { k.as_str() };
        out.insert(name.to_string(), shown);
    }
    Value::Object(out)
}

fn row_json(cfg: &Config, row: &ApprovalRow) -> Value {
    let state = if row.state == "resuming" {
        "granted"
    } else {
        row.state.as_str()
    };
    json!({
        "approval_id": row.approval_id,
        "state": state,
        "tool": row.tool,
        "workspace": row.workspace,
        "summary": row.summary,
        "requested_by": row.requested_by,
        "transport": row.transport,
        "resolved_by": row.resolved_by,
        "channel": row.channel,
        "created": codespace_engine::wire::rfc3339_ms(row.created_ms),
        "expires": codespace_engine::wire::rfc3339_ms(row.expires_ms),
        "held": held_view(cfg, row),
    })
}

/// Runs one sub-command.
pub fn run(cmd: ApprovalsCommand) -> Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    match cmd {
        ApprovalsCommand::List { all, json, loc } => {
            let cfg = config_of(&loc)?;
            let store = open_store(&loc, &cfg)?;
            let rows = store.approvals(None, 1000, codespace_store::now_ms())?;
            let rows: Vec<&ApprovalRow> = rows
                .iter()
                .filter(|r| all || matches!(r.state.as_str(), "pending" | "granted" | "resuming"))
                .collect();
            for r in &rows {
                if json {
                    writeln!(out, "{}", row_json(&cfg, r))?;
                } else {
                    let state = if r.state == "resuming" {
                        "granted"
                    } else {
                        &r.state
                    };
                    writeln!(
                        out,
                        "{}  {:<9} {:<10} by {:<12} {}",
                        r.approval_id, state, r.workspace, r.requested_by, r.summary
                    )?;
                }
            }
            if rows.is_empty() && !json {
                writeln!(out, "no holds{}", if all { "" } else { " waiting" })?;
            }
            Ok(ExitCode::SUCCESS)
        }
        ApprovalsCommand::Show { id, json, loc } => {
            let cfg = config_of(&loc)?;
            let store = open_store(&loc, &cfg)?;
            let row = store
                .approval(&id, codespace_store::now_ms())?
                .ok_or_else(|| anyhow!("APPROVAL_NOT_FOUND: no hold `{id}` in this store"))?;
            let v = row_json(&cfg, &row);
            if json {
                writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
                return Ok(ExitCode::SUCCESS);
            }
            for k in [
                "approval_id",
                "state",
                "tool",
                "workspace",
                "requested_by",
                "transport",
                "created",
                "expires",
                "resolved_by",
                "channel",
                "summary",
            ] {
                let shown = match v.get(k) {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Null) | None => "-".into(),
                    Some(other) => other.to_string(),
                };
                writeln!(out, "{k:<13} {shown}")?;
            }
            match v.get("held") {
                Some(Value::Object(h)) => {
                    if let Some(Value::String(patch)) = h.get("patch") {
                        writeln!(out, "patch:\n{patch}")?;
                    }
                    if let Some(Value::Array(argv)) = h.get("command") {
                        let words: Vec<String> = argv
                            .iter()
                            .map(|w| w.as_str().map_or_else(|| w.to_string(), str::to_string))
                            .collect();
                        writeln!(out, "command:      {}", words.join(" "))?;
                    }
                    if let Some(names) = h.get("env_names") {
                        writeln!(out, "env names:    {names}")?;
                    }
                }
                _ => writeln!(out, "held call:    (scrubbed)")?,
            }
            Ok(ExitCode::SUCCESS)
        }
        ApprovalsCommand::Grant { id, operator, loc } => {
            resolve(&id, ApprovalDecision::Grant, operator, &loc, &mut out)
        }
        ApprovalsCommand::Deny { id, operator, loc } => {
            resolve(&id, ApprovalDecision::Deny, operator, &loc, &mut out)
        }
    }
}

fn resolve(
    id: &str,
    decision: ApprovalDecision,
    operator: Option<String>,
    loc: &Location,
    out: &mut impl Write,
) -> Result<ExitCode> {
    let cfg = config_of(loc)?;
    let store = open_store(loc, &cfg)?;
    let source = match &cfg.policies_dir {
        None => PolicySource::Embedded,
        Some(p) => PolicySource::Dir {
            policies: p.clone(),
            schema: cfg.schema_file.clone().unwrap_or_else(|| {
                p.parent()
                    .unwrap_or(Path::new("."))
                    .join("schema/codespace.cedarschema")
            }),
        },
    };
    let policies = PolicyStore::load_for_profiles(source, cfg.profiles.keys().cloned().collect())
        .map_err(|e| anyhow!("policies: {e}"))?;
    let operator = operator
        .or_else(|| std::env::var("USER").ok())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "operator".into());
    match codespace_engine::gateway::approvals::cli_resolve(
        &cfg,
        &policies.snapshot(),
        &store,
        id,
        decision,
        &operator,
    ) {
        Ok(r) => {
            writeln!(out, "{} {}", r.approval_id, r.state)?;
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => Err(anyhow!("{}: {}", e.code.as_str(), e.message)),
    }
}
