//! Explaining a decision: the Cedar requests a tool call builds (principal, action, resource
//! with its attributes, context), the entities, the decision and, for every policy of the set,
//! whether its scope matched and whether its condition held. Built from the same request
//! builder and `decide()` the server uses; nothing here touches the store or the disk.

use crate::PolicySnapshot;
use crate::config::Profile;
use crate::decide::{Decision, decide, operation_entity, uid, user_entities, workspace_entities};
use crate::request::{ProcessFacts, Session, SubRequest, WorkspaceFacts, build_requests};
use crate::wire::ToolCall;
use cedar_policy::{
    Authorizer, Context, Decision as CedarDecision, Entities, EntityUid, Policy, PolicySet,
    Request, Response,
};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// One Cedar request as the engine builds it, ready to evaluate or to export.
#[derive(Debug, Clone)]
pub struct BuiltRequest {
    /// `CodeSpace::PermissionProfile::"…"`.
    pub principal: EntityUid,
    /// `CodeSpace::Action::"…"`.
    pub action: EntityUid,
    /// `CodeSpace::Operation::"…"`.
    pub resource: EntityUid,
    /// The context as JSON.
    pub context: Value,
    /// The schema-checked request.
    pub request: Request,
    /// The workspace's entities plus this request's Operation entity.
    pub entities: Entities,
}

/// Builds one sub-request the way `decide()` does (schema-checked context and request; the
/// Operation entity added to the workspace's entities).
pub fn build_cedar_request(
    snap: &PolicySnapshot,
    base: &Entities,
    facts: &WorkspaceFacts,
    tool: &str,
    req: &SubRequest,
    op_id: &str,
) -> Result<BuiltRequest, String> {
    let principal =
        uid("PermissionProfile", &facts.profile).map_err(|e| format!("principal: {e}"))?;
    let action = uid("Action", req.action.as_str()).map_err(|e| format!("action: {e}"))?;
    let resource = uid("Operation", op_id).map_err(|e| format!("resource: {e}"))?;
    let op = operation_entity(facts, tool, req, op_id).map_err(|e| format!("entities: {e}"))?;
    let (cedar_ctx, user) = crate::user::split_context(&req.context)?;
    let mut added = vec![op];
    if let Some(u) = &user {
        added.extend(user_entities(u).map_err(|e| format!("entities: {e}"))?);
    }
    let entities = base
        .clone()
        .add_entities(added, None)
        .map_err(|e| format!("entities: {e}"))?;
    let ctx = Context::from_json_value(cedar_ctx.clone(), Some((&snap.schema, &action)))
        .map_err(|e| format!("context: {e}"))?;
    let request = Request::new(
        principal.clone(),
        action.clone(),
        resource.clone(),
        ctx,
        Some(&snap.schema),
    )
    .map_err(|e| format!("request: {e}"))?;
    Ok(BuiltRequest {
        principal,
        action,
        resource,
        context: cedar_ctx,
        request,
        entities,
    })
}

/// Evaluates a built request against the whole set.
// Policy tooling (explain, the test suite): it reports, never enforces.
#[allow(clippy::disallowed_methods)]
pub fn evaluate(snap: &PolicySnapshot, built: &BuiltRequest) -> Response {
    Authorizer::new().is_authorized(&built.request, &snap.set, &built.entities)
}

/// The JSON of some entities, without the action entities (those come from the schema).
pub fn entities_json(entities: &Entities) -> Value {
    match entities.to_json_value() {
        Ok(Value::Array(items)) => Value::Array(
            items
                .into_iter()
                .filter(|e| {
                    e.pointer("/uid/type")
                        .and_then(Value::as_str)
                        .is_none_or(|t| !t.ends_with("::Action") && t != "Action")
                })
                .collect(),
        ),
        Ok(other) => other,
        Err(e) => json!({ "error": e.to_string() }),
    }
}

/// True / false / evaluation error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tri {
    /// Held.
    True,
    /// Did not hold.
    False,
    /// Evaluating it failed (Cedar skips such a policy; the engine then denies).
    Error(String),
}

impl Tri {
    fn as_str(&self) -> &str {
        match self {
            Tri::True => "true",
            Tri::False => "false",
            Tri::Error(_) => "error",
        }
    }

    /// True only when it held (an error is not a match).
    fn held(&self) -> bool {
        *self == Tri::True
    }

    fn error(&self) -> Option<&str> {
        match self {
            Tri::Error(e) => Some(e),
            _ => None,
        }
    }
}

/// How one policy fared on one request.
#[derive(Debug, Clone)]
pub struct PolicyEval {
    /// Its `@id`.
    pub id: String,
    /// `permit` or `forbid`.
    pub effect: &'static str,
    /// File and line it comes from.
    pub location: String,
    /// Did principal, action and resource scope match (conditions removed)?
    pub scope: Tri,
    /// Did the whole policy hold (scope and conditions)? `None` when the scope did not match.
    pub condition: Option<Tri>,
    /// Is it among the determining policies of the request?
    pub determining: bool,
    /// The forbid's `@reason`.
    pub reason: Option<String>,
    /// When the scope matched and the condition did not hold: each conjunct of its conditions
    /// evaluated alone (with the scope), in order.
    pub conjuncts: Vec<Conjunct>,
}

/// One conjunct of a policy's conditions, evaluated as a policy of its own (the scope and this
/// one clause): a top-level `&&` operand of a `when` body, or a top-level `||` operand of an
/// `unless` body (`unless { a || b }` fails when either holds).
#[derive(Debug, Clone)]
pub struct Conjunct {
    /// `when` or `unless`.
    pub clause: &'static str,
    /// The conjunct as Cedar text.
    pub text: String,
    /// Whether it let the policy hold: `True` for a `when` conjunct that held or an `unless`
    /// one that did not; an error (an attribute a preceding conjunct guarded, for one) fails.
    pub passed: Tri,
}

/// The top-level operands of `op` (`&&` or `||`) in an EST expression, left to right.
fn operands(expr: &Value, op: &str, out: &mut Vec<Value>) {
    match expr.get(op) {
        Some(pair) => {
            for side in ["left", "right"] {
                if let Some(e) = pair.get(side) {
                    operands(e, op, out);
                }
            }
        }
        None => out.push(expr.clone()),
    }
}

/// The body of the first `when`/`unless` clause of a policy's Cedar text, on one line.
fn clause_text(policy: &Policy, clause: &str) -> String {
    let text = policy.to_string();
    let body = text
        .find(&format!("{clause} {{"))
        .and_then(|i| text.get(i + clause.len() + 2..))
        .and_then(|rest| rest.rfind('}').and_then(|j| rest.get(..j)))
        .unwrap_or("");
    body.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Each conjunct of `est`'s conditions evaluated alone with its scope (see [`Conjunct`]).
fn conjuncts(policy: &Policy, built: &BuiltRequest) -> Vec<Conjunct> {
    let Ok(est) = policy.to_json() else {
        return Vec::new();
    };
    let conditions = est
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut out = Vec::new();
    for c in &conditions {
        let (clause, op) = match c.get("kind").and_then(Value::as_str) {
            Some("when") => ("when", "&&"),
            Some("unless") => ("unless", "||"),
            _ => continue,
        };
        let mut parts = Vec::new();
        if let Some(body) = c.get("body") {
            operands(body, op, &mut parts);
        }
        for part in parts {
            let mut one = est.clone();
            if let Value::Object(m) = &mut one {
                m.insert("annotations".into(), json!({}));
                m.insert(
                    "conditions".into(),
                    json!([{ "kind": clause, "body": part }]),
                );
            }
            let (text, passed) = match Policy::from_json(Some(policy.id().clone()), one) {
                Ok(p) => (clause_text(&p, clause), eval_alone(p, built)),
                Err(e) => (part.to_string(), Tri::Error(format!("conjunct copy: {e}"))),
            };
            out.push(Conjunct {
                clause,
                text,
                passed,
            });
        }
    }
    out
}

fn eval_alone(policy: Policy, built: &BuiltRequest) -> Tri {
    let id = policy.id().clone();
    let set = match PolicySet::from_policies([policy]) {
        Ok(s) => s,
        Err(e) => return Tri::Error(e.to_string()),
    };
    // Explain evaluates one policy alone to report it; nothing is enforced from it.
    #[allow(clippy::disallowed_methods)]
    let resp = Authorizer::new().is_authorized(&built.request, &set, &built.entities);
    let errors: Vec<String> = resp.diagnostics().errors().map(|e| e.to_string()).collect();
    if !errors.is_empty() {
        return Tri::Error(errors.join("; "));
    }
    if resp.diagnostics().reason().any(|r| *r == id) {
        Tri::True
    } else {
        Tri::False
    }
}

/// The per-policy table of one request: each policy evaluated alone, once with its conditions
/// removed (scope) and once whole (condition).
pub fn policy_table(
    snap: &PolicySnapshot,
    built: &BuiltRequest,
    determining: &[String],
) -> Vec<PolicyEval> {
    let mut rows = Vec::new();
    for (id, meta) in &snap.meta {
        let Some(policy) = snap.set.policy(&cedar_policy::PolicyId::new(id)) else {
            continue;
        };
        // A template-linked policy is evaluated alone as the static policy it is (its template
        // with the slots filled): Cedar evaluates a lone linked policy only beside its template.
        let linked;
        let policy = if policy.is_static() {
            policy
        } else {
            match policy.to_json().map_err(|e| e.to_string()).and_then(|est| {
                Policy::from_json(Some(policy.id().clone()), est).map_err(|e| e.to_string())
            }) {
                Ok(p) => {
                    linked = p;
                    &linked
                }
                Err(e) => {
                    tracing::warn!(policy = %id, error = %e, "explain: cannot copy a linked policy");
                    policy
                }
            }
        };
        let scope = match policy.to_json() {
            Ok(mut est) => {
                if let Value::Object(m) = &mut est {
                    m.insert("conditions".into(), json!([]));
                }
                match Policy::from_json(Some(policy.id().clone()), est) {
                    Ok(bare) => eval_alone(bare, built),
                    Err(e) => Tri::Error(format!("scope copy: {e}")),
                }
            }
            Err(e) => Tri::Error(format!("scope copy: {e}")),
        };
        let condition = match scope {
            Tri::True => Some(eval_alone(policy.clone(), built)),
            _ => None,
        };
        let conjuncts = match &condition {
            Some(c) if !c.held() => conjuncts(policy, built),
            _ => Vec::new(),
        };
        rows.push(PolicyEval {
            id: id.clone(),
            effect: if meta.forbid { "forbid" } else { "permit" },
            location: format!("{}:{}", meta.file, meta.line),
            scope,
            condition,
            determining: determining.contains(id),
            reason: meta.reason.clone(),
            conjuncts,
        });
    }
    rows
}

/// One explained sub-request.
#[derive(Debug, Clone)]
pub struct ExplainedRequest {
    /// Index within the call.
    pub index: usize,
    /// Action id.
    pub action: String,
    /// Path or command summary.
    pub subject: String,
    /// False for sandbox-shaping requests.
    pub gating: bool,
    /// Principal, action and resource uids, displayed.
    pub principal: String,
    /// Action uid, displayed.
    pub action_uid: String,
    /// Resource uid, displayed.
    pub resource: String,
    /// The Operation entity's attributes.
    pub resource_attrs: Value,
    /// The context.
    pub context: Value,
    /// Cedar's own answer (`allow` / `deny`), before the engine's deny-on-error rule.
    pub cedar_decision: String,
    /// The engine's answer (deny on any error).
    pub allowed: bool,
    /// Determining policy ids.
    pub determining: Vec<String>,
    /// Evaluation or build errors.
    pub errors: Vec<String>,
    /// The per-policy table (empty when the request could not be built).
    pub policies: Vec<PolicyEval>,
}

/// Everything `codespace policy explain` shows.
#[derive(Debug, Clone)]
pub struct Explanation {
    /// The tool.
    pub tool: String,
    /// Workspace id.
    pub workspace: String,
    /// Its profile.
    pub profile: String,
    /// The policy set hash.
    pub policy_sha256: String,
    /// The engine's decision (as the server would make it).
    pub decision: Option<Decision>,
    /// Why the request builder refused the call, when it did (a refusal is a deny).
    pub builder_error: Option<String>,
    /// The denial message the caller would get.
    pub denial: Option<String>,
    /// The workspace's entities (without actions).
    pub entities: Value,
    /// Per sub-request detail.
    pub requests: Vec<ExplainedRequest>,
}

impl ExplainedRequest {
    /// For a default deny (no determining policy, not allowed): the permit whose scope matched
    /// with the fewest failing conjuncts (the first by id on a tie), and those conjuncts.
    pub fn nearest_miss(&self) -> Option<(&PolicyEval, Vec<&Conjunct>)> {
        if self.allowed || !self.determining.is_empty() {
            return None;
        }
        self.policies
            .iter()
            .filter(|p| p.effect == "permit" && p.scope.held() && !p.conjuncts.is_empty())
            .map(|p| (p, failing(p)))
            .min_by_key(|(_, f)| f.len())
    }
}

/// The conjuncts of `p` that kept it from holding.
fn failing(p: &PolicyEval) -> Vec<&Conjunct> {
    p.conjuncts.iter().filter(|c| !c.passed.held()).collect()
}

impl Explanation {
    /// Would the call be allowed?
    pub fn allowed(&self) -> bool {
        self.builder_error.is_none() && self.decision.as_ref().is_some_and(Decision::allowed)
    }
}

fn uid_attrs(built: &BuiltRequest) -> Value {
    built
        .entities
        .get(&built.resource)
        .and_then(|e| e.to_json_value().ok())
        .and_then(|v| v.get("attrs").cloned())
        .unwrap_or(Value::Null)
}

/// Explains a call on a workspace described by `facts`, with `profiles` as the profile tree.
pub fn explain_call(
    snap: &PolicySnapshot,
    profiles: &BTreeMap<String, Profile>,
    facts: &WorkspaceFacts,
    session: &Session,
    call: &ToolCall,
    process: Option<&ProcessFacts>,
) -> Explanation {
    let (mut out, base) = match explanation_start(snap, profiles, facts, call.tool()) {
        Ok(started) => started,
        Err(out) => return out,
    };
    let reqs = match build_requests(call, session, process) {
        Ok(r) => r,
        Err(e) => {
            out.builder_error = Some(format!("{}: {}", e.code.as_str(), e.message));
            return out;
        }
    };
    explain_built(snap, &base, facts, call.tool(), &reqs, out)
}

/// Explains already-built sub-requests (a recorded request being re-decided, for one) on a
/// workspace described by `facts`, with `profiles` as the profile tree.
pub fn explain_requests(
    snap: &PolicySnapshot,
    profiles: &BTreeMap<String, Profile>,
    facts: &WorkspaceFacts,
    tool: &str,
    reqs: &[SubRequest],
) -> Explanation {
    match explanation_start(snap, profiles, facts, tool) {
        Ok((out, base)) => explain_built(snap, &base, facts, tool, reqs, out),
        Err(out) => out,
    }
}

/// An explanation of `tool` on the workspace of `facts` before any request, with the
/// workspace's entities; `Err` is the finished explanation when the entities cannot be built.
fn explanation_start(
    snap: &PolicySnapshot,
    profiles: &BTreeMap<String, Profile>,
    facts: &WorkspaceFacts,
    tool: &str,
) -> Result<(Explanation, Entities), Explanation> {
    let mut out = Explanation {
        tool: tool.to_string(),
        workspace: facts.id.clone(),
        profile: facts.profile.clone(),
        policy_sha256: snap.sha256.clone(),
        decision: None,
        builder_error: None,
        denial: None,
        entities: Value::Null,
        requests: Vec::new(),
    };
    match workspace_entities(snap, profiles, facts) {
        Ok(base) => {
            out.entities = entities_json(&base);
            Ok((out, base))
        }
        Err(e) => {
            out.builder_error = Some(format!("entities: {e}"));
            Err(out)
        }
    }
}

fn explain_built(
    snap: &PolicySnapshot,
    base: &Entities,
    facts: &WorkspaceFacts,
    tool: &str,
    reqs: &[SubRequest],
    mut out: Explanation,
) -> Explanation {
    let decision = decide(snap, base, facts, tool, reqs);
    if !decision.allowed() {
        out.denial = Some(decision.to_error(snap).message);
    }
    for (index, req) in reqs.iter().enumerate() {
        let sub = decision.subs.get(index);
        let op_id = format!("explain/{index}");
        let mut row = ExplainedRequest {
            index,
            action: req.action.to_string(),
            subject: req.subject.clone(),
            gating: req.gating,
            principal: String::new(),
            action_uid: String::new(),
            resource: String::new(),
            resource_attrs: Value::Null,
            context: req.context.clone(),
            cedar_decision: "deny".into(),
            allowed: sub.is_some_and(|s| s.allowed),
            determining: sub.map(|s| s.policy_ids.clone()).unwrap_or_default(),
            errors: sub.map(|s| s.errors.clone()).unwrap_or_default(),
            policies: Vec::new(),
        };
        match build_cedar_request(snap, base, facts, tool, req, &op_id) {
            Ok(built) => {
                let resp = evaluate(snap, &built);
                row.cedar_decision = match resp.decision() {
                    CedarDecision::Allow => "allow",
                    CedarDecision::Deny => "deny",
                }
                .into();
                row.principal = built.principal.to_string();
                row.action_uid = built.action.to_string();
                row.resource = built.resource.to_string();
                row.resource_attrs = uid_attrs(&built);
                row.policies = policy_table(snap, &built, &row.determining);
            }
            Err(e) => {
                if !row.errors.contains(&e) {
                    row.errors.push(e);
                }
            }
        }
        out.requests.push(row);
    }
    out.decision = Some(decision);
    out
}

/// The machine form of an explanation.
pub fn to_json(x: &Explanation) -> Value {
    let requests: Vec<Value> = x
        .requests
        .iter()
        .map(|r| {
            json!({
                "index": r.index,
                "action": r.action,
                "subject": r.subject,
                "gating": r.gating,
                "principal": r.principal,
                "action_uid": r.action_uid,
                "resource": r.resource,
                "resource_attributes": r.resource_attrs,
                "context": r.context,
                "cedar_decision": r.cedar_decision,
                "decision": if r.allowed { "allow" } else { "deny" },
                "determining_policies": r.determining,
                "errors": r.errors,
                "policies": r.policies.iter().map(|p| json!({
                    "id": p.id,
                    "effect": p.effect,
                    "location": p.location,
                    "scope_matched": p.scope.held(),
                    "scope_error": p.scope.error(),
                    "condition": p.condition.as_ref().map(Tri::held),
                    "condition_error": p.condition.as_ref().and_then(Tri::error),
                    "determining": p.determining,
                    "reason": p.reason,
                    "failing_conjuncts": failing(p).iter().map(|c| json!({
                        "clause": c.clause,
                        "text": c.text,
                        "error": c.passed.error(),
                    })).collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
                "nearest_miss": r.nearest_miss().map(|(p, f)| json!({
                    "policy": p.id,
                    "location": p.location,
                    "failing": f.iter().map(|c| format!("{} {{ {} }}", c.clause, c.text)).collect::<Vec<_>>(),
                })),
            })
        })
        .collect();
    json!({
        "tool": x.tool,
        "workspace": x.workspace,
        "profile": x.profile,
        "policy_set_sha256": x.policy_sha256,
        "decision": if x.allowed() { "allow" } else { "deny" },
        "decision_id": x.decision.as_ref().map(|d| d.decision_id.clone()),
        "builder_error": x.builder_error,
        "denial": x.denial,
        "entities": x.entities,
        "requests": requests,
    })
}

/// The human form of an explanation.
pub fn render_text(x: &Explanation) -> String {
    let mut s = String::new();
    let verdict = if x.allowed() { "ALLOW" } else { "DENY" };
    s.push_str(&format!(
        "{verdict}  {} on workspace `{}` (profile {})\npolicy set {}\n",
        x.tool, x.workspace, x.profile, x.policy_sha256
    ));
    if let Some(e) = &x.builder_error {
        s.push_str(&format!("refused by the request builder: {e}\n"));
    }
    if let Some(d) = &x.denial {
        s.push_str(&format!("{d}\n"));
    }
    for r in &x.requests {
        s.push_str(&format!(
            "\n── request {}: {} `{}`{}\n",
            r.index,
            r.action,
            r.subject,
            if r.gating {
                ""
            } else {
                " (sandbox capability: a deny narrows the sandbox)"
            }
        ));
        s.push_str(&format!("  principal  {}\n", r.principal));
        s.push_str(&format!("  action     {}\n", r.action_uid));
        s.push_str(&format!("  resource   {}\n", r.resource));
        s.push_str(&format!("  attributes {}\n", r.resource_attrs));
        s.push_str(&format!("  context    {}\n", r.context));
        s.push_str(&format!(
            "  decision   {} (cedar: {})\n",
            if r.allowed { "allow" } else { "deny" },
            r.cedar_decision
        ));
        s.push_str(&format!(
            "  determining {}\n",
            if r.determining.is_empty() {
                "(none: default deny)".to_string()
            } else {
                r.determining.join(", ")
            }
        ));
        for e in &r.errors {
            s.push_str(&format!("  error      {e}\n"));
        }
        if !r.policies.is_empty() {
            let w = r
                .policies
                .iter()
                .map(|p| p.id.len())
                .max()
                .unwrap_or(2)
                .max(6);
            s.push_str(&format!(
                "  {:<w$}  {:<6}  {:<5}  {:<9}  {}\n",
                "policy", "effect", "scope", "condition", "location / reason"
            ));
            for p in &r.policies {
                let cond = p.condition.as_ref().map(Tri::as_str).unwrap_or("-");
                let mark = if p.determining { "*" } else { " " };
                let mut tail = p.location.clone();
                if let Some(reason) = &p.reason
                    && p.condition == Some(Tri::True)
                {
                    tail = format!("{tail}  reason: {reason}");
                }
                for t in [&p.scope, p.condition.as_ref().unwrap_or(&Tri::False)] {
                    if let Tri::Error(e) = t {
                        tail = format!("{tail}  error: {e}");
                    }
                }
                s.push_str(&format!(
                    "{mark} {:<w$}  {:<6}  {:<5}  {:<9}  {tail}\n",
                    p.id,
                    p.effect,
                    p.scope.as_str(),
                    cond
                ));
                if p.effect == "permit" && !r.allowed {
                    for c in failing(p) {
                        s.push_str(&format!(
                            "  {:<w$}    failed: {} {{ {} }}{}\n",
                            "",
                            c.clause,
                            c.text,
                            c.passed
                                .error()
                                .map(|e| format!("  (error: {e})"))
                                .unwrap_or_default()
                        ));
                    }
                }
            }
        }
        if let Some((p, f)) = r.nearest_miss() {
            s.push_str(&format!(
                "  nearest miss: {} ({}), {} failing conjunct(s): {}\n",
                p.id,
                p.location,
                f.len(),
                f.iter()
                    .map(|c| format!("{} {{ {} }}", c.clause, c.text))
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
        }
    }
    s.push_str("\nentities (actions omitted): ");
    s.push_str(&x.entities.to_string());
    s.push('\n');
    s
}
