//! The web console's HTTP contract through the real binary (`codespace serve --http`): sign-in
//! with a client's token sets an HttpOnly SameSite=Strict session cookie under `/console`;
//! every page carries the strict CSP, no framing and no caching; a non-operator gets 403 and
//! no queue; a grant or deny POST without the session's CSRF token (or from another origin) is
//! refused and changes nothing; with it, the hold resolves over channel `web` with the
//! signed-in client as resolver, and the waiting agent's resume completes (or is denied); an
//! XSS payload in a held command renders inert; `codespace console` serves the pages
//! read-only.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::http_common::{Resp, call, initialize, parse_response};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const BIN: &str = env!("CARGO_BIN_EXE_codespace");
const AGENT: &str = "console-agent-token-0123456789";
const OPERATOR: &str = "console-operator-token-0123456789";
const VIEWER: &str = "console-viewer-token-0123456789";
/// A command line an attacker would like the console to run as markup.
const XSS: &str = "<script>alert('xss')</script><img src=x onerror=alert(1)>";

/// A `codespace serve --http` (or `console`) child, killed on drop.
struct Served {
    child: Child,
    addr: SocketAddr,
    config: PathBuf,
    root: PathBuf,
    _dir: Option<tempfile::TempDir>,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Writes the config: a confirm workspace `main` (commands held), clients agent/op/viewer,
/// `op` the console's operator.
fn write_config(dir: &Path) -> (PathBuf, PathBuf) {
    let root = dir.join("ws");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("notes.txt"), "one\ntwo\n").unwrap();
    let cfg = json!({
        "workspaces": {"main": {"root": root, "profile": "workspace-write", "approvals": "confirm",
                                "sandbox": "off", "secret_masking": "off"}},
        "store": dir.join("store.db"),
        "clients": {"agent": {"token": AGENT}, "op": {"token": OPERATOR}, "viewer": {"token": VIEWER}},
        "console": {"operators": ["op"]},
    });
    let path = dir.join("config.json");
    std::fs::write(&path, cfg.to_string()).unwrap();
    (path, root)
}

/// Spawns `args` and waits for the line starting with `prefix` (the address follows it).
fn spawn(args: &[&str], cfg: &Path, prefix: &str) -> (Child, SocketAddr) {
    let mut child = Command::new(BIN)
        .args(args)
        .arg("--config")
        .arg(cfg)
        .env_remove("CODESPACE_CONFIG")
        .env("CODESPACE_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line);
        }
    });
    let addr = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("start-up line");
        if let Some(rest) = line.strip_prefix(prefix) {
            let rest = rest.trim_end_matches("/mcp").trim_end_matches("/console");
            break rest.parse().unwrap();
        }
    };
    (child, addr)
}

fn serve() -> Served {
    let dir = tempfile::tempdir().unwrap();
    let (config, root) = write_config(dir.path());
    let (child, addr) = spawn(
        &["serve", "--http", "127.0.0.1:0"],
        &config,
        "codespace: serving MCP over streamable HTTP at http://",
    );
    Served {
        child,
        addr,
        config,
        root,
        _dir: Some(dir),
    }
}

/// One HTTP/1.1 request, the whole response read.
async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Resp {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if method == "POST" {
        req.push_str("Content-Type: application/x-www-form-urlencoded\r\n");
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("Connection: close\r\n\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut raw))
        .await
        .expect("response within 30 s")
        .unwrap();
    parse_response(&raw)
}

/// A form body with each value percent-encoded.
fn form(fields: &[(&str, &str)]) -> String {
    fields
        .iter()
        .map(|(k, v)| {
            let enc: String = v
                .bytes()
                .map(|b| {
                    if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                        (b as char).to_string()
                    } else {
                        format!("%{b:02X}")
                    }
                })
                .collect();
            format!("{k}={enc}")
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// Signs in with `token`: the `Cookie` header value of the session.
async fn sign_in(addr: SocketAddr, token: &str) -> String {
    let r = request(
        addr,
        "POST",
        "/console/sign-in",
        &[],
        &form(&[("token", token)]),
    )
    .await;
    assert_eq!(r.status, 303, "{r:?}");
    let set = r
        .header("set-cookie")
        .expect("a session cookie")
        .to_string();
    set.split(';').next().unwrap().trim().to_string()
}

/// The CSRF token of a signed-in page.
fn csrf_of(page: &str) -> String {
    let at = page
        .find("name=\"csrf\" value=\"")
        .unwrap_or_else(|| panic!("no csrf field in {page}"));
    let rest = &page[at + "name=\"csrf\" value=\"".len()..];
    rest[..rest.find('"').unwrap()].to_string()
}

fn assert_page_headers(r: &Resp) {
    let csp = r.header("content-security-policy").expect("a CSP");
    assert!(csp.contains("default-src 'none'"), "{csp}");
    assert!(csp.contains("script-src 'self'"), "{csp}");
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert_eq!(r.header("x-frame-options"), Some("DENY"));
    assert_eq!(r.header("cache-control"), Some("no-store"));
}

/// A held exec of the agent: its approval id.
async fn held_exec(addr: SocketAddr, sid: &str, id: i64, word: &str) -> String {
    let r = call(
        addr,
        Some(AGENT),
        sid,
        id,
        "exec_command",
        json!({"workspace_id": "main", "command": ["echo", word, XSS], "yield_ms": 10000}),
    )
    .await;
    let e = tool_error(&r);
    assert_eq!(e["code"], "APPROVAL_REQUIRED", "{e}");
    e["approval_id"].as_str().unwrap().to_string()
}

fn tool_error(reply: &Value) -> Value {
    let r = &reply["result"];
    assert_eq!(r["isError"], true, "{reply}");
    serde_json::from_str(r["content"][0]["text"].as_str().unwrap()).unwrap()
}

async fn resume(addr: SocketAddr, sid: &str, n: i64, id: &str) -> Value {
    call(
        addr,
        Some(AGENT),
        sid,
        n,
        "operation_resume",
        json!({"approval_id": id}),
    )
    .await
}

/// `codespace approvals show ID --json`.
fn show(cfg: &Path, id: &str) -> Value {
    let o = Command::new(BIN)
        .args(["approvals", "show", id, "--json", "--config"])
        .arg(cfg)
        .env("CODESPACE_LOG", "warn")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[tokio::test]
async fn sign_in_sets_a_strict_session_cookie_and_every_page_has_the_strict_headers() {
    let s = serve();
    let page = request(s.addr, "GET", "/console/sign-in", &[], "").await;
    assert_eq!(page.status, 200);
    assert_page_headers(&page);
    assert!(page.body.contains("name=\"token\""), "{}", page.body);
    // Signed out: every page sends to the sign-in form.
    let r = request(s.addr, "GET", "/console/approvals", &[], "").await;
    assert_eq!(r.status, 303);
    assert_eq!(r.header("location"), Some("/console/sign-in"));
    // A wrong token: no cookie.
    let bad = request(
        s.addr,
        "POST",
        "/console/sign-in",
        &[],
        &form(&[("token", "not-a-token")]),
    )
    .await;
    assert_eq!(bad.status, 401);
    assert!(bad.header("set-cookie").is_none());
    let r = request(
        s.addr,
        "POST",
        "/console/sign-in",
        &[],
        &form(&[("token", OPERATOR)]),
    )
    .await;
    assert_eq!(r.status, 303, "{r:?}");
    let set = r.header("set-cookie").unwrap();
    for flag in ["HttpOnly", "SameSite=Strict", "Path=/console"] {
        assert!(set.contains(flag), "{flag} missing: {set}");
    }
    let value = set.split(';').next().unwrap().split_once('=').unwrap().1;
    assert_eq!(value.len(), 64, "a 256-bit random id: {set}");
    let cookie = set.split(';').next().unwrap().to_string();
    for path in [
        "/console/approvals",
        "/console/decisions",
        "/console/policies",
        "/console/processes",
    ] {
        let r = request(s.addr, "GET", path, &[("Cookie", &cookie)], "").await;
        assert_eq!(r.status, 200, "{path}: {r:?}");
        assert_page_headers(&r);
        assert!(!r.body.contains("<script>"), "no inline script on {path}");
    }
    // The assets come from the binary.
    let js = request(s.addr, "GET", "/console/assets/console.js", &[], "").await;
    assert_eq!(js.status, 200);
    assert!(
        js.header("content-type")
            .unwrap()
            .starts_with("text/javascript")
    );
    // A forged session id is no session.
    let r = request(
        s.addr,
        "GET",
        "/console/approvals",
        &[("Cookie", &format!("codespace_console={}", "0".repeat(64)))],
        "",
    )
    .await;
    assert_eq!(r.status, 303);
    // Sign-out needs the CSRF token and ends the session.
    let page = request(
        s.addr,
        "GET",
        "/console/approvals",
        &[("Cookie", &cookie)],
        "",
    )
    .await;
    let csrf = csrf_of(&page.body);
    let r = request(
        s.addr,
        "POST",
        "/console/sign-out",
        &[("Cookie", &cookie)],
        "",
    )
    .await;
    assert_eq!(r.status, 403, "{r:?}");
    let r = request(
        s.addr,
        "POST",
        "/console/sign-out",
        &[("Cookie", &cookie)],
        &form(&[("csrf", &csrf)]),
    )
    .await;
    assert_eq!(r.status, 303);
    let r = request(
        s.addr,
        "GET",
        "/console/approvals",
        &[("Cookie", &cookie)],
        "",
    )
    .await;
    assert_eq!(r.status, 303, "the session ended");
}

#[tokio::test]
async fn a_grant_needs_the_csrf_token_and_completes_the_waiting_agents_call_over_channel_web() {
    let s = serve();
    let agent = initialize(s.addr, Some(AGENT)).await;
    let id = held_exec(s.addr, &agent, 2, "granted-from-the-web").await;
    // The agent waits: its resume is still held.
    let r = resume(s.addr, &agent, 3, &id).await;
    assert_eq!(tool_error(&r)["code"], "APPROVAL_REQUIRED", "{r}");

    let cookie = sign_in(s.addr, OPERATOR).await;
    let page = request(
        s.addr,
        "GET",
        "/console/approvals",
        &[("Cookie", &cookie)],
        "",
    )
    .await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains(&id), "the hold is queued: {}", page.body);
    assert!(
        page.body.contains("http-equiv=\"refresh\""),
        "the queue reloads itself"
    );
    // The attacker's command line is text, not markup.
    assert!(!page.body.contains("<script>alert"), "{}", page.body);
    assert!(!page.body.contains("<img src=x"), "{}", page.body);
    assert!(page.body.contains("&lt;script&gt;alert"), "{}", page.body);
    let csrf = csrf_of(&page.body);
    let path = format!("/console/approvals/{id}");

    // Without the token, with a wrong one, or from another origin: refused, nothing changes.
    for (headers, body) in [
        (
            vec![("Cookie", cookie.as_str())],
            form(&[("decision", "grant")]),
        ),
        (
            vec![("Cookie", cookie.as_str())],
            form(&[("decision", "grant"), ("csrf", &"f".repeat(64))]),
        ),
        (
            vec![
                ("Cookie", cookie.as_str()),
                ("Origin", "http://evil.example"),
            ],
            form(&[("decision", "grant"), ("csrf", &csrf)]),
        ),
    ] {
        let r = request(s.addr, "POST", &path, &headers, &body).await;
        assert_eq!(r.status, 403, "{headers:?}: {r:?}");
    }
    assert_eq!(show(&s.config, &id)["state"], "pending");
    let r = resume(s.addr, &agent, 4, &id).await;
    assert_eq!(tool_error(&r)["code"], "APPROVAL_REQUIRED", "{r}");

    // With it: granted over channel web by the signed-in client, and the agent's call runs.
    let r = request(
        s.addr,
        "POST",
        &path,
        &[
            ("Cookie", &cookie),
            ("Origin", &format!("http://{}", s.addr)),
        ],
        &form(&[("decision", "grant"), ("csrf", &csrf)]),
    )
    .await;
    assert_eq!(r.status, 303, "{r:?}");
    let held = show(&s.config, &id);
    assert_eq!(held["state"], "granted", "{held}");
    assert_eq!(held["channel"], "web", "{held}");
    assert_eq!(held["resolved_by"], "op", "{held}");
    let done = resume(s.addr, &agent, 5, &id).await;
    let out = &done["result"]["structuredContent"]["exec_command"];
    assert_eq!(out["state"], "exited", "{done}");
    assert!(
        out["chunk"]
            .as_str()
            .unwrap()
            .contains("granted-from-the-web"),
        "{done}"
    );
    let page = request(
        s.addr,
        "GET",
        "/console/approvals",
        &[("Cookie", &cookie)],
        "",
    )
    .await;
    assert!(!page.body.contains(&id), "the queue no longer lists it");
    // A held patch shows as a diff with the versions it was asked against.
    let r = call(
        s.addr,
        Some(AGENT),
        &agent,
        6,
        "apply_patch",
        json!({"workspace_id": "main",
               "patch": "*** Begin Patch\n*** Update File: notes.txt\n one\n-two\n+<b>two</b>\n*** End Patch\n"}),
    )
    .await;
    let patch_id = tool_error(&r)["approval_id"].as_str().unwrap().to_string();
    let page = request(
        s.addr,
        "GET",
        "/console/approvals",
        &[("Cookie", &cookie)],
        "",
    )
    .await;
    assert!(page.body.contains(&patch_id), "{}", page.body);
    assert!(
        page.body.contains("<span class=\"del\">-two</span>"),
        "{}",
        page.body
    );
    assert!(
        page.body
            .contains("<span class=\"add\">+&lt;b&gt;two&lt;/b&gt;</span>"),
        "{}",
        page.body
    );
    let versions = &page.body[page.body.find("class=\"versions\"").expect("versions")..];
    assert!(versions.contains("notes.txt"), "{}", page.body);
    // Granted, it applies; the operations page links its ledger diff.
    let csrf = csrf_of(&page.body);
    let r = request(
        s.addr,
        "POST",
        &format!("/console/approvals/{patch_id}"),
        &[("Cookie", &cookie)],
        &form(&[("decision", "grant"), ("csrf", &csrf)]),
    )
    .await;
    assert_eq!(r.status, 303, "{r:?}");
    let done = resume(s.addr, &agent, 7, &patch_id).await;
    assert_eq!(
        done["result"]["structuredContent"]["apply_patch"]["status"], "applied",
        "{done}"
    );
    let ops = request(
        s.addr,
        "GET",
        "/console/processes",
        &[("Cookie", &cookie)],
        "",
    )
    .await;
    assert_eq!(ops.status, 200);
    let at = ops
        .body
        .find("href=\"/console/operations/")
        .expect("an operation link");
    let href = &ops.body[at + "href=\"".len()..];
    let href = &href[..href.find('"').unwrap()];
    let op = request(s.addr, "GET", href, &[("Cookie", &cookie)], "").await;
    assert_eq!(op.status, 200, "{op:?}");
    assert!(op.body.contains("+++ b/notes.txt"), "{}", op.body);
    assert!(
        op.body
            .contains("<span class=\"add\">+&lt;b&gt;two&lt;/b&gt;</span>"),
        "{}",
        op.body
    );
    // The grant is an audited decision over channel web.
    let d = request(
        s.addr,
        "GET",
        "/console/decisions?tool=approval_resolve",
        &[("Cookie", &cookie)],
        "",
    )
    .await;
    assert!(
        d.body.contains("workspace-write.permit.approval-answer"),
        "{}",
        d.body
    );
    // The hold itself is on the timeline (its `confirm` decision), filterable as `hold`.
    let d = request(
        s.addr,
        "GET",
        "/console/decisions?result=hold&tool=exec_command",
        &[("Cookie", &cookie)],
        "",
    )
    .await;
    assert!(d.body.contains("<tr class=\"hold\">"), "{}", d.body);
    assert!(
        d.body.contains("base.confirm.workspace-switch"),
        "{}",
        d.body
    );
    assert!(!d.body.contains("<tr class=\"allow\">"), "{}", d.body);
    let _ = &s.root;
}

#[tokio::test]
async fn a_deny_from_the_web_refuses_the_waiting_agents_call() {
    let s = serve();
    let agent = initialize(s.addr, Some(AGENT)).await;
    let id = held_exec(s.addr, &agent, 2, "never-runs").await;
    let cookie = sign_in(s.addr, OPERATOR).await;
    let page = request(
        s.addr,
        "GET",
        "/console/approvals",
        &[("Cookie", &cookie)],
        "",
    )
    .await;
    let csrf = csrf_of(&page.body);
    let r = request(
        s.addr,
        "POST",
        &format!("/console/approvals/{id}"),
        &[("Cookie", &cookie)],
        &form(&[("decision", "deny"), ("csrf", &csrf)]),
    )
    .await;
    assert_eq!(r.status, 303, "{r:?}");
    let held = show(&s.config, &id);
    assert_eq!(held["state"], "denied", "{held}");
    assert_eq!(held["channel"], "web", "{held}");
    // A denied hold never runs: its resume is refused as denied.
    let r = resume(s.addr, &agent, 3, &id).await;
    let e = tool_error(&r);
    assert_eq!(e["code"], "APPROVAL_CONFLICT", "{r}");
    assert!(e["message"].as_str().unwrap().contains("denied"), "{r}");
}

#[tokio::test]
async fn a_non_operator_sees_no_queue_and_cannot_resolve() {
    let s = serve();
    let agent = initialize(s.addr, Some(AGENT)).await;
    let id = held_exec(s.addr, &agent, 2, "viewer").await;
    let cookie = sign_in(s.addr, VIEWER).await;
    for path in [
        "/console/approvals",
        "/console/decisions",
        "/console/policies",
        "/console/processes",
    ] {
        let r = request(s.addr, "GET", path, &[("Cookie", &cookie)], "").await;
        assert_eq!(r.status, 403, "{path}");
        assert!(!r.body.contains(&id), "{path}: {}", r.body);
        assert_page_headers(&r);
    }
    // Its own session's CSRF token does not make it an operator.
    let page = request(
        s.addr,
        "GET",
        "/console/approvals",
        &[("Cookie", &cookie)],
        "",
    )
    .await;
    let csrf = csrf_of(&page.body);
    let r = request(
        s.addr,
        "POST",
        &format!("/console/approvals/{id}"),
        &[("Cookie", &cookie)],
        &form(&[("decision", "grant"), ("csrf", &csrf)]),
    )
    .await;
    assert_eq!(r.status, 403);
    assert_eq!(show(&s.config, &id)["state"], "pending");
}

#[tokio::test]
async fn the_read_only_console_serves_the_store_without_a_server_and_never_grants() {
    let s = serve();
    let agent = initialize(s.addr, Some(AGENT)).await;
    let id = held_exec(s.addr, &agent, 2, "read-only").await;
    let (child, addr) = spawn(
        &["console", "--listen", "127.0.0.1:0"],
        &s.config,
        "codespace: serving the read-only console at http://",
    );
    let ro = Served {
        child,
        addr,
        config: s.config.clone(),
        root: s.root.clone(),
        _dir: None,
    };
    let cookie = sign_in(ro.addr, OPERATOR).await;
    let page = request(
        ro.addr,
        "GET",
        "/console/approvals",
        &[("Cookie", &cookie)],
        "",
    )
    .await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains(&id), "{}", page.body);
    assert!(page.body.contains("read-only"));
    assert!(!page.body.contains("value=\"grant\""), "no grant button");
    let csrf = csrf_of(&page.body);
    let r = request(
        ro.addr,
        "POST",
        &format!("/console/approvals/{id}"),
        &[("Cookie", &cookie)],
        &form(&[("decision", "grant"), ("csrf", &csrf)]),
    )
    .await;
    assert_eq!(r.status, 405);
    assert_eq!(show(&s.config, &id)["state"], "pending");
    for path in [
        "/console/decisions",
        "/console/policies",
        "/console/processes",
    ] {
        let r = request(ro.addr, "GET", path, &[("Cookie", &cookie)], "").await;
        assert_eq!(r.status, 200, "{path}");
    }
}

#[tokio::test]
async fn an_operations_page_keeps_a_withheld_path_withheld() {
    const MARK: &str = "console-private-mark-7d1e";
    let dir = tempfile::tempdir().unwrap();
    // An operator policy: agents may write `private/` but never read it, so the ledger keeps
    // no content of it, and the console shows none.
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let policies = dir.path().join("policies");
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
    std::fs::create_dir_all(dir.path().join("schema")).unwrap();
    let schema = dir.path().join("schema/codespace.cedarschema");
    std::fs::copy(src.join("schema/codespace.cedarschema"), &schema).unwrap();
    let root = dir.path().join("ws");
    std::fs::create_dir_all(&root).unwrap();
    let cfg = dir.path().join("config.json");
    std::fs::write(
        &cfg,
        json!({
            "workspaces": {"main": {"root": root, "profile": "workspace-write"}},
            "store": dir.path().join("store.db"),
            "policies": policies, "schema": schema,
            "clients": {"agent": {"token": AGENT}, "op": {"token": OPERATOR}},
            "console": {"operators": ["op"]},
        })
        .to_string(),
    )
    .unwrap();
    let (child, addr) = spawn(
        &["serve", "--http", "127.0.0.1:0"],
        &cfg,
        "codespace: serving MCP over streamable HTTP at http://",
    );
    let s = Served {
        child,
        addr,
        config: cfg,
        root,
        _dir: Some(dir),
    };
    let agent = initialize(s.addr, Some(AGENT)).await;
    let r = call(
        s.addr,
        Some(AGENT),
        &agent,
        2,
        "apply_patch",
        json!({"workspace_id": "main", "patch": format!(
            "*** Begin Patch\n*** Add File: private/notes.txt\n+{MARK}\n\
             *** Add File: visible.txt\n+hello\n*** End Patch\n")}),
    )
    .await;
    let op = r["result"]["structuredContent"]["operation_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"))
        .to_string();
    let cookie = sign_in(s.addr, OPERATOR).await;
    let page = request(
        s.addr,
        "GET",
        &format!("/console/operations/{op}"),
        &[("Cookie", &cookie)],
        "",
    )
    .await;
    assert_eq!(page.status, 200, "{page:?}");
    assert!(
        page.body.contains("withheld: private/notes.txt"),
        "{}",
        page.body
    );
    assert!(page.body.contains("+hello"), "{}", page.body);
    assert!(!page.body.contains(MARK), "{}", page.body);
    let _ = (&s.config, &s.root);
}
