//! Patch journals other servers left in a shared store, against the built binary: `serve`
//! reports them in one summary line (not one per journal), `doctor` and `ops journals` list them,
//! and `ops journals --discard` removes those no running server owns, recording one
//! `journal_discarded` event each, while the journal of a running server stays.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::stdio_common;

use codespace_store::{JournalEntry, OperationRow, Store};
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;
use stdio_common::{BIN, StdioServer};

/// Journals of a dead server bound to other roots.
const STRAY: usize = 7;

/// `<boot id>:<start time>` of this test process, as the server records a live instance.
fn own_process_start() -> String {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let (_, rest) = stat.rsplit_once(')').unwrap();
    let start = rest.split_whitespace().nth(19).unwrap();
    format!("{}:{start}", boot.trim())
}

fn journal(store: &Store, op: &str, owner: &str, registration: &str) {
    let row = OperationRow {
        operation_id: op.into(),
        operation_key: None,
        fingerprint: "f".into(),
        tool: "apply_patch".into(),
        workspace: "default".into(),
        client: None,
        status: "running".into(),
        created_ms: codespace_store::now_ms(),
        finished_ms: None,
        result: None,
    };
    store
        .create_owned_operation(&row, None, Some(owner))
        .unwrap();
    let entry = JournalEntry {
        path: "a.txt".into(),
        before: Some(b"before\n".to_vec()),
        mode: Some(0o100644),
        created_dirs: vec![],
    };
    store
        .journal_begin(op, "default", registration, &[entry])
        .unwrap();
}

/// A store holding [`STRAY`] journals of a dead server for other roots and one of a server that
/// still runs (this test process stands for it).
fn shared_store(path: &Path) {
    let store = Store::open(path).unwrap();
    store
        .insert_instance("dead00000000dead", -1, "another-boot:1")
        .unwrap();
    store
        .insert_instance(
            "11fe00000000a11e",
            i64::from(std::process::id()),
            &own_process_start(),
        )
        .unwrap();
    for i in 0..STRAY {
        journal(
            &store,
            &format!("op-stray-{i}"),
            "dead00000000dead",
            &format!("reg-other-root-{i}"),
        );
    }
    journal(&store, "op-live", "11fe00000000a11e", "reg-live-root");
}

fn run(args: &[&str], home: &Path) -> Output {
    Command::new(BIN)
        .args(args)
        .env("HOME", home)
        .env("XDG_DATA_HOME", home.join("data"))
        .env_remove("CODESPACE_CONFIG")
        .env_remove("CODESPACE_LOG")
        .output()
        .unwrap()
}

fn both(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn journals_of_other_roots_are_one_line_at_start_listed_and_discarded_with_an_audit_row() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    std::fs::create_dir(&root).unwrap();
    let store_path = dir.path().join("store.db");
    shared_store(&store_path);

    // serve: one summary line for every kept journal.
    let log = dir.path().join("serve.log");
    let mut s = StdioServer::serve()
        .arg(&root)
        .arg("--store")
        .arg(&store_path)
        .env("CODESPACE_LOG", "warn")
        .stderr_file(&log)
        .spawn();
    s.initialize("journals-test");
    s.close_stdin();
    assert!(s.wait_exit(Duration::from_secs(30)).success());
    let stderr = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = stderr.lines().filter(|l| l.contains("journal")).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].contains(&format!("{STRAY} patch journal(s) of other roots"))
            && lines[0].contains("codespace ops journals --discard"),
        "{stderr}"
    );

    let store_arg = store_path.to_str().unwrap();
    // doctor lists them.
    let o = run(
        &["doctor", root.to_str().unwrap(), "--store", store_arg],
        dir.path(),
    );
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        out.contains(&format!(
            "patch journals: {} (1 of running servers, {STRAY} no running server owns",
            STRAY + 1
        )),
        "{}",
        both(&o)
    );
    assert!(
        out.contains("op-stray-0") && out.contains("op-live"),
        "{out}"
    );

    // ops journals lists; --discard removes the stray ones only, each an event row.
    let o = run(&["ops", "journals", "--store", store_arg], dir.path());
    assert!(o.status.success(), "{}", both(&o));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(out.matches("op-stray-").count(), STRAY, "{out}");
    assert!(
        out.contains("op-live") && out.contains("(running: kept)"),
        "{out}"
    );
    let o = run(
        &[
            "ops",
            "journals",
            "--discard",
            "--as",
            "alice",
            "--store",
            store_arg,
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", both(&o));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        out.contains(&format!("{STRAY} journal(s) discarded")) && out.contains("1 kept"),
        "{out}"
    );
    let store = Store::open(&store_path).unwrap();
    let left: Vec<String> = store
        .open_journals()
        .unwrap()
        .into_iter()
        .map(|j| j.operation_id)
        .collect();
    assert_eq!(left, vec!["op-live".to_string()]);
    let events = store.events(Some("journal_discarded"), 100).unwrap();
    assert_eq!(events.len(), STRAY);
    assert!(
        events
            .iter()
            .all(|e| e.detail.to_string().contains("cli:alice")),
        "{events:?}"
    );

    // The next start has nothing to report.
    let log = dir.path().join("serve2.log");
    let mut s = StdioServer::serve()
        .arg(&root)
        .arg("--store")
        .arg(&store_path)
        .env("CODESPACE_LOG", "warn")
        .stderr_file(&log)
        .spawn();
    s.initialize("journals-test");
    s.close_stdin();
    assert!(s.wait_exit(Duration::from_secs(30)).success());
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(!stderr.contains("journal"), "{stderr}");
}
