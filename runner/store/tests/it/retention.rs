//! Retention pruning in bounded batches, store statistics, journal seals against rows written
//! around the store API, and the schema 1 → 2 migration keeping every row.

use crate::common;

use codespace_store::{
    DecisionQuery, JournalEntry, JournalSeal, KeyScope, PruneTarget, Store, now_ms,
};
use common::{decision, operation, process};
use rusqlite::params;

fn scope(expires_ms: i64) -> KeyScope {
    KeyScope {
        client: "c".to_owned(),
        registration: "reg".to_owned(),
        expires_ms,
    }
}

#[test]
fn prune_deletes_at_most_one_batch_of_rows_older_than_the_cutoff() {
    let store = Store::open_in_memory().unwrap();
    let rows: Vec<_> = (0..25)
        .map(|i| decision(&format!("old{i}"), 0, 1_000 + i, "allow"))
        .chain((0..5).map(|i| decision(&format!("new{i}"), 0, 10_000 + i, "deny")))
        .collect();
    store.insert_decisions(&rows).unwrap();
    assert_eq!(
        store
            .prune_batch(PruneTarget::Decisions, 5_000, 10)
            .unwrap(),
        10
    );
    assert_eq!(
        store
            .prune_batch(PruneTarget::Decisions, 5_000, 10)
            .unwrap(),
        10
    );
    assert_eq!(
        store
            .prune_batch(PruneTarget::Decisions, 5_000, 10)
            .unwrap(),
        5
    );
    assert_eq!(
        store
            .prune_batch(PruneTarget::Decisions, 5_000, 10)
            .unwrap(),
        0
    );
    let left = store.query_decisions(&DecisionQuery::default()).unwrap();
    assert_eq!(left.len(), 5);
    assert!(left.iter().all(|r| r.decision_id.starts_with("new")));
    let stats = store.stats().unwrap();
    assert_eq!(stats.audit_rows, 5);
    assert_eq!(stats.oldest_audit_ms, Some(10_000));
}

#[test]
fn operations_are_pruned_with_their_keys_but_not_while_referenced() {
    let store = Store::open_in_memory().unwrap();
    let mut done = operation("op-done", "default", "apply_patch", Some("k"));
    done.created_ms = 1_000;
    store
        .create_operation(&done, Some(&scope(i64::MAX)))
        .unwrap();
    store
        .add_operation_event("op-done", "minted", None, None)
        .unwrap();
    store.finish_operation("op-done", "applied", None).unwrap();
    // Still running: kept.
    let running = operation("op-running", "default", "apply_patch", None);
    store.create_operation(&running, None).unwrap();
    // Finished, but a process row refers to it: kept until the process row goes.
    let exec = operation("op-exec", "default", "exec_command", None);
    store.create_operation(&exec, None).unwrap();
    store.finish_operation("op-exec", "started", None).unwrap();
    let mut p = process("p1", "op-exec");
    p.state = "exited".to_owned();
    store.upsert_process(&p).unwrap();
    // Finished, with an open journal: kept.
    let journaled = operation("op-journal", "default", "apply_patch", None);
    store.create_operation(&journaled, None).unwrap();
    store
        .journal_begin("op-journal", "default", "reg", &[])
        .unwrap();
    store
        .finish_operation("op-journal", "unknown", None)
        .unwrap();

    let cutoff = now_ms() + 1;
    assert_eq!(
        store
            .prune_batch(PruneTarget::Operations, cutoff, 100)
            .unwrap(),
        1
    );
    assert!(store.operation_by_id("op-done").unwrap().is_none());
    assert!(store.operation_events("op-done").unwrap().is_empty());
    assert!(store.keyed_operations("c", "k", 0).unwrap().is_empty());
    for kept in ["op-running", "op-exec", "op-journal"] {
        assert!(store.operation_by_id(kept).unwrap().is_some(), "{kept}");
    }
    // The process row goes first (it is not running), then its operation.
    assert_eq!(
        store
            .prune_batch(PruneTarget::Processes, cutoff, 100)
            .unwrap(),
        1
    );
    assert_eq!(
        store
            .prune_batch(PruneTarget::Operations, cutoff, 100)
            .unwrap(),
        1
    );
    assert!(store.operation_by_id("op-exec").unwrap().is_none());
}

#[test]
fn running_processes_and_unexpired_keys_are_never_pruned() {
    let store = Store::open_in_memory().unwrap();
    let exec = operation("op1", "default", "exec_command", Some("k1"));
    store.create_operation(&exec, Some(&scope(5_000))).unwrap();
    let other = operation("op2", "default", "exec_command", Some("k2"));
    store
        .create_operation(&other, Some(&scope(i64::MAX)))
        .unwrap();
    store.upsert_process(&process("p1", "op1")).unwrap(); // running
    assert_eq!(
        store
            .prune_batch(PruneTarget::Processes, i64::MAX, 100)
            .unwrap(),
        0
    );
    assert_eq!(
        store
            .prune_batch(PruneTarget::OperationKeys, 5_000, 100)
            .unwrap(),
        1
    );
    assert_eq!(store.keyed_operations("c", "k2", 0).unwrap().len(), 1);
    assert_eq!(store.stats().unwrap().operation_keys, 1);
}

#[test]
fn journal_rows_written_around_the_store_api_do_not_verify() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    let store = Store::open(&path).unwrap();
    store
        .create_operation(&operation("op1", "default", "apply_patch", None), None)
        .unwrap();
    let entry = JournalEntry {
        path: "a.txt".to_owned(),
        before: Some(b"old\n".to_vec()),
        mode: Some(0o644),
        created_dirs: vec![],
    };
    store
        .journal_begin("op1", "default", "reg", std::slice::from_ref(&entry))
        .unwrap();
    assert!(
        store.journal_key_file().unwrap().is_file(),
        "the key file is created on first use"
    );

    // Another writer of the database file: changes a sealed entry, adds an unsealed journal.
    let raw = rusqlite::Connection::open(&path).unwrap();
    raw.pragma_update(None, "foreign_keys", false).unwrap();
    raw.execute(
        "UPDATE patch_journal_entries SET path = '.git/hooks/pre-commit' WHERE operation_id = 'op1'",
        [],
    )
    .unwrap();
    raw.execute(
        "INSERT INTO patch_journals (operation_id, workspace, created_ms) VALUES ('op-forged', 'default', 1)",
        [],
    )
    .unwrap();
    raw.execute(
        "INSERT INTO patch_journal_entries (operation_id, seq, path, before, mode, created_dirs) \
         VALUES ('op-forged', 0, 'x.sh', ?1, 493, '[]')",
        params![b"#!/bin/sh\n".to_vec()],
    )
    .unwrap();
    drop(raw);

    let open = store.open_journals().unwrap();
    let seal = |op: &str| open.iter().find(|j| j.operation_id == op).unwrap().seal;
    assert_eq!(seal("op1"), JournalSeal::Invalid);
    assert_eq!(seal("op-forged"), JournalSeal::Missing);

    // A second store on the same file shares the key file, so its own journals verify there.
    let again = Store::open(&path).unwrap();
    again
        .create_operation(&operation("op2", "default", "apply_patch", None), None)
        .unwrap();
    again.journal_begin("op2", "default", "reg", &[]).unwrap();
    let open = store.open_journals().unwrap();
    let j = open.iter().find(|j| j.operation_id == "op2").unwrap();
    assert_eq!(j.seal, JournalSeal::Valid);
}

#[test]
fn schema_1_rows_survive_the_migration_to_latest() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    {
        let raw = rusqlite::Connection::open(&path).unwrap();
        raw.execute_batch(include_str!("../../migrations/0001_init.sql"))
            .unwrap();
        raw.pragma_update(None, "user_version", 1).unwrap();
        raw.execute_batch(
            "INSERT INTO operations (operation_id, operation_key, fingerprint, tool, workspace, \
             client, status, created_ms, finished_ms, result) VALUES \
             ('op1', 'k1', 'fp', 'exec_command', 'default', 'local', 'started', 1, 2, NULL); \
             INSERT INTO operation_events (operation_id, at_ms, name) VALUES ('op1', 1, 'minted'); \
             INSERT INTO processes (process_id, workspace, operation_id, argv_sha256, program, tty, \
             state, started_ms) VALUES ('p1', 'default', 'op1', 'x', 'true', 0, 'exited', 1);",
        )
        .unwrap();
    }
    let store = Store::open(&path).unwrap();
    assert_eq!(
        store.schema_version().unwrap(),
        codespace_store::LATEST_VERSION
    );
    let op = store.operation_by_id("op1").unwrap().unwrap();
    assert_eq!(op.operation_key.as_deref(), Some("k1"));
    assert_eq!(store.operation_events("op1").unwrap().len(), 1);
    assert!(store.process("p1").unwrap().is_some());
    // Keys from before the migration had no scope: unknown now.
    assert!(store.keyed_operations("local", "k1", 0).unwrap().is_empty());
    // Foreign keys are on again and point at the rebuilt table.
    assert!(store.upsert_process(&process("p2", "missing-op")).is_err());
    // The old unique (workspace, tool, key) is gone: the same label can be used again.
    let again = operation("op2", "default", "exec_command", Some("k1"));
    store
        .create_operation(&again, Some(&scope(i64::MAX)))
        .unwrap();
}
