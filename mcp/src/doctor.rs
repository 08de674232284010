//! `codespace doctor`: what `serve` would use and whether it can work — the effective config
//! (workspaces, profiles, where the policy files and the store live), the sandbox probe, the
//! policy set hash and lint result, whether the store is writable, and for each workspace what
//! `workspace_info` would report. Every problem is one line on stderr and makes the exit 1.

use crate::setup::{Effective, Origin};
use anyhow::{Result, anyhow};
use codespace_engine::config::io_reason;
use codespace_engine::policy::{PolicySource, compile};
use codespace_engine::{Config, Gateway, PolicyStore, SandboxFacts, Session, ToolCall};
use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

/// Flags of `doctor` (the same locations as `serve`).
#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// The directory `serve` would serve when no config is given.
    pub dir: Option<PathBuf>,
    /// Operator config (JSON).
    #[arg(long, env = "CODESPACE_CONFIG")]
    pub config: Option<PathBuf>,
    /// SQLite store file (default: the config's `store`, else the user data dir).
    #[arg(long)]
    pub store: Option<PathBuf>,
    /// Print one JSON document instead of the text report.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub toolchains: crate::setup::ToolchainArgs,
}

/// The report under construction: JSON sections, text lines, problems.
struct Report {
    json: Map<String, Value>,
    text: Vec<String>,
    problems: Vec<String>,
}

impl Report {
    fn line(&mut self, s: impl Into<String>) {
        self.text.push(s.into());
    }
    fn problem(&mut self, s: impl Into<String>) {
        self.problems.push(s.into());
    }
}

/// `codespace doctor`.
pub fn run(args: &DoctorArgs, config_origin: Origin) -> Result<ExitCode> {
    let mut r = Report {
        json: Map::new(),
        text: vec![format!("codespace {} doctor", env!("CARGO_PKG_VERSION"))],
        problems: Vec::new(),
    };
    let effective = match crate::setup::effective(
        "",
        args.dir.as_deref(),
        args.config.as_deref(),
        config_origin,
        args.store.as_deref(),
    ) {
        Ok(mut e) => {
            // As `serve` does: the invoking user's toolchains, checked against the store in use.
            let saved = e.config.store.replace(e.store.clone());
            let refused = crate::setup::add_toolchains(&mut e.config, &args.toolchains);
            e.config.store = saved;
            r.json.insert("toolchains_refused".into(), json!(refused));
            for line in refused {
                r.line(format!("toolchain: {line}"));
            }
            Some(e)
        }
        Err(e) => {
            r.problem(e.to_string());
            None
        }
    };
    match &effective {
        Some(e) => {
            config_section(&mut r, e);
            store_section(&mut r, &e.store, e.store_origin);
        }
        // The config is unusable; a store given on the command line can still be checked.
        None => {
            if let Some(store) = &args.store {
                r.line("");
                r.line("config: not usable (see the problems below)");
                store_section(&mut r, store, Origin::Flag("--store"));
            }
        }
    }
    let probe = codespace_runner_sandbox::probe();
    probe_section(&mut r, &probe);
    let policy = match &effective {
        Some(e) => policy_section(&mut r, &e.config),
        None => None,
    };
    if let (Some(e), Some(policy)) = (effective, policy) {
        let sandbox = SandboxFacts {
            sandbox_enforced: probe.sandbox_available(),
            network_enforced: probe.network_enforceable(),
            masking_enforced: probe.masking_available(),
        };
        workspaces_section(&mut r, e.config, policy, sandbox)?;
    }

    r.json.insert("problems".into(), json!(r.problems));
    if args.json {
        println!("{}", serde_json::to_string_pretty(&Value::Object(r.json))?);
    } else {
        for l in &r.text {
            println!("{l}");
        }
        println!();
        if r.problems.is_empty() {
            println!("no problems found");
        } else {
            println!("{} problem(s); see stderr", r.problems.len());
        }
    }
    for p in &r.problems {
        eprintln!("problem: {p}");
    }
    Ok(if r.problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn shown(p: &Path) -> String {
    format!("\"{}\"", p.display())
}

fn config_section(r: &mut Report, e: &Effective) {
    let cfg = &e.config;
    r.line("");
    r.line("config");
    let file = match (&cfg.config_file, e.config_origin) {
        (Some(f), Some(origin)) => {
            r.line(format!("  file: {} (from {origin})", shown(f)));
            json!({"path": f, "from": origin.to_string()})
        }
        _ => {
            r.line("  file: none (a directory served as workspace `default`)");
            Value::Null
        }
    };
    let envs: Vec<String> = cfg
        .environments
        .values()
        .map(|e| format!("{} ({})", e.id, e.kind.as_str()))
        .collect();
    r.line(format!("  environments: {}", envs.join(", ")));
    r.line("  profiles:");
    let mut profiles = Map::new();
    for p in cfg.profiles.values() {
        let builtin = codespace_engine::config::BUILTIN_PROFILES
            .iter()
            .any(|(b, _)| *b == p.id);
        let mut l = format!("    {}", p.id);
        if let Some(parent) = &p.extends {
            l.push_str(&format!(" extends {parent}"));
        }
        if builtin {
            l.push_str(" (built-in)");
        }
        if let Some(d) = &p.description {
            l.push_str(&format!(": {d}"));
        }
        r.line(l);
        profiles.insert(
            p.id.clone(),
            json!({"extends": p.extends, "description": p.description, "builtin": builtin}),
        );
    }
    r.line("  workspaces:");
    let mut workspaces = Map::new();
    for w in cfg.workspaces.values() {
        r.line(format!(
            "    {}: {}, profile {}, environment {}, network {}, approvals {}",
            w.id,
            shown(&w.root),
            w.profile,
            w.environment,
            w.network.as_str(),
            w.approvals.as_str()
        ));
        let toolchains: Vec<Value> = w
            .toolchains
            .iter()
            .filter_map(|(name, read_path)| {
                let dir = w.read_paths.get(read_path)?;
                Some(json!({"name": name, "read_path": read_path, "dir": dir}))
            })
            .collect();
        if !w.path.is_empty() && toolchains.is_empty() {
            r.line("      toolchains: as the config's `path` + `read_paths` declare");
        } else if toolchains.is_empty() {
            r.line("      toolchains: none (commands see the system PATH only; add one with `serve --toolchain DIR` or the config's `path` + `read_paths`)");
        } else {
            let shown: Vec<String> = toolchains
                .iter()
                .map(|t| format!("{} {}", t["name"].as_str().unwrap_or(""), t["dir"]))
                .collect();
            r.line(format!(
                "      toolchains (read-only): {}",
                shown.join(", ")
            ));
        }
        workspaces.insert(
            w.id.clone(),
            json!({
                "root": w.root,
                "profile": w.profile,
                "environment": w.environment,
                "network": w.network.as_str(),
                "approvals": w.approvals.as_str(),
                "toolchains": toolchains,
            }),
        );
    }
    let clients: Vec<&str> = cfg.clients.keys().map(String::as_str).collect();
    if clients.is_empty() {
        r.line("  HTTP clients: none (HTTP would be unauthenticated and loopback-only)");
    } else {
        r.line(format!(
            "  HTTP clients: {} (tokens not shown)",
            clients.join(", ")
        ));
    }
    r.line(format!(
        "  policy tests on reload: {}",
        if cfg.policy_tests_on_reload {
            "on"
        } else {
            "off"
        }
    ));
    let limits = serde_json::to_value(&cfg.limits).unwrap_or(Value::Null);
    r.line(format!("  limits: {}", flat(&limits)));
    r.json.insert(
        "config".into(),
        json!({
            "file": file,
            "environments": cfg.environments.values()
                .map(|e| (e.id.clone(), json!({"kind": e.kind.as_str()})))
                .collect::<Map<_, _>>(),
            "profiles": profiles,
            "workspaces": workspaces,
            "clients": clients,
            "policy_tests_on_reload": cfg.policy_tests_on_reload,
            "limits": limits,
        }),
    );
}

/// `{"a":1,"b":true}` → `a 1, b true` (objects one level deep, for a one-line summary).
fn flat(v: &Value) -> String {
    match v {
        Value::Object(m) => m
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => format!("{k} {s}"),
                other => format!("{k} {other}"),
            })
            .collect::<Vec<_>>()
            .join(", "),
        other => other.to_string(),
    }
}

/// Whether the store can be written, without creating it when it does not exist yet.
fn store_state(path: &Path) -> Result<String, String> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => {
            Err("is a symbolic link: `serve` refuses to open a store through one".into())
        }
        Ok(m) if m.is_dir() => Err("is a directory, not a file".into()),
        Ok(m) => {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(path)
                .map_err(|e| format!("is not writable: it {}", io_reason(&e)))?;
            let store = codespace_store::Store::open(path).map_err(|e| e.to_string())?;
            let tightened = crate::setup::log_tightened(&store);
            if tightened.is_empty() {
                Ok(format!("writable (exists, {} bytes)", m.len()))
            } else {
                Ok(format!(
                    "writable (exists, {} bytes); permissions tightened to 0600: {}",
                    m.len(),
                    tightened.join(", ")
                ))
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut dir = path.parent();
            while let Some(d) = dir {
                if d.as_os_str().is_empty() {
                    dir = Some(Path::new("."));
                    break;
                }
                if d.exists() {
                    break;
                }
                dir = d.parent();
            }
            let dir = dir.unwrap_or(Path::new("/"));
            if !dir.is_dir() {
                return Err(format!(
                    "cannot be created: {} is not a directory",
                    shown(dir)
                ));
            }
            let probe = dir.join(format!(".codespace-doctor-{}", std::process::id()));
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&probe)
            {
                Ok(_) => {
                    let _ = std::fs::remove_file(&probe);
                    Ok(format!(
                        "does not exist yet; `serve` creates it ({} is writable)",
                        shown(dir)
                    ))
                }
                Err(e) => Err(format!(
                    "cannot be created: directory {} {}",
                    shown(dir),
                    io_reason(&e)
                )),
            }
        }
        Err(e) => Err(io_reason(&e)),
    }
}

fn store_section(r: &mut Report, path: &Path, origin: Origin) {
    r.line(format!("  store: {} (from {origin})", shown(path)));
    let state = store_state(path);
    match &state {
        Ok(s) => r.line(format!("    {s}")),
        Err(e) => {
            r.line(format!("    NOT USABLE: {e}"));
            r.problem(format!(
                "store: {} (from {origin}) {e}; pass --store FILE",
                shown(path)
            ));
        }
    }
    let journals = if state.is_ok() && path.is_file() {
        journals_lines(r, path)
    } else {
        Value::Null
    };
    r.json.insert(
        "store".into(),
        json!({
            "path": path,
            "from": origin.to_string(),
            "writable": state.is_ok(),
            "state": match &state { Ok(s) | Err(s) => s },
            "journals": journals,
        }),
    );
}

/// Journals the doctor lists one by one; past this, a count.
const JOURNALS_LISTED: usize = 20;

/// The patch journals kept in the store (those of other roots collect in a shared default
/// store): one line each, and their JSON. Not a problem; `ops journals --discard` removes them.
fn journals_lines(r: &mut Report, path: &Path) -> Value {
    let listed = codespace_store::Store::open(path)
        .map_err(|e| e.to_string())
        .and_then(|s| {
            codespace_engine::gateway::patches::stored_journals(&s).map_err(|e| e.to_string())
        });
    let all = match listed {
        Ok(all) => all,
        Err(e) => {
            r.line(format!("    patch journals: cannot list: {e}"));
            return Value::Null;
        }
    };
    if all.is_empty() {
        r.line("    patch journals: none");
        return json!([]);
    }
    let stray = all.iter().filter(|j| !j.live).count();
    r.line(format!(
        "    patch journals: {} ({} of running servers, {stray} no running server owns; discard those with `codespace ops journals --discard`)",
        all.len(),
        all.len() - stray
    ));
    for j in all.iter().take(JOURNALS_LISTED) {
        r.line(format!("      {}", crate::ops_cli::journal_line(j)));
    }
    if all.len() > JOURNALS_LISTED {
        r.line(format!(
            "      … {} more (`codespace ops journals`)",
            all.len() - JOURNALS_LISTED
        ));
    }
    serde_json::to_value(&all).unwrap_or(Value::Null)
}

fn probe_section(r: &mut Report, probe: &codespace_runner_sandbox::Probe) {
    r.line("");
    r.line("sandbox probe");
    let facts = serde_json::to_value(probe).unwrap_or(Value::Null);
    if let Value::Object(m) = &facts {
        for (k, v) in m {
            let v = match v {
                Value::Null => "none".to_string(),
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            r.line(format!("  {k}: {v}"));
        }
    }
    let sandbox = probe.sandbox_available();
    let network = probe.network_enforceable();
    r.line(format!(
        "  command sandbox: {}",
        if sandbox {
            "enforced (Landlock + seccomp)"
        } else {
            "UNAVAILABLE: commands are refused"
        }
    ));
    r.line(format!(
        "  network restriction: {}",
        if network {
            "enforced"
        } else {
            "not enforceable"
        }
    ));
    if !sandbox {
        let mut why = Vec::new();
        if probe.landlock_abi.is_none() {
            why.push("Landlock is not available (kernel ≥ 5.13 with landlock in the LSM list)");
        }
        if !probe.seccomp {
            why.push("seccomp filter mode is not available");
        }
        r.problem(format!(
            "sandbox: unavailable ({}): exec_command is refused in every workspace",
            why.join("; ")
        ));
    }
    // Which executable commands start through (`serve` picks it the same way).
    let helper =
        codespace_runner_sandbox::choose_helper(&std::env::current_exe().unwrap_or_default());
    r.line(format!(
        "  sandbox helper: {} ({}){}",
        helper.kind.as_str(),
        helper.path.display(),
        helper
            .fallback_reason
            .as_ref()
            .map(|why| format!(": {why}; commands start slower"))
            .unwrap_or_default()
    ));
    r.json.insert(
        "sandbox".into(),
        json!({
            "probe": facts,
            "command_sandbox": if sandbox { "enforced" } else { "unavailable" },
            "network_enforcement": if network { "enforced" } else { "none" },
            "helper": {
                "kind": helper.kind.as_str(),
                "path": helper.path,
                "fallback_reason": helper.fallback_reason,
            },
        }),
    );
}

fn policy_section(r: &mut Report, cfg: &Config) -> Option<PolicyStore> {
    r.line("");
    r.line("policy set");
    let source = crate::setup::policy_source(cfg);
    let (location, schema) = match &source {
        PolicySource::Embedded => (
            "embedded (the shipped set, compiled into this binary)".to_string(),
            "embedded".to_string(),
        ),
        PolicySource::Dir { policies, schema } => (shown(policies), shown(schema)),
    };
    r.line(format!("  policies: {location}"));
    r.line(format!("  schema: {schema}"));
    let compiled = source.read().and_then(|bundle| {
        let files: Vec<String> = bundle.files.iter().map(|f| f.name.clone()).collect();
        r.line(format!("  files: {}", files.join(", ")));
        compile(bundle)
    });
    match compiled {
        Ok(snap) => {
            let forbids = snap.meta.values().filter(|m| m.forbid).count();
            r.line(format!(
                "  lint and strict validation: ok, {} policies ({forbids} forbid, {} permit)",
                snap.meta.len(),
                snap.meta.len() - forbids
            ));
            r.line(format!("  set sha256: {}", snap.sha256));
            r.json.insert(
                "policy".into(),
                json!({
                    "policies": location, "schema": schema, "ok": true,
                    "set_sha256": snap.sha256, "count": snap.meta.len(), "forbids": forbids,
                    "files": snap.bundle.files.iter().map(|f| f.name.clone()).collect::<Vec<_>>(),
                }),
            );
            match PolicyStore::load(source) {
                Ok(p) => Some(p),
                Err(e) => {
                    r.problem(format!("policies: {e}"));
                    None
                }
            }
        }
        Err(e) => {
            r.line(format!("  REJECTED: {} problem(s)", e.0.len()));
            for l in &e.0 {
                r.line(format!("    {l}"));
                r.problem(format!("policies: {l}"));
            }
            r.json.insert(
                "policy".into(),
                json!({"policies": location, "schema": schema, "ok": false, "errors": e.0}),
            );
            None
        }
    }
}

fn yes(v: &Value) -> &'static str {
    match v.as_bool() {
        Some(true) => "yes",
        Some(false) => "no",
        None => "?",
    }
}

fn workspaces_section(
    r: &mut Report,
    cfg: Config,
    policy: PolicyStore,
    sandbox: SandboxFacts,
) -> Result<()> {
    r.line("");
    r.line("workspace_info, as a stdio client would see it");
    let ids: Vec<String> = cfg.workspaces.keys().cloned().collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| anyhow!("tokio runtime: {e}"))?;
    let infos = rt.block_on(async move {
        let gw = match Gateway::new(cfg, Arc::new(policy), None, sandbox) {
            Ok(gw) => gw,
            Err(e) => return Err(e.to_string()),
        };
        let mut out = Vec::new();
        for id in ids {
            let call = ToolCall::parse("workspace_info", &json!({"workspace_id": id}))
                .map_err(|e| format!("{e:?}"));
            let info = match call {
                Ok(call) => gw
                    .call(&Session::stdio(), call)
                    .await
                    .map_err(|e| format!("{}: {}", e.code.as_str(), e.message))
                    .and_then(|r| serde_json::to_value(r).map_err(|e| e.to_string())),
                Err(e) => Err(e),
            };
            out.push((id, info));
        }
        gw.shutdown().await;
        Ok(out)
    });
    let infos = match infos {
        Ok(i) => i,
        Err(e) => {
            r.problem(format!("workspaces: the server would not start: {e}"));
            return Ok(());
        }
    };
    let mut all = Map::new();
    for (id, info) in infos {
        match info {
            Ok(v) => {
                let at = |ptr: &str| v.pointer(ptr).unwrap_or(&Value::Null);
                let word = |ptr: &str| at(ptr).as_str().unwrap_or("?").to_string();
                r.line(format!(
                    "  {id}: read {}, write {}, exec {}; process tools {}; command sandbox {}; \
                     network {} ({}); approvals {}",
                    yes(at("/execution/permissions/read")),
                    yes(at("/execution/permissions/write")),
                    yes(at("/execution/permissions/exec")),
                    if at("/execution/process/available").as_bool() == Some(true) {
                        "available"
                    } else {
                        "unavailable"
                    },
                    word("/execution/isolation/command_sandbox"),
                    word("/execution/network/policy"),
                    word("/execution/network/enforcement"),
                    word("/execution/approvals"),
                ));
                all.insert(id, v);
            }
            Err(e) => {
                r.line(format!("  {id}: REFUSED: {e}"));
                r.problem(format!("workspace `{id}`: workspace_info is refused: {e}"));
                all.insert(id, json!({"error": e}));
            }
        }
    }
    r.line("  (the whole answers: codespace doctor --json)");
    r.json.insert("workspace_info".into(), Value::Object(all));
    Ok(())
}
