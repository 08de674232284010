//! The operation ledger: the files each operation changed, with content-addressed before/after
//! blobs (deduplicated by version; a blob no row names is pruned by retention), withheld files
//! named without content, and the best-effort file list of a command.

use rusqlite::{OptionalExtension, TransactionBehavior, params};

use crate::error::StoreError;
use crate::operations::{COLUMNS, OperationRow, from_row};
use crate::store::Store;

/// One file an operation changed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LedgerFile {
    /// Workspace-relative path (for a move: the destination).
    pub path: String,
    /// For a move: the source path.
    pub from: Option<String>,
    /// `add` / `update` / `delete` / `move` (a patch), `changed` (a command).
    pub kind: String,
    /// The version (= blob hash) before; `None` for an add, a withheld file or a command's row.
    pub before: Option<String>,
    /// The version (= blob hash) after; `None` for a delete, a withheld file or a command's row.
    pub after: Option<String>,
    /// Permission bits of the file before (an update, delete or move), when known.
    pub mode: Option<u32>,
    /// The file's content is never stored (secret): only its path.
    pub withheld: bool,
    /// The command that changed it (a command's row).
    pub process_id: Option<String>,
    /// Recorded from the watcher while a command ran: may miss or over-report files.
    pub best_effort: bool,
}

/// The bytes a ledger blob holds, keyed by its version.
#[derive(Debug, Clone, Copy)]
pub struct Blob<'a> {
    /// `sha256:<hex>` of `data`.
    pub hash: &'a str,
    /// The content.
    pub data: &'a [u8],
}

impl Store {
    /// Records the files of `operation_id` and the blobs they name, in one transaction (a blob
    /// already stored is not stored again). The operation must exist.
    pub fn ledger_record(
        &self,
        operation_id: &str,
        files: &[LedgerFile],
        blobs: &[Blob<'_>],
    ) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let op_exists = tx
            .prepare_cached("SELECT 1 FROM operations WHERE operation_id = ?1")?
            .query_row(params![operation_id], |_| Ok(()))
            .optional()?
            .is_some();
        if !op_exists {
            return Err(StoreError::OperationNotFound(operation_id.to_owned()));
        }
        {
            let mut st = tx.prepare_cached(
                "INSERT INTO ledger_blobs (hash, size, data) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (hash) DO NOTHING",
            )?;
            for b in blobs {
                let size = i64::try_from(b.data.len()).unwrap_or(i64::MAX);
                st.execute(params![b.hash, size, b.data])?;
            }
            let mut st = tx.prepare_cached(
                "INSERT INTO ledger_files (operation_id, path, from_path, kind, before_version, \
                 after_version, mode, withheld, process_id, best_effort) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            )?;
            for f in files {
                st.execute(params![
                    operation_id,
                    f.path,
                    f.from,
                    f.kind,
                    f.before,
                    f.after,
                    f.mode,
                    f.withheld,
                    f.process_id,
                    f.best_effort
                ])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// The files recorded for `operation_id`, in the order they were recorded.
    pub fn ledger_files(&self, operation_id: &str) -> Result<Vec<LedgerFile>, StoreError> {
        let conn = self.conn();
        let mut st = conn.prepare_cached(
            "SELECT path, from_path, kind, before_version, after_version, mode, withheld, \
             process_id, best_effort FROM ledger_files WHERE operation_id = ?1 ORDER BY id",
        )?;
        let rows = st
            .query_map(params![operation_id], |r| {
                Ok(LedgerFile {
                    path: r.get(0)?,
                    from: r.get(1)?,
                    kind: r.get(2)?,
                    before: r.get(3)?,
                    after: r.get(4)?,
                    mode: r.get(5)?,
                    withheld: r.get(6)?,
                    process_id: r.get(7)?,
                    best_effort: r.get(8)?,
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    /// The content of the blob with this hash, if stored.
    pub fn ledger_blob(&self, hash: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let conn = self.conn();
        let data = conn
            .prepare_cached("SELECT data FROM ledger_blobs WHERE hash = ?1")?
            .query_row(params![hash], |r| r.get(0))
            .optional()?;
        Ok(data)
    }

    /// How many blobs the ledger holds and their bytes.
    pub fn ledger_blob_bytes(&self) -> Result<(i64, i64), StoreError> {
        let conn = self.conn();
        Ok(conn.query_row(
            "SELECT count(*), coalesce(sum(size), 0) FROM ledger_blobs",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?)
    }

    /// The newest operations, newest first, at most `limit`; `workspace` narrows to one.
    pub fn recent_operations(
        &self,
        workspace: Option<&str>,
        limit: usize,
    ) -> Result<Vec<OperationRow>, StoreError> {
        let conn = self.conn();
        let mut st = conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM operations WHERE (?1 IS NULL OR workspace = ?1) \
             ORDER BY created_ms DESC, operation_id LIMIT ?2"
        ))?;
        let rows = st
            .query_map(params![workspace, crate::codec::sql_limit(limit)], from_row)?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::retention::PruneTarget;

    fn op(store: &Store, id: &str, at: i64) {
        store
            .create_operation(
                &OperationRow {
                    operation_id: id.into(),
                    operation_key: None,
                    fingerprint: "f".into(),
                    tool: "apply_patch".into(),
                    workspace: "w".into(),
                    client: Some("local".into()),
                    status: "applied".into(),
                    created_ms: at,
                    finished_ms: Some(at),
                    result: None,
                },
                None,
            )
            .unwrap();
    }

    fn file(before: &str, after: &str) -> LedgerFile {
        LedgerFile {
            path: "a.txt".into(),
            kind: "update".into(),
            before: Some(before.into()),
            after: Some(after.into()),
            ..LedgerFile::default()
        }
    }

    #[test]
    fn blobs_are_stored_once_and_pruned_when_no_row_names_them() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s.db")).unwrap();
        op(&store, "op-1", 1);
        op(&store, "op-2", 5);
        let (a, b, c) = (b"a".as_slice(), b"b".as_slice(), b"c".as_slice());
        store
            .ledger_record(
                "op-1",
                &[file("h-a", "h-b")],
                &[
                    Blob {
                        hash: "h-a",
                        data: a,
                    },
                    Blob {
                        hash: "h-b",
                        data: b,
                    },
                ],
            )
            .unwrap();
        store
            .ledger_record(
                "op-2",
                &[file("h-b", "h-c")],
                &[
                    Blob {
                        hash: "h-b",
                        data: b,
                    },
                    Blob {
                        hash: "h-c",
                        data: c,
                    },
                ],
            )
            .unwrap();
        assert_eq!(store.ledger_blob_bytes().unwrap(), (3, 3));
        assert_eq!(
            store.ledger_files("op-2").unwrap(),
            vec![file("h-b", "h-c")]
        );
        assert!(matches!(
            store.ledger_record("op-none", &[], &[]),
            Err(StoreError::OperationNotFound(_))
        ));
        // Nothing unnamed yet.
        assert_eq!(
            store.prune_batch(PruneTarget::LedgerBlobs, 0, 100).unwrap(),
            0
        );
        // op-1 pruned: its rows go with it, and the blob only it named.
        assert_eq!(
            store.prune_batch(PruneTarget::Operations, 2, 100).unwrap(),
            1
        );
        let left =
            store.ledger_files("op-1").unwrap().len() + store.ledger_files("op-2").unwrap().len();
        assert_eq!(left, 1);
        assert_eq!(
            store.prune_batch(PruneTarget::LedgerBlobs, 0, 100).unwrap(),
            1
        );
        assert_eq!(store.ledger_blob("h-a").unwrap(), None);
        assert_eq!(store.ledger_blob("h-b").unwrap(), Some(b.to_vec()));
        assert_eq!(store.recent_operations(Some("w"), 10).unwrap().len(), 1);
    }
}
