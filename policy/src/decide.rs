//! Cedar evaluation: entities for a workspace, one Operation entity per sub-request (public:
//! building entities decides nothing), and `decide()` (private: the crate's [`crate::Decider`] is
//! the only way to it), which never fails: a Cedar deny, any evaluation error or any request-building
//! error is a deny with reasons.

use crate::PolicySnapshot;
use crate::config::Profile;
use crate::error::{ErrorCode, ToolError};
use crate::request::{SubRequest, WorkspaceFacts};
use crate::user::UserFacts;
use cedar_policy::{
    Authorizer, Context, Decision as CedarDecision, Entities, Entity, EntityId, EntityTypeName,
    EntityUid, Request, RestrictedExpression,
};
use cedar_policy_core::ast::{Entity as CoreEntity, PartialValue, Value as CoreValue};
use cedar_policy_core::entities::{Entities as CoreEntities, NoEntitiesSchema, TCComputation};
use cedar_policy_core::extensions::Extensions;
use ref_cast::RefCast;
use smol_str::SmolStr;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::str::FromStr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

const NS: &str = "CodeSpace";

/// The entity types requests name, parsed once: parsing a Cedar name runs Cedar's parser, which
/// cost more than the evaluation itself when done per request.
const TYPES: &[&str] = &[
    "Action",
    "Environment",
    "Group",
    "Operation",
    "PermissionProfile",
    "User",
    "Workspace",
];

/// The parsed type name `CodeSpace::<ty>` (from [`TYPES`] when it is one of them).
fn type_name(ty: &str) -> Result<EntityTypeName, String> {
    static PARSED: OnceLock<Vec<(&'static str, EntityTypeName)>> = OnceLock::new();
    let parsed = PARSED.get_or_init(|| {
        TYPES
            .iter()
            .filter_map(|t| {
                EntityTypeName::from_str(&format!("{NS}::{t}"))
                    .ok()
                    .map(|n| (*t, n))
            })
            .collect()
    });
    match parsed.iter().find(|(t, _)| *t == ty) {
        Some((_, n)) => Ok(n.clone()),
        None => EntityTypeName::from_str(&format!("{NS}::{ty}")).map_err(|e| e.to_string()),
    }
}

/// An entity uid in the CodeSpace namespace.
pub fn uid(ty: &str, id: &str) -> Result<EntityUid, String> {
    Ok(EntityUid::from_type_name_and_id(
        type_name(ty)?,
        EntityId::new(id),
    ))
}

/// The entities every request of a workspace shares: actions, profiles, environment, workspace.
/// Validated against the schema once; callers cache it per (policy set, workspace).
pub fn workspace_entities(
    snap: &PolicySnapshot,
    profiles: &BTreeMap<String, Profile>,
    facts: &WorkspaceFacts,
) -> Result<Entities, String> {
    let mut ents: Vec<Entity> = Vec::new();
    for p in profiles.values() {
        let mut parents = HashSet::new();
        if let Some(parent) = &p.extends {
            parents.insert(uid("PermissionProfile", parent)?);
        }
        ents.push(Entity::new_no_attrs(
            uid("PermissionProfile", &p.id)?,
            parents,
        ));
    }
    let env_uid = uid("Environment", &facts.environment)?;
    let env_attrs: HashMap<String, RestrictedExpression> = [
        ("kind", facts.environment_kind.as_str()),
        ("transport", facts.environment_transport.as_str()),
        ("host", facts.environment_host.as_str()),
        ("sandbox", facts.sandbox.as_str()),
        ("network_enforcement", facts.network_enforcement.as_str()),
        ("secret_masking", facts.secret_masking.as_str()),
    ]
    .into_iter()
    .map(|(k, v)| {
        (
            k.to_string(),
            RestrictedExpression::new_string(v.to_string()),
        )
    })
    .collect();
    ents.push(Entity::new(env_uid.clone(), env_attrs, HashSet::new()).map_err(|e| e.to_string())?);
    let ws_uid = uid("Workspace", &facts.id)?;
    let mut ws_attrs: HashMap<String, RestrictedExpression> = HashMap::new();
    ws_attrs.insert(
        "environment".into(),
        RestrictedExpression::new_entity_uid(env_uid.clone()),
    );
    ws_attrs.insert(
        "network".into(),
        RestrictedExpression::new_string(facts.network.as_str().to_string()),
    );
    ws_attrs.insert(
        "approvals".into(),
        RestrictedExpression::new_string(facts.approvals.as_str().to_string()),
    );
    ws_attrs.insert(
        "sandbox".into(),
        RestrictedExpression::new_string(facts.workspace_sandbox.as_str().to_string()),
    );
    ents.push(Entity::new(ws_uid, ws_attrs, HashSet::from([env_uid])).map_err(|e| e.to_string())?);
    let actions = snap.schema.action_entities().map_err(|e| e.to_string())?;
    actions
        .add_entities(ents, Some(&snap.schema))
        .map_err(|e| e.to_string())
}

/// The result of one sub-request.
#[derive(Debug, Clone)]
pub struct SubDecision {
    /// Index within the call.
    pub index: usize,
    /// The action.
    pub action: crate::action::Action,
    /// Path or command summary (for the audit log).
    pub subject: String,
    /// Allowed?
    pub allowed: bool,
    /// Whether a deny refuses the call (false: it shapes the sandbox).
    pub gating: bool,
    /// Determining policy ids.
    pub policy_ids: Vec<String>,
    /// Evaluation or request-building errors (any error is a deny).
    pub errors: Vec<String>,
    /// Deny because no policy permitted (no determining policy).
    pub default_deny: bool,
    /// Evaluation time.
    pub duration_us: u64,
}

/// A decision over all sub-requests of one tool call.
#[derive(Debug, Clone)]
pub struct Decision {
    /// `dec-<uuid>`.
    pub decision_id: String,
    /// The tool.
    pub tool: String,
    /// The principal profile.
    pub profile: String,
    /// The workspace.
    pub workspace: String,
    /// The policy set hash it was decided under.
    pub policy_sha256: String,
    /// Per sub-request results.
    pub subs: Vec<SubDecision>,
}

impl Decision {
    /// True when every gating sub-request is allowed (and there is at least one).
    pub fn allowed(&self) -> bool {
        let mut gating = self.subs.iter().filter(|s| s.gating).peekable();
        gating.peek().is_some() && gating.all(|s| s.allowed)
    }

    /// Whether the sub-request for `action` was allowed (false when absent).
    pub fn allows(&self, action: crate::action::Action) -> bool {
        self.subs.iter().any(|s| s.action == action && s.allowed)
    }

    /// The `UNAUTHORIZED` error for a denied decision: decision id, determining ids, reasons.
    pub fn to_error(&self, snap: &PolicySnapshot) -> ToolError {
        let mut ids: Vec<String> = Vec::new();
        let mut parts: Vec<String> = Vec::new();
        for s in self.subs.iter().filter(|s| s.gating && !s.allowed) {
            parts.push(format!(
                "{} `{}`: {}",
                s.action,
                s.subject,
                s.reason_text(snap, &self.profile)
            ));
            for id in &s.policy_ids {
                if !ids.contains(id) {
                    ids.push(id.clone());
                }
            }
        }
        if parts.is_empty() {
            parts.push("no request was authorized".into());
        }
        let mut e = ToolError::new(
            ErrorCode::Unauthorized,
            format!("denied by policy: {}", parts.join(" | ")),
        );
        e.decision_id = Some(self.decision_id.clone());
        e.policy_ids = Some(ids);
        e
    }
}

/// Builds the Operation entity of one sub-request.
pub fn operation_entity(
    facts: &WorkspaceFacts,
    tool: &str,
    req: &SubRequest,
    op_id: &str,
) -> Result<Entity, String> {
    let ws_uid = uid("Workspace", &facts.id)?;
    let basename = if req.path == "." {
        String::new()
    } else {
        req.path.rsplit('/').next().unwrap_or("").to_string()
    };
    let ext = match basename.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() => ext.to_string(),
        _ => String::new(),
    };
    let mut attrs: HashMap<String, RestrictedExpression> = HashMap::new();
    attrs.insert(
        "workspace".into(),
        RestrictedExpression::new_entity_uid(ws_uid.clone()),
    );
    let tool = req.resource_tool.as_deref().unwrap_or(tool);
    attrs.insert("tool".into(), RestrictedExpression::new_string(tool.into()));
    attrs.insert(
        "path".into(),
        RestrictedExpression::new_string(req.path.clone()),
    );
    attrs.insert(
        "basename".into(),
        RestrictedExpression::new_string(basename),
    );
    attrs.insert("ext".into(), RestrictedExpression::new_string(ext));
    attrs.insert(
        "kind".into(),
        RestrictedExpression::new_string(req.kind.clone()),
    );
    let server_owned = match &req.network {
        Some(n) => n.server_owned,
        None => facts.is_server_owned(&req.path),
    };
    attrs.insert(
        "server_owned".into(),
        RestrictedExpression::new_bool(server_owned),
    );
    if let Some(n) = &req.network {
        attrs.insert(
            "host".into(),
            RestrictedExpression::new_string(n.host.clone()),
        );
        attrs.insert(
            "port".into(),
            RestrictedExpression::new_long(i64::from(n.port)),
        );
        attrs.insert(
            "scheme".into(),
            RestrictedExpression::new_string(n.scheme.clone()),
        );
        // Absent before the name is looked up (the proxy's name phase): `resource has ip_class`.
        if !n.ip_class.is_empty() {
            attrs.insert(
                "ip_class".into(),
                RestrictedExpression::new_string(n.ip_class.clone()),
            );
        }
    }
    attrs.insert("links".into(), RestrictedExpression::new_long(req.links));
    Entity::new(uid("Operation", op_id)?, attrs, HashSet::from([ws_uid])).map_err(|e| e.to_string())
}

impl SubDecision {
    /// Why this sub-request got its answer, for the audit log: the permits that allowed it,
    /// the forbids (with their `@reason`) that denied it, the default deny, or the errors.
    pub fn reason_text(&self, snap: &PolicySnapshot, profile: &str) -> String {
        if !self.errors.is_empty() {
            return format!(
                "denied because policy evaluation failed ({})",
                self.errors.join("; ")
            );
        }
        if self.allowed {
            return format!("permitted by {}", self.policy_ids.join(", "));
        }
        if self.policy_ids.is_empty() {
            return format!("no policy permits this for profile {profile}");
        }
        let reasons: Vec<String> = self
            .policy_ids
            .iter()
            .map(
                |id| match snap.meta.get(id).and_then(|m| m.reason.clone()) {
                    Some(r) => format!("{id}: {r}"),
                    None => id.clone(),
                },
            )
            .collect();
        format!("forbidden by {}", reasons.join("; "))
    }

    /// A deny of `req` because something failed before or during evaluation.
    pub fn refused(index: usize, req: &SubRequest, error: String) -> SubDecision {
        SubDecision {
            index,
            action: req.action,
            subject: req.subject.clone(),
            allowed: false,
            gating: req.gating,
            policy_ids: Vec::new(),
            errors: vec![error],
            default_deny: false,
            duration_us: 0,
        }
    }
}

fn deny_with(index: usize, req: &SubRequest, err: String, started: Instant) -> SubDecision {
    SubDecision {
        duration_us: u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
        ..SubDecision::refused(index, req, err)
    }
}

/// What every request of one workspace under one policy set shares, built once per (policy
/// set, workspace) generation: the workspace's entities, the principal, the parents of every
/// Operation, and the schema-validated Cedar requests already asked (keyed by action, slot and
/// context: parsing and validating a context against the schema cost more than evaluating it).
#[derive(Debug)]
pub struct Prepared {
    entities: Entities,
    /// `entities` split for decisions: the entities besides the actions, and each action entity
    /// by name. A decision's store is the first plus the few actions its policy slices can look
    /// up, not a copy of every action (None when the split failed: every decision copies all).
    split: Option<(CoreEntities, HashMap<String, Arc<CoreEntity>>)>,
    principal: Result<EntityUid, String>,
    workspace: Result<EntityUid, String>,
    /// The Operation's ancestors besides its workspace: the workspace's environment.
    environment: Result<EntityUid, String>,
    /// Keyed by a hash of (action, slot, context); a hit also compares the three.
    requests: Mutex<HashMap<u64, Vec<KeptRequest>>>,
}

/// Validated requests kept per [`Prepared`] before they are cleared.
const REQUESTS_MAX: usize = 1024;

impl Prepared {
    /// Prepares `entities` (the workspace's, from [`workspace_entities`]) for `facts`.
    pub fn new(entities: Entities, facts: &WorkspaceFacts) -> Prepared {
        let split = split_actions(entities.as_ref());
        Prepared {
            entities,
            split,
            principal: uid("PermissionProfile", &facts.profile),
            workspace: uid("Workspace", &facts.id),
            environment: uid("Environment", &facts.environment),
            requests: Mutex::new(HashMap::new()),
        }
    }

    /// The workspace's entities (without any Operation).
    pub fn entities(&self) -> &Entities {
        &self.entities
    }

    /// Requests kept (for tests of the bound).
    pub fn requests_len(&self) -> usize {
        self.requests
            .lock()
            .map_or(0, |r| r.values().map(Vec::len).sum())
    }

    /// The schema-validated request of `req` in slot `slot` (its resource is
    /// `Operation::"<slot>"`), built once per action, slot and context.
    fn request(
        &self,
        snap: &PolicySnapshot,
        req: &SubRequest,
        slot: usize,
    ) -> Result<Request, String> {
        let key = request_key(req, slot);
        let same =
            |k: &&KeptRequest| k.action == req.action && k.slot == slot && k.context == req.context;
        if let Ok(kept) = self.requests.lock()
            && let Some(k) = kept.get(&key).and_then(|v| v.iter().find(same))
        {
            return Ok(k.request.clone());
        }
        let principal = self
            .principal
            .clone()
            .map_err(|e| format!("principal: {e}"))?;
        let action = uid("Action", req.action.as_str())?;
        let resource = uid("Operation", &slot.to_string())?;
        let (cedar_ctx, _) = crate::user::split_context(&req.context)?;
        let ctx = Context::from_json_value(cedar_ctx, Some((&snap.schema, &action)))
            .map_err(|e| format!("context: {e}"))?;
        let request = Request::new(principal, action, resource, ctx, Some(&snap.schema))
            .map_err(|e| format!("request: {e}"))?;
        if let Ok(mut kept) = self.requests.lock() {
            if kept.values().map(Vec::len).sum::<usize>() >= REQUESTS_MAX {
                kept.clear();
            }
            kept.entry(key).or_default().push(KeptRequest {
                action: req.action,
                slot,
                context: req.context.clone(),
                request: request.clone(),
            });
        }
        Ok(request)
    }

    /// The workspace's entities with one Operation per request (`Operation::"<slot>"`), its
    /// ancestors (workspace, environment) given directly, so the store's transitive closure
    /// holds without recomputing it over every entity.
    fn with_operations(
        &self,
        snap: &PolicySnapshot,
        facts: &WorkspaceFacts,
        tool: &str,
        reqs: &[SubRequest],
    ) -> Result<CoreEntities, String> {
        let ws = self.workspace.clone()?;
        let env = self.environment.clone()?;
        let ops = reqs
            .iter()
            .enumerate()
            .map(|(slot, r)| {
                let op = uid("Operation", &slot.to_string())?;
                let attrs = operation_attrs(facts, tool, r, &ws)
                    .into_iter()
                    .map(|(k, v)| (SmolStr::new_static(k), PartialValue::from(v)));
                Ok(Arc::new(CoreEntity::new_with_attr_partial_value(
                    op.into(),
                    attrs,
                    HashSet::from([env.clone().into()]),
                    HashSet::from([ws.clone().into()]),
                    [],
                )))
            })
            .collect::<Result<Vec<_>, String>>()?;
        let mut ops = ops;
        ops.extend(caller_core_entities(reqs)?);
        let base = match (&self.split, actions_needed(snap, reqs)) {
            (Some((shared, actions)), Some(names)) => {
                ops.extend(names.iter().filter_map(|n| actions.get(*n)).map(Arc::clone));
                shared.clone()
            }
            _ => self.entities.as_ref().clone(),
        };
        base.add_entities(
            ops,
            None::<&NoEntitiesSchema>,
            TCComputation::AssumeAlreadyComputed,
            Extensions::all_available(),
        )
        .map_err(|e| e.to_string())
    }
}

/// A validated request kept by [`Prepared`], with what it was built from.
#[derive(Debug)]
struct KeptRequest {
    action: crate::action::Action,
    slot: usize,
    context: serde_json::Value,
    request: Request,
}

/// The hash [`Prepared`] keeps a request under: of its action, slot and context, walked in
/// place (formatting the context as a key cost more than a tenth of an uncached decision).
fn request_key(req: &SubRequest, slot: usize) -> u64 {
    use std::hash::{Hash, Hasher};
    fn walk(v: &serde_json::Value, h: &mut impl Hasher) {
        match v {
            serde_json::Value::Null => 0_u8.hash(h),
            serde_json::Value::Bool(b) => (1_u8, b).hash(h),
            serde_json::Value::Number(n) => {
                (2_u8, n.as_i64(), n.as_u64(), n.as_f64().map(f64::to_bits)).hash(h)
            }
            serde_json::Value::String(s) => (3_u8, s).hash(h),
            serde_json::Value::Array(a) => {
                (4_u8, a.len()).hash(h);
                a.iter().for_each(|x| walk(x, h));
            }
            serde_json::Value::Object(o) => {
                (5_u8, o.len()).hash(h);
                for (k, x) in o {
                    k.hash(h);
                    walk(x, h);
                }
            }
        }
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (req.action.as_str(), slot).hash(&mut h);
    walk(&req.context, &mut h);
    h.finish()
}

/// `entities` as the entities besides the actions, and the action entities by name (None when
/// the rest cannot be put together again).
fn split_actions(
    entities: &CoreEntities,
) -> Option<(CoreEntities, HashMap<String, Arc<CoreEntity>>)> {
    let mut actions = HashMap::new();
    let mut rest = Vec::new();
    for e in entities.iter() {
        if e.uid().is_action() {
            let name: &str = e.uid().eid().as_ref();
            actions.insert(name.to_string(), Arc::new(e.clone()));
        } else {
            rest.push(Arc::new(e.clone()));
        }
    }
    // Every entity keeps the ancestors the whole store computed, and no entity besides an
    // action has an action among them: the closure holds as given.
    let rest = CoreEntities::new()
        .add_entities(
            rest,
            None::<&NoEntitiesSchema>,
            TCComputation::AssumeAlreadyComputed,
            Extensions::all_available(),
        )
        .ok()?;
    Some((rest, actions))
}

/// The action entities evaluating `reqs` can look up: the union over their actions' slices
/// (None when an action has no slice: then every action entity goes in).
fn actions_needed<'a>(snap: &'a PolicySnapshot, reqs: &[SubRequest]) -> Option<BTreeSet<&'a str>> {
    let mut names = BTreeSet::new();
    for r in reqs {
        names.extend(
            snap.slices
                .actions_needed(r.action.as_str())?
                .iter()
                .map(String::as_str),
        );
    }
    Some(names)
}

/// The `User` entity of `u` (attributes `email`, `groups`; further claims as tags) and a
/// `Group` entity per group, its parents.
pub fn user_entities(u: &UserFacts) -> Result<Vec<Entity>, String> {
    let groups: BTreeSet<&str> = u.groups.iter().map(String::as_str).collect();
    let mut attrs: Vec<(String, RestrictedExpression)> = vec![(
        "groups".into(),
        RestrictedExpression::new_set(
            groups
                .iter()
                .map(|g| RestrictedExpression::new_string((*g).to_string())),
        ),
    )];
    if let Some(e) = &u.email {
        attrs.push(("email".into(), RestrictedExpression::new_string(e.clone())));
    }
    let parents = groups
        .iter()
        .map(|g| uid("Group", g))
        .collect::<Result<Vec<_>, _>>()?;
    let tags = u
        .tags
        .iter()
        .map(|(k, v)| (k.clone(), RestrictedExpression::new_string(v.clone())));
    let mut out = vec![
        Entity::new_with_tags(uid("User", &u.id)?, attrs, parents.clone(), tags)
            .map_err(|e| e.to_string())?,
    ];
    out.extend(
        parents
            .into_iter()
            .map(|g| Entity::new_no_attrs(g, HashSet::new())),
    );
    Ok(out)
}

/// The `User` and `Group` entities of the callers the requests' contexts name (every request
/// of a call names the same one), built directly: a group has no parents, so the user's
/// ancestors are its groups and the store's transitive closure holds as given.
fn caller_core_entities(reqs: &[SubRequest]) -> Result<Vec<Arc<CoreEntity>>, String> {
    let mut users: BTreeMap<String, UserFacts> = BTreeMap::new();
    for r in reqs {
        if let Some(u) = crate::user::user_facts(&r.context)? {
            match users.get(&u.id) {
                Some(seen) if *seen != u => {
                    return Err(format!("two different facts for user `{}`", u.id));
                }
                Some(_) => {}
                None => {
                    users.insert(u.id.clone(), u);
                }
            }
        }
    }
    let mut groups: BTreeSet<String> = BTreeSet::new();
    let mut out = Vec::new();
    for u in users.values() {
        let parents = u
            .groups
            .iter()
            .map(|g| uid("Group", g).map(Into::into))
            .collect::<Result<HashSet<_>, _>>()?;
        let set: BTreeSet<&str> = u.groups.iter().map(String::as_str).collect();
        let mut attrs: Vec<(SmolStr, PartialValue)> = vec![(
            SmolStr::new_static("groups"),
            PartialValue::from(CoreValue::set(
                set.iter().map(|g| CoreValue::from(SmolStr::new(g))),
                None,
            )),
        )];
        if let Some(e) = &u.email {
            attrs.push((
                SmolStr::new_static("email"),
                PartialValue::from(CoreValue::from(SmolStr::new(e))),
            ));
        }
        let tags = u.tags.iter().map(|(k, v)| {
            (
                SmolStr::new(k),
                PartialValue::from(CoreValue::from(SmolStr::new(v))),
            )
        });
        out.push(Arc::new(CoreEntity::new_with_attr_partial_value(
            uid("User", &u.id)?.into(),
            attrs,
            HashSet::new(),
            parents,
            tags,
        )));
        groups.extend(u.groups.iter().cloned());
    }
    for g in groups {
        out.push(Arc::new(CoreEntity::new_with_attr_partial_value(
            uid("Group", &g)?.into(),
            [],
            HashSet::new(),
            HashSet::new(),
            [],
        )));
    }
    Ok(out)
}

/// The attributes of one sub-request's Operation, as Cedar values (see [`operation_entity`]).
fn operation_attrs(
    facts: &WorkspaceFacts,
    tool: &str,
    req: &SubRequest,
    ws: &EntityUid,
) -> Vec<(&'static str, CoreValue)> {
    let basename = if req.path == "." {
        ""
    } else {
        req.path.rsplit('/').next().unwrap_or("")
    };
    let ext = match basename.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() => ext,
        _ => "",
    };
    let tool = req.resource_tool.as_deref().unwrap_or(tool);
    let server_owned = match &req.network {
        Some(n) => n.server_owned,
        None => facts.is_server_owned(&req.path),
    };
    let mut attrs: Vec<(&'static str, CoreValue)> = vec![
        ("workspace", CoreValue::from(ws.as_ref().clone())),
        ("tool", CoreValue::from(SmolStr::new(tool))),
        ("path", CoreValue::from(SmolStr::new(&req.path))),
        ("basename", CoreValue::from(SmolStr::new(basename))),
        ("ext", CoreValue::from(SmolStr::new(ext))),
        ("kind", CoreValue::from(SmolStr::new(&req.kind))),
        ("server_owned", CoreValue::from(server_owned)),
        ("links", CoreValue::from(req.links)),
    ];
    if let Some(n) = &req.network {
        attrs.push(("host", CoreValue::from(SmolStr::new(&n.host))));
        attrs.push(("port", CoreValue::from(i64::from(n.port))));
        attrs.push(("scheme", CoreValue::from(SmolStr::new(&n.scheme))));
        // Absent before the name is looked up (the proxy's name phase): `resource has ip_class`.
        if !n.ip_class.is_empty() {
            attrs.push(("ip_class", CoreValue::from(SmolStr::new(&n.ip_class))));
        }
    }
    attrs
}

/// Evaluates every sub-request against the workspace's entities `base`. Never fails: errors
/// become denies.
pub(crate) fn decide(
    snap: &PolicySnapshot,
    base: &Entities,
    facts: &WorkspaceFacts,
    tool: &str,
    reqs: &[SubRequest],
) -> Decision {
    decide_prepared(snap, &Prepared::new(base.clone(), facts), facts, tool, reqs)
}

/// [`decide`] with the workspace's shared pieces prepared once.
pub(crate) fn decide_prepared(
    snap: &PolicySnapshot,
    base: &Prepared,
    facts: &WorkspaceFacts,
    tool: &str,
    reqs: &[SubRequest],
) -> Decision {
    let decision_id = format!("dec-{}", uuid::Uuid::new_v4());
    let mut d = Decision {
        decision_id,
        tool: tool.to_string(),
        profile: facts.profile.clone(),
        workspace: facts.id.clone(),
        policy_sha256: snap.sha256.clone(),
        subs: Vec::with_capacity(reqs.len()),
    };
    if reqs.is_empty() {
        // Nothing to evaluate (every sub-request came from the decision cache).
        return d;
    }
    let started = Instant::now();
    // One Operation entity per sub-request, added in one batch.
    let entities = base.with_operations(snap, facts, tool, reqs);
    let authorizer = Authorizer::new();
    for (index, req) in reqs.iter().enumerate() {
        let t0 = if index == 0 { started } else { Instant::now() };
        let entities = match &entities {
            Ok(e) => Entities::ref_cast(e),
            Err(e) => {
                d.subs
                    .push(deny_with(index, req, format!("entities: {e}"), t0));
                continue;
            }
        };
        let request = match base.request(snap, req, index) {
            Ok(r) => r,
            Err(e) => {
                d.subs.push(deny_with(index, req, e, t0));
                continue;
            }
        };
        // Only the policies whose action scope can match (the same answer as the whole set).
        let set = snap.slices.for_action(req.action.as_str(), &snap.set);
        // The one enforcing evaluation (clippy.toml disallows it elsewhere): every decision the
        // server acts on comes from here.
        #[allow(clippy::disallowed_methods)]
        let resp = authorizer.is_authorized(&request, set, entities);
        let errors: Vec<String> = resp.diagnostics().errors().map(|e| e.to_string()).collect();
        let policy_ids: Vec<String> = resp.diagnostics().reason().map(|p| p.to_string()).collect();
        let allowed = resp.decision() == CedarDecision::Allow && errors.is_empty();
        let default_deny = !allowed && errors.is_empty() && policy_ids.is_empty();
        d.subs.push(SubDecision {
            index,
            action: req.action,
            subject: req.subject.clone(),
            allowed,
            gating: req.gating,
            policy_ids,
            errors,
            default_deny,
            duration_us: u64::try_from(t0.elapsed().as_micros()).unwrap_or(u64::MAX),
        });
    }
    d
}
