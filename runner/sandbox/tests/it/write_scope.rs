//! Write scopes and pinned mask ancestors seen from inside a sandboxed command: a read-only path
//! (`.git`) beneath a writable workspace refuses every write, rename and removal; a scope of
//! only `target/` writes nothing else; a writable directory beneath a read-only one stays
//! writable; a secret's parent directory cannot be renamed away from its mask. Each test skips
//! where the kernel cannot (`codespace_test_skip`: fails under `CODESPACE_REQUIRE_ISOLATION=1`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::common;

use std::path::Path;

use codespace_runner_sandbox::{NetworkMode, SandboxPlan, probe};
use common::{Fixture, sandbox_or_skip, sandboxed, stderr, stdout};

/// True when the probe says mount namespaces (masks, read-only paths) work here.
fn mounts_or_skip(test: &str) -> bool {
    if !sandbox_or_skip(test) {
        return false;
    }
    let p = probe();
    if p.masking_available() {
        return true;
    }
    codespace_test_skip::skip(test, format!("no mount namespaces ({p:?})"));
    false
}

fn sh(plan: &SandboxPlan, ws: &Path, script: &str) -> String {
    let mut cmd = sandboxed(plan, &["sh", "-c", script]);
    cmd.current_dir(ws);
    let out = cmd.output().unwrap();
    format!("{}\n{}", stdout(&out), stderr(&out))
}

/// A workspace with a `.git` (hooks, config), `src/`, `target/` and `Cargo.toml`.
fn repo_fixture() -> Fixture {
    let fx = Fixture::new();
    for d in [".git/hooks", "src/gen", "target"] {
        std::fs::create_dir_all(fx.ws.join(d)).unwrap();
    }
    std::fs::write(fx.ws.join(".git/config"), "[core]\n").unwrap();
    std::fs::write(fx.ws.join("src/lib.rs"), "").unwrap();
    std::fs::write(fx.ws.join("Cargo.toml"), "[package]\n").unwrap();
    fx
}

/// `status=N` of each shell step, for exact assertions.
fn step(name: &str, cmd: &str) -> String {
    format!("{cmd} 2>/dev/null; echo {name}=$?; ")
}

#[test]
fn a_read_only_git_refuses_writes_renames_and_removal() {
    let test = "a_read_only_git_refuses_writes_renames_and_removal";
    if !mounts_or_skip(test) {
        return;
    }
    let fx = repo_fixture();
    let mut plan = fx.plan(true, NetworkMode::Restricted);
    plan.read_only = vec![fx.ws.join(".git")];
    let script = [
        step("hook", "echo evil > .git/hooks/pre-commit"),
        step("config", "echo '[core] hooksPath=/tmp' >> .git/config"),
        step("mv", "mv .git moved-git"),
        step("rm", "rm -rf .git"),
        step("mkdir", "mkdir .git/x"),
        step("file", "echo ok > ok.txt"),
        step("src", "echo ok > src/new.rs"),
    ]
    .concat();
    let out = sh(&plan, &fx.ws, &script);
    for refused in ["hook", "config", "mv", "rm", "mkdir"] {
        assert!(
            !out.contains(&format!("{refused}=0")),
            "{refused} succeeded: {out}"
        );
    }
    assert!(out.contains("file=0") && out.contains("src=0"), "{out}");
    assert!(!fx.ws.join(".git/hooks/pre-commit").exists());
    assert_eq!(
        std::fs::read_to_string(fx.ws.join(".git/config")).unwrap(),
        "[core]\n"
    );
    assert!(!fx.ws.join("moved-git").exists());
    assert!(fx.ws.join("ok.txt").exists());
}

#[test]
fn a_scope_of_only_target_writes_nothing_else() {
    let test = "a_scope_of_only_target_writes_nothing_else";
    if !sandbox_or_skip(test) {
        return;
    }
    let fx = repo_fixture();
    let mut plan = fx.plan(false, NetworkMode::Restricted);
    plan.write_paths = vec![fx.ws.join("target")];
    let script = [
        step(
            "target",
            "mkdir -p target/debug && echo x > target/debug/out",
        ),
        step("src", "touch src/x"),
        step("bak", "touch Cargo.toml.bak"),
        step("hook", "touch .git/hooks/y"),
        step("tmp", "touch \"$TMPDIR/t\""),
    ]
    .concat();
    let mut cmd = sandboxed(&plan, &["sh", "-c", &script]);
    cmd.current_dir(&fx.ws).env("TMPDIR", &fx.tmp);
    let o = cmd.output().unwrap();
    let out = format!("{}\n{}", stdout(&o), stderr(&o));
    assert!(out.contains("target=0"), "{out}");
    assert!(out.contains("tmp=0"), "the temp dir stays writable: {out}");
    for refused in ["src", "bak", "hook"] {
        assert!(
            out.contains(&format!("{refused}=1")),
            "{refused} did not fail: {out}"
        );
    }
    assert!(fx.ws.join("target/debug/out").exists());
    assert!(!fx.ws.join("src/x").exists() && !fx.ws.join("Cargo.toml.bak").exists());
}

#[test]
fn a_writable_directory_beneath_a_read_only_one_stays_writable() {
    let test = "a_writable_directory_beneath_a_read_only_one_stays_writable";
    if !mounts_or_skip(test) {
        return;
    }
    let fx = repo_fixture();
    let mut plan = fx.plan(true, NetworkMode::Restricted);
    plan.read_only = vec![fx.ws.join("src"), fx.ws.join(".git")];
    plan.write_paths = vec![fx.ws.join("src/gen")];
    let script = [
        step("gen", "echo x > src/gen/out.rs"),
        step("src", "echo x > src/other.rs"),
        step("mvgen", "mv src/gen src/gen2"),
        step("root", "echo x > top.txt"),
    ]
    .concat();
    let out = sh(&plan, &fx.ws, &script);
    assert!(out.contains("gen=0") && out.contains("root=0"), "{out}");
    assert!(!out.contains("src=0") && !out.contains("mvgen=0"), "{out}");
    assert!(fx.ws.join("src/gen/out.rs").exists());
    assert!(!fx.ws.join("src/other.rs").exists());
}

#[test]
fn a_read_only_path_that_is_a_symlink_refuses_the_command() {
    let test = "a_read_only_path_that_is_a_symlink_refuses_the_command";
    if !mounts_or_skip(test) {
        return;
    }
    let fx = Fixture::new();
    std::fs::create_dir(fx.ws.join("real-git")).unwrap();
    std::os::unix::fs::symlink("real-git", fx.ws.join(".git")).unwrap();
    let mut plan = fx.plan(true, NetworkMode::Restricted);
    plan.read_only = vec![fx.ws.join(".git")];
    let mut cmd = sandboxed(&plan, &["sh", "-c", "echo ran"]);
    let out = cmd.current_dir(&fx.ws).output().unwrap();
    assert!(!out.status.success());
    assert!(!stdout(&out).contains("ran"), "{}", stdout(&out));
    assert!(stderr(&out).contains("symlink"), "{}", stderr(&out));
}

#[test]
fn a_write_path_swapped_for_a_symlink_grants_nothing_outside() {
    let test = "a_write_path_swapped_for_a_symlink_grants_nothing_outside";
    if !sandbox_or_skip(test) {
        return;
    }
    let fx = Fixture::new();
    let outside = fx.outside("victim");
    std::fs::create_dir(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, fx.ws.join("target")).unwrap();
    let mut plan = fx.plan(false, NetworkMode::Restricted);
    plan.extra_read = vec![outside.clone()];
    plan.write_paths = vec![fx.ws.join("target")];
    let out = sh(&plan, &fx.ws, &step("w", "touch target/pwned"));
    assert!(!out.contains("w=0"), "{out}");
    assert!(!outside.join("pwned").exists());
}

#[test]
fn a_secrets_parent_cannot_be_renamed_away_from_its_mask() {
    let test = "a_secrets_parent_cannot_be_renamed_away_from_its_mask";
    if !mounts_or_skip(test) {
        return;
    }
    let fx = Fixture::new();
    std::fs::create_dir_all(fx.ws.join(".aws")).unwrap();
    std::fs::write(fx.ws.join(".aws/credentials"), "aws_secret=hunter2").unwrap();
    std::fs::create_dir_all(fx.ws.join("config/prod")).unwrap();
    std::fs::write(fx.ws.join("config/prod/db.yaml"), "password: hunter2").unwrap();
    std::fs::write(fx.ws.join("config/ok.yaml"), "visible").unwrap();
    let mut plan = fx.plan(true, NetworkMode::Restricted);
    plan.masks = vec![
        fx.ws.join(".aws/credentials"),
        fx.ws.join("config/prod/db.yaml"),
    ];
    let script = [
        step("aws", "mv .aws aws-moved"),
        step("config", "mv config cfg"),
        step("prod", "mv config/prod config/p2"),
        step("rmdir", "rm -rf config/prod"),
        step("cpmv", "cp -r .aws aws-copy && cat aws-copy/credentials"),
        step("ok", "mv config/ok.yaml config/ok2.yaml"),
        "cat .aws/credentials config/prod/db.yaml aws-moved/credentials cfg/prod/db.yaml; echo end"
            .to_string(),
    ]
    .concat();
    let out = sh(&plan, &fx.ws, &script);
    assert!(!out.contains("hunter2"), "a secret leaked: {out}");
    for refused in ["aws", "config", "prod", "rmdir"] {
        assert!(
            !out.contains(&format!("{refused}=0")),
            "{refused} succeeded: {out}"
        );
    }
    assert!(out.contains("ok=0") && out.contains("end"), "{out}");
    // The host keeps every secret at the name its rule matches.
    assert!(fx.ws.join(".aws/credentials").exists());
    assert!(fx.ws.join("config/prod/db.yaml").exists());
    assert!(!fx.ws.join("aws-moved").exists() && !fx.ws.join("cfg").exists());
}
