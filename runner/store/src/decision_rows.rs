//! One row of the audit log ([`DecisionRow`]) and how rows are inserted: shared by the store's
//! queries (`decisions.rs`) and the audit writer (`audit_writer.rs`), and naming neither.

use rusqlite::params;
use serde::{Deserialize, Serialize};

use crate::error::StoreError;

/// The `decision` of a row that records a path withheld (masked) from an allowed command: not a
/// refused call, so `audit --decision deny` and deny alerts do not see it.
pub const MASKED: &str = "masked";

/// One audited Cedar sub-request. Never holds file contents, patches or stdin.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionRow {
    /// Id of the whole decision (shared by its sub-requests).
    pub decision_id: String,
    /// When the decision was made (unix ms).
    pub at_ms: i64,
    /// SHA-256 of the policy set in force.
    pub policy_set_sha256: String,
    /// Profile of the workspace.
    pub profile: String,
    /// Workspace id.
    pub workspace: String,
    /// MCP tool name.
    pub tool: String,
    /// Cedar action.
    pub action: String,
    /// Position of this sub-request within the decision.
    pub sub_index: i64,
    /// Workspace-relative path or command summary.
    pub subject: String,
    /// Client name, when known.
    pub client: Option<String>,
    /// Transport (stdio, http, ...), when known.
    pub transport: Option<String>,
    /// `"allow"` or `"deny"` (Cedar's answer to the sub-request), or [`MASKED`] (a path
    /// withheld from an allowed command: Cedar denied its `read`, the call itself ran).
    pub decision: String,
    /// Ids of the determining policies.
    pub policy_ids: Vec<String>,
    /// Evaluation errors.
    pub errors: Vec<String>,
    /// True when no policy matched and the default deny applied.
    pub default_deny: bool,
    /// Time spent deciding, in microseconds.
    pub duration_us: i64,
    /// The Cedar request decided (JSON, redacted), so it can be re-decided later.
    #[serde(default)]
    pub request: Option<serde_json::Value>,
    /// Workspace-relative path of the sub-request.
    #[serde(default)]
    pub path: Option<String>,
    /// apply_patch kind (`add`, `update`, `delete`, `move_from`, `move_to`).
    #[serde(default)]
    pub kind: Option<String>,
    /// Why: the determining policies with their reasons, the default deny, or the errors.
    #[serde(default)]
    pub reason: Option<String>,
    /// The shadow set's decision (`"allow"` / `"deny"`), when a shadow set is loaded.
    #[serde(default)]
    pub shadow_decision: Option<String>,
    /// The shadow set's determining policy ids.
    #[serde(default)]
    pub shadow_policy_ids: Option<Vec<String>>,
    /// The W3C `traceparent` of the request this decision answered, when it carried one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_parent: Option<String>,
    /// The row's position in the log (increasing; 0 before it is stored).
    #[serde(default)]
    pub seq: i64,
    /// Who signed the policy set that decided, from its record (`policy_sets`); `None` for a set
    /// loaded unsigned or one this store holds no record of. Filled by the queries, never
    /// written with the row.
    #[serde(default)]
    pub policy_signer: Option<PolicySigner>,
}

/// The signer of a policy set: the `allowed_signers` principal and the key that signed it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicySigner {
    /// The `allowed_signers` principal (`alice@example.com`).
    pub principal: String,
    /// The key, as `ssh-keygen` names it (`ED25519 key SHA256:…`).
    pub key: String,
}

impl DecisionRow {
    /// About how many bytes the row holds in memory (its struct, its strings and its recorded
    /// request's JSON tree, with a per-allocation allowance): what the audit writer's queue
    /// counts against its byte bound. An estimate, cheap enough for every append.
    pub fn approx_bytes(&self) -> usize {
        /// What one heap allocation costs beyond its bytes (malloc's header and rounding).
        const ALLOC: usize = 16;
        let s = |v: &str| if v.is_empty() { 0 } else { v.len() + ALLOC };
        let o = |v: &Option<String>| v.as_deref().map_or(0, s);
        let list = |v: &[String]| {
            v.iter()
                .map(|x| s(x) + std::mem::size_of::<String>())
                .sum::<usize>()
                + if v.is_empty() { 0 } else { ALLOC }
        };
        std::mem::size_of::<DecisionRow>()
            + s(&self.decision_id)
            + s(&self.policy_set_sha256)
            + s(&self.profile)
            + s(&self.workspace)
            + s(&self.tool)
            + s(&self.action)
            + s(&self.subject)
            + o(&self.client)
            + o(&self.transport)
            + s(&self.decision)
            + list(&self.policy_ids)
            + list(&self.errors)
            + self.request.as_ref().map_or(0, json_bytes)
            + o(&self.path)
            + o(&self.kind)
            + o(&self.reason)
            + o(&self.shadow_decision)
            + self.shadow_policy_ids.as_deref().map_or(0, list)
            + o(&self.trace_parent)
    }
}

/// About how many bytes a JSON tree holds on the heap (see [`DecisionRow::approx_bytes`]).
fn json_bytes(v: &serde_json::Value) -> usize {
    use serde_json::Value;
    /// A node's own size plus an allowance for its allocation (or its map entry's).
    const NODE: usize = std::mem::size_of::<Value>() + 16;
    match v {
        Value::Null | Value::Bool(_) | Value::Number(_) => NODE,
        Value::String(x) => NODE + x.len(),
        Value::Array(a) => NODE + a.iter().map(json_bytes).sum::<usize>(),
        // A map entry: its key (a String and its bytes) and a share of the map's nodes.
        Value::Object(m) => {
            NODE + m
                .iter()
                .map(|(k, v)| k.len() + NODE + json_bytes(v))
                .sum::<usize>()
        }
    }
}

/// Inserts `rows` on `conn` (inside the caller's transaction). Shared by
/// [`Store::insert_decisions`](crate::Store::insert_decisions) and the audit writer's group
/// commits.
pub(crate) fn insert_rows(
    conn: &rusqlite::Connection,
    rows: &[DecisionRow],
) -> Result<(), StoreError> {
    let mut st = conn.prepare_cached(
        "INSERT INTO decisions (decision_id, at_ms, policy_set_sha256, profile, workspace, \
         tool, action, sub_index, subject, client, transport, decision, policy_ids, errors, \
         default_deny, duration_us, request, path, kind, reason, shadow_decision, \
         shadow_policy_ids, trace_parent) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, \
         ?17, ?18, ?19, ?20, ?21, ?22, ?23)",
    )?;
    for r in rows {
        st.execute(params![
            r.decision_id,
            r.at_ms,
            r.policy_set_sha256,
            r.profile,
            r.workspace,
            r.tool,
            r.action,
            r.sub_index,
            r.subject,
            r.client,
            r.transport,
            r.decision,
            serde_json::to_string(&r.policy_ids)?,
            serde_json::to_string(&r.errors)?,
            r.default_deny,
            r.duration_us,
            r.request.as_ref().map(serde_json::Value::to_string),
            r.path,
            r.kind,
            r.reason,
            r.shadow_decision,
            r.shadow_policy_ids
                .as_ref()
                .map(serde_json::to_string)
                .transpose()?,
            r.trace_parent,
        ])?;
    }
    Ok(())
}
