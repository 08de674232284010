//! The policy test runner core: YAML test files whose cases are tool calls (as an MCP host
//! would send them) on a virtual workspace, decided through the same request builder and
//! `Decider` the server uses. Cases may be parameterized (`params` + `{{name}}` placeholders);
//! results carry policy-id coverage, JSON and JUnit reports, and an export of every resolved
//! Cedar request in the upstream `cedar run-tests` format.

use cedar_policy::Decision as CedarDecision;
use codespace_policy::PolicySnapshot;
use codespace_policy::config::Profile;
use codespace_policy::decide::{Decision, workspace_entities};
use codespace_policy::explain::{build_cedar_request, entities_json, evaluate};
use codespace_policy::request::{ProcessFacts, Session, SubRequest, build_requests};
use codespace_policy::wire::{CallParseError, ToolCall};
use codespace_policy::{Decider, NoRows};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

pub use crate::cases::*;
use crate::cases::{case_approval, connect_case};

/// One resolved Cedar request in the upstream `cedar run-tests` JSON format.
pub type CedarCase = Value;

/// The outcome of one case, with what the reports and the export need.
#[derive(Debug, Clone)]
pub struct CaseOutcome {
    /// Pass/fail and the decision.
    pub result: CaseResult,
    /// Upstream `cedar run-tests` cases, one per sub-request (when asked for).
    pub cedar: Vec<CedarCase>,
}

/// Runs every case of a file against a snapshot.
pub fn run_file(snap: &PolicySnapshot, file_name: &str, file: &TestFile) -> Vec<CaseResult> {
    run_file_with(snap, file_name, file, RunOptions::default())
        .into_iter()
        .map(|o| o.result)
        .collect()
}

/// Runs every case of a file (parameterized cases expanded) against a snapshot, with the
/// built-in profiles plus the file's own.
pub fn run_file_with(
    snap: &PolicySnapshot,
    file_name: &str,
    file: &TestFile,
    opts: RunOptions,
) -> Vec<CaseOutcome> {
    run_file_in(
        snap,
        &codespace_policy::config::builtin_profiles(),
        file_name,
        file,
        opts,
    )
}

/// The profile tree a test file runs with: `base` (the config's tree, built-ins included)
/// plus the profiles the file declares. A file may add profiles but not re-parent one that
/// `base` defines.
pub fn file_profiles(
    base: &BTreeMap<String, Profile>,
    file: &TestFile,
) -> Result<BTreeMap<String, Profile>, String> {
    let mut tree = base.clone();
    for (id, p) in &file.profiles {
        if let Some(known) = base.get(id) {
            if known.extends != p.extends {
                return Err(format!(
                    "profiles.{id}: the file declares extends {:?} but the config (or the built-ins) say {:?}",
                    p.extends, known.extends
                ));
            }
            continue;
        }
        tree.insert(
            id.clone(),
            Profile {
                id: id.clone(),
                extends: p.extends.clone(),
                description: None,
            },
        );
    }
    for (id, p) in &tree {
        if let Some(parent) = &p.extends
            && !tree.contains_key(parent)
        {
            return Err(format!(
                "profiles.{id}.extends: unknown profile `{parent}`{}",
                codespace_policy::suggest::hint(parent, tree.keys().map(String::as_str))
            ));
        }
    }
    if !tree.contains_key(&file.workspace.profile) {
        return Err(format!(
            "workspace.profile: unknown profile `{}`{}; declare it under `profiles:` or in the config",
            file.workspace.profile,
            codespace_policy::suggest::hint(
                &file.workspace.profile,
                tree.keys().map(String::as_str)
            )
        ));
    }
    Ok(tree)
}

/// Runs every case of a file (parameterized cases expanded) against a snapshot, with `base` as
/// the profile tree (the config's, or the built-ins) plus the file's own profiles.
pub fn run_file_in(
    snap: &PolicySnapshot,
    base_profiles: &BTreeMap<String, Profile>,
    file_name: &str,
    file: &TestFile,
    opts: RunOptions,
) -> Vec<CaseOutcome> {
    let fx = &file.workspace;
    let facts = fx.facts();
    let session = file
        .session
        .as_ref()
        .map(|s| Session {
            client: s.client.clone(),
            transport: s.transport.clone(),
            user: s.user.clone(),
        })
        .unwrap_or_else(Session::stdio);
    let profiles = match file_profiles(base_profiles, file) {
        Ok(p) => p,
        Err(why) => {
            return vec![CaseOutcome {
                result: CaseResult {
                    file: file_name.to_string(),
                    name: "(file)".into(),
                    passed: false,
                    failures: vec![why],
                    decision: None,
                    refused: None,
                    alternatives_reached: BTreeSet::new(),
                },
                cedar: Vec::new(),
            }];
        }
    };
    let base = workspace_entities(snap, &profiles, &facts);
    // Cases are decided as the server decides them: through a decider (keeping no rows).
    let decider = Decider::over(Arc::new(snap.clone()), profiles.clone(), Arc::new(NoRows));
    let alts = if opts.alternatives {
        crate::alternatives::alternatives(snap)
    } else {
        Vec::new()
    };
    let mut out = Vec::new();
    for case in file.cases.iter().flat_map(expand_case) {
        let case = match case {
            Ok(c) => c,
            Err((name, why)) => {
                out.push(CaseOutcome {
                    result: CaseResult {
                        file: file_name.to_string(),
                        name,
                        passed: false,
                        failures: vec![why],
                        decision: None,
                        refused: None,
                        alternatives_reached: BTreeSet::new(),
                    },
                    cedar: Vec::new(),
                });
                continue;
            }
        };
        let session = case_session(&session, &case);
        let mut failures = Vec::new();
        if !matches!(case.decision.as_str(), "allow" | "deny" | "refused") {
            failures.push(format!(
                "decision: `{}` is not one of allow, deny, refused",
                case.decision
            ));
        }
        if case.code.is_some() && case.decision != "refused" {
            failures.push("code: only a `decision: refused` case names a code".into());
        }
        let mut cedar = Vec::new();
        let mut reached = BTreeSet::new();
        let pf = case.process.as_ref().map(|p| ProcessFacts {
            id: "proc-test".into(),
            same_client: p.same_client,
            argv: p.command.clone(),
            tty: p.tty,
            env_names: p.env_names.clone(),
            background: p.background,
        });
        // `network_connect` is not a tool: its case names the connection's target directly.
        let parsed = if case.call.name == "network_connect" {
            connect_case(&case, &session, pf.as_ref()).map_err(Refusal::Broken)
        } else if case.call.name == "hook" {
            // Nor is `hook`: its case names the stage and the operator's command.
            crate::cases::hook_case(&case, &session, &fx.id).map_err(Refusal::Broken)
        } else if case.call.name == "read_skill" {
            // Nor is `read_skill`: its case names the operator skill.
            crate::cases::skill_case(&case, &session, &fx.id).map_err(Refusal::Broken)
        } else {
            ToolCall::parse(&case.call.name, &case.call.arguments)
                .map(|call| {
                    let reqs = build_requests(&call, &session, pf.as_ref());
                    (
                        call.tool().to_string(),
                        call.workspace_id().map(str::to_string),
                        reqs,
                        Some(call),
                    )
                })
                .map_err(|e| match &e {
                    // The server refuses bad arguments before Cedar: a `refused` case may
                    // expect it; an unknown tool is always a mistake of the case.
                    CallParseError::InvalidArguments(_) => Refusal::Refused {
                        code: "INVALID_ARGUMENTS".into(),
                        message: call_error_text(&case.call.name, &e),
                    },
                    CallParseError::UnknownTool(_) => {
                        Refusal::Broken(call_error_text(&case.call.name, &e))
                    }
                })
        };
        let mut refused = None;
        let decision = match (&base, parsed) {
            (Err(e), _) => {
                failures.push(format!("fixture entities: {e}"));
                None
            }
            (_, Err(Refusal::Broken(e))) => {
                failures.push(format!("call: {e}"));
                None
            }
            (_, Err(Refusal::Refused { code, message })) => {
                check_refusal(&case, &code, &message, &mut failures);
                refused = Some(code);
                None
            }
            (Ok(base), Ok((tool, workspace, built, call))) => {
                if let Some(w) = workspace
                    && w != fx.id
                {
                    failures.push(format!(
                        "call names workspace `{w}` but the fixture is `{}`",
                        fx.id
                    ));
                }
                match built {
                    Ok(mut reqs) => {
                        if let Some(call) = &call {
                            case_approval(&case, call, &session, &mut reqs);
                        }
                        if let Some(links) = case.links {
                            for r in reqs.iter_mut().filter(|r| r.path != ".") {
                                r.links = links;
                            }
                        }
                        // The `confirm` requests the server asks beside an allowed patch or
                        // command (their alternatives and Cedar export count too).
                        let confirm_reqs = if matches!(
                            call,
                            Some(
                                ToolCall::ApplyPatch(_)
                                    | ToolCall::ExecCommand(_)
                                    | ToolCall::WriteFile(_)
                            )
                        ) {
                            codespace_policy::request::confirm_requests(&reqs)
                        } else {
                            Vec::new()
                        };
                        // The other candidates of a command's write scope, decided as the server
                        // decides them when the command starts.
                        if let Some(ToolCall::ExecCommand(p)) = &call
                            && !case.write_paths.is_empty()
                        {
                            match write_case_requests(p, &session, &case.write_paths) {
                                Ok(extra) => reqs.extend(extra),
                                Err(e) => failures.push(format!("write_paths: {e}")),
                            }
                        }
                        if opts.alternatives && !alts.is_empty() {
                            for (i, req) in reqs.iter().chain(&confirm_reqs).enumerate() {
                                let op_id = format!("alt/{i}");
                                if let Ok(built) =
                                    build_cedar_request(snap, base, &facts, &tool, req, &op_id)
                                {
                                    reached.extend(
                                        alts.iter().filter(|a| a.reached(&built)).map(|a| a.key()),
                                    );
                                }
                            }
                        }
                        if opts.emit_cedar {
                            for (i, req) in reqs.iter().chain(&confirm_reqs).enumerate() {
                                let op_id = format!("test/{i}");
                                match build_cedar_request(snap, base, &facts, &tool, req, &op_id) {
                                    Ok(built) => {
                                        let resp = evaluate(snap, &built);
                                        let mut reason: Vec<String> = resp
                                            .diagnostics()
                                            .reason()
                                            .map(|p| p.to_string())
                                            .collect();
                                        reason.sort();
                                        cedar.push(json!({
                                            "name": format!("{file_name} :: {} #{i} {}", case.name, req.action),
                                            "request": {
                                                "principal": built.principal.to_string(),
                                                "action": built.action.to_string(),
                                                "resource": built.resource.to_string(),
                                                "context": built.context,
                                            },
                                            "entities": entities_json(&built.entities),
                                            "decision": if resp.decision() == CedarDecision::Allow { "allow" } else { "deny" },
                                            "reason": reason,
                                            "num_errors": resp.diagnostics().errors().count(),
                                        }));
                                    }
                                    Err(e) => {
                                        failures.push(format!("cedar export of request {i}: {e}"))
                                    }
                                }
                            }
                        }
                        let mut d = decider.probe_uncached(snap, &facts, &tool, &reqs, &session);
                        // An allowed patch or command is then asked `confirm` (the server
                        // holds it when a permit matches or evaluation fails).
                        if d.allowed() && !confirm_reqs.is_empty() {
                            let c = decider.probe_uncached(
                                snap,
                                &facts,
                                &tool,
                                &confirm_reqs,
                                &session,
                            );
                            let offset = d.subs.len();
                            d.subs.extend(c.subs.into_iter().map(|s| {
                                codespace_policy::decide::SubDecision {
                                    index: s.index + offset,
                                    gating: false,
                                    ..s
                                }
                            }));
                        }
                        Some(d)
                    }
                    Err(e) => {
                        // The request builder refused the call: Cedar never saw it. That is
                        // not a `deny`; only a `refused` case passes.
                        check_refusal(&case, e.code.as_str(), &e.message, &mut failures);
                        refused = Some(e.code.as_str().to_string());
                        None
                    }
                }
            }
        };
        if let Some(d) = &decision {
            check(snap, &case, d, &mut failures);
        }
        out.push(CaseOutcome {
            result: CaseResult {
                file: file_name.to_string(),
                name: case.name.clone(),
                passed: failures.is_empty(),
                failures,
                decision,
                refused,
                alternatives_reached: reached,
            },
            cedar,
        });
    }
    out
}

/// Why a case's call never reached Cedar.
enum Refusal {
    /// The case itself is wrong (unknown tool, malformed `network_connect` target).
    Broken(String),
    /// The server would refuse the call before Cedar with this code.
    Refused {
        /// The error code (`INVALID_ARGUMENTS`, ...).
        code: String,
        /// The server's message.
        message: String,
    },
}

/// Checks a call the server refuses before Cedar against the case: only `decision: refused`
/// (with the same `code:` when one is given) passes; a `deny` case fails, so a negative case
/// cannot pass because its request was malformed.
fn check_refusal(case: &TestCase, code: &str, message: &str, failures: &mut Vec<String>) {
    if case.decision != "refused" {
        failures.push(format!(
            "decision: expected {}, but the call is refused before Cedar ({code}: {message}); \
             Cedar decided nothing. Say `decision: refused` (and `code: {code}`) if that is the intent",
            case.decision
        ));
        return;
    }
    if let Some(want) = &case.code
        && want != code
    {
        failures.push(format!("code: expected {want}, got {code}: {message}"));
    }
}

/// Which policies ever determined a decision.
#[derive(Debug, Clone)]
pub struct Coverage {
    /// Every policy id of the set.
    pub all: BTreeSet<String>,
    /// The ids that determined at least one sub-request.
    pub covered: BTreeSet<String>,
    /// Every alternative of a `||` chain in a `when`: (`policy-id#n`, its text).
    pub alternatives: Vec<(String, String)>,
    /// The alternatives some case reached.
    pub alternatives_reached: BTreeSet<String>,
    /// Policy ids by the profile their principal scope names (`principal in
    /// PermissionProfile::"p"`); policies for any principal belong to no profile.
    pub by_profile: BTreeMap<String, BTreeSet<String>>,
    /// Policy ids by each action their action scope names (`action in [..]`); policies for
    /// any action belong to no action group.
    pub by_action: BTreeMap<String, BTreeSet<String>>,
}

/// The set test files run against: `snap` with the template links the files declare (`links:`)
/// added to its own, each distinct link once, linked and validated like the config's. `None`
/// when the files add no link.
pub fn with_test_links<'a>(
    snap: &PolicySnapshot,
    files: impl IntoIterator<Item = &'a TestFile>,
) -> Result<Option<PolicySnapshot>, codespace_policy::PolicyErrors> {
    let mut links = snap.bundle.links.clone();
    for f in files {
        for l in &f.links {
            if !links.contains(l) {
                links.push(l.clone());
            }
        }
    }
    if links.len() == snap.bundle.links.len() {
        return Ok(None);
    }
    codespace_policy::compile(snap.bundle.clone().with_links(&links)).map(Some)
}

/// The profile and action groups of every policy of `snap` (see [`Coverage::by_profile`]).
pub fn scope_groups(
    snap: &PolicySnapshot,
) -> (
    BTreeMap<String, BTreeSet<String>>,
    BTreeMap<String, BTreeSet<String>>,
) {
    use cedar_policy::{ActionConstraint, PrincipalConstraint};
    let (mut profiles, mut actions) = (BTreeMap::new(), BTreeMap::new());
    for p in snap.set.policies() {
        let id = p.id().to_string();
        if !snap.meta.contains_key(&id) {
            continue;
        }
        let principal = match p.principal_constraint() {
            PrincipalConstraint::In(u)
            | PrincipalConstraint::Eq(u)
            | PrincipalConstraint::IsIn(_, u) => Some(u),
            PrincipalConstraint::Any | PrincipalConstraint::Is(_) => None,
        };
        if let Some(u) = principal
            && u.type_name().basename() == "PermissionProfile"
        {
            profiles
                .entry(u.id().unescaped().to_string())
                .or_insert_with(BTreeSet::new)
                .insert(id.clone());
        }
        let named = match p.action_constraint() {
            ActionConstraint::Any => Vec::new(),
            ActionConstraint::In(v) => v,
            ActionConstraint::Eq(u) => vec![u],
        };
        for a in named {
            actions
                .entry(a.id().unescaped().to_string())
                .or_insert_with(BTreeSet::new)
                .insert(id.clone());
        }
    }
    (profiles, actions)
}

/// Percent of `group` in `covered` (100 for an empty group).
fn group_percent(group: &BTreeSet<String>, covered: &BTreeSet<String>) -> f64 {
    if group.is_empty() {
        return 100.0;
    }
    // Counts of policies are small; the conversion is exact.
    #[allow(clippy::cast_precision_loss)]
    let pct = group.intersection(covered).count() as f64 * 100.0 / group.len() as f64;
    pct
}

impl Coverage {
    /// Coverage of `results` over the policies of `snap`.
    pub fn of(snap: &PolicySnapshot, results: &[CaseResult]) -> Coverage {
        let all: BTreeSet<String> = snap.meta.keys().cloned().collect();
        let covered = results
            .iter()
            .filter_map(|r| r.decision.as_ref())
            .flat_map(|d| d.subs.iter())
            .flat_map(|s| s.policy_ids.iter())
            .filter(|id| all.contains(*id))
            .cloned()
            .collect();
        let alternatives_reached: BTreeSet<String> = results
            .iter()
            .flat_map(|r| r.alternatives_reached.iter().cloned())
            .collect();
        let alternatives = crate::alternatives::alternatives(snap)
            .into_iter()
            .map(|a| (a.key(), a.text))
            .collect();
        let (by_profile, by_action) = scope_groups(snap);
        Coverage {
            all,
            covered,
            alternatives,
            alternatives_reached,
            by_profile,
            by_action,
        }
    }

    /// Per-group coverage: (group, percent, uncovered ids), for `by_profile` or `by_action`.
    pub fn groups<'a>(
        &'a self,
        groups: &'a BTreeMap<String, BTreeSet<String>>,
    ) -> impl Iterator<Item = (&'a str, f64, Vec<&'a String>)> + 'a {
        groups.iter().map(|(g, ids)| {
            (
                g.as_str(),
                group_percent(ids, &self.covered),
                ids.difference(&self.covered).collect(),
            )
        })
    }

    /// Alternatives no case reached: (`policy-id#n`, text).
    pub fn unreached_alternatives(&self) -> Vec<(String, String)> {
        self.alternatives
            .iter()
            .filter(|(k, _)| !self.alternatives_reached.contains(k))
            .cloned()
            .collect()
    }

    /// Ids no case exercised.
    pub fn uncovered(&self) -> Vec<String> {
        self.all.difference(&self.covered).cloned().collect()
    }

    /// Percent covered (100 for an empty set).
    pub fn percent(&self) -> f64 {
        if self.all.is_empty() {
            return 100.0;
        }
        // Counts of policies are small; the conversion is exact.
        #[allow(clippy::cast_precision_loss)]
        let pct = self.covered.len() as f64 * 100.0 / self.all.len() as f64;
        pct
    }

    /// The machine form.
    pub fn to_json(&self) -> Value {
        let groups = |g: &BTreeMap<String, BTreeSet<String>>| -> Value {
            self.groups(g)
                .map(|(name, pct, uncovered)| {
                    (
                        name.to_string(),
                        json!({
                            "policies": g.get(name).map_or(0, BTreeSet::len),
                            "percent": (pct * 10.0).round() / 10.0,
                            "uncovered_ids": uncovered,
                        }),
                    )
                })
                .collect::<serde_json::Map<String, Value>>()
                .into()
        };
        json!({
            "by_profile": groups(&self.by_profile),
            "by_action": groups(&self.by_action),
            "policies": self.all.len(),
            "covered": self.covered.len(),
            "percent": (self.percent() * 10.0).round() / 10.0,
            "covered_ids": self.covered,
            "uncovered_ids": self.uncovered(),
            "alternatives": self.alternatives.len(),
            "alternatives_reached": self.alternatives.len() - self.unreached_alternatives().len(),
            "unreached_alternatives": self.unreached_alternatives().iter().map(|(k, t)| json!({
                "alternative": k,
                "condition": t,
            })).collect::<Vec<_>>(),
        })
    }
}

/// Run-wide requirements of a test run beyond its cases.
#[derive(Debug, Clone, Copy, Default)]
pub struct Gates {
    /// Fail when fewer than this percent of the policies determined a decision.
    pub coverage_min: Option<f64>,
    /// Fail when no case ran.
    pub fail_on_empty: bool,
    /// Fail when the policies of some profile (principal scope) are covered below this percent.
    pub coverage_min_profile: Option<f64>,
    /// Fail when the policies naming some action (action scope) are covered below this percent.
    pub coverage_min_action: Option<f64>,
}

/// The verdict of one gate.
#[derive(Debug, Clone)]
pub struct GateResult {
    /// Its name (the JUnit test case name).
    pub name: String,
    /// Met?
    pub passed: bool,
    /// What was measured.
    pub message: String,
}

impl Gates {
    /// Checks every configured gate.
    pub fn evaluate(&self, results: &[CaseResult], coverage: &Coverage) -> Vec<GateResult> {
        let mut out = Vec::new();
        if self.fail_on_empty {
            out.push(GateResult {
                name: "at least one case ran (--fail-on-empty)".into(),
                passed: !results.is_empty(),
                message: if results.is_empty() {
                    "no test case ran (--fail-on-empty)".into()
                } else {
                    format!("{} case(s) ran", results.len())
                },
            });
        }
        if let Some(min) = self.coverage_min {
            let pct = coverage.percent();
            let passed = pct + 1e-9 >= min;
            out.push(GateResult {
                name: format!("policy coverage >= {min}% (--coverage-min)"),
                passed,
                message: if passed {
                    format!("policy coverage {pct:.1}% meets --coverage-min {min}")
                } else {
                    format!(
                        "policy coverage {pct:.1}% is below --coverage-min {min}; uncovered: {}",
                        coverage.uncovered().join(", ")
                    )
                },
            });
        }
        for (kind, flag, min, groups) in [
            (
                "profile",
                "--coverage-min-profile",
                self.coverage_min_profile,
                &coverage.by_profile,
            ),
            (
                "action",
                "--coverage-min-action",
                self.coverage_min_action,
                &coverage.by_action,
            ),
        ] {
            let Some(min) = min else { continue };
            let below: Vec<String> = coverage
                .groups(groups)
                .filter(|(_, pct, _)| *pct + 1e-9 < min)
                .map(|(g, pct, unc)| {
                    format!(
                        "{kind} {g} {pct:.1}% (uncovered: {})",
                        unc.iter()
                            .map(|s| s.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                })
                .collect();
            out.push(GateResult {
                name: format!("policy coverage of every {kind} >= {min}% ({flag})"),
                passed: below.is_empty(),
                message: if below.is_empty() {
                    format!("each of {} {kind}(s) meets {flag} {min}", groups.len())
                } else {
                    format!("below {flag} {min}: {}", below.join("; "))
                },
            });
        }
        out
    }
}

/// The JSON report: every case, the coverage (with `threshold` and `threshold_met`), the
/// gates and the totals.
pub fn report_json(results: &[CaseResult], coverage: &Coverage, gates: &Gates) -> Value {
    let passed = results.iter().filter(|r| r.passed).count();
    let verdicts = gates.evaluate(results, coverage);
    let mut cov = coverage.to_json();
    if let Value::Object(m) = &mut cov {
        m.insert("threshold".into(), json!(gates.coverage_min));
        m.insert(
            "threshold_met".into(),
            json!(
                gates
                    .coverage_min
                    .is_none_or(|min| coverage.percent() + 1e-9 >= min)
            ),
        );
    }
    json!({
        "gates": verdicts.iter().map(|g| json!({
            "name": g.name,
            "passed": g.passed,
            "message": g.message,
        })).collect::<Vec<_>>(),
        "gates_passed": verdicts.iter().all(|g| g.passed),
        "cases": results.iter().map(|r| json!({
            "file": r.file,
            "name": r.name,
            "passed": r.passed,
            "failures": r.failures,
            "decision": r.outcome(),
            "refused_code": r.refused,
            "determining_policies": r.decision.as_ref().map(|d| d.subs.iter()
                .flat_map(|s| s.policy_ids.iter().cloned()).collect::<BTreeSet<_>>()),
        })).collect::<Vec<_>>(),
        "coverage": cov,
        "passed": passed,
        "failed": results.len() - passed,
    })
}

/// Why the call got the decision it got: the denial text (determining policies and their
/// reasons, or the default deny), or the permits that allowed it.
pub fn decision_summary(snap: &PolicySnapshot, d: &Decision) -> String {
    if d.allowed() {
        let ids: BTreeSet<&String> = d
            .subs
            .iter()
            .filter(|s| s.gating)
            .flat_map(|s| s.policy_ids.iter())
            .collect();
        format!(
            "allowed by {}",
            ids.into_iter().cloned().collect::<Vec<_>>().join(", ")
        )
    } else {
        d.to_error(snap).message
    }
}

fn policy_with_reason(snap: &PolicySnapshot, id: &str) -> String {
    match snap.meta.get(id).and_then(|m| m.reason.as_deref()) {
        Some(r) => format!("{id} ({r})"),
        None => id.to_string(),
    }
}

fn check(snap: &PolicySnapshot, case: &TestCase, d: &Decision, failures: &mut Vec<String>) {
    let got = if d.allowed() { "allow" } else { "deny" };
    if case.decision == "refused" {
        failures.push(format!(
            "decision: expected refused before Cedar, but the call reached Cedar and got {got}: {}",
            decision_summary(snap, d)
        ));
    } else if got != case.decision {
        failures.push(format!(
            "decision: expected {}, got {got}: {}",
            case.decision,
            decision_summary(snap, d)
        ));
    }
    let ids: Vec<&String> = d
        .subs
        .iter()
        .filter(|s| s.gating)
        .flat_map(|s| s.policy_ids.iter())
        .collect();
    for want in &case.reason {
        if !ids.contains(&want) {
            let shown: Vec<String> = ids.iter().map(|i| policy_with_reason(snap, i)).collect();
            failures.push(format!(
                "reason: expected {want} among the determining policies, got [{}]{}",
                shown.join(", "),
                if shown.is_empty() {
                    " (default deny: no policy permits it)"
                } else {
                    ""
                }
            ));
        }
    }
    if let Some(want) = &case.confirm {
        let confirm: Vec<_> = d.subs.iter().filter(|s| s.action == "confirm").collect();
        let held = confirm.iter().any(|s| s.allowed || !s.errors.is_empty());
        let got = if held { "hold" } else { "run" };
        if confirm.is_empty() {
            failures.push(
                "confirm: not asked (the call is not an allowed apply_patch, write_file or exec_command)"
                    .into(),
            );
        } else if got != want {
            let ids: Vec<String> = confirm
                .iter()
                .flat_map(|s| s.policy_ids.iter())
                .map(|i| policy_with_reason(snap, i))
                .collect();
            failures.push(format!(
                "confirm: expected {want}, got {got} (permits on confirm that matched: [{}])",
                ids.join(", ")
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
        let found = d.subs.iter().find(|s| s.action.as_str() == cap.as_str());
        expect_sub(snap, found, want, &format!("capability {cap}"), failures);
    }
    for (path, want) in &case.write_paths {
        let norm = codespace_runner_fs::RelPath::parse(path)
            .map(|p| p.as_str().to_string())
            .unwrap_or_else(|_| path.clone());
        let subject = format!("write {norm}");
        let found = d
            .subs
            .iter()
            .find(|s| s.action == "process_write" && s.subject == subject);
        expect_sub(
            snap,
            found,
            want,
            &format!("write_paths `{path}`"),
            failures,
        );
    }
}

/// Checks one non-gating sub-decision (a capability, a write-scope candidate) against `want`
/// (`allow` / `deny`), naming what determined it when it differs.
fn expect_sub(
    snap: &PolicySnapshot,
    found: Option<&codespace_policy::decide::SubDecision>,
    want: &str,
    what: &str,
    failures: &mut Vec<String>,
) {
    let Some(s) = found else {
        failures.push(format!("{what}: not requested by this call"));
        return;
    };
    let got = if s.allowed { "allow" } else { "deny" };
    if got == want {
        return;
    }
    let why = if s.policy_ids.is_empty() {
        "no policy permits it (default deny)".to_string()
    } else {
        format!(
            "determined by {}",
            s.policy_ids
                .iter()
                .map(|i| policy_with_reason(snap, i))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    failures.push(format!("{what}: expected {want}, got {got}: {why}"));
}

/// The `process_write` requests of a case's `write_paths` (each path normalized).
fn write_case_requests(
    p: &codespace_policy::wire::ExecCommandParams,
    session: &Session,
    paths: &BTreeMap<String, String>,
) -> Result<Vec<SubRequest>, String> {
    let exec = codespace_policy::request::exec_facts(p, session).map_err(|e| e.message)?;
    let candidates = paths
        .keys()
        .map(|k| codespace_runner_fs::RelPath::parse(k).map_err(|e| format!("`{k}`: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(codespace_policy::request::write_scope_requests(
        &exec,
        &candidates,
    ))
}

/// A `tools/call` that cannot be parsed, in the contract's terms: an unknown tool is
/// `tool not found` (with the closest tool name), bad arguments are `INVALID_ARGUMENTS`.
pub fn call_error_text(name: &str, e: &CallParseError) -> String {
    match e {
        CallParseError::UnknownTool(t) => format!(
            "tool not found: `{t}`{}",
            codespace_policy::suggest::hint(t, codespace_policy::tool_table::tool_names())
        ),
        CallParseError::InvalidArguments(m) => {
            format!("INVALID_ARGUMENTS: invalid arguments for {name}: {m}")
        }
    }
}

/// The file's caller with the case's `user`, when it names one.
fn case_session(file: &Session, case: &TestCase) -> Session {
    match &case.user {
        None => file.clone(),
        Some(u) => Session {
            user: Some(u.clone()),
            ..file.clone()
        },
    }
}

/// Every sub-request of every case of a test file (parameterized cases expanded), as recorded
/// requests, named `<file> :: <case>`: what `policy diff --tests` re-decides under two sets.
/// Cases whose call cannot be built are left out (`policy test` reports them).
pub fn case_records(
    base_profiles: &BTreeMap<String, Profile>,
    file_name: &str,
    file: &TestFile,
) -> Result<Vec<(String, codespace_policy::recorded::RecordedRequest)>, String> {
    let profiles = file_profiles(base_profiles, file)?;
    let facts = file.workspace.facts();
    let session = file
        .session
        .as_ref()
        .map(|s| Session {
            client: s.client.clone(),
            transport: s.transport.clone(),
            user: s.user.clone(),
        })
        .unwrap_or_else(Session::stdio);
    let mut out = Vec::new();
    for case in file.cases.iter().flat_map(expand_case).flatten() {
        let Ok(call) = ToolCall::parse(&case.call.name, &case.call.arguments) else {
            continue;
        };
        let pf = case.process.as_ref().map(|p| ProcessFacts {
            id: "proc-test".into(),
            same_client: p.same_client,
            argv: p.command.clone(),
            tty: p.tty,
            env_names: p.env_names.clone(),
            background: p.background,
        });
        let session = case_session(&session, &case);
        let Ok(mut reqs) = build_requests(&call, &session, pf.as_ref()) else {
            continue;
        };
        case_approval(&case, &call, &session, &mut reqs);
        // The `confirm` requests the server asks beside an allowed patch or command.
        if matches!(
            call,
            ToolCall::ApplyPatch(_) | ToolCall::ExecCommand(_) | ToolCall::WriteFile(_)
        ) {
            let confirm = codespace_policy::request::confirm_requests(&reqs);
            reqs.extend(confirm);
        }
        for req in &reqs {
            out.push((
                format!("{file_name} :: {}", case.name),
                codespace_policy::recorded::RecordedRequest::new(
                    &profiles,
                    &facts,
                    call.tool(),
                    req,
                ),
            ));
        }
    }
    Ok(out)
}
