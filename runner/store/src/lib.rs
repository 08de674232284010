//! The SQLite store of CodeSpace: decisions (audit), events, operations and their scoped keys,
//! processes, workspace registrations, saved path indexes, the sealed patch journal, server
//! instances, approval holds, the operation ledger (changed files, content-addressed blobs),
//! retention pruning, re-redacting stored rows, the policy sets the rows were decided under.
//!
//! One [`Store`] wraps one `rusqlite::Connection` behind a mutex: it is `Send + Sync` and cheap to
//! share in an `Arc`. Every time is unix milliseconds (see [`now_ms`]).

#![forbid(unsafe_code)]

mod approvals;
mod audit_queue;
mod audit_writer;
mod checkpointer;
mod codec;
mod decision_rows;
mod decisions;
mod error;
mod events;
mod instances;
mod journal;
mod ledger;
mod migrate;
mod operations;
mod path_indexes;
mod policy_sets;
mod processes;
mod registrations;
mod retention;
mod scrub;
mod seal;
mod store;

pub use approvals::{ApprovalRow, ApprovalState, Resolution, UnknownApprovalState};
pub use audit_writer::{
    AUDIT_WRITE_FAILED, AuditErrorHook, AuditTicket, AuditWriterConfig, DEFAULT_BATCH_ROWS,
    DEFAULT_CAPACITY, DEFAULT_CAPACITY_BYTES, DEFAULT_MAX_DELAY, TryAppendError,
};
pub use decision_rows::{DecisionRow, MASKED, PolicySigner};
pub use decisions::DecisionQuery;
pub use error::StoreError;
pub use events::EventRow;
pub use instances::InstanceRow;
pub use journal::{JournalEntry, JournalSeal, OpenJournal};
pub use ledger::{Blob, LedgerFile};
pub use migrate::LATEST_VERSION;
pub use operations::{KeyClaim, KeyScope, OperationEvent, OperationRow};
pub use policy_sets::PolicySetRecord;
pub use processes::ProcessRow;
pub use retention::{PruneTarget, StoreStats};
pub use scrub::{ScrubBatch, ScrubTarget, Scrubber};
pub use seal::{JournalKey, key_path as journal_key_path};
pub use store::{Store, Tightened, now_ms};
