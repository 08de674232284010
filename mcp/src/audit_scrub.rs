//! `codespace audit scrub`: re-redacts rows already stored with the redaction patterns in force
//! now (the config's, else the built-in ones), table by table in batches, and reports how many
//! rows changed. Idempotent: a second run changes nothing. Every run is an `audit_scrub` event.

use anyhow::{Context, Result, anyhow};
use codespace_engine::Config;
use codespace_engine::redact::Redactor;
use codespace_store::{ScrubTarget, Scrubber, Store};
use serde_json::{Value, json};
use std::borrow::Cow;
use std::path::PathBuf;
use std::process::ExitCode;

/// Flags of `audit scrub`.
#[derive(Debug, clap::Args)]
pub struct ScrubArgs {
    /// The store (default: the config's `store`, else the one `serve` uses).
    #[arg(long)]
    pub store: Option<PathBuf>,
    /// Operator config (for its `store` and its `redaction` patterns).
    #[arg(long, env = "CODESPACE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Rows per transaction.
    #[arg(long, value_name = "N", default_value_t = 500)]
    pub batch: usize,
    /// One JSON object instead of a sentence.
    #[arg(long)]
    pub json: bool,
}

struct WithRedactor<'a>(&'a Redactor);

impl Scrubber for WithRedactor<'_> {
    fn text(&self, s: &str) -> Option<String> {
        match self.0.text(s) {
            Cow::Owned(o) if o != s => Some(o),
            _ => None,
        }
    }

    fn json(&self, v: &mut Value) {
        self.0.json(v);
    }
}

/// `codespace audit scrub`.
pub fn scrub(
    args: &ScrubArgs,
    default_store: impl FnOnce() -> Result<PathBuf>,
) -> Result<ExitCode> {
    let cfg = args.config.as_deref().map(Config::load).transpose()?;
    let path = match args
        .store
        .clone()
        .or(cfg.as_ref().and_then(|c| c.store.clone()))
    {
        Some(p) => p,
        None => default_store()?,
    };
    if !path.exists() {
        return Err(anyhow!(
            "no store at {} (pass --store FILE or --config FILE)",
            path.display()
        ));
    }
    let redactor = cfg
        .as_ref()
        .map(|c| c.redaction.current())
        .unwrap_or_default();
    let store = Store::open(&path).with_context(|| format!("cannot open {}", path.display()))?;
    crate::setup::log_tightened(&store);
    let scrubber = WithRedactor(&redactor);
    let batch = args.batch.max(1);
    let mut tables = serde_json::Map::new();
    let (mut examined, mut changed) = (0_usize, 0_usize);
    let mut per = Vec::new();
    for target in ScrubTarget::ALL {
        let (mut t_examined, mut t_changed, mut after) = (0_usize, 0_usize, 0_i64);
        loop {
            let b = store
                .scrub_batch(target, after, batch, &scrubber)
                .with_context(|| format!("scrubbing {}", target.as_str()))?;
            t_examined += b.examined;
            t_changed += b.changed;
            match b.next_after {
                Some(next) if b.examined == batch => after = next,
                _ => break,
            }
        }
        examined += t_examined;
        changed += t_changed;
        per.push(format!("{} {t_changed}/{t_examined}", target.as_str()));
        tables.insert(
            target.as_str().into(),
            json!({"examined": t_examined, "changed": t_changed}),
        );
    }
    // Only when something changed: a clean store is not rewritten (and a second run is cheap).
    let compacted = if changed > 0 {
        store
            .scrub_compact()
            .context("rebuilding the store file after the scrub")?
    } else {
        true
    };
    let report = json!({
        "examined": examined,
        "changed": changed,
        "compacted": compacted,
        "tables": tables,
        "redaction_rules": redactor.rule_count(),
        "batch": batch,
    });
    store
        .insert_event("audit_scrub", &report)
        .context("cannot record the audit_scrub event")?;
    if args.json {
        println!("{report}");
    } else {
        println!(
            "audit scrub: {changed} of {examined} stored rows re-redacted ({}); recorded as an audit_scrub event",
            per.join(", ")
        );
        if !compacted {
            println!(
                "audit scrub: the rows are redacted, but a running server kept the file from being rebuilt: old text may stay in free space of the file until `codespace audit scrub` runs again with the server stopped"
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
