//! Opening the store: connection settings, parent directories, migrations.

use std::fs::{self, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::Connection;

use crate::error::StoreError;
use crate::migrate;
use crate::seal::{JournalKey, key_path};

/// How long a statement waits for another writer before SQLite reports busy.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// How often, and how far apart, an open refused with SQLITE_BUSY is tried again.
const OPEN_RETRIES: u32 = 100;
const OPEN_RETRY_PAUSE: Duration = Duration::from_millis(20);

/// SQLITE_BUSY or SQLITE_LOCKED.
fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// The current time as unix milliseconds (0 if the clock is before 1970).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The CodeSpace store: one SQLite connection behind a mutex. `Send + Sync`; share it in an `Arc`.
pub struct Store {
    conn: Mutex<Connection>,
    /// Where the journal key comes from: the file next to the store, or memory.
    key_file: Option<PathBuf>,
    /// The journal key, loaded (or created) on first use.
    key: Mutex<Option<JournalKey>>,
    /// The audit writer, once started (see `audit_queue`).
    pub(crate) audit_writer: std::sync::OnceLock<crate::audit_queue::AuditWriter>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

impl Store {
    /// Opens (creating if needed) the store file at `path`, its parent directories included, and
    /// migrates it to the newest schema. A new file is created readable by its owner only.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            fs::create_dir_all(parent)?;
        }
        // Create the file ourselves so the audit log is not world-readable; SQLite's -wal and
        // -shm files copy the database file's permissions.
        //
        // Only when it does not exist yet (O_EXCL): closing a descriptor of a file drops every
        // POSIX lock this process holds on it, including those of SQLite connections already
        // open on the same store in this process (the server opens it several times: the
        // gateway's store, the audit writer, the retention pruner). Without its shared lock, the
        // next outside reader to close its connection thinks it is the last one, checkpoints and
        // deletes the `-wal` and `-shm` files under our connections, and rows written after that
        // go to an unlinked WAL no other process sees until this one exits.
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
        {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                // stat, not open: no descriptor of the file is opened (and closed) here.
                if fs::metadata(path)?.is_dir() {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::IsADirectory,
                        "the store path is a directory",
                    )
                    .into());
                }
            }
            Err(e) => return Err(e.into()),
        }
        let conn = Connection::open(path)?;
        Self::configure(conn, true, Some(key_path(path)))
    }

    /// Opens a private in-memory store (for tests and dry runs), migrated to the newest schema.
    /// Its journal key lives in memory only.
    pub fn open_in_memory() -> Result<Store, StoreError> {
        Self::configure(Connection::open_in_memory()?, false, None)
    }

    fn prepare_schema(conn: &mut Connection, wal: bool) -> Result<(), StoreError> {
        if wal {
            let _mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
        }
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", true)?;
        migrate::migrate(conn)
    }

    fn configure(
        mut conn: Connection,
        wal: bool,
        key_file: Option<PathBuf>,
    ) -> Result<Store, StoreError> {
        // The busy timeout comes first: switching to WAL and migrating may wait for other openers.
        conn.busy_timeout(BUSY_TIMEOUT)?;
        // Switching to WAL and migrating while other processes open the same fresh file can be
        // refused with SQLITE_BUSY without the busy handler being asked (a lock upgrade SQLite
        // will not wait for): such a refusal is retried, bounded, instead of failing the open.
        let mut attempts = 0;
        loop {
            match Self::prepare_schema(&mut conn, wal) {
                Err(StoreError::Sqlite(e)) if is_busy(&e) && attempts < OPEN_RETRIES => {
                    attempts += 1;
                    std::thread::sleep(OPEN_RETRY_PAUSE);
                }
                other => break other?,
            }
        }
        Ok(Store {
            conn: Mutex::new(conn),
            key_file,
            key: Mutex::new(None),
            audit_writer: std::sync::OnceLock::new(),
        })
    }

    /// The journal key file of this store (`<store>.key`), None for an in-memory store.
    pub fn journal_key_file(&self) -> Option<&Path> {
        self.key_file.as_deref()
    }

    /// The journal key: read from (or created in) the key file on first use. Readers of the
    /// audit log never need it, so opening a store does not touch the key file.
    pub(crate) fn journal_key(&self) -> Result<JournalKey, StoreError> {
        let mut slot = self.key.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(k) = slot.as_ref() {
            return Ok(k.clone());
        }
        let key = match &self.key_file {
            Some(path) => JournalKey::load_or_create(path)?,
            None => JournalKey::ephemeral()?,
        };
        *slot = Some(key.clone());
        Ok(key)
    }

    /// The schema version of the open database (`PRAGMA user_version`).
    pub fn schema_version(&self) -> Result<i64, StoreError> {
        Ok(migrate::user_version(&self.conn())?)
    }

    /// Locks the connection. A panic in another holder cannot leave a transaction open (dropping
    /// a `Transaction` rolls it back), so a poisoned lock is still safe to use.
    pub(crate) fn conn(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_store_connection_uses_the_documented_pragmas() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s.db")).unwrap();
        let conn = store.conn();
        let get = |pragma: &str| -> String {
            conn.query_row(&format!("PRAGMA {pragma}"), [], |r| {
                r.get::<_, rusqlite::types::Value>(0)
            })
            .map(|v| format!("{v:?}"))
            .unwrap()
        };
        assert_eq!(get("journal_mode"), "Text(\"wal\")");
        assert_eq!(get("synchronous"), "Integer(1)"); // NORMAL
        assert_eq!(get("foreign_keys"), "Integer(1)");
        assert_eq!(get("busy_timeout"), "Integer(5000)");
    }
}
