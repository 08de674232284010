//! WAL checkpoints off the request path while the audit writer runs.
//!
//! SQLite checkpoints a WAL-mode database from whichever connection's commit takes the log past
//! `wal_autocheckpoint` pages (1 000 by default): that commit then copies the log into the
//! database file and syncs both files, milliseconds on a busy disk. In a server those commits
//! are the ones a call waits for (a decision written ahead, an operation row minted), so one
//! call in a few dozen paid for everybody's log. While the audit writer runs, the store's two
//! request-path connections (its own and the writer's) checkpoint nothing themselves
//! (`wal_autocheckpoint = 0`); this thread, on a third connection, runs a `PASSIVE` checkpoint
//! (which never blocks a writer or a reader) after every [`EVERY_BATCHES`] audit batches, and
//! at least every [`AT_LEAST_EVERY`] while batches came. A checkpoint it cannot complete (a
//! reader holds an old snapshot) is tried again at the next turn; SQLite restarts the log from
//! its beginning once a checkpoint did complete, so the file stays bounded as before. When the
//! writer stops, this thread runs a last checkpoint and the store's connection checkpoints
//! itself again.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rusqlite::Connection;

use crate::error::StoreError;

/// Audit batches between two checkpoints: an `exec_command` call commits one batch and about
/// six other transactions of some eight pages each, so this is near SQLite's 1 000 pages.
const EVERY_BATCHES: u64 = 16;
/// A checkpoint at least this often while batches came (fewer than [`EVERY_BATCHES`]).
const AT_LEAST_EVERY: Duration = Duration::from_secs(1);

#[derive(Default)]
struct State {
    /// Audit batches committed so far.
    batches: u64,
    /// `batches` at the start of the last checkpoint.
    at_last: u64,
    /// Checkpoints run (completed or not).
    runs: u64,
    stopping: bool,
}

struct Shared {
    state: Mutex<State>,
    /// The thread waits here for batches.
    wake: Condvar,
    /// Callers of [`Checkpointer::wait_run`] wait here.
    ran: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The checkpoint thread of one store file.
pub(crate) struct Checkpointer {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Checkpointer {
    /// Opens its own connection to the store file at `path` and starts its thread.
    pub(crate) fn start(path: &str) -> Result<Checkpointer, StoreError> {
        let conn = Connection::open(path)?;
        conn.busy_timeout(Duration::from_secs(5))?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            ran: Condvar::new(),
        });
        let for_thread = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("codespace-wal".into())
            .spawn(move || run(&for_thread, &conn))?;
        Ok(Checkpointer {
            shared,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// The audit writer committed a batch.
    pub(crate) fn committed(&self) {
        let mut st = self.shared.lock();
        st.batches += 1;
        if st.batches - st.at_last >= EVERY_BATCHES {
            self.shared.wake.notify_one();
        }
    }

    /// Checkpoints run so far.
    pub(crate) fn runs(&self) -> u64 {
        self.shared.lock().runs
    }

    /// Waits until more than `after` checkpoints ran, at most `timeout`; true when they did.
    pub(crate) fn wait_run(&self, after: u64, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut st = self.shared.lock();
        while st.runs <= after {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            st = self
                .shared
                .ran
                .wait_timeout(st, left)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        true
    }

    /// Ends the thread after a last checkpoint.
    pub(crate) fn stop(&self) {
        {
            let mut st = self.shared.lock();
            st.stopping = true;
            self.shared.wake.notify_one();
        }
        join_taken(&self.thread);
    }
}

/// Joins the thread in `slot` once (a later call finds it taken); a panic in it is not passed on.
pub(crate) fn join_taken(slot: &Mutex<Option<JoinHandle<()>>>) {
    let handle = slot.lock().unwrap_or_else(PoisonError::into_inner).take();
    if let Some(h) = handle {
        let _ = h.join();
    }
}

fn run(shared: &Shared, conn: &Connection) {
    loop {
        let stopping = {
            let mut st = shared.lock();
            let mut since = Instant::now();
            loop {
                if st.stopping || st.batches - st.at_last >= EVERY_BATCHES {
                    break;
                }
                if st.batches > st.at_last && since.elapsed() >= AT_LEAST_EVERY {
                    break;
                }
                let (g, timed_out) = shared
                    .wake
                    .wait_timeout(st, AT_LEAST_EVERY)
                    .unwrap_or_else(PoisonError::into_inner);
                st = g;
                if timed_out.timed_out() && st.batches == st.at_last {
                    // Nothing came: the next wait starts its second anew.
                    since = Instant::now();
                }
            }
            st.at_last = st.batches;
            st.stopping
        };
        // PASSIVE: copies what no reader still needs, never waits for a writer or a reader. A
        // failure is left for the next turn (the log only grows meanwhile).
        let _ = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
        {
            let mut st = shared.lock();
            st.runs += 1;
            shared.ran.notify_all();
        }
        if stopping {
            return;
        }
    }
}
