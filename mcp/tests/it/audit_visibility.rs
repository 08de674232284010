//! The decision log as another process sees it while the server keeps running: rows the batching
//! writer commits stay visible to readers in other processes (`codespace audit`), before and after
//! such a reader has come and gone; a mutating call's rows (and the read rows queued before it)
//! are committed when its reply arrives; read rows alone arrive within the writer's delay.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::stdio_common;

use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use stdio_common::{BIN, StdioServer};

/// Reads every decision row's tool with python's `sqlite3` module (the system SQLite) in its
/// own process: opened, queried, closed. Closing matters: the last connection to close
/// checkpoints and deletes the WAL, and the system library does so where the bundled one of
/// `codespace audit` did not. None when python3 or its sqlite3 module is missing.
fn tools_via_python(store: &Path) -> Option<Vec<String>> {
    const SCRIPT: &str = "import json, sqlite3, sys\n\
c = sqlite3.connect(sys.argv[1])\n\
print(json.dumps([r[0] for r in c.execute('SELECT tool FROM decisions ORDER BY rowid')]))\n\
c.close()\n";
    let out = Command::new("python3")
        .args(["-c", SCRIPT])
        .arg(store)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    serde_json::from_slice(&out.stdout).ok()
}

/// Every decision row's tool, as a reader in another process sees it: python's `sqlite3` when
/// available, else a connection of this test process (also another process than the server).
fn tools_on_disk(store: &Path) -> Vec<String> {
    if let Some(tools) = tools_via_python(store) {
        return tools;
    }
    // Not a skip: this test process is another process than the server too.
    eprintln!("note: python3 with sqlite3 not found; reading through this process's SQLite");
    let conn = rusqlite::Connection::open(store).unwrap();
    let mut stmt = conn
        .prepare("SELECT tool FROM decisions ORDER BY rowid")
        .unwrap();
    let tools = stmt
        .query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    drop(stmt);
    conn.close().map_err(|(_, e)| e).unwrap();
    tools
}

/// Every decision row as `codespace audit --json` prints it (another process, the CLI reader).
fn audit_cli_rows(store: &Path) -> Vec<Value> {
    let out = Command::new(BIN)
        .args(["audit", "--json", "--all-rows", "--oldest", "--store"])
        .arg(store)
        .env_remove("CODESPACE_CONFIG")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "codespace audit failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn count(tools: &[String], tool: &str) -> usize {
    tools.iter().filter(|t| *t == tool).count()
}

fn read_a(s: &mut StdioServer) {
    s.tool_ok("read", json!({"workspace_id": "default", "path": "a.txt"}));
}

fn add_file(s: &mut StdioServer, name: &str) {
    s.tool_ok(
        "apply_patch",
        json!({"workspace_id": "default",
               "patch": format!("*** Begin Patch\n*** Add File: {name}\n+x\n*** End Patch\n")}),
    );
}

#[test]
fn a_reader_in_another_process_keeps_seeing_new_rows_while_the_server_runs() {
    let mut s = StdioServer::serve_temp_workspace().spawn();
    s.initialize("audit-visibility");
    let store = s.dir().join("store.db");

    // Round 1: reads (queued), then a patch: its reply means its rows and every row queued
    // before it are committed (write-ahead).
    for _ in 0..3 {
        read_a(&mut s);
    }
    add_file(&mut s, "one.txt");
    let rows = tools_on_disk(&store);
    assert_eq!(count(&rows, "read"), 3, "{rows:?}");
    assert_eq!(count(&rows, "apply_patch"), 1, "{rows:?}");

    // Round 2, after that reader closed its connection: before the fix, its close found no
    // other process holding the store (the server's locks had been dropped) and deleted the
    // WAL under the server, so nothing written later was ever seen outside until exit.
    for _ in 0..2 {
        read_a(&mut s);
    }
    add_file(&mut s, "two.txt");
    let rows = tools_on_disk(&store);
    assert_eq!(count(&rows, "read"), 5, "{rows:?}");
    assert_eq!(count(&rows, "apply_patch"), 2, "{rows:?}");
    // The CLI reader sees the same rows.
    let cli = audit_cli_rows(&store);
    assert_eq!(cli.iter().filter(|r| r["tool"] == "read").count(), 5);

    // Round 3: reads alone are group-committed by the clock (50 ms): they show up without any
    // mutation to carry them, well within a generous bound.
    read_a(&mut s);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let rows = tools_on_disk(&store);
        if count(&rows, "read") == 6 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a read's row never reached the store while the server ran: {rows:?}"
        );
    }
    assert!(s.try_status().is_none(), "the server must still be running");

    // Shutdown (stdin EOF) drains the queue: a last read is on disk after the exit.
    read_a(&mut s);
    s.close_stdin();
    assert!(s.wait_exit(Duration::from_secs(30)).success());
    let rows = tools_on_disk(&store);
    assert_eq!(count(&rows, "read"), 7, "{rows:?}");
}

#[test]
fn the_store_keeps_its_wal_while_the_server_and_outside_readers_share_it() {
    let mut s = StdioServer::serve_temp_workspace().spawn();
    s.initialize("audit-visibility");
    let store = s.dir().join("store.db");
    add_file(&mut s, "one.txt");
    tools_on_disk(&store);
    // An outside reader that closes must not take the server's WAL with it.
    let wal = s.dir().join("store.db-wal");
    assert!(
        wal.exists(),
        "the server's -wal file was deleted by an outside reader"
    );
    add_file(&mut s, "two.txt");
    assert_eq!(count(&tools_on_disk(&store), "apply_patch"), 2);
    s.close_stdin();
    assert!(s.wait_exit(Duration::from_secs(30)).success());
}
