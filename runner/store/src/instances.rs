//! The `server_instances` table: one row per server start, whose id names that server's temporary files.

use rusqlite::{OptionalExtension, params};
use serde::{Deserialize, Serialize};

use crate::error::StoreError;
use crate::store::{Store, now_ms};

/// One recorded server start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceRow {
    /// The instance id (16 lowercase hex digits).
    pub instance_id: String,
    /// When the server started (unix ms).
    pub started_ms: i64,
    /// Its process id.
    pub pid: i64,
    /// Boot id and start time of that process, so a later start can tell whether it still runs.
    pub process_start: String,
    /// Set when it shut down leaving no temporary file behind.
    pub ended_ms: Option<i64>,
    /// Set once a later start swept its temporary files.
    pub swept_ms: Option<i64>,
}

impl Store {
    /// Records a server start.
    pub fn insert_instance(
        &self,
        instance_id: &str,
        pid: i64,
        process_start: &str,
    ) -> Result<(), StoreError> {
        self.conn()
            .prepare_cached(
                "INSERT INTO server_instances (instance_id, started_ms, pid, process_start) \
                 VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![instance_id, now_ms(), pid, process_start])?;
        Ok(())
    }

    /// Every recorded instance, oldest first.
    pub fn instances(&self) -> Result<Vec<InstanceRow>, StoreError> {
        let conn = self.conn();
        let mut st = conn.prepare_cached(
            "SELECT instance_id, started_ms, pid, process_start, ended_ms, swept_ms \
             FROM server_instances ORDER BY started_ms, instance_id",
        )?;
        let rows = st
            .query_map([], |r| {
                Ok(InstanceRow {
                    instance_id: r.get(0)?,
                    started_ms: r.get(1)?,
                    pid: r.get(2)?,
                    process_start: r.get(3)?,
                    ended_ms: r.get(4)?,
                    swept_ms: r.get(5)?,
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    /// Whether `instance_id` is recorded.
    pub fn is_instance(&self, instance_id: &str) -> Result<bool, StoreError> {
        Ok(self
            .conn()
            .prepare_cached("SELECT 1 FROM server_instances WHERE instance_id = ?1")?
            .query_row(params![instance_id], |_| Ok(()))
            .optional()?
            .is_some())
    }

    /// Marks an instance as shut down with no temporary file left behind.
    pub fn instance_ended(&self, instance_id: &str) -> Result<(), StoreError> {
        self.conn()
            .prepare_cached("UPDATE server_instances SET ended_ms = ?2 WHERE instance_id = ?1")?
            .execute(params![instance_id, now_ms()])?;
        Ok(())
    }

    /// Marks instances whose temporary files were swept.
    pub fn instances_swept(&self, instance_ids: &[String]) -> Result<(), StoreError> {
        let conn = self.conn();
        let mut st = conn
            .prepare_cached("UPDATE server_instances SET swept_ms = ?2 WHERE instance_id = ?1")?;
        let at = now_ms();
        for id in instance_ids {
            st.execute(params![id, at])?;
        }
        Ok(())
    }

    /// Forgets instances that started before `before_ms` and are done with (ended cleanly, or swept);
    /// returns how many.
    pub fn prune_instances(&self, before_ms: i64) -> Result<usize, StoreError> {
        Ok(self
            .conn()
            .prepare_cached(
                "DELETE FROM server_instances WHERE started_ms < ?1 \
                 AND (ended_ms IS NOT NULL OR swept_ms IS NOT NULL)",
            )?
            .execute(params![before_ms])?)
    }
}
