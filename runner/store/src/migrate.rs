//! Schema migrations: embedded SQL files applied in order. Which steps a database has is kept in
//! the `schema_migrations` table (one row per applied step), so steps written on different
//! branches may arrive out of order: a step missing from a database is applied even when a
//! higher one already is. `PRAGMA user_version` holds the highest applied step.

use rusqlite::{Connection, TransactionBehavior};
use std::collections::BTreeSet;

use crate::error::StoreError;

/// One schema step: the version it produces and its SQL.
struct Migration {
    version: i64,
    sql: &'static str,
}

/// Every migration, in increasing version order. Numbers may have gaps (a step numbered on
/// another branch arrives later and is applied where it is missing).
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        sql: include_str!("../migrations/0001_init.sql"),
    },
    Migration {
        version: 3,
        sql: include_str!("../migrations/0003_request.sql"),
    },
];

/// The newest schema version this build knows.
pub const LATEST_VERSION: i64 = 3;

const LEDGER: &str = "CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INTEGER PRIMARY KEY,
    applied_ms INTEGER NOT NULL
)";

/// Reads `PRAGMA user_version`.
pub(crate) fn user_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("PRAGMA user_version", [], |r| r.get(0))
}

fn ledger_exists(conn: &Connection) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'",
        [],
        |r| r.get::<_, i64>(0),
    )
    .map(|n| n > 0)
}

/// The applied steps. A database from before the ledger counts every known step up to its
/// `user_version` as applied (that is what the old runner guaranteed).
fn applied(conn: &Connection) -> rusqlite::Result<BTreeSet<i64>> {
    if ledger_exists(conn)? {
        let mut st = conn.prepare("SELECT version FROM schema_migrations")?;
        let rows = st.query_map([], |r| r.get::<_, i64>(0))?;
        return rows.collect();
    }
    let found = user_version(conn)?;
    Ok(MIGRATIONS
        .iter()
        .map(|m| m.version)
        .filter(|v| *v <= found)
        .collect())
}

/// Applies every known step the database lacks; refuses a database newer than this build.
///
/// Each step runs in its own immediate transaction that re-reads the ledger first, so two
/// processes opening the same fresh file do not apply a step twice.
pub(crate) fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    check_not_newer(user_version(conn)?)?;
    let have = applied(conn)?;
    if ledger_exists(conn)? && MIGRATIONS.iter().all(|m| have.contains(&m.version)) {
        return Ok(());
    }
    for step in MIGRATIONS {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let current = user_version(&tx)?;
        check_not_newer(current)?;
        let have = applied(&tx)?;
        tx.execute_batch(LEDGER)?;
        let now = crate::store::now_ms();
        for v in &have {
            tx.execute(
                "INSERT OR IGNORE INTO schema_migrations (version, applied_ms) VALUES (?1, ?2)",
                rusqlite::params![v, now],
            )?;
        }
        if !have.contains(&step.version) {
            tx.execute_batch(step.sql)?;
            tx.execute(
                "INSERT INTO schema_migrations (version, applied_ms) VALUES (?1, ?2)",
                rusqlite::params![step.version, now],
            )?;
            tx.pragma_update(None, "user_version", current.max(step.version))?;
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
    fn migrations_increase_and_end_at_latest() {
        for pair in MIGRATIONS.windows(2) {
            if let [a, b] = pair {
                assert!(a.version < b.version);
            }
        }
        assert_eq!(MIGRATIONS.last().map(|m| m.version), Some(LATEST_VERSION));
    }

    #[test]
    fn a_step_missing_below_the_highest_applied_one_is_applied() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate(&mut conn).unwrap();
        // Pretend step 3 was never applied but a later step was (as when a step numbered on
        // another branch lands after ours): the ledger says what is missing.
        conn.execute_batch(
            "DELETE FROM schema_migrations WHERE version = 3;
             ALTER TABLE decisions DROP COLUMN request;
             ALTER TABLE decisions DROP COLUMN path;
             ALTER TABLE decisions DROP COLUMN kind;
             ALTER TABLE decisions DROP COLUMN reason;
             DROP INDEX decisions_client_at;
             ALTER TABLE decisions DROP COLUMN shadow_decision;
             ALTER TABLE decisions DROP COLUMN shadow_policy_ids;",
        )
        .unwrap();
        migrate(&mut conn).unwrap();
        let cols: i64 = conn
            .query_row(
                "SELECT count(*) FROM pragma_table_info('decisions') WHERE name = 'request'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(cols, 1);
        assert_eq!(user_version(&conn).unwrap(), LATEST_VERSION);
    }

    #[test]
    fn a_database_from_before_the_ledger_gets_only_the_new_steps() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(include_str!("../migrations/0001_init.sql"))
            .unwrap();
        conn.pragma_update(None, "user_version", 1).unwrap();
        migrate(&mut conn).unwrap();
        let have = applied(&conn).unwrap();
        assert_eq!(have.into_iter().collect::<Vec<_>>(), vec![1, 3]);
    }
}
