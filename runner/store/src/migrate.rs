//! Schema migrations: embedded SQL files applied in order, tracked with `PRAGMA user_version`.

use rusqlite::{Connection, TransactionBehavior};

use crate::error::StoreError;

/// One schema step: the version it produces and its SQL.
struct Migration {
    version: i64,
    sql: &'static str,
}

/// Every migration, oldest first; versions are 1, 2, 3, ... without gaps.
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        sql: include_str!("../migrations/0001_init.sql"),
    },
    Migration {
        version: 2,
        sql: include_str!("../migrations/0002_server_instances.sql"),
    },
    Migration {
        version: 3,
        sql: include_str!("../migrations/0003_scoped_keys_retention.sql"),
    },
    Migration {
        version: 4,
        sql: include_str!("../migrations/0004_request.sql"),
    },
    Migration {
        version: 5,
        sql: include_str!("../migrations/0005_approvals.sql"),
    },
    Migration {
        version: 6,
        sql: include_str!("../migrations/0006_operation_owner.sql"),
    },
    Migration {
        version: 7,
        sql: include_str!("../migrations/0007_trace_parent.sql"),
    },
    Migration {
        version: 8,
        sql: include_str!("../migrations/0008_masked_rows.sql"),
    },
    // The operation ledger (issue 31).
    Migration {
        version: 9,
        sql: include_str!("../migrations/0009_ledger.sql"),
    },
    // Saved path indexes (issue 34).
    Migration {
        version: 10,
        sql: include_str!("../migrations/0010_path_indexes.sql"),
    },
    // Holds of `write_file` (issue 31).
    Migration {
        version: 11,
        sql: include_str!("../migrations/0011_write_file_holds.sql"),
    },
    // The policy set record: who signed each set (issue 32).
    Migration {
        version: 12,
        sql: include_str!("../migrations/0012_policy_sets.sql"),
    },
];

/// The newest schema version this build knows.
pub const LATEST_VERSION: i64 = 12;

/// Reads `PRAGMA user_version`.
pub(crate) fn user_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("PRAGMA user_version", [], |r| r.get(0))
}

/// Brings the database up to [`LATEST_VERSION`]; refuses a database newer than that.
///
/// Each step runs in its own immediate transaction that re-reads the version first, so two
/// processes opening the same fresh file do not apply a step twice. Steps run with foreign keys
/// off (a step may rebuild a referenced table, as SQLite's ALTER TABLE procedure requires) and
/// each is checked with `PRAGMA foreign_key_check` before it commits.
pub(crate) fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    let found = user_version(conn)?;
    check_not_newer(found)?;
    if found == LATEST_VERSION {
        return Ok(());
    }
    let fk: bool = conn.query_row("PRAGMA foreign_keys", [], |r| r.get(0))?;
    conn.pragma_update(None, "foreign_keys", false)?;
    let result = apply_steps(conn);
    conn.pragma_update(None, "foreign_keys", fk)?;
    result
}

fn apply_steps(conn: &mut Connection) -> Result<(), StoreError> {
    for step in MIGRATIONS {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let current = user_version(&tx)?;
        check_not_newer(current)?;
        if current < step.version {
            tx.execute_batch(step.sql)?;
            let violation = tx
                .prepare("PRAGMA foreign_key_check")?
                .query([])?
                .next()?
                .is_some();
            if violation {
                return Err(StoreError::Migration(step.version));
            }
            tx.pragma_update(None, "user_version", step.version)?;
        }
        tx.commit()?;
    }
    Ok(())
}

fn check_not_newer(found: i64) -> Result<(), StoreError> {
    if found > LATEST_VERSION {
        return Err(StoreError::SchemaTooNew {
            found,
            supported: LATEST_VERSION,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_numbered_without_gaps_and_end_at_latest() {
        for (i, step) in MIGRATIONS.iter().enumerate() {
            assert_eq!(step.version, i as i64 + 1);
        }
        assert_eq!(MIGRATIONS.last().map(|m| m.version), Some(LATEST_VERSION));
    }
}
