//! The store's own files on the real binary: a store (and its `-wal`/`-shm`) that others may
//! read is tightened to 0600 when `serve` opens it, with a warning and an event; a store path that
//! is a symbolic link is refused with an error naming the path.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::stdio_common;

use serde_json::json;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;
use stdio_common::{BIN, StdioServer};

fn with_suffix(p: &Path, suffix: &str) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

#[test]
fn serve_tightens_a_loose_store_and_its_wal_and_shm_to_0600() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("a.txt"), "alpha\n").unwrap();
    let store = dir.path().join("store.db");
    // A store left world-readable by another tool (or an umask and a copy): a database and its
    // write-ahead log and shared-memory files, all 0644.
    let files = [
        store.clone(),
        with_suffix(&store, "-wal"),
        with_suffix(&store, "-shm"),
    ];
    for f in &files {
        std::fs::write(f, b"").unwrap();
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let log = dir.path().join("stderr.log");
    let mut s = StdioServer::serve()
        .arg(&ws)
        .arg("--store")
        .arg(&store)
        .cwd(dir.path())
        .stderr_file(&log)
        .spawn();
    s.initialize("store-files-test");
    s.tool_ok("read", json!({"workspace_id": "default", "path": "a.txt"}));
    // While the server runs, with the files in use.
    for f in &files {
        assert_eq!(mode(f), 0o600, "{} is {:o}", f.display(), mode(f));
    }
    s.close_and_wait(Duration::from_secs(30));
    assert_eq!(mode(&store), 0o600);
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(
        stderr.contains("its permissions are now 0600"),
        "no warning: {stderr}"
    );
    let conn = rusqlite::Connection::open(&store).unwrap();
    let detail: String = conn
        .query_row(
            "SELECT detail FROM events WHERE kind = 'store_permissions_tightened'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(detail.contains("store.db (was 0644)"), "{detail}");
    assert!(detail.contains("store.db-wal (was 0644)"), "{detail}");
    assert!(detail.contains("store.db-shm (was 0644)"), "{detail}");
}

#[test]
fn serve_refuses_a_store_path_that_is_a_symlink_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let real = dir.path().join("real.db");
    std::fs::write(&real, b"").unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o600)).unwrap();
    let link = dir.path().join("link.db");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let out = std::process::Command::new(BIN)
        .arg("serve")
        .arg(&ws)
        .arg("--store")
        .arg(&link)
        .env_remove("CODESPACE_CONFIG")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("\"{}\"", link.display())),
        "the error does not name the path: {err}"
    );
    assert!(err.contains("is a symbolic link"), "{err}");
    // Nothing was written through the link.
    assert_eq!(std::fs::metadata(&real).unwrap().len(), 0);
}
