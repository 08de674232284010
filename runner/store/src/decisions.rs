//! The `decisions` table: the audit log, one row per Cedar sub-request.

use rusqlite::types::Value;
use rusqlite::{Row, TransactionBehavior, params, params_from_iter};
use serde::{Deserialize, Serialize};

use crate::codec::{json_col, sql_limit};
use crate::error::StoreError;
use crate::store::Store;

/// One audited Cedar sub-request. Never holds file contents, patches or stdin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    /// `"allow"` or `"deny"`.
    pub decision: String,
    /// Ids of the determining policies.
    pub policy_ids: Vec<String>,
    /// Evaluation errors.
    pub errors: Vec<String>,
    /// True when no policy matched and the default deny applied.
    pub default_deny: bool,
    /// Time spent deciding, in microseconds.
    pub duration_us: i64,
}

/// Filters for [`Store::query_decisions`]; every `None` means "any".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DecisionQuery {
    /// Only rows with `at_ms >= since_ms`.
    pub since_ms: Option<i64>,
    /// Only `"allow"` or only `"deny"` rows.
    pub decision: Option<String>,
    /// Only this workspace.
    pub workspace: Option<String>,
    /// Only this tool.
    pub tool: Option<String>,
    /// At most this many rows (the oldest matching ones, or the newest with `newest_first`).
    pub limit: Option<usize>,
    /// Newest rows first (and `limit` keeps the newest); default: oldest first.
    pub newest_first: bool,
}

const COLUMNS: &str = "decision_id, at_ms, policy_set_sha256, profile, workspace, tool, action, \
     sub_index, subject, client, transport, decision, policy_ids, errors, default_deny, duration_us";

fn from_row(row: &Row<'_>) -> rusqlite::Result<DecisionRow> {
    Ok(DecisionRow {
        decision_id: row.get(0)?,
        at_ms: row.get(1)?,
        policy_set_sha256: row.get(2)?,
        profile: row.get(3)?,
        workspace: row.get(4)?,
        tool: row.get(5)?,
        action: row.get(6)?,
        sub_index: row.get(7)?,
        subject: row.get(8)?,
        client: row.get(9)?,
        transport: row.get(10)?,
        decision: row.get(11)?,
        policy_ids: json_col(row, 12)?,
        errors: json_col(row, 13)?,
        default_deny: row.get(14)?,
        duration_us: row.get(15)?,
    })
}

impl Store {
    /// Appends audit rows in one transaction: all are stored or none.
    pub fn insert_decisions(&self, rows: &[DecisionRow]) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        insert_rows(&tx, rows)?;
        tx.commit()?;
        Ok(())
    }

    /// Audit rows matching `q`, ordered by time, then sub-request index.
    pub fn query_decisions(&self, q: &DecisionQuery) -> Result<Vec<DecisionRow>, StoreError> {
        // Rows still queued for the audit writer are part of the log.
        self.flush_decisions();
        let mut clauses: Vec<&str> = Vec::new();
        let mut args: Vec<Value> = Vec::new();
        if let Some(since) = q.since_ms {
            clauses.push("at_ms >= ?");
            args.push(Value::Integer(since));
        }
        for (column, value) in [
            ("decision = ?", &q.decision),
            ("workspace = ?", &q.workspace),
            ("tool = ?", &q.tool),
        ] {
            if let Some(v) = value {
                clauses.push(column);
                args.push(Value::Text(v.clone()));
            }
        }
        let mut sql = format!("SELECT {COLUMNS} FROM decisions");
        if !clauses.is_empty() {
            sql.push_str(" WHERE ");
            sql.push_str(&clauses.join(" AND "));
        }
        sql.push_str(if q.newest_first {
            " ORDER BY at_ms DESC, sub_index DESC, id DESC"
        } else {
            " ORDER BY at_ms, sub_index, id"
        });
        if let Some(limit) = q.limit {
            sql.push_str(" LIMIT ?");
            args.push(Value::Integer(sql_limit(limit)));
        }
        let conn = self.conn();
        let mut st = conn.prepare_cached(&sql)?;
        let rows = st
            .query_map(params_from_iter(args), from_row)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }
}

/// Inserts `rows` on `conn` (inside the caller's transaction). Shared by
/// [`Store::insert_decisions`] and the audit writer's group commits.
pub(crate) fn insert_rows(
    conn: &rusqlite::Connection,
    rows: &[DecisionRow],
) -> Result<(), StoreError> {
    let mut st = conn.prepare_cached(
        "INSERT INTO decisions (decision_id, at_ms, policy_set_sha256, profile, workspace, \
         tool, action, sub_index, subject, client, transport, decision, policy_ids, errors, \
         default_deny, duration_us) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
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
        ])?;
    }
    Ok(())
}
