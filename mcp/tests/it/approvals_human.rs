//! What the human approving a hold sees and who may answer it, through the real binary (and the
//! real HTTP transport for several clients): the approvals CLI and `codespace audit` escape every
//! control character and show the held command's cwd, tty, background and env (values redacted)
//! with marked cuts; a long-polling `exec_command` is asked in-band over elicitation (an rmcp
//! client); over the tool no client grants its own hold, another client gets APPROVAL_NOT_FOUND
//! unless a policy names it as reviewer, and the operator's CLI grants.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::http_common;
use crate::stdio_common;

use rmcp::model::{
    CallToolRequestParams, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction,
    ElicitationCapability, FormElicitationCapability,
};
use rmcp::service::RequestContext;
use rmcp::{ClientHandler, ErrorData, RoleClient, ServiceExt};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use stdio_common::{BIN, StdioServer};

/// A secret the redactor knows (a GitHub token shape).
const TOKEN: &str = "ghp_abcdefghijklmnopqrstuvwxyz0123456789";

/// A confirm workspace `ws` (with `sub/`), unsandboxed so the held command runs anywhere, its
/// store and config in `dir`; returns the config path.
fn confirm_config(dir: &Path) -> PathBuf {
    let ws = dir.join("ws");
    std::fs::create_dir_all(ws.join("sub")).unwrap();
    let cfg = json!({
        "store": dir.join("store.db"),
        "workspaces": {"w": {"root": ws, "profile": "workspace-write", "approvals": "confirm",
                             "sandbox": "off", "secret_masking": "off"}},
    });
    let path = dir.join("config.json");
    std::fs::write(&path, cfg.to_string()).unwrap();
    path
}

/// `codespace <args> --config cfg`: (exit ok, stdout, stderr).
fn cli(cfg: &Path, args: &[&str]) -> (bool, String, String) {
    let o = Command::new(BIN)
        .args(args)
        .arg("--config")
        .arg(cfg)
        .env("USER", "alice")
        .env("CODESPACE_LOG", "warn")
        .output()
        .unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// No C0 (but the line break), DEL or C1 control in `text`.
fn assert_no_controls(what: &str, text: &str) {
    let bad: Vec<char> = text
        .chars()
        .filter(|c| *c != '\n' && c.is_control())
        .collect();
    assert!(
        bad.is_empty(),
        "{what} prints raw controls {bad:?}:\n{text}"
    );
}

/// A held command whose argv and env would rewrite an operator's terminal: a line erase, an
/// OSC title, a CSI (C1) and a word long enough that the summary is cut.
fn nasty_exec(yield_ms: u64) -> Value {
    json!({
        "workspace_id": "w",
        "command": ["sh", "-c", "echo in-band-$X; pwd", "sh",
                    "\u{1b}[2K\rrm -rf ~ \u{1b}]0;title\u{07}\u{9b}1A\u{7f}", "y".repeat(600)],
        "env": {"X": "ok", "GITHUB_TOKEN": TOKEN, "APP_BANNER": "|\u{1b}[31m evil"},
        "cwd": "sub",
        "yield_ms": yield_ms,
    })
}

#[test]
fn approvals_show_list_and_audit_escape_controls_and_show_the_whole_held_call() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = confirm_config(dir.path());
    let mut s = StdioServer::serve()
        .arg("--config")
        .arg(&cfg)
        .cwd(dir.path())
        .stderr_file(dir.path().join("stderr.log"))
        .spawn();
    s.initialize("no-elicitation");
    let held = s.tool_err("exec_command", nasty_exec(0));
    assert_eq!(held["code"], "APPROVAL_REQUIRED", "{held}");
    let id = held["approval_id"].as_str().unwrap().to_string();

    let (ok, show, err) = cli(&cfg, &["approvals", "show", &id]);
    assert!(ok, "{err}");
    assert_no_controls("approvals show", &show);
    assert!(
        show.contains("\\x1b[2K\\rrm -rf ~ \\x1b]0;title\\x07\\x9b1A\\x7f"),
        "{show}"
    );
    // The summary's cut is marked; the command line is shown whole.
    assert!(show.contains("… [cut: "), "{show}");
    assert!(show.contains(&"y".repeat(600)), "{show}");
    for want in [
        "cwd           sub",
        "tty           false",
        "background    false",
        "env           X=ok",
        "env           GITHUB_TOKEN=[REDACTED]",
        "env           APP_BANNER=|\\x1b[31m evil",
        "yield_ms      0",
    ] {
        assert!(show.contains(want), "no `{want}` in:\n{show}");
    }
    assert!(!show.contains(TOKEN), "{show}");

    let (ok, json_show, err) = cli(&cfg, &["approvals", "show", &id, "--json"]);
    assert!(ok, "{err}");
    assert_no_controls("approvals show --json", &json_show);
    let v: Value = serde_json::from_str(&json_show).unwrap();
    assert_eq!(v["held"]["cwd"], "sub");
    assert_eq!(v["held"]["background"], false);
    assert_eq!(v["held"]["env"]["GITHUB_TOKEN"], "[REDACTED]");
    assert_eq!(v["held"]["env"]["APP_BANNER"], "|\u{1b}[31m evil");

    for args in [
        vec!["approvals", "list"],
        vec!["approvals", "list", "--json"],
        vec!["audit"],
        vec!["audit", "--json"],
        vec!["audit", "--events"],
    ] {
        let (ok, out, err) = cli(&cfg, &args);
        assert!(ok, "{args:?}: {err}");
        assert_no_controls(&args.join(" "), &out);
        if args[0] == "approvals" {
            assert!(out.contains(&id), "{args:?}: {out}");
        }
    }
    let (_, table, _) = cli(&cfg, &["audit"]);
    assert!(
        table.contains("… [cut: "),
        "the audit subject cut is unmarked:\n{table}"
    );
}

/// A client with form elicitation that records each question and grants.
#[derive(Clone, Default)]
struct Granting {
    asked: Arc<Mutex<Vec<String>>>,
}

impl ClientHandler for Granting {
    fn get_info(&self) -> ClientConfig {
        let mut info = ClientConfig::default();
        info.capabilities.elicitation =
            Some(ElicitationCapability::new().with_form(FormElicitationCapability::new()));
        info
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        if let ElicitRequestParams::FormElicitationParams { message, .. } = request {
            self.asked.lock().unwrap().push(message);
        }
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(json!({"decision": "grant"})))
    }
}

#[tokio::test]
async fn a_long_polling_exec_command_is_asked_in_band_and_runs_once_granted() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = confirm_config(dir.path());
    let mut child = tokio::process::Command::new(BIN)
        .arg("serve")
        .arg("--config")
        .arg(&cfg)
        .current_dir(dir.path())
        .env("CODESPACE_LOG", "warn")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(dir.path().join("stderr.log")).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let transport = (child.stdout.take().unwrap(), child.stdin.take().unwrap());
    let human = Granting::default();
    let client = human.clone().serve(transport).await.unwrap();
    let Value::Object(args) = nasty_exec(10_000) else {
        unreachable!()
    };
    let r = client
        .call_tool(CallToolRequestParams::new("exec_command").with_arguments(args))
        .await
        .unwrap();
    let asked = human.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1, "asked {asked:?}; result {r:?}");
    assert_ne!(r.is_error, Some(true), "{r:?}");
    let out = r.structured_content.clone().unwrap();
    assert!(
        out["process_id"].as_str().unwrap().starts_with("proc-"),
        "{out}"
    );
    let chunk = out["chunk"].as_str().unwrap_or_default();
    assert!(chunk.contains("in-band-ok"), "{out}");
    assert!(chunk.contains("/ws/sub"), "{out}");
    // The question: escaped, the cut marked, and where and with what it runs.
    let q = &asked[0];
    assert_no_controls("the elicitation message", q);
    assert!(
        q.contains("\\x1b[2K\\rrm -rf ~ \\x1b]0;title\\x07\\x9b1A\\x7f"),
        "{q}"
    );
    assert!(q.contains("… [cut: "), "{q}");
    for want in [
        "cwd: sub",
        "tty: false",
        "background: false",
        "env: X=ok",
        "env: GITHUB_TOKEN=[REDACTED]",
    ] {
        assert!(q.contains(want), "no `{want}` in: {q}");
    }
    assert!(!q.contains(TOKEN), "{q}");
    client.cancel().await.unwrap();
}

const AGENT: &str = "tok-agent-0123456789";
const OTHER: &str = "tok-other-0123456789";
const REVIEWER: &str = "tok-review-0123456789";

/// The error body of a failed tool call reply.
fn tool_error(reply: &Value) -> Value {
    let r = &reply["result"];
    assert_eq!(r["isError"], true, "{reply}");
    serde_json::from_str(r["content"][0]["text"].as_str().unwrap()).unwrap()
}

/// A hold on a patch asked by the agent over HTTP: its id.
async fn agent_hold(s: &http_common::TestServer, sid: &str) -> String {
    let r = http_common::call(
        s.addr,
        Some(AGENT),
        sid,
        2,
        "approval_create",
        json!({"tool": "apply_patch", "arguments": {"workspace_id": "main",
               "patch": "*** Begin Patch\n*** Add File: held.txt\n+x\n*** End Patch\n"}}),
    )
    .await;
    assert_eq!(r["result"]["structuredContent"]["state"], "pending", "{r}");
    r["result"]["structuredContent"]["approval_id"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn over_the_tool_no_client_grants_unless_named_reviewer_and_the_cli_grants() {
    let s = http_common::Setup {
        clients: vec![("agent", AGENT), ("other", OTHER)],
        ..http_common::Setup::default()
    }
    .start()
    .await;
    let agent = http_common::initialize(s.addr, Some(AGENT)).await;
    let other = http_common::initialize(s.addr, Some(OTHER)).await;
    let id = agent_hold(&s, &agent).await;
    let resolve = |d: &str| json!({"approval_id": id, "decision": d});
    // Its own hold: refused by the named base rule.
    let own = http_common::call(
        s.addr,
        Some(AGENT),
        &agent,
        3,
        "approval_resolve",
        resolve("grant"),
    )
    .await;
    let own = tool_error(&own);
    assert_eq!(own["code"], "UNAUTHORIZED", "{own}");
    assert_eq!(own["policy_ids"], json!(["base.forbid.self-approval"]));
    // Another client that knows the id: no such hold for it, grant or deny.
    for (n, d) in [(4, "grant"), (5, "deny")] {
        let r = http_common::call(
            s.addr,
            Some(OTHER),
            &other,
            n,
            "approval_resolve",
            resolve(d),
        )
        .await;
        assert_eq!(tool_error(&r)["code"], "APPROVAL_NOT_FOUND", "{d}: {r}");
    }
    let pending = http_common::call(
        s.addr,
        Some(AGENT),
        &agent,
        6,
        "operation_resume",
        json!({"approval_id": id}),
    )
    .await;
    assert_eq!(tool_error(&pending)["code"], "APPROVAL_REQUIRED");
    // The operator's CLI grants (channel cli); the agent resumes.
    let cfg = s.store.parent().unwrap().join("config.json");
    let (ok, out, err) = cli(&cfg, &["approvals", "grant", &id]);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), format!("{id} granted"));
    let done = http_common::call(
        s.addr,
        Some(AGENT),
        &agent,
        7,
        "operation_resume",
        json!({"approval_id": id}),
    )
    .await;
    assert_eq!(
        done["result"]["structuredContent"]["apply_patch"]["status"], "applied",
        "{done}"
    );
    s.stop().await;
}

#[tokio::test]
async fn a_client_a_policy_names_as_reviewer_grants_another_clients_hold() {
    let s = http_common::Setup {
        clients: vec![("agent", AGENT), ("review-bot", REVIEWER)],
        profile_policies: vec![(
            "approval-reviewer.cedar",
            include_str!("../../../policies/examples/profiles/approval-reviewer.cedar"),
        )],
        ..http_common::Setup::default()
    }
    .start()
    .await;
    let agent = http_common::initialize(s.addr, Some(AGENT)).await;
    let reviewer = http_common::initialize(s.addr, Some(REVIEWER)).await;
    let id = agent_hold(&s, &agent).await;
    let r = http_common::call(
        s.addr,
        Some(REVIEWER),
        &reviewer,
        3,
        "approval_resolve",
        json!({"approval_id": id, "decision": "grant"}),
    )
    .await;
    assert_eq!(r["result"]["structuredContent"]["state"], "granted", "{r}");
    let done = http_common::call(
        s.addr,
        Some(AGENT),
        &agent,
        4,
        "operation_resume",
        json!({"approval_id": id}),
    )
    .await;
    assert_eq!(
        done["result"]["structuredContent"]["apply_patch"]["status"], "applied",
        "{done}"
    );
    s.stop().await;
}
