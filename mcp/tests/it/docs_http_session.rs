//! The operator docs as a newcomer pastes them, against the built binary: the token-protected
//! HTTP set-up and the three-request `curl` session of docs/operations.md run exactly as written
//! (only the port is moved to a free one); the README's SSH snippet names the binary by an
//! absolute path; docs/operations.md's table of contents is numbered once, 1 to N, and every
//! entry points at a heading.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_codespace");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn operations() -> String {
    std::fs::read_to_string(repo().join("docs/operations.md")).unwrap()
}

/// The bodies of the ```sh blocks of the section that starts with `heading`.
fn sh_blocks(md: &str, heading: &str) -> Vec<String> {
    let start = md.find(heading).unwrap_or_else(|| panic!("no {heading}"));
    let rest = &md[start + heading.len()..];
    let section = &rest[..rest.find("\n## ").unwrap_or(rest.len())];
    section
        .split("```sh\n")
        .skip(1)
        .map(|b| b[..b.find("\n```").unwrap() + 1].to_string())
        .collect()
}

/// A free loopback port (bound, read, released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn the_operations_curl_session_works_as_written() {
    let missing: Vec<&str> = ["bash", "curl", "openssl", "awk"]
        .into_iter()
        .filter(|t| !have(t))
        .collect();
    if !missing.is_empty() {
        codespace_test_skip::skip(
            "the_operations_curl_session_works_as_written",
            format!("{missing:?} not installed"),
        );
        return;
    }
    let blocks = sh_blocks(
        &operations(),
        "## A token-protected server and a `curl` session",
    );
    assert_eq!(blocks.len(), 2, "{blocks:#?}");
    let port = free_port().to_string();
    let (setup, session) = (
        blocks[0].replace("8787", &port),
        blocks[1].replace("8787", &port),
    );
    assert!(setup.contains("--http 127.0.0.1:") && session.contains("Mcp-Session-Id"));

    let home = tempfile::tempdir().unwrap();
    let bin_dir = home.path().join("bin");
    std::fs::create_dir(&bin_dir).unwrap();
    std::os::unix::fs::symlink(BIN, bin_dir.join("codespace")).unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let shell = |script: &str| {
        let mut c = Command::new("bash");
        c.args(["-euc", script])
            .current_dir(home.path())
            .env("HOME", home.path())
            .env("XDG_DATA_HOME", home.path().join("data"))
            .env("PATH", &path)
            .env_remove("CODESPACE_CONFIG")
            .env_remove("CODESPACE_LOG");
        c
    };

    // The first shell: set-up, then the server in the foreground.
    let mut server = shell(&setup)
        .process_group(0)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let group = rustix::process::Pid::from_raw(i32::try_from(server.id()).unwrap()).unwrap();
    let mut stderr = BufReader::new(server.stderr.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        if stderr.read_line(&mut line).unwrap() == 0 {
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::TERM);
            panic!("the server of the set-up block exited: {seen}");
        }
        seen.push_str(&line);
        if line.contains("serving MCP over streamable HTTP") {
            break;
        }
    }
    // The second shell: the three requests.
    let out = shell(&session).output().unwrap();
    let _ = rustix::process::kill_process_group(group, rustix::process::Signal::TERM);
    let status = server.wait().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report = format!(
        "status {:?}\nstdout:\n{stdout}\nstderr:\n{}\nserver:\n{seen} (exit {status:?})",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{report}");
    assert!(
        stdout
            .contains(r#"data: {"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25""#),
        "{report}"
    );
    assert!(
        stdout.contains(r#""serverInfo":{"name":"codespace""#),
        "{report}"
    );
    assert!(
        stdout.contains(r#""id":2,"result":{"#)
            && stdout.contains(r#""structuredContent":{"path":"hello.txt","content":"hello\n""#),
        "{report}"
    );
    assert!(!stdout.contains("\"error\""), "{report}");
}

#[test]
fn the_readme_ssh_snippet_names_the_binary_by_an_absolute_path() {
    let md = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let line = md
        .lines()
        .find(|l| l.contains("\"args\": [\"-T\""))
        .expect("the SSH snippet");
    let args: Vec<String> =
        serde_json::from_str(line.trim().trim_start_matches("\"args\":").trim()).unwrap();
    let program = args
        .iter()
        .skip(1)
        .find(|a| !a.starts_with('-') && *a != "devbox")
        .unwrap();
    assert!(program.starts_with('/'), "{line}");
    assert!(program.ends_with("/codespace"), "{line}");
}

#[test]
fn the_operations_table_of_contents_is_numbered_once() {
    let md = operations();
    let headings: Vec<String> = md
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .map(github_anchor)
        .collect();
    let mut n = 0;
    for line in md.lines().take_while(|l| !l.starts_with("## ")) {
        let Some((num, rest)) = line.split_once(". [") else {
            continue;
        };
        let Ok(num) = num.parse::<usize>() else {
            continue;
        };
        n += 1;
        assert_eq!(num, n, "{line}");
        let anchor = rest
            .split("](#")
            .nth(1)
            .and_then(|a| a.split(')').next())
            .unwrap();
        assert!(headings.iter().any(|h| h == anchor), "{line}: {headings:?}");
    }
    assert_eq!(n, headings.len(), "one entry per `## ` heading");
}

/// GitHub's anchor of a heading: lowercase, spaces to `-`, punctuation other than `-`/`_` dropped.
fn github_anchor(h: &str) -> String {
    h.to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}
