//! `codespace approvals list|show|grant|deny`: the operator's channel (`cli`) for approval
//! holds, working on the store while the server runs (the server reads a hold's state on every
//! resume). `show` prints all of a held call: the patch or the whole command line, its working
//! directory, `tty`, `background` and `env` (values through the redactor). Every text printed has
//! its control characters escaped ([`codespace_engine::shown`]); every cut is marked.

use anyhow::{Context, Result, anyhow};
use codespace_engine::policy::PolicySource;
use codespace_engine::shown::{escape, escape_lines};
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

/// What `show` prints of the held call: every argument, strings redacted; for a command also
/// its defaults (`cwd` `.`, `tty` and `background` false) and `env` as name → redacted value
/// (`env_names` kept for readers of the earlier shape).
pub fn held_view(cfg: &Config, row: &ApprovalRow) -> Value {
    let Some(Value::Object(args)) = &row.arguments else {
        return Value::Null;
    };
    let mut out = serde_json::Map::new();
    for (k, v) in args {
        let shown = match (k.as_str(), v) {
            ("env", Value::Object(m)) => {
                out.insert("env_names".into(), json!(m.keys().collect::<Vec<_>>()));
                Value::Object(
                    m.iter()
                        .map(|(name, value)| {
                            let value = value.as_str().unwrap_or_default();
                            let entry =
                                codespace_engine::gateway::approvals::env_entry(cfg, name, value);
                            let shown = entry
                                .strip_prefix(&format!("{name}="))
                                .map_or_else(|| entry.clone(), str::to_string);
                            (name.clone(), json!(shown))
                        })
                        .collect(),
                )
            }
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
        out.insert(k.clone(), shown);
    }
    if row.tool == "exec_command" {
        out.entry("cwd").or_insert_with(|| json!("."));
        out.entry("tty").or_insert_with(|| json!(false));
        out.entry("background").or_insert_with(|| json!(false));
        out.entry("env").or_insert_with(|| json!({}));
        out.entry("env_names").or_insert_with(|| json!([]));
    }
    Value::Object(out)
}

/// A JSON value as one line of text, strings without their quotes; escaped.
fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => escape(s).into_owned(),
        Value::Null => "-".into(),
        other => codespace_engine::shown::json_line(other),
    }
}

/// The held call of `show`, as text.
fn print_held(out: &mut impl Write, h: &serde_json::Map<String, Value>) -> Result<()> {
    if let Some(Value::String(patch)) = h.get("patch") {
        writeln!(out, "patch:\n{}", escape_lines(patch))?;
    }
    if let Some(Value::Array(argv)) = h.get("command") {
        let words: Vec<String> = argv
            .iter()
            .map(|w| w.as_str().map_or_else(|| w.to_string(), str::to_string))
            .collect();
        // The whole line, quoted as the summary quotes it, never cut.
        let facts = codespace_engine::request::command_facts(&words, false);
        let line = facts.get("line").and_then(Value::as_str).unwrap_or("");
        writeln!(out, "{:<13} {}", "command", escape(line))?;
    }
    for k in ["cwd", "tty", "background"] {
        if let Some(v) = h.get(k) {
            writeln!(out, "{k:<13} {}", text_of(v))?;
        }
    }
    if let Some(Value::Object(env)) = h.get("env") {
        if env.is_empty() {
            writeln!(out, "{:<13} (none)", "env")?;
        }
        for (name, value) in env {
            writeln!(out, "{:<13} {}={}", "env", escape(name), text_of(value))?;
        }
    }
    // Every other argument (timeout, yield, stderr mode, operation key, workspace).
    for (k, v) in h {
        if !matches!(
            k.as_str(),
            "patch" | "command" | "cwd" | "tty" | "background" | "env" | "env_names"
        ) {
            writeln!(out, "{:<13} {}", escape(k), text_of(v))?;
        }
    }
    Ok(())
}

fn row_json(cfg: &Config, row: &ApprovalRow) -> Value {
    let state = row.state.shown().as_str();
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
            let rows: Vec<&ApprovalRow> =
                rows.iter().filter(|r| all || r.state.is_open()).collect();
            for r in &rows {
                if json {
                    writeln!(
                        out,
                        "{}",
                        codespace_engine::shown::json_line(&row_json(&cfg, r))
                    )?;
                } else {
                    let state = r.state.shown().as_str();
                    writeln!(
                        out,
                        "{}  {:<9} {:<10} by {:<12} {}",
                        escape(&r.approval_id),
                        escape(state),
                        escape(&r.workspace),
                        escape(&r.requested_by),
                        escape(&r.summary)
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
                .ok_or_else(|| {
                    anyhow!(
                        "APPROVAL_NOT_FOUND: no hold `{}` in this store",
                        escape(&id)
                    )
                })?;
            let v = row_json(&cfg, &row);
            if json {
                writeln!(out, "{}", codespace_engine::shown::json_pretty(&v))?;
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
                writeln!(
                    out,
                    "{k:<13} {}",
                    v.get(k).map_or_else(|| "-".into(), text_of)
                )?;
            }
            match v.get("held") {
                Some(Value::Object(h)) => print_held(&mut out, h)?,
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
    let store = std::sync::Arc::new(open_store(loc, &cfg)?);
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
    let policies = PolicyStore::load_linked(
        source,
        cfg.profiles.keys().cloned().collect(),
        None,
        cfg.policy_templates.clone(),
    )
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
            writeln!(out, "{} {}", escape(&r.approval_id), r.state)?;
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => Err(anyhow!("{}: {}", e.code.as_str(), escape(&e.message))),
    }
}
