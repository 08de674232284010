//! The gateway: the one choke point every tool call passes. parse (in the transport) → build
//! the Cedar request(s) → decide → audit → run the runner → reply.

use crate::config::Config;
use crate::error::{ErrorCode, ToolError};
use crate::facts::SandboxFacts;
use crate::lease::Leases;
use crate::policy::decide::{Decision, decide, workspace_entities};
use crate::policy::{PolicySnapshot, PolicyStore};
use crate::request::{ProcessFacts, Session, SubRequest, WorkspaceFacts, build_requests};
use crate::wire::ToolCall;

pub mod approvals;
mod authorized;
mod explain;
mod info;
mod masks;
pub mod net;
pub mod ops;
pub mod patches;
mod processes;
pub mod temp_files;
mod write_scope;
pub(crate) use authorized::Authorized;
use cedar_policy::Entities;
use codespace_runner_fs::Root;
use codespace_store::{DecisionRow, Store};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A workspace root could not be opened.
    #[error("workspace {0}: root cannot be opened: {1}")]
    Root(String, String),
    /// The store could not record this server instance.
    #[error("cannot record the server instance in the store: {0}")]
    Store(String),
    /// The workspace could not be registered in the store.
    #[error("workspace {0}: cannot be registered in the store: {1}")]
    Register(String, String),
    /// A path commands may read or write reaches the store.
    #[error("{0}")]
    StoreReachable(String),
}

/// Which rows of a decision go to the audit log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Audit {
    /// Every sub-request.
    All,
    /// None (the caller logs what matters itself).
    None,
}

/// One registered workspace at run time.
#[derive(Debug)]
pub(crate) struct WorkspaceRuntime {
    pub(crate) facts: WorkspaceFacts,
    pub(crate) root: Arc<Root>,
    pub(crate) versions: Arc<crate::versions::Versions>,
    /// The path index `find`, `grep` and `find_files` read (fed by the versions watcher).
    pub(crate) index: Arc<crate::index::PathIndex>,
    /// The workspace identity: the store's registration of this id bound to this root
    /// (operation keys and patch journals are scoped to it); empty without a store.
    pub(crate) registration: String,
}

/// What tool handlers may use besides their decision: the operator's config, the store, the
/// runners' shared state. Nothing here decides: the policy store, the decision caches and the
/// workspaces' runtimes stay private to the gateway.
#[derive(Debug)]
pub struct Services {
    pub(crate) config: Config,
    pub(crate) store: Option<Arc<Store>>,
    pub(crate) sandbox: SandboxFacts,
    pub(crate) transports: Vec<String>,
    pub(crate) leases: Arc<Leases>,
    pub(crate) patch_hooks: Arc<crate::gateway::patches::PatchHooks>,
    pub(crate) processes: crate::processes::Processes,
    pub(crate) temps: Arc<codespace_runner_fs::TempNames>,
    /// The store statistics the retention pruner last computed.
    pub(crate) store_stats: crate::retention::StatsCell,
    /// File reads off the async workers, versions cached by file identity.
    pub(crate) file_versions: Arc<crate::file_versions::FileVersions>,
    /// `network: proxy`: what every process's egress-proxy decider shares.
    pub(crate) net: Arc<crate::gateway::net::NetState>,
}

/// The gateway: the one place that resolves a call's target, decides it and audits it. Tool
/// handlers get an [`Authorized`] value from it and never the gateway itself.
#[derive(Debug)]
pub struct Gateway {
    svc: Services,
    pub(crate) policy: Arc<PolicyStore>,
    pub(crate) workspaces: BTreeMap<String, WorkspaceRuntime>,
    entity_cache: Mutex<HashMap<String, (String, Entities)>>,
    signatures: Mutex<Option<(String, Arc<crate::policy::signature::SignaturePlan>)>>,
    decision_cache: Mutex<DecisionCache>,
}

impl std::ops::Deref for Gateway {
    type Target = Services;
    fn deref(&self) -> &Services {
        &self.svc
    }
}

/// What every audit row of one call shares.
#[derive(Clone, Copy)]
pub(crate) struct RowContext<'a> {
    pub(crate) snap: &'a PolicySnapshot,
    pub(crate) facts: &'a WorkspaceFacts,
    pub(crate) session: &'a Session,
    pub(crate) at_ms: i64,
}

impl<'a> RowContext<'a> {
    /// The shared part of the rows of a decision made now.
    pub(crate) fn now(
        snap: &'a PolicySnapshot,
        facts: &'a WorkspaceFacts,
        session: &'a Session,
    ) -> RowContext<'a> {
        RowContext {
            snap,
            facts,
            session,
            at_ms: codespace_store::now_ms(),
        }
    }
}

/// The audit row of one sub-decision, with its recorded (redacted) request. The profiles and the
/// redactor are the operator's (the gateway's config, or the copies the egress proxy holds).
pub(crate) fn row_of(
    profiles: &BTreeMap<String, crate::config::Profile>,
    redact: &crate::redact::Redactor,
    at: &RowContext<'_>,
    d: &Decision,
    sub: &crate::policy::decide::SubDecision,
    req: Option<&SubRequest>,
) -> DecisionRow {
    let RowContext {
        snap,
        facts,
        session,
        at_ms,
    } = *at;
    let request = req.map(|r| {
        let mut v = crate::policy::replay::RecordedRequest::new(profiles, facts, &d.tool, r).to_json();
        if let Some(ctx) = v.pointer_mut("/request/context") {
            redact.json(ctx);
        }
        if let Some(serde_json::Value::String(s)) = v.pointer_mut("/request/subject") {
            *s = redact.text(s).into_owned();
        }
        v
    });
    DecisionRow {
        decision_id: d.decision_id.clone(),
        at_ms,
        policy_set_sha256: d.policy_sha256.clone(),
        profile: d.profile.clone(),
        workspace: d.workspace.clone(),
        tool: d.tool.clone(),
        action: sub.action.clone(),
        sub_index: i64::try_from(sub.index).unwrap_or(i64::MAX),
        subject: redact.text(&sub.subject).into_owned(),
        client: Some(session.client.clone()),
        transport: Some(session.transport.clone()),
        decision: if sub.allowed { "allow" } else { "deny" }.into(),
        policy_ids: sub.policy_ids.clone(),
        errors: sub
            .errors
            .iter()
            .map(|e| redact.text(e).into_owned())
            .collect(),
        default_deny: sub.default_deny,
        duration_us: i64::try_from(sub.duration_us).unwrap_or(i64::MAX),
        request,
        path: req.map(|r| r.path.clone()),
        kind: req.map(|r| r.kind.clone()).filter(|k| !k.is_empty()),
        reason: Some(redact.text(&sub.reason_text(snap, &d.profile)).into_owned()),
        shadow_decision: None,
        shadow_policy_ids: None,
        seq: 0,
    }
}

/// The audit rows of every sub-decision of `d`, each with the shadow set's answer beside it when
/// there is one.
pub(crate) fn rows_with_shadow(
    profiles: &BTreeMap<String, crate::config::Profile>,
    redact: &crate::redact::Redactor,
    at: &RowContext<'_>,
    d: &Decision,
    shadow: Option<&Decision>,
    reqs: &[SubRequest],
) -> Vec<DecisionRow> {
    d.subs
        .iter()
        .map(|s| {
            let mut row = row_of(profiles, redact, at, d, s, reqs.get(s.index));
            if let Some(sh) = shadow.and_then(|sh| sh.subs.get(s.index)) {
                row.shadow_decision = Some(if sh.allowed { "allow" } else { "deny" }.into());
                row.shadow_policy_ids = Some(sh.policy_ids.clone());
            }
            row
        })
        .collect()
}

/// The audit rows of a decision made outside a gateway (the operator CLI).
pub(crate) fn decision_rows(
    config: &Config,
    snap: &PolicySnapshot,
    d: &Decision,
    facts: &WorkspaceFacts,
    reqs: &[SubRequest],
    session: &Session,
) -> Vec<DecisionRow> {
    let at = RowContext::now(snap, facts, session);
    d.subs
        .iter()
        .map(|s| {
            row_of(
                &config.profiles,
                &config.redaction.current(),
                &at,
                d,
                s,
                reqs.get(s.index),
            )
        })
        .collect()
}

/// A cached error-free sub-decision.
#[derive(Debug, Clone)]
struct CachedDecision {
    allowed: bool,
    policy_ids: Vec<String>,
    default_deny: bool,
}

/// The cached sub-decisions of one policy set: entries of a superseded set can never hit again, so
/// caching under a new set drops them.
#[derive(Debug, Default)]
struct DecisionCache {
    set: String,
    entries: HashMap<String, CachedDecision>,
}

/// Entries kept in the decision cache before it is cleared.
const DECISION_CACHE_MAX: usize = 100_000;

/// The identity of a workspace root: `"<st_dev>:<st_ino>"` of the opened root directory.
fn root_id(root: &Root) -> Result<String, String> {
    use std::os::unix::fs::MetadataExt;
    let fd = root
        .as_fd()
        .try_clone_to_owned()
        .map_err(|e| e.to_string())?;
    let meta = std::fs::File::from(fd)
        .metadata()
        .map_err(|e| e.to_string())?;
    Ok(format!("{}:{}", meta.dev(), meta.ino()))
}

impl Gateway {
    /// Builds the gateway: records this server instance in the store (its id names the server's
    /// temporary files), opens every workspace root and computes its facts.
    pub fn new(
        config: Config,
        policy: Arc<PolicyStore>,
        store: Option<Arc<Store>>,
        sandbox: SandboxFacts,
    ) -> Result<Gateway, StartError> {
        crate::isolation::check_store_unreachable(&config).map_err(StartError::StoreReachable)?;
        let config_max_waiters = config.limits.max_waiters;
        let processes = crate::processes::Processes::new(&config.limits);
        let temps = crate::gateway::temp_files::start_instance(store.as_ref())?;
        let owned_files = crate::server_files::server_files(&config, policy.source());
        let mut workspaces = BTreeMap::new();
        // The path indexes' fence directories, beside the store (dead servers' ones swept now).
        let fences = crate::fence_dirs::prepare(config.store.as_deref());
        for (id, ws) in &config.workspaces {
            let root = Root::open(&ws.root)
                .map_err(|e| StartError::Root(id.clone(), e.to_string()))?
                .with_temp_names(Arc::clone(&temps));
            let registration = match &store {
                Some(store) => {
                    let rid = root_id(&root).map_err(|e| StartError::Root(id.clone(), e))?;
                    store
                        .register_workspace(id, &rid, &format!("reg-{}", uuid::Uuid::new_v4()))
                        .map_err(|e| StartError::Register(id.clone(), e.to_string()))?
                }
                None => String::new(),
            };
            let env_kind = config
                .environments
                .get(&ws.environment)
                .map(|e| e.kind)
                .unwrap_or_default();
            let facts = WorkspaceFacts {
                id: id.clone(),
                profile: ws.profile.clone(),
                environment: ws.environment.clone(),
                environment_kind: env_kind,
                sandbox: if sandbox.sandbox_enforced {
                    crate::facts::SandboxFact::Enforced
                } else {
                    crate::facts::SandboxFact::Unavailable
                },
                // A workspace whose operator turned the sandbox off has no network enforcement.
                network_enforcement: if sandbox.network_enforced
                    && ws.sandbox == crate::config::SandboxMode::Required
                {
                    crate::facts::NetworkEnforcement::Enforced
                } else {
                    crate::facts::NetworkEnforcement::None
                },
                network: ws.network,
                approvals: ws.approvals,
                server_owned: crate::server_files::server_owned_in(&ws.root, &owned_files),
                workspace_sandbox: ws.sandbox,
                secret_masking: crate::masks::masking_fact(ws.secret_masking, sandbox),
            };
            let root = Arc::new(root);
            let index = Arc::new(crate::index::PathIndex::new_in(
                Arc::clone(&root),
                &ws.root,
                config.limits.max_walk_entries,
                fences.as_deref(),
            ));
            workspaces.insert(
                id.clone(),
                WorkspaceRuntime {
                    facts,
                    root,
                    versions: Arc::new(crate::versions::Versions::with_observer(
                        &ws.root,
                        Arc::clone(&temps),
                        index.observer(),
                        index.fence_dir(),
                    )),
                    index,
                    registration,
                },
            );
        }
        // Decision rows leave the request path through the store's batching writer (read-only
        // rows group-committed, mutations written ahead); see `crate::audit`.
        if let Some(store) = &store {
            crate::audit::start_writer(store);
        }
        let net = Arc::new(crate::gateway::net::NetState::new(
            Arc::clone(&policy),
            config.profiles.clone(),
            store.clone(),
            config.redaction.clone(),
            &config.limits,
        ));
        Ok(Gateway {
            svc: Services {
                config,
                store,
                sandbox,
                transports: vec!["stdio".to_string()],
                leases: Leases::new(config_max_waiters),
                patch_hooks: Arc::new(crate::gateway::patches::PatchHooks::default()),
                processes,
                temps,
                store_stats: crate::retention::StatsCell::default(),
                file_versions: Arc::new(crate::file_versions::FileVersions::new()),
                net,
            },
            policy,
            workspaces,
            entity_cache: Mutex::new(HashMap::new()),
            signatures: Mutex::new(None),
            decision_cache: Mutex::new(DecisionCache::default()),
        })
    }

    /// Records an HTTP listener of this server (the transport calls it once bound): egress-proxy
    /// connections to it are `resource.server_owned`, which a base guardrail forbids.
    pub fn add_http_listener(&self, addr: std::net::SocketAddr) {
        self.net.add_listener(addr);
    }

    /// The workspace identity (store registration) `workspace` is served under, if registered.
    pub fn registration(&self, workspace: &str) -> Option<&str> {
        self.workspaces
            .get(workspace)
            .map(|w| w.registration.as_str())
            .filter(|r| !r.is_empty())
    }

    /// Starts the background retention pruner on `store` (open a second connection to the same
    /// file for it) with the configured retention; its statistics feed `workspace_info.store`.
    /// Dropping the returned handle stops it.
    pub fn start_retention(
        &self,
        store: Arc<Store>,
        interval: std::time::Duration,
    ) -> std::io::Result<crate::retention::Pruner> {
        crate::retention::Pruner::spawn(
            store,
            self.config.retention,
            interval,
            self.store_stats.clone(),
        )
    }

    /// Sets the transports this server serves (`workspace_info.transports`).
    pub fn with_transports(mut self, transports: Vec<String>) -> Gateway {
        self.svc.transports = transports;
        self
    }

    /// Installs apply_patch test hooks (failure injection, apply-window edits). Not reachable
    /// from the wire; tests only.
    #[doc(hidden)]
    pub fn with_patch_hooks(mut self, hooks: crate::gateway::patches::PatchHooks) -> Gateway {
        self.svc.patch_hooks = Arc::new(hooks);
        self
    }

    /// The services, to configure them before the gateway serves.
    pub(crate) fn services_mut(&mut self) -> &mut Services {
        &mut self.svc
    }

    /// What the start-up probe found about the command sandbox.
    pub fn sandbox(&self) -> SandboxFacts {
        self.sandbox
    }

    /// The live policy store.
    pub fn policy(&self) -> &Arc<PolicyStore> {
        &self.policy
    }

    /// The store, when there is one.
    pub fn store(&self) -> Option<&Arc<Store>> {
        self.store.as_ref()
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Records this start in the store's events: version, policy set, the host `probe` the
    /// transport ran (with the per-process task limit added), the workspaces served. A store
    /// failure is logged.
    pub fn record_startup(&self, mut probe: serde_json::Value) {
        let Some(store) = &self.store else { return };
        let pids = self.processes.pids_isolation();
        if let serde_json::Value::Object(m) = &mut probe {
            m.insert(
                "pids".into(),
                serde_json::json!({
                    "limit": pids.limit,
                    "mechanism": pids.mechanism.as_str(),
                    "escapees_tracked": pids.tracked,
                }),
            );
        }
        let detail = serde_json::json!({
            "version": env!("CARGO_PKG_VERSION"),
            "policy_set_sha256": self.policy.snapshot().sha256,
            "probe": probe,
            "workspaces": self.workspaces.keys().collect::<Vec<_>>(),
        });
        if let Err(e) = store.insert_event("startup", &detail) {
            tracing::error!(error = %e, "cannot record the start-up event");
        }
    }

    /// Commits every audit row queued so far (the barrier of in-process readers and tests).
    pub fn flush_audit(&self) {
        if let Some(store) = &self.store {
            crate::audit::flush(store);
        }
    }

    /// Drains the audit queue and stops its writer; later rows are written synchronously.
    pub fn stop_audit(&self) {
        if let Some(store) = &self.store {
            crate::audit::stop(store);
        }
    }

    pub(crate) fn workspace(&self, id: &str) -> Result<&WorkspaceRuntime, ToolError> {
        self.workspaces.get(id).ok_or_else(|| {
            ToolError::new(
                ErrorCode::WorkspaceNotFound,
                format!("unknown workspace_id `{id}`"),
            )
        })
    }

    /// The workspace's shared entities under `snap` (cached per policy-set hash).
    pub(crate) fn entities(
        &self,
        snap: &PolicySnapshot,
        facts: &WorkspaceFacts,
    ) -> Result<Entities, String> {
        if let Ok(cache) = self.entity_cache.lock()
            && let Some((_, ents)) = [facts.id.clone(), format!("{}\0shadow", facts.id)]
                .iter()
                .filter_map(|k| cache.get(k))
                .find(|(sha, _)| *sha == snap.sha256)
        {
            return Ok(ents.clone());
        }
        let ents = workspace_entities(snap, &self.config.profiles, facts)?;
        // The shadow set has its own slot, so live and shadow decisions do not evict each other.
        let key = match self.policy.shadow() {
            Some(sh) if sh.sha256 == snap.sha256 => format!("{}\0shadow", facts.id),
            _ => facts.id.clone(),
        };
        if let Ok(mut cache) = self.entity_cache.lock() {
            cache.insert(key, (snap.sha256.clone(), ents.clone()));
        }
        Ok(ents)
    }

    /// Decides `reqs` for a workspace under the current snapshot, and writes the audit rows
    /// that `audit` asks for.
    pub(crate) fn decide_reqs(
        &self,
        snap: &PolicySnapshot,
        facts: &WorkspaceFacts,
        tool: &str,
        reqs: &[SubRequest],
        session: &Session,
        audit: Audit,
    ) -> Decision {
        let decision = self.decide_cached(snap, facts, tool, reqs);
        match audit {
            Audit::All => {
                let shadow = self.shadow_decision(facts, tool, reqs);
                self.audit(snap, &decision, shadow.as_ref(), facts, reqs, session);
            }
            Audit::None => {}
        }
        decision
    }

    /// The decision of the shadow set (`policies/shadow/`) on the same requests, when one is
    /// loaded: logged beside the live one, never enforced.
    pub(crate) fn shadow_decision(
        &self,
        facts: &WorkspaceFacts,
        tool: &str,
        reqs: &[SubRequest],
    ) -> Option<Decision> {
        let shadow = self.policy.shadow()?;
        Some(self.decide_cached(&shadow, facts, tool, reqs))
    }

    /// The audit row of one sub-decision, with its recorded (redacted) request.
    fn audit_row(
        &self,
        at: &RowContext<'_>,
        d: &Decision,
        sub: &crate::policy::decide::SubDecision,
        req: Option<&SubRequest>,
    ) -> DecisionRow {
        row_of(
            &self.config.profiles,
            &self.config.redaction.current(),
            at,
            d,
            sub,
            req,
        )
    }

    /// Writes the rows of a decision made with [`Audit::None`] (with the shadow set's answer).
    pub(crate) fn audit_decision(
        &self,
        snap: &PolicySnapshot,
        d: &Decision,
        facts: &WorkspaceFacts,
        reqs: &[SubRequest],
        session: &Session,
    ) {
        let shadow = self.shadow_decision(facts, &d.tool, reqs);
        self.audit(snap, d, shadow.as_ref(), facts, reqs, session);
    }

    /// `decide()` behind a cache of error-free sub-decisions. The key holds everything a
    /// decision can depend on: the policy-set hash, the workspace (its entities are fixed for
    /// the gateway's life), the tool, the action, the patch kind, the whole context, and the
    /// path's decision signature (see [`crate::policy::signature`]); a set whose signature is
    /// uncacheable is never cached. Decisions with evaluation errors are never cached, and neither
    /// are those about a process (their context names the process, so no other call can share
    /// them). The cache holds one policy set's entries.
    fn decide_cached(
        &self,
        snap: &PolicySnapshot,
        facts: &WorkspaceFacts,
        tool: &str,
        reqs: &[SubRequest],
    ) -> Decision {
        let plan = self.signature_plan(snap);
        let keys: Vec<Option<String>> = reqs
            .iter()
            .map(|r| {
                let tool = r.resource_tool.as_deref().unwrap_or(tool);
                plan.key(&r.path, facts.is_server_owned(&r.path), r.links)
                    .filter(|_| r.context.get("process").is_none())
                    .map(|sig| {
                        format!(
                            "{}\0{}\0{tool}\0{}\0{}\0{}\0{sig}",
                            snap.sha256, facts.id, r.action, r.kind, r.context
                        )
                    })
            })
            .collect();
        // Hits from the cache; misses are decided in one batch.
        let hits: Vec<Option<CachedDecision>> = match self.decision_cache.lock() {
            Ok(cache) => keys
                .iter()
                .map(|k| k.as_ref().and_then(|k| cache.entries.get(k).cloned()))
                .collect(),
            Err(_) => vec![None; reqs.len()],
        };
        let miss_reqs: Vec<SubRequest> = reqs
            .iter()
            .zip(&hits)
            .filter(|(_, h)| h.is_none())
            .map(|(r, _)| r.clone())
            .collect();
        // The workspace's entities are only needed when something must be evaluated; when they
        // cannot be built, every miss is refused with the reason.
        let mut d = if miss_reqs.is_empty() {
            decide(snap, &Entities::empty(), facts, tool, &[])
        } else {
            match self.entities(snap, facts) {
                Ok(base) => decide(snap, &base, facts, tool, &miss_reqs),
                Err(e) => {
                    let mut d = decide(snap, &Entities::empty(), facts, tool, &[]);
                    d.subs = miss_reqs
                        .iter()
                        .enumerate()
                        .map(|(i, r)| {
                            crate::policy::decide::SubDecision::refused(
                                i,
                                r,
                                format!("entities: {e}"),
                            )
                        })
                        .collect();
                    d
                }
            }
        };
        let mut fresh = std::mem::take(&mut d.subs).into_iter();
        let mut subs = Vec::with_capacity(reqs.len());
        let mut to_cache: Vec<(String, CachedDecision)> = Vec::new();
        for (index, ((r, key), hit)) in reqs.iter().zip(&keys).zip(hits).enumerate() {
            let sub = match hit {
                Some(h) => crate::policy::decide::SubDecision {
                    index,
                    action: r.action.clone(),
                    subject: r.subject.clone(),
                    allowed: h.allowed,
                    gating: r.gating,
                    policy_ids: h.policy_ids,
                    errors: Vec::new(),
                    default_deny: h.default_deny,
                    duration_us: 0,
                },
                None => match fresh.next() {
                    Some(sub) => {
                        if let Some(k) = key
                            && sub.errors.is_empty()
                        {
                            to_cache.push((
                                k.clone(),
                                CachedDecision {
                                    allowed: sub.allowed,
                                    policy_ids: sub.policy_ids.clone(),
                                    default_deny: sub.default_deny,
                                },
                            ));
                        }
                        crate::policy::decide::SubDecision { index, ..sub }
                    }
                    None => crate::policy::decide::SubDecision::refused(
                        index,
                        r,
                        "no decision was made".into(),
                    ),
                },
            };
            subs.push(sub);
        }
        if !to_cache.is_empty()
            && let Ok(mut cache) = self.decision_cache.lock()
        {
            if cache.set != snap.sha256 || cache.entries.len() + to_cache.len() > DECISION_CACHE_MAX
            {
                cache.entries.clear();
                cache.set.clone_from(&snap.sha256);
            }
            cache.entries.extend(to_cache);
        }
        d.subs = subs;
        d
    }

    /// Entries in the decision cache (for tests of its bounds).
    #[doc(hidden)]
    pub fn decision_cache_len(&self) -> usize {
        self.decision_cache
            .lock()
            .map_or(0, |cache| cache.entries.len())
    }

    /// The decision-signature plan of a snapshot (cached per policy-set hash).
    pub(crate) fn signature_plan(
        &self,
        snap: &PolicySnapshot,
    ) -> Arc<crate::policy::signature::SignaturePlan> {
        if let Ok(g) = self.signatures.lock()
            && let Some((sha, plan)) = g.as_ref()
            && *sha == snap.sha256
        {
            return Arc::clone(plan);
        }
        let plan = Arc::new(crate::policy::signature::SignaturePlan::analyse(&snap.set));
        if let Ok(mut g) = self.signatures.lock() {
            *g = Some((snap.sha256.clone(), Arc::clone(&plan)));
        }
        plan
    }

    /// Audit rows for entries a `find` withheld: one row per withheld path, carrying the
    /// decision of its signature's sub-request and the `read` request of that path.
    pub(crate) fn audit_withheld(
        &self,
        snap: &PolicySnapshot,
        d: &Decision,
        facts: &WorkspaceFacts,
        reqs: &[SubRequest],
        paths: &[(String, usize)],
        session: &Session,
    ) {
        let Some(store) = &self.store else { return };
        if paths.is_empty() {
            return;
        }
        let shadow = self.shadow_decision(facts, &d.tool, reqs);
        let at = RowContext::now(snap, facts, session);
        let rows: Vec<DecisionRow> = paths
            .iter()
            .enumerate()
            .filter_map(|(i, (p, slot))| d.subs.get(*slot).map(|sub| (i, p, slot, sub)))
            .map(|(i, p, slot, sub)| {
                let req = crate::request::path_request("read", p, "", session);
                let sub = crate::policy::decide::SubDecision {
                    index: i,
                    action: "read".into(),
                    subject: p.clone(),
                    ..sub.clone()
                };
                let mut row = self.audit_row(&at, d, &sub, Some(&req));
                if let Some(sh) = shadow.as_ref().and_then(|sh| sh.subs.get(*slot)) {
                    row.shadow_decision = Some(if sh.allowed { "allow" } else { "deny" }.into());
                    row.shadow_policy_ids = Some(sh.policy_ids.clone());
                }
                row
            })
            .collect();
        crate::audit::append(store, rows, &d.decision_id, false);
    }

    /// Writes decision rows (every sub-request, capability requests included), with the
    /// shadow set's answer beside each when there is one. A store failure is logged and never
    /// turns a deny into an allow.
    fn audit(
        &self,
        snap: &PolicySnapshot,
        d: &Decision,
        shadow: Option<&Decision>,
        facts: &WorkspaceFacts,
        reqs: &[SubRequest],
        session: &Session,
    ) {
        let Some(store) = &self.store else { return };
        let at = RowContext::now(snap, facts, session);
        let rows = rows_with_shadow(
            &self.config.profiles,
            &self.config.redaction.current(),
            &at,
            d,
            shadow,
            reqs,
        );
        // Allowed mutations are written ahead of the runner; everything else is group-committed.
        let write_ahead = d.allowed() && crate::audit::writes_ahead(&d.tool);
        crate::audit::append(store, rows, &d.decision_id, write_ahead);
    }

    /// Builds and decides the requests of a call on a workspace; `Err` is the refusal.
    pub(crate) async fn authorize(
        &self,
        snap: &PolicySnapshot,
        ws: &WorkspaceRuntime,
        call: &ToolCall,
        session: &Session,
        process: Option<&ProcessFacts>,
    ) -> Result<Decision, ToolError> {
        let mut reqs = build_requests(call, session, process)?;
        crate::links::fill_links_async(&ws.root, &mut reqs).await?;
        // Secrets in a command line never reach the log or the caller's error text; Cedar
        // still decides on the real context.
        for r in &mut reqs {
            if let std::borrow::Cow::Owned(red) = self.config.redaction.text(&r.subject) {
                r.subject = red;
            }
        }
        let decision = self.decide_reqs(snap, &ws.facts, call.tool(), &reqs, session, Audit::All);
        if decision.allowed() {
            Ok(decision)
        } else {
            Err(decision.to_error(snap))
        }
    }

    /// Resolves the workspace of `call` and decides the call on it (audited): the handler's
    /// [`Authorized`] value, or the refusal.
    async fn authorize_on<'a>(
        &'a self,
        snap: &'a Arc<PolicySnapshot>,
        workspace_id: &str,
        call: &ToolCall,
        session: &'a Session,
    ) -> Result<Authorized<'a>, ToolError> {
        let ws = self.workspace(workspace_id)?;
        let decision = self.authorize(snap, ws, call, session, None).await?;
        Ok(Authorized::new(self, snap, ws, session, decision))
    }

    /// Decides a call a human may have to confirm (`apply_patch`, `exec_command`): its own
    /// requests, then, when `confirm`, one `confirm` request per distinct sub-request; a held
    /// call is refused with its hold's `APPROVAL_REQUIRED`. A granted hold being resumed is not
    /// asked again (`confirm` false).
    pub(crate) async fn authorize_held<'a>(
        &'a self,
        snap: &'a Arc<PolicySnapshot>,
        workspace_id: &str,
        call: &ToolCall,
        session: &'a Session,
        confirm: bool,
    ) -> Result<Authorized<'a>, ToolError> {
        let ws = self.workspace(workspace_id)?;
        let decision = self.authorize(snap, ws, call, session, None).await?;
        if confirm && self.confirm_holds(snap, ws, call, session).await? {
            return Err(self.hold(ws, call, session).await);
        }
        Ok(Authorized::new(self, snap, ws, session, decision))
    }

    /// `read` with `paths`: each path authorized and read exactly as a single `read` of it (its
    /// own decision and audit row); a path's refusal or failure becomes that file's `error`, so
    /// the call itself fails only on invalid arguments or an unknown workspace.
    async fn read_many(
        &self,
        snap: &Arc<PolicySnapshot>,
        p: &crate::wire::ReadParams,
        session: &Session,
    ) -> Result<serde_json::Value, ToolError> {
        crate::request::check_read_args(p)?;
        self.workspace(&p.workspace_id)?;
        let paths = p.paths.as_deref().unwrap_or_default();
        let mut files = Vec::with_capacity(paths.len());
        for path in paths {
            let one = crate::wire::ReadParams {
                path: Some(path.clone()),
                paths: None,
                ..p.clone()
            };
            let call = ToolCall::Read(one.clone());
            let r = match self
                .authorize_on(snap, &p.workspace_id, &call, session)
                .await
            {
                Ok(a) => a.read(&one).await,
                Err(e) => Err(e),
            };
            files.push(match r {
                Ok(v) => v,
                Err(mut e) => {
                    // A file's error text passes the redactor as a call's error does.
                    if let std::borrow::Cow::Owned(red) = self.config.redaction.text(&e.message) {
                        e.message = red;
                    }
                    let body = serde_json::to_value(&e).unwrap_or_else(
                        |_| serde_json::json!({"code": e.code.as_str(), "message": e.message}),
                    );
                    serde_json::json!({"path": path, "error": body})
                }
            });
        }
        Ok(serde_json::json!({ "files": files }))
    }

    /// Serves one tool call. The result is the tool's result object.
    pub async fn call(
        &self,
        session: &Session,
        call: ToolCall,
    ) -> Result<serde_json::Value, ToolError> {
        // Calls in flight finish under the snapshot they started with.
        let snap = self.policy.snapshot();
        let result = match &call {
            ToolCall::WorkspaceInfo(p) => {
                let server = info::server_info(&self.svc, &snap, self.policy.last_rejected());
                match p.workspace_id.as_deref().filter(|s| !s.is_empty()) {
                    None => Ok(server),
                    Some(id) => self
                        .authorize_on(&snap, id, &call, session)
                        .await?
                        .workspace_info(server),
                }
            }
            ToolCall::Read(p) if p.paths.is_some() => self.read_many(&snap, p, session).await,
            ToolCall::Read(p) => {
                self.authorize_on(&snap, &p.workspace_id, &call, session)
                    .await?
                    .read(p)
                    .await
            }
            ToolCall::Find(p) => {
                self.authorize_on(&snap, &p.workspace_id, &call, session)
                    .await?
                    .find(p)
                    .await
            }
            ToolCall::Grep(p) => {
                self.authorize_on(&snap, &p.workspace_id, &call, session)
                    .await?
                    .grep(p)
                    .await
            }
            ToolCall::FindFiles(p) => {
                self.authorize_on(&snap, &p.workspace_id, &call, session)
                    .await?
                    .find_files(p)
                    .await
            }
            ToolCall::OperationStatus(p) => {
                let (row, ws) = self.operation_target(session, p)?;
                let decision = self.authorize(&snap, ws, &call, session, None).await?;
                Authorized::new(self, &snap, ws, session, decision).operation_status(&row)
            }
            ToolCall::ApplyPatch(p) => {
                // A check writes nothing, so it is never held.
                let confirm = !p.check_only.unwrap_or(false);
                self.authorize_held(&snap, &p.workspace_id, &call, session, confirm)
                    .await?
                    .apply_patch(p, None)
                    .await
            }
            ToolCall::ApprovalCreate(p) => {
                let held = crate::gateway::approvals::held_of(p)?;
                self.authorize_on(&snap, held.workspace_id().unwrap_or(""), &call, session)
                    .await?
                    .approval_create(&held)
                    .await
            }
            ToolCall::ApprovalResolve(p) => {
                let (row, ws) = self.served_hold(&p.approval_id)?;
                let decision = self.decide_resolve(&snap, session, &call, p, &row, ws)?;
                Authorized::new(self, &snap, ws, session, decision).approval_resolve(p, &row)
            }
            ToolCall::OperationResume(p) => self.operation_resume(&snap, session, p).await,
            ToolCall::ExecCommand(p) => {
                self.authorize_held(&snap, &p.workspace_id, &call, session, true)
                    .await?
                    .exec_command(p)
                    .await
            }
            ToolCall::WriteStdin(p) => {
                self.authorize_process(&snap, session, &call, &p.process_id)
                    .await?
                    .write_stdin(p)
                    .await
            }
            ToolCall::ReadProcess(p) => {
                self.authorize_process(&snap, session, &call, &p.process_id)
                    .await?
                    .read_process(p)
                    .await
            }
            ToolCall::ProcessStatus(p) => {
                self.authorize_process(&snap, session, &call, &p.process_id)
                    .await?
                    .process_status(p)
                    .await
            }
            ToolCall::ProcessResize(p) => {
                self.authorize_process(&snap, session, &call, &p.process_id)
                    .await?
                    .process_resize(p)
                    .await
            }
            ToolCall::TerminateProcess(p) => {
                self.authorize_process(&snap, session, &call, &p.process_id)
                    .await?
                    .terminate_process(p)
                    .await
            }
        }
        .map_err(|mut e| {
            // Every error text the caller gets passes the redactor (a spawn error may quote
            // the command).
            if let std::borrow::Cow::Owned(red) = self.config.redaction.text(&e.message) {
                e.message = red;
            }
            e
        })?;
        Ok(result)
    }
}
