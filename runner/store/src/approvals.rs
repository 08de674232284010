//! The `approvals` table: confirmation holds on apply_patch / exec_command, their resolution
//! and the stored outcome of their one resume. Every state change is a compare-and-set in one
//! immediate transaction, so two servers (or the server and the operator CLI) on the same file
//! never both move a hold.

use rusqlite::{OptionalExtension, Row, TransactionBehavior, params};
use serde::{Deserialize, Serialize};

use crate::codec::opt_json_col;
use crate::error::StoreError;
use crate::store::Store;

/// Where a hold is in its life. Stored as its text (`as_str`) in `approvals.state`; a row
/// whose text is none of these does not load (a typed error, not a guess).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalState {
    /// Waiting for a human.
    Pending,
    /// Granted; not resumed yet.
    Granted,
    /// Denied (final; the arguments are scrubbed).
    Denied,
    /// Resumed once; its outcome is stored.
    Consumed,
    /// Its time ran out before it was resolved or resumed.
    Expired,
    /// Its one resume is running (or was interrupted).
    Resuming,
}

impl ApprovalState {
    /// Every state.
    pub const ALL: [ApprovalState; 6] = [
        ApprovalState::Pending,
        ApprovalState::Granted,
        ApprovalState::Denied,
        ApprovalState::Consumed,
        ApprovalState::Expired,
        ApprovalState::Resuming,
    ];

    /// The stored (and wire) spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalState::Pending => "pending",
            ApprovalState::Granted => "granted",
            ApprovalState::Denied => "denied",
            ApprovalState::Consumed => "consumed",
            ApprovalState::Expired => "expired",
            ApprovalState::Resuming => "resuming",
        }
    }

    /// The state a caller is shown: a resume in progress is still `granted` to them.
    pub fn shown(self) -> ApprovalState {
        match self {
            ApprovalState::Resuming => ApprovalState::Granted,
            other => other,
        }
    }

    /// Pending or granted (a resume may still come), resuming included.
    pub fn is_open(self) -> bool {
        matches!(
            self,
            ApprovalState::Pending | ApprovalState::Granted | ApprovalState::Resuming
        )
    }
}

impl std::fmt::Display for ApprovalState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// A state text that is none of [`ApprovalState`]'s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown approval state `{0}`")]
pub struct UnknownApprovalState(pub String);

impl std::str::FromStr for ApprovalState {
    type Err = UnknownApprovalState;
    fn from_str(s: &str) -> Result<ApprovalState, UnknownApprovalState> {
        ApprovalState::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| UnknownApprovalState(s.to_string()))
    }
}

impl PartialEq<&str> for ApprovalState {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl rusqlite::types::ToSql for ApprovalState {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        Ok(self.as_str().into())
    }
}

impl rusqlite::types::FromSql for ApprovalState {
    fn column_result(v: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
        v.as_str()?
            .parse()
            .map_err(|e| rusqlite::types::FromSqlError::Other(Box::new(e)))
    }
}

/// One approval hold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRow {
    /// `appr-<uuid>`.
    pub approval_id: String,
    /// Digest of client, workspace registration, tool and canonical arguments.
    pub fingerprint: String,
    /// `apply_patch` or `exec_command`.
    pub tool: String,
    /// Workspace id.
    pub workspace: String,
    /// The workspace identity (registration) the hold is bound to.
    pub registration: String,
    /// Where the hold is in its life.
    pub state: ApprovalState,
    /// The held call's arguments; `None` once denied (scrubbed).
    pub arguments: Option<serde_json::Value>,
    /// What a human is shown (command line, or files with +/- counts); redacted.
    pub summary: String,
    /// Facts captured at hold time (workspace facts, pinned file versions).
    pub facts: Option<serde_json::Value>,
    /// The client that asked.
    pub requested_by: String,
    /// Its transport.
    pub transport: String,
    /// The channel that resolved it: tool | elicitation | cli.
    pub channel: Option<String>,
    /// Who resolved it.
    pub resolved_by: Option<String>,
    /// The outcome of the resume: `{"ok": result}` or `{"error": ErrorBody}`.
    pub result: Option<serde_json::Value>,
    /// When it was created (unix ms).
    pub created_ms: i64,
    /// When a pending or granted hold expires (unix ms).
    pub expires_ms: i64,
    /// When it was granted or denied.
    pub resolved_ms: Option<i64>,
    /// When its resume started.
    pub resumed_ms: Option<i64>,
    /// When its resume finished.
    pub finished_ms: Option<i64>,
}

/// What [`Store::resolve_approval`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum Resolution {
    /// The hold was pending and now has the new state.
    Changed(ApprovalRow),
    /// The hold was not pending; nothing changed (the row as it is).
    Unchanged(ApprovalRow),
    /// No such hold.
    NotFound,
}

const COLUMNS: &str = "approval_id, fingerprint, tool, workspace, registration, state, arguments, \
     summary, facts, requested_by, transport, channel, resolved_by, result, created_ms, \
     expires_ms, resolved_ms, resumed_ms, finished_ms";

fn from_row(r: &Row<'_>) -> rusqlite::Result<ApprovalRow> {
    Ok(ApprovalRow {
        approval_id: r.get(0)?,
        fingerprint: r.get(1)?,
        tool: r.get(2)?,
        workspace: r.get(3)?,
        registration: r.get(4)?,
        state: r.get(5)?,
        arguments: opt_json_col(r, 6)?,
        summary: r.get(7)?,
        facts: opt_json_col(r, 8)?,
        requested_by: r.get(9)?,
        transport: r.get(10)?,
        channel: r.get(11)?,
        resolved_by: r.get(12)?,
        result: opt_json_col(r, 13)?,
        created_ms: r.get(14)?,
        expires_ms: r.get(15)?,
        resolved_ms: r.get(16)?,
        resumed_ms: r.get(17)?,
        finished_ms: r.get(18)?,
    })
}

fn json_text(v: Option<&serde_json::Value>) -> Result<Option<String>, StoreError> {
    Ok(v.map(serde_json::to_string).transpose()?)
}

/// Marks every pending or granted hold whose time is up as expired.
fn expire_due(tx: &rusqlite::Transaction<'_>, now: i64) -> rusqlite::Result<usize> {
    tx.prepare_cached(
        "UPDATE approvals SET state = 'expired' \
         WHERE state IN ('pending', 'granted') AND expires_ms <= ?1",
    )?
    .execute(params![now])
}

fn get(tx: &rusqlite::Transaction<'_>, id: &str) -> rusqlite::Result<Option<ApprovalRow>> {
    tx.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM approvals WHERE approval_id = ?1"
    ))?
    .query_row(params![id], from_row)
    .optional()
}

impl Store {
    /// Inserts `row` unless an active hold (pending or granted, not expired at `now`) with the
    /// same fingerprint exists; returns the hold in force and whether it was created.
    pub fn create_or_reuse_approval(
        &self,
        row: &ApprovalRow,
        now: i64,
    ) -> Result<(ApprovalRow, bool), StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        expire_due(&tx, now)?;
        let existing = tx
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM approvals WHERE fingerprint = ?1 \
                 AND state IN ('pending', 'granted') ORDER BY created_ms LIMIT 1"
            ))?
            .query_row(params![row.fingerprint], from_row)
            .optional()?;
        if let Some(found) = existing {
            tx.commit()?;
            return Ok((found, false));
        }
        tx.prepare_cached(&format!(
            "INSERT INTO approvals ({COLUMNS}) VALUES \
             (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19)"
        ))?
        .execute(params![
            row.approval_id,
            row.fingerprint,
            row.tool,
            row.workspace,
            row.registration,
            row.state,
            json_text(row.arguments.as_ref())?,
            row.summary,
            json_text(row.facts.as_ref())?,
            row.requested_by,
            row.transport,
            row.channel,
            row.resolved_by,
            json_text(row.result.as_ref())?,
            row.created_ms,
            row.expires_ms,
            row.resolved_ms,
            row.resumed_ms,
            row.finished_ms,
        ])?;
        let stored = get(&tx, &row.approval_id)?;
        tx.commit()?;
        stored
            .map(|r| (r, true))
            .ok_or_else(|| StoreError::ApprovalNotFound(row.approval_id.clone()))
    }

    /// The hold with this id as of `now` (a pending or granted hold past its time is expired
    /// first).
    pub fn approval(&self, id: &str, now: i64) -> Result<Option<ApprovalRow>, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        expire_due(&tx, now)?;
        let row = get(&tx, id)?;
        tx.commit()?;
        Ok(row)
    }

    /// Grants or denies a pending hold (as of `now`). A deny scrubs the stored arguments. A hold
    /// that is not pending is returned unchanged.
    pub fn resolve_approval(
        &self,
        id: &str,
        grant: bool,
        resolved_by: &str,
        channel: &str,
        now: i64,
    ) -> Result<Resolution, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        expire_due(&tx, now)?;
        let Some(row) = get(&tx, id)? else {
            tx.commit()?;
            return Ok(Resolution::NotFound);
        };
        if row.state != ApprovalState::Pending {
            tx.commit()?;
            return Ok(Resolution::Unchanged(row));
        }
        let sql = if grant {
            "UPDATE approvals SET state = 'granted', resolved_by = ?2, channel = ?3, \
             resolved_ms = ?4 WHERE approval_id = ?1 AND state = 'pending'"
        } else {
            "UPDATE approvals SET state = 'denied', resolved_by = ?2, channel = ?3, \
             resolved_ms = ?4, arguments = NULL, facts = NULL WHERE approval_id = ?1 \
             AND state = 'pending'"
        };
        tx.prepare_cached(sql)?
            .execute(params![id, resolved_by, channel, now])?;
        let after = get(&tx, id)?;
        tx.commit()?;
        Ok(after.map_or(Resolution::NotFound, Resolution::Changed))
    }

    /// Moves a granted hold (not expired at `now`) to `resuming`; `None` when it was not
    /// granted (the caller reads the row to say why).
    pub fn begin_resume(&self, id: &str, now: i64) -> Result<Option<ApprovalRow>, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        expire_due(&tx, now)?;
        let changed = tx
            .prepare_cached(
                "UPDATE approvals SET state = 'resuming', resumed_ms = ?2 \
                 WHERE approval_id = ?1 AND state = 'granted'",
            )?
            .execute(params![id, now])?;
        let row = if changed == 1 { get(&tx, id)? } else { None };
        tx.commit()?;
        Ok(row)
    }

    /// Ends a resume: `consumed` with its stored outcome, or back to `granted` when nothing
    /// ran (the outcome is not stored then).
    pub fn finish_resume(
        &self,
        id: &str,
        consumed: bool,
        outcome: Option<&serde_json::Value>,
        now: i64,
    ) -> Result<(), StoreError> {
        let outcome = json_text(outcome)?;
        let changed = if consumed {
            self.conn()
                .prepare_cached(
                    "UPDATE approvals SET state = 'consumed', result = ?2, finished_ms = ?3 \
                     WHERE approval_id = ?1 AND state = 'resuming'",
                )?
                .execute(params![id, outcome, now])?
        } else {
            self.conn()
                .prepare_cached(
                    "UPDATE approvals SET state = 'granted', resumed_ms = NULL \
                     WHERE approval_id = ?1 AND state = 'resuming'",
                )?
                .execute(params![id])?
        };
        if changed == 0 {
            return Err(StoreError::ApprovalNotFound(id.to_owned()));
        }
        Ok(())
    }

    /// Holds, newest first, optionally of one state (as of `now`), at most `limit`.
    pub fn approvals(
        &self,
        state: Option<ApprovalState>,
        limit: usize,
        now: i64,
    ) -> Result<Vec<ApprovalRow>, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        expire_due(&tx, now)?;
        let rows = tx
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM approvals WHERE ?1 IS NULL OR state = ?1 \
                 ORDER BY created_ms DESC, approval_id LIMIT ?2"
            ))?
            .query_map(params![state, crate::codec::sql_limit(limit)], from_row)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        tx.commit()?;
        Ok(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(id: &str) -> ApprovalRow {
        ApprovalRow {
            approval_id: id.into(),
            fingerprint: format!("fp-{id}"),
            tool: "exec_command".into(),
            workspace: "w".into(),
            registration: "reg".into(),
            state: ApprovalState::Pending,
            arguments: None,
            summary: String::new(),
            facts: None,
            requested_by: "c".into(),
            transport: "stdio".into(),
            channel: None,
            resolved_by: None,
            result: None,
            created_ms: 1,
            expires_ms: 1_000,
            resolved_ms: None,
            resumed_ms: None,
            finished_ms: None,
        }
    }

    #[test]
    fn every_state_is_stored_as_its_text_and_read_back() {
        for st in ApprovalState::ALL {
            assert_eq!(st.as_str().parse::<ApprovalState>(), Ok(st));
            assert_eq!(serde_json::to_value(st).unwrap(), st.as_str());
        }
        let s = Store::open_in_memory().unwrap();
        s.create_or_reuse_approval(&hold("appr-1"), 2).unwrap();
        let text: String = s
            .conn()
            .query_row(
                "SELECT state FROM approvals WHERE approval_id = 'appr-1'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(text, "pending");
    }

    #[test]
    fn a_row_with_an_unknown_state_text_is_an_error_not_a_panic() {
        assert!("paused".parse::<ApprovalState>().is_err());
        let s = Store::open_in_memory().unwrap();
        s.create_or_reuse_approval(&hold("appr-1"), 2).unwrap();
        // The table's CHECK keeps such a text out; a file edited by hand (or a newer build's
        // state) may still hold one.
        {
            let conn = s.conn();
            conn.execute_batch("PRAGMA ignore_check_constraints = ON")
                .unwrap();
            conn.execute(
                "UPDATE approvals SET state = 'paused' WHERE approval_id = 'appr-1'",
                [],
            )
            .unwrap();
            conn.execute_batch("PRAGMA ignore_check_constraints = OFF")
                .unwrap();
        }
        let err = s.approval("appr-1", 3).unwrap_err();
        assert!(err.to_string().contains("paused"), "{err}");
        assert!(s.approvals(None, 10, 3).is_err());
    }
}
