//! `policy ls` (every policy: id, effect, file:line, reason), `policy unused` (policies that
//! determined no logged decision in a window) and `policy fmt [--check]` (Cedar's own
//! formatter, `cedar-policy-formatter`; comments and annotations are kept, and a file is only
//! rewritten when the formatted text compiles to the same policies) and `policy init DIR` (the
//! shipped policies, tests, examples and schema, embedded in the binary, written out as a start).

use anyhow::{Context, Result, anyhow};
use codespace_engine::Config;
use codespace_engine::policy::{PolicySnapshot, PolicySource, compile};
use codespace_store::{DecisionQuery, Store};
use serde_json::json;
use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::str::FromStr;

fn compiled(source: &PolicySource) -> Result<PolicySnapshot> {
    source.read().and_then(compile).map_err(|e| {
        for line in &e.0 {
            eprintln!("{line}");
        }
        anyhow!("policies rejected")
    })
}

/// `codespace policy ls`.
pub fn ls(source: &PolicySource, json_out: bool) -> Result<ExitCode> {
    let snap = compiled(source)?;
    let mut out = std::io::stdout().lock();
    let mut rows: Vec<_> = snap.meta.values().collect();
    rows.sort_by(|a, b| (a.file.as_str(), a.line).cmp(&(b.file.as_str(), b.line)));
    if json_out {
        for m in rows {
            writeln!(
                out,
                "{}",
                json!({
                    "id": m.id,
                    "effect": if m.forbid { "forbid" } else { "permit" },
                    "file": m.file,
                    "line": m.line,
                    "reason": m.reason,
                })
            )?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let w = rows.iter().map(|m| m.id.len()).max().unwrap_or(2).max(2);
    writeln!(
        out,
        "{:<w$}  {:<6}  {:<36}  reason",
        "id", "effect", "location"
    )?;
    for m in &rows {
        writeln!(
            out,
            "{:<w$}  {:<6}  {:<36}  {}",
            m.id,
            if m.forbid { "forbid" } else { "permit" },
            format!("{}:{}", m.file, m.line),
            m.reason.as_deref().unwrap_or("")
        )?;
    }
    writeln!(out, "{} policies; set {}", rows.len(), snap.sha256)?;
    Ok(ExitCode::SUCCESS)
}

/// `codespace policy unused`: the policies of the set in force that determined no decision
/// logged at or after `since` (live answers; the shadow set's own policies count when they
/// determined a shadow answer).
pub fn unused(
    source: &PolicySource,
    store_path: &Path,
    since: &str,
    json_out: bool,
) -> Result<ExitCode> {
    let snap = compiled(source)?;
    if !store_path.exists() {
        return Err(anyhow!(
            "no store at {} (pass --store FILE or --config FILE)",
            store_path.display()
        ));
    }
    let store =
        Store::open(store_path).with_context(|| format!("cannot open {}", store_path.display()))?;
    let now = codespace_store::now_ms();
    let since_ms = crate::policy_cli::parse_since(since, now)?;
    let rows = store.query_decisions(&DecisionQuery {
        since_ms: Some(since_ms),
        ..DecisionQuery::default()
    })?;
    let used: BTreeSet<&str> = rows
        .iter()
        .flat_map(|r| {
            r.policy_ids
                .iter()
                .chain(r.shadow_policy_ids.iter().flatten())
        })
        .map(String::as_str)
        .collect();
    let mut idle: Vec<_> = snap
        .meta
        .values()
        .filter(|m| !used.contains(m.id.as_str()))
        .collect();
    idle.sort_by(|a, b| (a.file.as_str(), a.line).cmp(&(b.file.as_str(), b.line)));
    let mut out = std::io::stdout().lock();
    if json_out {
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&json!({
                "since": codespace_engine::wire::rfc3339_ms(since_ms),
                "decisions": rows.len(),
                "policies": snap.meta.len(),
                "unused": idle.iter().map(|m| json!({
                    "id": m.id,
                    "effect": if m.forbid { "forbid" } else { "permit" },
                    "file": m.file,
                    "line": m.line,
                    "reason": m.reason,
                })).collect::<Vec<_>>(),
            }))?
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    writeln!(
        out,
        "{} of {} policies determined no decision since {} ({} decision row(s) in the window):",
        idle.len(),
        snap.meta.len(),
        codespace_engine::wire::rfc3339_ms(since_ms),
        rows.len()
    )?;
    for m in idle {
        writeln!(
            out,
            "  {:<40}  {:<6}  {}:{}",
            m.id,
            if m.forbid { "forbid" } else { "permit" },
            m.file,
            m.line
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

fn cedar_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            cedar_files(&p, out)?;
        } else if p.extension().is_some_and(|e| e == "cedar") {
            out.push(p);
        }
    }
    Ok(())
}

/// The policies of a text, in order, as JSON (to prove formatting changed nothing).
fn policy_json(text: &str) -> Result<Vec<serde_json::Value>, String> {
    let set = cedar_policy::PolicySet::from_str(text).map_err(|e| e.to_string())?;
    let mut ps: Vec<_> = set.policies().collect();
    ps.sort_by_key(|p| {
        p.id()
            .to_string()
            .trim_start_matches("policy")
            .parse::<usize>()
            .unwrap_or(usize::MAX)
    });
    let mut out: Vec<serde_json::Value> = ps
        .iter()
        .map(|p| p.to_json().map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    // Templates too, in order: formatting must not change one either.
    let mut ts: Vec<_> = set.templates().collect();
    ts.sort_by_key(|t| {
        t.id()
            .to_string()
            .trim_start_matches("policy")
            .parse::<usize>()
            .unwrap_or(usize::MAX)
    });
    for t in ts {
        out.push(t.to_json().map_err(|e| e.to_string())?);
    }
    Ok(out)
}

/// The formatted text of one file (Cedar's formatter, 80 columns, 2-space indent), checked to
/// compile to the same policies.
pub fn format_text(text: &str) -> Result<String, String> {
    let cfg = cedar_policy_formatter::Config {
        line_width: 80,
        indent_width: 2,
    };
    let pretty = cedar_policy_formatter::policies_str_to_pretty(text, &cfg)
        .map_err(|e| format!("{e:?}").lines().next().unwrap_or("").to_string())?;
    if policy_json(&pretty)? != policy_json(text)? {
        return Err("the formatted text would change the policies; left as it is".into());
    }
    Ok(pretty)
}

/// `codespace policy fmt [--check]` over every `.cedar` file of the policies directory (shadow
/// and examples included).
pub fn fmt(source: &PolicySource, check: bool) -> Result<ExitCode> {
    let PolicySource::Dir { policies, .. } = source else {
        return Err(anyhow!(
            "no policies directory to format (pass --policies DIR or --config FILE)"
        ));
    };
    let mut files = Vec::new();
    cedar_files(policies, &mut files)?;
    let mut out = std::io::stdout().lock();
    let (mut changed, mut failed) = (0usize, 0usize);
    for f in &files {
        let text =
            std::fs::read_to_string(f).with_context(|| format!("cannot read {}", f.display()))?;
        match format_text(&text) {
            Ok(pretty) if pretty == text => {}
            Ok(pretty) => {
                changed += 1;
                if check {
                    writeln!(out, "would reformat {}", f.display())?;
                } else {
                    std::fs::write(f, pretty)
                        .with_context(|| format!("cannot write {}", f.display()))?;
                    writeln!(out, "formatted {}", f.display())?;
                }
            }
            Err(e) => {
                failed += 1;
                eprintln!("{}: {e}", f.display());
            }
        }
    }
    writeln!(
        out,
        "{} file(s), {changed} {}, {failed} could not be formatted",
        files.len(),
        if check { "would change" } else { "changed" }
    )?;
    Ok(if failed > 0 || (check && changed > 0) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// `codespace policy sign --key KEY`: signs the set of the policies directory (schema and
/// policy files, by their parsed form) with an SSH key and writes `<policies>/policy-set.sig`.
/// A set that does not compile is not signed.
pub fn sign(source: &PolicySource, key: &Path) -> Result<ExitCode> {
    let PolicySource::Dir { policies, .. } = source else {
        return Err(anyhow!(
            "no policies directory to sign (pass --policies DIR or --config FILE)"
        ));
    };
    let snap = match source.read().and_then(codespace_engine::policy::compile) {
        Ok(s) => s,
        Err(e) => {
            for line in &e.0 {
                eprintln!("{line}");
            }
            return Err(anyhow!("the policy set is rejected; nothing signed"));
        }
    };
    let sig =
        codespace_engine::policy::set_signature::sign(&snap.bundle, key).map_err(|e| anyhow!(e))?;
    let path = codespace_engine::policy::set_signature::sig_path(policies);
    std::fs::write(&path, sig).with_context(|| format!("cannot write {}", path.display()))?;
    println!(
        "signed set {} ({} policies) with {}: wrote {}",
        snap.sha256,
        snap.meta.len(),
        key.display(),
        path.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// The store of `policy unused`: `--store`, else the config's, else the default.
pub fn store_path(
    store: Option<PathBuf>,
    config: Option<&Config>,
    default_store: impl FnOnce() -> Result<PathBuf>,
) -> Result<PathBuf> {
    match store.or_else(|| config.and_then(|c| c.store.clone())) {
        Some(p) => Ok(p),
        None => default_store(),
    }
}

/// The README `policy init` writes beside the exported set.
const INIT_README: &str = "\
# CodeSpace policies

Exported by `codespace policy init` from the set shipped in the binary. Edit `policies/profiles/`
(permits, one file per profile) and `policies/base/` (forbids and approval rules, with an
`@reason`); add a case to `policies/tests/` for every change; `policies/examples/` holds worked
examples to copy from. `schema/codespace.cedarschema` is the schema the server is built for:
change it only with the binary.

From this directory:

    codespace policy validate
    codespace policy test --coverage-min 100 --fail-on-empty

Serve with it: `\"policies\": \"<this directory>/policies\"` in the config (docs/config.md).
";

/// `codespace policy init DIR`: writes the embedded shipped tree (`policies/` with base,
/// profiles, examples and tests; `schema/`) and a README into DIR, which must not exist or be an
/// empty directory. Never overwrites: every file is created new.
pub fn init(dir: &Path) -> Result<ExitCode> {
    match std::fs::symlink_metadata(dir) {
        Ok(m) if !m.is_dir() => {
            return Err(anyhow!(
                "{} exists and is not a directory; policy init writes into a new or empty directory",
                dir.display()
            ));
        }
        Ok(_) => {
            let mut entries =
                std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))?;
            if entries.next().is_some() {
                return Err(anyhow!(
                    "{} is not empty; policy init writes into a new or empty directory and never overwrites (choose another DIR)",
                    dir.display()
                ));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
        }
        Err(e) => return Err(anyhow!("{}: {e}", dir.display())),
    }
    let mut written = 0usize;
    let files = codespace_engine::policy::EMBEDDED_FILES
        .iter()
        .copied()
        .chain(std::iter::once(("README.md", INIT_README)));
    for (name, text) in files {
        let path = dir.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        f.write_all(text.as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?;
        written += 1;
    }
    println!(
        "wrote {written} files into {}: policies/ (base, profiles, examples, tests), schema/, README.md",
        dir.display()
    );
    println!(
        "next: cd {} && codespace policy test --coverage-min 100",
        dir.display()
    );
    Ok(ExitCode::SUCCESS)
}
