//! The operation ledger on the real binary (issue 31): `operation_diff` of an `apply_patch`
//! operation (paged), the `check_only` preview, a withheld file's content never shown nor
//! stored, `operation_revert` (restores, replays by key, refuses after an outside edit with
//! `VERSION_CONFLICT` naming the file), `codespace ops list|show|diff`, retention pruning the
//! blobs with their operations, and the store growth of 1 000 patch operations over a 5 MB tree.

use crate::stdio_common::{BIN, StdioServer};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn patch(body: &str) -> String {
    format!("*** Begin Patch\n{body}*** End Patch\n")
}

fn apply(s: &mut StdioServer, ws: &str, body: &str) -> Value {
    let r = s.tool_ok(
        "apply_patch",
        json!({"workspace_id": ws, "patch": patch(body)}),
    );
    assert_eq!(r["status"], "applied", "{r}");
    r
}

fn diff_of(s: &mut StdioServer, op: &str) -> Value {
    s.tool_ok("operation_diff", json!({"operation_id": op}))
}

fn count(store: &Path, sql: &str) -> i64 {
    let conn = rusqlite::Connection::open(store).unwrap();
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

/// A config for workspace `w` rooted at `<dir>/ws` with its store in `dir`, `extra` merged in.
fn config(dir: &Path, extra: Value) -> PathBuf {
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let mut cfg = json!({
        "store": dir.join("store.db"),
        "workspaces": {"w": {"root": ws, "profile": "workspace-write"}},
    });
    if let (Value::Object(c), Value::Object(e)) = (&mut cfg, extra) {
        c.extend(e);
    }
    let path = dir.join("config.json");
    std::fs::write(&path, cfg.to_string()).unwrap();
    path
}

fn serve(cfg: &Path) -> StdioServer {
    let mut s = StdioServer::serve().arg("--config").arg(cfg).spawn();
    s.initialize("ledger-test");
    s
}

#[test]
fn a_patch_operation_has_a_paged_unified_diff_and_check_only_previews_it() {
    let t = tempfile::tempdir().unwrap();
    let cfg = config(t.path(), json!({}));
    let ws = t.path().join("ws");
    std::fs::write(ws.join("a.txt"), "one\ntwo\nthree\n").unwrap();
    let mut s = serve(&cfg);

    // The preview: the diff it would apply, nothing written.
    let body = "*** Update File: a.txt\n@@\n one\n-two\n+TWO\n three\n";
    let checked = s.tool_ok(
        "apply_patch",
        json!({"workspace_id": "w", "patch": patch(body), "check_only": true}),
    );
    assert_eq!(checked["status"], "checked", "{checked}");
    let preview = checked["diff"].as_str().unwrap();
    assert!(
        preview.contains("--- a/a.txt\n+++ b/a.txt\n") && preview.contains("-two\n+TWO\n"),
        "{preview}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("a.txt")).unwrap(),
        "one\ntwo\nthree\n"
    );

    let r = apply(&mut s, "w", body);
    assert!(
        r.get("diff").is_none(),
        "an applied patch has no preview: {r}"
    );
    let op = r["operation_id"].as_str().unwrap().to_string();
    let d = diff_of(&mut s, &op);
    assert_eq!(d["tool"], "apply_patch");
    assert_eq!(d["files"][0]["path"], "a.txt");
    assert_eq!(d["files"][0]["kind"], "update");
    assert!(d["files"][0].get("withheld").is_none(), "{d}");
    let text = d["diff"].as_str().unwrap();
    assert_eq!(text, preview, "the recorded diff is the preview");

    // Paging: a 50-line file added, read back 7 lines at a time.
    let lines: String = (0..50).map(|i| format!("+line {i}\n")).collect();
    let r = apply(&mut s, "w", &format!("*** Add File: big.txt\n{lines}"));
    let op = r["operation_id"].as_str().unwrap().to_string();
    let whole = diff_of(&mut s, &op);
    let total = whole["total_lines"].as_u64().unwrap();
    assert!(total > 50, "{whole}");
    assert!(
        whole["diff"]
            .as_str()
            .unwrap()
            .starts_with("--- /dev/null\n+++ b/big.txt\n")
    );
    let mut offset = 0;
    let mut pages = String::new();
    let mut n = 0;
    loop {
        let p = s.tool_ok(
            "operation_diff",
            json!({"operation_id": op, "offset": offset, "limit": 7}),
        );
        assert_eq!(p["offset"], offset);
        assert!(p["lines"].as_u64().unwrap() <= 7);
        pages.push_str(p["diff"].as_str().unwrap());
        n += 1;
        match p["next_offset"].as_u64() {
            Some(next) => offset = next,
            None => break,
        }
    }
    assert_eq!(pages, whole["diff"].as_str().unwrap());
    assert_eq!(n, total.div_ceil(7));
    // limit 0 is refused; another client's (or a made-up) operation is not found.
    let e = s.tool_err("operation_diff", json!({"operation_id": op, "limit": 0}));
    assert_eq!(e["code"], "INVALID_ARGUMENTS", "{e}");
    let e = s.tool_err("operation_diff", json!({"operation_id": "op-nope"}));
    assert_eq!(e["code"], "OPERATION_NOT_FOUND", "{e}");
    let e = s.tool_err("operation_diff", json!({"operation_id": op, "bogus": 1}));
    assert_eq!(e["code"], "INVALID_ARGUMENTS", "{e}");
}

const AWS_KEY: &str = "AKIAIOSFODNN7EXAMPLE";
const PRIVATE_MARK: &str = "private-marker-4711";

#[test]
fn a_withheld_file_is_named_but_its_content_never_shown_nor_stored() {
    let t = tempfile::tempdir().unwrap();
    // An operator policy: agents may write `private/` but never read it (so the ledger must not
    // show them what they wrote there either).
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let policies = t.path().join("policies");
    for sub in ["base", "profiles"] {
        std::fs::create_dir_all(policies.join(sub)).unwrap();
        for f in std::fs::read_dir(src.join("policies").join(sub)).unwrap() {
            let f = f.unwrap().path();
            if f.extension().is_some_and(|x| x == "cedar") {
                std::fs::copy(&f, policies.join(sub).join(f.file_name().unwrap())).unwrap();
            }
        }
    }
    std::fs::write(
        policies.join("base/operator.cedar"),
        "@id(\"operator.forbid.private-read\")\n@reason(\"private/ is write-only for agents\")\n\
         forbid (principal, action in CodeSpace::Action::\"fs_read\", resource)\n\
         when { resource.path like \"private/*\" };\n",
    )
    .unwrap();
    let store = t.path().join("store.db");
    std::fs::create_dir_all(t.path().join("schema")).unwrap();
    let schema = t.path().join("schema/codespace.cedarschema");
    std::fs::copy(src.join("schema/codespace.cedarschema"), &schema).unwrap();
    let cfg = config(t.path(), json!({"policies": policies, "schema": schema}));
    let mut s = serve(&cfg);
    let body = format!(
        "*** Add File: private/notes.txt\n+{PRIVATE_MARK}\n\
         *** Add File: deploy/settings.txt\n+aws_access_key_id = {AWS_KEY}\n\
         *** Add File: visible.txt\n+hello\n"
    );
    let checked = s.tool_ok(
        "apply_patch",
        json!({"workspace_id": "w", "patch": patch(&body), "check_only": true}),
    );
    let preview = checked["diff"].as_str().unwrap();
    assert!(preview.contains("withheld: private/notes.txt"), "{preview}");
    assert!(
        preview.contains("withheld: deploy/settings.txt"),
        "{preview}"
    );
    assert!(preview.contains("+hello"), "{preview}");

    let r = apply(&mut s, "w", &body);
    let op = r["operation_id"].as_str().unwrap().to_string();
    let d = diff_of(&mut s, &op);
    let files = d["files"].as_array().unwrap();
    let by_path = |p: &str| files.iter().find(|f| f["path"] == p).unwrap().clone();
    assert_eq!(by_path("private/notes.txt")["withheld"], true, "{d}");
    assert_eq!(by_path("deploy/settings.txt")["withheld"], true, "{d}");
    assert!(by_path("private/notes.txt").get("after_version").is_none());
    assert!(by_path("visible.txt").get("withheld").is_none(), "{d}");
    let text = d["diff"].as_str().unwrap();
    assert!(text.contains("withheld: private/notes.txt"), "{text}");
    assert!(text.contains("+hello"), "{text}");

    // A withheld file cannot be reverted (its content was never stored).
    let e = s.tool_err("operation_revert", json!({"operation_id": op}));
    assert_eq!(e["code"], "INVALID_ARGUMENTS", "{e}");
    assert!(e["message"].as_str().unwrap().contains("withheld"), "{e}");

    // Nothing the server said, and nothing in the store, holds either secret.
    for line in s.transcript() {
        let line = String::from_utf8_lossy(line);
        assert!(!line.contains(PRIVATE_MARK), "shown: {line}");
        assert!(!line.contains(AWS_KEY), "shown: {line}");
    }
    s.close_and_wait(Duration::from_secs(30));
    let conn = rusqlite::Connection::open(&store).unwrap();
    let leaked: i64 = conn
        .query_row(
            "SELECT count(*) FROM ledger_blobs WHERE instr(data, ?1) > 0 OR instr(data, ?2) > 0",
            [PRIVATE_MARK.as_bytes(), AWS_KEY.as_bytes()],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(leaked, 0, "a secret reached the ledger's blobs");
    let hashes: i64 = conn
        .query_row(
            "SELECT count(*) FROM ledger_files WHERE withheld = 1 AND \
             (before_version IS NOT NULL OR after_version IS NOT NULL)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(hashes, 0, "a withheld file's version was stored");
    // The operator's CLI names them too and shows no content.
    let o = Command::new(BIN)
        .args(["ops", "diff", &op, "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        out.contains("withheld: private/notes.txt") && out.contains("+hello"),
        "{out}"
    );
    assert!(
        !out.contains(PRIVATE_MARK) && !out.contains(AWS_KEY),
        "{out}"
    );
}

#[test]
fn revert_restores_replays_by_key_and_refuses_after_an_outside_edit() {
    let t = tempfile::tempdir().unwrap();
    let cfg = config(t.path(), json!({}));
    let ws = t.path().join("ws");
    std::fs::write(ws.join("a.txt"), "alpha\nbeta\ngamma\n").unwrap();
    std::fs::write(ws.join("gone.txt"), "keep me\n").unwrap();
    std::fs::write(ws.join("crlf.txt"), "x\r\ny\r\n").unwrap();
    let mut s = serve(&cfg);
    let r = apply(
        &mut s,
        "w",
        "*** Update File: a.txt\n@@\n alpha\n-beta\n+BETA\n gamma\n\
         *** Add File: new/b.txt\n+fresh\n\
         *** Delete File: gone.txt\n\
         *** Update File: crlf.txt\n*** Move to: moved.txt\n@@\n-x\n+X\n",
    );
    let op = r["operation_id"].as_str().unwrap().to_string();
    assert_eq!(
        std::fs::read_to_string(ws.join("a.txt")).unwrap(),
        "alpha\nBETA\ngamma\n"
    );
    let rev = s.tool_ok(
        "operation_revert",
        json!({"operation_id": op, "operation_key": "undo-1"}),
    );
    assert_eq!(rev["status"], "applied", "{rev}");
    assert_ne!(rev["operation_id"], op.as_str());
    assert_eq!(
        std::fs::read_to_string(ws.join("a.txt")).unwrap(),
        "alpha\nbeta\ngamma\n"
    );
    assert!(!ws.join("new/b.txt").exists());
    assert_eq!(
        std::fs::read_to_string(ws.join("gone.txt")).unwrap(),
        "keep me\n"
    );
    assert_eq!(std::fs::read(ws.join("crlf.txt")).unwrap(), b"x\r\ny\r\n");
    assert!(!ws.join("moved.txt").exists());
    // The same key again replays; the revert is itself an operation with a diff.
    let again = s.tool_ok(
        "operation_revert",
        json!({"operation_id": op, "operation_key": "undo-1"}),
    );
    assert_eq!(again["replayed"], true, "{again}");
    assert_eq!(again["operation_id"], rev["operation_id"]);
    let rd = diff_of(&mut s, rev["operation_id"].as_str().unwrap());
    assert!(
        rd["diff"].as_str().unwrap().contains("-BETA\n+beta\n"),
        "{rd}"
    );
    // Reverting again without the key: the files are no longer where the operation left them.
    let e = s.tool_err("operation_revert", json!({"operation_id": op}));
    assert_eq!(e["code"], "VERSION_CONFLICT", "{e}");

    // An outside edit after an operation: its revert names the file and writes nothing.
    let r = apply(
        &mut s,
        "w",
        "*** Update File: a.txt\n@@\n-alpha\n+ALPHA\n*** Add File: c.txt\n+c\n",
    );
    let op2 = r["operation_id"].as_str().unwrap().to_string();
    std::fs::write(ws.join("a.txt"), "edited outside\n").unwrap();
    let e = s.tool_err("operation_revert", json!({"operation_id": op2}));
    assert_eq!(e["code"], "VERSION_CONFLICT", "{e}");
    let msg = e["message"].as_str().unwrap();
    assert!(msg.contains("a.txt") && !msg.contains("c.txt"), "{msg}");
    assert_eq!(
        std::fs::read_to_string(ws.join("a.txt")).unwrap(),
        "edited outside\n"
    );
    assert!(ws.join("c.txt").exists(), "nothing was written");
    let e = s.tool_err("operation_revert", json!({"operation_id": "op-made-up"}));
    assert_eq!(e["code"], "OPERATION_NOT_FOUND", "{e}");

    // `codespace ops list|show|diff` read the same ledger.
    s.close_and_wait(Duration::from_secs(30));
    let cli = |args: &[&str]| {
        let o = Command::new(BIN)
            .args(args)
            .arg("--config")
            .arg(&cfg)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let list = cli(&["ops", "list"]);
    assert!(list.contains(&op) && list.contains(&op2), "{list}");
    let show = cli(&["ops", "show", &op]);
    assert!(
        show.contains("update a.txt") && show.contains("move moved.txt (from crlf.txt)"),
        "{show}"
    );
    let diff = cli(&["ops", "diff", &op]);
    assert!(
        diff.contains("-beta\n+BETA\n") && diff.contains("--- a/gone.txt\n+++ /dev/null"),
        "{diff}"
    );
}

#[test]
fn retention_prunes_an_operations_ledger_and_the_blobs_no_one_else_names() {
    let t = tempfile::tempdir().unwrap();
    let store = t.path().join("store.db");
    let cfg = config(t.path(), json!({}));
    let ws = t.path().join("ws");
    std::fs::write(ws.join("a.txt"), "shared-before\n").unwrap();
    let mut s = serve(&cfg);
    let old = apply(
        &mut s,
        "w",
        "*** Update File: a.txt\n@@\n-shared-before\n+old-only\n",
    )["operation_id"]
        .as_str()
        .unwrap()
        .to_string();
    let recent = apply(
        &mut s,
        "w",
        "*** Update File: a.txt\n@@\n-old-only\n+recent-after\n",
    )["operation_id"]
        .as_str()
        .unwrap()
        .to_string();
    s.close_and_wait(Duration::from_secs(30));
    assert_eq!(count(&store, "SELECT count(*) FROM ledger_blobs"), 3);
    // The old operation is two hours old; retention keeps one hour.
    {
        let conn = rusqlite::Connection::open(&store).unwrap();
        conn.execute(
            "UPDATE operations SET created_ms = created_ms - 7200000 WHERE operation_id = ?1",
            [&old],
        )
        .unwrap();
    }
    let cfg = config(t.path(), json!({"retention": {"operations": "1h"}}));
    let mut s = serve(&cfg);
    let deadline = Instant::now() + Duration::from_secs(60);
    while count(&store, "SELECT count(*) FROM ledger_blobs") != 2 {
        assert!(
            Instant::now() < deadline,
            "the old operation's blob was not pruned"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let q = |op: &str| format!("SELECT count(*) FROM ledger_files WHERE operation_id = '{op}'");
    assert_eq!(count(&store, &q(&old)), 0);
    assert_eq!(count(&store, &q(&recent)), 1);
    // The blob both operations named ("old-only": after of one, before of the other) stays; the
    // first "before" only the old one named is gone.
    let d = diff_of(&mut s, &recent);
    assert!(
        d["diff"]
            .as_str()
            .unwrap()
            .contains("-old-only\n+recent-after\n"),
        "{d}"
    );
    let e = s.tool_err("operation_diff", json!({"operation_id": old}));
    assert_eq!(e["code"], "OPERATION_NOT_FOUND", "{e}");
}

/// Storage: 1 000 patch operations over a 5 MB tree (100 files of 50 KiB, each operation
/// changing one line of one file) add at most twice the bytes the operations wrote to the
/// store's blobs (content addressing: a file's "before" is the previous operation's "after").
#[test]
fn a_thousand_patch_operations_over_a_5mb_tree_add_at_most_twice_the_written_bytes() {
    const FILES: usize = 100;
    const LINES: usize = 800;
    const OPS: usize = 1_000;
    let t = tempfile::tempdir().unwrap();
    let store = t.path().join("store.db");
    let cfg = config(t.path(), json!({}));
    let ws = t.path().join("ws");
    let mut tree = 0usize;
    for f in 0..FILES {
        let text: String = (0..LINES)
            .map(|l| format!("file {f:03} line {l:04} {}\n", "x".repeat(47)))
            .collect();
        tree += text.len();
        std::fs::write(ws.join(format!("f{f:03}.txt")), text).unwrap();
    }
    assert!(tree >= 5 * 1024 * 1024, "{tree}");
    let mut s = serve(&cfg);
    let mut written = 0usize;
    let mut changed_lines_bytes = 0usize;
    for i in 0..OPS {
        let f = i % FILES;
        let l = (i / FILES) * 7 % LINES;
        let old = format!("file {f:03} line {l:04} {}", "x".repeat(47));
        let new = format!("file {f:03} line {l:04} {} op {i}", "y".repeat(47));
        let r = apply(
            &mut s,
            "w",
            &format!("*** Update File: f{f:03}.txt\n@@\n-{old}\n+{new}\n"),
        );
        assert_eq!(r["changes"][0]["kind"], "update");
        written += std::fs::metadata(ws.join(format!("f{f:03}.txt")))
            .unwrap()
            .len() as usize;
        changed_lines_bytes += old.len() + new.len() + 2;
    }
    s.close_and_wait(Duration::from_secs(30));
    let blobs = count(&store, "SELECT coalesce(sum(size), 0) FROM ledger_blobs") as usize;
    let ratio = blobs as f64 / written as f64;
    eprintln!(
        "ledger storage: {OPS} operations over a {tree}-byte tree wrote {written} bytes of files \
         ({changed_lines_bytes} bytes of changed lines); the ledger's blobs hold {blobs} bytes: \
         {ratio:.3}x the written bytes"
    );
    assert!(
        blobs <= 2 * written,
        "{blobs} blob bytes for {written} written bytes"
    );
}

#[test]
fn a_commands_changed_files_are_recorded_best_effort_with_its_process_id() {
    let t = tempfile::tempdir().unwrap();
    // Unsandboxed: the recording comes from the watcher, the same with or without a sandbox.
    let cfg = config(
        t.path(),
        json!({"workspaces": {"w": {"root": t.path().join("ws"), "profile": "workspace-write",
                                    "sandbox": "off", "secret_masking": "off"}}}),
    );
    let ws = t.path().join("ws");
    std::fs::write(ws.join("a.txt"), "a\n").unwrap();
    std::fs::write(ws.join("untouched.txt"), "u\n").unwrap();
    let mut s = serve(&cfg);
    let r = s.tool_ok(
        "exec_command",
        json!({"workspace_id": "w", "command": ["sh", "-c", "echo made > made.txt; echo more >> a.txt"],
               "yield_ms": 10000}),
    );
    assert_eq!(r["state"], "exited", "{r}");
    let op = r["operation_id"].as_str().unwrap().to_string();
    let pid = r["process_id"].as_str().unwrap().to_string();
    // Recorded when the exit watch runs (after the exit the caller saw).
    let deadline = Instant::now() + Duration::from_secs(30);
    let d = loop {
        let d = diff_of(&mut s, &op);
        if d["files"].as_array().unwrap().len() >= 2 {
            break d;
        }
        assert!(Instant::now() < deadline, "no changed files recorded: {d}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let paths: Vec<&str> = d["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert!(
        paths.contains(&"made.txt") && paths.contains(&"a.txt"),
        "{d}"
    );
    assert!(!paths.contains(&"untouched.txt"), "{d}");
    for f in d["files"].as_array().unwrap() {
        assert_eq!(f["kind"], "changed", "{d}");
        assert_eq!(f["process_id"], pid.as_str(), "{d}");
        assert_eq!(f["best_effort"], true, "{d}");
        assert!(f.get("after_version").is_none(), "{d}");
    }
    assert!(
        d["diff"].as_str().unwrap().contains("changed: made.txt"),
        "{d}"
    );
    // A command's operation is not revertible.
    let e = s.tool_err("operation_revert", json!({"operation_id": op}));
    assert_eq!(e["code"], "INVALID_ARGUMENTS", "{e}");
}

#[test]
fn a_revert_is_held_for_approval_like_the_apply_patch_it_is() {
    let t = tempfile::tempdir().unwrap();
    let cfg = config(t.path(), json!({}));
    let ws = t.path().join("ws");
    std::fs::write(ws.join("a.txt"), "before\n").unwrap();
    let mut s = serve(&cfg);
    let op = apply(&mut s, "w", "*** Update File: a.txt\n@@\n-before\n+after\n")["operation_id"]
        .as_str()
        .unwrap()
        .to_string();
    s.close_and_wait(Duration::from_secs(30));
    // The same workspace now asks a human before every mutation.
    let cfg = config(
        t.path(),
        json!({"workspaces": {"w": {"root": ws, "profile": "workspace-write", "approvals": "confirm"}}}),
    );
    let mut s = serve(&cfg);
    let held = s.tool_err("operation_revert", json!({"operation_id": op}));
    assert_eq!(held["code"], "APPROVAL_REQUIRED", "{held}");
    let id = held["approval_id"].as_str().unwrap().to_string();
    assert_eq!(
        std::fs::read_to_string(ws.join("a.txt")).unwrap(),
        "after\n"
    );
    let o = Command::new(BIN)
        .args(["approvals", "grant", &id, "--config"])
        .arg(&cfg)
        .env("USER", "alice")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r = s.tool_ok("operation_resume", json!({"approval_id": id}));
    assert_eq!(r["apply_patch"]["status"], "applied", "{r}");
    assert_eq!(
        std::fs::read_to_string(ws.join("a.txt")).unwrap(),
        "before\n"
    );
}
