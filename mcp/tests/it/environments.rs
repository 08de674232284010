//! Environments through the real binary: a config with every worker kind loads (an environment
//! that cannot be reached is not a load error), `workspace_info.environment` reports each one
//! and its worker, a call that needs an unreachable environment fails with
//! `ENVIRONMENT_UNAVAILABLE` and an `environment_unavailable` event under its decision id, and
//! nothing runs on the host instead; a bad kind or block fails the load naming the field.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::stdio_common::{BIN, StdioServer};
use codespace_store::Store;
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;

/// A config with one workspace per environment kind, every root a directory of `dir`.
fn config(dir: &Path) -> std::path::PathBuf {
    let mut workspaces = serde_json::Map::new();
    for id in ["local", "ssh", "box", "pod", "cmd", "sock", "old"] {
        let root = dir.join("roots").join(id);
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("a.txt"), "alpha\n").unwrap();
        let env = if id == "local" { "local" } else { id };
        workspaces.insert(
            id.into(),
            json!({"root": root, "environment": env, "sandbox": "off", "secret_masking": "off"}),
        );
    }
    let cfg = json!({
        "environments": {
            // Nothing listens, the key file and known_hosts do not exist: all only a run tells.
            "ssh": {"kind": "ssh", "ssh": {"host": "Build-1.Example", "port": 1,
                    "known_hosts": dir.join("no-known-hosts"), "user": "ci"}},
            "box": {"kind": "container", "container": {"name": "no-such-container"}},
            "pod": {"kind": "kubernetes", "kubernetes": {"namespace": "agents", "pod": "hands-0",
                    "kubectl": "/nonexistent/kubectl"}},
            "cmd": {"kind": "command", "command": {"argv": ["/nonexistent/worker"]}},
            "sock": {"kind": "worker", "worker": {"socket": dir.join("no.sock")}},
            "old": {"kind": "linux-container"},
        },
        "workspaces": workspaces,
    });
    let path = dir.join("config.json");
    std::fs::write(&path, cfg.to_string()).unwrap();
    path
}

#[test]
fn unreachable_environments_load_report_their_state_and_refuse_calls_without_touching_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let store_path = dir.path().join("store.db");
    let mut s = StdioServer::serve()
        .arg("--config")
        .arg(&cfg)
        .arg("--store")
        .arg(&store_path)
        .stderr_file(dir.path().join("stderr.log"))
        .spawn();
    s.initialize("t");

    // The host: served in-process, as before.
    let info = s.tool_ok("workspace_info", json!({"workspace_id": "local"}));
    assert_eq!(
        info["environment"],
        json!({"id": "local", "kind": "host", "transport": "in-process", "host": "",
               "worker": {"state": "in-process", "version": info["version"], "restarts": 0}}),
        "{info}"
    );
    assert_eq!(
        s.tool_ok("read", json!({"workspace_id": "local", "path": "a.txt"}))["content"],
        "alpha\n"
    );

    for (ws, kind, transport, host) in [
        ("ssh", "ssh", "ssh", "build-1.example"),
        ("box", "container", "podman", "no-such-container"),
        ("pod", "kubernetes", "kubectl", "agents/hands-0"),
        ("cmd", "command", "command", ""),
        ("sock", "worker", "unix", ""),
    ] {
        let info = s.tool_ok("workspace_info", json!({"workspace_id": ws}));
        let env = &info["environment"];
        assert_eq!(env["kind"], kind, "{info}");
        assert_eq!(env["transport"], transport, "{info}");
        assert_eq!(env["host"], host, "{info}");
        assert_eq!(env["worker"]["state"], "unavailable", "{info}");
        assert!(env["worker"]["reason"].is_string(), "{info}");
        assert_eq!(info["execution"]["environment"]["kind"], kind, "{info}");

        // Reads, searches, patches and commands: refused, nothing read or written on the host.
        let root = dir.path().join("roots").join(ws);
        for (tool, args) in [
            ("read", json!({"workspace_id": ws, "path": "a.txt"})),
            ("find", json!({"workspace_id": ws})),
            ("grep", json!({"workspace_id": ws, "pattern": "alpha"})),
            (
                "apply_patch",
                json!({"workspace_id": ws,
                       "patch": "*** Begin Patch\n*** Add File: b.txt\n+b\n*** End Patch\n"}),
            ),
            (
                "exec_command",
                json!({"workspace_id": ws, "command": ["/bin/sh", "-c", "touch ran"]}),
            ),
        ] {
            let e = s.tool_err(tool, args);
            assert_eq!(e["code"], "ENVIRONMENT_UNAVAILABLE", "{ws} {tool}: {e}");
            assert!(
                e["message"].as_str().unwrap().contains(&format!("`{ws}`")),
                "{e}"
            );
        }
        assert!(!root.join("b.txt").exists() && !root.join("ran").exists());
    }

    // linux-container keeps failing closed by policy, reads served as before.
    let info = s.tool_ok("workspace_info", json!({"workspace_id": "old"}));
    assert_eq!(info["environment"]["transport"], "none", "{info}");
    let e = s.tool_err(
        "exec_command",
        json!({"workspace_id": "old", "command": ["true"]}),
    );
    assert_eq!(e["code"], "UNAUTHORIZED", "{e}");
    s.close_and_wait(std::time::Duration::from_secs(30));

    // Each refusal left an event naming its environment, under the call's decision id, and the
    // call's audit rows carry the environment's facts.
    let store = Store::open(&store_path).unwrap();
    let events = store.events(Some("environment_unavailable"), 100).unwrap();
    assert_eq!(events.len(), 25, "{events:?}");
    let ssh_read = events
        .iter()
        .find(|e| e.detail["workspace"] == "ssh" && e.detail["tool"] == "read")
        .unwrap();
    assert_eq!(ssh_read.detail["host"], "build-1.example");
    assert_eq!(ssh_read.detail["kind"], "ssh");
    let decision_id = ssh_read.detail["decision_id"].as_str().unwrap();
    let rows = store
        .query_decisions(&codespace_store::DecisionQuery {
            decision_id: Some(decision_id.to_string()),
            ..Default::default()
        })
        .unwrap();
    assert!(!rows.is_empty(), "no audit row for {decision_id}");
    let text = rows[0].request.clone().unwrap().to_string();
    assert!(
        text.contains("\"environment_transport\":\"ssh\"")
            && text.contains("\"environment_host\":\"build-1.example\""),
        "{text}"
    );
}

/// `codespace serve --config` of `cfg`: the load error on stderr.
fn load_error(dir: &Path, environments: Value) -> String {
    let root = dir.join("ws");
    std::fs::create_dir_all(&root).unwrap();
    let cfg = json!({"environments": environments,
                     "workspaces": {"w": {"root": root, "environment": "e"}}});
    let path = dir.join("bad.json");
    std::fs::write(&path, cfg.to_string()).unwrap();
    let o = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&path)
        .arg("--store")
        .arg(dir.join("bad.db"))
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!o.status.success());
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_bad_kind_or_block_fails_the_load_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    for (envs, want) in [
        (json!({"e": {"kind": "vm"}}), "environments.e.kind"),
        (
            json!({"e": {"kind": "ssh", "ssh": {"host": "h"}}}),
            "environments.e.ssh.known_hosts: required",
        ),
        (
            json!({"e": {"kind": "container", "ssh": {"host": "h"}}}),
            "environments.e.ssh: only for kind `ssh`",
        ),
        (
            json!({"e": {"kind": "kubernetes"}}),
            "environments.e.kubernetes: required for kind `kubernetes`",
        ),
    ] {
        let err = load_error(dir.path(), envs);
        assert!(err.contains(want), "want `{want}` in:\n{err}");
    }
}
