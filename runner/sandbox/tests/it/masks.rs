//! Secret masks seen from inside a sandboxed command: masked files read empty through every
//! name (`..`, symlinks, absolute paths, `cd`), masked directories are empty, the command
//! cannot unmount, move, remount, unlink or hardlink a mask, nothing leaks to the host's mount
//! table, and a mask that cannot be placed safely fails closed. Each test skips where
//! the kernel cannot.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::common;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use codespace_runner_sandbox::{MAX_MASKS, NetworkMode, SandboxPlan, probe};
use common::{Fixture, python_or_skip, run, sandbox_or_skip, sandboxed, stderr, stdout};

#[test]
fn the_probe_reports_mount_namespaces_where_the_helper_can_mask() {
    let p = probe();
    println!("probe: {p:?}");
    if rustix::process::geteuid().is_root() && std::path::Path::new("/proc/self/ns/mnt").exists() {
        assert!(p.mount_namespaces, "root with /proc/self/ns/mnt: {p:?}");
    }
    assert_eq!(
        p.masking_available(),
        p.sandbox_available() && p.mount_namespaces
    );
}

const SECRET: &str = "SECRET=hunter2";

/// True when the probe says masks can be enforced here; otherwise skips.
fn masking_or_skip(test: &str) -> bool {
    if !sandbox_or_skip(test) {
        return false;
    }
    let p = probe();
    if p.masking_available() {
        true
    } else {
        codespace_test_skip::skip(
            test,
            format!("no mount namespaces for secret masks ({p:?})"),
        );
        false
    }
}

/// A workspace holding `.env`, `sub/.env`, `secrets/key` and a few harmless files.
fn secret_fixture() -> Fixture {
    let fx = Fixture::new();
    std::fs::write(fx.ws.join(".env"), SECRET).unwrap();
    std::fs::create_dir_all(fx.ws.join("sub/deeper")).unwrap();
    std::fs::write(fx.ws.join("sub/.env"), SECRET).unwrap();
    std::fs::write(fx.ws.join("sub/ok.txt"), "visible").unwrap();
    std::fs::create_dir(fx.ws.join("secrets")).unwrap();
    std::fs::write(fx.ws.join("secrets/key"), SECRET).unwrap();
    fx
}

fn masked_plan(fx: &Fixture, write: bool) -> SandboxPlan {
    let mut plan = fx.plan(write, NetworkMode::Restricted);
    plan.masks = vec![
        fx.ws.join(".env"),
        fx.ws.join("sub/.env"),
        fx.ws.join("secrets"),
    ];
    plan
}

fn sh(plan: &SandboxPlan, ws: &Path, script: &str) -> std::process::Output {
    let mut cmd = sandboxed(plan, &["sh", "-c", script]);
    cmd.current_dir(ws);
    cmd.output().unwrap()
}

#[test]
fn masked_files_read_empty_through_every_name() {
    let name = "masked_files_read_empty_through_every_name";
    if !masking_or_skip(name) {
        return;
    }
    let fx = secret_fixture();
    std::os::unix::fs::symlink(".env", fx.ws.join("alias")).unwrap();
    std::os::unix::fs::symlink(fx.ws.join("sub/.env"), fx.ws.join("abs-alias")).unwrap();
    let plan = masked_plan(&fx, true);
    let script = format!(
        "cat .env; cat sub/.env; cat sub/deeper/../../.env; cat ./sub/../sub/.env; \
         cat alias; cat abs-alias; cat '{ws}/.env'; (cd sub && cat .env ../.env); \
         (cd sub/deeper && cat ../.env); cp .env copied && cat copied; \
         find . -name .env -exec cat {{}} \\;; echo done; cat sub/ok.txt",
        ws = fx.ws.display()
    );
    let out = sh(&plan, &fx.ws, &script);
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(!text.contains("hunter2"), "a secret leaked: {text}");
    assert!(text.contains("done"), "{text}");
    assert!(
        text.contains("visible"),
        "unmasked files stay readable: {text}"
    );
    // The host still has the real files.
    assert_eq!(std::fs::read_to_string(fx.ws.join(".env")).unwrap(), SECRET);
    assert_eq!(std::fs::read_to_string(fx.ws.join("copied")).unwrap(), "");
}

#[test]
fn python_open_of_a_masked_file_reads_nothing() {
    let name = "python_open_of_a_masked_file_reads_nothing";
    if !masking_or_skip(name) || !python_or_skip(name) {
        return;
    }
    let fx = secret_fixture();
    let plan = masked_plan(&fx, false);
    let mut cmd = sandboxed(
        &plan,
        &["python3", "-c", "print(repr(open('.env').read()))"],
    );
    let out = cmd.current_dir(&fx.ws).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "''");
}

#[test]
fn masked_directories_are_empty_even_as_the_working_directory() {
    let name = "masked_directories_are_empty_even_as_the_working_directory";
    if !masking_or_skip(name) {
        return;
    }
    let fx = secret_fixture();
    let plan = masked_plan(&fx, true);
    let out = sh(
        &plan,
        &fx.ws,
        "ls -A secrets; echo listed; cat secrets/key; touch secrets/new; echo end",
    );
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(
        !text.contains("hunter2") && !text.contains("key\n"),
        "{text}"
    );
    assert!(stdout(&out).starts_with("listed"), "{text}");
    assert!(!fx.ws.join("secrets/new").exists());
    // Started inside the masked directory: the working directory is re-resolved onto the mask.
    let mut cmd = sandboxed(&plan, &["sh", "-c", "ls -A; cat key; echo end"]);
    let out = cmd.current_dir(fx.ws.join("secrets")).output().unwrap();
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(!text.contains("hunter2"), "{text}");
    assert!(stdout(&out).starts_with("end"), "{text}");
}

#[test]
fn a_command_cannot_remove_move_or_hardlink_a_mask() {
    let name = "a_command_cannot_remove_move_or_hardlink_a_mask";
    if !masking_or_skip(name) {
        return;
    }
    let fx = secret_fixture();
    let plan = masked_plan(&fx, true);
    let out = sh(
        &plan,
        &fx.ws,
        "ln .env hard 2>&1; echo ln=$?; ln secrets/key k2 2>&1; echo lnk=$?; \
         rm -f .env 2>&1; echo rm=$?; mv sub/.env moved 2>&1; echo mv=$?; \
         echo overwrite > .env; echo end",
    );
    let text = stdout(&out);
    assert!(text.contains("ln=1"), "{text}");
    assert!(
        text.contains("cross-device"),
        "link() across a mask fails with EXDEV: {text}"
    );
    assert!(text.contains("lnk=1"), "{text}");
    assert!(text.contains("rm=1") && text.contains("mv=1"), "{text}");
    assert!(!fx.ws.join("hard").exists() && !fx.ws.join("moved").exists());
    assert_eq!(std::fs::read_to_string(fx.ws.join(".env")).unwrap(), SECRET);
    assert_eq!(
        std::fs::read_to_string(fx.ws.join("sub/.env")).unwrap(),
        SECRET
    );
}

#[test]
fn a_command_cannot_unmount_or_escape_the_mount_namespace() {
    let name = "a_command_cannot_unmount_or_escape_the_mount_namespace";
    if !masking_or_skip(name) {
        return;
    }
    let fx = secret_fixture();
    let plan = masked_plan(&fx, true);
    let script = format!(
        "umount .env 2>&1; echo umount=$?; umount -l secrets 2>&1; echo umountl=$?; \
         unshare -m true 2>&1; echo unshare=$?; unshare -Urm true 2>&1; echo unshare_user=$?; \
         cat /proc/$PPID/root'{ws}'/.env 2>&1; echo ppid=$?; \
         cat /proc/1/root'{ws}'/.env 2>&1; echo init=$?; cat .env; echo end",
        ws = fx.ws.display()
    );
    let out = sh(&plan, &fx.ws, &script);
    let text = stdout(&out);
    assert!(!text.contains("hunter2"), "{text}");
    for step in [
        "umount",
        "umountl",
        "unshare",
        "unshare_user",
        "ppid",
        "init",
    ] {
        assert!(
            !text.contains(&format!("{step}=0")),
            "`{step}` succeeded: {text}"
        );
    }
    assert!(text.ends_with("end"), "{text}");
}

#[test]
fn the_new_mount_api_and_handle_opens_are_refused() {
    let name = "the_new_mount_api_and_handle_opens_are_refused";
    if !masking_or_skip(name) || !python_or_skip(name) {
        return;
    }
    let fx = secret_fixture();
    let plan = masked_plan(&fx, true);
    // move_mount(AT_FDCWD, ".env", AT_FDCWD, "moved", 0), open_tree(AT_FDCWD, ".env",
    // OPEN_TREE_CLONE), fsopen("tmpfs", 0), mount_setattr(AT_FDCWD, ".env", 0, NULL, 0),
    // open_by_handle_at(AT_FDCWD, NULL, 0): every one must fail with EPERM.
    let py = r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
handle = 304 if os.uname().machine == "x86_64" else 265
nr = dict(move_mount=429, open_tree=428, fsopen=430, fsconfig=431, fsmount=432, fspick=433,
          mount_setattr=442, open_by_handle_at=handle)
AT = -100
calls = dict(move_mount=(AT, b".env", AT, b"moved", 0), open_tree=(AT, b".env", 1),
             fsopen=(b"tmpfs", 0), fsconfig=(0, 6, None, None, 0), fsmount=(0, 0, 0),
             fspick=(AT, b".env", 0), mount_setattr=(AT, b".env", 0, None, 0),
             open_by_handle_at=(AT, None, 0))
for name, args in calls.items():
    ctypes.set_errno(0)
    ret = libc.syscall(nr[name], *args)
    print(name, ret, ctypes.get_errno())
"#;
    let mut cmd = sandboxed(&plan, &["python3", "-c", py]);
    let out = cmd.current_dir(&fx.ws).output().unwrap();
    let text = stdout(&out);
    assert_eq!(text.lines().count(), 8, "{text}\n{}", stderr(&out));
    for line in text.lines() {
        assert!(line.ends_with(" -1 1"), "not refused with EPERM: {line}");
    }
    assert_eq!(std::fs::read_to_string(fx.ws.join(".env")).unwrap(), SECRET);
}

#[test]
fn masks_stay_inside_the_command_namespace() {
    let name = "masks_stay_inside_the_command_namespace";
    if !masking_or_skip(name) {
        return;
    }
    let fx = secret_fixture();
    let plan = masked_plan(&fx, false);
    let out = sh(
        &plan,
        &fx.ws,
        "grep -c . /proc/self/mountinfo >/dev/null; cat .env; echo end",
    );
    assert_eq!(stdout(&out), "end", "{}", stderr(&out));
    let host = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let ws = fx.ws.display().to_string();
    assert!(
        !host.lines().any(|l| l.contains(&ws)),
        "a mask propagated to the host: {host}"
    );
}

#[test]
fn a_symlink_or_missing_mask_target_is_skipped_and_nothing_outside_is_covered() {
    let name = "a_symlink_or_missing_mask_target_is_skipped_and_nothing_outside_is_covered";
    if !masking_or_skip(name) {
        return;
    }
    let fx = Fixture::new();
    let outside = fx.outside("outside.txt");
    std::fs::write(&outside, "outside-content").unwrap();
    std::os::unix::fs::symlink(&outside, fx.ws.join("key.pem")).unwrap();
    let mut plan = fx.plan(false, NetworkMode::Enabled);
    plan.extra_read = vec![fx.base.path().to_path_buf()];
    plan.masks = vec![fx.ws.join("key.pem"), fx.ws.join("gone/.env")];
    let out = sh(&plan, &fx.ws, &format!("cat '{}'", outside.display()));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "outside-content");
}

#[test]
fn a_mask_behind_a_symlinked_directory_fails_closed() {
    let name = "a_mask_behind_a_symlinked_directory_fails_closed";
    if !masking_or_skip(name) {
        return;
    }
    let fx = secret_fixture();
    std::os::unix::fs::symlink("sub", fx.ws.join("link")).unwrap();
    let marker = fx.ws.join("ran");
    let mut plan = fx.plan(true, NetworkMode::Enabled);
    plan.masks = vec![fx.ws.join("link/.env")];
    let out = sh(&plan, &fx.ws, &format!("touch '{}'", marker.display()));
    assert_eq!(out.status.code(), Some(126), "{}", stderr(&out));
    assert!(
        stderr(&out).starts_with("codespace-sandbox: secret masking"),
        "{}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains(&fx.ws.display().to_string()));
    assert!(!marker.exists(), "the target must never run");
}

#[test]
fn a_plan_with_too_many_masks_is_refused() {
    let fx = Fixture::new();
    let mut plan = fx.plan(false, NetworkMode::Restricted);
    plan.masks = (0..=MAX_MASKS)
        .map(|i| fx.ws.join(format!("f{i}")))
        .collect();
    assert!(plan.to_json().is_err());
}

#[test]
fn masks_work_for_an_unprivileged_user_through_a_user_namespace() {
    let name = "masks_work_for_an_unprivileged_user_through_a_user_namespace";
    if !masking_or_skip(name) {
        return;
    }
    if !rustix::process::geteuid().is_root() {
        codespace_test_skip::skip(name, "needs root to switch to an unprivileged uid");
        return;
    }
    if !probe().user_namespaces {
        codespace_test_skip::skip(name, "user namespaces are not available");
        return;
    }
    let fx = secret_fixture();
    make_world_accessible(&fx);
    for network in [NetworkMode::Restricted, NetworkMode::Enabled] {
        let mut plan = masked_plan(&fx, false);
        plan.network = network;
        let mut cmd = sandboxed(
            &plan,
            &[
                "sh",
                "-c",
                "id -u; cat .env sub/.env; ls -A secrets; echo end",
            ],
        );
        cmd.current_dir(&fx.ws).uid(65534).gid(65534);
        let out = cmd.output().unwrap();
        let text = stdout(&out);
        assert!(out.status.success(), "{network:?}: {}", stderr(&out));
        assert!(!text.contains("hunter2"), "{network:?}: {text}");
        assert_eq!(text, "65534\nend", "{network:?}: {}", stderr(&out));
    }
}

/// Opens the fixture to the unprivileged test uid (read + traverse; the secrets too, so only
/// the masks stand between the command and them).
fn make_world_accessible(fx: &Fixture) {
    use std::os::unix::fs::PermissionsExt;
    let mut paths: Vec<PathBuf> = vec![fx.base.path().to_path_buf(), fx.tmp.clone()];
    let mut stack = vec![fx.ws.clone()];
    while let Some(p) = stack.pop() {
        if p.is_dir() {
            for e in std::fs::read_dir(&p).unwrap() {
                stack.push(e.unwrap().path());
            }
        }
        paths.push(p);
    }
    for p in paths {
        let mode = if p.is_dir() { 0o777 } else { 0o644 };
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
}

#[test]
fn plan_without_masks_keeps_the_host_mount_namespace() {
    let name = "plan_without_masks_keeps_the_host_mount_namespace";
    if !masking_or_skip(name) {
        return;
    }
    let fx = Fixture::new();
    let plan = fx.plan(false, NetworkMode::Enabled);
    let out = run(&plan, &["readlink", "/proc/self/ns/mnt"]);
    let mine = std::fs::read_link("/proc/self/ns/mnt").unwrap();
    assert_eq!(stdout(&out), mine.display().to_string(), "{}", stderr(&out));
}

#[test]
fn top_level_names_that_are_not_utf8_are_masked_when_the_plan_asks() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let name = "top_level_names_that_are_not_utf8_are_masked_when_the_plan_asks";
    if !masking_or_skip(name) {
        return;
    }
    let fx = Fixture::new();
    let ws = |raw: &[u8]| fx.ws.join(OsStr::from_bytes(raw));
    std::fs::write(ws(b"top\xff"), SECRET).unwrap();
    std::fs::create_dir(ws(b"dir\xfe")).unwrap();
    std::fs::write(ws(b"dir\xfe").join("key"), SECRET).unwrap();
    std::fs::write(fx.ws.join("ok.txt"), "visible").unwrap();
    std::fs::create_dir(fx.ws.join("sub")).unwrap();
    std::fs::write(
        fx.ws.join("sub").join(OsStr::from_bytes(b"deep\xff")),
        "nested",
    )
    .unwrap();
    // A symlink is not masked (what it points to is decided by its own name).
    std::os::unix::fs::symlink("ok.txt", ws(b"link\xfd")).unwrap();
    let script = "t=$(printf 'top\\377'); d=$(printf 'dir\\376'); l=$(printf 'link\\375'); \
                  cat \"$t\"; cat \"$d/key\"; echo entries=$(ls -A \"$d\" | wc -l); \
                  mv \"$t\" stolen; cat stolen; cat \"$l\"; echo; \
                  cat \"sub/$(printf 'deep\\377')\"; echo; cat ok.txt; echo; echo done";
    let mut plan = fx.plan(true, NetworkMode::Restricted);
    // Without the flag nothing is masked (the host's view).
    let out = sh(&plan, &fx.ws, "cat \"$(printf 'top\\377')\"");
    assert!(stdout(&out).contains("hunter2"), "{}", stderr(&out));
    plan.mask_non_utf8_top_level = true;
    let out = sh(&plan, &fx.ws, script);
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(!text.contains("hunter2"), "a secret leaked: {text}");
    assert!(text.contains("entries=0"), "{text}");
    assert!(text.contains("done"), "{text}");
    // Only top-level entries whose names are not UTF-8, and no symlink: the rest stays readable.
    assert!(text.contains("visible\nnested\nvisible\n"), "{text}");
    // The host still has the real entries, where they were.
    assert_eq!(std::fs::read_to_string(ws(b"top\xff")).unwrap(), SECRET);
    assert_eq!(
        std::fs::read_to_string(ws(b"dir\xfe").join("key")).unwrap(),
        SECRET
    );
    assert!(!fx.ws.join("stolen").exists());
}
