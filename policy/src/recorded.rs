//! Recorded Cedar requests: every audited sub-request's request is stored (the principal and its
//! ancestors, the action, the resource facts, the workspace facts and the context; redacted by
//! the audit sink; never file contents, patch text or stdin) so it can be re-decided later under
//! another policy set (`policy diff`, `explain --decision-id`).

use crate::config::Profile;
use crate::request::{SubRequest, WorkspaceFacts};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

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
