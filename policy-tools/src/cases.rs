//! The policy test files: their YAML model (fixture, profiles, session, process, approval,
//! cases and their expectations), parsing, the fixture's facts and profile tree, and expanding
//! parameterized cases; `crate::suite` runs them and re-exports this module.

use codespace_policy::config::Profile;
use codespace_policy::decide::Decision;
use codespace_policy::request::{ProcessFacts, Session, SubRequest, WorkspaceFacts};
use codespace_policy::wire::ToolCall;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// A test file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestFile {
    /// What the file tests.
    #[serde(default)]
    pub description: Option<String>,
    /// Operator profiles the file's workspaces may use (`id: {extends}`).
    #[serde(default)]
    pub profiles: BTreeMap<String, TestProfile>,
    /// Template links (the shape of the config's `policies.templates`) linked into the set these
    /// cases run against, beside the config's own (`--config`).
    #[serde(default)]
    pub links: Vec<codespace_policy::config::TemplateLink>,
    /// The virtual workspace.
    pub workspace: Fixture,
    /// The caller (default: client `local` over stdio).
    #[serde(default)]
    pub session: Option<TestSession>,
    /// The cases.
    pub cases: Vec<TestCase>,
}

/// An operator profile declared by a test file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestProfile {
    /// Parent profile.
    #[serde(default)]
    pub extends: Option<String>,
}

/// The virtual workspace fixture.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fixture {
    /// Workspace id (calls must name it).
    pub id: String,
    /// Profile.
    pub profile: String,
    /// Environment kind.
    #[serde(default)]
    pub environment_kind: codespace_policy::config::EnvironmentKind,
    /// Environment transport (`resource.workspace.environment.transport`; default `in-process`).
    #[serde(default)]
    pub environment_transport: codespace_policy::config::EnvironmentTransport,
    /// Environment host (`resource.workspace.environment.host`; default "").
    #[serde(default)]
    pub environment_host: String,
    /// Can the command sandbox be enforced (default `enforced`).
    #[serde(default = "enforced_sandbox")]
    pub sandbox: codespace_policy::facts::SandboxFact,
    /// Can a command's network be cut off (default `enforced`).
    #[serde(default = "enforced_network")]
    pub network_enforcement: codespace_policy::facts::NetworkEnforcement,
    /// The operator's network switch (default `restricted`).
    #[serde(default)]
    pub network: codespace_policy::config::Network,
    /// The operator's approvals switch (default `off`).
    #[serde(default)]
    pub approvals: codespace_policy::config::Approvals,
    /// Server-owned workspace-relative paths.
    #[serde(default)]
    pub server_owned: Vec<String>,
    /// The workspace's own sandbox switch, `resource.workspace.sandbox` (default `required`;
    /// `sandbox` above is the environment's probe result).
    #[serde(default)]
    pub workspace_sandbox: codespace_policy::config::SandboxMode,
    /// `resource.workspace.environment.secret_masking` (default `enforced`).
    #[serde(default = "enforced_masking")]
    pub secret_masking: codespace_policy::facts::MaskingFact,
}

fn enforced_sandbox() -> codespace_policy::facts::SandboxFact {
    codespace_policy::facts::SandboxFact::Enforced
}
fn enforced_network() -> codespace_policy::facts::NetworkEnforcement {
    codespace_policy::facts::NetworkEnforcement::Enforced
}
fn enforced_masking() -> codespace_policy::facts::MaskingFact {
    codespace_policy::facts::MaskingFact::Enforced
}

/// The caller of a test file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestSession {
    /// Client name.
    pub client: String,
    /// Transport.
    #[serde(default = "default_transport")]
    pub transport: String,
    /// The person behind the client's OIDC token (`context.session.user`): `{id, email,
    /// groups, tags}`; absent: no user, as without `identity.oidc`.
    #[serde(default)]
    pub user: Option<codespace_policy::user::UserFacts>,
}

fn default_transport() -> String {
    "stdio".into()
}

/// A process the case's call refers to (for the process tools).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestProcess {
    /// Whether the caller started it.
    #[serde(default = "yes")]
    pub same_client: bool,
    /// Its argv.
    #[serde(default)]
    pub command: Vec<String>,
    /// PTY?
    #[serde(default)]
    pub tty: bool,
    /// Names of the `env` variables it was started with.
    #[serde(default)]
    pub env_names: Vec<String>,
    /// Started as a background service?
    #[serde(default)]
    pub background: bool,
}

fn yes() -> bool {
    true
}

/// The hold of an approval case.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestApproval {
    /// `tool`, `elicitation`, `mrtr`, `cli` or `web`.
    #[serde(default = "default_channel")]
    pub channel: String,
    /// The client that asked for the hold (default: the file's caller).
    #[serde(default)]
    pub requested_by: Option<String>,
}

fn default_channel() -> String {
    "tool".into()
}

/// Sets `context.approval` of an approval case's requests from its `approval:` fixture.
pub(crate) fn case_approval(
    case: &TestCase,
    call: &ToolCall,
    session: &Session,
    reqs: &mut [SubRequest],
) {
    let Some(a) = &case.approval else { return };
    let decision = match call {
        ToolCall::ApprovalResolve(p) => p.decision.as_str(),
        _ => "grant",
    };
    codespace_policy::request::with_approval(
        reqs,
        &codespace_policy::request::ApprovalFacts {
            channel: a.channel.clone(),
            requested_by: a
                .requested_by
                .clone()
                .unwrap_or_else(|| session.client.clone()),
            resolved_by: session.client.clone(),
            resolver: session.resolver().to_string(),
            decision: decision.into(),
        },
    );
}

/// One case.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestCase {
    /// Name shown in the report.
    pub name: String,
    /// The `tools/call` params: `{name, arguments}`.
    pub call: CallSpec,
    /// Process facts for the process tools.
    #[serde(default)]
    pub process: Option<TestProcess>,
    /// The caller's user for this case (`{id, email, groups, tags}`), in place of the file's
    /// `session.user`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<codespace_policy::user::UserFacts>,
    /// Expected outcome of the call: `allow` / `deny` (Cedar decided) or `refused` (the request
    /// builder refused the call before Cedar was asked, e.g. a path outside the workspace).
    /// `expect:` is accepted as another name for it.
    #[serde(alias = "expect")]
    pub decision: String,
    /// The error code a `refused` case expects (`INVALID_ARGUMENTS`, `PATH_ESCAPE`,
    /// ...); any code when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// Policy ids that must be among the determining ones.
    #[serde(default)]
    pub reason: Vec<String>,
    /// Expected sandbox-capability decisions (`process_write: allow`; `process_write` is the
    /// command's `cwd`).
    #[serde(default)]
    pub capabilities: BTreeMap<String, String>,
    /// Expected `process_write` decisions of an `exec_command`'s write scope, per candidate
    /// directory (`{".git": deny, "target": allow}`): each path is decided as the server decides
    /// it when the command starts.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub write_paths: BTreeMap<String, String>,
    /// Expect evaluation errors (default: none allowed).
    #[serde(default)]
    pub errors: bool,
    /// `resource.links` of every path the call names (default 1: a file with one name; the
    /// server reads the real count from disk).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub links: Option<i64>,
    /// Expected `confirm` outcome of an allowed apply_patch / exec_command: `hold` (a permit on
    /// `confirm` matched, or evaluation failed) or `run`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirm: Option<String>,
    /// The hold an `approval_resolve` / `operation_resume` case answers (default: the caller's
    /// own hold, answered over the tool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<TestApproval>,
    /// Parameter sets: the case runs once per set, with every `{{name}}` in its strings
    /// replaced by the set's value (a string that is exactly `{{name}}` takes the value's type).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub params: Vec<BTreeMap<String, Value>>,
}

/// `{name, arguments}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallSpec {
    /// Tool name.
    pub name: String,
    /// Arguments.
    #[serde(default)]
    pub arguments: serde_json::Value,
}

/// The outcome of one case.
#[derive(Debug, Clone)]
pub struct CaseResult {
    /// File name.
    pub file: String,
    /// Case name.
    pub name: String,
    /// Passed?
    pub passed: bool,
    /// Why it failed (empty when passed).
    pub failures: Vec<String>,
    /// The decision, when one was made.
    pub decision: Option<Decision>,
    /// The error code when the call was refused before Cedar (then `decision` is `None`).
    pub refused: Option<String>,
    /// The `||` alternatives (`policy-id#n`) some sub-request of the case reached (when
    /// [`RunOptions::alternatives`] is on).
    pub alternatives_reached: BTreeSet<String>,
}

impl CaseResult {
    /// What happened to the call: `allow` / `deny` (Cedar decided), `refused` (refused before
    /// Cedar), or `None` (the case could not be run).
    pub fn outcome(&self) -> Option<&'static str> {
        match (&self.decision, &self.refused) {
            (Some(d), _) => Some(if d.allowed() { "allow" } else { "deny" }),
            (None, Some(_)) => Some("refused"),
            (None, None) => None,
        }
    }
}

/// Parses a YAML test file.
pub fn parse_file(text: &str) -> Result<TestFile, String> {
    serde_yaml_ng::from_str(text).map_err(|e| e.to_string())
}

/// What a run collects besides pass/fail.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunOptions {
    /// Build the upstream `cedar run-tests` cases of every sub-request.
    pub emit_cedar: bool,
    /// Record which alternatives of `||` chains each case reaches.
    pub alternatives: bool,
}

impl Fixture {
    /// A fixture with the defaults of a test file: host environment, sandbox and network
    /// enforcement available, network restricted, approvals off, nothing server-owned.
    pub fn new(id: &str, profile: &str) -> Fixture {
        Fixture {
            id: id.to_string(),
            profile: profile.to_string(),
            environment_kind: codespace_policy::config::EnvironmentKind::Host,
            environment_transport: codespace_policy::config::EnvironmentTransport::InProcess,
            environment_host: String::new(),
            sandbox: enforced_sandbox(),
            network_enforcement: enforced_network(),
            network: codespace_policy::config::Network::Restricted,
            approvals: codespace_policy::config::Approvals::Off,
            server_owned: Vec::new(),
            workspace_sandbox: codespace_policy::config::SandboxMode::Required,
            secret_masking: enforced_masking(),
        }
    }

    /// The workspace facts of the fixture (environment id `env`).
    pub fn facts(&self) -> WorkspaceFacts {
        WorkspaceFacts {
            id: self.id.clone(),
            profile: self.profile.clone(),
            environment: "env".into(),
            environment_kind: self.environment_kind,
            environment_transport: self.environment_transport,
            environment_host: self.environment_host.clone(),
            sandbox: self.sandbox,
            network_enforcement: self.network_enforcement,
            network: self.network,
            approvals: self.approvals,
            server_owned: self.server_owned.clone(),
            workspace_sandbox: self.workspace_sandbox,
            secret_masking: self.secret_masking,
        }
    }
}

/// The built-in profiles plus `extra` (`id → extends`).
pub fn profile_tree(extra: &BTreeMap<String, Option<String>>) -> BTreeMap<String, Profile> {
    let mut m = codespace_policy::config::builtin_profiles();
    for (id, extends) in extra {
        m.insert(
            id.clone(),
            Profile {
                id: id.clone(),
                extends: extends.clone(),
                description: None,
            },
        );
    }
    m
}

/// Replaces `{{name}}` placeholders in every string of `v`. A string that is exactly one
/// placeholder takes the parameter's JSON value; otherwise values are spliced in as text.
fn substitute(
    v: &mut Value,
    params: &BTreeMap<String, Value>,
    used: &mut BTreeSet<String>,
    unknown: &mut BTreeSet<String>,
) {
    match v {
        Value::String(text) => {
            let trimmed = text.trim();
            if let Some(inner) = trimmed
                .strip_prefix("{{")
                .and_then(|r| r.strip_suffix("}}"))
                .map(str::trim)
                .filter(|k| !k.contains("{{") && !k.contains("}}"))
            {
                match params.get(inner) {
                    Some(p) => {
                        used.insert(inner.to_string());
                        *v = p.clone();
                    }
                    None => {
                        unknown.insert(inner.to_string());
                    }
                }
                return;
            }
            let mut out = String::with_capacity(text.len());
            let mut rest = text.as_str();
            while let Some(open) = rest.find("{{") {
                let (before, after) = rest.split_at(open);
                out.push_str(before);
                let after = after.get(2..).unwrap_or("");
                match after.find("}}") {
                    Some(close) => {
                        let key = after.get(..close).unwrap_or("").trim();
                        match params.get(key) {
                            Some(Value::String(p)) => out.push_str(p),
                            Some(p) => out.push_str(&p.to_string()),
                            None => {
                                unknown.insert(key.to_string());
                            }
                        }
                        used.insert(key.to_string());
                        rest = after.get(close + 2..).unwrap_or("");
                    }
                    None => {
                        out.push_str("{{");
                        rest = after;
                    }
                }
            }
            out.push_str(rest);
            *text = out;
        }
        Value::Array(items) => {
            for i in items {
                substitute(i, params, used, unknown);
            }
        }
        Value::Object(map) => {
            // Keys are strings too (`write_paths: {"{{dir}}": deny}`): substituted as text.
            let old = std::mem::take(map);
            for (k, mut i) in old {
                let mut key = Value::String(k);
                substitute(&mut key, params, used, unknown);
                let key = match key {
                    Value::String(s) => s,
                    other => other.to_string(),
                };
                substitute(&mut i, params, used, unknown);
                map.insert(key, i);
            }
        }
        _ => {}
    }
}

fn param_label(params: &BTreeMap<String, Value>) -> String {
    params
        .iter()
        .map(|(k, v)| match v {
            Value::String(s) => format!("{k}={s}"),
            other => format!("{k}={other}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Expands a parameterized case into one case per parameter set (a plain case yields itself).
/// `Err` carries the name of the instance and why it could not be built.
pub fn expand_case(case: &TestCase) -> Vec<Result<TestCase, (String, String)>> {
    if case.params.is_empty() {
        return vec![Ok(case.clone())];
    }
    let mut template = case.clone();
    template.params.clear();
    let template = match serde_json::to_value(&template) {
        Ok(t) => t,
        Err(e) => return vec![Err((case.name.clone(), format!("params: {e}")))],
    };
    case.params
        .iter()
        .enumerate()
        .map(|(i, params)| {
            let mut v = template.clone();
            let (mut used, mut unknown) = (BTreeSet::new(), BTreeSet::new());
            substitute(&mut v, params, &mut used, &mut unknown);
            let label = param_label(params);
            let fallback = format!("{} [{label}]", case.name);
            if !unknown.is_empty() {
                return Err((
                    fallback,
                    format!(
                        "params[{i}]: no value for placeholder(s) {}",
                        unknown
                            .iter()
                            .map(|k| format!("{{{{{k}}}}}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
            }
            let unused: Vec<&String> = params.keys().filter(|k| !used.contains(*k)).collect();
            if !unused.is_empty() {
                return Err((
                    fallback,
                    format!("params[{i}]: {unused:?} used by no placeholder (a typo?)"),
                ));
            }
            let mut inst: TestCase = serde_json::from_value(v)
                .map_err(|e| (fallback.clone(), format!("params[{i}]: {e}")))?;
            if !case.name.contains("{{") {
                inst.name = fallback;
            }
            Ok(inst)
        })
        .collect()
}

/// The arguments of a `network_connect` case.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConnectArgs {
    host: String,
    port: u16,
    #[serde(default = "default_scheme")]
    scheme: String,
    ip_class: String,
    #[serde(default)]
    server_owned: bool,
}

fn default_scheme() -> String {
    "connect".into()
}

/// A parsed case: the action, the workspace it names, its requests, and the tool call (none for
/// a `network_connect` case, which is not a tool).
pub(crate) type ParsedCase = (
    String,
    Option<String>,
    Result<Vec<SubRequest>, codespace_policy::error::ToolError>,
    Option<ToolCall>,
);

/// The request of a `network_connect` case: `arguments: {host, port, scheme [connect],
/// ip_class, server_owned [false]}`, the process from `process:` (default: no command).
pub(crate) fn connect_case(
    case: &TestCase,
    session: &Session,
    process: Option<&ProcessFacts>,
) -> Result<ParsedCase, String> {
    let args: ConnectArgs = serde_json::from_value(case.call.arguments.clone())
        .map_err(|e| format!("network_connect arguments: {e}"))?;
    if !matches!(args.scheme.as_str(), "connect" | "http") {
        return Err("network_connect arguments: scheme must be `connect` or `http`".into());
    }
    if !matches!(
        args.ip_class.as_str(),
        "public" | "private" | "loopback" | "link_local"
    ) {
        return Err(
            "network_connect arguments: ip_class must be public, private, loopback or link_local"
                .into(),
        );
    }
    let fallback = ProcessFacts {
        id: "proc-test".into(),
        same_client: true,
        argv: Vec::new(),
        tty: false,
        env_names: Vec::new(),
        background: false,
    };
    let target = codespace_policy::request::NetTarget {
        host: args.host.to_ascii_lowercase(),
        port: args.port,
        scheme: args.scheme,
        ip_class: args.ip_class,
        server_owned: args.server_owned,
    };
    let req =
        codespace_policy::request::connect_request(session, process.unwrap_or(&fallback), &target);
    Ok(("network_connect".into(), None, Ok(vec![req]), None))
}

/// The arguments of a `hook` case.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HookArgs {
    stage: codespace_policy::request::HookStage,
    command: Vec<String>,
}

/// The requests of a `hook` case (issue 31): `arguments: {stage: before_patch | after_patch,
/// command: [argv]}`, decided as the server decides a configured hook of workspace `workspace`
/// (the `hook` request, then its command's exec sub-requests).
pub(crate) fn hook_case(
    case: &TestCase,
    session: &Session,
    workspace: &str,
) -> Result<ParsedCase, String> {
    let args: HookArgs = serde_json::from_value(case.call.arguments.clone())
        .map_err(|e| format!("hook arguments: {e}"))?;
    let reqs =
        codespace_policy::request::hook_requests(workspace, session, args.stage, &args.command);
    Ok(("hook".into(), Some(workspace.to_string()), reqs, None))
}

/// The arguments of a `read_skill` case.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SkillArgs {
    name: String,
}

/// The request of a `read_skill` case (issue 31): `arguments: {name}`, decided as the server
/// decides showing or reading operator skill `name` under workspace `workspace`.
pub(crate) fn skill_case(
    case: &TestCase,
    session: &Session,
    workspace: &str,
) -> Result<ParsedCase, String> {
    let args: SkillArgs = serde_json::from_value(case.call.arguments.clone())
        .map_err(|e| format!("read_skill arguments: {e}"))?;
    let req = codespace_policy::request::skill_request(session, &args.name);
    Ok((
        "read_skill".into(),
        Some(workspace.to_string()),
        Ok(vec![req]),
        None,
    ))
}
