//! `network: proxy` end to end on loopback only: a local HTTP server stands in for the
//! internet, an operator policy permits its one port, and a sandboxed python3 goes through the
//! egress proxy. Other ports, this server's own listener and link-local targets are refused
//! with a 403 ErrorBody; a direct connection that ignores the proxy variables fails; every
//! connection has an audit row naming the process; `process_status.network` counts match.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::process_common;

use codespace_store::DecisionQuery;
use process_common::*;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BODY: &str = "hello through the proxy";

fn python3() -> bool {
    let found = std::process::Command::new("python3")
        .arg("-c")
        .arg("pass")
        .status()
        .is_ok_and(|s| s.success());
    codespace_test_skip::require(
        found,
        &codespace_test_skip::this_test(),
        "python3 is not installed",
    )
}

/// The shipped policies plus an operator permit for loopback `ports`.
fn policies_with_loopback_permit(dir: &Path, ports: &[u16]) -> PathBuf {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let policies = dir.join("policies");
    for sub in ["base", "profiles"] {
        std::fs::create_dir_all(policies.join(sub)).unwrap();
        for e in std::fs::read_dir(src.join("policies").join(sub)).unwrap() {
            let p = e.unwrap().path();
            std::fs::copy(&p, policies.join(sub).join(p.file_name().unwrap())).unwrap();
        }
    }
    let allowed = ports
        .iter()
        .map(|p| format!("resource.port == {p}"))
        .collect::<Vec<_>>()
        .join(" || ");
    std::fs::write(
        policies.join("profiles/test-origin.cedar"),
        format!(
            r#"@id("operator.permit.test-origin")
permit (principal in CodeSpace::PermissionProfile::"workspace-write", action == CodeSpace::Action::"network_connect", resource)
when {{ resource has ip_class && resource.ip_class == "loopback" && resource has port && ({allowed}) }};
"#
        ),
    )
    .unwrap();
    std::fs::create_dir_all(dir.join("schema")).unwrap();
    std::fs::copy(
        src.join("schema/codespace.cedarschema"),
        dir.join("schema/codespace.cedarschema"),
    )
    .unwrap();
    policies
}

/// A one-shot HTTP origin: answers one request with [`BODY`] and reports the head it got and
/// the bytes it sent.
async fn origin() -> (u16, tokio::task::JoinHandle<(String, usize)>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            if s.read(&mut b).await.unwrap() == 0 {
                break;
            }
            head.push(b[0]);
        }
        let reply = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{BODY}",
            BODY.len()
        );
        s.write_all(reply.as_bytes()).await.unwrap();
        s.shutdown().await.unwrap();
        (String::from_utf8(head).unwrap(), reply.len())
    });
    (port, task)
}

const SCRIPT: &str = r#"
import json, os, socket, sys, urllib.request, urllib.error
allowed, denied, own = sys.argv[1], sys.argv[2], sys.argv[3]
print('env', os.environ.get('HTTP_PROXY'), os.environ.get('https_proxy'), os.environ.get('ALL_PROXY'))
print('fetch', urllib.request.urlopen('http://127.0.0.1:%s/hello' % allowed, timeout=10).read().decode())
try:
    urllib.request.urlopen('http://127.0.0.1:%s/' % denied, timeout=10)
    print('denied-port ok?!')
except urllib.error.HTTPError as e:
    print('denied-port', e.code, e.read().decode())
try:
    socket.create_connection(('127.0.0.1', int(allowed)), timeout=5).close()
    print('direct ok?!')
except OSError as e:
    print('direct refused', e.errno)
def connect(target):
    s = socket.create_connection(('127.0.0.1', 3128), timeout=10)
    s.sendall(('CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n' % (target, target)).encode())
    data = b''
    while True:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    head, _, body = data.decode().partition('\r\n\r\n')
    return head.split('\r\n')[0], body
print('own', *connect('127.0.0.1:%s' % own))
print('metadata', *connect('169.254.169.254:80'))
"#;

fn line<'a>(out: &'a str, prefix: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no `{prefix}` line in:\n{out}"))
}

fn body_of(l: &str) -> Value {
    let start = l.find('{').unwrap_or_else(|| panic!("no JSON in `{l}`"));
    serde_json::from_str(&l[start..]).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandboxed_fetch_goes_through_the_proxy_and_every_connection_is_decided() {
    let name = "a_sandboxed_fetch_goes_through_the_proxy_and_every_connection_is_decided";
    if skip_without_sandbox(name) || !python3() {
        return;
    }
    if !codespace_runner_sandbox::probe().net_namespaces {
        codespace_test_skip::skip(
            name,
            "network namespaces unavailable (proxy mode needs one)",
        );
        return;
    }
    let (allowed, served) = origin().await;
    let denied = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    denied.set_nonblocking(true).unwrap();
    let denied_port = denied.local_addr().unwrap().port();
    // Stands in for this server's own HTTP listener; the operator permit covers its port too,
    // so only the guardrail can refuse it.
    let own = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    own.set_nonblocking(true).unwrap();
    let own_addr = own.local_addr().unwrap();
    let pdir = tempfile::tempdir().unwrap();
    let policies = policies_with_loopback_permit(pdir.path(), &[allowed, own_addr.port()]);
    let e = env_with(Opts {
        network: "proxy",
        policies: Some((policies, json!({}))),
        ..Opts::default()
    });
    e.gw.add_http_listener(own_addr);

    let info = call(&e.gw, "workspace_info", json!({"workspace_id": "w"}))
        .await
        .unwrap();
    let net = &info["execution"]["network"];
    assert_eq!(net["policy"], "proxy", "{net}");
    assert_eq!(net["proxy"], "127.0.0.1:3128", "{net}");

    let r = run(
        &e.gw,
        &[
            "python3",
            "-c",
            SCRIPT,
            &allowed.to_string(),
            &denied_port.to_string(),
            &own_addr.port().to_string(),
        ],
        20_000,
    )
    .await;
    let id = r["process_id"].as_str().unwrap().to_string();
    assert_eq!(r["state"], "exited", "{r}");
    let mut out = r["chunk"].as_str().unwrap().to_string();
    if r["eof"] != true {
        out.push_str(&read_all(&e.gw, &id, r["cursor"].as_u64().unwrap()).await.0);
    }
    assert_eq!(r["exit_code"], 0, "{out}");

    let url = "http://127.0.0.1:3128";
    assert_eq!(line(&out, "env "), format!("env {url} {url} {url}"));
    assert_eq!(line(&out, "fetch "), format!("fetch {BODY}"));
    let (head, sent) = served.await.unwrap();
    assert!(head.starts_with("GET /hello HTTP/1.1\r\n"), "{head}");

    let d = line(&out, "denied-port ");
    assert!(d.starts_with("denied-port 403 "), "{out}");
    let body = body_of(d);
    assert_eq!(body["code"], "UNAUTHORIZED", "{body}");
    assert!(
        body["decision_id"].as_str().unwrap().starts_with("dec-"),
        "{body}"
    );
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("no policy permits"),
        "{body}"
    );
    assert_eq!(
        denied.accept().unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock
    );

    let direct = line(&out, "direct ");
    assert!(direct.starts_with("direct refused"), "{out}");

    let o = line(&out, "own ");
    assert!(o.starts_with("own HTTP/1.1 403"), "{out}");
    assert_eq!(
        body_of(o)["policy_ids"],
        json!(["base.forbid.network-to-this-server"])
    );
    assert_eq!(
        own.accept().unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock
    );

    let m = line(&out, "metadata ");
    assert!(m.starts_with("metadata HTTP/1.1 403"), "{out}");
    assert_eq!(
        body_of(m)["policy_ids"],
        json!(["base.forbid.network-link-local"])
    );

    let status = call(&e.gw, "process_status", json!({"process_id": id}))
        .await
        .unwrap();
    let n = &status["network"];
    assert_eq!(n["connections"], 4, "{status}");
    assert_eq!(n["denied"], 3, "{status}");
    assert_eq!(n["bytes_out"], head.len() as u64, "{status}");
    assert_eq!(n["bytes_in"], sent as u64, "{status}");

    e.gw.flush_audit();
    let rows =
        e.gw.store()
            .unwrap()
            .query_decisions(&DecisionQuery {
                tool: Some("network_connect".into()),
                ..DecisionQuery::default()
            })
            .unwrap();
    assert_eq!(rows.len(), 4, "{rows:?}");
    let allowed_rows: Vec<_> = rows.iter().filter(|r| r.decision == "allow").collect();
    assert_eq!(allowed_rows.len(), 1);
    assert_eq!(
        allowed_rows[0].policy_ids,
        vec!["operator.permit.test-origin"]
    );
    for row in &rows {
        assert_eq!(row.action, "network_connect");
        assert!(row.subject.contains(&id), "{}", row.subject);
        let request = row.request.as_ref().unwrap().to_string();
        assert!(request.contains(&id), "{request}");
    }
    assert!(
        rows.iter()
            .any(|r| r.policy_ids == vec!["base.forbid.network-link-local".to_string()])
    );
}

const NAMES_SCRIPT: &str = r#"
import socket
def connect(target):
    s = socket.create_connection(('127.0.0.1', 3128), timeout=10)
    s.sendall(('CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n' % (target, target)).encode())
    data = b''
    while True:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    head, _, body = data.decode().partition('\r\n\r\n')
    return head.split('\r\n')[0], body
print('forbidden', *connect('data.exfil.invalid:22'))
print('unresolved', *connect('no-such-host.invalid:443'))
print('blocked', *connect('blocked.invalid:443'))
"#;

/// Security round 3, item 5, through the gateway: a name no address class would be allowed for
/// (port 22 under the shipped policy) is refused before lookup with a 403 that says so and one
/// audit row; an operator forbid on a host name is that refusal's one policy; a name that may be
/// looked up but does not resolve gets its 502 and an audit row too (it used to get neither a
/// decision nor a row). `runner/netproxy/tests/proxy.rs` shows the
/// refused name never reaches the resolver.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_are_decided_before_lookup_and_every_refusal_is_audited() {
    let name = "names_are_decided_before_lookup_and_every_refusal_is_audited";
    if skip_without_sandbox(name) || !python3() {
        return;
    }
    if !codespace_runner_sandbox::probe().net_namespaces {
        codespace_test_skip::skip(
            name,
            "network namespaces unavailable (proxy mode needs one)",
        );
        return;
    }
    // The shipped policies plus an operator forbid on one host name.
    let pdir = tempfile::tempdir().unwrap();
    let policies = policies_with_loopback_permit(pdir.path(), &[1]);
    std::fs::write(
        policies.join("base/blocked-host.cedar"),
        r#"@id("operator.forbid.blocked-host")
@reason("this host is blocked")
forbid (principal, action == CodeSpace::Action::"network_connect", resource)
when { resource has host && resource.host == "blocked.invalid" };
"#,
    )
    .unwrap();
    let e = env_with(Opts {
        network: "proxy",
        policies: Some((policies, json!({}))),
        ..Opts::default()
    });
    let r = run(&e.gw, &["python3", "-c", NAMES_SCRIPT], 20_000).await;
    let id = r["process_id"].as_str().unwrap().to_string();
    assert_eq!(r["state"], "exited", "{r}");
    let mut out = r["chunk"].as_str().unwrap().to_string();
    if r["eof"] != true {
        out.push_str(&read_all(&e.gw, &id, r["cursor"].as_u64().unwrap()).await.0);
    }
    assert_eq!(r["exit_code"], 0, "{out}");

    let f = line(&out, "forbidden ");
    assert!(f.starts_with("forbidden HTTP/1.1 403"), "{out}");
    let body = body_of(f);
    assert_eq!(body["code"], "UNAUTHORIZED", "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("before the name was looked up") && message.contains("no policy permits"),
        "{body}"
    );
    let u = line(&out, "unresolved ");
    assert!(u.starts_with("unresolved HTTP/1.1 502"), "{out}");
    let ubody = body_of(u);
    assert!(
        ubody["message"]
            .as_str()
            .unwrap()
            .contains("cannot resolve no-such-host.invalid"),
        "{ubody}"
    );

    // A forbid on the name refuses every address class: it is the refusal's one policy.
    let b = line(&out, "blocked ");
    assert!(b.starts_with("blocked HTTP/1.1 403"), "{out}");
    let bbody = body_of(b);
    assert_eq!(
        bbody["policy_ids"],
        json!(["operator.forbid.blocked-host"]),
        "{bbody}"
    );

    e.gw.flush_audit();
    let rows =
        e.gw.store()
            .unwrap()
            .query_decisions(&DecisionQuery {
                tool: Some("network_connect".into()),
                ..DecisionQuery::default()
            })
            .unwrap();
    assert_eq!(rows.len(), 3, "{rows:#?}");
    let blocked = rows
        .iter()
        .find(|r| r.subject.contains("blocked.invalid:443 "))
        .unwrap_or_else(|| panic!("{rows:#?}"));
    assert_eq!(
        (blocked.decision.as_str(), blocked.policy_ids.clone()),
        ("deny", vec!["operator.forbid.blocked-host".to_string()])
    );
    assert!(blocked.subject.contains("before lookup"));
    let forbidden = rows
        .iter()
        .find(|r| r.subject.contains("data.exfil.invalid:22"))
        .unwrap_or_else(|| panic!("{rows:#?}"));
    assert_eq!(forbidden.decision, "deny");
    assert!(forbidden.subject.contains("before lookup") && forbidden.subject.contains(&id));
    assert_eq!(
        Some(forbidden.decision_id.clone()),
        body["decision_id"].as_str().map(String::from)
    );
    let unresolved = rows
        .iter()
        .find(|r| r.subject.contains("no-such-host.invalid:443"))
        .unwrap_or_else(|| panic!("{rows:#?}"));
    assert_eq!(unresolved.decision, "deny");
    assert!(
        unresolved
            .errors
            .iter()
            .any(|e| e.contains("cannot resolve no-such-host.invalid")),
        "{unresolved:?}"
    );
    assert!(
        unresolved
            .reason
            .as_deref()
            .unwrap_or_default()
            .contains("did not resolve"),
        "{unresolved:?}"
    );
    assert_eq!(
        Some(unresolved.decision_id.clone()),
        ubody["decision_id"].as_str().map(String::from)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_proxy_mode_the_command_gets_no_proxy() {
    if skip_without_sandbox("without_proxy_mode_the_command_gets_no_proxy") {
        return;
    }
    let e = env();
    let (_, out) = run_to_end(&e.gw, &["sh", "-c", "echo proxy=${HTTP_PROXY:-none}"]).await;
    assert!(out.contains("proxy=none"), "{out}");
    let info = call(&e.gw, "workspace_info", json!({"workspace_id": "w"}))
        .await
        .unwrap();
    assert!(info["execution"]["network"].get("proxy").is_none());
}

#[test]
fn policy_explain_connect_decides_one_connection() {
    let run = |args: &[&str]| {
        let home = tempfile::tempdir().unwrap();
        std::process::Command::new(BIN)
            .args(args)
            .env("HOME", home.path())
            .env("XDG_DATA_HOME", home.path())
            .output()
            .unwrap()
    };
    let deny = run(&[
        "policy",
        "explain",
        "--connect",
        "169.254.169.254:80",
        "--scheme",
        "http",
    ]);
    let out = String::from_utf8_lossy(&deny.stdout);
    assert_eq!(deny.status.code(), Some(2), "{out}");
    assert!(
        out.contains("forbidden by base.forbid.network-link-local"),
        "{out}"
    );
    assert!(out.contains(r#""ip_class":"link_local""#), "{out}");
    let allow = run(&[
        "policy",
        "explain",
        "--json",
        "--connect",
        "pypi.org:443",
        "--ip-class",
        "public",
        "--process",
        r#"{"command": ["pip", "install", "requests"]}"#,
    ]);
    assert_eq!(
        allow.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&allow.stderr)
    );
    let v: Value = serde_json::from_slice(&allow.stdout).unwrap();
    assert_eq!(v["decision"], "allow", "{v}");
    let own = run(&[
        "policy",
        "explain",
        "--connect",
        "127.0.0.1:8080",
        "--server-owned",
    ]);
    let out = String::from_utf8_lossy(&own.stdout);
    assert_eq!(own.status.code(), Some(2), "{out}");
    assert!(out.contains("base.forbid.network-to-this-server"), "{out}");
    let bad = run(&["policy", "explain", "--connect", "no-port"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("HOST:PORT"));
}

/// The relay holds neither the command's pipes nor its terminal: a proxy-mode command's output
/// ends when the command does, in pipe and PTY mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_mode_command_ends_with_its_output_in_both_modes() {
    let name = "a_proxy_mode_command_ends_with_its_output_in_both_modes";
    if skip_without_sandbox(name) {
        return;
    }
    if !codespace_runner_sandbox::probe().net_namespaces {
        codespace_test_skip::skip(
            name,
            "network namespaces unavailable (proxy mode needs one)",
        );
        return;
    }
    let e = env_with(Opts {
        network: "proxy",
        ..Opts::default()
    });
    for tty in [false, true] {
        let r = call(
            &e.gw,
            "exec_command",
            json!({"workspace_id": "w", "command": ["sh", "-c", "echo proxy=$ALL_PROXY"],
                   "tty": tty, "yield_ms": 20000}),
        )
        .await
        .unwrap();
        assert_eq!(r["state"], "exited", "tty={tty}: {r}");
        let id = r["process_id"].as_str().unwrap();
        let mut out = r["chunk"].as_str().unwrap().to_string();
        if r["eof"] != true {
            out.push_str(&read_all(&e.gw, id, r["cursor"].as_u64().unwrap()).await.0);
        }
        assert!(
            out.contains("proxy=http://127.0.0.1:3128"),
            "tty={tty}: {out}"
        );
        let status = call(&e.gw, "process_status", json!({"process_id": id}))
            .await
            .unwrap();
        assert_eq!(status["eof"], true, "tty={tty}: {status}");
        assert_eq!(status["network"]["connections"], 0, "{status}");
    }
}
