//! Server instances: recorded, looked up, marked ended or swept, and pruned only when done with.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use codespace_store::{Store, now_ms};

#[test]
fn instances_round_trip_and_prune_only_finished_ones() {
    let store = Store::open_in_memory().unwrap();
    store
        .insert_instance("00000000000000a1", 10, "boot:100")
        .unwrap();
    store
        .insert_instance("00000000000000a2", 11, "boot:200")
        .unwrap();
    store
        .insert_instance("00000000000000a3", 12, "boot:300")
        .unwrap();
    assert!(
        store
            .insert_instance("00000000000000a1", 13, "boot:400")
            .is_err(),
        "an id is recorded once"
    );
    assert!(store.is_instance("00000000000000a2").unwrap());
    assert!(!store.is_instance("00000000000000ff").unwrap());

    store.instance_ended("00000000000000a1").unwrap();
    store
        .instances_swept(&["00000000000000a2".to_string()])
        .unwrap();
    let rows = store.instances().unwrap();
    assert_eq!(rows.len(), 3);
    let a1 = rows
        .iter()
        .find(|r| r.instance_id == "00000000000000a1")
        .unwrap();
    assert_eq!((a1.pid, a1.process_start.as_str()), (10, "boot:100"));
    assert!(a1.ended_ms.is_some() && a1.swept_ms.is_none());
    let a2 = rows
        .iter()
        .find(|r| r.instance_id == "00000000000000a2")
        .unwrap();
    assert!(a2.ended_ms.is_none() && a2.swept_ms.is_some());

    // Nothing started before the cut-off: nothing pruned.
    assert_eq!(store.prune_instances(0).unwrap(), 0);
    // Everything started before it: only the finished ones go; the unswept crash stays known.
    assert_eq!(store.prune_instances(now_ms() + 1).unwrap(), 2);
    let left: Vec<String> = store
        .instances()
        .unwrap()
        .into_iter()
        .map(|r| r.instance_id)
        .collect();
    assert_eq!(left, vec!["00000000000000a3".to_string()]);
}
