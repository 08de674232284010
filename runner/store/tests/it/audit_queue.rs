//! The audit writer: lingering group commits, write-ahead tickets, the flush barrier,
//! backpressure without loss, draining on stop and drop, failure isolation.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::common;

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use codespace_store::{AuditWriterConfig, DecisionQuery, Store, TryAppendError};
use common::decision;

/// Long enough that nothing in a test is committed by the delay alone.
const FOREVER: Duration = Duration::from_secs(3600);

fn config(max_delay: Duration, batch_rows: usize, capacity: usize) -> AuditWriterConfig {
    AuditWriterConfig {
        max_delay,
        batch_rows,
        capacity,
        // Only the row bound: the tests of backpressure count rows.
        capacity_bytes: usize::MAX,
        on_error: None,
    }
}

/// Rows committed to the file, seen through a separate connection without a writer (so
/// nothing is flushed by looking).
fn committed(path: &Path) -> usize {
    Store::open(path)
        .unwrap()
        .query_decisions(&DecisionQuery::default())
        .unwrap()
        .len()
}

/// Polls `committed` until it reaches `n`; the time it took.
fn wait_committed(path: &Path, n: usize, limit: Duration) -> Duration {
    let start = Instant::now();
    while committed(path) < n {
        assert!(
            start.elapsed() < limit,
            "rows not committed within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    start.elapsed()
}

fn rows(id: &str, n: usize) -> Vec<codespace_store::DecisionRow> {
    (0..n)
        .map(|i| decision(id, i as i64, 1_000 + i as i64, "allow"))
        .collect()
}

#[test]
fn queued_rows_wait_for_the_batch_and_flush_is_a_barrier() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let store = Store::open(&path).unwrap();
    store
        .start_audit_writer(config(FOREVER, 512, 8192))
        .unwrap();
    assert!(store.audit_writer_running());
    let t = store.try_append_decisions(rows("d1", 3)).unwrap();
    store.try_append_decisions(rows("d2", 2)).unwrap();
    // Not committed yet: the writer lingers for more rows.
    assert!(!t.is_written());
    assert_eq!(committed(&path), 0);
    // The barrier commits everything appended before it.
    store.flush_decisions();
    assert!(t.is_written());
    assert_eq!(committed(&path), 5);
    // Readers of the same store flush by themselves.
    store.try_append_decisions(rows("d3", 1)).unwrap();
    assert_eq!(
        store
            .query_decisions(&DecisionQuery::default())
            .unwrap()
            .len(),
        6
    );
}

#[test]
fn a_waited_ticket_is_committed_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let store = Arc::new(Store::open(&path).unwrap());
    store
        .start_audit_writer(config(FOREVER, 512, 8192))
        .unwrap();
    store.try_append_decisions(rows("read", 1)).unwrap();
    let t = store.try_append_decisions(rows("patch", 2)).unwrap();
    // Waiting on the ticket (the write-ahead of a mutating call) does not sit out the delay.
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || tx.send(t.wait()).unwrap());
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the ticket settles without waiting for the delay")
        .unwrap();
    // The rows queued before it went in the same group commit.
    assert_eq!(committed(&path), 3);
}

#[test]
fn the_delay_bounds_how_long_a_row_stays_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let store = Store::open(&path).unwrap();
    store
        .start_audit_writer(config(Duration::from_millis(50), 512, 8192))
        .unwrap();
    store.try_append_decisions(rows("d", 1)).unwrap();
    // Nobody waits: the delay alone brings the row to disk (target 50 ms; bound 100x).
    let took = wait_committed(&path, 1, Duration::from_secs(5));
    eprintln!("row committed after {took:?} (max_delay 50 ms)");
}

#[test]
fn a_full_batch_is_committed_without_the_delay() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let store = Store::open(&path).unwrap();
    store.start_audit_writer(config(FOREVER, 8, 8192)).unwrap();
    for i in 0..8 {
        store
            .try_append_decisions(rows(&format!("d{i}"), 1))
            .unwrap();
    }
    wait_committed(&path, 8, Duration::from_secs(60));
}

#[test]
fn a_full_queue_pushes_back_and_drops_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let store = Arc::new(Store::open(&path).unwrap());
    store.start_audit_writer(config(FOREVER, 1000, 8)).unwrap();
    for i in 0..4 {
        store
            .try_append_decisions(rows(&format!("d{i}"), 2))
            .unwrap();
    }
    // The queue holds 8 rows: one more does not fit and is handed back.
    let back = match store.try_append_decisions(rows("late", 1)) {
        Err(TryAppendError::Full(rows)) => rows,
        other => panic!("expected Full, got {other:?}"),
    };
    assert_eq!(back.len(), 1);
    // A blocking append waits for room; a flush makes room; then it goes in.
    let (tx, rx) = mpsc::channel();
    let s2 = Arc::clone(&store);
    let appender = std::thread::spawn(move || {
        let t = s2.append_decisions(back).unwrap();
        tx.send(()).unwrap();
        t
    });
    store.flush_decisions();
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the blocked append goes in once there is room");
    appender.join().unwrap().wait().unwrap();
    assert_eq!(committed(&path), 9);
}

/// The queue's byte bound (issue 34: a writer that fell behind held ~25 MB of `read` rows):
/// half of it queued commits without the delay, an append past it is handed back, and a
/// blocking one makes the writer commit at once and then goes in; nothing is dropped.
#[test]
fn the_byte_bound_commits_early_and_pushes_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let store = Arc::new(Store::open(&path).unwrap());
    let one = rows("x", 1)[0].approx_bytes();
    assert!(one > 0);
    store
        .start_audit_writer(AuditWriterConfig {
            capacity_bytes: 4 * one,
            ..config(FOREVER, 1000, 8192)
        })
        .unwrap();
    // Two rows are half the bound: committed with an hour's delay and nobody waiting.
    store.try_append_decisions(rows("a", 1)).unwrap();
    store.try_append_decisions(rows("b", 1)).unwrap();
    wait_committed(&path, 2, Duration::from_secs(60));
    // One row queued (under half); four more do not fit beside it.
    store.try_append_decisions(rows("c", 1)).unwrap();
    let back = match store.try_append_decisions(rows("d", 4)) {
        Err(TryAppendError::Full(rows)) => rows,
        other => panic!("expected Full, got {other:?}"),
    };
    // A blocking append has the queued row committed at once, then goes in (alone it exceeds
    // half the bound, so it is committed in turn).
    let s2 = Arc::clone(&store);
    let appender = std::thread::spawn(move || s2.append_decisions(back).unwrap());
    appender.join().unwrap().wait().unwrap();
    assert_eq!(committed(&path), 7);
}

#[test]
fn stopping_and_dropping_drain_the_queue() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let store = Store::open(&path).unwrap();
    store
        .start_audit_writer(config(FOREVER, 512, 8192))
        .unwrap();
    for i in 0..100 {
        store
            .try_append_decisions(rows(&format!("d{i}"), 2))
            .unwrap();
    }
    store.stop_audit_writer();
    assert!(!store.audit_writer_running());
    assert_eq!(committed(&path), 200);
    // After the stop, appends are written at once.
    let t = store.try_append_decisions(rows("after", 1)).unwrap();
    assert!(t.is_written());
    assert_eq!(committed(&path), 201);

    let path2 = dir.path().join("s2.db");
    let store = Store::open(&path2).unwrap();
    store
        .start_audit_writer(config(FOREVER, 512, 8192))
        .unwrap();
    store.try_append_decisions(rows("d", 3)).unwrap();
    drop(store);
    assert_eq!(committed(&path2), 3);
}

#[test]
fn one_bad_decision_does_not_take_its_batch_down() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let store = Store::open(&path).unwrap();
    let lost = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&lost);
    store
        .start_audit_writer(AuditWriterConfig {
            on_error: Some(Arc::new(move |_, n| {
                seen.fetch_add(n, Ordering::SeqCst);
            })),
            ..config(FOREVER, 512, 8192)
        })
        .unwrap();
    let a = store.try_append_decisions(rows("a", 2)).unwrap();
    // The same (decision_id, sub_index) again: the UNIQUE constraint refuses it.
    let dup = store.try_append_decisions(rows("a", 1)).unwrap();
    let c = store.try_append_decisions(rows("c", 2)).unwrap();
    assert!(dup.wait().is_err());
    a.wait().unwrap();
    c.wait().unwrap();
    assert_eq!(committed(&path), 4);
    assert_eq!(lost.load(Ordering::SeqCst), 1);
}

#[test]
fn a_refused_decision_is_stored_as_an_audit_write_failed_event() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let store = Store::open(&path).unwrap();
    store
        .start_audit_writer(config(FOREVER, 512, 8192))
        .unwrap();
    store.try_append_decisions(rows("a", 1)).unwrap();
    // The same (decision_id, sub_index) again: the store refuses it.
    let dup = store.try_append_decisions(rows("a", 1)).unwrap();
    assert!(dup.wait().is_err());
    let events = Store::open(&path)
        .unwrap()
        .events(Some(codespace_store::AUDIT_WRITE_FAILED), 10)
        .unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].detail["appends_lost"], 1);
    assert_eq!(events[0].detail["rows_lost"], 1);
    assert!(
        events[0].detail["error"]
            .as_str()
            .unwrap()
            .contains("UNIQUE"),
        "{events:?}"
    );
}

#[test]
fn an_in_memory_store_writes_at_once() {
    let store = Store::open_in_memory().unwrap();
    store
        .start_audit_writer(AuditWriterConfig::default())
        .unwrap();
    assert!(!store.audit_writer_running());
    let t = store.try_append_decisions(rows("d", 2)).unwrap();
    assert!(t.is_written());
    assert_eq!(
        store
            .query_decisions(&DecisionQuery::default())
            .unwrap()
            .len(),
        2
    );
}

#[test]
fn many_threads_append_and_every_row_lands() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let store = Arc::new(Store::open(&path).unwrap());
    // A small queue, so backpressure is exercised under contention.
    store
        .start_audit_writer(config(Duration::from_millis(5), 64, 128))
        .unwrap();
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                for i in 0..500 {
                    store
                        .append_decisions(rows(&format!("t{t}-{i}"), 1 + i % 3))
                        .unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    store.flush_decisions();
    let expected: usize = 4 * (0..500).map(|i| 1 + i % 3).sum::<usize>();
    assert_eq!(committed(&path), expected);
}

#[test]
fn many_waiters_and_the_writer_commit_every_row_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let store = Arc::new(Store::open(&path).unwrap());
    // A short delay and small batches: lingering, full and wanted batches interleave.
    store
        .start_audit_writer(config(Duration::from_millis(1), 8, 64))
        .unwrap();
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                let mut unwaited = None;
                for i in 0..200 {
                    let ticket = store
                        .append_decisions(rows(&format!("t{t}-{i}"), 1 + i % 3))
                        .unwrap();
                    if i % 2 == 1 {
                        unwaited = Some(ticket);
                        continue;
                    }
                    // Every other append is written ahead.
                    ticket.wait().unwrap();
                    // Commits go in append order: the append before it, which nobody waited
                    // on, is in too.
                    if let Some(u) = unwaited.take() {
                        assert!(u.is_written());
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    store.flush_decisions();
    let expected: usize = 4 * (0..200).map(|i| 1 + i % 3).sum::<usize>();
    assert_eq!(committed(&path), expected);
}

#[test]
fn while_the_writer_runs_the_log_is_checkpointed_off_the_request_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    let store = Store::open(&path).unwrap();
    assert_eq!(store.wal_autocheckpoint().unwrap(), 1000, "SQLite's own");
    assert_eq!(store.wal_checkpoints(), 0);
    store
        .start_audit_writer(config(FOREVER, 1_000, 100_000))
        .unwrap();
    // The request path's connection checkpoints nothing while the writer's thread does.
    assert_eq!(store.wal_autocheckpoint().unwrap(), 0);
    // Batches written ahead, one commit each, past the thread's turn.
    for i in 0..40 {
        store
            .append_decisions(rows(&format!("dec-{i}"), 5))
            .unwrap()
            .wait()
            .unwrap();
    }
    assert!(
        store.wait_wal_checkpoint(0, Duration::from_secs(60)),
        "no checkpoint ran off the request path"
    );
    let before_stop = store.wal_checkpoints();
    assert!(before_stop >= 1);
    assert_eq!(committed(&path), 200);
    store.stop_audit_writer();
    // A last checkpoint at the stop, then the connection checkpoints itself again.
    assert!(store.wal_checkpoints() > before_stop);
    assert_eq!(store.wal_autocheckpoint().unwrap(), 1000);
    assert_eq!(committed(&path), 200);
}
