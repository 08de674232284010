//! Several writers at once (separate connections and a shared one), plus an insert-cost print.

use crate::common;

use std::sync::Arc;
use std::thread;
use std::time::Instant;

use codespace_store::{DecisionQuery, KeyClaim, KeyScope, Store};
use common::{decision, operation};

const THREADS: usize = 4;
const PER_THREAD: usize = 250;

#[test]
fn four_threads_with_own_connections_insert_without_busy_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    // Every thread opens the fresh file itself, so opening and migrating race too.
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let path = path.clone();
            thread::spawn(move || -> Result<(), String> {
                let store = Store::open(&path).map_err(|e| e.to_string())?;
                for i in 0..PER_THREAD {
                    let row = decision(&format!("t{t}-{i}"), 0, i as i64, "allow");
                    store.insert_decisions(&[row]).map_err(|e| e.to_string())?;
                    if i % 50 == 0 {
                        store
                            .insert_event("tick", &serde_json::json!({"t": t, "i": i}))
                            .map_err(|e| e.to_string())?;
                    }
                }
                Ok(())
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap().unwrap();
    }
    let store = Store::open(&path).unwrap();
    let rows = store.query_decisions(&DecisionQuery::default()).unwrap();
    assert_eq!(rows.len(), THREADS * PER_THREAD);
    assert_eq!(
        store.events(Some("tick"), 1_000).unwrap().len(),
        THREADS * 5
    );
}

#[test]
fn four_threads_sharing_one_store_claim_each_key_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(&dir.path().join("store.db")).unwrap());
    // Every thread tries to claim the same 50 keys; exactly one claim per key may win.
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let store = Arc::clone(&store);
            thread::spawn(move || {
                let mut created = 0_usize;
                for k in 0..50 {
                    let key = format!("key-{k}");
                    let row =
                        operation(&format!("op-{t}-{k}"), "default", "apply_patch", Some(&key));
                    let scope = KeyScope {
                        client: "c".to_owned(),
                        registration: "reg".to_owned(),
                        expires_ms: i64::MAX,
                    };
                    if store.create_operation(&row, Some(&scope)).unwrap() == KeyClaim::Created {
                        created += 1;
                    }
                }
                created
            })
        })
        .collect();
    let total: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(total, 50);
    for k in 0..50 {
        assert_eq!(
            store
                .keyed_operations("c", &format!("key-{k}"), 0)
                .unwrap()
                .len(),
            1
        );
    }
}

/// Not a benchmark harness: prints the cost of single-row decision inserts (not asserted).
#[test]
fn measure_single_row_decision_inserts() {
    const ROWS: usize = 10_000;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("store.db")).unwrap();
    let rows: Vec<_> = (0..ROWS)
        .map(|i| decision(&format!("d{i}"), 0, i as i64, "allow"))
        .collect();
    let start = Instant::now();
    for row in &rows {
        store.insert_decisions(std::slice::from_ref(row)).unwrap();
    }
    let elapsed = start.elapsed();
    let per_row = elapsed.as_secs_f64() * 1e6 / ROWS as f64;
    eprintln!(
        "measure: {ROWS} decision inserts in batches of 1: {per_row:.1} us/row ({:.0} ms total)",
        elapsed.as_secs_f64() * 1e3
    );
    assert_eq!(
        store
            .query_decisions(&DecisionQuery::default())
            .unwrap()
            .len(),
        ROWS
    );
}
