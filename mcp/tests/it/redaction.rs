//! Secrets in the log, on the real binary: URL user-info passwords, `curl -u`, API-key and
//! `*-Token:` headers, GitLab, OpenAI and Stripe keys, JWTs and PEM private keys never reach a
//! decision row, the JSON export or the caller's error text; the config's patterns take effect
//! on reload; `codespace audit scrub` re-redacts rows stored before, once, and says it ran.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::stdio_common;

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};
use stdio_common::{BIN, StdioServer};

/// Each command line carries one secret; the second string is what must never be stored or
/// echoed, the third what must stay (context that is not secret).
const CASES: &[(&str, &str, &str)] = &[
    (
        "git clone https://alice:URLPASS7f3a9@git.example.com/r.git",
        "URLPASS7f3a9",
        "https://alice:[REDACTED]@git.example.com/r.git",
    ),
    (
        "psql postgres://admin:PGPASS7f3a9@db.internal:5432/app",
        "PGPASS7f3a9",
        "postgres://admin:[REDACTED]@db.internal:5432/app",
    ),
    (
        "curl -u bob:CURLPASS7f3a9 https://api.example.com",
        "CURLPASS7f3a9",
        "-u bob:[REDACTED]",
    ),
    (
        "curl --user bob:CURLUSER7f3a9 https://api.example.com",
        "CURLUSER7f3a9",
        "--user bob:[REDACTED]",
    ),
    (
        "curl -H 'X-Api-Key: APIKEY7f3a9' https://api.example.com",
        "APIKEY7f3a9",
        "X-Api-Key: [REDACTED]",
    ),
    (
        "curl -H 'Private-Token: PRIVTOKEN7f3a9' https://gitlab.example.com",
        "PRIVTOKEN7f3a9",
        "Private-Token: [REDACTED]",
    ),
    (
        "echo glpat-ABCDEFGHIJ0123456789xy",
        "glpat-ABCDEFGHIJ0123456789xy",
        "echo [REDACTED]",
    ),
    (
        "echo sk-proj-ABCDEFGHIJKLMNOPQRSTUV0123",
        "sk-proj-ABCDEFGHIJKLMNOPQRSTUV0123",
        "echo [REDACTED]",
    ),
    (
        "echo sk_live_51HABCDEFGHIJKLMNOP",
        "sk_live_51HABCDEFGHIJKLMNOP",
        "echo [REDACTED]",
    ),
    (
        "echo eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhZG1pbiJ9.SIGNATUREsegment7f3a9",
        "SIGNATUREsegment7f3a9",
        "echo [REDACTED]",
    ),
    (
        "printf '%s' '-----BEGIN PRIVATE KEY-----\nMIIEvQPEMBODY7f3a9\n-----END PRIVATE KEY-----'",
        "MIIEvQPEMBODY7f3a9",
        "-----BEGIN PRIVATE KEY-----[REDACTED]-----END PRIVATE KEY-----",
    ),
];

struct Env {
    _dir: tempfile::TempDir,
    root: PathBuf,
    config: PathBuf,
}

impl Env {
    fn store(&self) -> PathBuf {
        self.root.join("audit.db")
    }
}

/// A read-only workspace `r` (every command is refused, and the refusal quotes the command
/// line), the store in `<tmp>/audit.db`, and `redaction` as the config's.
fn env(redaction: Value) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let ws = root.join("ws");
    std::fs::create_dir(&ws).unwrap();
    let e = Env {
        config: root.join("codespace.json"),
        root,
        _dir: dir,
    };
    write_config(&e, redaction);
    e
}

/// Writes the config whole (a temp file renamed over it, as editors do).
fn write_config(e: &Env, redaction: Value) {
    let tmp = e.root.join("codespace.json.tmp");
    std::fs::write(
        &tmp,
        serde_json::to_string_pretty(&json!({
            "store": e.store(),
            "workspaces": {"r": {"root": e.root.join("ws"), "profile": "read-only"}},
            "redaction": redaction,
        }))
        .unwrap(),
    )
    .unwrap();
    std::fs::rename(&tmp, &e.config).unwrap();
}

fn serve(e: &Env) -> StdioServer {
    let mut s = StdioServer::serve()
        .arg("--config")
        .arg(&e.config)
        .env("HOME", &e.root)
        .stderr_file(e.root.join("stderr.log"))
        .spawn();
    s.initialize("redaction-test");
    s
}

/// The refusal of `sh -c LINE` in the read-only workspace: its message.
fn refused_message(s: &mut StdioServer, line: &str) -> String {
    let err = s.tool_err(
        "exec_command",
        json!({"workspace_id": "r", "command": ["sh", "-c", line]}),
    );
    assert_eq!(err["code"], "UNAUTHORIZED", "{err}");
    err["message"].as_str().unwrap().to_string()
}

fn cli(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_remove("CODESPACE_CONFIG")
        .output()
        .unwrap()
}

fn export(e: &Env) -> String {
    let o = cli(&[
        "audit",
        "--config",
        e.config.to_str().unwrap(),
        "--json",
        "--all-rows",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

fn file_holds(path: &Path, needle: &str) -> bool {
    std::fs::read(path)
        .map(|b| b.windows(needle.len()).any(|w| w == needle.as_bytes()))
        .unwrap_or(false)
}

fn store_holds(e: &Env, needle: &str) -> bool {
    ["", "-wal"].iter().any(|suffix| {
        let mut p = e.store().into_os_string();
        p.push(suffix);
        file_holds(Path::new(&p), needle)
    })
}

#[test]
fn round_three_secret_shapes_never_reach_the_log_the_export_or_the_error_text() {
    let e = env(json!({}));
    let mut s = serve(&e);
    for (line, secret, kept) in CASES {
        let msg = refused_message(&mut s, line);
        assert!(
            !msg.contains(secret),
            "the error text echoes {secret}: {msg}"
        );
        assert!(msg.contains(kept), "the error text lost `{kept}`: {msg}");
    }
    s.close_and_wait(Duration::from_secs(30));
    let exported = export(&e);
    assert!(exported.contains("[REDACTED]"), "{exported}");
    for (_, secret, _) in CASES {
        assert!(!exported.contains(secret), "the export holds {secret}");
        assert!(!store_holds(&e, secret), "the store holds {secret}");
    }
}

/// The most rules an accepted `config_reload` event put in force (0: none yet).
fn most_rules_reloaded(e: &Env) -> i64 {
    let conn = rusqlite::Connection::open_with_flags(
        e.store(),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    conn.query_row(
        "SELECT coalesce(max(json_extract(detail, '$.redaction_rules')), 0) FROM events \
         WHERE kind = 'config_reload' AND json_extract(detail, '$.accepted') = 1",
        [],
        |r| r.get(0),
    )
    .unwrap()
}

/// Waits until an accepted `config_reload` event put more than `than` rules in force; returns
/// how many.
fn wait_for_a_reload_with_more_rules_than(e: &Env, than: i64) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let rules = most_rules_reloaded(e);
        if rules > than {
            return rules;
        }
        assert!(
            Instant::now() < deadline,
            "no accepted config_reload with more than {than} rules within 30 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn config_redaction_patterns_take_effect_on_reload_without_a_restart() {
    let e = env(json!({}));
    let mut s = serve(&e);
    let line = "deploy --ticket internal-ID-424242";
    assert!(refused_message(&mut s, line).contains("internal-ID-424242"));
    write_config(&e, json!({"patterns": [r"internal-ID-(?P<secret>\d+)"]}));
    let hup = Command::new("kill")
        .args(["-HUP", &s.pid().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
    // SIGHUP (or the edit itself: the file is watched) reloads the patterns.
    let one_more = wait_for_a_reload_with_more_rules_than(&e, 0);
    let msg = refused_message(&mut s, line);
    assert!(msg.contains("internal-ID-[REDACTED]"), "{msg}");
    // Saving the file alone is enough (one pattern more, so this reload is told apart).
    write_config(
        &e,
        json!({"patterns": [r"internal-ID-(?P<secret>\d+)", r"ticket (?P<secret>\S+)"]}),
    );
    wait_for_a_reload_with_more_rules_than(&e, one_more);
    let msg = refused_message(&mut s, line);
    assert!(msg.contains("--ticket [REDACTED]"), "{msg}");
    s.close_and_wait(Duration::from_secs(30));
}

fn scrub(e: &Env) -> Value {
    let o = cli(&[
        "audit",
        "scrub",
        "--config",
        e.config.to_str().unwrap(),
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn audit_scrub_re_redacts_rows_stored_before_once_and_records_that_it_ran() {
    // Rows written without the built-in patterns, as an older CodeSpace stored them.
    let e = env(json!({"defaults": false}));
    let mut s = serve(&e);
    for (line, _, _) in CASES {
        refused_message(&mut s, line);
    }
    s.close_and_wait(Duration::from_secs(30));
    let before = export(&e);
    for (_, secret, _) in CASES {
        assert!(
            before.contains(secret),
            "not stored to begin with: {secret}"
        );
    }
    // Today's patterns: the defaults back on.
    write_config(&e, json!({}));
    let first = scrub(&e);
    assert!(
        first["changed"].as_u64().unwrap() >= CASES.len() as u64,
        "{first}"
    );
    assert!(
        first["tables"]["decisions"]["changed"].as_u64().unwrap() >= CASES.len() as u64,
        "{first}"
    );
    let after = export(&e);
    for (_, secret, kept) in CASES {
        assert!(!after.contains(secret), "the export still holds {secret}");
        assert!(!store_holds(&e, secret), "the store still holds {secret}");
        assert!(after.contains(kept), "the scrub lost `{kept}`");
    }
    // Idempotent: nothing left to change.
    let second = scrub(&e);
    assert_eq!(second["changed"], 0, "{second}");
    assert_eq!(
        second["examined"].as_u64(),
        first["examined"].as_u64().map(|n| n + 1)
    );
    // Each run is an event.
    let events = cli(&[
        "audit",
        "--config",
        e.config.to_str().unwrap(),
        "--events",
        "--json",
    ]);
    let runs = String::from_utf8_lossy(&events.stdout)
        .lines()
        .filter(|l| l.contains("audit_scrub"))
        .count();
    assert_eq!(runs, 2, "{}", String::from_utf8_lossy(&events.stdout));
}
