//! Retention: deleting old rows in small batches (each its own short transaction, so a tool
//! call's write never waits long behind one) and the row counts `workspace_info` shows.

use rusqlite::{OptionalExtension, params};
use serde::Serialize;

use crate::codec::sql_limit;
use crate::error::StoreError;
use crate::store::Store;

/// What one prune batch deletes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PruneTarget {
    /// Audit rows (`decisions`) decided before the cutoff.
    Decisions,
    /// Server events stored before the cutoff.
    Events,
    /// Processes that are no longer running and started before the cutoff.
    Processes,
    /// Finished operations created before the cutoff (with their timeline and keys), unless a
    /// process row or an open journal still refers to them.
    Operations,
    /// Operation keys that expired at or before the cutoff.
    OperationKeys,
    /// Approval holds created before the cutoff that can no longer run: denied, consumed,
    /// expired, or pending/granted past their expiry (a `resuming` hold, whose resume was
    /// interrupted, stays for an operator to look at).
    Approvals,
    /// Ledger blobs no ledger row names any more (their operations were pruned); the cutoff is
    /// not used.
    LedgerBlobs,
}

impl PruneTarget {
    /// Every target, in the order a prune round runs them (processes before the operations they
    /// refer to).
    pub const ALL: [PruneTarget; 7] = [
        PruneTarget::Decisions,
        PruneTarget::Events,
        PruneTarget::OperationKeys,
        PruneTarget::Processes,
        PruneTarget::Operations,
        PruneTarget::Approvals,
        PruneTarget::LedgerBlobs,
    ];

    /// The name used in events and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            PruneTarget::Decisions => "audit",
            PruneTarget::Events => "events",
            PruneTarget::Processes => "processes",
            PruneTarget::Operations => "operations",
            PruneTarget::OperationKeys => "operation_keys",
            PruneTarget::Approvals => "approvals",
            PruneTarget::LedgerBlobs => "ledger_blobs",
        }
    }

    fn sql(self) -> &'static str {
        match self {
            PruneTarget::Decisions => {
                "DELETE FROM decisions WHERE id IN \
                 (SELECT id FROM decisions WHERE at_ms < ?1 ORDER BY at_ms LIMIT ?2)"
            }
            PruneTarget::Events => {
                "DELETE FROM events WHERE id IN \
                 (SELECT id FROM events WHERE at_ms < ?1 ORDER BY at_ms LIMIT ?2)"
            }
            PruneTarget::Processes => {
                "DELETE FROM processes WHERE process_id IN \
                 (SELECT process_id FROM processes WHERE started_ms < ?1 \
                  AND state <> 'running' ORDER BY started_ms LIMIT ?2)"
            }
            PruneTarget::Operations => {
                "DELETE FROM operations WHERE operation_id IN \
                 (SELECT o.operation_id FROM operations o WHERE o.created_ms < ?1 \
                  AND o.finished_ms IS NOT NULL \
                  AND NOT EXISTS (SELECT 1 FROM processes p WHERE p.operation_id = o.operation_id) \
                  AND NOT EXISTS (SELECT 1 FROM patch_journals j \
                                  WHERE j.operation_id = o.operation_id) \
                  ORDER BY o.created_ms LIMIT ?2)"
            }
            PruneTarget::OperationKeys => {
                "DELETE FROM operation_keys WHERE rowid IN \
                 (SELECT rowid FROM operation_keys WHERE expires_ms <= ?1 \
                  ORDER BY expires_ms LIMIT ?2)"
            }
            PruneTarget::Approvals => {
                "DELETE FROM approvals WHERE approval_id IN \
                 (SELECT approval_id FROM approvals WHERE created_ms < ?1 \
                  AND (state IN ('denied', 'consumed', 'expired') \
                       OR (state IN ('pending', 'granted') AND expires_ms < ?1)) \
                  ORDER BY created_ms LIMIT ?2)"
            }
            // `?1 = ?1` keeps the cutoff parameter bound (every target takes two).
            PruneTarget::LedgerBlobs => {
                "DELETE FROM ledger_blobs WHERE hash IN \
                 (SELECT b.hash FROM ledger_blobs b WHERE ?1 = ?1 \
                  AND NOT EXISTS (SELECT 1 FROM ledger_files f WHERE f.before_version = b.hash) \
                  AND NOT EXISTS (SELECT 1 FROM ledger_files f WHERE f.after_version = b.hash) \
                  LIMIT ?2)"
            }
        }
    }
}

/// Row counts and the oldest row of the tables retention prunes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StoreStats {
    /// Audit rows.
    pub audit_rows: i64,
    /// When the oldest audit row was decided (unix ms).
    pub oldest_audit_ms: Option<i64>,
    /// Operations.
    pub operations: i64,
    /// When the oldest operation was created (unix ms).
    pub oldest_operation_ms: Option<i64>,
    /// Process rows.
    pub processes: i64,
    /// Server events.
    pub events: i64,
    /// Operation keys (expired ones included until pruned).
    pub operation_keys: i64,
}

impl Store {
    /// Deletes at most `batch` rows of `target` older than `cutoff_ms`, in one transaction, and
    /// returns how many it deleted.
    pub fn prune_batch(
        &self,
        target: PruneTarget,
        cutoff_ms: i64,
        batch: usize,
    ) -> Result<usize, StoreError> {
        let n = self
            .conn()
            .prepare_cached(target.sql())?
            .execute(params![cutoff_ms, sql_limit(batch)])?;
        Ok(n)
    }

    /// Row counts and oldest rows (a few indexed aggregates; run it off the request path on
    /// large stores).
    pub fn stats(&self) -> Result<StoreStats, StoreError> {
        let conn = self.conn();
        let count = |table: &str| -> Result<i64, StoreError> {
            Ok(conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))?)
        };
        let oldest = |sql: &str| -> Result<Option<i64>, StoreError> {
            Ok(conn
                .query_row(sql, [], |r| r.get::<_, Option<i64>>(0))
                .optional()?
                .flatten())
        };
        Ok(StoreStats {
            audit_rows: count("decisions")?,
            oldest_audit_ms: oldest("SELECT min(at_ms) FROM decisions")?,
            operations: count("operations")?,
            oldest_operation_ms: oldest("SELECT min(created_ms) FROM operations")?,
            processes: count("processes")?,
            events: count("events")?,
            operation_keys: count("operation_keys")?,
        })
    }
}
