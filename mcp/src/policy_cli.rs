//! The security-team commands: `policy test` (parameterized cases, reports, coverage, export to
//! the upstream `cedar run-tests` format), `policy explain` and `audit`.

use anyhow::{Context, Result, anyhow};
use codespace_engine::config::Profile;
use codespace_engine::policy::explain::{explain_call, render_text, to_json};
use codespace_engine::policy::{PolicySnapshot, PolicySource, compile};
use codespace_engine::request::ProcessFacts;
use codespace_engine::{Config, Gateway, PolicyStore, SandboxFacts, Session, ToolCall};
use codespace_policy_tools::junit::report_junit;
use codespace_policy_tools::suite::{
    CaseResult, Coverage, Fixture, Gates, RunOptions, TestFile, TestProcess, call_error_text,
    parse_file, profile_tree, report_json, run_file_in,
};
use codespace_store::{DecisionQuery, Store};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

/// Report formats of `policy test`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// One line per case, then the coverage, then `N passed, M failed`.
    Text,
    /// One JSON document.
    Json,
    /// JUnit XML.
    Junit,
    /// A Markdown summary for a pull-request comment.
    Markdown,
    /// SARIF 2.1.0 for code-scanning views: one `error` result per failing case or missed gate.
    Sarif,
}

/// Flags of `policy test`.
#[derive(Debug, clap::Args)]
pub struct TestArgs {
    /// Test files (default: every .yaml under <policies>/tests).
    pub files: Vec<PathBuf>,
    /// Report format on stdout (json, junit, markdown and sarif print the summary line on stderr).
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
    /// Write the json/junit/markdown/sarif report to FILE and keep the text report on stdout.
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Fail when fewer than N percent of the policies determined some decision.
    #[arg(long, value_name = "N")]
    pub coverage_min: Option<f64>,
    /// Fail when the policies of some profile (those whose principal scope names it) are
    /// covered below N percent.
    #[arg(long, value_name = "N")]
    pub coverage_min_profile: Option<f64>,
    /// Fail when the policies naming some action in their scope are covered below N percent.
    #[arg(long, value_name = "N")]
    pub coverage_min_action: Option<f64>,
    /// Fail when no test case ran.
    #[arg(long)]
    pub fail_on_empty: bool,
    /// Write the resolved requests as upstream `cedar run-tests` files into DIR.
    #[arg(long, value_name = "DIR")]
    pub emit_cedar: Option<PathBuf>,
    /// Run only the cases whose name (or file name) contains NAME.
    #[arg(long, value_name = "NAME")]
    pub filter: Option<String>,
}

/// The config's template links (`policies.templates`), none without a config.
pub fn config_links(config: Option<&Config>) -> Vec<codespace_engine::config::TemplateLink> {
    config
        .map(|c| c.policy_templates.clone())
        .unwrap_or_default()
}

fn compile_or_report(
    source: &PolicySource,
    links: &[codespace_engine::config::TemplateLink],
) -> Result<PolicySnapshot> {
    match source.read().map(|b| b.with_links(links)).and_then(compile) {
        Ok(s) => Ok(s),
        Err(e) => {
            for line in &e.0 {
                eprintln!("{line}");
            }
            Err(anyhow!("policies rejected; nothing ran"))
        }
    }
}

/// One policy test file of a run: on disk, or one of the shipped tests embedded in the binary.
#[derive(Debug, Clone)]
enum TestInput {
    /// A file on disk.
    Disk(PathBuf),
    /// An embedded shipped test: its name from the repository root and its text.
    Embedded(&'static str, &'static str),
}

impl TestInput {
    /// The name reports show.
    fn name(&self) -> String {
        match self {
            TestInput::Disk(p) => p.display().to_string(),
            TestInput::Embedded(name, _) => {
                format!("{}:{name}", codespace_engine::policy::EMBEDDED_NAME)
            }
        }
    }

    fn text(&self) -> Result<String> {
        match self {
            TestInput::Disk(p) => {
                std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))
            }
            TestInput::Embedded(_, text) => Ok((*text).to_string()),
        }
    }

    fn path(&self) -> &Path {
        match self {
            TestInput::Disk(p) => p,
            TestInput::Embedded(name, _) => Path::new(name),
        }
    }
}

/// Where the default test files of `source` are looked for, as reports name it.
fn default_tests_location(source: &PolicySource) -> String {
    match source {
        PolicySource::Dir { policies, .. } => policies.join("tests").display().to_string(),
        PolicySource::Embedded => format!(
            "{} policies/tests (the shipped set)",
            codespace_engine::policy::EMBEDDED_NAME
        ),
    }
}

fn default_test_files(source: &PolicySource) -> Result<Vec<TestInput>> {
    let dir = match source {
        PolicySource::Dir { policies, .. } => policies.join("tests"),
        PolicySource::Embedded => {
            return Ok(codespace_engine::policy::embedded_tests()
                .map(|(name, text)| TestInput::Embedded(name, text))
                .collect());
        }
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
    Ok(files.into_iter().map(TestInput::Disk).collect())
}

fn emit_name(file: &Path) -> String {
    let stem = file
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_else(|| "tests".into());
    format!("{stem}.cedartests.json")
}

/// The profile tree of a run: the config's (built-ins included) or the built-ins.
pub fn base_profiles(config: Option<&Config>) -> BTreeMap<String, Profile> {
    config.map_or_else(codespace_engine::config::builtin_profiles, |c| {
        c.profiles.clone()
    })
}

/// Every profile id a policy may name: the base tree plus those the test files declare.
pub fn known_profiles<'a>(
    base: &BTreeMap<String, Profile>,
    files: impl IntoIterator<Item = &'a TestFile>,
) -> std::collections::BTreeSet<String> {
    base.keys()
        .cloned()
        .chain(files.into_iter().flat_map(|f| f.profiles.keys().cloned()))
        .collect()
}

/// The parsed test files of `<policies>/tests` (files that do not parse are skipped here;
/// `policy test` reports them).
pub fn parsed_default_tests(source: &PolicySource) -> Vec<TestFile> {
    default_test_files(source)
        .unwrap_or_default()
        .iter()
        .filter_map(|f| f.text().ok())
        .filter_map(|t| parse_file(&t).ok())
        .collect()
}

/// `codespace policy test`. `config` (from `--config`) supplies the profile tree.
pub fn test(args: &TestArgs, source: &PolicySource, config: Option<&Config>) -> Result<ExitCode> {
    let snap = compile_or_report(source, &config_links(config))?;
    let files = if args.files.is_empty() {
        default_test_files(source)?
    } else {
        args.files.iter().cloned().map(TestInput::Disk).collect()
    };
    if files.is_empty() {
        // Nothing to run: a coverage figure would only say 0 %.
        let gated = args.coverage_min.is_some()
            || args.coverage_min_profile.is_some()
            || args.coverage_min_action.is_some()
            || args.fail_on_empty;
        let line = format!(
            "no test files under {}: nothing ran, no coverage measured (write cases there, see docs/policy.md, or start from `codespace policy init DIR`)",
            default_tests_location(source)
        );
        if args.format == Format::Text {
            println!("{line}");
        } else {
            eprintln!("{line}");
        }
        return Ok(if gated {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        });
    }
    let opts = RunOptions {
        emit_cedar: args.emit_cedar.is_some(),
        alternatives: true,
    };
    if let Some(dir) = &args.emit_cedar {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let base = base_profiles(config);
    let mut results: Vec<CaseResult> = Vec::new();
    let mut parsed_files: Vec<(PathBuf, String, TestFile)> = Vec::new();
    // Each file's text by its report name: SARIF points at a failing case's line.
    let mut texts: BTreeMap<String, String> = BTreeMap::new();
    for f in &files {
        let name = f.name();
        let text = f.text()?;
        if args.format == Format::Sarif {
            texts.insert(name.clone(), text.clone());
        }
        match parse_file(&text) {
            Ok(p) => parsed_files.push((f.path().to_path_buf(), name, p)),
            Err(e) => results.push(CaseResult {
                file: name.clone(),
                name: "(file)".into(),
                passed: false,
                failures: vec![format!("cannot parse: {e}")],
                decision: None,
                refused: None,
                alternatives_reached: Default::default(),
            }),
        }
    }
    // A policy naming a profile that neither the config, the built-ins nor a test file
    // defines never matches: refuse the set, as `policy validate` does.
    let known = known_profiles(&base, parsed_files.iter().map(|(_, _, p)| p));
    // The set under test: the config's links and every link a test file declares.
    let snap = match codespace_policy_tools::suite::with_test_links(
        &snap,
        parsed_files.iter().map(|(_, _, p)| p),
    ) {
        Ok(Some(linked)) => linked,
        Ok(None) => snap,
        Err(e) => {
            for line in &e.0 {
                eprintln!("{line}");
            }
            return Err(anyhow!(
                "the test files' template links are rejected; nothing ran"
            ));
        }
    };
    let unknown = codespace_engine::policy::unknown_profile_errors(&snap, &known);
    if !unknown.is_empty() {
        for line in &unknown {
            eprintln!("{line}");
        }
        return Err(anyhow!("policies rejected; nothing ran"));
    }
    let mut emitted = 0usize;
    for (f, name, parsed) in &parsed_files {
        let mut outcomes = run_file_in(&snap, &base, name, parsed, opts);
        if let Some(filter) = &args.filter {
            outcomes.retain(|o| {
                o.result.name.contains(filter.as_str()) || name.contains(filter.as_str())
            });
        }
        if let Some(dir) = &args.emit_cedar {
            let cases: Vec<serde_json::Value> = outcomes
                .iter()
                .flat_map(|o| o.cedar.iter().cloned())
                .collect();
            emitted += cases.len();
            let path = dir.join(emit_name(f));
            std::fs::write(&path, serde_json::to_string_pretty(&cases)?)
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        results.extend(outcomes.into_iter().map(|o| o.result));
    }
    let coverage = Coverage::of(&snap, &results);
    let passed = results.iter().filter(|r| r.passed).count();
    let failed = results.len() - passed;
    let gates = Gates {
        coverage_min: args.coverage_min,
        fail_on_empty: args.fail_on_empty,
        coverage_min_profile: args.coverage_min_profile,
        coverage_min_action: args.coverage_min_action,
    };

    let machine = match args.format {
        Format::Text => None,
        Format::Json => Some(serde_json::to_string_pretty(&report_json(
            &results, &coverage, &gates,
        ))?),
        Format::Junit => Some(report_junit(&results, &coverage, &gates)),
        Format::Markdown => Some(codespace_policy_tools::markdown::report_markdown(
            &results, &coverage, &gates,
        )),
        Format::Sarif => {
            let line_of = |file: &str, case: &str| {
                texts
                    .get(file)
                    .and_then(|t| codespace_policy_tools::sarif::case_line(t, case))
            };
            Some(serde_json::to_string_pretty(
                &codespace_policy_tools::sarif::report_sarif_tests(
                    &results, &coverage, &gates, &snap, &line_of,
                ),
            )?)
        }
    };
    let text_on_stdout = machine.is_none() || args.output.is_some();
    let mut out = std::io::stdout().lock();
    if let (Some(doc), Some(path)) = (&machine, &args.output) {
        std::fs::write(path, doc).with_context(|| format!("cannot write {}", path.display()))?;
    } else if let Some(doc) = &machine {
        writeln!(out, "{doc}")?;
    }
    let verdicts: Vec<String> = gates
        .evaluate(&results, &coverage)
        .into_iter()
        .filter(|g| !g.passed)
        .map(|g| g.message)
        .collect();
    let pct = coverage.percent();
    if text_on_stdout {
        for r in &results {
            if r.passed {
                writeln!(out, "ok     {} :: {}", r.file, r.name)?;
            } else {
                writeln!(out, "FAILED {} :: {}", r.file, r.name)?;
                for why in &r.failures {
                    writeln!(out, "         {why}")?;
                }
            }
        }
        writeln!(
            out,
            "coverage: {}/{} policies determined a decision ({pct:.1}%)",
            coverage.covered.len(),
            coverage.all.len()
        )?;
        for id in coverage.uncovered() {
            writeln!(out, "  uncovered: {id}")?;
        }
        for (kind, groups) in [
            ("profile", &coverage.by_profile),
            ("action", &coverage.by_action),
        ] {
            let line: Vec<String> = coverage
                .groups(groups)
                .map(|(g, pct, _)| format!("{g} {pct:.0}%"))
                .collect();
            if !line.is_empty() {
                writeln!(out, "  by {kind}: {}", line.join(", "))?;
            }
        }
        let unreached = coverage.unreached_alternatives();
        writeln!(
            out,
            "alternatives: {}/{} alternatives of `||` conditions reached by some case",
            coverage.alternatives.len() - unreached.len(),
            coverage.alternatives.len()
        )?;
        for (key, text) in &unreached {
            writeln!(out, "  unreached: {key}  {text}")?;
        }
        if let Some(dir) = &args.emit_cedar {
            writeln!(
                out,
                "emitted {emitted} cedar run-tests case(s) into {}",
                dir.display()
            )?;
        }
        for v in &verdicts {
            writeln!(out, "FAILED {v}")?;
        }
        writeln!(out, "{passed} passed, {failed} failed")?;
    } else {
        for v in &verdicts {
            eprintln!("FAILED {v}");
        }
        eprintln!("{passed} passed, {failed} failed");
    }
    Ok(if failed == 0 && verdicts.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Flags of `policy explain`.
#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// The `params` of an MCP tools/call: `{"name": "read", "arguments": {...}}`.
    #[arg(long, required_unless_present_any = ["decision_id", "connect"])]
    pub call: Option<String>,
    /// Re-decide a logged decision (`dec-…`) under the set in force and say whether the
    /// answer changed (the store comes from --store or the config).
    #[arg(long, value_name = "DEC", alias = "decision", conflicts_with = "call")]
    pub decision_id: Option<String>,
    /// The store holding --decision-id (default: the config's `store`, else the one `serve`
    /// uses).
    #[arg(long, value_name = "FILE")]
    pub store: Option<PathBuf>,
    /// The calling client (`context.session.client`) [local].
    #[arg(long, value_name = "NAME")]
    pub client: Option<String>,
    /// The transport (`context.session.transport`): stdio or http [stdio].
    #[arg(long, value_parser = ["stdio", "http"])]
    pub transport: Option<String>,
    /// The caller's user (`context.session.user`, as an OIDC token would name it) [none].
    #[arg(long, value_name = "ID")]
    pub user: Option<String>,
    /// A group of `--user` (its parent `Group::"NAME"`). Repeatable.
    #[arg(long = "group", value_name = "NAME", requires = "user")]
    pub groups: Vec<String>,
    /// Without a config: the virtual workspace's profile.
    #[arg(long, default_value = "workspace-write")]
    pub workspace_profile: String,
    /// Without a config: the parent of an operator profile given with --workspace-profile.
    #[arg(long, value_name = "PROFILE")]
    pub extends: Option<String>,
    /// Facts of the process a process tool refers to: `{"command": [...], "same_client": true}`.
    #[arg(long, value_name = "JSON")]
    pub process: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Explain the `network_connect` request of one egress-proxy connection to HOST:PORT
    /// (with the process facts of --process) instead of a tool call.
    #[arg(long, value_name = "HOST:PORT", conflicts_with_all = ["call", "decision_id"])]
    pub connect: Option<String>,
    /// With --connect: the target's class (public, private, loopback, link_local) [from the
    /// address, resolving a name once].
    #[arg(long, value_name = "CLASS", value_parser = ["public", "private", "loopback", "link_local"])]
    pub ip_class: Option<String>,
    /// With --connect: `connect` (a tunnel) or `http` (an absolute-form request) [connect].
    #[arg(long, value_parser = ["connect", "http"], default_value = "connect")]
    pub scheme: String,
    /// With --connect: the target is this server's own HTTP listener.
    #[arg(long)]
    pub server_owned: bool,
    /// With --connect and --config: the workspace [w].
    #[arg(long, value_name = "ID")]
    pub workspace: Option<String>,
}

/// The target of `explain --connect`: the port is required; the class comes from --ip-class,
/// else from the address (a name is resolved once).
fn connect_target(args: &ExplainArgs, text: &str) -> Result<codespace_engine::request::NetTarget> {
    use std::net::ToSocketAddrs;
    let (host, port) = match text.rsplit_once(':') {
        Some((h, p)) => (
            h.trim_start_matches('[').trim_end_matches(']'),
            p.parse::<u16>()
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| anyhow!("--connect: `{p}` is not a port (1-65535)"))?,
        ),
        None => return Err(anyhow!("--connect wants HOST:PORT")),
    };
    if host.is_empty() {
        return Err(anyhow!("--connect wants HOST:PORT"));
    }
    let ip_class = match &args.ip_class {
        Some(c) => c.clone(),
        None => {
            let addr = (host, port)
                .to_socket_addrs()
                .ok()
                .and_then(|mut a| a.next())
                .ok_or_else(|| {
                    anyhow!("--connect: cannot resolve `{host}`; give its class with --ip-class")
                })?;
            codespace_engine::gateway::net::ip_class_of(addr.ip()).to_string()
        }
    };
    Ok(codespace_engine::request::NetTarget {
        host: host.to_ascii_lowercase(),
        port,
        scheme: args.scheme.clone(),
        ip_class,
        server_owned: args.server_owned,
    })
}

fn parse_call(text: &str) -> Result<ToolCall> {
    let v: serde_json::Value =
        serde_json::from_str(text).context("--call is not JSON (want the params of tools/call)")?;
    let name = v
        .get("name")
        .and_then(serde_json::Value::as_str)
        .ok_or_else(|| anyhow!("--call needs a `name`"))?;
    let args = v
        .get("arguments")
        .cloned()
        .unwrap_or(serde_json::Value::Null);
    ToolCall::parse(name, &args).map_err(|e| anyhow!("--call: {}", call_error_text(name, &e)))
}

/// `codespace policy explain`. `config` selects the configured workspace; without it, a virtual
/// fixture like the test runner's is used with `source`'s policies.
pub fn explain(
    args: &ExplainArgs,
    config: Option<&Path>,
    source: PolicySource,
    default_store: impl FnOnce() -> Result<PathBuf>,
) -> Result<ExitCode> {
    if let Some(dec) = &args.decision_id {
        return explain_logged(args, dec, config, &source, default_store);
    }
    let process = match &args.process {
        Some(p) => {
            let tp: TestProcess = serde_json::from_str(p).context("--process")?;
            Some(ProcessFacts {
                id: "proc-explain".into(),
                same_client: tp.same_client,
                argv: tp.command,
                tty: tp.tty,
                env_names: tp.env_names,
                background: tp.background,
            })
        }
        None => None,
    };
    let session = explain_session(args);
    if let Some(text) = &args.connect {
        return explain_connect(args, text, config, &source, &session, process);
    }
    let call = parse_call(args.call.as_deref().unwrap_or_default())?;
    let x = match config {
        Some(path) => {
            let gw = explain_gateway(path)?;
            gw.explain(&session, &call, process.as_ref())
                .map_err(|e| anyhow!("{}: {}", e.code.as_str(), e.message))?
        }
        None => {
            let snap = compile_or_report(&source, &[])?;
            let id = call.workspace_id().unwrap_or("w").to_string();
            let fx = Fixture::new(&id, &args.workspace_profile);
            let mut extra = BTreeMap::new();
            if let Some(parent) = &args.extends {
                extra.insert(args.workspace_profile.clone(), Some(parent.clone()));
            }
            let profiles: BTreeMap<String, Profile> = profile_tree(&extra);
            if !profiles.contains_key(&args.workspace_profile) {
                return Err(anyhow!(
                    "--workspace-profile: unknown profile `{}`{}; for an operator profile give \
                     --extends PARENT, or --config",
                    args.workspace_profile,
                    codespace_engine::suggest::hint(
                        &args.workspace_profile,
                        profiles.keys().map(String::as_str)
                    )
                ));
            }
            explain_call(
                &snap,
                &profiles,
                &fx.facts(),
                &session,
                &call,
                process.as_ref(),
            )
        }
    };
    print_explanation(args, &x)
}

fn print_explanation(
    args: &ExplainArgs,
    x: &codespace_engine::policy::explain::Explanation,
) -> Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&to_json(x))?)?;
    } else {
        write!(out, "{}", render_text(x))?;
    }
    Ok(if x.allowed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    })
}

/// The gateway `policy explain --config` decides with: the operator's config, its policies (or
/// the embedded set) and this machine's sandbox facts, with no store.
fn explain_gateway(path: &Path) -> Result<Gateway> {
    let cfg = Config::load(path)?;
    let src = match (&cfg.policies_dir, &cfg.schema_file) {
        (Some(p), s) => PolicySource::Dir {
            policies: p.clone(),
            schema: s.clone().unwrap_or_else(|| {
                p.parent()
                    .unwrap_or(Path::new("."))
                    .join("schema/codespace.cedarschema")
            }),
        },
        (None, _) => PolicySource::Embedded,
    };
    let policy = PolicyStore::load_linked(
        src,
        cfg.profiles.keys().cloned().collect(),
        None,
        cfg.policy_templates.clone(),
    )
    .map_err(|e| anyhow!("policies rejected:\n{e}"))?;
    let probe = codespace_runner_sandbox::probe();
    let sandbox = SandboxFacts {
        sandbox_enforced: probe.sandbox_available(),
        network_enforced: probe.network_enforceable(),
        masking_enforced: probe.masking_available(),
    };
    Ok(Gateway::new(cfg, Arc::new(policy), None, sandbox)?)
}

/// `explain --connect HOST:PORT`: the `network_connect` request of one proxied connection, on
/// the configured workspace (`--workspace`) or a virtual `network: proxy` fixture.
fn explain_connect(
    args: &ExplainArgs,
    text: &str,
    config: Option<&Path>,
    source: &PolicySource,
    session: &Session,
    process: Option<ProcessFacts>,
) -> Result<ExitCode> {
    let target = connect_target(args, text)?;
    let process = process.unwrap_or(ProcessFacts {
        id: "proc-explain".into(),
        same_client: true,
        argv: Vec::new(),
        tty: false,
        env_names: Vec::new(),
        background: false,
    });
    let workspace = args.workspace.clone().unwrap_or_else(|| "w".into());
    let x = match config {
        Some(path) => {
            let gw = explain_gateway(path)?;
            gw.explain_connect(&workspace, session, &process, &target)
                .map_err(|e| anyhow!("{}: {}", e.code.as_str(), e.message))?
        }
        None => {
            let snap = compile_or_report(source, &[])?;
            let mut fx = Fixture::new(&workspace, &args.workspace_profile);
            fx.network = codespace_engine::config::Network::Proxy;
            let mut extra = BTreeMap::new();
            if let Some(parent) = &args.extends {
                extra.insert(args.workspace_profile.clone(), Some(parent.clone()));
            }
            let profiles: BTreeMap<String, Profile> = profile_tree(&extra);
            if !profiles.contains_key(&args.workspace_profile) {
                return Err(anyhow!(
                    "--workspace-profile: unknown profile `{}`; for an operator profile give --extends PARENT, or --config",
                    args.workspace_profile
                ));
            }
            let req = codespace_engine::request::connect_request(session, &process, &target);
            codespace_engine::policy::explain::explain_requests(
                &snap,
                &profiles,
                &fx.facts(),
                "network_connect",
                &[req],
            )
        }
    };
    print_explanation(args, &x)
}

fn explain_session(args: &ExplainArgs) -> Session {
    let stdio = Session::stdio();
    Session {
        client: args.client.clone().unwrap_or(stdio.client),
        transport: match args.transport.as_deref() {
            Some("http") => crate::http::TRANSPORT.to_string(),
            _ => stdio.transport,
        },
        user: args
            .user
            .as_ref()
            .map(|id| codespace_engine::policy::user::UserFacts {
                id: id.clone(),
                groups: args.groups.clone(),
                ..Default::default()
            }),
    }
}

/// `explain --decision-id`: every recorded sub-request of a logged decision, re-decided and
/// explained under the set in force, with whether the answer changed.
fn explain_logged(
    args: &ExplainArgs,
    decision_id: &str,
    config: Option<&Path>,
    source: &PolicySource,
    default_store: impl FnOnce() -> Result<PathBuf>,
) -> Result<ExitCode> {
    let cfg = config.map(Config::load).transpose()?;
    let links = config_links(cfg.as_ref());
    let cfg_store = cfg.and_then(|c| c.store);
    let path = match args.store.clone().or(cfg_store) {
        Some(p) => p,
        None => default_store()?,
    };
    if !path.exists() {
        return Err(anyhow!(
            "no store at {} (pass --store FILE or --config FILE)",
            path.display()
        ));
    }
    let store = Store::open(&path).with_context(|| format!("cannot open {}", path.display()))?;
    let rows = store.query_decisions(&DecisionQuery {
        decision_id: Some(decision_id.to_string()),
        ..DecisionQuery::default()
    })?;
    if rows.is_empty() {
        return Err(anyhow!("no decision `{decision_id}` in {}", path.display()));
    }
    let snap = compile_or_report(source, &links)?;
    let mut out = std::io::stdout().lock();
    let mut docs = Vec::new();
    let mut any_changed = false;
    let mut all_allowed = true;
    for r in &rows {
        let Some(rec) = r
            .request
            .as_ref()
            .map(codespace_engine::policy::recorded::RecordedRequest::from_json)
            .transpose()
            .map_err(|e| anyhow!(e))?
        else {
            return Err(anyhow!(
                "decision `{decision_id}` #{} has no recorded request (logged before requests were recorded); it cannot be re-decided",
                r.sub_index
            ));
        };
        let x = codespace_engine::policy::explain::explain_requests(
            &snap,
            &rec.profile_tree(),
            &rec.workspace,
            &rec.tool,
            std::slice::from_ref(&rec.request),
        );
        let now = x
            .decision
            .as_ref()
            .and_then(|d| d.subs.first())
            .map(|s| (s.allowed, s.policy_ids.clone()));
        let now_allowed = now.as_ref().is_some_and(|n| n.0);
        let changed = verdict_of(now_allowed) != r.decision;
        any_changed |= changed;
        if rec.request.gating {
            all_allowed &= now_allowed;
        }
        if args.json {
            let mut v = to_json(&x);
            if let serde_json::Value::Object(m) = &mut v {
                m.insert("sub_index".into(), r.sub_index.into());
                m.insert("recorded_decision".into(), r.decision.clone().into());
                m.insert(
                    "recorded_policy_ids".into(),
                    serde_json::json!(r.policy_ids),
                );
                m.insert(
                    "recorded_policy_set_sha256".into(),
                    r.policy_set_sha256.clone().into(),
                );
                m.insert(
                    "recorded_at".into(),
                    codespace_engine::wire::rfc3339_ms(r.at_ms).into(),
                );
                m.insert("changed".into(), changed.into());
            }
            docs.push(v);
        } else {
            writeln!(
                out,
                "{decision_id} #{} at {}: recorded {} by {} under {}",
                r.sub_index,
                codespace_engine::wire::rfc3339_ms(r.at_ms),
                r.decision,
                if r.policy_ids.is_empty() {
                    "(default deny)".to_string()
                } else {
                    r.policy_ids.join(", ")
                },
                r.policy_set_sha256
            )?;
            writeln!(
                out,
                "now {} under {}: {}",
                verdict_of(now_allowed),
                snap.sha256,
                if changed { "CHANGED" } else { "unchanged" }
            )?;
            write!(out, "{}", render_text(&x))?;
            writeln!(out)?;
        }
    }
    if args.json {
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "decision_id": decision_id,
                "changed": any_changed,
                "policy_set_sha256": snap.sha256,
                "requests": docs,
            }))?
        )?;
    } else {
        writeln!(
            out,
            "{decision_id}: {}",
            if any_changed {
                "the answer CHANGED under the set in force"
            } else {
                "the answer is unchanged under the set in force"
            }
        )?;
    }
    Ok(if all_allowed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    })
}

fn verdict_of(allowed: bool) -> &'static str {
    if allowed { "allow" } else { "deny" }
}

/// Flags of `audit`.
#[derive(Debug, clap::Args)]
pub struct AuditArgs {
    /// The store (default: the config's `store`, else the one `serve` uses).
    #[arg(long)]
    pub store: Option<PathBuf>,
    /// Operator config (for its `store`).
    #[arg(long, env = "CODESPACE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Only rows at or after T: RFC 3339, unix milliseconds, or an age like 15m, 2h, 7d.
    #[arg(long, value_name = "T")]
    pub since: Option<String>,
    /// Only allow, deny or masked rows (`masked`: a path withheld from an allowed command,
    /// not a refused call; `deny` never shows them).
    #[arg(long, value_parser = ["allow", "deny", codespace_store::MASKED])]
    pub decision: Option<String>,
    /// Only this workspace.
    #[arg(long)]
    pub workspace: Option<String>,
    /// Only this tool.
    #[arg(long)]
    pub tool: Option<String>,
    /// At most N rows (default: 50 for the table, every row for --json).
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
    /// The oldest rows first (and --limit keeps the oldest); default: the newest first.
    #[arg(long)]
    pub oldest: bool,
    /// Print policy reloads and start-up events instead of decisions.
    #[arg(long)]
    pub events: bool,
    /// JSON lines (one object per row) for a SIEM.
    #[arg(long)]
    pub json: bool,
    /// `table` (default), `json` (as --json) or `ocsf`: one OCSF API Activity event (class 6003)
    /// per stored row, as JSON lines (docs/telemetry.md).
    #[arg(long, value_enum, conflicts_with = "json")]
    pub format: Option<AuditFormat>,
    /// Only this client (`local` on stdio; the token's client name over HTTP).
    #[arg(long)]
    pub client: Option<String>,
    /// Only rows this policy id determined (in the live or the shadow set).
    #[arg(long, value_name = "ID")]
    pub policy: Option<String>,
    /// Only the rows of one decision.
    #[arg(long, value_name = "DEC")]
    pub decision_id: Option<String>,
    /// Only calls where the shadow set (policies/shadow/) decided differently.
    #[arg(long)]
    pub shadow_flips: bool,
    /// Keep printing new rows as they are written (stop with Ctrl-C).
    #[arg(long)]
    pub follow: bool,
    /// Show every stored row, default-deny sandbox-capability rows included (by default they
    /// are collapsed into their call's row).
    #[arg(long)]
    pub all_rows: bool,
}

/// `codespace audit --format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AuditFormat {
    /// The table (the default).
    Table,
    /// JSON lines, as `--json`.
    Json,
    /// OCSF API Activity events, as JSON lines.
    Ocsf,
}

/// Parses `--since`: RFC 3339, unix ms, or an age (`30s`, `15m`, `2h`, `7d`) before now.
pub fn parse_since(s: &str, now_ms: i64) -> Result<i64> {
    let s = s.trim();
    if let Ok(ms) = s.parse::<i64>() {
        return Ok(ms);
    }
    let split = s
        .char_indices()
        .last()
        .and_then(|(i, _)| Some((s.get(..i)?, s.get(i..)?)));
    if let Some((num, unit)) = split
        && let Ok(n) = num.parse::<i64>()
    {
        let mult = match unit {
            "s" => Some(1_000),
            "m" => Some(60_000),
            "h" => Some(3_600_000),
            "d" => Some(86_400_000),
            _ => None,
        };
        if let Some(m) = mult {
            return Ok(now_ms.saturating_sub(n.saturating_mul(m)));
        }
    }
    let t = time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
        .map_err(|e| anyhow!("--since `{s}`: not RFC 3339, unix ms or an age like 2h ({e})"))?;
    i64::try_from(t.unix_timestamp_nanos() / 1_000_000).map_err(|_| anyhow!("--since out of range"))
}

/// Rows the audit table shows without `--limit`.
const TABLE_ROWS: usize = 50;
/// How often `audit --follow` looks for new rows.
const FOLLOW_POLL: std::time::Duration = std::time::Duration::from_millis(250);

/// `codespace audit`. `default_store` is where `serve` keeps the store by default.
pub fn audit(
    args: &AuditArgs,
    default_store: impl FnOnce() -> Result<PathBuf>,
) -> Result<ExitCode> {
    let cfg_store = match &args.config {
        Some(c) => Config::load(c)?.store,
        None => None,
    };
    let path = match args.store.clone().or(cfg_store) {
        Some(p) => p,
        None => default_store()?,
    };
    if !path.exists() {
        return Err(anyhow!(
            "no store at {} (pass --store FILE or --config FILE)",
            path.display()
        ));
    }
    let ocsf = args.format == Some(AuditFormat::Ocsf);
    let json = args.json || matches!(args.format, Some(AuditFormat::Json | AuditFormat::Ocsf));
    if ocsf && args.events {
        return Err(anyhow!(
            "--format ocsf prints decisions; use --events --json for events"
        ));
    }
    let mut out = std::io::stdout().lock();
    let store = Store::open(&path).with_context(|| format!("cannot open {}", path.display()))?;
    let now = codespace_store::now_ms();
    let since = args
        .since
        .as_deref()
        .map(|s| parse_since(s, now))
        .transpose()?;
    let limit = match (args.limit, json) {
        (Some(n), _) => Some(n),
        (None, false) => Some(TABLE_ROWS),
        (None, true) => None,
    };
    if args.events {
        // The store returns the newest N, oldest first; for --oldest, ask for all and cut.
        let mut rows: Vec<_> = store
            .events(
                None,
                if args.oldest {
                    usize::MAX
                } else {
                    limit.unwrap_or(usize::MAX)
                },
            )?
            .into_iter()
            .filter(|e| since.is_none_or(|s| e.at_ms >= s))
            .collect();
        if args.oldest {
            rows.truncate(limit.unwrap_or(usize::MAX));
        } else {
            rows.reverse();
        }
        if !json {
            println!("{:<24}  {:<15}  detail", "time", "event");
        }
        for e in &rows {
            if json {
                let mut v = serde_json::to_value(e)?;
                if let serde_json::Value::Object(m) = &mut v {
                    m.insert(
                        "time".into(),
                        codespace_engine::wire::rfc3339_ms(e.at_ms).into(),
                    );
                }
                writeln!(out, "{}", crate::audit_view::json_text(&v))?;
            } else {
                writeln!(
                    out,
                    "{:<24}  {:<15}  {}",
                    codespace_engine::wire::rfc3339_ms(e.at_ms),
                    codespace_engine::shown::escape(&e.kind),
                    crate::audit_view::json_text(&e.detail)
                )?;
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mut q = DecisionQuery {
        since_ms: since,
        decision: args.decision.clone(),
        workspace: args.workspace.clone(),
        tool: args.tool.clone(),
        limit,
        // `--follow` appends new rows below: the table starts oldest first.
        newest_first: !args.oldest && !args.follow,
        client: args.client.clone(),
        policy: args.policy.clone(),
        decision_id: args.decision_id.clone(),
        shadow_flips: args.shadow_flips,
        ..DecisionQuery::default()
    };
    if ocsf {
        return crate::audit_view::print_ocsf(&store, q, args.follow, &mut out)
            .map(|()| ExitCode::SUCCESS);
    }
    let rows = store.query_decisions(&q)?;
    let mut last_seq = rows.iter().map(|r| r.seq).max().unwrap_or(0);
    let shown = crate::audit_view::collapse(rows, args.all_rows);
    if json {
        for r in &shown {
            writeln!(
                out,
                "{}",
                crate::audit_view::json_text(&crate::audit_view::export_json(r))
            )?;
        }
        out.flush()?;
        if args.follow {
            if last_seq == 0 {
                last_seq = store.max_decision_seq()?;
            }
            q.limit = None;
            q.since_ms = None;
            loop {
                std::thread::sleep(FOLLOW_POLL);
                q.after_seq = Some(last_seq);
                let rows = store.query_decisions(&q)?;
                last_seq = rows.iter().map(|r| r.seq).max().unwrap_or(last_seq);
                for r in &crate::audit_view::collapse(rows, args.all_rows) {
                    writeln!(
                        out,
                        "{}",
                        crate::audit_view::json_text(&crate::audit_view::export_json(r))
                    )?;
                }
                out.flush()?;
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let rows = shown;
    writeln!(out, "{}", crate::audit_view::TABLE_HEADER)?;
    for r in &rows {
        writeln!(out, "{}", crate::audit_view::table_line(r))?;
    }
    writeln!(
        out,
        "{} row(s), {}; {} deny{}{}",
        rows.len(),
        if args.oldest || args.follow {
            "oldest first"
        } else {
            "newest first"
        },
        rows.iter().filter(|r| r.row.decision == "deny").count(),
        match rows
            .iter()
            .filter(|r| r.row.decision == codespace_store::MASKED)
            .count()
        {
            0 => String::new(),
            n => format!(", {n} masked"),
        },
        if limit.is_some_and(|n| rows.len() >= n) {
            " (more may exist: --limit N)"
        } else {
            ""
        }
    )?;
    if args.follow {
        if last_seq == 0 {
            last_seq = store.max_decision_seq()?;
        }
        q.limit = None;
        q.since_ms = None;
        loop {
            out.flush()?;
            std::thread::sleep(FOLLOW_POLL);
            q.after_seq = Some(last_seq);
            let rows = store.query_decisions(&q)?;
            last_seq = rows.iter().map(|r| r.seq).max().unwrap_or(last_seq);
            for r in &crate::audit_view::collapse(rows, args.all_rows) {
                writeln!(out, "{}", crate::audit_view::table_line(r))?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `policy validate` of the shadow set (`<policies>/shadow/` over the live files), when there
/// is one: exit 1 when it does not compile.
pub fn validate_shadow(
    source: &PolicySource,
    known: &std::collections::BTreeSet<String>,
) -> Result<ExitCode> {
    let checked = match source.read_shadow() {
        Ok(None) => return Ok(ExitCode::SUCCESS),
        Ok(Some(bundle)) => compile(bundle).and_then(|snap| {
            let errs = codespace_engine::policy::unknown_profile_errors(&snap, known);
            if errs.is_empty() {
                Ok(snap)
            } else {
                Err(codespace_engine::policy::PolicyErrors(errs))
            }
        }),
        Err(e) => Err(e),
    };
    match checked {
        Ok(snap) => {
            println!(
                "ok: shadow set (live files + shadow/): {} policies; set {}",
                snap.meta.len(),
                snap.sha256
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            for line in &e.0 {
                eprintln!("shadow/{line}");
            }
            eprintln!("shadow policy validation failed: {} problem(s)", e.0.len());
            Ok(ExitCode::from(1))
        }
    }
}

/// True when `e` is a write to a reader that went away (a closed pipe).
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Starts hot reload for `serve`: the policies directory and schema are watched when they come
/// from disk; `<policies>/tests/*.yaml` must pass first when `tests_on_reload` is set.
pub fn start_reloader(
    policy: &Arc<PolicyStore>,
    store: &Arc<Store>,
    tests_on_reload: bool,
    profiles: &BTreeMap<String, Profile>,
) -> Result<codespace_engine::policy::reload::Reloader> {
    let tests_dir = match (tests_on_reload, policy.source()) {
        (true, PolicySource::Dir { policies, .. }) => Some(policies.join("tests")),
        _ => None,
    };
    let opts = codespace_engine::policy::reload::ReloadOptions {
        tests_dir,
        profiles: Some(profiles.clone()),
        test_gate: Some(codespace_policy_tools::reload_gate),
        on_rejected: Some(codespace_engine::telemetry::metrics::count_policy_reload_failure),
        ..Default::default()
    };
    Ok(codespace_engine::policy::reload::Reloader::start(
        Arc::clone(policy),
        Some(Arc::clone(store)),
        opts,
    )?)
}

/// Forwards every SIGHUP to the policy reloader and the config's (redaction patterns) until the
/// runtime ends.
pub async fn reload_on_sighup(
    reloader: Arc<codespace_engine::policy::reload::Reloader>,
    config: crate::config_reload::ConfigReloader,
) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        tracing::warn!("cannot install the SIGHUP handler; policy reload is by file watching only");
        return;
    };
    while hup.recv().await.is_some() {
        tracing::info!("SIGHUP: policy and redaction pattern reload requested");
        reloader.trigger();
        config.trigger(crate::config_reload::Trigger::Signal);
    }
}
