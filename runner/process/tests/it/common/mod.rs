//! Shared helpers for the process-table integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use codespace_runner_process::{ProcessTable, SpawnSpec, TableLimits};

/// Environment for test children: PATH, HOME, LANG.
pub fn child_env(home: &Path) -> Vec<(String, String)> {
    vec![
        ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
        ("HOME".into(), home.display().to_string()),
        ("LANG".into(), "C".into()),
    ]
}

/// A pipe spawn spec for `argv` in `cwd`.
pub fn spec(cwd: &Path, argv: &[&str]) -> SpawnSpec {
    SpawnSpec {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        cwd: cwd.to_path_buf(),
        env: child_env(cwd),
        tty: false,
        timeout: None,
        launcher: None,
        owner: "test".into(),
    }
}

/// A PTY spawn spec (TERM=dumb to keep escape noise down).
pub fn tty_spec(cwd: &Path, argv: &[&str]) -> SpawnSpec {
    let mut s = spec(cwd, argv);
    s.tty = true;
    s.env.push(("TERM".into(), "dumb".into()));
    s
}

/// Limits with a short kill grace, for fast tests.
pub fn fast_limits() -> TableLimits {
    TableLimits {
        kill_grace: Duration::from_millis(300),
        ..TableLimits::default()
    }
}

/// Temporary working directory.
pub fn workdir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    (dir, path)
}

/// Reads (long-polling) until `needle` appears in the accumulated text or the deadline passes.
pub async fn read_until(
    table: &ProcessTable,
    id: &str,
    cursor: &mut u64,
    needle: &str,
    within: Duration,
) -> String {
    let deadline = Instant::now() + within;
    let mut text = String::new();
    while Instant::now() < deadline {
        let chunk = table
            .read(id, *cursor, Some(Duration::from_millis(500)))
            .await
            .unwrap();
        *cursor = chunk.cursor;
        text.push_str(&chunk.chunk);
        if text.contains(needle) {
            return text;
        }
        if chunk.eof {
            break;
        }
    }
    panic!("{needle:?} not seen; output so far: {text:?}");
}

/// Reads everything until eof.
pub async fn read_all(table: &ProcessTable, id: &str) -> Vec<u8> {
    let mut cursor = 0;
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(Instant::now() < deadline, "no eof within 60 s");
        let chunk = table
            .read(id, cursor, Some(Duration::from_secs(5)))
            .await
            .unwrap();
        out.extend_from_slice(&chunk.data);
        cursor = chunk.cursor;
        if chunk.eof {
            return out;
        }
    }
}

/// State letter from /proc/<pid>/stat, None when the pid is gone.
fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.get(stat.rfind(')')? + 1..)?;
    after.split_whitespace().next()?.chars().next()
}

/// True while the pid exists and is not a zombie.
pub fn pid_alive(pid: u32) -> bool {
    !matches!(proc_state(pid), None | Some('Z') | Some('X'))
}

/// Waits (bounded polling) until every pid is gone; returns the ones still alive.
pub async fn wait_gone(pids: &[u32], within: Duration) -> Vec<u32> {
    let deadline = Instant::now() + within;
    loop {
        let alive: Vec<u32> = pids.iter().copied().filter(|p| pid_alive(*p)).collect();
        if alive.is_empty() || Instant::now() >= deadline {
            return alive;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Pids whose process group is `pgid` (from /proc).
pub fn group_members(pgid: u32) -> Vec<u32> {
    field_members(pgid, 2)
}

/// Pids whose session is `sid` (from /proc).
pub fn session_members(sid: u32) -> Vec<u32> {
    field_members(sid, 3)
}

fn field_members(value: u32, index: usize) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| {
                    let after = s.get(s.rfind(')')? + 1..)?.to_owned();
                    after.split_whitespace().nth(index)?.parse::<u32>().ok()
                })
                == Some(value)
        })
        .filter(|pid| pid_alive(*pid))
        .collect()
}

/// Waits (bounded polling) until `pred` holds.
pub async fn wait_until(within: Duration, mut pred: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if pred() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    pred()
}
