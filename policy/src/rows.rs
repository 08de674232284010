//! The audit rows of a decision and the sink they go to: one row per sub-decision, with its
//! recorded Cedar request and the shadow set's answer beside it. Rows leave here unredacted; the
//! [`AuditSink`] redacts them before anything is written.

use crate::config::Profile;
use crate::decide::{Decision, SubDecision};
use crate::load::PolicySnapshot;
use crate::recorded::RecordedRequest;
use crate::request::{Session, SubRequest, WorkspaceFacts};
use codespace_store::DecisionRow;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// What a batch of rows is about, so the sink knows how to write it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowKind<'a> {
    /// The rows of a call's decision on `tool` (`allowed`: every gating sub-request was).
    Call {
        /// The call's tool.
        tool: &'a str,
        /// Whether the decision allowed the call.
        allowed: bool,
    },
    /// A connection of the egress proxy (or a name it refused).
    Connection,
    /// Entries a listing withheld.
    Withheld,
    /// A quiet probe: its answer is reported or shapes a listing, nothing acts on it; today's
    /// engine writes no row for it.
    Probe,
}

/// Where decision rows go. The sink redacts (subject, errors, reason, the recorded request's
/// context strings and subject) before it writes; a failure to write is its to log and never
/// turns a deny into an allow.
pub trait AuditSink: Send + Sync + std::fmt::Debug {
    /// Whether the sink keeps rows of this kind at all (false: the decider builds none).
    fn keeps(&self, kind: RowKind<'_>) -> bool;
    /// Redacts one row in place.
    fn redact(&self, row: &mut DecisionRow);
    /// Redacts and writes the rows of one decision.
    fn record(&self, rows: Vec<DecisionRow>, decision_id: &str, kind: RowKind<'_>);
}

/// A sink that keeps nothing (the policy tools' re-decisions, benchmarks).
#[derive(Debug, Default)]
pub struct NoRows;

impl AuditSink for NoRows {
    fn keeps(&self, _: RowKind<'_>) -> bool {
        false
    }
    fn redact(&self, _: &mut DecisionRow) {}
    fn record(&self, _: Vec<DecisionRow>, _: &str, _: RowKind<'_>) {}
}

/// A sink that collects every row it is handed, probes included, unredacted (tests and tools).
#[derive(Debug, Default)]
pub struct CollectRows(Mutex<Vec<DecisionRow>>);

impl CollectRows {
    /// The rows collected so far (taken).
    pub fn take(&self) -> Vec<DecisionRow> {
        self.0
            .lock()
            .map(|mut g| std::mem::take(&mut *g))
            .unwrap_or_default()
    }
}

impl AuditSink for CollectRows {
    fn keeps(&self, _: RowKind<'_>) -> bool {
        true
    }
    fn redact(&self, _: &mut DecisionRow) {}
    fn record(&self, rows: Vec<DecisionRow>, _: &str, _: RowKind<'_>) {
        if let Ok(mut g) = self.0.lock() {
            g.extend(rows);
        }
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

/// The (unredacted) audit row of one sub-decision, with its recorded request.
pub(crate) fn row_of(
    profiles: &BTreeMap<String, Profile>,
    at: &RowContext<'_>,
    d: &Decision,
    sub: &SubDecision,
    req: Option<&SubRequest>,
) -> DecisionRow {
    let RowContext {
        snap,
        facts,
        session,
        at_ms,
    } = *at;
    let request = req.map(|r| RecordedRequest::new(profiles, facts, &d.tool, r).to_json());
    DecisionRow {
        decision_id: d.decision_id.clone(),
        at_ms,
        policy_set_sha256: d.policy_sha256.clone(),
        profile: d.profile.clone(),
        workspace: d.workspace.clone(),
        tool: d.tool.clone(),
        action: sub.action.to_string(),
        sub_index: i64::try_from(sub.index).unwrap_or(i64::MAX),
        subject: sub.subject.clone(),
        client: Some(session.client.clone()),
        transport: Some(session.transport.clone()),
        decision: if sub.allowed { "allow" } else { "deny" }.into(),
        policy_ids: sub.policy_ids.clone(),
        errors: sub.errors.clone(),
        default_deny: sub.default_deny,
        duration_us: i64::try_from(sub.duration_us).unwrap_or(i64::MAX),
        request,
        path: req.map(|r| r.path.clone()),
        kind: req.map(|r| r.kind.clone()).filter(|k| !k.is_empty()),
        reason: Some(sub.reason_text(snap, &d.profile)),
        shadow_decision: None,
        shadow_policy_ids: None,
        trace_parent: None,
        seq: 0,
        // Not stored with the row (the store reads it from the set's record); here for the
        // sinks that see the row before the store does (OTLP export).
        policy_signer: snap.signer.as_ref().map(|s| codespace_store::PolicySigner {
            principal: s.principal.clone(),
            key: s.key.clone(),
        }),
    }
}

/// Puts the shadow set's answer to the same sub-request beside a row.
pub(crate) fn with_shadow(row: &mut DecisionRow, shadow: Option<&SubDecision>) {
    if let Some(sh) = shadow {
        row.shadow_decision = Some(if sh.allowed { "allow" } else { "deny" }.into());
        row.shadow_policy_ids = Some(sh.policy_ids.clone());
    }
}

/// The rows of every sub-decision of `d`, each with the shadow set's answer beside it when there
/// is one.
pub(crate) fn rows_with_shadow(
    profiles: &BTreeMap<String, Profile>,
    at: &RowContext<'_>,
    d: &Decision,
    shadow: Option<&Decision>,
    reqs: &[SubRequest],
) -> Vec<DecisionRow> {
    d.subs
        .iter()
        .map(|s| {
            let mut row = row_of(profiles, at, d, s, reqs.get(s.index));
            with_shadow(&mut row, shadow.and_then(|sh| sh.subs.get(s.index)));
            row
        })
        .collect()
}
