//! The `decisions` table: the audit log, one row per Cedar sub-request.

use rusqlite::types::Value;
use rusqlite::{Row, TransactionBehavior, params_from_iter};

use crate::codec::{json_col, opt_json_col, sql_limit};
use crate::decision_rows::{DecisionRow, PolicySigner, insert_rows};
use crate::error::StoreError;
use crate::store::Store;

/// Filters for [`Store::query_decisions`]; every `None` means "any".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DecisionQuery {
    /// Only rows with `at_ms >= since_ms`.
    pub since_ms: Option<i64>,
    /// Only the rows with this decision (`"allow"`, `"deny"` or `"masked"`).
    pub decision: Option<String>,
    /// Only this workspace.
    pub workspace: Option<String>,
    /// Only this tool.
    pub tool: Option<String>,
    /// At most this many rows (the oldest matching ones, or the newest with `newest_first`).
    pub limit: Option<usize>,
    /// Newest rows first (and `limit` keeps the newest); default: oldest first.
    pub newest_first: bool,
    /// Only this client.
    pub client: Option<String>,
    /// Only rows this policy id determined (live or shadow).
    pub policy: Option<String>,
    /// Only rows of this decision id.
    pub decision_id: Option<String>,
    /// Only rows stored after this position ([`DecisionRow::seq`]).
    pub after_seq: Option<i64>,
    /// Only rows where the shadow set decided differently from the live set.
    pub shadow_flips: bool,
    /// Only rows at or before this time.
    pub until_ms: Option<i64>,
}

const COLUMNS: &str = "decision_id, at_ms, policy_set_sha256, profile, workspace, tool, action, \
     sub_index, subject, client, transport, decision, policy_ids, errors, default_deny, duration_us, \
     request, path, kind, reason, shadow_decision, shadow_policy_ids, id, trace_parent, \
     policy_sets.signer_principal, policy_sets.signer_key";

/// The audit rows with their policy set's record (its signer), when the store holds one.
const FROM: &str =
    "decisions LEFT JOIN policy_sets ON policy_sets.sha256 = decisions.policy_set_sha256";

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
        request: opt_json_col(row, 16)?,
        path: row.get(17)?,
        kind: row.get(18)?,
        reason: row.get(19)?,
        shadow_decision: row.get(20)?,
        shadow_policy_ids: opt_json_col(row, 21)?,
        seq: row.get(22)?,
        trace_parent: row.get(23)?,
        policy_signer: match (row.get::<_, Option<String>>(24)?, row.get(25)?) {
            (Some(principal), Some(key)) => Some(PolicySigner { principal, key }),
            _ => None,
        },
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

    /// The position of the newest stored row (0 when the log is empty).
    pub fn max_decision_seq(&self) -> Result<i64, StoreError> {
        let conn = self.conn();
        Ok(
            conn.query_row("SELECT coalesce(max(id), 0) FROM decisions", [], |r| {
                r.get(0)
            })?,
        )
    }

    /// Audit rows matching `q`, ordered by time, then sub-request index (by position when
    /// `after_seq` is set).
    pub fn query_decisions(&self, q: &DecisionQuery) -> Result<Vec<DecisionRow>, StoreError> {
        // Rows still queued for the audit writer are part of the log.
        self.flush_decisions();
        let mut clauses: Vec<&str> = Vec::new();
        let mut args: Vec<Value> = Vec::new();
        if let Some(since) = q.since_ms {
            clauses.push("at_ms >= ?");
            args.push(Value::Integer(since));
        }
        if let Some(until) = q.until_ms {
            clauses.push("at_ms <= ?");
            args.push(Value::Integer(until));
        }
        if let Some(after) = q.after_seq {
            clauses.push("id > ?");
            args.push(Value::Integer(after));
        }
        for (column, value) in [
            ("decision = ?", &q.decision),
            ("workspace = ?", &q.workspace),
            ("tool = ?", &q.tool),
            ("client = ?", &q.client),
            ("decision_id = ?", &q.decision_id),
        ] {
            if let Some(v) = value {
                clauses.push(column);
                args.push(Value::Text(v.clone()));
            }
        }
        if let Some(p) = &q.policy {
            clauses.push(
                "(EXISTS (SELECT 1 FROM json_each(decisions.policy_ids) WHERE value = ?) \
                 OR EXISTS (SELECT 1 FROM json_each(coalesce(decisions.shadow_policy_ids, '[]')) \
                 WHERE value = ?))",
            );
            args.push(Value::Text(p.clone()));
            args.push(Value::Text(p.clone()));
        }
        if q.shadow_flips {
            clauses.push("shadow_decision IS NOT NULL AND shadow_decision <> decision");
        }
        let mut sql = format!("SELECT {COLUMNS} FROM {FROM}");
        if !clauses.is_empty() {
            sql.push_str(" WHERE ");
            sql.push_str(&clauses.join(" AND "));
        }
        sql.push_str(if q.after_seq.is_some() {
            " ORDER BY id"
        } else if q.newest_first {
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
