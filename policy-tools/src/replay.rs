//! Replaying recorded decisions ([`RecordedRequest`], stored in every audit row) under another
//! policy set, through the same `Decider` the server uses; which way an answer flipped. `policy
//! diff` and `explain --decision-id` are built on it.

use codespace_policy::PolicySnapshot;
use codespace_policy::decide::SubDecision;
pub use codespace_policy::recorded::{RECORD_VERSION, RecordedRequest, ancestors};
use codespace_policy::{Decider, NoRows};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::Arc;

/// Re-decides recorded requests under one policy set, through one [`Decider`] (keeping no rows)
/// per distinct (workspace facts, profile chain), so the workspace entities are built once each.
#[derive(Debug)]
pub struct Replayer<'a> {
    snap: &'a PolicySnapshot,
    owned: Arc<PolicySnapshot>,
    deciders: HashMap<String, Decider>,
}

impl<'a> Replayer<'a> {
    /// A replayer for `snap`.
    pub fn new(snap: &'a PolicySnapshot) -> Replayer<'a> {
        Replayer {
            snap,
            owned: Arc::new(snap.clone()),
            deciders: HashMap::new(),
        }
    }

    /// The set it decides under.
    pub fn snapshot(&self) -> &PolicySnapshot {
        self.snap
    }

    /// The decision of `rec` under this set. Never fails: errors are denies with reasons.
    pub fn decide(&mut self, rec: &RecordedRequest) -> SubDecision {
        let key = serde_json::to_string(&(&rec.workspace, &rec.ancestors)).unwrap_or_default();
        let owned = Arc::clone(&self.owned);
        let decider = self.deciders.entry(key).or_insert_with(|| {
            Decider::over(Arc::clone(&owned), rec.profile_tree(), Arc::new(NoRows))
        });
        let d = decider.probe_uncached(
            &owned,
            &rec.workspace,
            &rec.tool,
            std::slice::from_ref(&rec.request),
            &codespace_policy::request::Session::stdio(),
        );
        d.subs
            .into_iter()
            .next()
            .unwrap_or_else(|| SubDecision::refused(0, &rec.request, "no decision was made".into()))
    }
}

/// The policies whose part changed between two answers to one request: `+id` now determines,
/// `-id` no longer does; `(default deny)` / `(evaluation error)` when no policy id changed.
pub fn changed_policies(before: &SubDecision, after: &SubDecision) -> Vec<String> {
    let mut out: Vec<String> = after
        .policy_ids
        .iter()
        .filter(|id| !before.policy_ids.contains(id))
        .map(|id| format!("+{id}"))
        .chain(
            before
                .policy_ids
                .iter()
                .filter(|id| !after.policy_ids.contains(id))
                .map(|id| format!("-{id}")),
        )
        .collect();
    if out.is_empty() {
        out.push(if !after.errors.is_empty() || !before.errors.is_empty() {
            "(evaluation error)".into()
        } else {
            "(default deny)".into()
        });
    }
    out.sort();
    out
}

/// Which way a changed answer moves access.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Flip {
    /// Less access than before (allow → deny).
    Narrowing,
    /// More access than before (deny → allow).
    Widening,
}

impl Flip {
    /// The direction of a change from `before` to `after` on `action`; `None` when the answer
    /// is the same. On `confirm` a permit means *hold*, so the polarity is reversed there.
    pub fn of(action: &str, before: bool, after: bool) -> Option<Flip> {
        if before == after {
            return None;
        }
        let more_access = if action == "confirm" { before } else { after };
        Some(if more_access {
            Flip::Widening
        } else {
            Flip::Narrowing
        })
    }

    /// `widening` / `narrowing`.
    pub fn as_str(self) -> &'static str {
        match self {
            Flip::Narrowing => "narrowing",
            Flip::Widening => "widening",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use codespace_policy::config::Profile;

    #[test]
    fn flips_and_confirm_polarity() {
        assert_eq!(Flip::of("read", false, true), Some(Flip::Widening));
        assert_eq!(Flip::of("read", true, false), Some(Flip::Narrowing));
        assert_eq!(Flip::of("read", true, true), None);
        assert_eq!(Flip::of("confirm", true, false), Some(Flip::Widening));
        assert_eq!(Flip::of("confirm", false, true), Some(Flip::Narrowing));
    }

    #[test]
    fn ancestors_follow_extends() {
        let mut p = codespace_policy::config::builtin_profiles();
        p.insert(
            "ci".into(),
            Profile {
                id: "ci".into(),
                extends: Some("workspace-write".into()),
                description: None,
            },
        );
        assert_eq!(ancestors(&p, "ci"), vec!["workspace-write", "read-only"]);
        assert!(ancestors(&p, "read-only").is_empty());
    }
}
