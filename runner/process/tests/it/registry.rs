//! The table is the one registry of processes: each handle carries its starter's metadata,
//! looked up by id, listed with the others, and dropped exactly when the handle is evicted.
// Test helpers outside #[test] fns assert with unwrap/panic like the tests themselves.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use codespace_runner_process::{
    ProcError, ProcState, ProcessTable, SpawnError, SpawnOptions, TableLimits,
};
use common::*;

/// What a starter keeps about a process; counts its drops.
#[derive(Debug)]
struct Owner {
    client: String,
    workspace: String,
    dropped: Arc<AtomicUsize>,
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.dropped.fetch_add(1, Ordering::SeqCst);
    }
}

fn owner(client: &str, workspace: &str, dropped: &Arc<AtomicUsize>) -> Owner {
    Owner {
        client: client.into(),
        workspace: workspace.into(),
        dropped: Arc::clone(dropped),
    }
}

fn separate() -> SpawnOptions {
    SpawnOptions {
        on_exit: None,
        separate_stderr: true,
    }
}

#[tokio::test]
async fn each_process_carries_its_starters_metadata_by_id_and_in_the_listing() {
    let (_d, cwd) = workdir();
    let dropped = Arc::new(AtomicUsize::new(0));
    let table: ProcessTable<Owner> = ProcessTable::with_metadata(fast_limits());
    let mut a_spec = spec(&cwd, &["cat"]);
    a_spec.owner = "client-a".into();
    let a = table
        .spawn_owned(a_spec, separate(), owner("client-a", "w1", &dropped))
        .await
        .unwrap();
    let mut b_spec = tty_spec(&cwd, &["cat"]);
    b_spec.owner = "client-b".into();
    let b = table
        .spawn_owned(
            b_spec,
            SpawnOptions::default(),
            owner("client-b", "w2", &dropped),
        )
        .await
        .unwrap();

    let ra = table.registration(&a.id).unwrap();
    assert_eq!(ra.meta.client, "client-a");
    assert_eq!(ra.meta.workspace, "w1");
    assert_eq!(ra.info.owner, "client-a");
    assert_eq!(ra.info.argv, vec!["cat"]);
    assert!(ra.info.separate_stderr && !ra.info.tty);
    assert_eq!(ra.info.state, ProcState::Running);
    let rb = table.registration(&b.id).unwrap();
    assert_eq!(rb.meta.workspace, "w2");
    assert!(rb.info.tty && !rb.info.separate_stderr);

    let mut listed: Vec<(String, String)> = table
        .registrations()
        .into_iter()
        .map(|r| (r.info.id.clone(), r.meta.client.clone()))
        .collect();
    listed.sort();
    let mut expected = vec![
        (a.id.clone(), "client-a".to_string()),
        (b.id.clone(), "client-b".to_string()),
    ];
    expected.sort();
    assert_eq!(listed, expected);

    assert!(matches!(
        table.registration("proc-unknown"),
        Err(ProcError::NotFound)
    ));
    table.shutdown().await;
    // Exited but not evicted: still registered, metadata alive.
    assert_eq!(
        table.registration(&a.id).unwrap().info.state,
        ProcState::Exited
    );
    assert_eq!(dropped.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn metadata_is_dropped_with_the_evicted_handle_and_on_a_failed_spawn() {
    let (_d, cwd) = workdir();
    let dropped = Arc::new(AtomicUsize::new(0));
    // No exited handle is kept: an exited process is evicted at the next look-up.
    let table: ProcessTable<Owner> = ProcessTable::with_metadata(TableLimits {
        max_exited_kept: 0,
        ..fast_limits()
    });
    let p = table
        .spawn_owned(
            spec(&cwd, &["cat"]),
            SpawnOptions::default(),
            owner("c", "w", &dropped),
        )
        .await
        .unwrap();
    assert_eq!(table.registration(&p.id).unwrap().meta.client, "c");
    assert_eq!(dropped.load(Ordering::SeqCst), 0, "alive while running");
    let info = table
        .terminate_and_wait(&p.id, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(info.state, ProcState::Exited);
    assert!(matches!(
        table.registration(&p.id),
        Err(ProcError::NotFound)
    ));
    assert_eq!(
        dropped.load(Ordering::SeqCst),
        1,
        "the metadata went with the handle"
    );
    assert!(table.registrations().is_empty());

    // A spawn that fails registers nothing and drops the metadata at once.
    let err = table
        .spawn_owned(
            spec(&cwd, &["no-such-program-xyz"]),
            SpawnOptions::default(),
            owner("c", "w", &dropped),
        )
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        SpawnError::InvalidCommand | SpawnError::SpawnFailed(_)
    ));
    assert_eq!(dropped.load(Ordering::SeqCst), 2);
    assert!(table.registrations().is_empty());
}
