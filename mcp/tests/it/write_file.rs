//! `write_file` on the real binary (issue 31's file toolkit): exact bytes (no final newline,
//! CRLF, NUL and non-UTF-8 through base64), append, create refusing an existing file, a stale
//! `expected_version` refused, denied paths (`.git/config`, a secret file) refused with nothing
//! written, the ledger's `operation_diff` / `operation_revert` on it, and a hold like a patch's.

use crate::stdio_common::{BIN, StdioServer};
use base64::Engine as _;
use serde_json::{Value, json};
use sha2::Digest as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// A config for workspace `w` rooted at `<dir>/ws`, `approvals` as given.
fn config(dir: &Path, approvals: &str) -> PathBuf {
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let cfg = json!({
        "store": dir.join("store.db"),
        "workspaces": {"w": {"root": ws, "profile": "workspace-write", "approvals": approvals}},
    });
    let path = dir.join("config.json");
    std::fs::write(&path, cfg.to_string()).unwrap();
    path
}

fn serve(cfg: &Path) -> StdioServer {
    let mut s = StdioServer::serve().arg("--config").arg(cfg).spawn();
    s.initialize("write-file-test");
    s
}

fn version(data: &[u8]) -> String {
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(data)))
}

fn write(s: &mut StdioServer, args: Value) -> Value {
    let mut a = json!({"workspace_id": "w"});
    if let (Value::Object(m), Value::Object(extra)) = (&mut a, args) {
        m.extend(extra);
    }
    s.tool_ok("write_file", a)
}

#[test]
fn replace_append_and_create_write_exact_bytes() {
    let t = tempfile::tempdir().unwrap();
    let cfg = config(t.path(), "off");
    let ws = t.path().join("ws");
    std::fs::write(ws.join("a.txt"), "one\r\ntwo\r\n").unwrap();
    let mut s = serve(&cfg);

    // Replace: no final newline and CRLF kept exactly (a V4A patch would add a newline).
    let r = write(&mut s, json!({"path": "a.txt", "content": "x\r\ny"}));
    assert_eq!(r["status"], "applied", "{r}");
    assert_eq!(std::fs::read(ws.join("a.txt")).unwrap(), b"x\r\ny");
    assert_eq!(r["changes"][0]["kind"], "update", "{r}");
    assert_eq!(
        r["changes"][0]["before_version"],
        version(b"one\r\ntwo\r\n")
    );
    assert_eq!(r["changes"][0]["after_version"], version(b"x\r\ny"));

    // Append: after the last byte, nothing added.
    let r = write(
        &mut s,
        json!({"path": "a.txt", "content": "\rz", "mode": "append", "expected_version": version(b"x\r\ny")}),
    );
    assert_eq!(r["status"], "applied", "{r}");
    assert_eq!(std::fs::read(ws.join("a.txt")).unwrap(), b"x\r\ny\rz");

    // Any bytes through base64: NUL and invalid UTF-8.
    let bytes: &[u8] = b"\x00\xff\xfe bin\n\x00";
    let b64 = base64::engine::general_purpose::STANDARD.encode(bytes);
    let r = write(
        &mut s,
        json!({"path": "bin/blob.dat", "content": b64, "encoding": "base64", "mode": "create"}),
    );
    assert_eq!(r["status"], "applied", "{r}");
    assert_eq!(r["changes"][0]["kind"], "add", "{r}");
    assert_eq!(std::fs::read(ws.join("bin/blob.dat")).unwrap(), bytes);
    let read = s.tool_ok(
        "read",
        json!({"workspace_id": "w", "path": "bin/blob.dat", "encoding": "base64"}),
    );
    assert_eq!(read["version"], version(bytes), "{read}");

    // Create refuses an existing file; replace and append refuse a missing one.
    let e = s.tool_err(
        "write_file",
        json!({"workspace_id": "w", "path": "a.txt", "content": "new", "mode": "create"}),
    );
    assert_eq!(e["code"], "ADD_FILE_EXISTS", "{e}");
    let e = s.tool_err(
        "write_file",
        json!({"workspace_id": "w", "path": "missing.txt", "content": "new"}),
    );
    assert_eq!(e["code"], "FILE_NOT_FOUND", "{e}");
    assert!(!ws.join("missing.txt").exists());
    let e = s.tool_err(
        "write_file",
        json!({"workspace_id": "w", "path": "b.txt", "content": "%%%", "encoding": "base64", "mode": "create"}),
    );
    assert_eq!(e["code"], "INVALID_ARGUMENTS", "{e}");
    assert_eq!(std::fs::read(ws.join("a.txt")).unwrap(), b"x\r\ny\rz");

    // check_only: the diff, nothing written.
    let r = write(
        &mut s,
        json!({"path": "a.txt", "content": "checked\n", "check_only": true}),
    );
    assert_eq!(r["status"], "checked", "{r}");
    assert!(r["diff"].as_str().unwrap().contains("+checked"), "{r}");
    assert_eq!(std::fs::read(ws.join("a.txt")).unwrap(), b"x\r\ny\rz");

    // operation_key replays the same write; another write under the key is refused.
    let first = write(
        &mut s,
        json!({"path": "k.txt", "content": "k", "mode": "create", "operation_key": "wk-1"}),
    );
    let again = write(
        &mut s,
        json!({"path": "k.txt", "content": "k", "mode": "create", "operation_key": "wk-1"}),
    );
    assert_eq!(again["replayed"], true, "{again}");
    assert_eq!(again["operation_id"], first["operation_id"]);
    let status = s.tool_ok(
        "operation_status",
        json!({"operation_id": first["operation_id"]}),
    );
    assert_eq!(status["kind"], "patch", "{status}");
}

#[test]
fn a_stale_version_or_a_denied_path_writes_nothing() {
    let t = tempfile::tempdir().unwrap();
    let cfg = config(t.path(), "off");
    let ws = t.path().join("ws");
    std::fs::write(ws.join("a.txt"), "old\n").unwrap();
    std::fs::create_dir_all(ws.join(".git")).unwrap();
    std::fs::write(ws.join(".git/config"), "[core]\n").unwrap();
    std::fs::write(ws.join(".env"), "TOKEN=1\n").unwrap();
    let mut s = serve(&cfg);

    let e = s.tool_err(
        "write_file",
        json!({"workspace_id": "w", "path": "a.txt", "content": "new", "expected_version": version(b"other\n")}),
    );
    assert_eq!(e["code"], "VERSION_CONFLICT", "{e}");
    assert_eq!(std::fs::read(ws.join("a.txt")).unwrap(), b"old\n");

    for (path, mode, policy) in [
        (".git/config", "replace", "base.forbid.git-metadata-write"),
        (
            ".git/hooks/pre-commit",
            "create",
            "base.forbid.git-metadata-write",
        ),
        (".env", "append", "base.forbid.secret-files"),
    ] {
        let e = s.tool_err(
            "write_file",
            json!({"workspace_id": "w", "path": path, "content": "evil", "mode": mode}),
        );
        assert_eq!(e["code"], "UNAUTHORIZED", "{path}: {e}");
        assert!(e["policy_ids"].to_string().contains(policy), "{path}: {e}");
    }
    let e = s.tool_err(
        "write_file",
        json!({"workspace_id": "w", "path": "../outside.txt", "content": "x", "mode": "create"}),
    );
    assert_eq!(e["code"], "PATH_ESCAPE", "{e}");
    assert_eq!(std::fs::read(ws.join(".git/config")).unwrap(), b"[core]\n");
    assert!(!ws.join(".git/hooks/pre-commit").exists());
    assert_eq!(std::fs::read(ws.join(".env")).unwrap(), b"TOKEN=1\n");
    assert!(!t.path().join("outside.txt").exists());
}

#[test]
fn the_ledger_diffs_and_reverts_a_whole_file_write() {
    let t = tempfile::tempdir().unwrap();
    let cfg = config(t.path(), "off");
    let ws = t.path().join("ws");
    std::fs::write(ws.join("a.txt"), "one\ntwo\n").unwrap();
    let mut s = serve(&cfg);

    let r = write(&mut s, json!({"path": "a.txt", "content": "one\nTWO\n"}));
    let op = r["operation_id"].as_str().unwrap().to_string();
    let d = s.tool_ok("operation_diff", json!({"operation_id": op}));
    let text = d["diff"].as_str().unwrap();
    assert!(text.contains("-two\n+TWO\n"), "{d}");
    let undone = s.tool_ok("operation_revert", json!({"operation_id": op}));
    assert_eq!(undone["status"], "applied", "{undone}");
    assert_eq!(std::fs::read(ws.join("a.txt")).unwrap(), b"one\ntwo\n");

    // A created file without a final newline: its revert removes it.
    let r = write(
        &mut s,
        json!({"path": "n.txt", "content": "no newline", "mode": "create"}),
    );
    let op = r["operation_id"].as_str().unwrap().to_string();
    let d = s.tool_ok("operation_diff", json!({"operation_id": op}));
    assert!(d["diff"].as_str().unwrap().contains("+no newline"), "{d}");
    let undone = s.tool_ok("operation_revert", json!({"operation_id": op}));
    assert_eq!(undone["status"], "applied", "{undone}");
    assert!(!ws.join("n.txt").exists());
}

#[test]
fn a_whole_file_write_is_held_for_approval_like_a_patch() {
    let t = tempfile::tempdir().unwrap();
    let cfg = config(t.path(), "confirm");
    let ws = t.path().join("ws");
    std::fs::write(ws.join("a.txt"), "before").unwrap();
    let mut s = serve(&cfg);
    let held = s.tool_err(
        "write_file",
        json!({"workspace_id": "w", "path": "a.txt", "content": "after"}),
    );
    assert_eq!(held["code"], "APPROVAL_REQUIRED", "{held}");
    let id = held["approval_id"].as_str().unwrap().to_string();
    assert_eq!(std::fs::read(ws.join("a.txt")).unwrap(), b"before");
    let o = Command::new(BIN)
        .args(["approvals", "grant", &id, "--config"])
        .arg(&cfg)
        .env("USER", "alice")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r = s.tool_ok("operation_resume", json!({"approval_id": id}));
    assert_eq!(r["apply_patch"]["status"], "applied", "{r}");
    assert_eq!(std::fs::read(ws.join("a.txt")).unwrap(), b"after");
    s.close_and_wait(Duration::from_secs(30));
}
