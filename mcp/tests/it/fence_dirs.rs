//! The path index's fence directories live beside the store and a restart removes those of a
//! server killed with `kill -9` (they used to pile up in /tmp).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::stdio_common;

use serde_json::json;
use std::path::Path;
use std::time::Duration;
use stdio_common::StdioServer;

fn fences(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir.join("fences"))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

fn serve(dir: &Path) -> StdioServer {
    let mut s = StdioServer::serve()
        .arg(dir.join("ws"))
        .arg("--store")
        .arg(dir.join("store.db"))
        .cwd(dir)
        .spawn();
    s.initialize("fences");
    // A listing uses the index (and its fence).
    s.tool_ok("find", json!({"workspace_id": "default"}));
    s
}

#[test]
fn a_killed_servers_fence_directories_are_removed_by_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("ws")).unwrap();
    std::fs::write(dir.path().join("ws/a.txt"), "a\n").unwrap();

    let first = serve(dir.path());
    let pid = first.pid();
    let before = fences(dir.path());
    assert_eq!(before.len(), 1, "one workspace, one fence: {before:?}");
    assert!(
        before[0].starts_with(&format!("{pid}-")),
        "named for its process: {before:?}"
    );
    let st = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let mut first = first;
    first.wait_exit(Duration::from_secs(30));
    assert_eq!(
        fences(dir.path()),
        before,
        "kill -9 leaves the fence behind"
    );

    let mut second = serve(dir.path());
    let after = fences(dir.path());
    assert_eq!(after.len(), 1, "{after:?}");
    assert!(
        after[0].starts_with(&format!("{}-", second.pid())),
        "only the new server's fence is left: {after:?}"
    );
    second.close_stdin();
    assert!(second.wait_exit(Duration::from_secs(30)).success());
}
