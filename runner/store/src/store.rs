//! Opening the store: connection settings, parent directories, migrations.

use std::fs::{self, OpenOptions, Permissions};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, OpenFlags};

use crate::audit_writer::AuditWriter;
use crate::error::StoreError;
use crate::migrate;
use crate::seal::{JournalKey, key_path};

/// How long a statement waits for another writer before SQLite reports busy.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// How often, and how far apart, an open refused with SQLITE_BUSY is tried again.
const OPEN_RETRIES: u32 = 100;
const OPEN_RETRY_PAUSE: Duration = Duration::from_millis(20);
/// Page cache of the store's connection, in KiB (`PRAGMA cache_size = -N`). SQLite's default
/// (2000 KiB per connection) filled as the audit log grew and was most of a long session's
/// resident growth; the store's queries touch few pages (appends at the end of each tree,
/// lookups by key), so a small cache costs them nothing measurable.
pub(crate) const CACHE_KIB: i64 = 512;
/// SQLite's own `wal_autocheckpoint` (pages), which a connection goes back to when the audit
/// writer's checkpoint thread stops (`checkpointer.rs`).
pub(crate) const WAL_AUTOCHECKPOINT: i64 = 1000;

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
    /// The audit writer, once started (by `audit_queue.rs`).
    pub(crate) audit_writer: OnceLock<AuditWriter>,
    /// The files `open` found readable or writable by others and tightened to 0600.
    tightened: Vec<Tightened>,
}

/// A store file (the database, its `-wal` or its `-shm`) whose permissions `open` tightened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tightened {
    /// The file.
    pub path: PathBuf,
    /// Its permission bits before (e.g. `0o644`); it is `0o600` now.
    pub old_mode: u32,
}

/// `<store><suffix>`: SQLite's companion files of the store.
fn companion(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

fn unsafe_file(path: &Path, what: &str) -> StoreError {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    StoreError::UnsafeFile(format!("the store file {name} {what}"))
}

/// Refuses a store file that is a symbolic link or not a regular file, and tightens one that
/// group or others may read or write to 0600 (on the descriptor, opened without following a
/// link, after checking it is the file that was looked at). A missing file is fine.
///
/// A descriptor is opened (and closed) only when the mode must change: closing any descriptor
/// of a file drops every POSIX lock this process holds on it, SQLite's included, and a loose
/// mode is only ever found before this process opened the store (it creates nothing loose).
fn secure_file(path: &Path, is_main: bool) -> Result<Option<Tightened>, StoreError> {
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    if meta.file_type().is_symlink() {
        return Err(unsafe_file(
            path,
            "is a symbolic link; a store is never opened through one (point --store at the file itself)",
        ));
    }
    if is_main && meta.is_dir() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::IsADirectory,
            "the store path is a directory",
        )
        .into());
    }
    if !meta.is_file() {
        return Err(unsafe_file(path, "is not a regular file"));
    }
    let old_mode = meta.mode() & 0o7777;
    if old_mode & 0o077 == 0 {
        return Ok(None);
    }
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    let now = f.metadata()?;
    if !now.is_file() || now.dev() != meta.dev() || now.ino() != meta.ino() {
        return Err(unsafe_file(path, "was replaced while it was being checked"));
    }
    // fchmod(2) on the descriptor: the file checked is the file changed.
    f.set_permissions(Permissions::from_mode(0o600))?;
    Ok(Some(Tightened {
        path: path.to_path_buf(),
        old_mode: now.mode() & 0o7777,
    }))
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

impl Store {
    /// Opens (creating if needed) the store file at `path`, its parent directories included, and
    /// migrates it to the newest schema. A new file is created readable by its owner only; an
    /// existing one (and its `-wal`/`-shm`) that others may read or write is tightened to 0600
    /// (see [`Store::permissions_tightened`]); a store path, `-wal` or `-shm` that is a symbolic
    /// link or not a regular file is refused.
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
            // O_EXCL does not follow a symbolic link either: a link is "already there".
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e.into()),
        }
        // lstat, not open: no descriptor of the file is opened (and closed) here unless its
        // mode must be tightened.
        let mut tightened = Vec::new();
        for (file, is_main) in [
            (path.to_path_buf(), true),
            (companion(path, "-wal"), false),
            (companion(path, "-shm"), false),
        ] {
            tightened.extend(secure_file(&file, is_main)?);
        }
        // SQLite refuses a symbolic link too (a link swapped in after the check above).
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::default() | OpenFlags::SQLITE_OPEN_NOFOLLOW,
        )?;
        let mut store = Self::configure(conn, true, Some(key_path(path)))?;
        store.tightened = tightened;
        Ok(store)
    }

    /// The store files this open found readable or writable by group or others and tightened
    /// to 0600 (the caller logs them).
    pub fn permissions_tightened(&self) -> &[Tightened] {
        &self.tightened
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
        conn.pragma_update(None, "cache_size", -CACHE_KIB)?;
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
            audit_writer: OnceLock::new(),
            tightened: Vec::new(),
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
        assert_eq!(get("cache_size"), format!("Integer({})", -CACHE_KIB));
    }

    fn mode(p: &Path) -> u32 {
        fs::symlink_metadata(p).unwrap().mode() & 0o7777
    }

    #[test]
    fn a_loose_store_and_its_wal_and_shm_are_tightened_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("s.db");
        drop(Store::open(&db).unwrap());
        // As another tool (or an older CodeSpace) may have left them: a loose database, and
        // loose -wal and -shm files beside it.
        for f in [companion(&db, "-wal"), companion(&db, "-shm")] {
            fs::write(&f, b"").unwrap();
        }
        for f in [db.clone(), companion(&db, "-wal"), companion(&db, "-shm")] {
            fs::set_permissions(&f, Permissions::from_mode(0o644)).unwrap();
        }
        let store = Store::open(&db).unwrap();
        let mut got: Vec<_> = store
            .permissions_tightened()
            .iter()
            .map(|t| (t.path.clone(), t.old_mode))
            .collect();
        got.sort();
        let mut want = vec![
            (db.clone(), 0o644),
            (companion(&db, "-shm"), 0o644),
            (companion(&db, "-wal"), 0o644),
        ];
        want.sort();
        assert_eq!(got, want);
        for f in [db.clone(), companion(&db, "-wal"), companion(&db, "-shm")] {
            assert_eq!(mode(&f), 0o600, "{}", f.display());
        }
        assert_eq!(store.schema_version().unwrap(), crate::LATEST_VERSION);
        drop(store);
        // Tight already: nothing to report.
        assert!(Store::open(&db).unwrap().permissions_tightened().is_empty());
    }

    #[test]
    fn a_store_path_that_is_a_symlink_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.db");
        drop(Store::open(&real).unwrap());
        let link = dir.path().join("link.db");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let err = Store::open(&link).unwrap_err().to_string();
        assert!(err.contains("link.db is a symbolic link"), "{err}");
        // A dangling link is refused the same way, and nothing is created through it.
        let dangling = dir.path().join("dangling.db");
        std::os::unix::fs::symlink(dir.path().join("nowhere.db"), &dangling).unwrap();
        let err = Store::open(&dangling).unwrap_err().to_string();
        assert!(err.contains("dangling.db is a symbolic link"), "{err}");
        assert!(!dir.path().join("nowhere.db").exists());
        // A -wal that is a link is refused too.
        let db = dir.path().join("w.db");
        drop(Store::open(&db).unwrap());
        std::os::unix::fs::symlink(&real, companion(&db, "-wal")).unwrap();
        let err = Store::open(&db).unwrap_err().to_string();
        assert!(err.contains("w.db-wal is a symbolic link"), "{err}");
    }
}
