//! The SQLite store of CodeSpace: decisions (audit), events, operations, processes, patch journal.
//!
//! One [`Store`] wraps one `rusqlite::Connection` behind a mutex: it is `Send + Sync` and cheap to
//! share in an `Arc`. Every time is unix milliseconds (see [`now_ms`]).

mod audit_queue;
mod codec;
mod decisions;
mod error;
mod events;
mod journal;
mod migrate;
mod operations;
mod processes;
mod store;

pub use audit_queue::{
    AuditErrorHook, AuditTicket, AuditWriterConfig, DEFAULT_BATCH_ROWS, DEFAULT_CAPACITY,
    DEFAULT_MAX_DELAY, TryAppendError,
};
pub use decisions::{DecisionQuery, DecisionRow};
pub use error::StoreError;
pub use events::EventRow;
pub use journal::{JournalEntry, OpenJournal};
pub use migrate::LATEST_VERSION;
pub use operations::{KeyClaim, OperationEvent, OperationRow};
pub use processes::ProcessRow;
pub use store::{Store, now_ms};
