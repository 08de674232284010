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

/// `argv` under the helper with `plan`, the descriptors `keep` inherited (their close-on-exec
/// flag cleared in the child only, as the process runner does); stdout and stderr.
fn sh_keeping(plan: &SandboxPlan, ws: &Path, keep: Vec<i32>, script: &str) -> String {
    use std::os::unix::process::CommandExt;
    let mut cmd = sandboxed(plan, &["sh", "-c", script]);
    cmd.current_dir(ws);
    // SAFETY: fcntl(F_SETFD) is async-signal-safe; it only clears the flag in the child.
    unsafe {
        cmd.pre_exec(move || {
            for fd in &keep {
                if libc::fcntl(*fd, libc::F_SETFD, 0) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    format!("{}\n{}", stdout(&out), stderr(&out))
}

/// The `mnt:[inode]` name of a mount namespace descriptor, as `/proc/self/ns/mnt` reads.
fn ns_name(fd: &std::os::fd::OwnedFd) -> String {
    format!("mnt:[{}]", rustix::fs::fstat(fd).unwrap().st_ino)
}

const WRITES: &str = "echo evil > .git/hooks/pre-commit 2>/dev/null; echo hook=$?; \
    echo x > src/gen/out.rs; echo gen=$?; echo x > src/other.rs 2>/dev/null; echo src=$?; \
    echo x > top.txt; echo root=$?; readlink /proc/self/ns/mnt";

#[test]
fn a_prepared_namespace_serves_only_the_scope_it_holds() {
    let test = "a_prepared_namespace_serves_only_the_scope_it_holds";
    if !mounts_or_skip(test) {
        return;
    }
    let fx = repo_fixture();
    let mut plan = fx.plan(true, NetworkMode::Restricted);
    plan.read_only = vec![fx.ws.join(".git")];
    let ns = match codespace_runner_sandbox::prepare_mount_namespace(&plan) {
        Ok(ns) => ns,
        Err(e) => {
            codespace_test_skip::skip(
                test,
                format!("the test process cannot build a mount namespace: {e}"),
            );
            return;
        }
    };
    let fd = std::os::fd::AsRawFd::as_raw_fd(&ns);
    plan.mount_ns_fd = Some(fd);
    // The scope it was built for: the command runs in it.
    let out = sh_keeping(&plan, &fx.ws, vec![fd], WRITES);
    assert!(
        out.contains(&ns_name(&ns)),
        "not in the prepared namespace: {out}"
    );
    assert!(!out.contains("hook=0") && out.contains("root=0"), "{out}");
    assert!(!fx.ws.join(".git/hooks/pre-commit").exists());
    std::fs::remove_file(fx.ws.join("src/other.rs")).unwrap();

    // Another scope (`src` read-only too, `src/gen` writable beneath it): the helper checks,
    // leaves the prepared namespace and builds the scope it was given.
    let mut wider = plan.clone();
    wider.read_only = vec![fx.ws.join(".git"), fx.ws.join("src")];
    wider.write_paths = vec![fx.ws.join("src/gen")];
    let out = sh_keeping(&wider, &fx.ws, vec![fd], WRITES);
    assert!(
        !out.contains(&ns_name(&ns)),
        "a prepared namespace served another scope: {out}"
    );
    assert!(out.contains("gen=0") && !out.contains("src=0"), "{out}");
    assert!(
        !out.contains("hook=0") && !fx.ws.join("src/other.rs").exists(),
        "{out}"
    );

    // The host replaces `.git`: the prepared bind went with the old one, so the helper must not
    // use that namespace (the new `.git` would be writable there).
    std::fs::remove_dir_all(fx.ws.join(".git")).unwrap();
    std::fs::create_dir_all(fx.ws.join(".git/hooks")).unwrap();
    let out = sh_keeping(&plan, &fx.ws, vec![fd], WRITES);
    assert!(
        !out.contains(&ns_name(&ns)),
        "a stale namespace was used: {out}"
    );
    assert!(!out.contains("hook=0") && out.contains("root=0"), "{out}");
    assert!(!fx.ws.join(".git/hooks/pre-commit").exists());
}

#[test]
fn the_launch_hands_over_the_namespace_prepared_for_its_scope() {
    let test = "the_launch_hands_over_the_namespace_prepared_for_its_scope";
    if !mounts_or_skip(test) {
        return;
    }
    let fx = repo_fixture();
    let mut plan = fx.plan(true, NetworkMode::Restricted);
    plan.read_only = vec![fx.ws.join(".git")];
    if let Err(e) = codespace_runner_sandbox::prepare_mount_namespace(&plan) {
        codespace_test_skip::skip(
            test,
            format!("the test process cannot build a mount namespace: {e}"),
        );
        return;
    }
    let launch = |plan: &SandboxPlan| {
        codespace_runner_sandbox::SandboxCommand {
            helper: common::helper_exe().to_path_buf(),
            plan: plan.clone(),
            proxy_control: None,
        }
        .launch()
        .unwrap()
    };
    // The first launch of a scope starts the preparation and goes without; a later one gets it
    // (the hang guard only bounds a build that never ends).
    let guard = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let launched = loop {
        let l = launch(&plan);
        if l.inherit_fds.len() == 2 {
            break l;
        }
        assert!(
            std::time::Instant::now() < guard,
            "no namespace was ever prepared"
        );
        std::thread::yield_now();
    };
    let ns = &launched.inherit_fds[1];
    let decoded: SandboxPlan = SandboxPlan::from_json(&launched.env[0].1).unwrap();
    assert_eq!(
        decoded.mount_ns_fd,
        Some(std::os::fd::AsRawFd::as_raw_fd(&**ns))
    );
    let mut with_ns = plan.clone();
    with_ns.mount_ns_fd = decoded.mount_ns_fd;
    let keep = vec![std::os::fd::AsRawFd::as_raw_fd(&**ns)];
    let out = sh_keeping(&with_ns, &fx.ws, keep, WRITES);
    assert!(out.contains(&ns_name(ns)), "{out}");
    assert!(!out.contains("hook=0") && out.contains("root=0"), "{out}");
    // A plan with masks never gets one.
    let mut masked = plan.clone();
    masked.masks = vec![fx.ws.join("Cargo.toml")];
    assert_eq!(launch(&masked).inherit_fds.len(), 1);
}
