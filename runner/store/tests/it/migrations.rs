//! Opening store files: creation, migration, re-open, and refusal of newer schemas.

use crate::common;

use codespace_store::{DecisionQuery, LATEST_VERSION, Store, StoreError};
use common::decision;
use std::os::unix::fs::PermissionsExt;

#[test]
fn migrates_an_empty_file_and_reopens_idempotently() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    std::fs::write(&path, b"").unwrap();

    let store = Store::open(&path).unwrap();
    assert_eq!(store.schema_version().unwrap(), LATEST_VERSION);
    store
        .insert_decisions(&[decision("d1", 0, 1, "allow")])
        .unwrap();
    drop(store);

    let store = Store::open(&path).unwrap();
    assert_eq!(store.schema_version().unwrap(), LATEST_VERSION);
    let rows = store.query_decisions(&DecisionQuery::default()).unwrap();
    assert_eq!(
        rows.len(),
        1,
        "data survives re-open and the schema is not re-applied"
    );
}

#[test]
fn open_creates_parent_dirs_and_uses_wal() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a/b/c/store.db");
    let store = Store::open(&path).unwrap();
    assert_eq!(store.schema_version().unwrap(), LATEST_VERSION);
    assert!(path.is_file());
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(
        mode & 0o077,
        0,
        "store file must not be readable by others: {mode:o}"
    );
    drop(store);

    let raw = rusqlite::Connection::open(&path).unwrap();
    let journal: String = raw
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(journal, "wal");
}

#[test]
fn in_memory_store_is_migrated() {
    let store = Store::open_in_memory().unwrap();
    assert_eq!(store.schema_version().unwrap(), LATEST_VERSION);
}

#[test]
fn newer_schema_is_refused_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    drop(Store::open(&path).unwrap());
    {
        let raw = rusqlite::Connection::open(&path).unwrap();
        raw.pragma_update(None, "user_version", LATEST_VERSION + 98)
            .unwrap();
    }
    let err = Store::open(&path).unwrap_err();
    match &err {
        StoreError::SchemaTooNew { found, supported } => {
            assert_eq!(*found, LATEST_VERSION + 98);
            assert_eq!(*supported, LATEST_VERSION);
        }
        other => panic!("expected SchemaTooNew, got {other}"),
    }
    let msg = err.to_string();
    assert!(msg.contains("newer"), "{msg}");
    assert!(
        !msg.contains(dir.path().to_str().unwrap()),
        "no absolute path in {msg}"
    );
}

#[test]
fn open_error_does_not_leak_the_absolute_path() {
    let dir = tempfile::tempdir().unwrap();
    // A directory where the database file should be cannot be opened as a database.
    let path = dir.path().join("store.db");
    std::fs::create_dir(&path).unwrap();
    let err = Store::open(&path).unwrap_err();
    let msg = err.to_string();
    assert!(
        !msg.contains(dir.path().to_str().unwrap()),
        "no absolute path in {msg}"
    );
}

#[test]
fn a_version_1_store_gains_the_instances_table_and_keeps_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    {
        let raw = rusqlite::Connection::open(&path).unwrap();
        raw.execute_batch(include_str!("../../migrations/0001_init.sql"))
            .unwrap();
        raw.pragma_update(None, "user_version", 1).unwrap();
        raw.execute(
            "INSERT INTO events (at_ms, kind, detail) VALUES (1, 'startup', '{}')",
            [],
        )
        .unwrap();
    }
    let store = Store::open(&path).unwrap();
    assert_eq!(store.schema_version().unwrap(), LATEST_VERSION);
    assert_eq!(store.events(Some("startup"), 10).unwrap().len(), 1);
    assert!(store.instances().unwrap().is_empty());
    store
        .insert_instance("0123456789abcdef", 42, "boot:1")
        .unwrap();
    assert!(store.is_instance("0123456789abcdef").unwrap());
}
