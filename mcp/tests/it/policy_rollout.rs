//! Rolling out a policy change safely, end to end on the binary: a real `codespace serve`
//! records decisions (redacted, replayable, with the shadow set's answer), then `audit`
//! filters and exports them, `policy explain --decision-id` re-decides one, `policy diff`
//! replays them under candidate sets (exit 0 / 2 / 3), and `audit --follow` tails new rows.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::stdio_common;

use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use stdio_common::{BIN, StdioServer};

const TOKEN: &str = "ghp_abcdefghijklmnopqrstuvwxyz0123456789";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn cli(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_remove("CODESPACE_CONFIG")
        .output()
        .unwrap()
}

fn json_lines(o: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        let dest = to.join(p.file_name().unwrap());
        if p.is_dir() {
            copy_dir(&p, &dest);
        } else {
            std::fs::copy(&p, &dest).unwrap();
        }
    }
}

struct Env {
    _dir: tempfile::TempDir,
    root: PathBuf,
    config: String,
}

impl Env {
    fn path(&self, rel: &str) -> String {
        self.root.join(rel).to_str().unwrap().to_string()
    }
}

/// The shipped policies and tests in `<tmp>/policies`, the schema in `<tmp>/schema`, a
/// workspace `w` (workspace-write) and `r` (read-only) on `<tmp>/ws`, the store in
/// `<tmp>/audit.db`; `shadow` files go under `policies/shadow/`.
fn env(shadow: &[(&str, &str)]) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    copy_dir(&repo().join("policies"), &root.join("policies"));
    std::fs::remove_dir_all(root.join("policies/examples")).unwrap();
    copy_dir(&repo().join("schema"), &root.join("schema"));
    for (name, text) in shadow {
        let p = root.join("policies/shadow").join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    let ws = root.join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("a.txt"), "alpha\n").unwrap();
    std::fs::write(ws.join(".env"), "SECRET=1\n").unwrap();
    let config = root.join("codespace.json");
    std::fs::write(
        &config,
        serde_json::to_string_pretty(&json!({
            "policies": root.join("policies"),
            "schema": root.join("schema/codespace.cedarschema"),
            "store": root.join("audit.db"),
            "workspaces": {
                "w": {"root": ws, "profile": "workspace-write"},
                "r": {"root": ws, "profile": "read-only"},
            },
        }))
        .unwrap(),
    )
    .unwrap();
    Env {
        config: config.to_str().unwrap().to_string(),
        root,
        _dir: dir,
    }
}

const SHADOW_NO_TXT: &str = r#"// Candidate guardrail under evaluation: no reads of .txt files.
@id("base.forbid.txt-reads")
@reason("text files are being phased out")
forbid (principal, action == CodeSpace::Action::"read", resource)
when { resource.ext == "txt" };
"#;

/// Serves `e`, makes the calls every test below inspects, and returns the decision id of
/// the denied `.env` read.
fn record_calls(e: &Env) -> String {
    let mut s = StdioServer::serve()
        .arg("--config")
        .arg(&e.config)
        .env("HOME", &e.root)
        .stderr_file(e.root.join("stderr.log"))
        .spawn();
    s.initialize("rollout-test");
    s.tool_ok("read", json!({"workspace_id": "w", "path": "a.txt"}));
    let env_err = s.tool_err("read", json!({"workspace_id": "w", "path": ".env"}));
    let bearer = format!("Authorization: Bearer {TOKEN}");
    let curl = s.tool_err(
        "exec_command",
        json!({"workspace_id": "r", "command": ["curl", "-H", bearer, "https://example.invalid"]}),
    );
    assert_eq!(curl["code"], "UNAUTHORIZED", "{curl}");
    let msg = curl["message"].as_str().unwrap();
    assert!(
        !msg.contains(TOKEN),
        "the error text echoes the token: {msg}"
    );
    assert!(
        msg.contains("curl -H 'Authorization: Bearer [REDACTED]'"),
        "{msg}"
    );
    s.tool_ok("find", json!({"workspace_id": "w"}));
    // A clean exit drains the audit writer's queue (a kill could lose the last ~50 ms of reads).
    s.close_and_wait(std::time::Duration::from_secs(30));
    env_err["decision_id"].as_str().unwrap().to_string()
}

#[test]
fn audit_rows_are_redacted_replayable_and_filterable() {
    let e = env(&[]);
    let env_dec = record_calls(&e);
    // Nothing stored holds the token.
    for suffix in ["", "-wal"] {
        if let Ok(bytes) = std::fs::read(e.path(&format!("audit.db{suffix}"))) {
            assert!(
                !bytes.windows(TOKEN.len()).any(|w| w == TOKEN.as_bytes()),
                "audit.db{suffix} holds the token"
            );
        }
    }
    let all = json_lines(&cli(&["audit", "--config", &e.config, "--json"]));
    assert!(!all.is_empty());
    for row in &all {
        for field in [
            "decision_id",
            "time",
            "at_ms",
            "workspace",
            "profile",
            "tool",
            "action",
            "subject",
            "path",
            "kind",
            "client",
            "transport",
            "decision",
            "reason",
            "policy_ids",
            "request",
            "shadow_decision",
            "capabilities_denied",
        ] {
            assert!(row.get(field).is_some(), "{field} missing in {row}");
        }
        assert_eq!(row["client"], "local");
        assert!(row["request"]["request"]["context"].is_object(), "{row}");
    }
    // The read-only curl: one row, its two capability default denies collapsed into it.
    let curl: Vec<&Value> = all.iter().filter(|r| r["workspace"] == "r").collect();
    assert_eq!(curl.len(), 1, "{curl:?}");
    let mut denied: Vec<&str> = curl[0]["capabilities_denied"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    denied.sort_unstable();
    assert_eq!(denied, ["process_network", "process_write"]);
    assert_eq!(
        curl[0]["reason"],
        "no policy permits this for profile read-only"
    );
    assert!(
        curl[0]["request"]["request"]["context"]["command"]["line"]
            .as_str()
            .unwrap()
            .contains("Bearer [REDACTED]"),
        "{}",
        curl[0]
    );
    // --all-rows shows what is stored (for replay): the capability rows are there.
    let raw = json_lines(&cli(&[
        "audit",
        "--config",
        &e.config,
        "--json",
        "--all-rows",
        "--workspace",
        "r",
    ]));
    assert_eq!(raw.len(), 3, "{raw:?}");

    // Filters.
    let by_policy = json_lines(&cli(&[
        "audit",
        "--config",
        &e.config,
        "--json",
        "--policy",
        "base.forbid.secret-files",
    ]));
    assert!(
        by_policy.iter().all(|r| r["path"] == ".env"),
        "{by_policy:?}"
    );
    assert_eq!(
        by_policy.len(),
        2,
        "the read and the find-withheld row: {by_policy:?}"
    );
    let reason = by_policy[0]["reason"].as_str().unwrap();
    assert!(
        reason
            .starts_with("forbidden by base.forbid.secret-files: files that usually hold secrets"),
        "{reason}"
    );
    assert!(
        json_lines(&cli(&[
            "audit", "--config", &e.config, "--json", "--client", "nobody"
        ]))
        .is_empty()
    );
    let denies = json_lines(&cli(&[
        "audit",
        "--config",
        &e.config,
        "--json",
        "--decision",
        "deny",
        "--tool",
        "read",
    ]));
    assert_eq!(denies.len(), 1, "{denies:?}");
    let one = json_lines(&cli(&[
        "audit",
        "--config",
        &e.config,
        "--json",
        "--decision-id",
        &env_dec,
    ]));
    assert_eq!(one.len(), 1);

    // explain --decision-id re-decides the logged request under the set in force.
    let o = cli(&[
        "policy",
        "explain",
        "--config",
        &e.config,
        "--decision-id",
        &env_dec,
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(
        out.contains("recorded deny by base.forbid.secret-files"),
        "{out}"
    );
    assert!(out.contains(": unchanged"), "{out}");
    assert!(
        out.contains("the answer is unchanged under the set in force"),
        "{out}"
    );
}

#[test]
fn policy_diff_replays_recorded_requests_with_gating_exit_codes() {
    let e = env(&[]);
    record_calls(&e);
    let policies = e.path("policies");
    // The set against itself: no flip.
    let o = cli(&[
        "policy",
        "diff",
        "--config",
        &e.config,
        "--against",
        &policies,
        "--tests",
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("0 widening, 0 narrowing flip(s)"), "{out}");

    // A candidate that only narrows: exit 2.
    let narrow = e.root.join("narrow");
    copy_dir(&e.root.join("policies"), &narrow);
    std::fs::write(narrow.join("base/no-txt.cedar"), SHADOW_NO_TXT).unwrap();
    let o = cli(&[
        "policy",
        "diff",
        "--config",
        &e.config,
        "--against",
        narrow.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["widening"], 0);
    let g = &v["groups"][0];
    assert_eq!(g["direction"], "narrowing");
    assert_eq!(g["tool"], "read");
    assert!(
        g["policies"]
            .as_array()
            .unwrap()
            .contains(&json!("+base.forbid.txt-reads")),
        "{g}"
    );
    assert_eq!(g["examples"][0]["subject"], "a.txt");

    // A candidate that lets read-only run curl: a widening, exit 3.
    let wide = e.root.join("wide");
    copy_dir(&e.root.join("policies"), &wide);
    std::fs::write(
        wide.join("profiles/curl.cedar"),
        "@id(\"read-only.permit.curl\")\npermit (principal in CodeSpace::PermissionProfile::\"read-only\", action == CodeSpace::Action::\"exec_command\", resource)\nwhen { context has command && context.command.program == \"curl\" };\n",
    )
    .unwrap();
    let o = cli(&[
        "policy",
        "diff",
        "--config",
        &e.config,
        "--against",
        wide.to_str().unwrap(),
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(3), "{out}");
    assert!(out.contains("WIDENING"), "{out}");
    assert!(out.contains("+read-only.permit.curl"), "{out}");
    assert!(out.contains("Bearer [REDACTED]"), "{out}");
    assert!(!out.contains(TOKEN), "{out}");
    // A broken candidate is an error, exit 1.
    std::fs::write(wide.join("profiles/broken.cedar"), "permit (").unwrap();
    let o = cli(&[
        "policy",
        "diff",
        "--config",
        &e.config,
        "--against",
        wide.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn shadow_policies_are_logged_beside_the_live_set_and_never_enforced() {
    let e = env(&[("base/no-txt.cedar", SHADOW_NO_TXT)]);
    record_calls(&e); // reading a.txt succeeded: the shadow forbid is not enforced
    let flips = json_lines(&cli(&[
        "audit",
        "--config",
        &e.config,
        "--json",
        "--shadow-flips",
    ]));
    assert_eq!(flips.len(), 1, "{flips:?}");
    assert_eq!(flips[0]["path"], "a.txt");
    assert_eq!(flips[0]["decision"], "allow");
    assert_eq!(flips[0]["shadow_decision"], "deny");
    assert_eq!(
        flips[0]["shadow_policy_ids"],
        json!(["base.forbid.txt-reads"])
    );
    // Every other row carries the shadow answer too, equal to the live one.
    let all = json_lines(&cli(&["audit", "--config", &e.config, "--json"]));
    assert!(
        all.iter().all(|r| r["shadow_decision"].is_string()),
        "{all:?}"
    );
    // Deploying the shadow files would only narrow: `policy diff --shadow` exits 2.
    let o = cli(&[
        "policy", "diff", "--config", &e.config, "--shadow", "--json",
    ]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["narrowing"], 1, "{v}");
    assert_eq!(v["groups"][0]["examples"][0]["subject"], "a.txt");
    // The shadow set validates with the live one.
    let o = cli(&["policy", "validate", "--config", &e.config]);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("ok: shadow set"));
}

#[test]
fn audit_follow_prints_rows_as_they_are_written() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("audit.db");
    let store = codespace_store::Store::open(&db).unwrap();
    let row = |id: &str| codespace_store::DecisionRow {
        decision_id: id.into(),
        at_ms: codespace_store::now_ms(),
        policy_set_sha256: "sha256:x".into(),
        profile: "read-only".into(),
        workspace: "w".into(),
        tool: "read".into(),
        action: "read".into(),
        subject: "a.txt".into(),
        decision: "allow".into(),
        ..Default::default()
    };
    store.insert_decisions(&[row("dec-old")]).unwrap();
    let mut child = Command::new(BIN)
        .args([
            "audit",
            "--follow",
            "--json",
            "--store",
            db.to_str().unwrap(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .env_remove("CODESPACE_CONFIG")
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(first["decision_id"], "dec-old");
    // Written after the first page was printed: it arrives as a new line.
    store.insert_decisions(&[row("dec-new")]).unwrap();
    let next: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(next["decision_id"], "dec-new");
    child.kill().unwrap();
    child.wait().unwrap();
}
