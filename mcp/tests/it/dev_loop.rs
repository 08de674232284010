//! The dev loop through the real gateway path (in-process, sandbox helper = the built binary):
//! operator `path`/`env`, the call's `env`/`cwd` and the guardrail on loader hooks; the lease is
//! free as soon as any observer can see an exit; terminate_process waits for the exit.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::process_common;

use codespace_engine::ErrorCode;
use process_common::*;
use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt;

/// A tool tree outside the workspace: `<dir>/tools/bin/hello-tool` prints `$GREETING`.
fn tool_tree(dir: &std::path::Path) -> std::path::PathBuf {
    let tools = dir.join("tools");
    let bin = tools.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let tool = bin.join("hello-tool");
    std::fs::write(&tool, "#!/bin/sh\necho \"tool says $GREETING\"\n").unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::canonicalize(tools).unwrap()
}

async fn exec(gw: &codespace_engine::Gateway, args: Value) -> Value {
    call(gw, "exec_command", args)
        .await
        .unwrap_or_else(|e| panic!("exec failed: {e}"))
}

/// Output of a finished exec (its yield window covers the whole run).
async fn finished_output(gw: &codespace_engine::Gateway, r: &Value) -> String {
    assert_eq!(r["state"], "exited", "did not finish in time: {r}");
    let mut out = r["chunk"].as_str().unwrap().to_string();
    if r["eof"] != true {
        let id = r["process_id"].as_str().unwrap();
        out.push_str(&read_all(gw, id, r["cursor"].as_u64().unwrap()).await.0);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_path_and_env_and_the_calls_env_and_cwd_reach_the_command() {
    let scratch = tempfile::tempdir().unwrap();
    let tools = tool_tree(scratch.path());
    let mut ws = if sandbox_available() {
        json!({})
    } else {
        json!({"sandbox": "off"})
    };
    ws["path"] = json!([tools.join("bin")]);
    ws["read_paths"] = json!({"tools": tools});
    ws["env"] = json!({"GREETING": "operator", "PINNED": "operator"});
    let e = env_with(Opts {
        workspace: ws,
        ..Opts::default()
    });
    std::fs::create_dir_all(e.root.join("sub/dir")).unwrap();

    // The operator's path finds the tool; the operator's env reaches it.
    let r = exec(
        &e.gw,
        json!({"workspace_id": "w", "command": ["hello-tool"], "yield_ms": 20_000}),
    )
    .await;
    assert_eq!(finished_output(&e.gw, &r).await, "tool says operator\n");
    assert_eq!(r["exit_code"], 0);

    // The call's env adds variables; the operator's value wins for the same name; cwd is used.
    let r = exec(
        &e.gw,
        json!({"workspace_id": "w", "cwd": "sub/dir",
               "command": ["sh", "-c", "echo \"$MINE $PINNED\"; pwd; echo \"$PATH\""],
               "env": {"MINE": "mine", "PINNED": "caller"}, "yield_ms": 20_000}),
    )
    .await;
    let out = finished_output(&e.gw, &r).await;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "mine operator", "{out}");
    assert!(lines[1].ends_with("/sub/dir"), "{out}");
    let path = lines[2];
    assert!(
        path.starts_with(&format!("{}:", tools.join("bin").display())),
        "operator path first: {path}"
    );
    assert!(path.contains("/usr/bin"), "{path}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_env_and_cwd_are_refused_and_start_nothing() {
    let e = env();
    std::fs::write(e.root.join("file.txt"), "x").unwrap();
    std::fs::create_dir(e.root.join("real")).unwrap();
    std::os::unix::fs::symlink(e.root.join("real"), e.root.join("link")).unwrap();
    let cases: Vec<(Value, ErrorCode)> = vec![
        (json!({"env": {"A=B": "x"}}), ErrorCode::InvalidArguments),
        (json!({"env": {"1X": "x"}}), ErrorCode::InvalidArguments),
        (json!({"env": {"": "x"}}), ErrorCode::InvalidArguments),
        (
            json!({"env": {"OK": "a\u{0}b"}}),
            ErrorCode::InvalidArguments,
        ),
        (json!({"cwd": "../outside"}), ErrorCode::PathEscape),
        (json!({"cwd": "/etc"}), ErrorCode::PathEscape),
        (json!({"cwd": "a/../../b"}), ErrorCode::PathEscape),
        (json!({"cwd": "missing"}), ErrorCode::FileNotFound),
        (json!({"cwd": "file.txt"}), ErrorCode::PathNotDirectory),
        (json!({"cwd": "link"}), ErrorCode::SymlinkRejected),
    ];
    for (extra, code) in cases {
        let mut args = json!({"workspace_id": "w", "command": ["touch", "started"]});
        for (k, v) in extra.as_object().unwrap() {
            args[k] = v.clone();
        }
        let err = call(&e.gw, "exec_command", args.clone())
            .await
            .expect_err("must be refused");
        assert_eq!(err.code, code, "{args}: {err}");
        assert!(!err.message.contains(e.root.to_str().unwrap()), "{err}");
        assert_eq!(e.gw.live_processes(), 0, "{args}: something started");
    }
    assert!(!e.root.join("started").exists());
    // A good cwd works.
    let r = exec(
        &e.gw,
        json!({"workspace_id": "w", "command": ["pwd"], "cwd": "real", "yield_ms": 20_000}),
    )
    .await;
    assert!(
        finished_output(&e.gw, &r)
            .await
            .trim_end()
            .ends_with("/real")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loader_or_git_hook_variable_is_denied_naming_the_guardrail() {
    let e = env();
    for name in [
        "LD_PRELOAD",
        "GIT_SSH_COMMAND",
        "GIT_CONFIG_GLOBAL",
        "PYTHONPATH",
    ] {
        let err = call(
            &e.gw,
            "exec_command",
            json!({"workspace_id": "w", "command": ["true"], "env": {name: "x", "SAFE": "1"}}),
        )
        .await
        .expect_err("must be denied");
        assert_eq!(err.code, ErrorCode::Unauthorized, "{name}: {err}");
        assert_eq!(
            err.policy_ids.as_deref(),
            Some(&["base.forbid.exec-env-hooks".to_string()][..]),
            "{name}: {err:?}"
        );
        assert!(err.decision_id.is_some());
        assert_eq!(e.gw.live_processes(), 0);
    }
}

/// Security round 3, item 4: `env` that makes `make` or `cargo` run a shell (SHELL + MAKEFLAGS,
/// a cargo target runner, a rustc wrapper, npm's script shell) is refused before anything starts,
/// and the refusal names the guardrail and lists the families in its message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn make_and_cargo_env_hooks_are_denied_naming_the_guardrail() {
    let e = env();
    let cases = [
        (
            vec!["make", "test"],
            json!({"SHELL": "/bin/sh", "MAKEFLAGS": "--eval=$(shell touch started)"}),
        ),
        (
            vec!["cargo", "test"],
            json!({"CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER": "/bin/sh -c 'touch started'"}),
        ),
        (vec!["cargo", "test"], json!({"RUSTC_WRAPPER": "./evil"})),
        (
            vec!["npm", "test"],
            json!({"npm_config_script_shell": "./evil"}),
        ),
    ];
    for (argv, env) in cases {
        let err = call(
            &e.gw,
            "exec_command",
            json!({"workspace_id": "w", "command": argv, "env": env}),
        )
        .await
        .expect_err("must be denied");
        assert_eq!(err.code, ErrorCode::Unauthorized, "{env}: {err}");
        assert_eq!(
            err.policy_ids.as_deref(),
            Some(&["base.forbid.exec-env-hooks".to_string()][..]),
            "{env}: {err:?}"
        );
        assert!(
            err.message.contains("base.forbid.exec-env-hooks")
                && err.message.contains("CARGO_TARGET_*_RUNNER")
                && err.message.contains("MAKEFLAGS"),
            "{env}: {}",
            err.message
        );
        assert_eq!(e.gw.live_processes(), 0);
    }
    assert!(!e.root.join("started").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exec_right_after_an_observed_exit_never_finds_the_workspace_busy() {
    let e = env();
    for round in 0..15 {
        // Observed through eof of a long poll.
        let r = exec(
            &e.gw,
            json!({"workspace_id": "w", "command": ["echo", "x"]}),
        )
        .await;
        let id = r["process_id"].as_str().unwrap().to_string();
        read_all(&e.gw, &id, 0).await;
        // Observed through the yield window of the exec itself.
        let r = call(
            &e.gw,
            "exec_command",
            json!({"workspace_id": "w", "command": ["true"], "yield_ms": 20_000}),
        )
        .await
        .unwrap_or_else(|err| panic!("round {round}, after eof: {err}"));
        assert_eq!(r["state"], "exited", "{r}");
        // Observed through process_status of that one: exited, so the next exec runs at once.
        let s = call(
            &e.gw,
            "process_status",
            json!({"process_id": r["process_id"]}),
        )
        .await
        .unwrap();
        assert_eq!(s["state"], "exited");
        let r = call(
            &e.gw,
            "exec_command",
            json!({"workspace_id": "w", "command": ["true"], "yield_ms": 20_000}),
        )
        .await
        .unwrap_or_else(|err| panic!("round {round}, after yield/status: {err}"));
        assert_eq!(r["state"], "exited", "{r}");
        let _ = call(
            &e.gw,
            "apply_patch",
            json!({"workspace_id": "w",
                   "patch": format!("*** Begin Patch\n*** Add File: f{round}.txt\n+x\n*** End Patch\n")}),
        )
        .await
        .unwrap_or_else(|err| panic!("round {round}, patch after exit: {err}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminate_process_waits_for_the_exit_and_frees_the_lease() {
    let e = env();
    // One that exits on TERM, one that ignores it (SIGKILL after the grace period).
    for script in [
        "echo ready; exec sleep 60",
        "trap '' TERM; echo ready; sleep 60; sleep 60",
    ] {
        let r = exec(
            &e.gw,
            json!({"workspace_id": "w", "command": ["sh", "-c", script]}),
        )
        .await;
        let id = r["process_id"].as_str().unwrap().to_string();
        read_until(&e.gw, &id, 0, "ready").await;
        let t = call(&e.gw, "terminate_process", json!({"process_id": id}))
            .await
            .unwrap();
        assert_eq!(t["ok"], true);
        assert_eq!(t["state"], "exited", "{script}: {t}");
        assert_eq!(t["termination"], "terminated", "{t}");
        assert!(t.get("exit_code").is_none(), "{t}");
        // The lease is free when terminate_process returns.
        let r = call(
            &e.gw,
            "exec_command",
            json!({"workspace_id": "w", "command": ["true"], "yield_ms": 20_000}),
        )
        .await
        .unwrap_or_else(|err| panic!("{script}: exec right after terminate: {err}"));
        assert_eq!(r["exit_code"], 0);
    }
    // Terminating an exited process returns its final state at once.
    let r = exec(
        &e.gw,
        json!({"workspace_id": "w", "command": ["sh", "-c", "exit 3"], "yield_ms": 20_000}),
    )
    .await;
    let t = call(
        &e.gw,
        "terminate_process",
        json!({"process_id": r["process_id"]}),
    )
    .await
    .unwrap();
    assert_eq!(t["state"], "exited");
    assert_eq!(t["exit_code"], 3);
    assert_eq!(t["termination"], "exited");
}

fn add_file_patch(path: &str) -> String {
    format!("*** Begin Patch\n*** Add File: {path}\n+hello\n*** End Patch\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_service_runs_while_patches_and_other_commands_do() {
    let e = env();
    let svc = exec(
        &e.gw,
        json!({"workspace_id": "w", "background": true,
               "command": ["sh", "-c", "echo ready; exec sleep 600"]}),
    )
    .await;
    let svc_id = svc["process_id"].as_str().unwrap().to_string();
    read_until(&e.gw, &svc_id, 0, "ready").await;
    // A patch and a foreground command run beside it.
    call(
        &e.gw,
        "apply_patch",
        json!({"workspace_id": "w", "patch": add_file_patch("beside.txt")}),
    )
    .await
    .unwrap_or_else(|err| panic!("patch beside a service: {err}"));
    let r = exec(
        &e.gw,
        json!({"workspace_id": "w", "command": ["cat", "beside.txt"], "yield_ms": 20_000}),
    )
    .await;
    assert_eq!(finished_output(&e.gw, &r).await, "hello\n");
    // A foreground process still holds the workspace (today's rule), the service does not.
    let fg = exec(
        &e.gw,
        json!({"workspace_id": "w", "command": ["sh", "-c", "echo fg; exec sleep 600"]}),
    )
    .await;
    let fg_id = fg["process_id"].as_str().unwrap().to_string();
    read_until(&e.gw, &fg_id, 0, "fg").await;
    let err = call(
        &e.gw,
        "apply_patch",
        json!({"workspace_id": "w", "patch": add_file_patch("blocked.txt")}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::WorkspaceBusy);
    assert!(err.message.contains(&fg_id), "{err}");
    assert!(!err.message.contains(&svc_id), "{err}");
    // A second service starts beside the foreground process.
    let svc2 = exec(
        &e.gw,
        json!({"workspace_id": "w", "background": true, "command": ["sleep", "600"]}),
    )
    .await;
    for id in [
        fg_id.as_str(),
        svc_id.as_str(),
        svc2["process_id"].as_str().unwrap(),
    ] {
        let t = call(&e.gw, "terminate_process", json!({"process_id": id}))
            .await
            .unwrap();
        assert_eq!(t["state"], "exited", "{t}");
    }
    assert_eq!(e.gw.live_processes(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_process_limit_names_the_processes_holding_it() {
    let e = env_with(Opts {
        limits: json!({"max_live_processes": 2}),
        ..Opts::default()
    });
    let mut ids = Vec::new();
    for _ in 0..2 {
        let r = exec(
            &e.gw,
            json!({"workspace_id": "w", "background": true, "command": ["sleep", "600"]}),
        )
        .await;
        ids.push(r["process_id"].as_str().unwrap().to_string());
    }
    let err = call(
        &e.gw,
        "exec_command",
        json!({"workspace_id": "w", "background": true, "command": ["true"]}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::WorkspaceBusy, "{err}");
    for id in &ids {
        assert!(err.message.contains(id.as_str()), "{err}");
    }
    assert!(err.message.contains("`sleep` in `w`, background"), "{err}");
    assert!(err.message.contains("max_live_processes"), "{err}");
    // The limit counts every client's processes, but names only the caller's own.
    let other = call_as(
        &e.gw,
        &other_client(),
        "exec_command",
        json!({"workspace_id": "w", "background": true, "command": ["true"]}),
    )
    .await
    .unwrap_err();
    assert!(other.message.contains("2 of other clients"), "{other}");
    assert!(!other.message.contains(ids[0].as_str()), "{other}");
    for id in &ids {
        call(&e.gw, "terminate_process", json!({"process_id": id}))
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_client_lease_scope_a_process_blocks_only_its_own_client() {
    let mut ws = Opts::default().workspace;
    ws["lease_scope"] = json!("client");
    let e = env_with(Opts {
        workspace: ws,
        ..Opts::default()
    });
    let info = call(&e.gw, "workspace_info", json!({"workspace_id": "w"}))
        .await
        .unwrap();
    assert_eq!(
        info["execution"]["serialization"]["lease_scope"], "client",
        "{info}"
    );
    let fg = exec(
        &e.gw,
        json!({"workspace_id": "w", "command": ["sh", "-c", "echo fg; exec sleep 600"]}),
    )
    .await;
    let fg_id = fg["process_id"].as_str().unwrap().to_string();
    read_until(&e.gw, &fg_id, 0, "fg").await;
    // Its own client is blocked ...
    let err = call(
        &e.gw,
        "apply_patch",
        json!({"workspace_id": "w", "patch": add_file_patch("mine.txt")}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::WorkspaceBusy);
    // ... another client patches and runs a command beside it.
    call_as(
        &e.gw,
        &other_client(),
        "apply_patch",
        json!({"workspace_id": "w", "patch": add_file_patch("theirs.txt")}),
    )
    .await
    .unwrap_or_else(|err| panic!("other client's patch: {err}"));
    let r = call_as(
        &e.gw,
        &other_client(),
        "exec_command",
        json!({"workspace_id": "w", "command": ["cat", "theirs.txt"], "yield_ms": 20_000}),
    )
    .await
    .unwrap_or_else(|err| panic!("other client's exec: {err}"));
    assert_eq!(r["exit_code"], 0, "{r}");
    call(&e.gw, "terminate_process", json!({"process_id": fg_id}))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_process_caps_tails_and_separates_stderr() {
    let e = env();
    // 26 letters, then a line (one stream: merged stdout and stderr need not keep their order).
    let r = exec(
        &e.gw,
        json!({"workspace_id": "w", "yield_ms": 20_000,
               "command": ["sh", "-c", "printf abcdefghijklmnopqrstuvwxyz; echo oops"]}),
    )
    .await;
    let id = r["process_id"].as_str().unwrap().to_string();
    assert_eq!(r["state"], "exited", "{r}");
    assert!(r.get("stderr_chunk").is_none(), "merged by default: {r}");
    // max_bytes caps one read; the cursor walks on.
    let a = call(
        &e.gw,
        "read_process",
        json!({"process_id": id, "cursor": 0, "max_bytes": 10}),
    )
    .await
    .unwrap();
    assert_eq!(a["chunk"], "abcdefghij");
    assert_eq!(a["cursor"], 10);
    assert_eq!(a["eof"], false);
    // tail: the last N bytes.
    let t = call(
        &e.gw,
        "read_process",
        json!({"process_id": id, "max_bytes": 8, "tail": true}),
    )
    .await
    .unwrap();
    assert_eq!(t["chunk"], "xyzoops\n");
    assert_eq!(t["eof"], true);
    let err = call(
        &e.gw,
        "read_process",
        json!({"process_id": id, "max_bytes": 0}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidArguments);

    // separate: two streams, two cursors.
    let r = exec(
        &e.gw,
        json!({"workspace_id": "w", "yield_ms": 20_000, "stderr": "separate",
               "command": ["sh", "-c", "echo out1; echo err1 >&2; echo out2"]}),
    )
    .await;
    assert_eq!(r["state"], "exited", "{r}");
    let id = r["process_id"].as_str().unwrap().to_string();
    let mut out = r["chunk"].as_str().unwrap().to_string();
    let mut err = r["stderr_chunk"].as_str().unwrap().to_string();
    let (mut c, mut ec) = (r["cursor"].clone(), r["stderr_cursor"].clone());
    let mut eof = r["eof"] == true;
    while !eof {
        let x = call(
            &e.gw,
            "read_process",
            json!({"process_id": id, "cursor": c, "stderr_cursor": ec, "wait_ms": 5_000}),
        )
        .await
        .unwrap();
        out.push_str(x["chunk"].as_str().unwrap());
        err.push_str(x["stderr_chunk"].as_str().unwrap());
        (c, ec) = (x["cursor"].clone(), x["stderr_cursor"].clone());
        eof = x["eof"] == true;
    }
    assert_eq!(out, "out1\nout2\n");
    assert_eq!(err, "err1\n");
    let x = call(
        &e.gw,
        "read_process",
        json!({"process_id": id, "cursor": 0, "stderr_cursor": 2}),
    )
    .await
    .unwrap();
    assert_eq!(x["chunk"], "out1\nout2\n");
    assert_eq!(x["stderr_chunk"], "r1\n");
    assert_eq!(x["stderr_cursor"], 5);
    // A terminal has one stream.
    let bad = call(
        &e.gw,
        "exec_command",
        json!({"workspace_id": "w", "command": ["true"], "tty": true, "stderr": "separate"}),
    )
    .await
    .unwrap_err();
    assert_eq!(bad.code, ErrorCode::InvalidArguments);
    assert!(matches!(
        codespace_engine::ToolCall::parse(
            "exec_command",
            &json!({"workspace_id": "w", "command": ["true"], "stderr": "both"}),
        ),
        Err(codespace_engine::wire::CallParseError::InvalidArguments(_))
    ));
}

/// A policies dir (`<dir>/policies`, schema beside it) with the shipped set plus the
/// cargo-tester example profile.
fn policies_with_cargo_tester(dir: &std::path::Path) -> std::path::PathBuf {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap();
    let pol = dir.join("policies");
    for sub in ["base", "profiles"] {
        std::fs::create_dir_all(pol.join(sub)).unwrap();
        for e in std::fs::read_dir(repo.join("policies").join(sub)).unwrap() {
            let p = e.unwrap().path();
            std::fs::copy(&p, pol.join(sub).join(p.file_name().unwrap())).unwrap();
        }
    }
    std::fs::copy(
        repo.join("policies/examples/profiles/cargo-tester.cedar"),
        pol.join("profiles/cargo-tester.cedar"),
    )
    .unwrap();
    std::fs::create_dir_all(dir.join("schema")).unwrap();
    std::fs::copy(
        repo.join("schema/codespace.cedarschema"),
        dir.join("schema/codespace.cedarschema"),
    )
    .unwrap();
    pol
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workspace_info_says_allowed_denied_or_conditional_with_the_policy_ids() {
    let ids = |c: &Value| -> Vec<String> {
        c["policy_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect()
    };
    // The shipped workspace-write profile: exec is conditional (hook variables are refused).
    let e = env();
    let info = call(&e.gw, "workspace_info", json!({"workspace_id": "w"}))
        .await
        .unwrap();
    let caps = &info["execution"]["capabilities"];
    assert_eq!(caps["exec"]["decision"], "conditional", "{caps}");
    assert!(ids(&caps["exec"]).contains(&"base.forbid.exec-env-hooks".to_string()));
    assert!(ids(&caps["exec"]).contains(&"workspace-write.permit.exec".to_string()));
    assert_eq!(caps["read"]["decision"], "conditional", "{caps}");
    assert!(ids(&caps["read"]).contains(&"base.forbid.secret-files".to_string()));
    assert_eq!(caps["find"]["decision"], "allowed", "{caps}");
    assert_eq!(info["execution"]["permissions"]["exec"], true);

    // cargo-tester may run only `cargo test`: exec is conditional (the old single probe of
    // `true` said it could not exec at all), write is denied.
    let tmp = tempfile::tempdir().unwrap();
    let pol = policies_with_cargo_tester(tmp.path());
    let e = env_with(Opts {
        profile: "cargo-tester",
        policies: Some((pol, json!({"cargo-tester": {"extends": "read-only"}}))),
        ..Opts::default()
    });
    let info = call(&e.gw, "workspace_info", json!({"workspace_id": "w"}))
        .await
        .unwrap();
    let caps = &info["execution"]["capabilities"];
    assert_eq!(caps["exec"]["decision"], "conditional", "{caps}");
    assert!(ids(&caps["exec"]).contains(&"cargo-tester.permit.cargo-test".to_string()));
    assert_eq!(caps["write"]["decision"], "denied", "{caps}");
    // Only forbids decided its probes (the rest are denied by default): no permit is named.
    assert!(
        ids(&caps["write"])
            .iter()
            .all(|id| id.starts_with("base.forbid.")),
        "{caps}"
    );
    assert_eq!(info["execution"]["permissions"]["exec"], true, "{info}");
    assert_eq!(info["execution"]["permissions"]["write"], false, "{info}");
    assert_eq!(info["execution"]["process"]["available"], true, "{info}");
}
