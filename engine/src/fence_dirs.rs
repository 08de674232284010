//! Where the path index's fence directories live (see [`crate::index`]), and the start-up sweep of
//! those a server that did not exit cleanly left behind.
//!
//! A fence directory is created per workspace index and removed when the index is dropped; a
//! server killed with `kill -9` (or ending without dropping its gateway) leaves its directories
//! behind. With a store location they live in `<store dir>/fences/`, named
//! `<pid>-<process start ticks>-<random>`, and each start removes every one whose process is gone
//! (pid and start time tell a live process from a dead one or a reused pid). A name that does not
//! parse is not ours: never touched. Without a store location (in-process uses), the system temp
//! dir is used and only the normal drop removes them.

use std::path::{Path, PathBuf};

/// The fences directory beside the store.
const FENCES_DIR: &str = "fences";

/// Start time of process `pid` in clock ticks since boot (field 22 of `/proc/<pid>/stat`).
fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces and parentheses): field 3 (state)
    // first, field 22 (starttime) 19 places later.
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// `<pid>-<start ticks>-` of this process.
fn own_prefix() -> Option<String> {
    let pid = std::process::id();
    Some(format!("{pid}-{}-", start_ticks(pid)?))
}

/// Whether a fence directory name belongs to a process that no longer runs. `None`: not a name
/// of ours.
fn is_dead(name: &str) -> Option<bool> {
    let mut parts = name.splitn(3, '-');
    let pid: u32 = parts.next()?.parse().ok()?;
    let start: u64 = parts.next()?.parse().ok()?;
    parts.next().filter(|rest| !rest.is_empty())?;
    Some(start_ticks(pid) != Some(start))
}

/// Removes the fence directories of dead processes under `dir`; returns how many it removed.
pub(crate) fn sweep(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for e in entries.flatten() {
        let Some(name) = e.file_name().to_str().map(str::to_string) else {
            continue;
        };
        // Directories only (file_type does not follow a symlink); remove_dir_all never follows.
        if !e.file_type().is_ok_and(|t| t.is_dir()) || is_dead(&name) != Some(true) {
            continue;
        }
        match std::fs::remove_dir_all(e.path()) {
            Ok(()) => removed += 1,
            Err(err) => tracing::warn!(error = %err, name, "cannot remove a stale fence directory"),
        }
    }
    removed
}

/// Prepares `<store dir>/fences` (created owner-only) and sweeps it; None without a store
/// location or when it cannot be created (fences then go to the system temp dir).
pub(crate) fn prepare(store: Option<&Path>) -> Option<PathBuf> {
    let dir = store?
        .parent()
        .filter(|p| !p.as_os_str().is_empty())?
        .join(FENCES_DIR);
    let mut b = std::fs::DirBuilder::new();
    std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
    if let Err(e) = b.recursive(true).create(&dir) {
        tracing::warn!(error = %e, "cannot create the fences directory beside the store");
        return None;
    }
    let removed = sweep(&dir);
    if removed > 0 {
        tracing::info!(
            removed,
            "removed fence directories of servers that are gone"
        );
    }
    Some(dir)
}

/// A new fence directory: in `parent` (named for this process, so a later start can tell whether
/// it is still in use), else in the system temp dir.
pub(crate) fn create(parent: Option<&Path>) -> Option<tempfile::TempDir> {
    match (parent, own_prefix()) {
        (Some(p), Some(prefix)) => tempfile::Builder::new().prefix(&prefix).tempdir_in(p).ok(),
        _ => tempfile::Builder::new()
            .prefix("codespace-fence-")
            .tempdir()
            .ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_ours_only_when_they_parse() {
        assert_eq!(is_dead("not-a-fence"), None);
        assert_eq!(is_dead("12-34"), None);
        assert_eq!(is_dead("12-34-"), None);
        let own = own_prefix().unwrap();
        assert_eq!(is_dead(&format!("{own}abc")), Some(false));
    }

    #[test]
    fn the_sweep_removes_dead_processes_fences_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let fences = dir.path().join("fences");
        // A child that has exited: its pid and start time name a dead process.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let start = start_ticks(pid);
        child.wait().unwrap();
        let Some(start) = start else {
            codespace_test_skip::skip(
                "the_sweep_removes_dead_processes_fences_and_nothing_else",
                "the child's start time cannot be read from /proc",
            );
            return;
        };
        std::fs::create_dir_all(&fences).unwrap();
        let dead = fences.join(format!("{pid}-{start}-xyz"));
        std::fs::create_dir(&dead).unwrap();
        std::fs::write(dead.join("f1"), "").unwrap();
        let other = fences.join("user-stuff");
        std::fs::create_dir(&other).unwrap();
        let file = fences.join(format!("{pid}-{start}-file"));
        std::fs::write(&file, "").unwrap();
        let live = create(Some(&fences)).unwrap();
        // What `prepare` does at start-up.
        assert_eq!(
            prepare(Some(&dir.path().join("store.db"))),
            Some(fences.clone())
        );
        assert!(!dead.exists(), "a dead server's fence is removed");
        assert!(other.exists(), "a name that is not ours is kept");
        assert!(file.exists(), "only directories are removed");
        assert!(live.path().exists(), "this process's fence is kept");
        let path = live.path().to_path_buf();
        drop(live);
        assert!(!path.exists(), "a dropped index removes its fence");
    }
}
