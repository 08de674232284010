//! Landlock filesystem rules seen from a sandboxed command: what it may read and write.
// Helper functions of this test crate are test code too (clippy.toml only covers #[test] fns).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::common;

use codespace_runner_sandbox::NetworkMode;
use common::{Fixture, PY_WRITE, python_or_skip, run, sandbox_or_skip, stderr, stdout};

#[test]
fn write_outside_workspace_fails_and_file_does_not_appear() {
    let name = "write_outside_workspace_fails_and_file_does_not_appear";
    if !sandbox_or_skip(name) || !python_or_skip(name) {
        return;
    }
    let fx = Fixture::new();
    let target = fx.outside("outside.txt");
    let out = run(
        &fx.plan(true, NetworkMode::Restricted),
        &["python3", "-c", PY_WRITE, target.to_str().unwrap()],
    );
    let text = stdout(&out);
    assert!(
        text == "errno 13" || text == "errno 30",
        "{text} / {}",
        stderr(&out)
    );
    assert!(!target.exists());
}

#[test]
fn write_inside_workspace_works_when_writable() {
    let name = "write_inside_workspace_works_when_writable";
    if !sandbox_or_skip(name) {
        return;
    }
    let fx = Fixture::new();
    let target = fx.ws.join("sub/inside.txt");
    let script = format!(
        "mkdir -p '{}' && echo hello > '{}'",
        fx.ws.join("sub").display(),
        target.display()
    );
    let out = run(
        &fx.plan(true, NetworkMode::Restricted),
        &["sh", "-c", &script],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "hello\n");
}

#[test]
fn write_inside_workspace_fails_when_read_only_but_reads_work() {
    let name = "write_inside_workspace_fails_when_read_only_but_reads_work";
    if !sandbox_or_skip(name) || !python_or_skip(name) {
        return;
    }
    let fx = Fixture::new();
    let existing = fx.ws.join("existing.txt");
    std::fs::write(&existing, "keep").unwrap();
    let plan = fx.plan(false, NetworkMode::Restricted);

    let new_file = fx.ws.join("new.txt");
    let out = run(
        &plan,
        &["python3", "-c", PY_WRITE, new_file.to_str().unwrap()],
    );
    assert_eq!(stdout(&out), "errno 13", "{}", stderr(&out));
    assert!(!new_file.exists());

    let out = run(
        &plan,
        &["python3", "-c", PY_WRITE, existing.to_str().unwrap()],
    );
    assert_eq!(stdout(&out), "errno 13");
    let out = run(&plan, &["rm", "-f", existing.to_str().unwrap()]);
    assert!(!out.status.success());
    assert_eq!(std::fs::read_to_string(&existing).unwrap(), "keep");

    let out = run(&plan, &["cat", existing.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "keep");
}

#[test]
fn tmp_dir_is_writable_even_with_read_only_workspace() {
    let name = "tmp_dir_is_writable_even_with_read_only_workspace";
    if !sandbox_or_skip(name) {
        return;
    }
    let fx = Fixture::new();
    let target = fx.tmp.join("scratch.txt");
    let script = format!(
        "echo scratch > '{}' && rm '{}' && echo again > '{}'",
        target.display(),
        target.display(),
        target.display()
    );
    let out = run(
        &fx.plan(false, NetworkMode::Restricted),
        &["sh", "-c", &script],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "again\n");
}

#[test]
fn sandbox_survives_exec_chains() {
    let name = "sandbox_survives_exec_chains";
    if !sandbox_or_skip(name) {
        return;
    }
    let fx = Fixture::new();
    let target = fx.outside("chained.txt");
    let inner = format!("bash -c 'echo x > {}'", target.display());
    let out = run(
        &fx.plan(true, NetworkMode::Enabled),
        &["bash", "-c", &inner],
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("Permission denied"),
        "{}",
        stderr(&out)
    );
    assert!(!target.exists());
}

#[test]
fn device_files_stay_usable() {
    let name = "device_files_stay_usable";
    if !sandbox_or_skip(name) {
        return;
    }
    let fx = Fixture::new();
    // `>` opens for writing (with O_TRUNC); reads of the random/zero devices keep working.
    let script =
        "echo x > /dev/null && head -c 4 /dev/zero | wc -c && head -c 4 /dev/urandom | wc -c";
    let out = run(
        &fx.plan(false, NetworkMode::Restricted),
        &["sh", "-c", script],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out).split_whitespace().collect::<Vec<_>>(),
        vec!["4", "4"]
    );
}

#[test]
fn allocating_a_new_pty_is_refused() {
    let name = "allocating_a_new_pty_is_refused";
    if !sandbox_or_skip(name) || !python_or_skip(name) {
        return;
    }
    let fx = Fixture::new();
    // /dev/ptmx and /dev/pts are not granted: a command cannot make (or reach) another terminal.
    // A command that needs a terminal asks for one (`tty: true`) and gets only its own.
    let script = "import os\n\
try:\n    os.openpty(); print('ok')\n\
except OSError as e:\n    print('errno', e.errno)";
    let out = run(
        &fx.plan(true, NetworkMode::Restricted),
        &["python3", "-c", script],
    );
    assert_eq!(stdout(&out), "errno 13", "{}", stderr(&out));
}

#[test]
fn reads_are_limited_to_the_allow_list() {
    let name = "reads_are_limited_to_the_allow_list";
    if !sandbox_or_skip(name) {
        return;
    }
    let fx = Fixture::new();
    // Stand-ins for the server's own files: a store, a config, a token file beside the workspace.
    let secret_dir = fx.outside("server-state");
    std::fs::create_dir(&secret_dir).unwrap();
    let store = secret_dir.join("codespace.db");
    std::fs::write(&store, "store").unwrap();
    let declared = fx.outside("toolchain");
    std::fs::create_dir(&declared).unwrap();
    std::fs::write(declared.join("VERSION"), "1.0\n").unwrap();
    std::fs::write(fx.ws.join("in-ws.txt"), "ws\n").unwrap();
    std::fs::write(fx.home.join(".profile-ish"), "home\n").unwrap();
    let mut plan = fx.plan(false, NetworkMode::Restricted);
    plan.extra_read = vec![declared.clone()];
    let script = format!(
        "cat '{store}' || echo store-denied; ls '{dir}' || echo dir-denied; \
         cat '{declared}/VERSION'; cat in-ws.txt; cat \"$HOME/.profile-ish\"; \
         ls / >/dev/null 2>&1 || echo root-denied; head -c 3 /etc/hostname >/dev/null && echo etc-ok; \
         ls /usr/bin >/dev/null && echo usr-ok; echo to-stderr > /dev/stderr",
        store = store.display(),
        dir = secret_dir.display(),
        declared = declared.display(),
    );
    let out = common::sandboxed(&plan, &["sh", "-c", &script])
        .current_dir(&fx.ws)
        .env("HOME", &fx.home)
        .output()
        .unwrap();
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        vec![
            "store-denied",
            "dir-denied",
            "1.0",
            "ws",
            "home",
            "root-denied",
            "etc-ok",
            "usr-ok"
        ],
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("Permission denied"),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("to-stderr"), "{}", stderr(&out));
}

#[test]
fn home_dir_is_writable_and_other_dirs_beside_it_are_not() {
    let name = "home_dir_is_writable_and_other_dirs_beside_it_are_not";
    if !sandbox_or_skip(name) {
        return;
    }
    let fx = Fixture::new();
    let script = format!(
        "echo h > '{home}/.history' && echo home-ok; echo x > '{base}/beside' || echo beside-denied",
        home = fx.home.display(),
        base = fx.base.path().display()
    );
    let out = run(
        &fx.plan(false, NetworkMode::Restricted),
        &["sh", "-c", &script],
    );
    assert_eq!(
        stdout(&out).lines().collect::<Vec<_>>(),
        vec!["home-ok", "beside-denied"],
        "{}",
        stderr(&out)
    );
    assert_eq!(
        std::fs::read_to_string(fx.home.join(".history")).unwrap(),
        "h\n"
    );
    assert!(!fx.base.path().join("beside").exists());
}
