//! The first hour of a new operator, against the built binary: the README's first screen holds
//! the two set-up commands; every stdio command line of the README's "Connect your host" snippets
//! serves `initialize` + `tools/list`; `doctor` on a good and on a broken set-up; start-up errors
//! that name the path and the argument it came from; `audit` newest first with headed columns;
//! the stdio banner on a terminal only; no colour codes in logs off a terminal.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::stdio_common;

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc::channel;
use std::time::Duration;
use stdio_common::{BIN, StdioServer};

const DEADLINE: Duration = Duration::from_secs(30);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn readme() -> String {
    std::fs::read_to_string(repo().join("README.md")).unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `codespace ARGS` with HOME and XDG_DATA_HOME in `home` (never the real store).
fn run(args: &[&str], home: &Path) -> Output {
    Command::new(BIN)
        .args(args)
        .current_dir(home)
        .env("HOME", home)
        .env("XDG_DATA_HOME", home.join("data"))
        .env_remove("CODESPACE_CONFIG")
        .env_remove("CODESPACE_LOG")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn the_readme_first_screen_holds_exactly_the_two_setup_commands() {
    let md = readme();
    let first_screen: Vec<&str> = md.lines().take(24).collect();
    let open = first_screen
        .iter()
        .position(|l| *l == "```sh")
        .expect("a ```sh block on the first screen");
    let close = open
        + 1
        + first_screen[open + 1..]
            .iter()
            .position(|l| *l == "```")
            .expect("the block closes on the first screen");
    let commands: Vec<&str> = first_screen[open + 1..close]
        .iter()
        .map(|l| l.trim())
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    assert_eq!(
        commands,
        [
            "cargo run --release -p codespace-mcp --bin codespace -- serve",
            "bash scripts/test.sh"
        ]
    );
}

/// One stdio command line of a README snippet: where it came from, the program, its arguments.
#[derive(Debug)]
struct Snippet {
    origin: String,
    argv: Vec<String>,
}

/// The fenced blocks (info string, body) of `section`.
fn blocks(section: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut cur: Option<(String, String)> = None;
    for line in section.lines() {
        match &mut cur {
            None if line.starts_with("```") => {
                cur = Some((line.trim_start_matches('`').to_string(), String::new()));
            }
            Some(_) if line.starts_with("```") => out.push(cur.take().unwrap()),
            Some((_, body)) => {
                body.push_str(line);
                body.push('\n');
            }
            None => {}
        }
    }
    out
}

/// Splits a shell line into words (plain words and double-quoted strings; enough for the README).
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in line.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            c if c.is_whitespace() && !quoted => {
                if any {
                    words.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            c => {
                cur.push(c);
                any = true;
            }
        }
    }
    if any {
        words.push(cur);
    }
    words
}

/// Every stdio command line in the README's "Connect your host" section: JSON `command`+`args`
/// (Claude Desktop, Cursor, VS Code), TOML `command`/`args` (Codex), and `claude mcp add … --`.
fn readme_stdio_snippets() -> (Vec<Snippet>, usize) {
    let md = readme();
    let start = md
        .find("## Connect your host")
        .expect("a Connect your host section");
    let rest = &md[start + 3..];
    let section = &rest[..rest.find("\n## ").unwrap_or(rest.len())];
    let mut out = Vec::new();
    let mut http_forms = 0;
    for (i, (info, body)) in blocks(section).into_iter().enumerate() {
        let origin = format!("block {} ({info})", i + 1);
        match info.as_str() {
            "json" => {
                let v: Value = serde_json::from_str(&body)
                    .unwrap_or_else(|e| panic!("README {origin} is not JSON: {e}\n{body}"));
                let servers = v
                    .get("mcpServers")
                    .or_else(|| v.get("servers"))
                    .unwrap_or_else(|| panic!("README {origin}: no mcpServers/servers"));
                for (name, s) in servers.as_object().unwrap() {
                    match s.get("command").and_then(Value::as_str) {
                        Some(cmd) => {
                            let mut argv = vec![cmd.to_string()];
                            for a in s["args"].as_array().cloned().unwrap_or_default() {
                                argv.push(a.as_str().unwrap().to_string());
                            }
                            out.push(Snippet {
                                origin: format!("{origin} server {name}"),
                                argv,
                            });
                        }
                        None => {
                            assert!(s.get("url").is_some(), "README {origin}: {s}");
                            http_forms += 1;
                        }
                    }
                }
            }
            "toml" => {
                let mut command = None;
                let mut args: Vec<String> = Vec::new();
                for line in body.lines() {
                    if let Some(v) = line.strip_prefix("command = ") {
                        command = Some(serde_json::from_str::<String>(v).unwrap());
                    } else if let Some(v) = line.strip_prefix("args = ") {
                        args = serde_json::from_str(v).unwrap();
                    }
                }
                match command {
                    Some(c) => out.push(Snippet {
                        origin,
                        argv: std::iter::once(c).chain(args).collect(),
                    }),
                    None => {
                        assert!(body.contains("url = "), "README {origin}: {body}");
                        http_forms += 1;
                    }
                }
            }
            "sh" => {
                let joined = body.replace("\\\n", " ");
                for line in joined.lines().filter(|l| l.starts_with("claude mcp add")) {
                    let words = shell_words(line);
                    match words.iter().position(|w| w == "--") {
                        Some(dd) => out.push(Snippet {
                            origin: format!("{origin}: {line}"),
                            argv: words[dd + 1..].to_vec(),
                        }),
                        None => {
                            assert!(words.iter().any(|w| w == "http"), "{line}");
                            http_forms += 1;
                        }
                    }
                }
            }
            _ => {}
        }
    }
    (out, http_forms)
}

/// The snippet's command line made runnable here: the binary under test for `codespace`, the
/// temp workspace for the project path; an `ssh -T HOST` prefix is what carries stdio to a
/// Linux machine, so the command after it is what runs there.
fn localize(argv: &[String], ws: &Path) -> Vec<String> {
    let mut argv: Vec<String> = argv.to_vec();
    if argv.first().map(String::as_str) == Some("ssh") {
        let host = argv
            .iter()
            .skip(1)
            .position(|a| !a.starts_with('-'))
            .unwrap()
            + 1;
        argv.drain(..=host);
    }
    argv.iter()
        .map(|a| match a.as_str() {
            "/path/to/project" | "${workspaceFolder}" => ws.display().to_string(),
            a if a == "codespace" || a.ends_with("/codespace") => BIN.to_string(),
            a => a.to_string(),
        })
        .collect()
}

#[test]
fn every_readme_stdio_snippet_serves_initialize_and_tools_list() {
    let (snippets, http_forms) = readme_stdio_snippets();
    // Claude Desktop (direct and over SSH), Claude Code, Codex, Cursor, VS Code.
    assert!(
        snippets.len() >= 6,
        "expected the stdio snippets of six hosts: {snippets:#?}"
    );
    assert!(
        http_forms >= 3,
        "the HTTP forms went missing ({http_forms})"
    );
    for s in snippets {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("project");
        std::fs::create_dir(&ws).unwrap();
        std::fs::write(ws.join("a.txt"), "alpha\n").unwrap();
        let argv = localize(&s.argv, &ws);
        assert_eq!(
            argv[0], BIN,
            "{}: not the codespace binary: {argv:?}",
            s.origin
        );
        assert_eq!(
            argv.get(1).map(String::as_str),
            Some("serve"),
            "{}",
            s.origin
        );
        // The harness runs `BIN serve`; the rest of the line is the snippet's.
        let mut server = StdioServer::serve()
            .args(&argv[2..])
            .env("HOME", tmp.path())
            .env("XDG_DATA_HOME", tmp.path().join("data"))
            .cwd(tmp.path())
            .stderr_file(tmp.path().join("stderr.log"))
            .deadline(DEADLINE)
            .spawn();
        let init = server.initialize("readme-snippet");
        assert_eq!(
            init["result"]["serverInfo"]["name"], "codespace",
            "{}: {init}",
            s.origin
        );
        let list = server.request("tools/list", json!({}));
        let names: Vec<&str> = list["result"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("{}: {list}", s.origin))
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert!(
            names.contains(&"read") && names.contains(&"exec_command"),
            "{}: {names:?}",
            s.origin
        );
        let read = server.tool_ok("read", json!({"workspace_id": "default", "path": "a.txt"}));
        assert!(read.to_string().contains("alpha"), "{}: {read}", s.origin);
        assert!(server.close_and_wait(DEADLINE).success(), "{}", s.origin);
        // The store went to the temp XDG_DATA_HOME, not anywhere real.
        assert!(
            tmp.path().join("data/codespace/codespace.db").exists(),
            "{}",
            s.origin
        );
    }
}

#[test]
fn serve_names_the_missing_path_and_the_argument_it_came_from() {
    let tmp = tempfile::tempdir().unwrap();
    let out = run(&["serve", "/nonexistent/codespace-dir"], tmp.path());
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "codespace: serve: workspace directory \"/nonexistent/codespace-dir\" (the DIR \
         argument) does not exist\n"
    );
    assert!(out.stdout.is_empty());

    let file = tmp.path().join("notadir");
    std::fs::write(&file, "x").unwrap();
    let out = run(&["serve", file.to_str().unwrap()], tmp.path());
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!(
            "\"{}\" (the DIR argument) is not a directory",
            file.display()
        )),
        "{err}"
    );

    let out = run(
        &["serve", "--config", "/nonexistent/codespace.json"],
        tmp.path(),
    );
    assert_eq!(
        text(&out.stderr),
        "codespace: serve: config file \"/nonexistent/codespace.json\" (--config) does not exist\n"
    );
    let out = Command::new(BIN)
        .arg("serve")
        .env("CODESPACE_CONFIG", "/nonexistent/codespace.json")
        .env("HOME", tmp.path())
        .env("XDG_DATA_HOME", tmp.path().join("data"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        text(&out.stderr),
        "codespace: serve: config file \"/nonexistent/codespace.json\" (the CODESPACE_CONFIG \
         environment variable) does not exist\n"
    );

    // A root inside the config: the field, the path, no Rust wording.
    let cfg = tmp.path().join("c.json");
    std::fs::write(
        &cfg,
        r#"{"workspaces": {"app": {"root": "/nonexistent/codespace-app"}}}"#,
    )
    .unwrap();
    let out = run(&["serve", "--config", cfg.to_str().unwrap()], tmp.path());
    let err = text(&out.stderr);
    assert!(
        err.contains(
            "workspaces.app.root: directory \"/nonexistent/codespace-app\" does not exist"
        ) && err.contains(&format!("(in \"{}\", given by --config)", cfg.display())),
        "{err}"
    );
    for rust in ["os error", "entity not found", "NotFound"] {
        assert!(!err.contains(rust), "{err}");
    }
}

#[test]
fn a_mistyped_profile_lists_the_valid_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("c.json");
    std::fs::write(
        &cfg,
        json!({"workspaces": {"w": {"root": tmp.path(), "profile": "read-olny"}}}).to_string(),
    )
    .unwrap();
    let out = run(&["serve", "--config", cfg.to_str().unwrap()], tmp.path());
    let err = text(&out.stderr);
    assert!(
        err.contains("unknown profile `read-olny` (did you mean `read-only`? valid: read-only, workspace-write)"),
        "{err}"
    );
    let out = run(
        &[
            "policy",
            "explain",
            "--workspace-profile",
            "workspace-wirte",
            "--call",
            r#"{"name":"read","arguments":{"workspace_id":"w","path":"a"}}"#,
        ],
        tmp.path(),
    );
    let err = text(&out.stderr);
    assert!(err.contains("did you mean `workspace-write`?"), "{err}");
}

fn write_json(path: &Path, v: &Value) {
    std::fs::write(path, serde_json::to_vec_pretty(v).unwrap()).unwrap();
}

fn problems(out: &Output) -> Vec<String> {
    text(&out.stderr)
        .lines()
        .filter_map(|l| l.strip_prefix("problem: ").map(str::to_string))
        .collect()
}

#[test]
fn doctor_reports_a_good_setup_and_exits_zero() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let store = tmp.path().join("state/codespace.db");
    let cfg = tmp.path().join("codespace.json");
    write_json(
        &cfg,
        &json!({
            "workspaces": {"app": {"root": ws}, "docs": {"root": ws, "profile": "read-only"}},
            "profiles": {"ci": {"extends": "read-only", "description": "ci runs"}},
            "store": store,
        }),
    );
    let out = run(&["doctor", "--config", cfg.to_str().unwrap()], tmp.path());
    let stdout = text(&out.stdout);
    let json_out = run(
        &["doctor", "--config", cfg.to_str().unwrap(), "--json"],
        tmp.path(),
    );
    let report: Value = serde_json::from_slice(&json_out.stdout).unwrap();
    assert!(
        !store.exists(),
        "doctor must not create the store; it reports that serve would"
    );
    if report["sandbox"]["command_sandbox"] != "enforced" {
        codespace_test_skip::skip(
            &codespace_test_skip::this_test(),
            "exit code of doctor: the kernel lacks the command sandbox here",
        );
        assert_eq!(problems(&out).len(), 1, "{}", text(&out.stderr));
        assert!(problems(&out)[0].starts_with("sandbox: unavailable"));
    } else {
        assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
        assert!(stdout.contains("no problems found"), "{stdout}");
        assert_eq!(report["problems"], json!([]));
    }
    // The effective config: file and origin, workspaces, profiles, store, policies.
    for want in [
        &format!("file: \"{}\" (from --config)", cfg.display()),
        "app: \"",
        "docs: \"",
        "ci extends read-only: ci runs",
        "workspace-write extends read-only (built-in)",
        &format!("store: \"{}\" (from the config's `store`)", store.display()),
        "does not exist yet; `serve` creates it",
        "policies: embedded",
        "landlock_abi:",
        "seccomp:",
        "net_namespaces:",
        "set sha256: sha256:",
        "lint and strict validation: ok",
        "app: read yes, write yes",
        "docs: read yes, write no",
    ] {
        assert!(stdout.contains(want), "doctor lacks `{want}`:\n{stdout}");
    }
    // --json: what workspace_info reports for each workspace, the whole answer.
    assert_eq!(
        report["workspace_info"]["app"]["execution"]["permissions"]["write"],
        true
    );
    assert_eq!(
        report["workspace_info"]["docs"]["execution"]["permissions"]["write"],
        false
    );
    assert_eq!(report["workspace_info"]["docs"]["profile"], "read-only");
    assert!(
        report["policy"]["set_sha256"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    assert_eq!(report["store"]["writable"], true);
}

#[test]
fn doctor_names_each_problem_of_a_broken_setup_in_one_line_and_exits_one() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    // A policy set with a syntax error, and a store path that is a directory.
    let policies = tmp.path().join("policies");
    std::fs::create_dir_all(policies.join("profiles")).unwrap();
    std::fs::create_dir_all(tmp.path().join("schema")).unwrap();
    std::fs::copy(
        repo().join("schema/codespace.cedarschema"),
        tmp.path().join("schema/codespace.cedarschema"),
    )
    .unwrap();
    std::fs::write(
        policies.join("profiles/workspace-write.cedar"),
        "permit (principal, action, resource\n",
    )
    .unwrap();
    let store_dir = tmp.path().join("store-is-a-dir");
    std::fs::create_dir(&store_dir).unwrap();
    let cfg = tmp.path().join("codespace.json");
    write_json(
        &cfg,
        &json!({"workspaces": {"app": {"root": ws}}, "policies": "policies", "store": store_dir}),
    );
    let out = run(&["doctor", "--config", cfg.to_str().unwrap()], tmp.path());
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let p = problems(&out);
    assert!(
        p.iter().any(|l| l.starts_with("store: ")
            && l.contains(&store_dir.display().to_string())
            && l.contains("is a directory")),
        "{p:#?}"
    );
    assert!(
        p.iter()
            .any(|l| l.starts_with("policies: ") && l.contains("workspace-write.cedar:")),
        "{p:#?}"
    );
    assert!(
        text(&out.stdout).contains("REJECTED"),
        "{}",
        text(&out.stdout)
    );
    for l in text(&out.stderr).lines() {
        assert!(l.starts_with("problem: "), "one line per problem: {l}");
    }

    // An unusable config: the field and the path, and a suggestion.
    write_json(
        &cfg,
        &json!({"workspaces": {"app": {"root": tmp.path().join("gone"), "profile": "readonly"}}}),
    );
    let out = run(&["doctor", "--config", cfg.to_str().unwrap()], tmp.path());
    assert_eq!(out.status.code(), Some(1));
    let p = problems(&out);
    assert_eq!(p.len(), 1, "{p:#?}");
    assert!(
        p[0].contains("workspaces.app.root: directory")
            && p[0].contains("gone\" does not exist")
            && p[0].contains("given by --config)"),
        "{p:#?}"
    );
    // The probe is still reported without a usable config.
    assert!(text(&out.stdout).contains("sandbox probe"));

    // A directory that is not there.
    let out = run(&["doctor", "/nonexistent/codespace-x"], tmp.path());
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        problems(&out),
        ["workspace directory \"/nonexistent/codespace-x\" (the DIR argument) does not exist"]
    );
}

#[test]
fn audit_shows_the_newest_rows_first_with_headed_columns() {
    let mut s = StdioServer::serve_temp_workspace()
        .deadline(DEADLINE)
        .spawn();
    s.initialize("audit-order");
    for path in ["first.txt", "second.txt", "third.txt"] {
        let _ = s.tool("read", json!({"workspace_id": "default", "path": path}));
    }
    assert!(s.close_and_wait(DEADLINE).success());
    let store = s.dir().join("store.db");
    let audit = |extra: &[&str]| -> String {
        let mut args = vec![
            "audit",
            "--store",
            store.to_str().unwrap(),
            "--tool",
            "read",
        ];
        args.extend_from_slice(extra);
        let out = run(&args, s.dir());
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    let subjects = |table: &str| -> Vec<String> {
        table
            .lines()
            .filter_map(|l| {
                ["first.txt", "second.txt", "third.txt"]
                    .into_iter()
                    .find(|p| l.contains(p))
                    .map(str::to_string)
            })
            .collect()
    };
    let table = audit(&[]);
    let header = table.lines().next().unwrap();
    for col in [
        "time",
        "decision",
        "workspace",
        "profile",
        "action",
        "subject",
        "decision id",
    ] {
        assert!(header.contains(col), "header lacks `{col}`: {header}");
    }
    assert!(table.lines().nth(1).unwrap().contains("allow"), "{table}");
    assert_eq!(subjects(&table), ["third.txt", "second.txt", "first.txt"]);
    assert!(table.contains("newest first"), "{table}");
    assert_eq!(subjects(&audit(&["--limit", "1"])), ["third.txt"]);
    assert_eq!(
        subjects(&audit(&["--oldest", "--limit", "2"])),
        ["first.txt", "second.txt"]
    );
    let json_lines = audit(&["--json", "--limit", "2"]);
    assert_eq!(subjects(&json_lines), ["third.txt", "second.txt"]);
}

#[test]
fn logs_carry_no_colour_codes_when_stderr_is_not_a_terminal() {
    let mut s = StdioServer::serve_temp_workspace()
        .env("CODESPACE_LOG", "debug")
        .deadline(DEADLINE)
        .spawn();
    s.initialize("no-colour");
    s.tool_ok("read", json!({"workspace_id": "default", "path": "a.txt"}));
    assert!(s.close_and_wait(DEADLINE).success());
    let log = s.stderr_text();
    assert!(log.lines().count() > 1, "expected debug logs: {log}");
    assert!(
        !log.contains('\u{1b}'),
        "ANSI escape in a non-terminal log:\n{log}"
    );
    // Not a terminal: no banner either.
    assert!(!log.contains("serving MCP over stdio"), "{log}");
}

#[test]
fn stdio_serve_on_a_terminal_prints_a_one_line_banner_and_stops_on_ctrl_d() {
    use portable_pty::{CommandBuilder, PtySize, native_pty_system};
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let store = tmp.path().join("store.db");
    let pty = native_pty_system()
        .openpty(PtySize {
            rows: 24,
            cols: 400,
            pixel_width: 0,
            pixel_height: 0,
        })
        .unwrap();
    let mut cmd = CommandBuilder::new(BIN);
    cmd.args([
        "serve",
        ws.to_str().unwrap(),
        "--store",
        store.to_str().unwrap(),
    ]);
    cmd.cwd(tmp.path());
    cmd.env_remove("CODESPACE_CONFIG");
    cmd.env_remove("CODESPACE_LOG");
    let mut child = pty.slave.spawn_command(cmd).unwrap();
    drop(pty.slave);
    let mut reader = pty.master.try_clone_reader().unwrap();
    let (tx, rx) = channel::<String>();
    std::thread::spawn(move || {
        let mut all = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match std::io::Read::read(&mut reader, &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    all.extend_from_slice(&buf[..n]);
                    if tx.send(String::from_utf8_lossy(&all).into_owned()).is_err() {
                        break;
                    }
                }
            }
        }
    });
    let mut seen = String::new();
    while !seen.contains("audit log:") || !seen.contains('\n') {
        seen = rx
            .recv_timeout(DEADLINE)
            .unwrap_or_else(|_| panic!("no banner on the terminal; saw: {seen:?}"));
    }
    let banner = seen
        .lines()
        .find(|l| l.contains("serving MCP over stdio"))
        .unwrap_or_else(|| panic!("{seen:?}"))
        .to_string();
    assert!(banner.contains("Ctrl-C"), "{banner}");
    assert!(banner.contains(&store.display().to_string()), "{banner}");
    assert!(
        banner.contains(&std::fs::canonicalize(&ws).unwrap().display().to_string()),
        "{banner}"
    );
    // Ctrl-D: end of input on the terminal, so the server ends (nothing was initialized).
    let mut writer = pty.master.take_writer().unwrap();
    std::io::Write::write_all(&mut writer, b"\x04").unwrap();
    let (done_tx, done_rx) = channel();
    std::thread::spawn(move || {
        let _ = done_tx.send(child.wait());
    });
    let status = done_rx
        .recv_timeout(DEADLINE)
        .expect("the server did not stop on Ctrl-D")
        .unwrap();
    assert!(status.success(), "{status:?}");
}

/// Skips a test whose invariant this host cannot run (`codespace_test_skip`: fails under
/// `CODESPACE_REQUIRE_ISOLATION=1`); true when skipped.
fn skip_unless(cond: bool, why: &str) -> bool {
    !codespace_test_skip::require(cond, &codespace_test_skip::this_test(), why)
}

/// The directory holding `program` on this process's `PATH` (`command -v`).
fn command_v(program: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).find(|d| {
        std::fs::metadata(d.join(program))
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

/// Runs `argv` in workspace `default` to its exit: (exit code, all output).
fn run_to_exit(s: &mut StdioServer, argv: &[&str], within: Duration) -> (i64, String) {
    let mut r = s.tool_ok(
        "exec_command",
        json!({"workspace_id": "default", "command": argv, "yield_ms": 20_000}),
    );
    let id = r["process_id"].as_str().unwrap().to_string();
    let mut out = String::new();
    let deadline = std::time::Instant::now() + within;
    loop {
        out.push_str(r["chunk"].as_str().unwrap_or_default());
        if r["state"] != "running" && r["eof"] == true {
            return (r["exit_code"].as_i64().unwrap_or(-1), out);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{argv:?} did not finish: {out}"
        );
        let cursor = r["cursor"].as_u64().unwrap_or(0);
        r = s.tool_ok(
            "read_process",
            json!({"process_id": id, "cursor": cursor, "wait_ms": 20_000}),
        );
    }
}

/// A crate with no dependencies and one passing test.
fn tiny_crate(dir: &Path) {
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(
        dir.join("Cargo.toml"),
        "[package]\nname = \"tiny\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("src/lib.rs"),
        "pub fn two() -> u32 { 2 }\n#[cfg(test)]\nmod t {\n    #[test]\n    fn two() { assert_eq!(super::two(), 2); }\n}\n",
    )
    .unwrap();
}

#[test]
fn a_fresh_serve_runs_the_users_cargo_and_cargo_test_with_no_config() {
    if skip_unless(
        command_v("cargo").is_some(),
        "no cargo on this process's PATH",
    ) || skip_unless(
        codespace_runner_sandbox::probe().sandbox_available(),
        "the kernel lacks the command sandbox (Landlock/seccomp)",
    ) {
        return;
    }
    let mut s = StdioServer::serve_temp_workspace()
        .deadline(Duration::from_secs(120))
        .spawn();
    tiny_crate(&s.dir().join("ws"));
    s.initialize("first-hour");
    let info = s.tool_ok("workspace_info", json!({"workspace_id": "default"}));
    let iso = &info["execution"]["isolation"];
    assert!(
        iso["toolchains"]
            .as_array()
            .unwrap()
            .contains(&json!({"name": "cargo", "read_path": "toolchain-cargo"})),
        "{iso}"
    );
    // Names only: the toolchain's directory is not on the wire.
    let cargo_dir = command_v("cargo").unwrap();
    assert!(
        !info.to_string().contains(cargo_dir.to_str().unwrap()),
        "{info}"
    );
    let (code, out) = run_to_exit(&mut s, &["cargo", "--version"], Duration::from_secs(60));
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("cargo "), "{out}");
    let (code, out) = run_to_exit(
        &mut s,
        &["cargo", "test", "--offline"],
        Duration::from_secs(300),
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("test result: ok. 1 passed"), "{out}");
    assert!(
        s.dir().join("ws/target").is_dir(),
        "the target dir is in the workspace"
    );
    // doctor lists them, with their directories (the operator's own terminal).
    let out = Command::new(BIN)
        .args(["doctor"])
        .arg(s.dir().join("ws"))
        .arg("--store")
        .arg(s.dir().join("store.db"))
        .env_remove("CODESPACE_CONFIG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("toolchains (read-only): cargo \""),
        "{stdout}"
    );
}

#[test]
fn without_toolchains_a_missing_program_names_the_path_and_the_remedy() {
    if skip_unless(
        codespace_runner_sandbox::probe().sandbox_available(),
        "the kernel lacks the command sandbox (Landlock/seccomp)",
    ) {
        return;
    }
    let mut s = StdioServer::serve_temp_workspace()
        .arg("--no-toolchains")
        .spawn();
    s.initialize("first-hour");
    let info = s.tool_ok("workspace_info", json!({"workspace_id": "default"}));
    assert_eq!(info["execution"]["isolation"]["toolchains"], json!([]));
    let err = s.tool_err(
        "exec_command",
        json!({"workspace_id": "default", "command": ["no-such-tool-xyz", "--version"]}),
    );
    assert_eq!(err["code"], "PROCESS_SPAWN_FAILED", "{err}");
    let m = err["message"].as_str().unwrap();
    for want in [
        "program not found: no-such-tool-xyz",
        "the commands' PATH is /usr/local/sbin:",
        "`codespace serve --toolchain DIR`",
        "`path` + `read_paths`",
    ] {
        assert!(m.contains(want), "{want:?} not in {m}");
    }
    // A program outside the sandbox's read paths, by absolute path: EACCES, with the remedy.
    let Some(cargo_dir) = command_v("cargo") else {
        skip_unless(false, "no cargo on this process's PATH");
        return;
    };
    if skip_unless(
        !["/usr", "/bin", "/sbin", "/lib"]
            .iter()
            .any(|p| cargo_dir.starts_with(p)),
        "cargo is under a system path every command may read",
    ) {
        return;
    }
    let err = s.tool_err(
        "exec_command",
        json!({"workspace_id": "default",
               "command": [cargo_dir.join("cargo"), "--version"]}),
    );
    let m = err["message"].as_str().unwrap();
    assert!(
        m.contains("Permission denied") && m.contains("--toolchain DIR"),
        "{m}"
    );
}

#[test]
fn a_tool_error_carries_its_body_as_structured_content_that_the_output_schema_admits() {
    let mut s = StdioServer::serve_temp_workspace().spawn();
    s.initialize("first-hour");
    let tools = s.request("tools/list", json!({}))["result"]["tools"].clone();
    let schema_of = |name: &str| {
        let t = tools
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap();
        assert_eq!(t["outputSchema"]["type"], "object", "{name}");
        jsonschema::validator_for(&t["outputSchema"])
            .unwrap_or_else(|e| panic!("{name}: outputSchema does not compile: {e}"))
    };
    // Every tool's schema admits an ErrorBody, and still refuses what is neither.
    for t in tools.as_array().unwrap() {
        let name = t["name"].as_str().unwrap();
        let v = schema_of(name);
        assert!(
            v.is_valid(&json!({"code": "INTERNAL", "message": "x"})),
            "{name}"
        );
        assert!(!v.is_valid(&json!({"code": 1})), "{name}");
    }
    for (tool, args, code) in [
        (
            "read",
            json!({"workspace_id": "default", "path": "missing.txt"}),
            "FILE_NOT_FOUND",
        ),
        (
            "apply_patch",
            json!({"workspace_id": "default", "patch": "not a patch"}),
            "INVALID_PATCH",
        ),
        (
            "read",
            json!({"workspace_id": "nope", "path": "a.txt"}),
            "WORKSPACE_NOT_FOUND",
        ),
    ] {
        let r = s.call(tool, args);
        assert_eq!(r["isError"], true, "{r}");
        let body = stdio_common::error_body(&r);
        assert_eq!(body["code"], code, "{r}");
        assert_eq!(
            r["structuredContent"], body,
            "structuredContent mirrors the text: {r}"
        );
        assert!(schema_of(tool).is_valid(&r["structuredContent"]), "{r}");
    }
    // A success still validates against the same schema.
    let ok = s.call("read", json!({"workspace_id": "default", "path": "a.txt"}));
    assert_eq!(ok["isError"], false);
    assert!(schema_of("read").is_valid(&ok["structuredContent"]), "{ok}");
    // So do `paths` (a file and a missing one) and a base64 read, through the real binary.
    let many = s.call(
        "read",
        json!({"workspace_id": "default", "paths": ["a.txt", "missing.txt"], "encoding": "base64"}),
    );
    assert_eq!(many["isError"], false, "{many}");
    let files = &many["structuredContent"]["files"];
    assert_eq!(files[0]["encoding"], "base64", "{many}");
    assert_eq!(files[1]["error"]["code"], "FILE_NOT_FOUND", "{many}");
    assert!(
        schema_of("read").is_valid(&many["structuredContent"]),
        "{many}"
    );
    assert!(!schema_of("read").is_valid(&json!({"files": 1})));
}

#[test]
fn a_stale_expected_version_with_hunks_that_no_longer_match_is_a_version_conflict() {
    let mut s = StdioServer::serve_temp_workspace().spawn();
    s.initialize("first-hour");
    let v1 =
        s.tool_ok("read", json!({"workspace_id": "default", "path": "a.txt"}))["version"].clone();
    s.tool_ok(
        "apply_patch",
        json!({"workspace_id": "default",
               "patch": "*** Begin Patch\n*** Update File: a.txt\n@@\n-alpha\n+beta\n*** End Patch\n"}),
    );
    // The caller still holds v1 and patches against its old content.
    let err = s.tool_err(
        "apply_patch",
        json!({"workspace_id": "default", "expected_versions": {"a.txt": v1},
               "patch": "*** Begin Patch\n*** Update File: a.txt\n@@\n-alpha\n+gamma\n*** End Patch\n"}),
    );
    assert_eq!(err["code"], "VERSION_CONFLICT", "{err}");
    assert!(
        err["message"].as_str().unwrap().contains("read it again"),
        "{err}"
    );
    // Without expected_versions the hunk's mismatch is still INVALID_PATCH.
    let err = s.tool_err(
        "apply_patch",
        json!({"workspace_id": "default",
               "patch": "*** Begin Patch\n*** Update File: a.txt\n@@\n-alpha\n+gamma\n*** End Patch\n"}),
    );
    assert_eq!(err["code"], "INVALID_PATCH", "{err}");
    assert_eq!(
        std::fs::read_to_string(s.dir().join("ws/a.txt")).unwrap(),
        "beta\n"
    );
}

#[test]
fn workspace_busy_says_which_process_holds_the_lease_and_how_to_get_unstuck() {
    if skip_unless(
        codespace_runner_sandbox::probe().sandbox_available(),
        "the kernel lacks the command sandbox (Landlock/seccomp)",
    ) {
        return;
    }
    let mut s = StdioServer::serve_temp_workspace().spawn();
    s.initialize("first-hour");
    let r = s.tool_ok(
        "exec_command",
        json!({"workspace_id": "default", "command": ["sleep", "600"], "yield_ms": 0}),
    );
    assert_eq!(r["state"], "running", "{r}");
    let id = r["process_id"].as_str().unwrap().to_string();
    let err = s.tool_err(
        "apply_patch",
        json!({"workspace_id": "default",
               "patch": "*** Begin Patch\n*** Add File: b.txt\n+b\n*** End Patch\n"}),
    );
    assert_eq!(err["code"], "WORKSPACE_BUSY", "{err}");
    let m = err["message"].as_str().unwrap();
    for want in [
        id.as_str(),
        "`terminate_process`",
        "`read_process` with `wait_ms`",
        "`background: true`",
    ] {
        assert!(m.contains(want), "{want:?} not in {m}");
    }
    s.tool_ok("terminate_process", json!({"process_id": id}));
    s.tool_ok(
        "apply_patch",
        json!({"workspace_id": "default",
               "patch": "*** Begin Patch\n*** Add File: b.txt\n+b\n*** End Patch\n"}),
    );
}
