//! The helper's contract: fail closed with exit 126 and one `codespace-sandbox:` line, env hygiene,
//! probe, hardening, and the cost of going through the helper.
// Helper functions of this test crate are test code too (clippy.toml only covers #[test] fns).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::common;

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use codespace_runner_sandbox::{
    HELPER_ARG, NetworkMode, PLAN_ENV, SandboxPlan, launcher_parts, probe, scrub_env,
};
use common::{Fixture, helper_exe, run, sandbox_or_skip, sandboxed, stderr, stdout};

fn assert_helper_failure(out: &Output, code: i32) {
    assert_eq!(out.status.code(), Some(code), "{}", stderr(out));
    let err = stderr(out);
    assert!(err.starts_with("codespace-sandbox: "), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn forced_landlock_unavailable_exits_126_and_target_never_runs() {
    let name = "forced_landlock_unavailable_exits_126_and_target_never_runs";
    if !sandbox_or_skip(name) {
        return;
    }
    let fx = Fixture::new();
    let marker = fx.ws.join("marker");
    let script = format!("touch '{}'", marker.display());
    let mut plan = fx.plan(true, NetworkMode::Enabled);

    // Control: the same plan without the hook runs the target and creates the marker.
    let out = run(&plan, &["sh", "-c", &script]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(marker.exists());
    std::fs::remove_file(&marker).unwrap();

    plan.force_landlock_unavailable = true;
    let out = run(&plan, &["sh", "-c", &script]);
    assert_helper_failure(&out, 126);
    assert!(stderr(&out).contains("Landlock"), "{}", stderr(&out));
    assert!(!marker.exists(), "the target must never run");
}

#[test]
fn missing_plan_or_separator_fails_closed() {
    let fx = Fixture::new();
    let marker = fx.ws.join("marker");
    let touch = format!("touch '{}'", marker.display());

    let no_plan = Command::new(helper_exe())
        .args([HELPER_ARG, "--", "sh", "-c", &touch])
        .env_remove(PLAN_ENV)
        .output()
        .unwrap();
    assert_helper_failure(&no_plan, 126);
    assert!(stderr(&no_plan).contains(PLAN_ENV));

    let bad_plan = Command::new(helper_exe())
        .args([HELPER_ARG, "--", "sh", "-c", &touch])
        .env(PLAN_ENV, "{\"workspace_root\":\"relative\"}")
        .output()
        .unwrap();
    assert_helper_failure(&bad_plan, 126);

    let (program, args, env) =
        launcher_parts(&fx.plan(true, NetworkMode::Enabled), helper_exe()).unwrap();
    let no_separator = Command::new(program)
        .args(args)
        .args(["sh", "-c", &touch])
        .envs(env)
        .output()
        .unwrap();
    assert_helper_failure(&no_separator, 126);
    assert!(!marker.exists());
}

#[test]
fn missing_workspace_fails_closed_without_absolute_paths() {
    let fx = Fixture::new();
    let mut plan = fx.plan(true, NetworkMode::Enabled);
    plan.workspace_root = fx.outside("does-not-exist");
    let out = run(&plan, &["true"]);
    assert_helper_failure(&out, 126);
    let err = stderr(&out);
    assert!(err.contains("workspace root"), "{err}");
    assert!(!err.contains(fx.base.path().to_str().unwrap()), "{err}");
}

#[test]
fn unknown_program_exits_127() {
    let name = "unknown_program_exits_127";
    if !sandbox_or_skip(name) {
        return;
    }
    let fx = Fixture::new();
    let out = run(
        &fx.plan(false, NetworkMode::Enabled),
        &["no-such-program-xyz"],
    );
    assert_helper_failure(&out, 127);
    assert!(stderr(&out).contains("no-such-program-xyz"));
}

#[test]
fn plan_variable_is_removed_and_scrubbed_env_has_no_ld_preload() {
    let name = "plan_variable_is_removed_and_scrubbed_env_has_no_ld_preload";
    if !sandbox_or_skip(name) {
        return;
    }
    let mut env = vec![
        ("LD_PRELOAD".to_owned(), "/nonexistent/evil.so".to_owned()),
        ("LD_LIBRARY_PATH".to_owned(), "/nonexistent".to_owned()),
        ("KEEP_ME".to_owned(), "1".to_owned()),
    ];
    scrub_env(&mut env);
    assert_eq!(env, vec![("KEEP_ME".to_owned(), "1".to_owned())]);

    let fx = Fixture::new();
    let out = sandboxed(&fx.plan(false, NetworkMode::Enabled), &["env"])
        .env_clear()
        .envs(env)
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env(
            PLAN_ENV,
            fx.plan(false, NetworkMode::Enabled).to_json().unwrap(),
        )
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.lines().any(|l| l == "KEEP_ME=1"), "{text}");
    assert!(!text.contains("LD_PRELOAD"), "{text}");
    assert!(!text.contains(PLAN_ENV), "{text}");
}

/// Whether the kernel has Landlock enabled, from sources independent of `probe()`: the
/// securityfs LSM list, else the kernel config plus an `lsm=` boot override. `None` if unknown.
fn kernel_has_landlock() -> Option<bool> {
    if let Ok(lsm) = std::fs::read_to_string("/sys/kernel/security/lsm") {
        return Some(lsm.split(',').any(|m| m.trim() == "landlock"));
    }
    let config = Command::new("zcat").arg("/proc/config.gz").output().ok()?;
    let config = String::from_utf8_lossy(&config.stdout).into_owned();
    if config.is_empty() {
        return None;
    }
    if !config.lines().any(|l| l == "CONFIG_SECURITY_LANDLOCK=y") {
        return Some(false);
    }
    let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap_or_default();
    let lsm_list = cmdline
        .split_whitespace()
        .find_map(|arg| arg.strip_prefix("lsm=").map(str::to_owned))
        .or_else(|| {
            config.lines().find_map(|l| {
                l.strip_prefix("CONFIG_LSM=")
                    .map(|v| v.trim_matches('"').to_owned())
            })
        })?;
    Some(lsm_list.split(',').any(|m| m == "landlock"))
}

#[test]
fn probe_reports_landlock_abi_when_the_kernel_has_it() {
    let name = "probe_reports_landlock_abi_when_the_kernel_has_it";
    let p = probe();
    println!("probe: {p:?}");
    match kernel_has_landlock() {
        None => codespace_test_skip::skip(
            name,
            "cannot tell independently whether Landlock is enabled \
             (no /sys/kernel/security/lsm, no /proc/config.gz)",
        ),
        Some(false) => assert_eq!(p.landlock_abi, None, "{p:?}"),
        Some(true) => {
            assert!(p.landlock_abi.is_some_and(|abi| abi >= 1), "{p:?}");
            assert!(p.seccomp, "{p:?}");
            assert!(p.sandbox_available());
        }
    }
}

#[test]
fn harden_current_process_makes_a_child_non_dumpable_without_cores() {
    let out = Command::new(helper_exe())
        .arg("__harden-check")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "dumpable=0 core=0/0");
}

fn time_runs(n: u32, mut make: impl FnMut() -> Command) -> Duration {
    let start = Instant::now();
    for _ in 0..n {
        let status = make().status().unwrap();
        assert!(status.success());
    }
    start.elapsed()
}

#[test]
fn measure_helper_overhead() {
    let name = "measure_helper_overhead";
    if !sandbox_or_skip(name) {
        return;
    }
    let fx = Fixture::new();
    for mode in [NetworkMode::Enabled, NetworkMode::Restricted] {
        let plan: SandboxPlan = fx.plan(true, mode);
        let plain = time_runs(50, || Command::new("true"));
        let helper = time_runs(50, || sandboxed(&plan, &["true"]));
        println!(
            "MEASURE {mode:?}: plain `true` {:?}/run, helper `true` {:?}/run (50 runs each)",
            plain / 50,
            helper / 50
        );
    }
}
