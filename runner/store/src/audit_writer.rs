//! The audit writer: decision rows leave the request path through an in-memory queue that one
//! writer thread drains in group commits (one transaction per batch) on its own connection.
//!
//! - A batch is committed once its oldest row has waited `max_delay` (50 ms), once `batch_rows`
//!   (512) rows are queued, or at once when someone waits on a row ([`AuditTicket::wait`]: the
//!   write-ahead of mutating calls) or on everything ([`AuditWriter::flush`]: the barrier of
//!   readers and tests).
//! - The queue is bounded (`capacity` rows and `capacity_bytes` of rows in memory, by
//!   [`DecisionRow::approx_bytes`]): an append that does not fit waits for room or is handed
//!   back ([`AuditWriter::append`]); rows are never dropped for lack of room. Half the byte
//!   bound queued starts a commit as a full batch does, so a writer that falls behind holds
//!   its queue (and the server's resident memory) to that bound rather than to `capacity` rows
//!   of a few KiB each.
//! - Stopping ([`AuditWriter::stop`], or dropping the writer with its store) drains the queue
//!   first.
//! - Each decision's rows sit in their own savepoint, so one bad decision does not take the rest
//!   of its batch down with it.
//!
//! - A decision whose rows the store refuses is never dropped silently: the error hook is told
//!   (the server logs it and counts `codespace_audit_write_failures_total`), the ticket's waiter
//!   gets the error, and the writer stores an [`AUDIT_WRITE_FAILED`] event (how many, why) on its
//!   own connection, in a transaction of its own.
//!
//! The writer knows only a store file's path, never the store: `audit_queue.rs` holds the
//! store's side (starting it, and writing at once on the store's connection when no writer runs).

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rusqlite::{Connection, TransactionBehavior};

use crate::checkpointer::Checkpointer;
use crate::decision_rows::{DecisionRow, insert_rows};
use crate::error::StoreError;

/// The `events` kind of a batch (or one decision in it) the store refused: detail
/// `{appends_lost, rows_lost, error, writer}`.
pub const AUDIT_WRITE_FAILED: &str = "audit_write_failed";

/// Called by the writer thread when a batch (or one decision in it) cannot be committed, with
/// the error and the number of rows lost (0: the failure event itself could not be stored).
pub type AuditErrorHook = Arc<dyn Fn(&StoreError, usize) + Send + Sync>;

/// How the writer batches.
#[derive(Clone)]
pub struct AuditWriterConfig {
    /// The longest a queued row waits for its commit when nobody waits on it.
    pub max_delay: Duration,
    /// Commit as soon as this many rows are queued.
    pub batch_rows: usize,
    /// Rows the queue holds before appends wait for room.
    pub capacity: usize,
    /// Bytes of rows ([`DecisionRow::approx_bytes`]) the queue holds before appends wait for
    /// room; half of it queued starts a commit.
    pub capacity_bytes: usize,
    /// Where commit failures are reported (they are also returned to waiting tickets).
    pub on_error: Option<AuditErrorHook>,
}

impl std::fmt::Debug for AuditWriterConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditWriterConfig")
            .field("max_delay", &self.max_delay)
            .field("batch_rows", &self.batch_rows)
            .field("capacity", &self.capacity)
            .field("capacity_bytes", &self.capacity_bytes)
            .finish_non_exhaustive()
    }
}

/// The longest a read decision stays in memory only (the durability window on `kill -9`).
pub const DEFAULT_MAX_DELAY: Duration = Duration::from_millis(50);
/// A group commit starts at this many queued rows.
pub const DEFAULT_BATCH_ROWS: usize = 512;
/// Queued rows before appends wait for the writer (backpressure).
pub const DEFAULT_CAPACITY: usize = 16 * DEFAULT_BATCH_ROWS;
/// Bytes of queued rows before appends wait for the writer. A `read`'s row holds about 3 KiB
/// (most of it the recorded Cedar request's JSON tree), so the row bound alone let a writer that
/// fell behind on a loaded machine hold ~25 MB (issue 34: RSS over 20 000 reads swung by
/// 5-25 MB); 512 KiB is about 170 such rows, and a commit starts at half of it.
pub const DEFAULT_CAPACITY_BYTES: usize = 512 * 1024;

impl Default for AuditWriterConfig {
    fn default() -> AuditWriterConfig {
        AuditWriterConfig {
            max_delay: DEFAULT_MAX_DELAY,
            batch_rows: DEFAULT_BATCH_ROWS,
            capacity: DEFAULT_CAPACITY,
            capacity_bytes: DEFAULT_CAPACITY_BYTES,
            on_error: None,
        }
    }
}

/// Rows appended and not yet committed: one decision's rows, numbered in append order.
struct Pending {
    seq: u64,
    rows: Vec<DecisionRow>,
    /// Their [`DecisionRow::approx_bytes`].
    bytes: usize,
}

/// A failed commit: appends `first..=last` were lost.
struct Failure {
    first: u64,
    last: u64,
    message: String,
}

/// Failures remembered for tickets that have not been waited on yet.
const FAILURES_KEPT: usize = 64;

#[derive(Default)]
struct State {
    queue: VecDeque<Pending>,
    queued_rows: usize,
    /// [`DecisionRow::approx_bytes`] of the queued rows.
    queued_bytes: usize,
    /// Sequence number of the last append (0: none yet).
    appended: u64,
    /// Every append up to this one has been committed (or has failed).
    done: u64,
    /// Someone waits for appends up to this one: commit without lingering.
    wanted: u64,
    /// When the oldest queued append arrived.
    oldest: Option<Instant>,
    stopping: bool,
    /// The writer thread has ended; appends go straight to the store's connection.
    stopped: bool,
    failures: VecDeque<Failure>,
}

struct Shared {
    state: Mutex<State>,
    /// The writer waits here for work.
    work: Condvar,
    /// Appenders wait here for room, ticket holders for their commit.
    progress: Condvar,
    config: AuditWriterConfig,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Blocks until append `seq` is committed; Err when its batch failed.
    fn wait_for(&self, seq: u64) -> Result<(), StoreError> {
        let mut st = self.lock();
        if st.done < seq && seq > st.wanted {
            st.wanted = seq;
            self.work.notify_one();
        }
        while st.done < seq && !st.stopped {
            st = self
                .progress
                .wait(st)
                .unwrap_or_else(PoisonError::into_inner);
        }
        if st.done < seq {
            return Err(StoreError::AuditWrite(
                "the audit writer stopped before the rows were written".into(),
            ));
        }
        match st.failures.iter().find(|f| f.first <= seq && seq <= f.last) {
            Some(f) => Err(StoreError::AuditWrite(f.message.clone())),
            None => Ok(()),
        }
    }
}

/// The running writer of one store file.
pub(crate) struct AuditWriter {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Checkpoints the log off the request path (None: it could not start, and every
    /// connection checkpoints itself as before).
    checkpointer: Option<Arc<Checkpointer>>,
}

impl AuditWriter {
    /// Opens the writer's own connection to the store file at `path` and starts its thread.
    pub(crate) fn start(path: &str, config: AuditWriterConfig) -> Result<AuditWriter, StoreError> {
        let conn = open_writer_connection(path)?;
        let checkpointer = Checkpointer::start(path).ok().map(Arc::new);
        if checkpointer.is_some() {
            conn.pragma_update(None, "wal_autocheckpoint", 0)?;
        }
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            work: Condvar::new(),
            progress: Condvar::new(),
            config,
        });
        let for_thread = Arc::clone(&shared);
        let cp = checkpointer.clone();
        let thread = std::thread::Builder::new()
            .name("codespace-audit".into())
            .spawn(move || run(&for_thread, conn, cp.as_deref()))?;
        Ok(AuditWriter {
            shared,
            thread: Mutex::new(Some(thread)),
            checkpointer,
        })
    }

    /// The thread that checkpoints the log while this writer runs, if it started.
    pub(crate) fn checkpointer(&self) -> Option<&Checkpointer> {
        self.checkpointer.as_deref()
    }

    /// Whether the writer thread still takes appends.
    pub(crate) fn running(&self) -> bool {
        !self.shared.lock().stopped
    }

    /// Queues one decision's rows (not empty): the ticket settles at their commit. A full
    /// queue makes a blocking append wait for room and hands a non-blocking one its rows back;
    /// a stopping or stopped writer hands them back for the caller to write at once.
    pub(crate) fn append(
        &self,
        rows: Vec<DecisionRow>,
        block: bool,
    ) -> Result<AuditTicket, NotQueued> {
        let shared = &self.shared;
        let bytes: usize = rows.iter().map(DecisionRow::approx_bytes).sum();
        let mut st = shared.lock();
        loop {
            if st.stopped || st.stopping {
                drop(st);
                return Err(NotQueued::Stopped(rows));
            }
            // An append larger than the whole queue still goes in once the queue is empty.
            let fits = st.queued_rows == 0
                || (st.queued_rows + rows.len() <= shared.config.capacity
                    && st.queued_bytes + bytes <= shared.config.capacity_bytes);
            if fits {
                break;
            }
            if !block {
                return Err(NotQueued::Full(rows));
            }
            // The queue is full: the writer commits what is queued without lingering.
            if st.wanted < st.appended {
                st.wanted = st.appended;
                shared.work.notify_one();
            }
            st = shared
                .progress
                .wait(st)
                .unwrap_or_else(PoisonError::into_inner);
        }
        st.appended += 1;
        let seq = st.appended;
        let n = rows.len();
        let was_empty = st.queue.is_empty();
        st.queue.push_back(Pending { seq, rows, bytes });
        st.queued_rows += n;
        st.queued_bytes += bytes;
        if was_empty {
            st.oldest = Some(Instant::now());
        }
        // Wake the writer only when it has something to start on: the first rows (to start the
        // delay) or a full batch. Other appends ride along without a wake-up.
        if was_empty || batch_full(&st, &shared.config) {
            shared.work.notify_one();
        }
        Ok(AuditTicket {
            inner: Some((Arc::clone(shared), seq)),
        })
    }

    /// Returns once every row appended before the call is committed (failed commits were
    /// reported to the error hook).
    pub(crate) fn flush(&self) {
        let seq = self.shared.lock().appended;
        let _ = self.shared.wait_for(seq);
    }

    /// Drains the queue and ends the writer thread; every ticket handed out before is settled
    /// when this returns.
    pub(crate) fn stop(&self) {
        {
            let mut st = self.shared.lock();
            st.stopping = true;
            self.shared.work.notify_one();
        }
        crate::checkpointer::join_taken(&self.thread);
        if let Some(cp) = &self.checkpointer {
            cp.stop();
        }
        // A writer that died (it cannot panic on rows, but be safe) releases every waiter.
        let mut st = self.shared.lock();
        st.stopped = true;
        self.shared.progress.notify_all();
    }
}

impl Drop for AuditWriter {
    fn drop(&mut self) {
        self.stop();
    }
}

/// An append's place in the queue: [`AuditTicket::wait`] returns once it is committed.
#[derive(Clone)]
pub struct AuditTicket {
    inner: Option<(Arc<Shared>, u64)>,
}

impl std::fmt::Debug for AuditTicket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditTicket")
            .field("seq", &self.inner.as_ref().map(|(_, s)| *s))
            .finish()
    }
}

impl AuditTicket {
    /// A ticket for rows already written.
    pub(crate) fn written() -> AuditTicket {
        AuditTicket { inner: None }
    }

    /// True when the rows are already committed (waiting would not block).
    pub fn is_written(&self) -> bool {
        match &self.inner {
            None => true,
            Some((shared, seq)) => {
                let st = shared.lock();
                st.done >= *seq || st.stopped
            }
        }
    }

    /// Blocks until the rows are committed (asking the writer to commit now rather than
    /// after its delay). Err when their commit failed.
    pub fn wait(&self) -> Result<(), StoreError> {
        match &self.inner {
            None => Ok(()),
            Some((shared, seq)) => shared.wait_for(*seq),
        }
    }
}

/// An append that did not fit in a full queue: the rows, handed back.
#[derive(Debug)]
pub enum TryAppendError {
    /// The queue is full; wait for room with
    /// [`Store::append_decisions`](crate::Store::append_decisions).
    Full(Vec<DecisionRow>),
    /// Writing at once (no writer running) failed.
    Store(StoreError),
}

/// Why [`AuditWriter::append`] did not queue its rows: they are handed back.
pub(crate) enum NotQueued {
    /// The writer is stopping or has stopped: the caller writes the rows at once.
    Stopped(Vec<DecisionRow>),
    /// The queue is full and the append was not to wait for room.
    Full(Vec<DecisionRow>),
}

/// Opens the writer's own connection to the store file.
fn open_writer_connection(path: &str) -> Result<Connection, StoreError> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(5))?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", true)?;
    // It only appends: a page cache of the store's size bounds its growth with the audit log.
    conn.pragma_update(None, "cache_size", -crate::store::CACHE_KIB)?;
    Ok(conn)
}

/// Commits `batch` in one transaction, each append in its own savepoint. Returns the appends
/// that failed (sequence number, rows lost, error).
fn commit(conn: &mut Connection, batch: &[Pending]) -> Vec<(u64, usize, StoreError)> {
    let mut failed = Vec::new();
    let tx = match conn.transaction_with_behavior(TransactionBehavior::Immediate) {
        Ok(tx) => tx,
        Err(e) => {
            let message = e.to_string();
            return batch
                .iter()
                .map(|p| (p.seq, p.rows.len(), StoreError::AuditWrite(message.clone())))
                .collect();
        }
    };
    for p in batch {
        if let Err(e) = insert_in_savepoint(&tx, &p.rows) {
            failed.push((p.seq, p.rows.len(), e));
        }
    }
    if let Err(e) = tx.commit() {
        let message = e.to_string();
        return batch
            .iter()
            .map(|p| (p.seq, p.rows.len(), StoreError::AuditWrite(message.clone())))
            .collect();
    }
    failed
}

/// Runs one statement of the savepoint protocol through the connection's statement cache.
fn run_cached(conn: &Connection, sql: &str) -> Result<(), StoreError> {
    conn.prepare_cached(sql)?.execute([])?;
    Ok(())
}

/// Inserts one append's rows in a savepoint of their own: on any error they are rolled back
/// alone. The savepoint statements come from the statement cache (rusqlite's `Savepoint`
/// parses them anew for every append, a visible share of the writer's time per decision).
fn insert_in_savepoint(conn: &Connection, rows: &[DecisionRow]) -> Result<(), StoreError> {
    run_cached(conn, "SAVEPOINT audit_append")?;
    let inserted = insert_rows(conn, rows).and_then(|()| run_cached(conn, "RELEASE audit_append"));
    if inserted.is_err() {
        // Undo this append's rows and end its savepoint; the transaction goes on.
        let _ = run_cached(conn, "ROLLBACK TO audit_append");
        let _ = run_cached(conn, "RELEASE audit_append");
    }
    inserted
}

/// Stores one [`AUDIT_WRITE_FAILED`] event for the appends of a batch that were refused. When
/// the store refuses that too (e.g. the disk is full), the caller tells the error hook (with 0
/// rows: nothing more was lost).
fn record_failure(
    conn: &Connection,
    failed: &[(u64, usize, StoreError)],
) -> Result<(), StoreError> {
    let rows: usize = failed.iter().map(|(_, n, _)| n).sum();
    let error = failed
        .first()
        .map(|(_, _, e)| e.to_string())
        .unwrap_or_default();
    let detail = serde_json::json!({
        "appends_lost": failed.len(),
        "rows_lost": rows,
        "error": error,
        "writer": true,
    });
    let stored = conn
        .prepare_cached("INSERT INTO events (at_ms, kind, detail) VALUES (?1, ?2, ?3)")
        .and_then(|mut st| {
            st.execute(rusqlite::params![
                crate::store::now_ms(),
                AUDIT_WRITE_FAILED,
                detail.to_string()
            ])
        });
    stored.map(|_| ()).map_err(StoreError::from)
}

/// A batch is ready to commit without lingering: `batch_rows` rows, or half the byte bound.
fn batch_full(st: &State, cfg: &AuditWriterConfig) -> bool {
    st.queued_rows >= cfg.batch_rows || st.queued_bytes >= cfg.capacity_bytes / 2
}

/// The writer thread: waits for rows, lingers up to `max_delay` unless rows are wanted now or
/// a batch is full, commits, repeats; drains everything when stopping.
fn run(shared: &Shared, mut conn: Connection, checkpointer: Option<&Checkpointer>) {
    let cfg = &shared.config;
    loop {
        let batch: Vec<Pending> = {
            let mut st = shared.lock();
            loop {
                if st.queue.is_empty() {
                    if st.stopping {
                        return;
                    }
                    st = shared.work.wait(st).unwrap_or_else(PoisonError::into_inner);
                    continue;
                }
                let now = Instant::now();
                let due = st.oldest.map_or(now, |t| t + cfg.max_delay);
                if st.stopping || st.wanted > st.done || batch_full(&st, cfg) || now >= due {
                    break;
                }
                st = shared
                    .work
                    .wait_timeout(st, due.saturating_duration_since(now))
                    .map(|(g, _)| g)
                    .unwrap_or_else(|p| p.into_inner().0);
            }
            // Take whole appends, at least one, up to about one batch (in rows and in bytes: the
            // batch being committed is held too).
            let mut batch = Vec::new();
            let (mut rows, mut bytes) = (0, 0);
            while let Some(p) = st.queue.front() {
                if rows > 0
                    && (rows + p.rows.len() > cfg.batch_rows
                        || bytes + p.bytes > cfg.capacity_bytes / 2)
                {
                    break;
                }
                rows += p.rows.len();
                bytes += p.bytes;
                if let Some(p) = st.queue.pop_front() {
                    batch.push(p);
                }
            }
            st.queued_rows = st.queued_rows.saturating_sub(rows);
            st.queued_bytes = st.queued_bytes.saturating_sub(bytes);
            st.oldest = if st.queue.is_empty() {
                None
            } else {
                // The rest has waited since before this batch: commit it next without delay.
                Some(
                    Instant::now()
                        .checked_sub(cfg.max_delay)
                        .unwrap_or_else(Instant::now),
                )
            };
            // Room was made: appenders waiting for it may go on.
            shared.progress.notify_all();
            batch
        };
        let last = batch.last().map_or(0, |p| p.seq);
        let failed = commit(&mut conn, &batch);
        for (_, lost, e) in &failed {
            if let Some(hook) = &cfg.on_error {
                hook(e, *lost);
            }
        }
        if !failed.is_empty()
            && let Err(e) = record_failure(&conn, &failed)
            && let Some(hook) = &cfg.on_error
        {
            let why = format!("cannot store the {AUDIT_WRITE_FAILED} event: {e}");
            hook(&StoreError::AuditWrite(why), 0);
        }
        let mut st = shared.lock();
        for (seq, _, e) in failed {
            if st.failures.len() >= FAILURES_KEPT {
                st.failures.pop_front();
            }
            st.failures.push_back(Failure {
                first: seq,
                last: seq,
                message: e.to_string(),
            });
        }
        st.done = st.done.max(last);
        shared.progress.notify_all();
        drop(st);
        if let Some(cp) = checkpointer {
            cp.committed();
        }
    }
}
