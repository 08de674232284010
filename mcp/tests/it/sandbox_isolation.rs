//! What a command can reach, through exec_command with the real helper: reads are an allow-list
//! (a stand-in for the store, config and token files beside the workspace is unreadable; a
//! declared `read_paths` entry is readable), the workspace's home is writable, python3, git and
//! sh still work, cargo builds a tiny crate when the toolchain is declared, `setsid` escapees
//! die with terminate_process and gateway shutdown, a fork loop is capped at
//! `limits.max_pids_per_process`, and a host without a sandbox refuses exec unless the workspace
//! says `"sandbox": "off"`. Each test skips where the host cannot (`codespace_test_skip`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::process_common;

use codespace_engine::{Config, ErrorCode, Gateway, PolicySource, PolicyStore, SandboxFacts};
use codespace_runner_process::{PidsMechanism, ProcessTable, TableLimits};
use codespace_store::Store;
use process_common::*;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

fn sh(e: &Env, script: &str) -> impl std::future::Future<Output = (Option<i64>, String)> {
    let gw = Arc::clone(&e.gw);
    let script = script.to_string();
    async move { run_to_end(&gw, &["sh", "-c", &script]).await }
}

/// A directory beside the workspace with one file, declared as read path `name`.
fn declared_dir(dir: &Path, name: &str) -> PathBuf {
    let d = dir.join(name);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("VERSION"), format!("{name} 1.0\n")).unwrap();
    std::fs::canonicalize(d).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_outside_the_allow_list_fail_and_declared_read_paths_work() {
    if skip_without_sandbox("reads_outside_the_allow_list_fail_and_declared_read_paths_work") {
        return;
    }
    let staging = tempfile::tempdir().unwrap();
    let tools = declared_dir(staging.path(), "tools");
    let e = env_with(Opts {
        workspace: json!({"read_paths": {"tools": tools}}),
        ..Opts::default()
    });
    // Stand-ins for server-owned files beside the workspace; the real store is there too.
    let config = e.dir.path().join("config.json");
    let token = e.dir.path().join("client.token");
    std::fs::write(&config, "{\"clients\": {}}\n").unwrap();
    std::fs::write(&token, "secret-token-secret-token\n").unwrap();
    let store = e.dir.path().join("state/store.db");
    assert!(store.exists());
    let script = format!(
        "for f in '{config}' '{token}' '{store}' '{store}-wal'; do cat \"$f\" >/dev/null 2>&1 && echo \"read $f\" || echo denied; done; \
         ls '{state}' >/dev/null 2>&1 && echo listed-state || echo state-denied; \
         cat '{tools}/VERSION'; \
         echo remembered > \"$HOME/.note\" && cat \"$HOME/.note\"; \
         ls \"$HOME/..\" >/dev/null 2>&1 && echo listed-homes || echo homes-denied",
        config = config.display(),
        token = token.display(),
        store = store.display(),
        state = store.parent().unwrap().display(),
        tools = tools.display(),
    );
    let (code, out) = sh(&e, &script).await;
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        vec![
            "denied",
            "denied",
            "denied",
            "denied",
            "state-denied",
            "tools 1.0",
            "remembered",
            "homes-denied"
        ],
        "{out}"
    );
    // The home is the default one beside the store, created 0700 by the server.
    let home = e.dir.path().join("state/homes/w");
    assert_eq!(
        std::fs::read_to_string(home.join(".note")).unwrap(),
        "remembered\n"
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&home).unwrap().permissions().mode() & 0o777,
        0o700
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_git_and_sh_still_work_in_the_workspace() {
    if skip_without_sandbox("python_git_and_sh_still_work_in_the_workspace") {
        return;
    }
    let e = env();
    let (code, out) = sh(
        &e,
        "python3 -c 'import json, sys; print(json.dumps({\"py\": sys.version_info[0]}))' && \
         git --version >/dev/null && echo git-ok && \
         git init -q . && git -c user.name=t -c user.email=t@example.org commit -q --allow-empty -m init && \
         git log --oneline | wc -l && \
         for i in 1 2 3; do printf '%s' $i; done; echo",
    )
    .await;
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(out, "{\"py\": 3}\ngit-ok\n1\n123\n", "{out}");
    assert!(e.root.join(".git/HEAD").exists());
}

/// The toolchain's sysroot (found through `rustc` on this test's PATH, which honours
/// RUSTUP_HOME/CARGO_HOME; never a hard-coded home), or None.
fn rust_sysroot() -> Option<PathBuf> {
    let out = std::process::Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .ok()?;
    let path = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    path.join("bin/cargo").exists().then_some(path)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cargo_builds_a_tiny_crate_when_the_toolchain_is_declared() {
    let name = "cargo_builds_a_tiny_crate_when_the_toolchain_is_declared";
    if skip_without_sandbox(name) {
        return;
    }
    let Some(sysroot) = rust_sysroot() else {
        codespace_test_skip::skip(
            name,
            "no rustc/cargo toolchain found through `rustc --print sysroot`",
        );
        return;
    };
    // No `path` config yet: the command puts the declared toolchain on its own PATH.
    let e = env_with(Opts {
        workspace: json!({"read_paths": {"rust": sysroot}}),
        ..Opts::default()
    });
    std::fs::write(
        e.root.join("Cargo.toml"),
        "[package]\nname = \"tiny\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    )
    .unwrap();
    std::fs::create_dir(e.root.join("src")).unwrap();
    std::fs::write(
        e.root.join("src/main.rs"),
        "fn main() { println!(\"tiny says {}\", 6 * 7); }\n",
    )
    .unwrap();
    let script = format!(
        "export PATH='{bin}':$PATH CARGO_HOME=\"$HOME/.cargo\"; cargo build --offline -q && ./target/debug/tiny",
        bin = sysroot.join("bin").display()
    );
    let (code, out) = sh(&e, &script).await;
    assert_eq!(code, Some(0), "{out}");
    assert!(out.ends_with("tiny says 42\n"), "{out}");
    // Control: without the declaration the toolchain is unreadable.
    let bare = env();
    let (code, out) = sh(
        &bare,
        &format!("'{}/bin/cargo' --version", sysroot.display()),
    )
    .await;
    assert_ne!(
        code,
        Some(0),
        "the toolchain was reachable undeclared: {out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workspace_info_names_read_paths_and_reports_the_pids_limit() {
    let staging = tempfile::tempdir().unwrap();
    let tools = declared_dir(staging.path(), "tools");
    let e = env_with(Opts {
        workspace: json!({"read_paths": {"tools": tools}}),
        limits: json!({"max_pids_per_process": 77}),
        ..Opts::default()
    });
    let info = call(&e.gw, "workspace_info", json!({"workspace_id": "w"}))
        .await
        .unwrap();
    let iso = &info["execution"]["isolation"];
    assert_eq!(iso["read_paths"], json!(["tools"]), "{iso}");
    assert_eq!(iso["pids"]["limit"], 77, "{iso}");
    let mechanism = e.gw.pids_isolation().mechanism.as_str();
    assert_eq!(iso["pids"]["mechanism"], mechanism, "{iso}");
    let text = info.to_string();
    for secret in [tools.to_str().unwrap(), e.dir.path().to_str().unwrap()] {
        assert!(
            !text.contains(secret),
            "absolute server path on the wire: {text}"
        );
    }
    let expected_sandbox = if sandbox_available() {
        "required"
    } else {
        "off"
    };
    assert_eq!(iso["sandbox"], expected_sandbox, "{iso}");
}

fn tracked_or_skip(test: &str) -> bool {
    let iso = ProcessTable::new(TableLimits::default()).pids_isolation();
    if !iso.tracked {
        codespace_test_skip::skip(
            test,
            format!("no writable cgroup here, escapees are not tracked ({iso:?})"),
        );
    }
    iso.tracked
}

/// Starts a leader that starts a `setsid -f` escapee; returns (process_id, escapee pid).
async fn start_escapee(e: &Env) -> (String, i64) {
    let r = run(
        &e.gw,
        &[
            "sh",
            "-c",
            "setsid -f sh -c 'echo esc=$$; exec sleep 1000'; sleep 1000",
        ],
        0,
    )
    .await;
    let id = r["process_id"].as_str().unwrap().to_string();
    let (out, _) = read_until(&e.gw, &id, 0, "\n").await;
    let esc: i64 = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("esc="))
        .unwrap()
        .parse()
        .unwrap();
    assert!(pid_alive(esc));
    (id, esc)
}

fn kill_stray(pid: i64) {
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setsid_escapee_does_not_survive_terminate_process() {
    let name = "a_setsid_escapee_does_not_survive_terminate_process";
    if !tracked_or_skip(name) {
        return;
    }
    let e = env();
    let (id, esc) = start_escapee(&e).await;
    call(&e.gw, "terminate_process", json!({"process_id": id}))
        .await
        .unwrap();
    let status = wait_exited(&e.gw, &id, Duration::from_secs(20)).await;
    assert_eq!(status["termination"], "terminated");
    let alive = wait_pids_gone(&[esc], Duration::from_secs(5));
    kill_stray(esc);
    assert!(
        alive.is_empty(),
        "the setsid escapee survived terminate_process"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setsid_escapee_does_not_survive_gateway_shutdown() {
    let name = "a_setsid_escapee_does_not_survive_gateway_shutdown";
    if !tracked_or_skip(name) {
        return;
    }
    let e = env();
    let (_id, esc) = start_escapee(&e).await;
    tokio::time::timeout(Duration::from_secs(20), e.gw.shutdown())
        .await
        .expect("shutdown hung");
    let alive = wait_pids_gone(&[esc], Duration::from_secs(5));
    kill_stray(esc);
    assert!(alive.is_empty(), "the setsid escapee survived shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_loop_is_capped_at_max_pids_per_process() {
    let name = "a_fork_loop_is_capped_at_max_pids_per_process";
    let e = env_with(Opts {
        limits: json!({"max_pids_per_process": 32}),
        ..Opts::default()
    });
    if e.gw.pids_isolation().mechanism == PidsMechanism::None {
        codespace_test_skip::skip(name, "no writable cgroup offers a pids controller here");
        return;
    }
    // 600 background sleeps; each fork that fails is counted (python reports EAGAIN at once,
    // where shells retry or give up).
    let script = "import subprocess\n\
started, failed, kids = 0, 0, []\n\
for _ in range(600):\n    try:\n        kids.append(subprocess.Popen(['sleep', '1000'])); started += 1\n    except OSError:\n        failed += 1\n\
print('started=%d failed=%d' % (started, failed))\n";
    let (code, out) = run_to_end(&e.gw, &["python3", "-c", script]).await;
    assert_eq!(code, Some(0), "{out}");
    let count = |key: &str| -> usize {
        out.split_whitespace()
            .find_map(|kv| kv.strip_prefix(key)?.parse().ok())
            .unwrap_or_else(|| panic!("no {key} in {out}"))
    };
    let (started, failed) = (count("started="), count("failed="));
    assert!(
        started < 32,
        "{started} children started under a limit of 32: {out}"
    );
    assert_eq!(started + failed, 600, "{out}");
}

/// A gateway on a host without a sandbox, with one workspace configured by `extra`.
fn no_sandbox_gateway(dir: &Path, extra: Value) -> (Gateway, PathBuf) {
    let root = dir.join("ws");
    std::fs::create_dir(&root).unwrap();
    let mut ws = json!({"root": root, "network": "enabled"});
    if let (Value::Object(m), Value::Object(x)) = (&mut ws, extra) {
        m.extend(x);
    }
    let cfg = json!({"workspaces": {"w": ws}, "store": dir.join("store.db")});
    let cfg = Config::from_json(&cfg.to_string(), Path::new("/")).unwrap();
    let gw = Gateway::new(
        cfg,
        Arc::new(PolicyStore::load(PolicySource::Embedded).unwrap()),
        Some(Arc::new(Store::open(&dir.join("store.db")).unwrap())),
        SandboxFacts {
            sandbox_enforced: false,
            network_enforced: false,
            masking_enforced: false,
        },
    )
    .unwrap()
    .with_helper_exe(PathBuf::from(BIN));
    (gw, root)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_sandbox_exec_fails_closed_unless_the_workspace_says_off() {
    let dir = tempfile::tempdir().unwrap();
    // network: enabled used to run commands unsandboxed here; now it is refused.
    let (gw, root) = no_sandbox_gateway(dir.path(), json!({}));
    let err = call(
        &gw,
        "exec_command",
        json!({"workspace_id": "w", "command": ["touch", "ran"], "yield_ms": 2000}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::Unauthorized, "{err}");
    assert!(err.to_string().contains("sandbox"), "{err}");
    assert!(!root.join("ran").exists());
    let info = call(&gw, "workspace_info", json!({"workspace_id": "w"}))
        .await
        .unwrap();
    assert_eq!(info["execution"]["isolation"]["command_sandbox"], "none");
    assert_eq!(info["execution"]["isolation"]["sandbox"], "required");
    assert_eq!(info["execution"]["permissions"]["exec"], false);

    let dir = tempfile::tempdir().unwrap();
    let (gw, root) = no_sandbox_gateway(
        dir.path(),
        json!({"sandbox": "off", "secret_masking": "off"}),
    );
    let (code, out) = run_to_end(&gw, &["sh", "-c", "touch ran && echo ran"]).await;
    assert_eq!((code, out.as_str()), (Some(0), "ran\n"));
    assert!(root.join("ran").exists());
    let info = call(&gw, "workspace_info", json!({"workspace_id": "w"}))
        .await
        .unwrap();
    assert_eq!(info["execution"]["isolation"]["sandbox"], "off");
    assert_eq!(info["execution"]["isolation"]["command_sandbox"], "none");
    assert_eq!(info["execution"]["network"]["enforcement"], "none");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspace_with_the_sandbox_off_runs_unconfined_by_the_operators_choice() {
    if skip_without_sandbox(
        "a_workspace_with_the_sandbox_off_runs_unconfined_by_the_operators_choice",
    ) {
        return;
    }
    let e = env_with(Opts {
        workspace: json!({"sandbox": "off"}),
        ..Opts::default()
    });
    let outside = e.dir.path().join("beside.txt");
    std::fs::write(&outside, "beside\n").unwrap();
    let (code, out) = sh(&e, &format!("cat '{}'", outside.display())).await;
    assert_eq!((code, out.as_str()), (Some(0), "beside\n"));
    let info = call(&e.gw, "workspace_info", json!({"workspace_id": "w"}))
        .await
        .unwrap();
    assert_eq!(info["execution"]["isolation"]["command_sandbox"], "none");
}
