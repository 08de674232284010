//! Which executable sandboxed commands start through: the dedicated `codespace-sandbox-helper`
//! beside the `codespace` binary, or, when it is missing, the server binary itself (the
//! fallback, reported by `workspace_info` and `doctor`). Either way the command gets the whole
//! sandbox: no_new_privs, seccomp, the Landlock read allow-list and the secret masks.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::process_common::skip_without_sandbox;
use crate::stdio_common::{BIN, StdioServer};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// What a command reports about its own confinement: no_new_privs, the seccomp mode, whether it
/// could read the store beside the workspace (outside the read allow-list) and the size of the
/// masked `.env`.
const PROBE: &str = "grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status; \
    if cat ../store.db >/dev/null 2>&1; then echo store=READ; else echo store=DENIED; fi; \
    echo env-bytes=$(wc -c < .env)";

fn serve(program: Option<&Path>) -> StdioServer {
    let b = StdioServer::serve_temp_workspace();
    let b = match program {
        Some(p) => b.program(p),
        None => b,
    };
    let mut s = b.spawn();
    std::fs::write(s.dir().join("ws/.env"), "TOKEN=secret\n").unwrap();
    s.initialize("sandbox-helper-test");
    s
}

/// `serve <dir>` names its one workspace `default`.
const WS: &str = "default";

fn isolation(s: &mut StdioServer, ws: &str) -> Value {
    let info = s.tool_ok("workspace_info", json!({"workspace_id": ws}));
    info["execution"]["isolation"].clone()
}

/// Runs [`PROBE`] and checks the command was confined as every sandboxed command is.
fn assert_confined(s: &mut StdioServer, ws: &str) {
    let r = s.tool_ok(
        "exec_command",
        json!({"workspace_id": ws, "command": ["sh", "-c", PROBE], "yield_ms": 20000}),
    );
    let out = r["chunk"].as_str().unwrap_or_default().to_owned();
    assert_eq!(r["exit_code"], 0, "{r}");
    assert!(out.contains("NoNewPrivs:\t1"), "{out}");
    assert!(out.contains("Seccomp:\t2"), "{out}");
    assert!(out.contains("store=DENIED"), "{out}");
    assert!(
        out.contains("env-bytes=0"),
        "the .env was not masked: {out}"
    );
}

/// The server binary alone in a directory of its own (a hard link, else a copy): no dedicated
/// helper beside it.
fn binary_alone() -> (tempfile::TempDir, PathBuf) {
    let bin = Path::new(BIN);
    let dir = tempfile::tempdir_in(bin.parent().unwrap()).unwrap();
    let copy = dir.path().join("codespace");
    if std::fs::hard_link(bin, &copy).is_err() {
        std::fs::copy(bin, &copy).unwrap();
    }
    (dir, copy)
}

#[test]
fn commands_start_through_the_dedicated_helper_beside_the_binary() {
    if skip_without_sandbox("commands_start_through_the_dedicated_helper_beside_the_binary") {
        return;
    }
    // Cargo builds every bin of the package for its integration tests: it is always there.
    let dedicated = Path::new(BIN).with_file_name(codespace_runner_sandbox::HELPER_BIN_NAME);
    assert!(dedicated.is_file(), "{} missing", dedicated.display());
    let mut s = serve(None);
    let ws = WS;
    assert_eq!(isolation(&mut s, ws)["sandbox_helper"], "dedicated");
    assert_confined(&mut s, ws);
    let log = s.stderr_text();
    assert!(!log.contains("sandbox helper:"), "{log}");
}

#[test]
fn without_the_dedicated_helper_the_server_execs_itself_and_says_so() {
    if skip_without_sandbox("without_the_dedicated_helper_the_server_execs_itself_and_says_so") {
        return;
    }
    let (_dir, alone) = binary_alone();
    let mut s = serve(Some(&alone));
    let ws = WS;
    assert_eq!(isolation(&mut s, ws)["sandbox_helper"], "self-exec");
    assert_confined(&mut s, ws);
    let log = s.stderr_text();
    assert!(
        log.contains("codespace-sandbox-helper is not installed beside the server binary"),
        "{log}"
    );

    let out = std::process::Command::new(&alone)
        .args(["doctor", "--json", "--store"])
        .arg(s.dir().join("doctor.db"))
        .arg(s.dir().join("ws"))
        .env_remove("CODESPACE_CONFIG")
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    let helper = &report["sandbox"]["helper"];
    assert_eq!(helper["kind"], "self-exec", "{report}");
    assert!(
        helper["fallback_reason"]
            .as_str()
            .unwrap()
            .contains("not installed"),
        "{helper}"
    );

    let out = std::process::Command::new(BIN)
        .args(["doctor", "--json", "--store"])
        .arg(s.dir().join("doctor2.db"))
        .arg(s.dir().join("ws"))
        .env_remove("CODESPACE_CONFIG")
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["sandbox"]["helper"]["kind"], "dedicated", "{report}");
    assert!(report["sandbox"]["helper"]["fallback_reason"].is_null());
}
