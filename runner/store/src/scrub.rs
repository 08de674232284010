//! Re-redacting rows already stored (`codespace audit scrub`): every stored text that may quote a
//! command line, an argument or an error goes through a caller's redactor again, in small
//! batches (one short transaction each, so a running server's writes never wait long), and only
//! the rows whose text changed are written. The store knows no patterns: the caller passes them.

use rusqlite::params;
use rusqlite::types::Value as SqlValue;

use crate::codec::sql_limit;
use crate::error::StoreError;
use crate::store::Store;

/// What re-redacts one stored value. `text` returns None when nothing changed; `json` changes
/// the value in place.
pub trait Scrubber {
    /// A stored text with every secret replaced (None: unchanged).
    fn text(&self, s: &str) -> Option<String>;
    /// Every string of a stored JSON value redacted in place.
    fn json(&self, v: &mut serde_json::Value);
}

/// How a column is stored.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Text,
    Json,
}

/// A table whose rows `scrub_batch` re-redacts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScrubTarget {
    /// Audit rows: subject, reason, errors and the recorded request.
    Decisions,
    /// Approval holds: the summary and outcome, and the held arguments of holds that can no
    /// longer run (a pending or granted hold keeps what it will run).
    Approvals,
    /// Operations' results.
    Operations,
    /// Operations' timelines (reasons).
    OperationEvents,
    /// Server events' details.
    Events,
}

impl ScrubTarget {
    /// Every target.
    pub const ALL: [ScrubTarget; 5] = [
        ScrubTarget::Decisions,
        ScrubTarget::Approvals,
        ScrubTarget::Operations,
        ScrubTarget::OperationEvents,
        ScrubTarget::Events,
    ];

    /// The name used in reports and events.
    pub fn as_str(self) -> &'static str {
        match self {
            ScrubTarget::Decisions => "decisions",
            ScrubTarget::Approvals => "approvals",
            ScrubTarget::Operations => "operations",
            ScrubTarget::OperationEvents => "operation_events",
            ScrubTarget::Events => "events",
        }
    }

    /// The table and its columns.
    fn shape(self) -> (&'static str, &'static [(&'static str, Kind)]) {
        match self {
            ScrubTarget::Decisions => (
                "decisions",
                &[
                    ("subject", Kind::Text),
                    ("reason", Kind::Text),
                    ("errors", Kind::Json),
                    ("request", Kind::Json),
                ],
            ),
            ScrubTarget::Approvals => (
                "approvals",
                &[
                    ("summary", Kind::Text),
                    ("result", Kind::Json),
                    // Last: only rows of holds that can no longer run are selected with it.
                    ("arguments", Kind::Json),
                ],
            ),
            ScrubTarget::Operations => ("operations", &[("result", Kind::Json)]),
            ScrubTarget::OperationEvents => ("operation_events", &[("reason", Kind::Text)]),
            ScrubTarget::Events => ("events", &[("detail", Kind::Json)]),
        }
    }
}

/// What one batch did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScrubBatch {
    /// Rows looked at.
    pub examined: usize,
    /// Rows rewritten (some text changed).
    pub changed: usize,
    /// Where the next batch starts (the last rowid looked at); None when the table is done.
    pub next_after: Option<i64>,
}

fn scrub_value(kind: Kind, v: &SqlValue, s: &dyn Scrubber) -> Option<SqlValue> {
    let SqlValue::Text(text) = v else {
        return None;
    };
    match kind {
        Kind::Text => s.text(text).map(SqlValue::Text),
        Kind::Json => match serde_json::from_str::<serde_json::Value>(text) {
            Ok(mut j) => {
                let before = j.clone();
                s.json(&mut j);
                (j != before).then(|| SqlValue::Text(j.to_string()))
            }
            // Not JSON (written around the store API): redacted as text.
            Err(_) => s.text(text).map(SqlValue::Text),
        },
    }
}

impl Store {
    /// Re-redacts at most `batch` rows of `target` after rowid `after` (0: from the start), in
    /// one transaction, writing only the rows whose text changed. Running it again over the same
    /// rows with the same scrubber changes nothing.
    pub fn scrub_batch(
        &self,
        target: ScrubTarget,
        after: i64,
        batch: usize,
        s: &dyn Scrubber,
    ) -> Result<ScrubBatch, StoreError> {
        let (table, columns) = target.shape();
        let names: Vec<&str> = columns.iter().map(|(n, _)| *n).collect();
        // Approvals: the held arguments only of holds that can no longer run.
        let selected: Vec<String> = names
            .iter()
            .map(|n| {
                if target == ScrubTarget::Approvals && *n == "arguments" {
                    "CASE WHEN state IN ('pending', 'granted', 'resuming') THEN NULL \
                     ELSE arguments END"
                        .to_string()
                } else {
                    (*n).to_string()
                }
            })
            .collect();
        let mut conn = self.conn();
        // The old text must not stay behind in freed space of the pages rewritten.
        conn.pragma_update(None, "secure_delete", true)?;
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let rows: Vec<(i64, Vec<SqlValue>)> = {
            let mut stmt = tx.prepare(&format!(
                "SELECT rowid, {} FROM {table} WHERE rowid > ?1 \
                 ORDER BY rowid LIMIT ?2",
                selected.join(", ")
            ))?;
            let mapped = stmt.query_map(params![after, sql_limit(batch)], |r| {
                let id: i64 = r.get(0)?;
                let mut vals = Vec::with_capacity(names.len());
                for i in 0..names.len() {
                    vals.push(r.get::<_, SqlValue>(i + 1)?);
                }
                Ok((id, vals))
            })?;
            mapped.collect::<Result<_, _>>()?
        };
        let mut out = ScrubBatch {
            examined: rows.len(),
            changed: 0,
            next_after: rows.last().map(|(id, _)| *id),
        };
        for (id, vals) in &rows {
            let mut sets = Vec::new();
            let mut args: Vec<SqlValue> = Vec::new();
            for ((name, kind), v) in columns.iter().zip(vals) {
                if let Some(new) = scrub_value(*kind, v, s) {
                    args.push(new);
                    sets.push(format!("{name} = ?{}", args.len()));
                }
            }
            if sets.is_empty() {
                continue;
            }
            args.push(SqlValue::Integer(*id));
            tx.execute(
                &format!(
                    "UPDATE {table} SET {} WHERE rowid = ?{}",
                    sets.join(", "),
                    args.len()
                ),
                rusqlite::params_from_iter(args.iter()),
            )?;
            out.changed += 1;
        }
        tx.commit()?;
        Ok(out)
    }

    /// After a scrub that changed rows: rebuilds the database file (`VACUUM`: page space SQLite
    /// left unallocated while it rebalanced pages can still hold copies of the old text, which
    /// `secure_delete` does not reach) and then copies the WAL into it and truncates it, so the
    /// replaced text is in neither file. Returns false when another connection kept it from
    /// finishing (a running server in a transaction, or reading part of the WAL): the operator
    /// runs it again later.
    pub fn scrub_compact(&self) -> Result<bool, StoreError> {
        let conn = self.conn();
        let vacuumed = match conn.execute_batch("VACUUM") {
            Ok(()) => true,
            Err(e)
                if matches!(
                    e.sqlite_error_code(),
                    Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
                ) =>
            {
                false
            }
            Err(e) => return Err(e.into()),
        };
        let (busy, _log, _done): (i64, i64, i64) =
            conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })?;
        Ok(vacuumed && busy == 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ApprovalRow, DecisionRow};
    use serde_json::{Value, json};

    /// Replaces `SECRET` with `[X]`.
    struct Marker;

    impl Scrubber for Marker {
        fn text(&self, s: &str) -> Option<String> {
            s.contains("SECRET").then(|| s.replace("SECRET", "[X]"))
        }
        fn json(&self, v: &mut Value) {
            match v {
                Value::String(s) => {
                    if let Some(r) = self.text(s) {
                        *s = r;
                    }
                }
                Value::Array(a) => a.iter_mut().for_each(|i| self.json(i)),
                Value::Object(m) => m.values_mut().for_each(|i| self.json(i)),
                _ => {}
            }
        }
    }

    fn hold(id: &str, state: &str) -> ApprovalRow {
        ApprovalRow {
            approval_id: id.into(),
            fingerprint: format!("fp-{id}"),
            tool: "exec_command".into(),
            workspace: "w".into(),
            registration: "reg".into(),
            state: state.parse().unwrap(),
            arguments: Some(json!({"command": ["curl", "-u", "a:SECRET"]})),
            summary: "exec_command in w: curl -u a:SECRET".into(),
            facts: None,
            requested_by: "c".into(),
            transport: "stdio".into(),
            channel: None,
            resolved_by: None,
            result: None,
            created_ms: 1,
            expires_ms: i64::MAX,
            resolved_ms: None,
            resumed_ms: None,
            finished_ms: None,
        }
    }

    fn run(store: &Store, target: ScrubTarget) -> (usize, usize) {
        let (mut after, mut examined, mut changed) = (0, 0, 0);
        loop {
            let b = store.scrub_batch(target, after, 1, &Marker).unwrap();
            examined += b.examined;
            changed += b.changed;
            match b.next_after {
                Some(n) => after = n,
                None => return (examined, changed),
            }
        }
    }

    #[test]
    fn only_changed_rows_are_rewritten_a_live_hold_keeps_its_arguments_and_a_rerun_is_a_no_op() {
        let store = Store::open_in_memory().unwrap();
        let row = |id: &str, subject: &str, request: Value| DecisionRow {
            decision_id: id.into(),
            subject: subject.into(),
            decision: "deny".into(),
            errors: vec!["spawn SECRET".into()],
            request: Some(request),
            ..DecisionRow::default()
        };
        store
            .insert_decisions(&[
                row(
                    "d1",
                    "curl -u a:SECRET",
                    json!({"context": {"line": "SECRET"}}),
                ),
                row("d2", "ls", json!({"context": {"line": "ls"}})),
            ])
            .unwrap();
        store
            .create_or_reuse_approval(&hold("p", "pending"), 2)
            .unwrap();
        store
            .create_or_reuse_approval(&hold("c", "consumed"), 2)
            .unwrap();
        // Both decision rows carry a secret in `errors`; both holds in their summary.
        assert_eq!(run(&store, ScrubTarget::Decisions), (2, 2));
        assert_eq!(run(&store, ScrubTarget::Approvals), (2, 2));
        let rows = store
            .query_decisions(&crate::DecisionQuery::default())
            .unwrap();
        for r in &rows {
            let all = serde_json::to_string(r).unwrap();
            assert!(!all.contains("SECRET"), "{all}");
        }
        let pending = store.approval("p", 3).unwrap().unwrap();
        assert_eq!(pending.summary, "exec_command in w: curl -u a:[X]");
        assert_eq!(
            pending.arguments,
            Some(json!({"command": ["curl", "-u", "a:SECRET"]})),
            "a hold that can still run keeps what it will run"
        );
        let consumed = store.approval("c", 3).unwrap().unwrap();
        assert_eq!(
            consumed.arguments,
            Some(json!({"command": ["curl", "-u", "a:[X]"]}))
        );
        // Idempotent.
        assert_eq!(run(&store, ScrubTarget::Decisions), (2, 0));
        assert_eq!(run(&store, ScrubTarget::Approvals), (2, 0));
    }
}
