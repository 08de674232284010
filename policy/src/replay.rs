//! Replayable decisions: the Cedar request of every audited sub-request is recorded (the
//! principal and its ancestors, the action, the resource facts, the workspace facts and the
//! context; redacted; never file contents, patch text or stdin) so it can be re-decided later
//! under another policy set, by the same `decide()` the server uses. `policy diff` and
//! `explain --decision-id` are built on it.

use crate::PolicySnapshot;
use crate::config::Profile;
use crate::decide::{SubDecision, decide, workspace_entities};
use crate::request::{SubRequest, WorkspaceFacts};
use cedar_policy::Entities;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};

/// The format version of a recorded request.
pub const RECORD_VERSION: u32 = 1;

/// One recorded Cedar request, as stored in the audit row's `request` column.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RecordedRequest {
    /// Format version ([`RECORD_VERSION`]).
    pub v: u32,
    /// The MCP tool of the call (`resource.tool`).
    pub tool: String,
    /// The principal's ancestors, nearest first (`workspace-write` → `["read-only"]`).
    #[serde(default)]
    pub ancestors: Vec<String>,
    /// The workspace facts (`workspace.profile` is the principal).
    pub workspace: WorkspaceFacts,
    /// The sub-request: action, path, kind, gating, context and the display subject.
    pub request: SubRequest,
}

/// The ancestors of `id` in a profile tree, nearest first (bounded by the tree's size).
pub fn ancestors(profiles: &BTreeMap<String, Profile>, id: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = profiles.get(id).and_then(|p| p.extends.clone());
    while let Some(c) = cur {
        if out.contains(&c) || out.len() > profiles.len() {
            break;
        }
        cur = profiles.get(&c).and_then(|p| p.extends.clone());
        out.push(c);
    }
    out
}

impl RecordedRequest {
    /// The record of one sub-request.
    pub fn new(
        profiles: &BTreeMap<String, Profile>,
        facts: &WorkspaceFacts,
        tool: &str,
        req: &SubRequest,
    ) -> RecordedRequest {
        RecordedRequest {
            v: RECORD_VERSION,
            tool: tool.to_string(),
            ancestors: ancestors(profiles, &facts.profile),
            workspace: facts.clone(),
            request: req.clone(),
        }
    }

    /// The stored form before redaction: the audit sink redacts every context string and the
    /// subject (`/request/context`, `/request/subject`) before the row is written.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// Reads a stored record.
    pub fn from_json(v: &Value) -> Result<RecordedRequest, String> {
        let mut rec: RecordedRequest =
            serde_json::from_value(v.clone()).map_err(|e| format!("recorded request: {e}"))?;
        crate::request::upgrade_recorded_context(&mut rec.request.context);
        if rec.v != RECORD_VERSION {
            return Err(format!(
                "recorded request: format version {} (this build reads {RECORD_VERSION})",
                rec.v
            ));
        }
        Ok(rec)
    }

    /// The profile chain of the principal, as a profile tree.
    pub fn profile_tree(&self) -> BTreeMap<String, Profile> {
        let mut chain = vec![self.workspace.profile.clone()];
        chain.extend(self.ancestors.iter().cloned());
        let mut tree = BTreeMap::new();
        for (i, id) in chain.iter().enumerate() {
            tree.insert(
                id.clone(),
                Profile {
                    id: id.clone(),
                    extends: chain.get(i + 1).cloned(),
                    description: None,
                },
            );
        }
        tree
    }
}

/// Re-decides recorded requests under one policy set; the workspace entities are built once
/// per distinct (workspace facts, profile chain).
#[derive(Debug)]
pub struct Replayer<'a> {
    snap: &'a PolicySnapshot,
    entities: HashMap<String, Result<Entities, String>>,
}

impl<'a> Replayer<'a> {
    /// A replayer for `snap`.
    pub fn new(snap: &'a PolicySnapshot) -> Replayer<'a> {
        Replayer {
            snap,
            entities: HashMap::new(),
        }
    }

    /// The set it decides under.
    pub fn snapshot(&self) -> &PolicySnapshot {
        self.snap
    }

    /// The decision of `rec` under this set. Never fails: errors are denies with reasons.
    pub fn decide(&mut self, rec: &RecordedRequest) -> SubDecision {
        let key = serde_json::to_string(&(&rec.workspace, &rec.ancestors)).unwrap_or_default();
        let snap = self.snap;
        let base = self
            .entities
            .entry(key)
            .or_insert_with(|| workspace_entities(snap, &rec.profile_tree(), &rec.workspace));
        match base {
            Ok(base) => {
                let d = decide(
                    snap,
                    base,
                    &rec.workspace,
                    &rec.tool,
                    std::slice::from_ref(&rec.request),
                );
                d.subs.into_iter().next().unwrap_or_else(|| {
                    SubDecision::refused(0, &rec.request, "no decision was made".into())
                })
            }
            Err(e) => SubDecision::refused(0, &rec.request, format!("entities: {e}")),
        }
    }
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
        let mut p = crate::config::builtin_profiles();
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
