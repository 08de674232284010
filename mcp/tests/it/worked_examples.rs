//! The worked examples of docs/policy.md through the real binary (`codespace serve` on stdio):
//! the `cargo-tester` profile runs `cargo test` on a tiny crate, and the `python-tester` profile
//! runs `python3 -m pytest`, each with the toolchain declared in the config (`path`, `env`,
//! `read_paths`) and HOME the server's managed per-workspace home. The toolchain is found from
//! `CARGO_HOME`/`RUSTUP_HOME` or `command -v`, never from a hard-coded home; a machine without
//! it (or without the sandbox) skips (`codespace_test_skip`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::stdio_common;

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use stdio_common::StdioServer;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Output of a command, when it ran and succeeded.
fn output_of(program: &Path, args: &[&str], envs: &[(String, String)]) -> Option<String> {
    let mut cmd = Command::new(program);
    cmd.args(args);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// `command -v NAME` in the test's own environment.
fn command_v(name: &str) -> Option<PathBuf> {
    output_of(
        Path::new("/bin/sh"),
        &["-c", &format!("command -v {name}")],
        &[],
    )
    .filter(|p| p.starts_with('/'))
    .map(PathBuf::from)
}

/// What the operator would write in the config for a toolchain.
struct Toolchain {
    /// The `path` entry (the directory holding the program).
    bin: PathBuf,
    /// `read_paths`.
    read_paths: Vec<(String, PathBuf)>,
    /// `env`.
    env: Vec<(String, String)>,
}

/// Adds `path` to `read_paths` unless a system tree (`/usr`, ...) already covers it.
fn add_read_path(tc: &mut Toolchain, name: &str, path: &Path) {
    let Ok(canon) = std::fs::canonicalize(path) else {
        return;
    };
    let system = ["/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc"];
    if system.iter().any(|s| canon.starts_with(s)) {
        return;
    }
    if tc.read_paths.iter().any(|(_, p)| canon.starts_with(p)) {
        return;
    }
    tc.read_paths.push((name.to_string(), canon));
}

/// cargo, found through `CARGO_HOME` or `command -v cargo`; with rustup, its home.
fn cargo_toolchain() -> Result<Toolchain, String> {
    let cargo = match std::env::var_os("CARGO_HOME") {
        Some(home) => PathBuf::from(home).join("bin").join("cargo"),
        None => command_v("cargo").ok_or("no cargo on PATH and CARGO_HOME is unset")?,
    };
    if !cargo.is_file() {
        return Err(format!("{} is not a file", cargo.display()));
    }
    let bin = cargo.parent().unwrap().to_path_buf();
    let mut tc = Toolchain {
        bin: bin.clone(),
        read_paths: Vec::new(),
        env: Vec::new(),
    };
    let rustup_home = match std::env::var("RUSTUP_HOME") {
        Ok(h) => Some(h),
        Err(_) if bin.join("rustup").is_file() => {
            output_of(&bin.join("rustup"), &["show", "home"], &[])
        }
        Err(_) => None,
    };
    if let Some(h) = &rustup_home {
        tc.env.push(("RUSTUP_HOME".into(), h.clone()));
        if let Ok(t) = std::env::var("RUSTUP_TOOLCHAIN") {
            tc.env.push(("RUSTUP_TOOLCHAIN".into(), t));
        }
    }
    add_read_path(&mut tc, "cargo-bin", &bin);
    if let Some(h) = &rustup_home {
        add_read_path(&mut tc, "rustup", Path::new(h));
    }
    let sysroot = output_of(&bin.join("rustc"), &["--print", "sysroot"], &tc.env)
        .ok_or("rustc beside cargo does not answer --print sysroot")?;
    add_read_path(&mut tc, "rust-sysroot", Path::new(&sysroot));
    Ok(tc)
}

/// python3 with pytest: the one `command -v python3` finds, else the distribution's
/// `/usr/bin/python3` (where `scripts/test.sh` installs `python3-pytest` when no python3 has
/// pytest); the real interpreter's directory, its prefixes and pytest's site directory.
fn python_toolchain() -> Result<Toolchain, String> {
    let probe = "import sys, os, pytest; print(sys.executable); print(sys.prefix); \
                 print(sys.base_prefix); print(os.path.dirname(os.path.dirname(pytest.__file__)))";
    let out = command_v("python3")
        .into_iter()
        .chain(std::iter::once(PathBuf::from("/usr/bin/python3")))
        .find_map(|python| output_of(&python, &["-c", probe], &[]))
        .ok_or("no python3 with pytest (on PATH or /usr/bin/python3)")?;
    let lines: Vec<&str> = out.lines().collect();
    let [exe, prefix, base, site] = lines[..] else {
        return Err(format!("unexpected probe output {out:?}"));
    };
    let bin = Path::new(exe).parent().unwrap().to_path_buf();
    let mut tc = Toolchain {
        bin: bin.clone(),
        read_paths: Vec::new(),
        env: vec![("PYTHONDONTWRITEBYTECODE".into(), "1".into())],
    };
    add_read_path(&mut tc, "python-prefix", Path::new(prefix));
    add_read_path(&mut tc, "python-base", Path::new(base));
    add_read_path(&mut tc, "python-site", Path::new(site));
    add_read_path(&mut tc, "python-bin", &bin);
    Ok(tc)
}

/// A policies dir with the shipped set plus the example profile `profile`.
fn policies_with(dir: &Path, profile: &str) -> PathBuf {
    let pol = dir.join("policies");
    for sub in ["base", "profiles"] {
        std::fs::create_dir_all(pol.join(sub)).unwrap();
        for e in std::fs::read_dir(repo().join("policies").join(sub)).unwrap() {
            let p = e.unwrap().path();
            std::fs::copy(&p, pol.join(sub).join(p.file_name().unwrap())).unwrap();
        }
    }
    let file = format!("{profile}.cedar");
    std::fs::copy(
        repo().join("policies/examples/profiles").join(&file),
        pol.join("profiles").join(&file),
    )
    .unwrap();
    pol
}

/// Serves workspace `ci` (profile `profile`, the toolchain's config lines) from `root`.
fn serve(dir: &Path, root: &Path, profile: &str, tc: &Toolchain) -> StdioServer {
    serve_with(dir, root, profile, tc, json!({}))
}

/// [`serve`] with `extra` merged into the workspace's config.
fn serve_with(dir: &Path, root: &Path, profile: &str, tc: &Toolchain, extra: Value) -> StdioServer {
    let pol = policies_with(dir, profile);
    let store = dir.join("state").join("store.db");
    std::fs::create_dir_all(store.parent().unwrap()).unwrap();
    let read_paths: serde_json::Map<String, Value> = tc
        .read_paths
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    let env: serde_json::Map<String, Value> =
        tc.env.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
    let mut ws = json!({
        "root": root,
        "profile": profile,
        "path": [tc.bin],
        "env": env,
        "read_paths": read_paths,
    });
    if let (Value::Object(m), Value::Object(x)) = (&mut ws, extra) {
        m.extend(x);
    }
    let config = json!({
        "policies": pol,
        "schema": repo().join("schema/codespace.cedarschema"),
        "store": store,
        "profiles": {profile: {"extends": "read-only"}},
        "workspaces": {"ci": ws},
    });
    let cfg = dir.join("codespace.json");
    std::fs::write(&cfg, serde_json::to_string_pretty(&config).unwrap()).unwrap();
    let mut s = StdioServer::serve()
        .arg("--config")
        .arg(&cfg)
        .env("XDG_DATA_HOME", dir.join("xdg"))
        .env("HOME", dir.join("not-the-home"))
        .cwd(dir)
        .stderr_file(dir.join("stderr.log"))
        .deadline(Duration::from_secs(60))
        .spawn();
    s.initialize("worked-example");
    s
}

/// Runs `argv` in `ci` and follows it to the end (bounded); returns (exit code, output).
fn run_to_end(s: &mut StdioServer, argv: &[&str]) -> (Value, String) {
    let r = s.tool_ok(
        "exec_command",
        json!({"workspace_id": "ci", "command": argv, "yield_ms": 30_000}),
    );
    let id = r["process_id"].as_str().unwrap().to_string();
    let mut out = r["chunk"].as_str().unwrap_or("").to_string();
    let mut cursor = r["cursor"].as_u64().unwrap_or(0);
    let mut eof = r["eof"] == true;
    let deadline = Instant::now() + Duration::from_secs(600);
    while !eof {
        assert!(Instant::now() < deadline, "{argv:?} did not finish: {out}");
        let c = s.tool_ok(
            "read_process",
            json!({"process_id": id, "cursor": cursor, "wait_ms": 20_000}),
        );
        out.push_str(c["chunk"].as_str().unwrap());
        cursor = c["cursor"].as_u64().unwrap();
        eof = c["eof"] == true;
    }
    let st = s.tool_ok("process_status", json!({"process_id": id}));
    assert_eq!(st["state"], "exited", "{st}");
    (st["exit_code"].clone(), out)
}

fn sandbox_or_skip(test: &str) -> bool {
    if codespace_runner_sandbox::probe().sandbox_available() {
        return true;
    }
    codespace_test_skip::skip(
        test,
        "the kernel lacks the command sandbox (Landlock/seccomp)",
    );
    false
}

#[test]
fn the_cargo_tester_example_runs_cargo_test_on_a_tiny_crate() {
    let test = "the_cargo_tester_example_runs_cargo_test_on_a_tiny_crate";
    if !sandbox_or_skip(test) {
        return;
    }
    let tc = match cargo_toolchain() {
        Ok(tc) => tc,
        Err(why) => {
            codespace_test_skip::skip(test, why);
            return;
        }
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(tmp.path()).unwrap();
    let root = dir.join("tiny");
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::write(
        root.join("Cargo.toml"),
        "[package]\nname = \"tiny\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n",
    )
    .unwrap();
    // The crate's own tests check what the command saw: HOME is the managed home.
    let home = dir.join("state").join("homes").join("ci");
    std::fs::write(
        root.join("src/lib.rs"),
        format!(
            "pub fn add(a: u32, b: u32) -> u32 {{ a + b }}\n\n\
             #[cfg(test)]\nmod tests {{\n    \
             #[test]\n    fn adds() {{ assert_eq!(super::add(2, 2), 4); }}\n\n    \
             #[test]\n    fn home_is_the_managed_home() {{\n        \
             assert_eq!(std::env::var(\"HOME\").unwrap(), {home:?});\n    }}\n}}\n",
            home = home.display().to_string()
        ),
    )
    .unwrap();
    let mut s = serve(&dir, &root, "cargo-tester", &tc);
    let (code, out) = run_to_end(&mut s, &["cargo", "test"]);
    assert_eq!(
        code,
        json!(0),
        "cargo test failed:\n{out}\nserver stderr:\n{}",
        s.stderr_tail()
    );
    assert!(out.contains("test result: ok. 2 passed"), "{out}");
    // The profile still runs nothing else.
    let err = s.tool_err(
        "exec_command",
        json!({"workspace_id": "ci", "command": ["cargo", "build"]}),
    );
    assert_eq!(err["code"], "UNAUTHORIZED", "{err}");
}

/// The worked example of docs/policy.md "Where a command may write": `ci-runner` (commands may
/// write only beneath `target/`) runs `cargo test` on a tiny crate: the build lands in
/// `target/`, and the crate's own test, running inside that command, finds `src/x`,
/// `.git/hooks/y` and `Cargo.toml.bak` unwritable.
#[test]
fn the_ci_runner_example_writes_only_beneath_target() {
    let test = "the_ci_runner_example_writes_only_beneath_target";
    if !sandbox_or_skip(test) {
        return;
    }
    let tc = match cargo_toolchain() {
        Ok(tc) => tc,
        Err(why) => {
            codespace_test_skip::skip(test, why);
            return;
        }
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(tmp.path()).unwrap();
    let root = dir.join("tiny");
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
    std::fs::write(
        root.join("Cargo.toml"),
        "[package]\nname = \"tiny\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n",
    )
    .unwrap();
    // The workspace root is read-only to the command: its Cargo.lock exists beforehand.
    std::fs::write(
        root.join("Cargo.lock"),
        "# This file is automatically @generated by Cargo.\n# It is not intended for manual editing.\n\
         version = 4\n\n[[package]]\nname = \"tiny\"\nversion = \"0.1.0\"\n",
    )
    .unwrap();
    std::fs::write(
        root.join("src/lib.rs"),
        "#[cfg(test)]\nmod tests {\n    \
         #[test]\n    fn writes_only_beneath_target() {\n        \
         for p in [\"src/x\", \".git/hooks/y\", \"Cargo.toml.bak\"] {\n            \
         let e = std::fs::write(p, \"x\").unwrap_err();\n            \
         println!(\"refused {p}: {e}\");\n        }\n        \
         std::fs::write(\"target/from-test\", \"x\").unwrap();\n    }\n}\n",
    )
    .unwrap();
    let mut s = serve_with(
        &dir,
        &root,
        "ci-runner",
        &tc,
        json!({"command_write_paths": ["target"]}),
    );
    let (code, out) = run_to_end(&mut s, &["cargo", "test", "--offline", "--", "--nocapture"]);
    assert_eq!(
        code,
        json!(0),
        "cargo test failed:\n{out}\nserver stderr:\n{}",
        s.stderr_tail()
    );
    assert!(out.contains("test result: ok. 1 passed"), "{out}");
    for p in ["src/x", ".git/hooks/y", "Cargo.toml.bak"] {
        assert!(out.contains(&format!("refused {p}")), "{out}");
        assert!(!root.join(p).exists(), "{p} was written");
    }
    assert!(root.join("target/from-test").is_file());
    assert!(
        root.join("target/debug").is_dir(),
        "the build is in target/"
    );
    let info = s.tool_ok("workspace_info", json!({"workspace_id": "ci"}));
    assert_eq!(
        info["execution"]["isolation"]["write_paths"],
        json!({"writable": ["target"], "read_only": [".", ".git"]}),
        "{info}"
    );
}

#[test]
fn the_python_tester_example_runs_pytest() {
    let test = "the_python_tester_example_runs_pytest";
    if !sandbox_or_skip(test) {
        return;
    }
    let tc = match python_toolchain() {
        Ok(tc) => tc,
        Err(why) => {
            codespace_test_skip::skip(test, why);
            return;
        }
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(tmp.path()).unwrap();
    let root = dir.join("proj");
    std::fs::create_dir_all(&root).unwrap();
    let home = dir.join("state").join("homes").join("ci");
    std::fs::write(
        root.join("test_tiny.py"),
        format!(
            "import os\n\ndef test_adds():\n    assert 2 + 2 == 4\n\n\
             def test_home_is_the_managed_home():\n    assert os.environ['HOME'] == {home:?}\n",
            home = home.display().to_string()
        ),
    )
    .unwrap();
    let mut s = serve(&dir, &root, "python-tester", &tc);
    let (code, out) = run_to_end(
        &mut s,
        &["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider"],
    );
    assert_eq!(
        code,
        json!(0),
        "pytest failed:\n{out}\nserver stderr:\n{}",
        s.stderr_tail()
    );
    assert!(out.contains("2 passed"), "{out}");
    let err = s.tool_err(
        "exec_command",
        json!({"workspace_id": "ci", "command": ["python3", "-c", "print(1)"]}),
    );
    assert_eq!(err["code"], "UNAUTHORIZED", "{err}");
}

#[test]
fn the_python_tester_example_passes_its_policy_tests() {
    let tmp = tempfile::tempdir().unwrap();
    let pol = policies_with(tmp.path(), "python-tester");
    let o = Command::new(stdio_common::BIN)
        .args(["policy", "test", "--policies"])
        .arg(&pol)
        .arg("--schema")
        .arg(repo().join("schema/codespace.cedarschema"))
        .arg("--fail-on-empty")
        .arg(repo().join("policies/examples/tests/python-tester.yaml"))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}");
    for id in [
        "python-tester.permit.pytest",
        "python-tester.permit.pytest-writes",
        "python-tester.permit.own-pytest-io",
    ] {
        assert!(!out.contains(&format!("uncovered: {id}")), "{id}:\n{out}");
    }
    assert!(out.trim_end().ends_with(" passed, 0 failed"), "{out}");
}
