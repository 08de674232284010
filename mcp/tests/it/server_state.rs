//! Server-owned state through the real binary: `serve` refuses server files inside a workspace,
//! start-up recovery applies only journals this store sealed for this root, the version oracle
//! is closed, operation keys are scoped to the workspace identity and expire, and retention
//! prunes old rows in the background while tool calls go on.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::stdio_common;

use codespace_store::{DecisionRow, KeyScope, OperationRow, ProcessRow, Store, now_ms};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use stdio_common::{BIN, StdioServer};

fn run_serve(args: &[&std::ffi::OsStr], envs: &[(&str, &Path)], cwd: &Path) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.arg("serve")
        .args(args)
        .current_dir(cwd)
        .env_remove("CODESPACE_CONFIG")
        .env_remove("CODESPACE_LOG")
        .env_remove("XDG_DATA_HOME")
        .stdin(Stdio::null());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn write(path: &Path, text: &str) {
    if let Some(p) = path.parent() {
        std::fs::create_dir_all(p).unwrap();
    }
    std::fs::write(path, text).unwrap();
}

fn write_config(path: &Path, cfg: &Value) {
    write(path, &serde_json::to_string_pretty(cfg).unwrap());
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).unwrap();
        }
    }
}

/// Asserts a refused start: exit 1, one `invalid config: <field>: ...` line naming the workspace.
fn assert_refused(o: &Output, field: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(1), "stderr: {err}");
    let line = err
        .lines()
        .find(|l| l.contains("invalid config"))
        .unwrap_or_else(|| panic!("no invalid config line in: {err}"));
    assert!(
        line.contains(&format!("invalid config: {field}: ")),
        "want field `{field}` in: {line}"
    );
    assert!(line.contains("lies inside workspace \"") || line.contains("contains workspace \""));
}

#[test]
fn serve_refuses_server_files_inside_a_workspace() {
    let t = tempfile::tempdir().unwrap();
    let ws = t.path().join("ws");
    write(&ws.join("a.txt"), "a\n");

    // The store inside the workspace, given on the command line: refused, nothing created.
    let o = run_serve(
        &[
            ws.as_os_str(),
            "--store".as_ref(),
            ws.join("data/s.db").as_os_str(),
        ],
        &[],
        t.path(),
    );
    assert_refused(&o, "store");
    assert!(!ws.join("data").exists(), "the store was created anyway");

    // The default store location inside the workspace (`codespace serve ~`).
    let home = t.path().join("home");
    write(&home.join("notes.txt"), "n\n");
    let o = run_serve(&[home.as_os_str()], &[("HOME", &home)], t.path());
    assert_refused(&o, "store");
    assert!(
        stderr(&o).contains("default store location"),
        "{}",
        stderr(&o)
    );
    assert!(
        !home.join(".local").exists(),
        "the default store was created anyway"
    );

    // The config file inside the workspace.
    let store = t.path().join("store.db");
    let cfg_in = ws.join("codespace.json");
    write_config(
        &cfg_in,
        &json!({"workspaces": {"w": {"root": ws}}, "store": store}),
    );
    let o = run_serve(&["--config".as_ref(), cfg_in.as_os_str()], &[], t.path());
    assert_refused(&o, "config file");

    // The policies directory and the schema inside the workspace.
    copy_dir(&repo().join("policies"), &ws.join("policies"));
    copy_dir(&repo().join("schema"), &t.path().join("schema"));
    let cfg = t.path().join("config.json");
    write_config(
        &cfg,
        &json!({"workspaces": {"w": {"root": ws}}, "store": store,
                "policies": ws.join("policies"),
                "schema": t.path().join("schema/codespace.cedarschema")}),
    );
    let o = run_serve(&["--config".as_ref(), cfg.as_os_str()], &[], t.path());
    assert_refused(&o, "policies");
    copy_dir(&repo().join("policies"), &t.path().join("policies"));
    copy_dir(&repo().join("schema"), &ws.join("schema"));
    write_config(
        &cfg,
        &json!({"workspaces": {"w": {"root": ws}}, "store": store,
                "policies": t.path().join("policies"),
                "schema": ws.join("schema/codespace.cedarschema")}),
    );
    let o = run_serve(&["--config".as_ref(), cfg.as_os_str()], &[], t.path());
    assert_refused(&o, "schema");

    // A client token file inside the workspace.
    write(&ws.join("ci.token"), "0123456789abcdef0123456789\n");
    write_config(
        &cfg,
        &json!({"workspaces": {"w": {"root": ws}}, "store": store,
                "clients": {"ci": {"token_file": ws.join("ci.token")}}}),
    );
    let o = run_serve(&["--config".as_ref(), cfg.as_os_str()], &[], t.path());
    assert_refused(&o, "clients.ci.token_file");

    // The store's directory reached through a symlink that points into the workspace.
    let link = t.path().join("data-link");
    std::os::unix::fs::symlink(&ws, &link).unwrap();
    let o = run_serve(
        &[
            ws.as_os_str(),
            "--store".as_ref(),
            link.join("s.db").as_os_str(),
        ],
        &[],
        t.path(),
    );
    assert_refused(&o, "store");
    assert!(!store.exists(), "no refused start created the store");
}

/// Serves `root` as workspace `default` with the store at `store`.
fn start(root: &Path, store: &Path) -> StdioServer {
    let mut s = StdioServer::serve()
        .arg(root)
        .arg("--store")
        .arg(store)
        .spawn();
    s.initialize("state-test");
    s
}

fn stop(mut s: StdioServer) {
    let status = s.close_and_wait(Duration::from_secs(30));
    assert!(status.success(), "server exit: {status}");
}

fn sha256_version(data: &[u8]) -> String {
    format!("sha256:{}", hex(&Sha256::digest(data)))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn a_forged_journal_is_not_applied_at_start_up() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("ws");
    write(&root.join("a.txt"), "mine\n");
    let store_path = t.path().join("store.db");
    // A first run creates the store, its key and the workspace registration.
    let mut s = start(&root, &store_path);
    s.tool_ok(
        "apply_patch",
        json!({"workspace_id": "default",
               "patch": "*** Begin Patch\n*** Add File: b.txt\n+b\n*** End Patch\n"}),
    );
    stop(s);
    assert!(
        t.path().join("store.db.key").is_file(),
        "the journal key lives next to the store"
    );
    let registration: String = {
        let raw = rusqlite::Connection::open(&store_path).unwrap();
        raw.query_row(
            "SELECT registration_id FROM workspace_registrations WHERE workspace = 'default'",
            [],
            |r| r.get(0),
        )
        .unwrap()
    };

    // Anyone who can write the database: an unsealed journal that would drop an executable git
    // hook, and one with the right registration but a made-up seal that would rewrite a.txt.
    {
        let raw = rusqlite::Connection::open(&store_path).unwrap();
        raw.execute(
            "INSERT INTO operations (operation_id, fingerprint, tool, workspace, status, created_ms) \
             VALUES ('op-forged-1', 'f', 'apply_patch', 'default', 'running', ?1), \
                    ('op-forged-2', 'f', 'apply_patch', 'default', 'running', ?1);",
            [now_ms()],
        )
        .unwrap();
        raw.execute(
            "INSERT INTO patch_journals (operation_id, workspace, created_ms) \
             VALUES ('op-forged-1', 'default', 1)",
            [],
        )
        .unwrap();
        raw.execute(
            "INSERT INTO patch_journal_entries (operation_id, seq, path, before, mode, created_dirs) \
             VALUES ('op-forged-1', 0, '.git/hooks/pre-commit', ?1, 493, '[]')",
            rusqlite::params![b"#!/bin/sh\necho pwned\n".to_vec()],
        )
        .unwrap();
        raw.execute(
            "INSERT INTO patch_journals (operation_id, workspace, created_ms, registration, seal) \
             VALUES ('op-forged-2', 'default', 2, ?1, ?2)",
            rusqlite::params![registration, "ab".repeat(32)],
        )
        .unwrap();
        raw.execute(
            "INSERT INTO patch_journal_entries (operation_id, seq, path, before, mode, created_dirs) \
             VALUES ('op-forged-2', 0, 'a.txt', ?1, 420, '[]')",
            rusqlite::params![b"forged\n".to_vec()],
        )
        .unwrap();
    }

    let mut s = start(&root, &store_path);
    assert!(
        !root.join(".git").exists(),
        "the forged journal wrote a git hook"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("a.txt")).unwrap(),
        "mine\n"
    );
    assert_eq!(std::fs::read_to_string(root.join("b.txt")).unwrap(), "b\n");
    let st = s.tool_ok("operation_status", json!({"operation_id": "op-forged-1"}));
    assert_eq!(st["status"], "unknown", "{st}");
    stop(s);

    let store = Store::open(&store_path).unwrap();
    let refused = store.events(Some("journal_refused"), 10).unwrap();
    let ops: Vec<&str> = refused
        .iter()
        .map(|e| e.detail["operation_id"].as_str().unwrap())
        .collect();
    assert!(
        ops.contains(&"op-forged-1") && ops.contains(&"op-forged-2"),
        "{refused:?}"
    );
    assert!(
        store.open_journals().unwrap().is_empty(),
        "refused journals are dropped"
    );
}

/// Touches three files with a slow apply so the test can kill the server mid-way.
const SLOW_PATCH: &str = "*** Begin Patch\n*** Update File: a.txt\n@@\n-a\n+A\n*** Update File: b.txt\n@@\n-b\n+B\n*** End Patch\n";

#[test]
fn a_crash_journal_is_rolled_back_only_on_its_own_root() {
    if !stdio_common::test_hooks_or_skip("a_crash_journal_is_rolled_back_only_on_its_own_root") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let tree_a = t.path().join("a");
    let tree_b = t.path().join("b");
    write(&tree_a.join("a.txt"), "a\n");
    write(&tree_a.join("b.txt"), "b\n");
    write(&tree_b.join("a.txt"), "tree b\n");
    write(&tree_b.join("b.txt"), "tree b too\n");
    let store = t.path().join("store.db");
    let mut s = StdioServer::serve()
        .arg(&tree_a)
        .arg("--store")
        .arg(&store)
        .env("CODESPACE_TEST_PATCH_STEP_DELAY_MS", "300")
        .spawn();
    s.initialize("crash");
    s.send_request(
        "tools/call",
        json!({"name": "apply_patch", "arguments": {"workspace_id": "default", "patch": SLOW_PATCH}}),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::read_to_string(tree_a.join("a.txt")).unwrap() != "A\n" {
        assert!(Instant::now() < deadline, "the first file never changed");
        std::thread::sleep(Duration::from_millis(20));
    }
    s.kill();

    // Another tree served as the same workspace id: the journal is not its own; nothing there
    // changes, and the journal waits for its tree.
    let s = start(&tree_b, &store);
    stop(s);
    assert_eq!(
        std::fs::read_to_string(tree_b.join("a.txt")).unwrap(),
        "tree b\n"
    );
    assert_eq!(
        std::fs::read_to_string(tree_b.join("b.txt")).unwrap(),
        "tree b too\n"
    );
    assert_eq!(
        std::fs::read_to_string(tree_a.join("a.txt")).unwrap(),
        "A\n"
    );
    assert_eq!(
        Store::open(&store).unwrap().open_journals().unwrap().len(),
        1
    );

    // Back on its own tree: rolled back.
    let s = start(&tree_a, &store);
    stop(s);
    assert_eq!(
        std::fs::read_to_string(tree_a.join("a.txt")).unwrap(),
        "a\n"
    );
    assert_eq!(
        std::fs::read_to_string(tree_a.join("b.txt")).unwrap(),
        "b\n"
    );
    assert!(
        Store::open(&store)
            .unwrap()
            .open_journals()
            .unwrap()
            .is_empty()
    );
}

#[test]
fn expected_versions_of_a_withheld_file_is_unauthorized_without_its_version() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("ws");
    let secret = b"SECRET=hunter2\n";
    write(&root.join(".env"), std::str::from_utf8(secret).unwrap());
    write(&root.join("a.txt"), "alpha\n");
    let mut s = start(&root, &t.path().join("store.db"));
    let body = s.tool_err(
        "apply_patch",
        json!({"workspace_id": "default",
               "patch": "*** Begin Patch\n*** Add File: x.txt\n+x\n*** End Patch\n",
               "expected_versions": {".env": "absent"}}),
    );
    assert_eq!(body["code"], "UNAUTHORIZED", "{body}");
    assert!(
        body["policy_ids"]
            .as_array()
            .unwrap()
            .contains(&json!("base.forbid.secret-files")),
        "{body}"
    );
    let version = sha256_version(secret);
    let hex_only = version.trim_start_matches("sha256:");
    let transcript: String = s
        .transcript()
        .iter()
        .map(|l| String::from_utf8_lossy(l).into_owned())
        .collect();
    assert!(
        !transcript.contains(hex_only),
        "the secret's version leaked: {body}"
    );
    assert!(!root.join("x.txt").exists());
    // A readable path still answers with its version (the oracle is closed, not the feature).
    let body = s.tool_err(
        "apply_patch",
        json!({"workspace_id": "default",
               "patch": "*** Begin Patch\n*** Add File: x.txt\n+x\n*** End Patch\n",
               "expected_versions": {"a.txt": "absent"}}),
    );
    assert_eq!(body["code"], "VERSION_CONFLICT", "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains(&sha256_version(b"alpha\n")),
        "{body}"
    );
    stop(s);
}

const KEYED_PATCH: &str =
    "*** Begin Patch\n*** Update File: a.txt\n@@\n-alpha\n+beta\n*** End Patch\n";

fn keyed_patch(s: &mut StdioServer, key: &str) -> Value {
    s.tool_ok(
        "apply_patch",
        json!({"workspace_id": "default", "operation_key": key, "patch": KEYED_PATCH}),
    )
}

#[test]
fn an_operation_key_replays_only_on_the_tree_it_was_used_on() {
    let t = tempfile::tempdir().unwrap();
    let tree_a = t.path().join("a");
    let tree_b = t.path().join("b");
    for tree in [&tree_a, &tree_b] {
        write(&tree.join("a.txt"), "alpha\n");
    }
    let store = t.path().join("store.db");

    let mut s = start(&tree_a, &store);
    let first = keyed_patch(&mut s, "k1");
    assert_eq!(
        (first["status"].as_str(), first["replayed"].as_bool()),
        (Some("applied"), Some(false))
    );
    stop(s);
    assert_eq!(
        std::fs::read_to_string(tree_a.join("a.txt")).unwrap(),
        "beta\n"
    );

    // Another tree bound to the same workspace id, same store, same key, same patch: new.
    let mut s = start(&tree_b, &store);
    let st = s.tool_err("operation_status", json!({"operation_key": "k1"}));
    assert_eq!(st["code"], "OPERATION_NOT_FOUND", "{st}");
    let second = keyed_patch(&mut s, "k1");
    assert_eq!(second["status"], "applied", "{second}");
    assert_eq!(second["replayed"], false, "{second}");
    assert_ne!(second["operation_id"], first["operation_id"]);
    assert_eq!(
        std::fs::read_to_string(tree_b.join("a.txt")).unwrap(),
        "beta\n"
    );
    // By id, the first tree's operation is still there.
    let by_id = s.tool_ok(
        "operation_status",
        json!({"operation_id": first["operation_id"]}),
    );
    assert_eq!(by_id["status"], "applied");
    stop(s);

    // The first tree again, within the key's lifetime: today's replay.
    let mut s = start(&tree_a, &store);
    let again = keyed_patch(&mut s, "k1");
    assert_eq!(again["replayed"], true, "{again}");
    assert_eq!(again["operation_id"], first["operation_id"]);
    let st = s.tool_ok("operation_status", json!({"operation_key": "k1"}));
    assert_eq!(st["operation_id"], first["operation_id"]);
    stop(s);
}

#[test]
fn operation_keys_expire_after_the_configured_time() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("ws");
    write(&root.join("a.txt"), "alpha\n");
    let cfg = t.path().join("config.json");
    write_config(
        &cfg,
        &json!({"workspaces": {"default": {"root": root}},
                "store": t.path().join("store.db"),
                "retention": {"operation_keys": "3s"}}),
    );
    let mut s = StdioServer::serve().arg("--config").arg(&cfg).spawn();
    s.initialize("expiry");
    let add = "*** Begin Patch\n*** Add File: k.txt\n+k\n*** End Patch\n";
    let call = |s: &mut StdioServer| {
        s.tool_ok(
            "apply_patch",
            json!({"workspace_id": "default", "operation_key": "k-exp", "patch": add}),
        )
    };
    let started = Instant::now();
    let first = call(&mut s);
    // The key was minted before the first call returned: from then on its age only grows.
    let minted_by = Instant::now();
    assert_eq!(first["replayed"], false);
    let second = call(&mut s);
    let within = started.elapsed();
    assert!(
        within < Duration::from_secs(3),
        "the replay came {within:?} after the first call, past the key's lifetime"
    );
    assert_eq!(second["replayed"], true, "{second}");
    // Make room for the same patch to apply again, then wait out the key's lifetime.
    s.tool_ok(
        "apply_patch",
        json!({"workspace_id": "default",
               "patch": "*** Begin Patch\n*** Delete File: k.txt\n*** End Patch\n"}),
    );
    let expiry = minted_by + Duration::from_millis(3_300);
    while Instant::now() < expiry {
        std::thread::sleep(expiry - Instant::now());
    }
    let st = s.tool_err("operation_status", json!({"operation_key": "k-exp"}));
    assert_eq!(
        st["code"], "OPERATION_NOT_FOUND",
        "an expired key is unknown: {st}"
    );
    let by_id = s.tool_ok(
        "operation_status",
        json!({"operation_id": first["operation_id"]}),
    );
    assert_eq!(
        by_id["status"], "applied",
        "by id it stays visible: {by_id}"
    );
    let third = call(&mut s);
    assert_eq!(third["replayed"], false, "{third}");
    assert_eq!(third["status"], "applied");
    assert_ne!(third["operation_id"], first["operation_id"]);
    assert!(root.join("k.txt").exists());
    let info = s.tool_ok("workspace_info", json!({}));
    assert_eq!(info["store"]["retention"]["operation_keys"], "3s", "{info}");
    stop(s);
}

#[test]
fn operations_unfinished_by_an_earlier_run_become_unknown() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("ws");
    write(&root.join("a.txt"), "a\n");
    let store_path = t.path().join("store.db");
    {
        let store = Store::open(&store_path).unwrap();
        store
            .create_operation(
                &OperationRow {
                    operation_id: "op-earlier".into(),
                    operation_key: None,
                    fingerprint: "f".into(),
                    tool: "exec_command".into(),
                    workspace: "default".into(),
                    client: Some("local".into()),
                    status: "running".into(),
                    created_ms: now_ms(),
                    finished_ms: None,
                    result: None,
                },
                None,
            )
            .unwrap();
    }
    let mut s = start(&root, &store_path);
    let st = s.tool_ok("operation_status", json!({"operation_id": "op-earlier"}));
    assert_eq!(st["status"], "unknown", "{st}");
    stop(s);
}

fn old_decision(i: usize, at_ms: i64) -> DecisionRow {
    DecisionRow {
        decision_id: format!("dec-old-{i}"),
        at_ms,
        policy_set_sha256: "sha256:x".into(),
        profile: "workspace-write".into(),
        workspace: "default".into(),
        tool: "read".into(),
        action: "read".into(),
        sub_index: 0,
        subject: "a.txt".into(),
        client: Some("local".into()),
        transport: Some("stdio".into()),
        decision: "allow".into(),
        policy_ids: vec![],
        errors: vec![],
        default_deny: false,
        duration_us: 1,
        ..DecisionRow::default()
    }
}

fn count(store: &Path, sql: &str) -> i64 {
    let raw = rusqlite::Connection::open(store).unwrap();
    raw.busy_timeout(Duration::from_secs(10)).unwrap();
    raw.query_row(sql, [], |r| r.get(0)).unwrap()
}

#[test]
fn retention_prunes_old_rows_in_the_background_while_calls_go_on() {
    const OLD: usize = 20_000;
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("ws");
    write(&root.join("a.txt"), "a\n");
    let store_path = t.path().join("store.db");
    let hour: i64 = 3_600_000;
    let now = now_ms();
    {
        let store = Store::open(&store_path).unwrap();
        let rows: Vec<DecisionRow> = (0..OLD).map(|i| old_decision(i, now - 2 * hour)).collect();
        for chunk in rows.chunks(5_000) {
            store.insert_decisions(chunk).unwrap();
        }
        let recent: Vec<DecisionRow> = (0..5)
            .map(|i| {
                let mut r = old_decision(i, now - hour / 6);
                r.decision_id = format!("dec-recent-{i}");
                r
            })
            .collect();
        store.insert_decisions(&recent).unwrap();
        for (id, age) in [("op-old", 2 * hour), ("op-recent", hour / 6)] {
            let scope = KeyScope {
                client: "local".into(),
                registration: "reg-x".into(),
                expires_ms: now - hour,
            };
            store
                .create_operation(
                    &OperationRow {
                        operation_id: id.into(),
                        operation_key: Some(format!("key-{id}")),
                        fingerprint: "f".into(),
                        tool: "exec_command".into(),
                        workspace: "default".into(),
                        client: Some("local".into()),
                        status: "started".into(),
                        created_ms: now - age,
                        finished_ms: Some(now - age),
                        result: None,
                    },
                    Some(&scope),
                )
                .unwrap();
            store
                .upsert_process(&ProcessRow {
                    process_id: format!("proc-{id}"),
                    workspace: "default".into(),
                    operation_id: id.into(),
                    argv_sha256: "x".into(),
                    program: "true".into(),
                    tty: false,
                    pid: None,
                    state: "exited".into(),
                    exit_code: Some(0),
                    termination: None,
                    started_ms: now - age,
                    ended_ms: Some(now - age),
                })
                .unwrap();
        }
    }
    let cfg = t.path().join("config.json");
    write_config(
        &cfg,
        &json!({"workspaces": {"default": {"root": root}}, "store": store_path,
                "retention": {"audit": "1h", "operations": "1h", "operation_keys": "1h"}}),
    );
    let mut s = StdioServer::serve().arg("--config").arg(&cfg).spawn();
    s.initialize("retention");

    // Tool calls while the pruner works through the old rows: each is answered, and the slowest
    // is reported (the pruner deletes 500 rows per transaction on its own connection).
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut slowest = Duration::ZERO;
    let mut calls = 0;
    loop {
        let t0 = Instant::now();
        let r = s.tool_ok("read", json!({"workspace_id": "default", "path": "a.txt"}));
        slowest = slowest.max(t0.elapsed());
        calls += 1;
        assert_eq!(r["content"], "a\n");
        let old = count(
            &store_path,
            "SELECT count(*) FROM decisions WHERE decision_id LIKE 'dec-old-%'",
        );
        if old == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{old} old audit rows still there"
        );
    }
    eprintln!("retention: {calls} read calls while pruning {OLD} rows; slowest {slowest:?}");
    assert!(
        slowest < Duration::from_secs(5),
        "a tool call waited {slowest:?} behind the pruner"
    );
    assert_eq!(
        count(
            &store_path,
            "SELECT count(*) FROM decisions WHERE decision_id LIKE 'dec-recent-%'"
        ),
        5
    );
    // Operations: the old one (with its process row and its expired key) goes, the recent stays.
    let deadline = Instant::now() + Duration::from_secs(60);
    while count(
        &store_path,
        "SELECT count(*) FROM operations WHERE operation_id = 'op-old'",
    ) != 0
    {
        assert!(
            Instant::now() < deadline,
            "the old operation was never pruned"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        count(
            &store_path,
            "SELECT count(*) FROM processes WHERE process_id = 'proc-op-old'"
        ),
        0
    );
    assert_eq!(
        count(
            &store_path,
            "SELECT count(*) FROM operations WHERE operation_id = 'op-recent'"
        ),
        1
    );
    assert_eq!(
        count(&store_path, "SELECT count(*) FROM operation_keys"),
        0,
        "expired keys are pruned"
    );
    // The round is recorded, and workspace_info shows the counts it took.
    let deadline = Instant::now() + Duration::from_secs(60);
    let rows = loop {
        let info = s.tool_ok("workspace_info", json!({}));
        if let Some(rows) = info["store"].get("rows") {
            break rows.clone();
        }
        assert!(
            Instant::now() < deadline,
            "no store rows in workspace_info: {info}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let audit = rows["audit"].as_i64().unwrap();
    assert!((5..1_000).contains(&audit), "{rows}");
    assert!(rows["oldest_audit_at"].as_str().is_some(), "{rows}");
    assert!(rows["operations"].as_i64().unwrap() >= 1, "{rows}");
    assert!(
        count(
            &store_path,
            "SELECT count(*) FROM events WHERE kind = 'retention_pruned'"
        ) >= 1
    );
    stop(s);
}
