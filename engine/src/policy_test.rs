//! The policy test runner core: YAML test files whose cases are tool calls (as an MCP host
//! would send them) on a virtual workspace, decided through the same request builder and
//! `decide()` the server uses.

use crate::config::{BUILTIN_PROFILES, Profile};
use crate::decide::{Decision, decide, workspace_entities};
use crate::policy::PolicySnapshot;
use crate::request::{ProcessFacts, Session, WorkspaceFacts, build_requests};
use crate::tools::ToolCall;
use serde::Deserialize;
use std::collections::BTreeMap;

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
    #[serde(default = "default_env_kind")]
    pub environment_kind: String,
    /// `enforced` / `unavailable`.
    #[serde(default = "default_enforced")]
    pub sandbox: String,
    /// `enforced` / `none`.
    #[serde(default = "default_enforced")]
    pub network_enforcement: String,
    /// `restricted` / `enabled`.
    #[serde(default = "default_network")]
    pub network: String,
    /// `off` / `confirm`.
    #[serde(default = "default_approvals")]
    pub approvals: String,
    /// Server-owned workspace-relative paths.
    #[serde(default)]
    pub server_owned: Vec<String>,
}

fn default_env_kind() -> String {
    "host".into()
}
fn default_enforced() -> String {
    "enforced".into()
}
fn default_network() -> String {
    "restricted".into()
}
fn default_approvals() -> String {
    "off".into()
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
}

fn default_transport() -> String {
    "stdio".into()
}

/// A process the case's call refers to (for the process tools).
#[derive(Debug, Clone, Deserialize)]
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
}

fn yes() -> bool {
    true
}

/// One case.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestCase {
    /// Name shown in the report.
    pub name: String,
    /// The `tools/call` params: `{name, arguments}`.
    pub call: CallSpec,
    /// Process facts for the process tools.
    #[serde(default)]
    pub process: Option<TestProcess>,
    /// Expected decision of the call (`allow` / `deny`).
    pub decision: String,
    /// Policy ids that must be among the determining ones.
    #[serde(default)]
    pub reason: Vec<String>,
    /// Expected sandbox-capability decisions (`process_write: allow`).
    #[serde(default)]
    pub capabilities: BTreeMap<String, String>,
    /// Expect evaluation errors (default: none allowed).
    #[serde(default)]
    pub errors: bool,
}

/// `{name, arguments}`.
#[derive(Debug, Clone, Deserialize)]
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
}

/// Parses a YAML test file.
pub fn parse_file(text: &str) -> Result<TestFile, String> {
    serde_yaml_ng::from_str(text).map_err(|e| e.to_string())
}

fn profiles_for(file: &TestFile) -> BTreeMap<String, Profile> {
    let mut m: BTreeMap<String, Profile> = BUILTIN_PROFILES
        .iter()
        .map(|(id, parent)| {
            (
                (*id).to_string(),
                Profile {
                    id: (*id).to_string(),
                    extends: parent.map(str::to_string),
                    description: None,
                },
            )
        })
        .collect();
    for (id, p) in &file.profiles {
        m.insert(
            id.clone(),
            Profile {
                id: id.clone(),
                extends: p.extends.clone(),
                description: None,
            },
        );
    }
    m
}

/// Runs every case of a file against a snapshot.
pub fn run_file(snap: &PolicySnapshot, file_name: &str, file: &TestFile) -> Vec<CaseResult> {
    let fx = &file.workspace;
    let facts = WorkspaceFacts {
        id: fx.id.clone(),
        profile: fx.profile.clone(),
        environment: "env".into(),
        environment_kind: fx.environment_kind.clone(),
        sandbox: fx.sandbox.clone(),
        network_enforcement: fx.network_enforcement.clone(),
        network: fx.network.clone(),
        approvals: fx.approvals.clone(),
        server_owned: fx.server_owned.clone(),
    };
    let session = file
        .session
        .as_ref()
        .map(|s| Session {
            client: s.client.clone(),
            transport: s.transport.clone(),
        })
        .unwrap_or_else(Session::stdio);
    let profiles = profiles_for(file);
    let base = workspace_entities(snap, &profiles, &facts);
    file.cases
        .iter()
        .map(|case| {
            let mut failures = Vec::new();
            let decision = match (&base, ToolCall::parse(&case.call.name, &case.call.arguments)) {
                (Err(e), _) => {
                    failures.push(format!("fixture entities: {e}"));
                    None
                }
                (_, Err(e)) => {
                    failures.push(format!("call: {e:?}"));
                    None
                }
                (Ok(base), Ok(call)) => {
                    if let Some(w) = call.workspace_id() {
                        if w != fx.id {
                            failures.push(format!(
                                "call names workspace `{w}` but the fixture is `{}`",
                                fx.id
                            ));
                        }
                    }
                    let pf = case.process.as_ref().map(|p| ProcessFacts {
                        id: "proc-test".into(),
                        same_client: p.same_client,
                        argv: p.command.clone(),
                        tty: p.tty,
                    });
                    match build_requests(&call, &session, pf.as_ref()) {
                        Ok(reqs) => Some(decide(snap, base, &facts, call.tool(), &reqs)),
                        Err(e) => {
                            // A request-builder refusal counts as a deny.
                            if case.decision != "deny" {
                                failures.push(format!("request refused: {e}"));
                            }
                            None
                        }
                    }
                }
            };
            if let Some(d) = &decision {
                check(case, d, &mut failures);
            }
            CaseResult {
                file: file_name.to_string(),
                name: case.name.clone(),
                passed: failures.is_empty(),
                failures,
                decision,
            }
        })
        .collect()
}

fn check(case: &TestCase, d: &Decision, failures: &mut Vec<String>) {
    let got = if d.allowed() { "allow" } else { "deny" };
    if got != case.decision {
        failures.push(format!("decision: expected {}, got {got}", case.decision));
    }
    let ids: Vec<&String> = d
        .subs
        .iter()
        .filter(|s| s.gating)
        .flat_map(|s| s.policy_ids.iter())
        .collect();
    for want in &case.reason {
        if !ids.iter().any(|g| *g == want) {
            failures.push(format!(
                "reason: expected {want} among the determining policies {ids:?}"
            ));
        }
    }
    let has_errors = d.subs.iter().any(|s| !s.errors.is_empty());
    if has_errors != case.errors {
        let errs: Vec<&String> = d.subs.iter().flat_map(|s| s.errors.iter()).collect();
        failures.push(format!(
            "errors: expected {}, got {errs:?}",
            if case.errors { "some" } else { "none" }
        ));
    }
    for (cap, want) in &case.capabilities {
        match d.subs.iter().find(|s| &s.action == cap) {
            Some(s) => {
                let got = if s.allowed { "allow" } else { "deny" };
                if got != want {
                    failures.push(format!("capability {cap}: expected {want}, got {got}"));
                }
            }
            None => failures.push(format!("capability {cap}: not requested by this call")),
        }
    }
}
