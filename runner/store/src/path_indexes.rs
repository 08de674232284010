//! The `path_indexes` table: a workspace's path index saved at a clean shutdown (an opaque blob
//! the engine encodes and validates), taken (read and deleted) by the next start.

use rusqlite::{OptionalExtension, TransactionBehavior, params};

use crate::error::StoreError;
use crate::store::{Store, now_ms};

impl Store {
    /// Saves the path index of the workspace registration `registration` (replacing any).
    pub fn save_path_index(&self, registration: &str, data: &[u8]) -> Result<(), StoreError> {
        self.conn()
            .prepare_cached(
                "INSERT INTO path_indexes (registration_id, saved_ms, data) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (registration_id) DO UPDATE SET saved_ms = ?2, data = ?3",
            )?
            .execute(params![registration, now_ms(), data])?;
        Ok(())
    }

    /// Reads and deletes the saved path index of `registration`, in one transaction: a saved
    /// index is used by one start at most.
    pub fn take_path_index(&self, registration: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let data: Option<Vec<u8>> = tx
            .prepare_cached("SELECT data FROM path_indexes WHERE registration_id = ?1")?
            .query_row(params![registration], |r| r.get(0))
            .optional()?;
        if data.is_some() {
            tx.prepare_cached("DELETE FROM path_indexes WHERE registration_id = ?1")?
                .execute(params![registration])?;
        }
        tx.commit()?;
        Ok(data)
    }
}

#[cfg(test)]
mod tests {
    use crate::store::Store;

    #[test]
    fn a_saved_index_is_taken_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s.db")).unwrap();
        let reg = store.register_workspace("w", "1:2", "reg-1").unwrap();
        assert_eq!(store.take_path_index(&reg).unwrap(), None);
        store.save_path_index(&reg, b"one").unwrap();
        store.save_path_index(&reg, b"two").unwrap();
        assert_eq!(
            store.take_path_index(&reg).unwrap().as_deref(),
            Some(&b"two"[..])
        );
        assert_eq!(store.take_path_index(&reg).unwrap(), None);
        // Only a registered workspace may have one.
        assert!(store.save_path_index("reg-unknown", b"x").is_err());
    }
}
