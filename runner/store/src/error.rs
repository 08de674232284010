//! The error type of the store.

/// Everything that can go wrong in the store. Messages never carry absolute paths.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite reported an error.
    #[error("store database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The store path (or its `-wal`/`-shm` file) is a symbolic link or not a regular file:
    /// refused, never followed.
    #[error("{0}")]
    UnsafeFile(String),
    /// Creating the store directory or file failed.
    #[error("store i/o error: {0}")]
    Io(#[from] std::io::Error),
    /// A JSON column could not be encoded or decoded.
    #[error("store json error: {0}")]
    Json(#[from] serde_json::Error),
    /// The database was written by a newer CodeSpace than this one.
    #[error(
        "store schema version {found} is newer than the newest this build knows ({supported}); \
         upgrade CodeSpace or point it at another store"
    )]
    SchemaTooNew {
        /// `PRAGMA user_version` of the file.
        found: i64,
        /// Newest version this build can migrate to.
        supported: i64,
    },
    /// A migration step left rows that break a foreign key; nothing of the step was kept.
    #[error("store migration to schema version {0} failed its foreign key check")]
    Migration(i64),
    /// The journal key file next to the store cannot be used.
    #[error("store journal key: {0}")]
    JournalKey(String),
    /// No operation has this id.
    #[error("operation not found: {0}")]
    OperationNotFound(String),
    /// A rollback journal for this operation already exists.
    #[error("a patch journal already exists for operation {0}")]
    JournalExists(String),
    /// The audit writer could not commit queued decision rows.
    #[error("audit write failed: {0}")]
    AuditWrite(String),
    /// No approval hold has this id (or it changed state under the caller).
    #[error("approval not found: {0}")]
    ApprovalNotFound(String),
}
