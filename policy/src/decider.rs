//! The one way to a decision: [`Decider`] owns the workspace entity cache, the decision cache,
//! the shadow set's answers, the decision-signature plan and the [`AuditSink`]; every decision it
//! makes hands its rows to the sink (quiet probes as [`RowKind::Probe`]). Cedar evaluation
//! itself (`decide.rs`) is private to this crate. When a workspace's entities cannot be built,
//! every sub-request is refused with the reason (fail closed, one behaviour everywhere).

use crate::config::Profile;
use crate::decide::{Decision, Prepared, SubDecision, decide, decide_prepared, workspace_entities};
use crate::load::{PolicySnapshot, PolicyStore};
use crate::request::{Session, SubRequest, WorkspaceFacts};
use crate::rows::{AuditSink, RowContext, RowKind, row_of, rows_with_shadow, with_shadow};
use crate::signature::SignaturePlan;
use cedar_policy::Entities;
use codespace_store::DecisionRow;
use std::any::Any;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Where the decider's policy sets come from.
#[derive(Debug)]
enum Source {
    /// The live store (hot reload, the shadow set).
    Live(Arc<PolicyStore>),
    /// One fixed set, no shadow (the operator CLI, the policy tools, tests).
    Fixed(Arc<PolicySnapshot>),
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

/// Entries kept in the decision cache before it is cleared (an entry is a few hundred bytes:
/// a full cache is a few MB). Unit tests fill a small one: the bound is the same code.
#[cfg(not(test))]
const DECISION_CACHE_MAX: usize = 16_384;
#[cfg(test)]
const DECISION_CACHE_MAX: usize = 256;

/// Answers derived from quiet probes (e.g. `workspace_info`'s capability set), kept for one
/// policy set: caching under a new set drops the old set's answers.
#[derive(Default)]
struct ProbeMemo {
    set: String,
    entries: HashMap<String, Arc<dyn Any + Send + Sync>>,
}

impl std::fmt::Debug for ProbeMemo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProbeMemo")
            .field("set", &self.set)
            .field("entries", &self.entries.len())
            .finish()
    }
}

/// Answers kept in the probe memo before it is cleared (one per workspace, session and
/// probe kind in practice).
const PROBE_MEMO_MAX: usize = 1024;

/// The decider: see the module documentation.
#[derive(Debug)]
pub struct Decider {
    source: Source,
    profiles: BTreeMap<String, Profile>,
    sink: Arc<dyn AuditSink>,
    entity_cache: Mutex<HashMap<String, (String, Arc<Prepared>)>>,
    signatures: Mutex<Option<(String, Arc<SignaturePlan>)>>,
    decision_cache: Mutex<DecisionCache>,
    probe_memo: Mutex<ProbeMemo>,
    /// Sub-requests asked of the decider (cache hits included): a test counter.
    asked: AtomicU64,
}

impl Decider {
    /// A decider over the live policy store, for the operator's profile tree.
    pub fn new(
        policy: Arc<PolicyStore>,
        profiles: BTreeMap<String, Profile>,
        sink: Arc<dyn AuditSink>,
    ) -> Decider {
        Decider::with_source(Source::Live(policy), profiles, sink)
    }

    /// A decider over one fixed policy set (no shadow set).
    pub fn over(
        snap: Arc<PolicySnapshot>,
        profiles: BTreeMap<String, Profile>,
        sink: Arc<dyn AuditSink>,
    ) -> Decider {
        Decider::with_source(Source::Fixed(snap), profiles, sink)
    }

    fn with_source(
        source: Source,
        profiles: BTreeMap<String, Profile>,
        sink: Arc<dyn AuditSink>,
    ) -> Decider {
        Decider {
            source,
            profiles,
            sink,
            entity_cache: Mutex::new(HashMap::new()),
            signatures: Mutex::new(None),
            decision_cache: Mutex::new(DecisionCache::default()),
            probe_memo: Mutex::new(ProbeMemo::default()),
            asked: AtomicU64::new(0),
        }
    }

    /// The policy set in force now.
    pub fn snapshot(&self) -> Arc<PolicySnapshot> {
        match &self.source {
            Source::Live(p) => p.snapshot(),
            Source::Fixed(s) => Arc::clone(s),
        }
    }

    /// The shadow set in force, when there is one.
    pub fn shadow(&self) -> Option<Arc<PolicySnapshot>> {
        match &self.source {
            Source::Live(p) => p.shadow(),
            Source::Fixed(_) => None,
        }
    }

    /// The profile tree decisions are made for.
    pub fn profiles(&self) -> &BTreeMap<String, Profile> {
        &self.profiles
    }

    /// Decides `reqs` of a call on `tool` under `snap` and hands the rows to the sink, with the
    /// shadow set's answer beside each.
    pub fn decide(
        &self,
        snap: &PolicySnapshot,
        facts: &WorkspaceFacts,
        tool: &str,
        reqs: &[SubRequest],
        session: &Session,
    ) -> Decision {
        let d = self.decide_cached(snap, facts, tool, reqs);
        self.audit(snap, &d, facts, reqs, session);
        d
    }

    /// Decides `reqs` as a quiet probe: its answer is reported or shapes a listing; its rows are
    /// handed to the sink as [`RowKind::Probe`].
    pub fn probe(
        &self,
        snap: &PolicySnapshot,
        facts: &WorkspaceFacts,
        tool: &str,
        reqs: &[SubRequest],
        session: &Session,
    ) -> Decision {
        let d = self.decide_cached(snap, facts, tool, reqs);
        self.hand_probe(snap, &d, facts, reqs, session);
        d
    }

    /// A probe decided on this thread without the decision cache (large batches, which callers
    /// run on a blocking pool).
    pub fn probe_uncached(
        &self,
        snap: &PolicySnapshot,
        facts: &WorkspaceFacts,
        tool: &str,
        reqs: &[SubRequest],
        session: &Session,
    ) -> Decision {
        self.count(reqs.len());
        let d = self.evaluate(snap, facts, tool, reqs);
        self.hand_probe(snap, &d, facts, reqs, session);
        d
    }

    fn hand_probe(
        &self,
        snap: &PolicySnapshot,
        d: &Decision,
        facts: &WorkspaceFacts,
        reqs: &[SubRequest],
        session: &Session,
    ) {
        if !self.sink.keeps(RowKind::Probe) {
            return;
        }
        let at = RowContext::now(snap, facts, session);
        let rows = rows_with_shadow(&self.profiles, &at, d, None, reqs);
        self.sink.record(rows, &d.decision_id, RowKind::Probe);
    }

    /// Hands the rows of `d` (decided by [`Decider::probe`]) to the sink as a call's rows, with
    /// the shadow set's answer: a probe whose answer turned out to matter.
    pub fn audit(
        &self,
        snap: &PolicySnapshot,
        d: &Decision,
        facts: &WorkspaceFacts,
        reqs: &[SubRequest],
        session: &Session,
    ) {
        let shadow = self.shadow_decision(facts, &d.tool, reqs);
        let kind = RowKind::Call {
            tool: &d.tool,
            allowed: d.allowed(),
        };
        if !self.sink.keeps(kind) {
            return;
        }
        let at = RowContext::now(snap, facts, session);
        let rows = rows_with_shadow(&self.profiles, &at, d, shadow.as_ref(), reqs);
        self.sink.record(rows, &d.decision_id, kind);
    }

    /// Rows for entries a listing withheld: one row per withheld path, carrying the decision of
    /// its signature's sub-request (`slot`) and the `read` request of that path.
    pub fn audit_withheld(
        &self,
        snap: &PolicySnapshot,
        d: &Decision,
        facts: &WorkspaceFacts,
        reqs: &[SubRequest],
        paths: &[(String, usize)],
        session: &Session,
    ) {
        if !self.sink.keeps(RowKind::Withheld) || paths.is_empty() {
            return;
        }
        let shadow = self.shadow_decision(facts, &d.tool, reqs);
        let at = RowContext::now(snap, facts, session);
        let rows: Vec<DecisionRow> = paths
            .iter()
            .enumerate()
            .filter_map(|(i, (p, slot))| d.subs.get(*slot).map(|sub| (i, p, slot, sub)))
            .map(|(i, p, slot, sub)| {
                let req = crate::request::path_request(crate::Action::READ, p, "", session);
                let sub = SubDecision {
                    index: i,
                    action: crate::Action::READ,
                    subject: p.clone(),
                    ..sub.clone()
                };
                let mut row = row_of(&self.profiles, &at, d, &sub, Some(&req));
                with_shadow(&mut row, shadow.as_ref().and_then(|sh| sh.subs.get(*slot)));
                row
            })
            .collect();
        self.sink.record(rows, &d.decision_id, RowKind::Withheld);
    }

    /// The redacted rows of `d` (a probe that shapes the sandbox of the call decided by `of`),
    /// filed under `of`'s decision id right after its own rows, for the caller to queue with
    /// the command it starts. None when the sink keeps no call rows.
    pub fn shaping_rows(
        &self,
        snap: &PolicySnapshot,
        of: &Decision,
        d: &Decision,
        facts: &WorkspaceFacts,
        reqs: &[SubRequest],
        session: &Session,
    ) -> Vec<DecisionRow> {
        let kind = RowKind::Call {
            tool: &of.tool,
            allowed: of.allowed(),
        };
        if !self.sink.keeps(kind) || d.subs.is_empty() {
            return Vec::new();
        }
        let shadow = self.shadow_decision(facts, &d.tool, reqs);
        let at = RowContext::now(snap, facts, session);
        let first = of.subs.len();
        rows_with_shadow(&self.profiles, &at, d, shadow.as_ref(), reqs)
            .into_iter()
            .enumerate()
            .map(|(i, mut row)| {
                row.decision_id.clone_from(&of.decision_id);
                row.sub_index = i64::try_from(first + i).unwrap_or(i64::MAX);
                self.sink.redact(&mut row);
                row
            })
            .collect()
    }

    /// The decision of the shadow set on the same requests, when one is loaded: logged beside
    /// the live one, never enforced.
    fn shadow_decision(
        &self,
        facts: &WorkspaceFacts,
        tool: &str,
        reqs: &[SubRequest],
    ) -> Option<Decision> {
        let shadow = self.shadow()?;
        Some(self.decide_cached(&shadow, facts, tool, reqs))
    }

    /// The workspace's shared entities and request pieces under `snap`, built once per
    /// policy-set hash (the shadow set has its own slot, so live and shadow decisions do not
    /// evict each other).
    fn entities(
        &self,
        snap: &PolicySnapshot,
        facts: &WorkspaceFacts,
    ) -> Result<Arc<Prepared>, String> {
        if let Ok(cache) = self.entity_cache.lock() {
            let current = |k: &str| cache.get(k).filter(|(sha, _)| *sha == snap.sha256);
            if let Some((_, ents)) = current(&facts.id).or_else(|| current(&shadow_key(&facts.id)))
            {
                return Ok(Arc::clone(ents));
            }
        }
        let ents = Arc::new(Prepared::new(
            workspace_entities(snap, &self.profiles, facts)?,
            facts,
        ));
        let key = match self.shadow() {
            Some(sh) if sh.sha256 == snap.sha256 => shadow_key(&facts.id),
            _ => facts.id.clone(),
        };
        if let Ok(mut cache) = self.entity_cache.lock() {
            cache.insert(key, (snap.sha256.clone(), Arc::clone(&ents)));
        }
        Ok(ents)
    }

    /// Evaluates `reqs` (no decision cache); when the workspace's entities cannot be built,
    /// every sub-request is refused with the reason.
    pub(crate) fn evaluate(
        &self,
        snap: &PolicySnapshot,
        facts: &WorkspaceFacts,
        tool: &str,
        reqs: &[SubRequest],
    ) -> Decision {
        if reqs.is_empty() {
            return decide(snap, &Entities::empty(), facts, tool, &[]);
        }
        match self.entities(snap, facts) {
            Ok(base) => decide_prepared(snap, &base, facts, tool, reqs),
            Err(e) => {
                let mut d = decide(snap, &Entities::empty(), facts, tool, &[]);
                d.subs = reqs
                    .iter()
                    .enumerate()
                    .map(|(i, r)| SubDecision::refused(i, r, format!("entities: {e}")))
                    .collect();
                d
            }
        }
    }

    /// Counts `n` sub-requests asked.
    fn count(&self, n: usize) {
        self.asked
            .fetch_add(u64::try_from(n).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// Evaluation behind a cache of error-free sub-decisions. The key holds everything a
    /// decision can depend on: the policy-set hash, the workspace (its entities are fixed for
    /// the decider's life), the tool, the action, the patch kind, the whole context, and the
    /// path's decision signature (see [`crate::signature`]); a set whose signature is
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
        self.count(reqs.len());
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
        // The workspace's entities are only needed when something must be evaluated.
        let mut d = self.evaluate(snap, facts, tool, &miss_reqs);
        let mut fresh = std::mem::take(&mut d.subs).into_iter();
        let mut subs = Vec::with_capacity(reqs.len());
        let mut to_cache: Vec<(String, CachedDecision)> = Vec::new();
        for (index, ((r, key), hit)) in reqs.iter().zip(&keys).zip(hits).enumerate() {
            let sub = match hit {
                Some(h) => SubDecision {
                    index,
                    action: r.action,
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
                        SubDecision { index, ..sub }
                    }
                    None => SubDecision::refused(index, r, "no decision was made".into()),
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

    /// The answer `derive` computes from quiet probes under `snap`, kept per policy set under
    /// `key`, which must name everything else the answer depends on (workspace facts, session,
    /// probe kind). A reload (a new set hash) drops every kept answer. `derive` runs outside
    /// the memo's lock; two callers racing on a new key both derive, one answer is kept.
    pub fn memo<T: Any + Send + Sync>(
        &self,
        snap: &PolicySnapshot,
        key: &str,
        derive: impl FnOnce() -> T,
    ) -> Arc<T> {
        if let Ok(memo) = self.probe_memo.lock()
            && memo.set == snap.sha256
            && let Some(hit) = memo.entries.get(key)
            && let Ok(hit) = Arc::clone(hit).downcast::<T>()
        {
            return hit;
        }
        let answer = Arc::new(derive());
        if let Ok(mut memo) = self.probe_memo.lock() {
            if memo.set != snap.sha256 || memo.entries.len() >= PROBE_MEMO_MAX {
                memo.entries.clear();
                memo.set.clone_from(&snap.sha256);
            }
            memo.entries.insert(
                key.to_string(),
                Arc::clone(&answer) as Arc<dyn Any + Send + Sync>,
            );
        }
        answer
    }

    /// Sub-requests asked of the decider so far, cache hits included (for tests that a cached
    /// answer asks nothing).
    #[doc(hidden)]
    pub fn asked(&self) -> u64 {
        self.asked.load(Ordering::Relaxed)
    }

    /// Entries in the decision cache (for tests of its bounds).
    #[doc(hidden)]
    pub fn decision_cache_len(&self) -> usize {
        self.decision_cache
            .lock()
            .map_or(0, |cache| cache.entries.len())
    }

    /// The decision-signature plan of a snapshot (cached per policy-set hash).
    pub fn signature_plan(&self, snap: &PolicySnapshot) -> Arc<SignaturePlan> {
        if let Ok(g) = self.signatures.lock()
            && let Some((sha, plan)) = g.as_ref()
            && *sha == snap.sha256
        {
            return Arc::clone(plan);
        }
        let plan = Arc::new(SignaturePlan::analyse(&snap.set));
        if let Ok(mut g) = self.signatures.lock() {
            *g = Some((snap.sha256.clone(), Arc::clone(&plan)));
        }
        plan
    }

    /// Decides one connection of the egress proxy under the live set (and the shadow set,
    /// logged only), and hands its row to the sink.
    pub fn decide_connection(
        &self,
        facts: &WorkspaceFacts,
        session: &Session,
        req: SubRequest,
    ) -> (Arc<PolicySnapshot>, Decision) {
        let snap = self.snapshot();
        let reqs = [req];
        let decision = self.evaluate(&snap, facts, CONNECT, &reqs);
        let shadow = self
            .shadow()
            .map(|sh| self.evaluate(&sh, facts, CONNECT, &reqs));
        self.hand_connection(
            &snap,
            &decision,
            shadow.as_ref(),
            facts,
            &reqs,
            session,
            None,
        );
        (snap, decision)
    }

    /// The name phase of a connection: `name_req` (no `ip_class`) asked once per request of
    /// `variants` (one per address class it could resolve to). `None` when any variant is
    /// allowed (the name may be looked up; no row is written). Otherwise the refusal, audited
    /// as one row for `name_req` naming the policies that refused every variant (none: the
    /// default deny).
    pub fn decide_name(
        &self,
        facts: &WorkspaceFacts,
        session: &Session,
        name_req: SubRequest,
        variants: &[SubRequest],
    ) -> Option<(Arc<PolicySnapshot>, Decision)> {
        let snap = self.snapshot();
        let decided = self.evaluate(&snap, facts, CONNECT, variants);
        if decided.subs.iter().any(|s| s.allowed) || decided.subs.is_empty() {
            return None;
        }
        // The policies that refused every class (e.g. a forbid on the host) are the row's
        // determining policies; when none refused them all, no permit covers any class: the
        // default deny.
        let mut sub = SubDecision::refused(0, &name_req, String::new());
        sub.errors.clear();
        sub.policy_ids = decided
            .subs
            .first()
            .map(|s| s.policy_ids.clone())
            .unwrap_or_default();
        for s in &decided.subs {
            sub.policy_ids.retain(|id| s.policy_ids.contains(id));
            for e in &s.errors {
                if !sub.errors.contains(e) {
                    sub.errors.push(e.clone());
                }
            }
            sub.duration_us = sub.duration_us.saturating_add(s.duration_us);
        }
        sub.default_deny = sub.policy_ids.is_empty() && sub.errors.is_empty();
        let decision = Decision {
            subs: vec![sub],
            ..decided
        };
        self.hand_connection(&snap, &decision, None, facts, &[name_req], session, None);
        Some((snap, decision))
    }

    /// A name the name phase allowed did not resolve: audited as a refusal of `name_req` with
    /// `message` and the row's `reason`; returns the decision id of that row.
    pub fn refuse_unresolved(
        &self,
        facts: &WorkspaceFacts,
        session: &Session,
        name_req: SubRequest,
        message: &str,
        reason: String,
    ) -> String {
        let snap = self.snapshot();
        let mut d = decide(&snap, &Entities::empty(), facts, CONNECT, &[]);
        d.subs = vec![SubDecision::refused(0, &name_req, message.to_string())];
        self.hand_connection(&snap, &d, None, facts, &[name_req], session, Some(reason));
        d.decision_id
    }

    #[allow(clippy::too_many_arguments)]
    fn hand_connection(
        &self,
        snap: &PolicySnapshot,
        d: &Decision,
        shadow: Option<&Decision>,
        facts: &WorkspaceFacts,
        reqs: &[SubRequest],
        session: &Session,
        reason: Option<String>,
    ) {
        if !self.sink.keeps(RowKind::Connection) {
            return;
        }
        let at = RowContext::now(snap, facts, session);
        let mut rows = rows_with_shadow(&self.profiles, &at, d, shadow, reqs);
        if let Some(reason) = reason {
            for row in &mut rows {
                row.reason = Some(reason.clone());
            }
        }
        self.sink.record(rows, &d.decision_id, RowKind::Connection);
    }
}

/// The entity cache's slot of a workspace's entities under the shadow set.
fn shadow_key(workspace: &str) -> String {
    format!("{workspace}\0shadow")
}

/// The tool of the egress proxy's decisions.
const CONNECT: &str = "network_connect";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::{PolicySource, compile};
    use crate::request::path_request;

    /// A sink that keeps every batch with its kind.
    #[derive(Debug, Default)]
    struct Kinds(Mutex<Vec<(String, usize)>>);

    impl AuditSink for Kinds {
        fn keeps(&self, _: RowKind<'_>) -> bool {
            true
        }
        fn redact(&self, row: &mut DecisionRow) {
            row.subject = "[redacted]".into();
        }
        fn record(&self, rows: Vec<DecisionRow>, _: &str, kind: RowKind<'_>) {
            let kind = match kind {
                RowKind::Call { tool, allowed } => format!("call {tool} {allowed}"),
                other => format!("{other:?}").to_lowercase(),
            };
            self.0.lock().unwrap().push((kind, rows.len()));
        }
    }

    fn facts() -> WorkspaceFacts {
        WorkspaceFacts {
            id: "w".into(),
            profile: "read-only".into(),
            environment: "local".into(),
            environment_kind: crate::config::EnvironmentKind::Host,
            environment_transport: crate::config::EnvironmentTransport::InProcess,
            environment_host: String::new(),
            sandbox: crate::facts::SandboxFact::Enforced,
            network_enforcement: crate::facts::NetworkEnforcement::Enforced,
            network: crate::config::Network::Restricted,
            approvals: crate::config::Approvals::Off,
            server_owned: vec![],
            workspace_sandbox: crate::config::SandboxMode::Required,
            secret_masking: crate::facts::MaskingFact::Enforced,
        }
    }

    #[test]
    fn every_decision_hands_its_rows_to_the_sink() {
        let snap = Arc::new(compile(PolicySource::Embedded.read().unwrap()).unwrap());
        let sink = Arc::new(Kinds::default());
        let d = Decider::over(
            Arc::clone(&snap),
            crate::config::builtin_profiles(),
            Arc::clone(&sink) as Arc<dyn AuditSink>,
        );
        let s = Session::stdio();
        let read = [path_request(crate::Action::READ, "a.txt", "", &s)];
        let write = [path_request(
            crate::Action::APPLY_PATCH,
            "a.txt",
            "update",
            &s,
        )];
        assert!(d.decide(&snap, &facts(), "read", &read, &s).allowed());
        assert!(
            !d.decide(&snap, &facts(), "apply_patch", &write, &s)
                .allowed()
        );
        // A second identical decision comes from the cache and is audited all the same.
        assert!(d.decide(&snap, &facts(), "read", &read, &s).allowed());
        assert!(d.decision_cache_len() > 0);
        let probe = d.probe(&snap, &facts(), "read", &read, &s);
        d.audit(&snap, &probe, &facts(), &read, &s);
        let of = d.probe_uncached(&snap, &facts(), "exec_command", &read, &s);
        let shaped = d.shaping_rows(&snap, &of, &probe, &facts(), &read, &s);
        assert_eq!(shaped.len(), 1);
        assert_eq!(
            shaped[0].subject, "[redacted]",
            "shaping rows leave redacted"
        );
        assert_eq!(shaped[0].decision_id, of.decision_id);
        let kinds = sink.0.lock().unwrap().clone();
        let want: Vec<(String, usize)> = [
            ("call read true", 1),
            ("call apply_patch false", 1),
            ("call read true", 1),
            ("probe", 1),
            ("call read true", 1),
            ("probe", 1),
        ]
        .iter()
        .map(|(k, n)| ((*k).to_string(), *n))
        .collect();
        assert_eq!(kinds, want);
    }

    /// A decision evaluates its action's slice over only the action entities the slice can
    /// look up: an action named in a condition (not only in a scope) is among them, so an `in`
    /// on it answers as it does over every action entity.
    #[test]
    fn an_action_named_in_a_condition_is_in_the_store_of_a_sliced_decision() {
        let mut bundle = PolicySource::Embedded.read().unwrap();
        bundle.files.push(crate::load::SourceFile {
            name: "base/zz-literal.cedar".into(),
            text: r#"@id("test.literal")
@reason("an action literal in a condition")
forbid (principal, action == CodeSpace::Action::"read", resource)
when { CodeSpace::Action::"exec_command" in CodeSpace::Action::"proc_spawn" && resource.path == "lit.txt" };
"#
            .into(),
        });
        let snap = Arc::new(compile(bundle).unwrap());
        assert_eq!(
            snap.slices.actions_needed("read").unwrap(),
            ["exec_command", "proc_spawn", "read"]
        );
        let d = Decider::over(
            Arc::clone(&snap),
            crate::config::builtin_profiles(),
            Arc::new(crate::NoRows),
        );
        let s = Session::stdio();
        let lit = [path_request(crate::Action::READ, "lit.txt", "", &s)];
        let other = [path_request(crate::Action::READ, "other.txt", "", &s)];
        let denied = d.probe_uncached(&snap, &facts(), "read", &lit, &s);
        assert!(!denied.allowed());
        assert_eq!(denied.subs[0].policy_ids, ["test.literal"]);
        assert!(denied.subs[0].errors.is_empty());
        assert!(
            d.probe_uncached(&snap, &facts(), "read", &other, &s)
                .allowed()
        );
    }

    /// A long-running server decides for many clients and paths: the decision cache and the
    /// probe memo stay within their bounds however many distinct requests they see.
    #[test]
    fn the_decision_cache_and_the_probe_memo_stay_bounded() {
        let snap = Arc::new(compile(PolicySource::Embedded.read().unwrap()).unwrap());
        let d = Decider::over(
            Arc::clone(&snap),
            crate::config::builtin_profiles(),
            Arc::new(crate::NoRows),
        );
        // Each client name is its own context, so its own cache key.
        for i in 0..DECISION_CACHE_MAX + 500 {
            let s = Session {
                client: format!("client-{i}"),
                transport: "stdio".into(),
                user: None,
            };
            let read = [path_request(crate::Action::READ, "a.txt", "", &s)];
            assert!(d.decide(&snap, &facts(), "read", &read, &s).allowed());
            assert!(d.decision_cache_len() <= DECISION_CACHE_MAX);
        }
        assert!(d.decision_cache_len() > 0);
        for i in 0..PROBE_MEMO_MAX + 10 {
            let kept = d.memo(&snap, &format!("k{i}"), || i);
            assert_eq!(*kept, i);
            let memo = d.probe_memo.lock().unwrap();
            assert!(memo.entries.len() <= PROBE_MEMO_MAX);
        }
        // A kept answer is returned without deriving it again.
        let first = d.memo(&snap, "same", || 1_usize);
        let again = d.memo(&snap, "same", || 2_usize);
        assert_eq!((*first, *again), (1, 1));
    }
}
