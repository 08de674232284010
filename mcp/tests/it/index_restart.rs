//! The path index saved at a clean shutdown (issue 34): a restarted server answers its first
//! `find` from it, and never from a stale one: what changed while the server was down is listed,
//! what was removed is not; after a `kill -9` (no clean shutdown) the next start walks.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::stdio_common;

use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;
use stdio_common::StdioServer;

fn serve(dir: &Path) -> StdioServer {
    let mut s = StdioServer::serve()
        .arg(dir.join("ws"))
        .arg("--store")
        .arg(dir.join("store.db"))
        .cwd(dir)
        .spawn();
    s.initialize("index-restart");
    s
}

fn find(s: &mut StdioServer) -> (Vec<String>, Value) {
    let r = s.tool_ok("find", json!({"workspace_id": "default"}));
    let paths = r["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_string())
        .collect();
    (paths, r["listing_source"].clone())
}

fn stop(mut s: StdioServer) {
    s.close_stdin();
    assert!(s.wait_exit(Duration::from_secs(30)).success());
}

#[test]
fn a_restart_answers_from_the_saved_index_and_sees_offline_edits() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(ws.join("d/e")).unwrap();
    std::fs::write(ws.join("a.txt"), "a\n").unwrap();
    std::fs::write(ws.join("d/b.txt"), "b\n").unwrap();
    std::fs::write(ws.join("d/e/c.txt"), "c\n").unwrap();

    let mut first = serve(dir.path());
    let (paths, source) = find(&mut first);
    assert_eq!(paths, ["a.txt", "d/b.txt", "d/e/c.txt"]);
    assert_eq!(source, "walk", "a fresh store: the first listing is a walk");
    stop(first);

    // While no server runs: a file added, one removed, a directory renamed, a new directory.
    std::fs::write(ws.join("d/new.txt"), "n\n").unwrap();
    std::fs::remove_file(ws.join("a.txt")).unwrap();
    std::fs::rename(ws.join("d/e"), ws.join("d/moved")).unwrap();
    std::fs::create_dir(ws.join("z")).unwrap();
    std::fs::write(ws.join("z/f.txt"), "f\n").unwrap();

    let mut second = serve(dir.path());
    let (paths, source) = find(&mut second);
    assert_eq!(paths, ["d/b.txt", "d/moved/c.txt", "d/new.txt", "z/f.txt"]);
    assert_eq!(source, "index", "answered from the saved index, checked");
    // Later changes reach it through the watcher as before.
    std::fs::write(ws.join("z/g.txt"), "g\n").unwrap();
    let (paths, _) = find(&mut second);
    assert!(paths.contains(&"z/g.txt".to_string()), "{paths:?}");
    // A server killed without a clean shutdown saves nothing: the next start walks.
    second.kill();
    let mut third = serve(dir.path());
    std::fs::remove_file(ws.join("z/g.txt")).unwrap();
    let (paths, source) = find(&mut third);
    assert_eq!(source, "walk");
    assert!(!paths.contains(&"z/g.txt".to_string()), "{paths:?}");
    stop(third);
}

#[test]
fn a_replaced_root_is_walked_again() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(ws.join("old")).unwrap();
    std::fs::write(ws.join("old/f.txt"), "f\n").unwrap();
    let mut first = serve(dir.path());
    assert_eq!(find(&mut first).0, ["old/f.txt"]);
    stop(first);
    std::fs::rename(&ws, dir.path().join("ws-before")).unwrap();
    std::fs::create_dir_all(ws.join("new")).unwrap();
    std::fs::write(ws.join("new/f.txt"), "n\n").unwrap();
    let mut second = serve(dir.path());
    let (paths, source) = find(&mut second);
    assert_eq!(paths, ["new/f.txt"]);
    assert_eq!(source, "walk");
    stop(second);
}
