//! `codespace ops journals [--discard]`: the patch journals kept in a store (a shared default
//! store collects those of roots other servers serve), listed, and those no running server owns
//! discarded, each discard recorded as a `journal_discarded` event; and the operation ledger
//! (issue 31): `ops list` (recent operations), `ops show OP` (its files), `ops diff OP` (its
//! unified diff; withheld files named, never shown: the ledger never stored them).

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
    /// List the newest operations in the store (newest first).
    #[command(after_help = crate::help::OPS_LIST)]
    List(ListArgs),
    /// Show one operation: its status and the files the ledger recorded.
    #[command(after_help = crate::help::OPS_SHOW)]
    Show(OpArgs),
    /// Print one operation's unified diff from the ledger (withheld files named, never shown).
    #[command(after_help = crate::help::OPS_DIFF)]
    Diff(OpArgs),
}

/// Where the store is (the ledger sub-commands).
#[derive(Debug, clap::Args)]
pub struct StoreArgs {
    /// The store (default: the config's `store`, else the one `serve` uses).
    #[arg(long)]
    pub store: Option<PathBuf>,
    /// Operator config (for its `store`).
    #[arg(long, env = "CODESPACE_CONFIG")]
    pub config: Option<PathBuf>,
    /// JSON (one object per line).
    #[arg(long)]
    pub json: bool,
}

/// Flags of `ops list`.
#[derive(Debug, clap::Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub at: StoreArgs,
    /// Only this workspace id.
    #[arg(long)]
    pub workspace: Option<String>,
    /// At most this many operations.
    #[arg(long, default_value_t = 50)]
    pub limit: usize,
}

/// Flags of `ops show` and `ops diff`.
#[derive(Debug, clap::Args)]
pub struct OpArgs {
    /// The operation id (`op-…`).
    pub operation_id: String,
    #[command(flatten)]
    pub at: StoreArgs,
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
        OpsCommand::List(args) => list(&args),
        OpsCommand::Show(args) => show(&args),
        OpsCommand::Diff(args) => diff(&args),
    }
}

/// The store the ledger sub-commands read (it must exist).
fn open_store(at: &StoreArgs) -> Result<(Store, PathBuf)> {
    let config = at.config.as_deref().map(Config::load).transpose()?;
    let path = crate::policy_admin::store_path(
        at.store.clone(),
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
    Ok((store, path))
}

fn op_json(row: &codespace_store::OperationRow) -> serde_json::Value {
    serde_json::json!({
        "operation_id": row.operation_id,
        "tool": row.tool,
        "workspace_id": row.workspace,
        "client": row.client,
        "status": row.status,
        "operation_key": row.operation_key,
        "created_at": codespace_engine::wire::rfc3339_ms(row.created_ms),
        "finished_at": row.finished_ms.map(codespace_engine::wire::rfc3339_ms),
    })
}

fn op_line(row: &codespace_store::OperationRow) -> String {
    format!(
        "{}  {}  {}  {}  workspace {}  client {}",
        codespace_engine::wire::rfc3339_ms(row.created_ms),
        row.operation_id,
        row.tool,
        row.status,
        row.workspace,
        row.client.as_deref().unwrap_or("-"),
    )
}

fn list(args: &ListArgs) -> Result<ExitCode> {
    let (store, _) = open_store(&args.at)?;
    let mut out = std::io::stdout().lock();
    for row in store.recent_operations(args.workspace.as_deref(), args.limit)? {
        if args.at.json {
            writeln!(out, "{}", serde_json::to_string(&op_json(&row))?)?;
        } else {
            writeln!(out, "{}", codespace_engine::shown::escape(&op_line(&row)))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn find_op(store: &Store, id: &str) -> Result<codespace_store::OperationRow> {
    store
        .operation_by_id(id)?
        .ok_or_else(|| anyhow!("no operation {id} in the store"))
}

fn show(args: &OpArgs) -> Result<ExitCode> {
    let (store, _) = open_store(&args.at)?;
    let row = find_op(&store, &args.operation_id)?;
    let files = codespace_engine::tools::ledger::stored_files(&store, &row.operation_id)?;
    let mut out = std::io::stdout().lock();
    if args.at.json {
        let mut v = op_json(&row);
        if let serde_json::Value::Object(m) = &mut v {
            m.insert("files".into(), serde_json::to_value(&files)?);
        }
        writeln!(out, "{}", serde_json::to_string(&v)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    writeln!(out, "{}", codespace_engine::shown::escape(&op_line(&row)))?;
    for f in &files {
        let mut line = format!("  {} {}", f.kind, f.path);
        if let Some(from) = &f.from {
            line.push_str(&format!(" (from {from})"));
        }
        if f.withheld {
            line.push_str("  withheld (content never stored)");
        }
        if let Some(p) = &f.process_id {
            line.push_str(&format!("  process {p}, best effort"));
        }
        writeln!(out, "{}", codespace_engine::shown::escape(&line))?;
    }
    if files.is_empty() {
        writeln!(out, "  (the ledger recorded no files)")?;
    }
    Ok(ExitCode::SUCCESS)
}

fn diff(args: &OpArgs) -> Result<ExitCode> {
    let (store, _) = open_store(&args.at)?;
    let row = find_op(&store, &args.operation_id)?;
    let text = codespace_engine::tools::ledger::stored_diff(&store, &row.operation_id)?;
    let mut out = std::io::stdout().lock();
    if args.at.json {
        writeln!(
            out,
            "{}",
            serde_json::to_string(
                &serde_json::json!({"operation_id": row.operation_id, "diff": text})
            )?
        )?;
    } else {
        // Control characters of file contents escaped for the terminal (`--json` has the text
        // exactly as the ledger holds it).
        out.write_all(codespace_engine::shown::escape_lines(&text).as_bytes())?;
    }
    Ok(ExitCode::SUCCESS)
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
