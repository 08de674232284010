//! File versions per workspace: a table of `sha256:` versions kept current by our own reads and
//! writes and invalidated by an internal `notify` watcher when files change outside the server.
//! The watcher is not a tool. Disk stays the truth: a path the watcher touched (or one never
//! seen) is re-hashed, so a missed event cannot let a stale write through.

use codespace_runner_fs::{RelPath, Root, TempNames};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// What the table knows of one path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Known {
    /// The file had this version.
    Version(String),
    /// The path did not exist.
    Absent,
}

#[derive(Debug, Default)]
struct Table {
    /// Clean entries only; a watcher event removes the entry.
    known: HashMap<String, Known>,
    /// Event sequence number; bumped on every watcher event.
    seq: u64,
    /// Last event sequence per path.
    touched: HashMap<String, u64>,
    /// True when the watcher lost events (overflow) or could not start: trust nothing cached.
    degraded: bool,
}

/// Something else fed by the same watcher (the workspace's path index): it sees every event.
pub type WatchObserver = Arc<dyn Fn(&notify::Result<notify::Event>) + Send + Sync>;

/// The version table of one workspace, with its watcher.
pub struct Versions {
    root_abs: PathBuf,
    temps: Arc<TempNames>,
    table: Arc<Mutex<Table>>,
    watcher: Mutex<Option<crate::dir_watch::DirWatcher>>,
    observer: Option<WatchObserver>,
    /// A directory outside the workspace the same watcher also watches (the index's fence).
    extra_watch: Option<PathBuf>,
    /// When the watcher last failed to start (retried at most once per [`WATCH_RETRY`]).
    failed_at: Mutex<Option<std::time::Instant>>,
    /// The files are a runner's (a worker's environment): no watcher here; the runner's events
    /// feed [`Versions::runner_changed`] and [`Versions::runner_lost`].
    remote: bool,
}

/// How long a watcher that failed to start is left alone before it is tried again.
const WATCH_RETRY: std::time::Duration = std::time::Duration::from_secs(60);

impl std::fmt::Debug for Versions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Versions")
            .field("root", &"<workspace root>")
            .finish()
    }
}

fn lock(t: &Mutex<Table>) -> MutexGuard<'_, Table> {
    match t.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl Versions {
    /// A table for the workspace rooted at `root_abs` (canonical). The watcher starts lazily; it
    /// does not keep a change sequence for names of the server's temporary-file scheme (`temps`):
    /// every write makes a new one, so tracking them would grow the table with every write. Their
    /// events still invalidate what the table knows at and beneath them.
    pub fn new(root_abs: &Path, temps: Arc<TempNames>) -> Versions {
        Versions {
            root_abs: root_abs.to_path_buf(),
            temps,
            table: Arc::new(Mutex::new(Table::default())),
            watcher: Mutex::new(None),
            observer: None,
            extra_watch: None,
            failed_at: Mutex::new(None),
            remote: false,
        }
    }

    /// The table of a workspace whose files are its runner's: it never watches the host. No
    /// event proves that the runner's watcher delivered every change before a call, so the
    /// table keeps nothing (degraded): every version is asked of the runner, and every path of
    /// a patch is checked against it before and during the apply.
    pub fn remote() -> Versions {
        let v = Versions {
            remote: true,
            ..Versions::new(Path::new(""), TempNames::unregistered())
        };
        lock(&v.table).degraded = true;
        v
    }

    /// The runner reported `paths` changed (`Event::FileChanged`): their versions (and what lies
    /// beneath them) are unknown from now on.
    pub fn runner_changed(&self, paths: &[String]) {
        let mut t = lock(&self.table);
        t.seq += 1;
        let seq = t.seq;
        for rel in paths {
            let prefix = format!("{rel}/");
            t.known.retain(|k, _| k != rel && !k.starts_with(&prefix));
            t.touched.insert(rel.clone(), seq);
        }
    }

    /// The runner's watcher lost events (`Event::WatchLost`): every version is unknown.
    pub fn runner_lost(&self) {
        let mut t = lock(&self.table);
        t.seq += 1;
        t.degraded = true;
        t.known.clear();
    }

    /// Like [`Versions::new`], with `observer` called on every watcher event as well, and
    /// `extra_watch` (a directory outside the workspace) watched by the same watcher, so that an
    /// event there proves every earlier event of the workspace was delivered.
    pub fn with_observer(
        root_abs: &Path,
        temps: Arc<TempNames>,
        observer: WatchObserver,
        extra_watch: Option<PathBuf>,
    ) -> Versions {
        Versions {
            observer: Some(observer),
            extra_watch,
            ..Versions::new(root_abs, temps)
        }
    }

    /// Starts the watcher if it is not running; true when it runs. A watcher that cannot start
    /// leaves the table degraded (every lookup re-hashes from disk). The watcher never follows a
    /// symlink (a link to `/` must not make it watch the whole file system). It registers the
    /// tree by a walk of its own; [`Versions::watch_while`] lets a caller's walk do it instead.
    pub fn ensure_watching(&self) -> bool {
        self.watch_while(|w| {
            if let Some(w) = w {
                w.watch_tree();
            }
            ((), true)
        })
        .1
    }

    /// Starts the watcher with `register` registering its directories: `register` is given the
    /// new watcher (`None` when the watcher already runs or cannot start) and must register every
    /// directory of the tree, each before it reads it ([`crate::dir_watch::DirWatcher::watch_rel`]),
    /// and say whether it read the whole tree. Returns `register`'s result and whether the
    /// watcher runs now. Every other caller waits meanwhile.
    pub(crate) fn watch_while<R>(
        &self,
        register: impl FnOnce(Option<&crate::dir_watch::DirWatcher>) -> (R, bool),
    ) -> (R, bool) {
        if self.remote {
            return (register(None).0, false);
        }
        let mut w = match self.watcher.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let mut failed_at = match self.failed_at.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if let Some(running) = w.as_ref() {
            if !running.failed() {
                return (register(None).0, true);
            }
            // A directory could not be watched since (the watch limit): trust it no more.
            *w = None;
            lock(&self.table).degraded = true;
            *failed_at = Some(std::time::Instant::now());
        }
        if failed_at.is_some_and(|t| t.elapsed() < WATCH_RETRY) {
            return (register(None).0, false);
        }
        let watcher = match crate::dir_watch::DirWatcher::start(&self.root_abs, self.handler()) {
            Ok(watcher) => watcher,
            Err(e) => {
                tracing::warn!(error = %e, "file watcher unavailable; versions are re-read from disk");
                lock(&self.table).degraded = true;
                *failed_at = Some(std::time::Instant::now());
                return (register(None).0, false);
            }
        };
        if let Some(extra) = &self.extra_watch {
            watcher.watch_abs(extra);
        }
        let (out, whole) = register(Some(&watcher));
        if watcher.failed() {
            tracing::warn!("file watcher could not start; versions are re-read from disk");
            lock(&self.table).degraded = true;
            *failed_at = Some(std::time::Instant::now());
            return (out, false);
        }
        if !whole {
            return (out, false);
        }
        *w = Some(watcher);
        *failed_at = None;
        (out, true)
    }

    /// True when the watcher runs and has delivered every event of a change made before this
    /// call ([`crate::dir_watch::DirWatcher::quiet`]): a fence can be skipped. Never waits: a
    /// watcher being started (its tree registered under the lock) answers false.
    pub(crate) fn watch_quiet(&self) -> bool {
        let Ok(w) = self.watcher.try_lock() else {
            return false;
        };
        w.as_ref().is_some_and(|w| !w.failed() && w.quiet())
    }

    /// What the watcher calls on every event: the observer first, then this table.
    fn handler(&self) -> crate::dir_watch::Handler {
        let table = Arc::clone(&self.table);
        let root = self.root_abs.clone();
        let observer = self.observer.clone();
        let temps = Arc::clone(&self.temps);
        Box::new(move |res: notify::Result<notify::Event>| {
            if let Some(obs) = &observer {
                obs(&res);
            }
            let mut t = lock(&table);
            t.seq += 1;
            let seq = t.seq;
            match res {
                Ok(ev) => {
                    if ev.need_rescan() {
                        t.degraded = true;
                        t.known.clear();
                    }
                    if matches!(
                        ev.kind,
                        notify::EventKind::Access(notify::event::AccessKind::Open(_))
                    ) {
                        return;
                    }
                    for p in &ev.paths {
                        let Ok(rel) = p.strip_prefix(&root) else {
                            continue;
                        };
                        let rel = rel.to_string_lossy().to_string();
                        // A directory event invalidates everything beneath it. This holds for a
                        // name of the server's temp-file scheme too: a command can give that name
                        // to a directory, so the name alone never drops an event.
                        let prefix = format!("{rel}/");
                        t.known.retain(|k, _| k != &rel && !k.starts_with(&prefix));
                        let server_temp = p
                            .file_name()
                            .and_then(|n| n.to_str())
                            .is_some_and(|n| temps.is_server_temp(n));
                        // Only the per-path sequence of the server's own temp names is not kept
                        // (every write makes a new one, so it would grow with every write).
                        if !server_temp {
                            t.touched.insert(rel, seq);
                        }
                    }
                }
                Err(_) => {
                    t.degraded = true;
                    t.known.clear();
                }
            }
        })
    }

    /// True when the watcher runs and every directory is watched.
    pub fn is_watching(&self) -> bool {
        match self.watcher.lock() {
            Ok(g) => g.as_ref().is_some_and(|w| !w.failed()),
            Err(p) => p.into_inner().as_ref().is_some_and(|w| !w.failed()),
        }
    }

    /// True when the watcher failed to start and is not retried yet.
    pub fn recently_failed(&self) -> bool {
        match self.failed_at.lock() {
            Ok(g) => g.is_some_and(|t| t.elapsed() < WATCH_RETRY),
            Err(p) => p.into_inner().is_some_and(|t| t.elapsed() < WATCH_RETRY),
        }
    }

    /// The current event sequence number (to detect changes in a window).
    pub fn seq(&self) -> u64 {
        lock(&self.table).seq
    }

    /// Paths among `paths` that the watcher saw change after sequence `since` (or all of them
    /// when the watcher is degraded).
    pub fn changed_since(&self, since: u64, paths: &[String]) -> Vec<String> {
        let t = lock(&self.table);
        paths
            .iter()
            .filter(|p| t.degraded || t.touched.get(*p).is_some_and(|s| *s > since))
            .cloned()
            .collect()
    }

    /// Every path the watcher saw change after sequence `since`, sorted (`None` when the
    /// watcher is degraded: it may have lost events). The operation ledger's list of a
    /// command's changed files.
    pub fn touched_since(&self, since: u64) -> Option<Vec<String>> {
        let t = lock(&self.table);
        if t.degraded {
            return None;
        }
        let mut out: Vec<String> = t
            .touched
            .iter()
            .filter(|(_, s)| **s > since)
            .map(|(p, _)| p.clone())
            .collect();
        out.sort();
        Some(out)
    }

    /// Records what we read or wrote.
    pub fn record(&self, path: &str, known: Known) {
        let mut t = lock(&self.table);
        if !t.degraded {
            t.known.insert(path.to_string(), known);
        }
    }

    /// The version of `path` when the table has a clean entry.
    pub fn known(&self, path: &str) -> Option<Known> {
        lock(&self.table).known.get(path).cloned()
    }

    /// The version of `path`: from the table when clean, else from disk (and cached).
    pub fn current(
        &self,
        root: &Root,
        path: &RelPath,
    ) -> Result<Known, codespace_runner_fs::FsError> {
        if let Some(k) = lock(&self.table).known.get(path.as_str()).cloned() {
            return Ok(k);
        }
        let k = match root.version(path)? {
            Some(v) => Known::Version(v.as_str().to_string()),
            None => Known::Absent,
        };
        self.record(path.as_str(), k.clone());
        Ok(k)
    }
}

/// Feeds a runner's file events to the version tables of its workspaces (`FileChanged`: those
/// paths' versions unknown; `WatchLost`: every version unknown). Other events are not files'.
pub(crate) fn runner_event(
    tables: &HashMap<String, Arc<Versions>>,
    event: &codespace_runner_api::Event,
) {
    use codespace_runner_api::Event;
    match event {
        Event::FileChanged { workspace, paths } => {
            if let Some(v) = tables.get(workspace) {
                v.runner_changed(paths);
            }
        }
        Event::WatchLost { workspace } => {
            if let Some(v) = tables.get(workspace) {
                v.runner_lost();
            }
        }
        Event::ProcessExited { .. } => {}
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn the_servers_temp_files_are_not_tracked() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let temps = Arc::new(TempNames::new("00000000000000aa").unwrap());
        let v = Versions::new(&root, Arc::clone(&temps));
        v.ensure_watching();
        let fs_root = Root::open(&root)
            .unwrap()
            .with_temp_names(Arc::clone(&temps));
        let target = RelPath::parse("t.txt").unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        // Writes through temp files until the watcher has reported the target (an event, polled).
        let mut writes = 0;
        while v.changed_since(0, &["t.txt".to_string()]).is_empty() {
            assert!(std::time::Instant::now() < deadline, "no watcher event");
            fs_root.write_atomic(&target, b"x", 0o644).unwrap();
            writes += 1;
            std::thread::yield_now();
        }
        for _ in 0..20 {
            fs_root.write_atomic(&target, b"y", 0o644).unwrap();
            writes += 1;
        }
        // A user's file named like a temp file of an unknown instance is tracked as any file.
        std::fs::write(root.join(".codespace-tmp-00000000000000cc-1"), "u").unwrap();
        while v
            .changed_since(0, &[".codespace-tmp-00000000000000cc-1".to_string()])
            .is_empty()
        {
            assert!(std::time::Instant::now() < deadline, "no watcher event");
            std::thread::yield_now();
        }
        let t = lock(&v.table);
        let tracked: Vec<&String> = t.touched.keys().collect();
        assert!(
            tracked.iter().all(|k| !temps.is_server_temp(k)),
            "{writes} writes tracked temp files: {tracked:?}"
        );
        assert!(
            tracked
                .iter()
                .any(|k| k.as_str() == ".codespace-tmp-00000000000000cc-1")
        );
    }
}
