//! kill -9 of the server in the middle of an apply_patch, then a restart: the start-up recovery
//! rolls every touched file back from the journal and the operation reads `unknown`; a temp file the
//! kill left behind is swept, while a user's look-alike files stay and are listed.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::stdio_common;

use codespace_runner_fs::{TEMP_PREFIX, parse_temp_name};
use rustix::process::{Pid, Signal};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};
use stdio_common::StdioServer;

/// Touches three files (update, update, delete) and adds a fourth.
const PATCH: &str = "*** Begin Patch\n*** Update File: a.txt\n@@\n-a\n+A\n*** Update File: b.txt\n@@\n-b\n+B\n*** Delete File: c.txt\n*** Add File: d.txt\n+d\n*** End Patch\n";

fn start(root: &Path, store: &Path, delay_ms: Option<u64>) -> StdioServer {
    let hook = delay_ms.map(|ms| ("CODESPACE_TEST_PATCH_STEP_DELAY_MS", ms.to_string().into()));
    start_hooked(root, store, hook)
}

/// A server on `root` and `store`, with one test-hook variable when given, initialized.
fn start_hooked(
    root: &Path,
    store: &Path,
    hook: Option<(&str, std::ffi::OsString)>,
) -> StdioServer {
    let mut b = StdioServer::serve().arg(root).arg("--store").arg(store);
    if let Some((key, value)) = hook {
        b = b.env(key, value);
    }
    let mut s = b.spawn();
    let init = s.initialize("crash-test");
    assert_eq!(init["result"]["serverInfo"]["name"], "codespace");
    s
}

/// A temp dir with a workspace `ws` holding a.txt, b.txt and c.txt (what [`PATCH`] touches)
/// and the store's path beside it.
fn three_files() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    std::fs::create_dir(&root).unwrap();
    let store = dir.path().join("store.db");
    for (name, body) in [("a.txt", "a\n"), ("b.txt", "b\n"), ("c.txt", "c\n")] {
        std::fs::write(root.join(name), body).unwrap();
    }
    (dir, root, store)
}

/// Waits until the apply replaced a.txt (its journal is written by then).
fn wait_first_file_replaced(root: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::read(root.join("a.txt")).unwrap() != b"A\n" {
        assert!(Instant::now() < deadline, "the first file never changed");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn kill_nine_mid_apply_then_restart_rolls_back() {
    if !stdio_common::test_hooks_or_skip("kill_nine_mid_apply_then_restart_rolls_back") {
        return;
    }
    let (_dir, root, store) = three_files();
    let before: Vec<(String, Vec<u8>)> = ["a.txt", "b.txt", "c.txt"]
        .iter()
        .map(|n| (n.to_string(), std::fs::read(root.join(n)).unwrap()))
        .collect();

    // Each write step sleeps 300 ms, so the apply takes seconds; kill -9 after the journal is
    // written and the first file has been replaced.
    let mut s = start(&root, &store, Some(300));
    s.send_request(
        "tools/call",
        json!({"name": "apply_patch", "arguments": {"workspace_id": "default",
            "operation_key": "crash-1",
            "patch": PATCH}}),
    );
    wait_first_file_replaced(&root);
    s.kill(); // SIGKILL
    assert_eq!(
        std::fs::read(root.join("a.txt")).unwrap(),
        b"A\n",
        "the crash left a half-applied patch"
    );

    // Restart on the same store: recovery rolls back.
    let mut s = start(&root, &store, None);
    for (name, body) in &before {
        assert_eq!(
            &std::fs::read(root.join(name)).unwrap(),
            body,
            "{name} not restored"
        );
    }
    assert!(!root.join("d.txt").exists());
    let body = s.tool_ok("operation_status", json!({"operation_key": "crash-1"}));
    assert_eq!(body["status"], "unknown", "{body}");
    // A retry with the same key replays `unknown` and is never re-applied automatically.
    let body = s.tool_ok(
        "apply_patch",
        json!({"workspace_id": "default", "operation_key": "crash-1",
            "patch": PATCH}),
    );
    assert_eq!(body["replayed"], true);
    assert_eq!(body["status"], "unknown");
    assert_eq!(std::fs::read(root.join("a.txt")).unwrap(), b"a\n");
    let _ = s.close_and_wait(Duration::from_secs(30));
}

#[test]
fn a_second_server_on_the_same_store_leaves_a_live_apply_alone() {
    if !stdio_common::test_hooks_or_skip(
        "a_second_server_on_the_same_store_leaves_a_live_apply_alone",
    ) {
        return;
    }
    let (dir, root, store) = three_files();
    // Server A holds its apply after the first write step until the gate file exists.
    let gate = dir.path().join("gate");
    let mut a = start_hooked(
        &root,
        &store,
        Some(("CODESPACE_TEST_PATCH_GATE", gate.clone().into_os_string())),
    );
    let id = a.send_request(
        "tools/call",
        json!({"name": "apply_patch", "arguments": {"workspace_id": "default", "patch": PATCH}}),
    );
    wait_first_file_replaced(&root);
    // Server B starts on the same store while A's journal is open (A is a live process): its
    // start-up recovery must not roll A's apply back.
    let mut b = start(&root, &store, None);
    assert_eq!(
        std::fs::read(root.join("a.txt")).unwrap(),
        b"A\n",
        "B rolled back A's apply"
    );
    assert!(
        root.join("c.txt").exists() && !root.join("d.txt").exists(),
        "A is still mid-apply"
    );
    std::fs::write(&gate, "").unwrap();
    let reply = a.response(id);
    let body = &reply["result"]["structuredContent"];
    assert_eq!(body["status"], "applied", "{reply}");
    assert_eq!(std::fs::read(root.join("a.txt")).unwrap(), b"A\n");
    assert_eq!(std::fs::read(root.join("b.txt")).unwrap(), b"B\n");
    assert!(!root.join("c.txt").exists());
    assert_eq!(std::fs::read(root.join("d.txt")).unwrap(), b"d\n");
    let _ = b.close_and_wait(Duration::from_secs(30));
    let _ = a.close_and_wait(Duration::from_secs(30));
}

/// Server temp file names in `dir` (not recursive): `.codespace-tmp-<instance>-<n>` with an instance id
/// other than `unknown`.
fn server_temps(dir: &Path, unknown: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| parse_temp_name(n).is_some_and(|(id, _)| id != unknown))
        .collect()
}

/// Waits until every thread of `pid` is in the stopped state (`T` in `/proc/<pid>/task/*/stat`),
/// which a SIGSTOP reaches asynchronously.
fn wait_all_threads_stopped(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
        let all_stopped = tasks.filter_map(Result::ok).all(|t| {
            let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
            // The state follows the parenthesised command name, which may hold spaces.
            let state = stat
                .rsplit_once(") ")
                .and_then(|(_, rest)| rest.chars().next());
            matches!(state, Some('T' | 't' | 'Z' | 'X') | None)
        });
        if all_stopped {
            return;
        }
        assert!(Instant::now() < deadline, "server threads did not stop");
        std::thread::yield_now();
    }
}

fn signal(pid: u32, sig: Signal) {
    let pid = Pid::from_raw(i32::try_from(pid).unwrap()).unwrap();
    rustix::process::kill_process(pid, sig).unwrap();
}

#[test]
fn kill_nine_while_a_temp_file_exists_then_restart_leaves_none() {
    const UNKNOWN: &str = "00000000000000cc";
    const FILES: usize = 30;
    // 30 files of 256 KiB: the apply spends most of its time writing temp files.
    let body: String = format!("+{}\n", "x".repeat(63)).repeat(4096);
    let mut patch = String::from("*** Begin Patch\n");
    for i in 0..FILES {
        patch.push_str(&format!("*** Add File: big{i:02}.txt\n{body}"));
    }
    patch.push_str("*** End Patch\n");

    let mut caught = None;
    for attempt in 0..5 {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        std::fs::create_dir(&root).unwrap();
        let store = dir.path().join("store.db");
        // A user's files that only look like server temp files.
        let look_alikes = [
            format!("{TEMP_PREFIX}foo"),
            format!("{TEMP_PREFIX}{UNKNOWN}-1"),
        ];
        for n in &look_alikes {
            std::fs::write(root.join(n), "user data\n").unwrap();
        }
        std::fs::write(root.join("keep.txt"), "keep\n").unwrap();

        let mut s = start(&root, &store, None);
        s.send_request(
            "tools/call",
            json!({"name": "apply_patch", "arguments": {"workspace_id": "default",
                "operation_key": "big-1", "patch": patch}}),
        );
        // Wait for a server temp file to appear; stop the server (SIGSTOP freezes every thread at
        // once) and, if the file is still there, kill it; if it was renamed meanwhile, go on.
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut temp = None;
        while Instant::now() < deadline && !root.join(format!("big{:02}.txt", FILES - 1)).exists() {
            if server_temps(&root, UNKNOWN).is_empty() {
                std::thread::yield_now();
                continue;
            }
            signal(s.pid(), Signal::STOP);
            // kill(2) returns before every thread has stopped: a thread mid-rename could still
            // finish it. Look only once the kernel reports every thread stopped.
            wait_all_threads_stopped(s.pid());
            let still = server_temps(&root, UNKNOWN);
            if still.is_empty() {
                signal(s.pid(), Signal::CONT);
                continue;
            }
            s.kill(); // SIGKILL
            temp = Some(still);
            break;
        }
        let Some(temp) = temp else {
            eprintln!("attempt {attempt}: the apply finished before a temp file was caught; again");
            continue;
        };
        assert!(
            temp.iter().all(|n| root.join(n).exists()),
            "the kill left a temp file: {temp:?}"
        );

        // Restart: the journal rolls the added files back, the sweep removes the temp file.
        let mut s = start(&root, &store, None);
        let left = server_temps(&root, UNKNOWN);
        assert!(left.is_empty(), "temp files after restart: {left:?}");
        for i in 0..FILES {
            assert!(
                !root.join(format!("big{i:02}.txt")).exists(),
                "big{i:02}.txt"
            );
        }
        for n in &look_alikes {
            assert_eq!(
                std::fs::read_to_string(root.join(n)).unwrap(),
                "user data\n"
            );
        }
        let found = s.tool_ok("find", json!({"workspace_id": "default"}));
        let mut expected: Vec<String> = look_alikes.to_vec();
        expected.push("keep.txt".into());
        expected.sort();
        assert_eq!(found["paths"], json!(expected), "{found}");
        let op = s.tool_ok("operation_status", json!({"operation_key": "big-1"}));
        assert_eq!(op["status"], "unknown", "{op}");
        assert!(s.close_and_wait(Duration::from_secs(30)).success());
        // Two starts recorded: the killed one (swept by the restart), the restart (shut down
        // cleanly: nothing left behind, so no later start walks the tree for it).
        let rows = codespace_store::Store::open(&store)
            .unwrap()
            .instances()
            .unwrap();
        assert_eq!(rows.len(), 2, "{rows:?}");
        let swept = rows
            .iter()
            .filter(|r| r.swept_ms.is_some() && r.ended_ms.is_none());
        let ended = rows
            .iter()
            .filter(|r| r.ended_ms.is_some() && r.swept_ms.is_none());
        assert_eq!((swept.count(), ended.count()), (1, 1), "{rows:?}");
        caught = Some(temp);
        break;
    }
    assert!(
        caught.is_some(),
        "five applies of {FILES} files finished without a temp file ever being seen"
    );
}
