//! `codespace policy diff`: what would change if a candidate policy set were deployed. Every
//! recorded request in a window of the audit log (and, with `--tests`, every sub-request of the
//! policy test cases) is re-decided under the set in force and under the candidate; the answers
//! that flip are grouped by direction, tool, action and the policies that changed, with counts
//! and examples. Exit 0: no flip; 2: only narrowing flips; 3: any widening flip; 1: error.

use crate::mask_diff::{MaskChange, MaskRows};
use anyhow::{Context, Result, anyhow};
use codespace_engine::Config;
use codespace_engine::policy::decide::SubDecision;
use codespace_engine::policy::{PolicySnapshot, PolicySource, compile};
use codespace_policy_tools::replay::{Flip, RecordedRequest, Replayer, changed_policies};
use codespace_policy_tools::suite::{case_records, parse_file};
use codespace_store::{DecisionQuery, Store};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Flags of `policy diff`.
#[derive(Debug, clap::Args)]
pub struct DiffArgs {
    /// The candidate policies directory (same layout: base/, profiles/).
    #[arg(
        long,
        value_name = "DIR",
        required_unless_present_any = ["shadow", "against_config"]
    )]
    pub against: Option<PathBuf>,
    /// The candidate's template links come from this config's `policies.templates` (default:
    /// the live config's); alone, the candidate is the live files with those links, so a changed
    /// link shows as the decisions it changes.
    #[arg(long, value_name = "FILE")]
    pub against_config: Option<PathBuf>,
    /// The candidate is the shadow set: the live files with `<policies>/shadow/` over them
    /// (what deploying the shadow files would give).
    #[arg(long, conflicts_with = "against")]
    pub shadow: bool,
    /// The candidate's schema (default: <DIR>/../schema/codespace.cedarschema when it exists,
    /// else the schema of the set in force).
    #[arg(long, value_name = "FILE")]
    pub against_schema: Option<PathBuf>,
    /// Replay only decisions at or after T: RFC 3339, unix ms, or an age like 7d [7d].
    #[arg(long, value_name = "T", default_value = "7d")]
    pub since: String,
    /// Also re-decide every policy test case (the candidate's tests/, else the live set's).
    #[arg(long)]
    pub tests: bool,
    /// The store (default: the config's `store`, else the one `serve` uses).
    #[arg(long)]
    pub store: Option<PathBuf>,
    /// Examples shown per group.
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub examples: usize,
    /// Replay the rows of an exported audit log (the JSON lines `codespace audit --json`
    /// prints) instead of the store: what CI can do with a log shipped from production.
    #[arg(long, value_name = "FILE", alias = "against-log")]
    pub log: Option<PathBuf>,
    /// One JSON document instead of text (same as --format json).
    #[arg(long, conflicts_with = "format")]
    pub json: bool,
    /// Report format: text, json, markdown (a summary to post as a pull-request comment) or
    /// sarif (for code-scanning views).
    #[arg(long, value_enum)]
    pub format: Option<DiffFormat>,
}

/// Report formats of `policy diff`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DiffFormat {
    /// Groups with examples, then the totals.
    Text,
    /// One JSON document.
    Json,
    /// A Markdown summary for a pull-request comment.
    Markdown,
    /// SARIF 2.1.0: one `error` result per flip group, at the changed policies' lines.
    Sarif,
}

/// A replayable sample: its source, a label, the recorded request.
type Sample = (&'static str, String, RecordedRequest);

/// The rows of an exported audit log (JSON lines, one `codespace audit --json` row each;
/// event lines and blank lines are skipped): (samples, rows, rows without a replayable request).
fn log_samples(path: &Path, masks: &mut MaskRows) -> Result<(Vec<Sample>, usize, usize)> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let (mut samples, mut rows, mut unreplayable) = (Vec::new(), 0usize, 0usize);
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(line)
            .with_context(|| format!("{}:{}: not a JSON line", path.display(), n + 1))?;
        if v.get("decision_id").is_none() {
            continue;
        }
        rows += 1;
        let str_of = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("");
        let label = format!(
            "{} #{} `{}`",
            v.get("decision_id").and_then(Value::as_str).unwrap_or("?"),
            v.get("sub_index").unwrap_or(&Value::Null),
            str_of("subject")
        );
        let rec = v
            .get("request")
            .filter(|r| !r.is_null())
            .map(RecordedRequest::from_json);
        let is_mask = masks.row(
            str_of("decision_id"),
            str_of("decision"),
            str_of("workspace"),
            v.get("path").and_then(Value::as_str),
            &format!("log {label}"),
            rec.as_ref().and_then(|r| r.as_ref().ok()),
        );
        match rec {
            _ if is_mask => {}
            Some(Ok(rec)) => samples.push(("log", label, rec)),
            _ => unreplayable += 1,
        }
    }
    Ok((samples, rows, unreplayable))
}

/// One re-decided request and its two answers.
struct Replayed {
    source: &'static str,
    label: String,
    rec: RecordedRequest,
    before: SubDecision,
    after: SubDecision,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct GroupKey {
    flip: Flip,
    tool: String,
    action: String,
    policies: Vec<String>,
}

fn verdict(allowed: bool) -> &'static str {
    if allowed { "allow" } else { "deny" }
}

fn candidate_source(against: &Path, args: &DiffArgs, live: &PolicySource) -> PolicySource {
    let schema = args.against_schema.clone().unwrap_or_else(|| {
        let guess = against
            .parent()
            .unwrap_or(Path::new("."))
            .join("schema/codespace.cedarschema");
        match live {
            PolicySource::Dir { schema, .. } if !guess.is_file() => schema.clone(),
            _ => guess,
        }
    });
    PolicySource::Dir {
        policies: against.to_path_buf(),
        schema,
    }
}

fn candidate(
    args: &DiffArgs,
    live: &PolicySource,
    links: &[codespace_engine::config::TemplateLink],
) -> Result<PolicySnapshot> {
    let bundle = match &args.against {
        Some(dir) => candidate_source(dir, args, live).read(),
        None if !args.shadow => live.read(),
        None => live.read_shadow().and_then(|b| {
            b.ok_or_else(|| {
                codespace_engine::policy::PolicyErrors(vec![
                    "no shadow set: <policies>/shadow/ holds no .cedar file".into(),
                ])
            })
        }),
    };
    match bundle.map(|b| b.with_links(links)).and_then(compile) {
        Ok(s) => Ok(s),
        Err(e) => {
            for line in &e.0 {
                eprintln!("{line}");
            }
            Err(anyhow!("the candidate policy set is rejected"))
        }
    }
}

fn compile_named(
    what: &str,
    source: &PolicySource,
    links: &[codespace_engine::config::TemplateLink],
) -> Result<PolicySnapshot> {
    match source.read().map(|b| b.with_links(links)).and_then(compile) {
        Ok(s) => Ok(s),
        Err(e) => {
            for line in &e.0 {
                eprintln!("{line}");
            }
            Err(anyhow!("the {what} policy set is rejected"))
        }
    }
}

fn test_dir(args: &DiffArgs, live: &PolicySource) -> Option<PathBuf> {
    if let Some(cand) = args.against.as_ref().map(|d| d.join("tests"))
        && cand.is_dir()
    {
        return Some(cand);
    }
    match live {
        PolicySource::Dir { policies, .. } => Some(policies.join("tests")).filter(|d| d.is_dir()),
        PolicySource::Embedded => None,
    }
}

/// `codespace policy diff`.
pub fn diff(
    args: &DiffArgs,
    live: &PolicySource,
    config: Option<&Config>,
    default_store: impl FnOnce() -> Result<PathBuf>,
) -> Result<ExitCode> {
    let live_links = crate::policy_cli::config_links(config);
    let candidate_links = match &args.against_config {
        Some(path) => {
            Config::load(path)
                .with_context(|| format!("--against-config {}", path.display()))?
                .policy_templates
        }
        None => live_links.clone(),
    };
    let before_snap = compile_named("live", live, &live_links)?;
    let after_snap = candidate(args, live, &candidate_links)?;
    let now = codespace_store::now_ms();
    let since = crate::policy_cli::parse_since(&args.since, now)?;
    let store_path = match args
        .store
        .clone()
        .or_else(|| config.and_then(|c| c.store.clone()))
    {
        Some(p) => Some(p),
        None => default_store().ok(),
    };
    let mut samples: Vec<(&'static str, String, RecordedRequest)> = Vec::new();
    let mut unreplayable = 0usize;
    let mut recorded = 0usize;
    let from_store = if args.log.is_some() {
        None
    } else {
        store_path.filter(|p| p.exists())
    };
    let mut masks = MaskRows::default();
    if let Some(log) = &args.log {
        let (s, rows, skipped) = log_samples(log, &mut masks)?;
        samples = s;
        recorded = rows;
        unreplayable = skipped;
    }
    match from_store {
        _ if args.log.is_some() => {}
        Some(path) => {
            let store =
                Store::open(&path).with_context(|| format!("cannot open {}", path.display()))?;
            let rows = store.query_decisions(&DecisionQuery {
                since_ms: Some(since),
                ..DecisionQuery::default()
            })?;
            recorded = rows.len();
            for r in rows {
                let label = format!("{} #{} `{}`", r.decision_id, r.sub_index, r.subject);
                let rec = r.request.as_ref().map(RecordedRequest::from_json);
                let is_mask = masks.row(
                    &r.decision_id,
                    &r.decision,
                    &r.workspace,
                    r.path.as_deref(),
                    &format!("audit {label}"),
                    rec.as_ref().and_then(|r| r.as_ref().ok()),
                );
                match rec {
                    _ if is_mask => {}
                    Some(Ok(rec)) => samples.push(("audit", label, rec)),
                    _ => unreplayable += 1,
                }
            }
        }
        None if args.tests => {}
        None => {
            return Err(anyhow!(
                "no store to replay (pass --store FILE or --config FILE, or --tests to diff the test cases only)"
            ));
        }
    }
    let mut test_count = 0usize;
    if args.tests
        && let Some(dir) = test_dir(args, live)
    {
        let base = crate::policy_cli::base_profiles(config);
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .with_context(|| format!("cannot list {}", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
            .collect();
        files.sort();
        for f in files {
            let name = f
                .file_name()
                .map(|n| n.to_string_lossy().to_string())
                .unwrap_or_default();
            let text =
                std::fs::read_to_string(&f).with_context(|| format!("cannot read {name}"))?;
            let parsed = parse_file(&text).map_err(|e| anyhow!("{name}: {e}"))?;
            let records =
                case_records(&base, &name, &parsed).map_err(|e| anyhow!("{name}: {e}"))?;
            test_count += records.len();
            samples.extend(records.into_iter().map(|(label, rec)| ("test", label, rec)));
        }
    }

    let mut before = Replayer::new(&before_snap);
    let mut after = Replayer::new(&after_snap);
    let mut groups: BTreeMap<GroupKey, Vec<Replayed>> = BTreeMap::new();
    // Logs repeat themselves: each distinct request is decided once per set.
    let mut seen: std::collections::HashMap<String, (SubDecision, SubDecision)> =
        std::collections::HashMap::new();
    for (source, label, rec) in samples {
        let key = serde_json::to_string(&(&rec.tool, &rec.ancestors, &rec.workspace, &rec.request))
            .unwrap_or_default();
        let (b, a) = match seen.get(&key) {
            Some(pair) => pair.clone(),
            None => {
                let pair = (before.decide(&rec), after.decide(&rec));
                seen.insert(key, pair.clone());
                pair
            }
        };
        let Some(flip) = Flip::of(rec.request.action.as_str(), b.allowed, a.allowed) else {
            continue;
        };
        let key = GroupKey {
            flip,
            tool: rec.tool.clone(),
            action: rec.request.action.to_string(),
            policies: changed_policies(&b, &a),
        };
        groups.entry(key).or_default().push(Replayed {
            source,
            label,
            rec,
            before: b,
            after: a,
        });
    }
    masks.add_listings(config);
    let mask_changes = masks.replay(&mut before, &mut after);
    let mask_widened = mask_changes
        .iter()
        .filter(|m| m.flip == Flip::Widening)
        .count();
    let mask_narrowed = mask_changes.len() - mask_widened;
    let widening: usize = groups
        .iter()
        .filter(|(k, _)| k.flip == Flip::Widening)
        .map(|(_, v)| v.len())
        .sum();
    let narrowing: usize = groups
        .iter()
        .filter(|(k, _)| k.flip == Flip::Narrowing)
        .map(|(_, v)| v.len())
        .sum();
    // Widening first: it is what a reviewer must look at.
    let mut ordered: Vec<(&GroupKey, &Vec<Replayed>)> = groups.iter().collect();
    ordered.sort_by(|(a, av), (b, bv)| {
        b.flip
            .cmp(&a.flip)
            .then(bv.len().cmp(&av.len()))
            .then(a.cmp(b))
    });

    let mut out = std::io::stdout().lock();
    let format = match (args.format, args.json) {
        (Some(f), _) => f,
        (None, true) => DiffFormat::Json,
        (None, false) => DiffFormat::Text,
    };
    let replayed_from = match &args.log {
        Some(p) => format!("the log {}", p.display()),
        None => format!(
            "the store since {}",
            codespace_engine::wire::rfc3339_ms(since)
        ),
    };
    if format == DiffFormat::Sarif {
        use codespace_policy_tools::sarif::{FlipGroup, report_sarif_diff};
        let flips: Vec<FlipGroup<'_>> = ordered
            .iter()
            .map(|(k, v)| FlipGroup {
                flip: k.flip,
                tool: &k.tool,
                action: &k.action,
                policies: &k.policies,
                count: v.len(),
                examples: v
                    .iter()
                    .take(args.examples)
                    .map(|r| r.label.clone())
                    .collect(),
                change: None,
            })
            .chain(mask_changes.iter().map(|m| FlipGroup {
                flip: m.flip,
                tool: &m.tool,
                action: "read",
                policies: &m.policies,
                count: m.commands.len(),
                examples: m.commands.iter().take(args.examples).cloned().collect(),
                change: Some(format!("{} (workspace {})", m.text(), m.workspace)),
            }))
            .collect();
        let doc = report_sarif_diff(
            &before_snap,
            &after_snap,
            &flips,
            json!({
                "live_sha256": before_snap.sha256,
                "candidate_sha256": after_snap.sha256,
                "replayed_from": replayed_from,
                "recorded_rows": recorded,
                "unreplayable_rows": unreplayable,
                "test_requests": test_count,
                "widening": widening,
                "narrowing": narrowing,
                "mask_widened": mask_widened,
                "mask_narrowed": mask_narrowed,
            }),
        );
        writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
    } else if format == DiffFormat::Markdown {
        let md = markdown(&MdSummary {
            live: &before_snap.sha256,
            candidate: &after_snap.sha256,
            replayed: recorded - unreplayable,
            unreplayable,
            from: &replayed_from,
            tests: args.tests.then_some(test_count),
            widening,
            narrowing,
            groups: &ordered,
            masks: &mask_changes,
            mask_commands: masks.commands(),
            examples: args.examples,
        });
        write!(out, "{md}")?;
    } else if format == DiffFormat::Json {
        let doc = json!({
            "live_sha256": before_snap.sha256,
            "candidate_sha256": after_snap.sha256,
            "since": codespace_engine::wire::rfc3339_ms(since),
            "log": args.log,
            "recorded_rows": recorded,
            "unreplayable_rows": unreplayable,
            "test_requests": test_count,
            "widening": widening,
            "narrowing": narrowing,
            "groups": ordered.iter().map(|(k, v)| json!({
                "direction": k.flip.as_str(),
                "tool": k.tool,
                "action": k.action,
                "policies": k.policies,
                "count": v.len(),
                "examples": v.iter().take(args.examples).map(example_json).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "mask_rows": masks.rows,
            "mask_commands": masks.commands(),
            "mask_widened": mask_widened,
            "mask_narrowed": mask_narrowed,
            "mask_changes": mask_changes.iter().map(|m| m.to_json(args.examples)).collect::<Vec<_>>(),
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
    } else {
        writeln!(
            out,
            "policy diff: live {} -> candidate {}",
            before_snap.sha256, after_snap.sha256
        )?;
        writeln!(
            out,
            "replayed {} recorded request(s) and the masks of {} command(s) from {}{}{}",
            recorded - unreplayable - masks.rows,
            masks.commands(),
            replayed_from,
            if unreplayable > 0 {
                format!(" ({unreplayable} row(s) without a recorded request skipped)")
            } else {
                String::new()
            },
            if args.tests {
                format!(" and {test_count} test sub-request(s)")
            } else {
                String::new()
            }
        )?;
        for (k, v) in &ordered {
            writeln!(
                out,
                "\n{:<9} {:>5}  {}{}  {}",
                k.flip.as_str().to_uppercase(),
                v.len(),
                k.tool,
                if k.action == k.tool {
                    String::new()
                } else {
                    format!("/{}", k.action)
                },
                k.policies.join(" ")
            )?;
            for r in v.iter().take(args.examples) {
                writeln!(
                    out,
                    "    {} {}  (workspace {}, profile {}): {} -> {}",
                    r.source,
                    r.label,
                    r.rec.workspace.id,
                    r.rec.workspace.profile,
                    verdict(r.before.allowed),
                    verdict(r.after.allowed)
                )?;
            }
        }
        for m in &mask_changes {
            writeln!(
                out,
                "\n{:<9} {:>5}  {}  {} (workspace {}, profile {})  {}",
                "MASK",
                m.commands.len(),
                m.tool,
                m.text(),
                m.workspace,
                m.profile,
                m.policies.join(" ")
            )?;
            for c in m.commands.iter().take(args.examples) {
                writeln!(out, "    {c}")?;
            }
        }
        writeln!(
            out,
            "\n{widening} widening, {narrowing} narrowing flip(s); {mask_widened} mask(s) widened, {mask_narrowed} narrowed"
        )?;
    }
    Ok(if widening > 0 || mask_widened > 0 {
        ExitCode::from(3)
    } else if narrowing > 0 || mask_narrowed > 0 {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}

fn example_json(r: &Replayed) -> Value {
    json!({
        "source": r.source,
        "label": r.label,
        "workspace": r.rec.workspace.id,
        "profile": r.rec.workspace.profile,
        "subject": r.rec.request.subject,
        "path": r.rec.request.path,
        "before": verdict(r.before.allowed),
        "after": verdict(r.after.allowed),
        "before_policies": r.before.policy_ids,
        "after_policies": r.after.policy_ids,
        "after_errors": r.after.errors,
    })
}

/// What the Markdown report summarizes.
struct MdSummary<'a> {
    live: &'a str,
    candidate: &'a str,
    replayed: usize,
    unreplayable: usize,
    from: &'a str,
    tests: Option<usize>,
    widening: usize,
    narrowing: usize,
    groups: &'a [(&'a GroupKey, &'a Vec<Replayed>)],
    masks: &'a [MaskChange],
    mask_commands: usize,
    examples: usize,
}

/// A cell of a Markdown table: pipes escaped, newlines flattened, code spans kept.
fn md_cell(s: &str) -> String {
    s.replace('|', "\\|").replace(['\n', '\r'], " ")
}

/// The Markdown report: a verdict line a reviewer reads first, a table of flip groups (widening
/// first) and a few examples each, in a collapsed block.
fn markdown(m: &MdSummary<'_>) -> String {
    let short = |h: &str| h.get(..19).unwrap_or(h).to_string();
    let mut o = String::from("### Policy diff\n\n");
    let mask_widened = m.masks.iter().filter(|c| c.flip == Flip::Widening).count();
    let mask_narrowed = m.masks.len() - mask_widened;
    o.push_str(&if m.widening > 0 || mask_widened > 0 {
        format!(
            "**:warning: {} widening** and {} narrowing flip(s): the candidate allows what the live set refused.\n\n",
            m.widening, m.narrowing
        ) + &mask_summary(mask_widened, mask_narrowed)
    } else if m.narrowing > 0 || mask_narrowed > 0 {
        format!(
            "**{} narrowing** flip(s), no widening: the candidate refuses what the live set allowed.\n\n",
            m.narrowing
        ) + &mask_summary(mask_widened, mask_narrowed)
    } else {
        "**No flip**: every replayed request gets the same answer.\n\n".to_string()
    });
    o.push_str(&format!(
        "Live `{}` → candidate `{}`; replayed {} recorded request(s) and the masks of {} command(s) from {}{}{}.\n",
        short(m.live),
        short(m.candidate),
        m.replayed,
        m.mask_commands,
        md_cell(m.from),
        if m.unreplayable > 0 {
            format!(
                " ({} row(s) without a recorded request skipped)",
                m.unreplayable
            )
        } else {
            String::new()
        },
        m.tests
            .map(|n| format!(" and {n} test sub-request(s)"))
            .unwrap_or_default()
    ));
    if m.groups.is_empty() && m.masks.is_empty() {
        return o;
    }
    o.push_str(
        "\n| Direction | Count | Tool / action | Policies that changed |\n|---|---:|---|---|\n",
    );
    for (k, v) in m.groups {
        o.push_str(&format!(
            "| {} | {} | `{}{}` | {} |\n",
            k.flip.as_str(),
            v.len(),
            md_cell(&k.tool),
            if k.action == k.tool {
                String::new()
            } else {
                format!("/{}", md_cell(&k.action))
            },
            k.policies
                .iter()
                .map(|p| format!("`{}`", md_cell(p)))
                .collect::<Vec<_>>()
                .join(" ")
        ));
    }
    for c in m.masks {
        o.push_str(&format!(
            "| {} | {} | `{}`: {} (workspace `{}`) | {} |\n",
            c.kind().replace('_', " "),
            c.commands.len(),
            md_cell(&c.tool),
            md_cell(&c.text()),
            md_cell(&c.workspace),
            c.policies
                .iter()
                .map(|p| format!("`{}`", md_cell(p)))
                .collect::<Vec<_>>()
                .join(" ")
        ));
    }
    o.push_str("\n<details><summary>Examples</summary>\n\n");
    for (k, v) in m.groups {
        for r in v.iter().take(m.examples) {
            o.push_str(&format!(
                "- {} {}: {} (workspace `{}`, profile `{}`): {} → {}\n",
                k.flip.as_str(),
                r.source,
                md_cell(&r.label),
                md_cell(&r.rec.workspace.id),
                md_cell(&r.rec.workspace.profile),
                verdict(r.before.allowed),
                verdict(r.after.allowed)
            ));
        }
    }
    for c in m.masks {
        for cmd in c.commands.iter().take(m.examples) {
            o.push_str(&format!("- {}: {}\n", md_cell(&c.text()), md_cell(cmd)));
        }
    }
    o.push_str("\n</details>\n");
    o
}

/// The verdict line's note on masks ("" when none changed).
fn mask_summary(widened: usize, narrowed: usize) -> String {
    if widened + narrowed == 0 {
        return String::new();
    }
    format!(
        "Commands' secret masks: **{widened} widened** (a path no longer withheld), {narrowed} narrowed (a path now withheld).\n\n"
    )
}
