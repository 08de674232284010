//! Audit noise (issue 32 item 6), through the real binary: the paths withheld from an allowed
//! command are logged as `masked` rows, not `deny`, so `codespace audit --decision deny` shows
//! refused calls only while `--decision masked` lists what commands were kept from.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::process_common::skip_without_sandbox;
use crate::stdio_common;

use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;
use stdio_common::{BIN, StdioServer};

fn audit(store: &Path, extra: &[&str]) -> Vec<Value> {
    let out = Command::new(BIN)
        .args(["audit", "--json", "--all-rows", "--oldest", "--store"])
        .arg(store)
        .args(extra)
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

#[test]
fn a_commands_masks_are_masked_rows_not_denials() {
    const TEST: &str = "a_commands_masks_are_masked_rows_not_denials";
    if skip_without_sandbox(TEST) {
        return;
    }
    let probe = codespace_runner_sandbox::probe();
    if !codespace_test_skip::require(
        probe.masking_available(),
        TEST,
        format!("no mount namespaces for secret masks ({probe:?})"),
    ) {
        return;
    }
    let mut s = StdioServer::serve_temp_workspace().spawn();
    let ws = s.dir().join("ws");
    std::fs::write(ws.join(".env"), "PASSWORD=x\n").unwrap();
    s.initialize("audit-masked");
    let store = s.dir().join("store.db");
    let r = s.tool_ok(
        "exec_command",
        json!({"workspace_id": "default", "command": ["true"]}),
    );
    // Its masks were queued for the log before it started.
    assert!(r["process_id"].is_string(), "{r}");
    // A refused call beside it: a real deny.
    let e = s.tool_err("read", json!({"workspace_id": "default", "path": ".env"}));
    assert_eq!(e["code"], "UNAUTHORIZED", "{e}");
    // A mutating call's reply means every row queued before it is committed.
    s.tool_ok(
        "apply_patch",
        json!({"workspace_id": "default",
               "patch": "*** Begin Patch\n*** Add File: b.txt\n+x\n*** End Patch\n"}),
    );

    let masked = audit(&store, &["--decision", "masked"]);
    assert_eq!(masked.len(), 1, "{masked:#?}");
    assert_eq!(masked[0]["tool"], "exec_command", "{masked:#?}");
    assert_eq!(masked[0]["action"], "read", "{masked:#?}");
    assert_eq!(masked[0]["subject"], ".env", "{masked:#?}");
    assert_eq!(masked[0]["decision"], "masked", "{masked:#?}");

    // `--decision deny` shows the refused read only, never the command's mask.
    let denies = audit(&store, &["--decision", "deny"]);
    assert!(
        denies.iter().all(|r| r["tool"] != "exec_command"),
        "{denies:#?}"
    );
    assert!(
        denies
            .iter()
            .any(|r| r["tool"] == "read" && r["subject"] == ".env"),
        "{denies:#?}"
    );
    // The command's own decision is an allow.
    let all = audit(&store, &[]);
    assert!(
        all.iter().any(|r| r["tool"] == "exec_command"
            && r["action"] == "exec_command"
            && r["decision"] == "allow"),
        "{all:#?}"
    );
}
