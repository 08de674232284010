//! `codespace ops journals [--discard]`: the patch journals kept in a store (a shared default
//! store collects those of roots other servers serve), listed, and those no running server owns
//! discarded, each discard recorded as a `journal_discarded` event.

use anyhow::{Result, anyhow};
use codespace_engine::Config;
use codespace_engine::gateway::patches::{StoredJournal, discard_stray_journals, stored_journals};
use codespace_store::Store;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// The `ops` sub-commands.
#[derive(Debug, clap::Subcommand)]
pub enum OpsCommand {
    /// List the patch journals kept in the store; --discard removes those no running server
    /// owns (their half-applied files are left as they are).
    #[command(after_help = crate::help::OPS_JOURNALS)]
    Journals(JournalsArgs),
}

/// Flags of `ops journals`.
#[derive(Debug, clap::Args)]
pub struct JournalsArgs {
    /// Discard every journal whose server is not running (recorded as `journal_discarded`
    /// events); journals of running servers are kept.
    #[arg(long)]
    pub discard: bool,
    /// The store (default: the config's `store`, else the one `serve` uses).
    #[arg(long)]
    pub store: Option<PathBuf>,
    /// Operator config (for its `store`).
    #[arg(long, env = "CODESPACE_CONFIG")]
    pub config: Option<PathBuf>,
    /// JSON lines (one object per journal).
    #[arg(long)]
    pub json: bool,
    /// Who discards, in the event rows (default: $USER).
    #[arg(long = "as", value_name = "NAME")]
    pub operator: Option<String>,
}

/// One line of the journal list.
pub fn journal_line(j: &StoredJournal) -> String {
    let owner = match (&j.owner, j.live) {
        (Some(o), true) => format!("server {o} (running: kept)"),
        (Some(o), false) => format!("server {o} (not running)"),
        (None, _) => "no recorded server".to_string(),
    };
    let mut paths = j
        .paths
        .iter()
        .take(3)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if j.paths.len() > 3 {
        paths.push_str(&format!(", … ({} files)", j.paths.len()));
    }
    format!(
        "{}  workspace {}  registration {}  {owner}{}  [{paths}]",
        j.operation_id,
        j.workspace,
        j.registration.as_deref().unwrap_or("-"),
        if j.sealed { "" } else { "  UNSEALED" },
    )
}

/// `codespace ops`.
pub fn run(command: OpsCommand) -> Result<ExitCode> {
    match command {
        OpsCommand::Journals(args) => journals(&args),
    }
}

fn journals(args: &JournalsArgs) -> Result<ExitCode> {
    let config = args.config.as_deref().map(Config::load).transpose()?;
    let path = crate::policy_admin::store_path(
        args.store.clone(),
        config.as_ref(),
        crate::setup::default_store_path,
    )?;
    if !path.exists() {
        return Err(anyhow!(
            "no store at {} (pass --store FILE or --config FILE)",
            path.display()
        ));
    }
    let store = Store::open(&path).map_err(|e| anyhow!("cannot open {}: {e}", path.display()))?;
    let mut out = std::io::stdout().lock();
    if args.discard {
        let by = args
            .operator
            .clone()
            .or_else(|| std::env::var("USER").ok())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "operator".into());
        let discarded = discard_stray_journals(&store, &format!("cli:{by}"))?;
        let kept = stored_journals(&store)?;
        for j in &discarded {
            if args.json {
                let mut v = serde_json::to_value(j)?;
                if let serde_json::Value::Object(m) = &mut v {
                    m.insert("discarded".into(), true.into());
                }
                writeln!(out, "{}", serde_json::to_string(&v)?)?;
            } else {
                writeln!(out, "discarded {}", journal_line(j))?;
            }
        }
        if !args.json {
            writeln!(
                out,
                "{} journal(s) discarded (journal_discarded events in {}); {} kept (servers running on this store)",
                discarded.len(),
                path.display(),
                kept.len()
            )?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let all = stored_journals(&store)?;
    for j in &all {
        if args.json {
            writeln!(out, "{}", serde_json::to_string(j)?)?;
        } else {
            writeln!(out, "{}", journal_line(j))?;
        }
    }
    if !args.json {
        let stray = all.iter().filter(|j| !j.live).count();
        writeln!(
            out,
            "{} journal(s) in {}: {} of running servers, {stray} no running server owns{}",
            all.len(),
            path.display(),
            all.len() - stray,
            if stray > 0 {
                " (discard them with `codespace ops journals --discard`)"
            } else {
                ""
            }
        )?;
    }
    Ok(ExitCode::SUCCESS)
}
