//! The path index of a workspace: a sorted in-memory listing (path + kind) that `find`, `grep` and
//! `find_files` read instead of walking the tree on every call.
//!
//! It is built lazily by a no-follow walk on first use, then kept current by the workspace's file
//! watcher (the one [`crate::versions`] runs): every create, delete or rename the watcher reports
//! marks its path dirty, and the next use re-checks just those paths (a re-appearing directory is
//! walked again). Disk stays the truth: when the watcher lost events (overflow), when too many
//! paths changed at once, or when it cannot run, the next use walks the whole tree again and the
//! result says so (`listing_source: walk` and a `walk_reason`). It is bounded by
//! `limits.max_walk_entries` (past it the listing is `incomplete`) and dropped when idle.
//!
//! Per listing generation it also caches what is costly to recompute and cannot change while the
//! listing does not: the decision-signature groups of the entries (one Cedar question per group),
//! the compiled ignore rules, and a few derived `find` listings (so paging reads a cached list).
//!
//! The first use starts the watcher and reads the tree once: the walk registers each directory
//! with the watcher right before it reads it ([`crate::versions::Versions::watch_while`]), so a
//! change the walk misses is an event, and the walk is the index (no second walk, no background
//! build). A clean shutdown saves the listing in the store (`persist.rs`); the first use after a
//! start takes it back once directory stamps show it still holds (each directory registered
//! before its stamp is read).
//!
//! `walk.rs` the walks; `watch.rs` the watcher's feed and the fence; `caches.rs` what is cached
//! per listing; `persist.rs` the saved index and its check. This file holds the index's types (the children add methods, and this file names
//! none of them) and its life: build, refresh, drop.

use codespace_runner_fs::{FsError, Kind, Root, Unlisted, WalkLimits};
use codespace_runner_search::IgnoreRules;
use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::wire::WalkReason;

mod caches;
mod persist;
mod remote;
pub(crate) mod start;
pub(crate) mod walk;
mod watch;

/// A workspace's files as its runner serves them (the index's source for a worker's workspace;
/// its methods are in `remote.rs`).
#[derive(Debug, Clone)]
pub(crate) struct RunnerFiles {
    /// The runner of the workspace's environment.
    pub(crate) runner: Arc<dyn codespace_runner_api::Runner>,
    /// The workspace id the runner knows it by.
    pub(crate) workspace: String,
}

/// `work` over `items` split in contiguous runs, one thread per run (up to the machine's cores,
/// at most 4) once there are `from` items or more, else on this thread; the answers in the order
/// of `items`. A run whose thread died answers `died` for each of its items.
pub(super) fn in_runs<T: Sync, R: Send>(
    items: &[T],
    from: usize,
    work: impl Fn(&[T]) -> Vec<R> + Sync,
    died: impl Fn(&T) -> R,
) -> Vec<R> {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 4);
    if threads == 1 || items.len() < from {
        return work(items);
    }
    let chunk = items.len().div_ceil(threads);
    let work = &work;
    std::thread::scope(|s| {
        let handles: Vec<_> = items
            .chunks(chunk)
            .map(|part| s.spawn(move || work(part)))
            .collect();
        let mut out = Vec::with_capacity(items.len());
        for (h, part) in handles.into_iter().zip(items.chunks(chunk)) {
            match h.join() {
                Ok(answers) => out.extend(answers),
                Err(_) => out.extend(part.iter().map(&died)),
            }
        }
        out
    })
}

/// Dirty paths one refresh re-checks one by one; more than this and the tree is walked again.
const MAX_INCREMENTAL: usize = 2_000;
/// An index unused this long is dropped (rebuilt by a walk on next use).
pub(crate) const IDLE_DROP: Duration = Duration::from_secs(600);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// One listed path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    /// Workspace-relative path.
    pub(crate) path: Box<str>,
    /// What it is (symlinks are never followed).
    pub(crate) kind: Kind,
    /// Inode number (names of one inode share it: hard-link aliases).
    pub(crate) ino: u64,
    /// A temporary file of the server ([`walk::is_server_temp`]): `find`, `grep` and `find_files` leave
    /// it out; secret masks do not.
    pub(crate) temp: bool,
    /// Link count (`st_nlink`) of a non-directory, read with the listing when the policy set reads
    /// `resource.links` (`None`: not read; [`PathIndex::groups`] stats it then).
    pub(crate) links: Option<u64>,
}

/// A listing of the whole workspace, sorted by path.
#[derive(Debug)]
pub(crate) struct Listing {
    pub(crate) entries: Vec<Entry>,
    /// A cap (depth, entries) cut it short or a directory could not be read.
    pub(crate) incomplete: bool,
    /// Changes whenever the listing changes.
    pub(crate) generation: u64,
    /// Entries left out because their name is not UTF-8 (policy cannot decide them).
    pub(crate) non_utf8: usize,
    /// `max_walk_entries` cut the listing short: what is missing is not known.
    pub(crate) capped: bool,
    /// Directories whose subtree the listing does not hold whole (deeper than the depth cap,
    /// unreadable, or holding a name that is not UTF-8), sorted, none beneath another; `""` is
    /// the root. Secret masks cover each whole (see [`crate::masks`]).
    pub(crate) unlisted: Vec<Unlisted>,
}

/// Entries grouped by decision signature: entries of a group get the same decision.
#[derive(Debug)]
pub(crate) struct Groups {
    /// Group of each entry.
    pub(crate) of_entry: Vec<u32>,
    /// A representative entry of each group.
    pub(crate) reps: Vec<u32>,
    /// `resource.links` of each representative (1 unless the policy set reads link counts).
    pub(crate) rep_links: Vec<i64>,
}

/// A derived `find` listing: entry indices after every filter, cached for paging.
#[derive(Debug)]
pub(crate) struct Derived {
    pub(crate) visible: Vec<u32>,
    /// (entry, group) of each entry withheld by policy.
    pub(crate) withheld: Vec<(u32, u32)>,
    pub(crate) listing_version: String,
}

/// What the watcher reported since the last use.
#[derive(Debug, Default)]
struct Events {
    /// Recording is on while an index exists.
    collecting: bool,
    dirty: HashSet<String>,
    overflow: bool,
    /// An ignore file's content changed.
    ignore_changed: bool,
}

#[derive(Debug, Default)]
struct State {
    listing: Option<Arc<Listing>>,
    last_used: Option<Instant>,
}

/// What is derived from a listing, keyed by its generation. Its own lock: a call that only reads
/// the caches never waits for a listing being built.
#[derive(Debug, Default)]
struct Caches {
    groups: Option<(String, u64, Arc<Groups>)>,
    ignore: Option<(u64, Arc<IgnoreRules>)>,
    derived: VecDeque<(String, Arc<Derived>)>,
}

/// A barrier through the watcher: a file created in a private directory the same watcher watches.
/// Once its event arrives, every workspace event queued before it has been delivered too (one
/// inotify queue, delivered in order), so a listing taken after [`PathIndex::flush`] reflects
/// every change made before the call began.
#[derive(Debug)]
struct Fence {
    dir: tempfile::TempDir,
    seen: Mutex<u64>,
    cv: Condvar,
    next: AtomicU64,
    broken: AtomicBool,
}

/// Where a workspace's index is saved between runs.
#[derive(Debug)]
struct Persisted {
    store: Arc<codespace_store::Store>,
    /// The workspace registration (workspace id bound to the root's device and inode).
    registration: String,
}

/// A directory's identity and change times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

/// Stamps of the directories of a listing, by workspace-relative path (`""` is the root).
type Stamps = HashMap<Box<str>, Stamp>;

/// A saved listing not yet known to be current, and the directory stamps taken before it was
/// read: a directory whose stamp moved is listed again.
#[derive(Debug)]
struct Seed {
    listing: Arc<Listing>,
    stamps: Stamps,
}

/// Called with each directory's workspace-relative path before a walk or a check reads it (the
/// watcher registers it; a no-op once the watcher runs, as it watches new directories itself).
pub(crate) type OnDir<'a> = &'a (dyn Fn(&str) + Sync);

/// [`OnDir`] for a watcher that runs already.
pub(crate) const NO_REGISTRATION: OnDir<'static> = &|_| {};

/// The path index of one workspace. Its source is either this host (`root`: the walks of
/// `walk.rs`, fed by the versions watcher) or the workspace's runner (`runner`: see `remote.rs`),
/// never both.
#[derive(Debug)]
pub(crate) struct PathIndex {
    root: Option<Arc<Root>>,
    runner: Option<RunnerFiles>,
    /// The root as the watcher reports it.
    root_abs: PathBuf,
    limits: WalkLimits,
    events: Arc<Mutex<Events>>,
    state: Mutex<State>,
    caches: Mutex<Caches>,
    reaper: AtomicBool,
    fence: Option<Arc<Fence>>,
    /// The decided secret masks of this workspace's listings (see [`crate::masks`]).
    pub(crate) masks: crate::mask_cache::MaskCache,
    persist: Option<Persisted>,
    /// The policy set reads `resource.links`: walks read each file's link count, and a metadata
    /// event (a link count moved) makes its path dirty.
    links: Arc<AtomicBool>,
}

impl PathIndex {
    /// An empty index over `root` (opened) at `root_abs` (as given to the watcher).
    #[cfg(test)]
    pub(crate) fn new(root: Arc<Root>, root_abs: &Path, max_entries: usize) -> PathIndex {
        PathIndex::new_in(root, root_abs, max_entries, None)
    }

    /// [`PathIndex::new`] with its fence directory in `fence_parent` (the server's fences
    /// directory, swept at start-up: see [`crate::fence_dirs`]), else in the system temp dir.
    pub(crate) fn new_in(
        root: Arc<Root>,
        root_abs: &Path,
        max_entries: usize,
        fence_parent: Option<&Path>,
    ) -> PathIndex {
        PathIndex {
            root: Some(root),
            runner: None,
            root_abs: root_abs.to_path_buf(),
            limits: WalkLimits {
                max_entries,
                ..WalkLimits::default()
            },
            events: Arc::new(Mutex::new(Events::default())),
            state: Mutex::new(State::default()),
            caches: Mutex::new(Caches::default()),
            reaper: AtomicBool::new(false),
            masks: crate::mask_cache::MaskCache::default(),
            persist: None,
            links: Arc::new(AtomicBool::new(false)),
            fence: crate::fence_dirs::create(fence_parent).map(|dir| {
                Arc::new(Fence {
                    dir,
                    seen: Mutex::new(0),
                    cv: Condvar::new(),
                    next: AtomicU64::new(0),
                    broken: AtomicBool::new(false),
                })
            }),
        }
    }

    /// An index whose source is the workspace's runner (a worker's environment): no host root,
    /// no watcher, no fence.
    pub(crate) fn new_remote(runner: RunnerFiles, max_entries: usize) -> PathIndex {
        PathIndex {
            root: None,
            runner: Some(runner),
            root_abs: PathBuf::new(),
            limits: WalkLimits {
                max_entries,
                ..WalkLimits::default()
            },
            events: Arc::new(Mutex::new(Events::default())),
            state: Mutex::new(State::default()),
            caches: Mutex::new(Caches::default()),
            reaper: AtomicBool::new(false),
            masks: crate::mask_cache::MaskCache::default(),
            fence: None,
            persist: None,
            links: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The host root the local walks read (`Err` for a runner's workspace, which has none here).
    fn local_root(&self) -> Result<&Arc<Root>, FsError> {
        self.root.as_ref().ok_or_else(|| FsError::Io {
            path: ".".into(),
            message: "the workspace's files are not on this host".into(),
        })
    }

    /// Saves this index in `store` under the workspace registration `registration` at a clean
    /// shutdown ([`PathIndex::persist`]) and takes it back on the first use after a start.
    pub(crate) fn saved_in(
        mut self,
        store: Arc<codespace_store::Store>,
        registration: &str,
    ) -> Self {
        if !registration.is_empty() {
            self.persist = Some(Persisted {
                store,
                registration: registration.to_string(),
            });
        }
        self
    }

    /// Whether listings read link counts (the policy set reads `resource.links`). A change drops
    /// the index: counts read before were not kept current meanwhile. Blocking.
    pub(crate) fn want_links(&self, yes: bool) {
        if self.links.swap(yes, Ordering::AcqRel) != yes {
            let mut st = lock(&self.state);
            self.reset(&mut st);
        }
    }

    /// The current listing, and why it was walked when it was. Blocking: call it off the async
    /// workers.
    ///
    /// On first use, when the watcher does not run yet, the watcher starts and the walk that
    /// answers the call (or the check of the saved index) registers its directories, each before
    /// it is read: the result is the index.
    pub(crate) fn listing(
        self: &Arc<Self>,
        versions: &Arc<crate::versions::Versions>,
    ) -> Result<(Arc<Listing>, Option<WalkReason>), FsError> {
        if let Some(files) = &self.runner {
            return self.listing_remote(files);
        }
        let mut st = lock(&self.state);
        if st.listing.is_none() && !versions.is_watching() && !versions.recently_failed() {
            return self.first_listing(&mut st, versions);
        }
        self.listing_locked(&mut st, || versions.ensure_watching(), &|| {
            versions.watch_quiet()
        })
    }

    /// The current listing without a trip to the blocking pool, when there is nothing to apply
    /// to it: the watcher has delivered every event of a change made before this call
    /// ([`crate::versions::Versions::watch_quiet`], asked first) and none was recorded since the
    /// listing was taken. `None` (also while a listing is being built): call
    /// [`PathIndex::listing`] off the async workers.
    pub(crate) fn current_if_quiet(
        &self,
        versions: &crate::versions::Versions,
    ) -> Option<Arc<Listing>> {
        if self.runner.is_some() {
            return None;
        }
        let mut st = self.state.try_lock().ok()?;
        let listing = st.listing.clone()?;
        if self
            .fence
            .as_ref()
            .is_none_or(|f| f.broken.load(Ordering::Acquire))
            || !versions.watch_quiet()
        {
            return None;
        }
        {
            let ev = lock(&self.events);
            if !ev.collecting || !ev.dirty.is_empty() || ev.overflow || ev.ignore_changed {
                return None;
            }
        }
        st.last_used = Some(Instant::now());
        Some(listing)
    }

    /// Records what the watcher reports from now on, dropping what it recorded before.
    fn start_recording(&self) {
        let mut ev = lock(&self.events);
        ev.collecting = true;
        ev.dirty.clear();
        ev.overflow = false;
        ev.ignore_changed = false;
    }

    /// The first listing: the watcher starts and this walk (or the check of the saved index)
    /// registers its directories. Events recorded meanwhile are applied on the next use (they
    /// may repeat what the walk read, which a re-check of a path does not mind).
    fn first_listing(
        &self,
        st: &mut State,
        versions: &crate::versions::Versions,
    ) -> Result<(Arc<Listing>, Option<WalkReason>), FsError> {
        st.last_used = Some(Instant::now());
        self.start_recording();
        let (got, watching) = versions.watch_while(|w| {
            let on_dir = |rel: &str| {
                if let Some(w) = w {
                    w.watch_rel(rel);
                }
            };
            let got = match self.restore_with(&on_dir) {
                Some(seed) => Ok((seed.listing, None)),
                None => self
                    .walk_all_with(&on_dir)
                    .map(|l| (Arc::new(l), Some(WalkReason::Built))),
            };
            if let (Some(w), Ok((l, _))) = (w, &got) {
                // What the walk did not descend into is watched all the same (the versions
                // table relies on every directory); one that cannot be watched fails the
                // watcher, as before.
                for u in &l.unlisted {
                    match u.why {
                        codespace_runner_fs::UnlistedWhy::Depth => w.watch_tree_rel(&u.path),
                        codespace_runner_fs::UnlistedWhy::Unreadable => w.watch_rel(&u.path),
                        codespace_runner_fs::UnlistedWhy::NonUtf8Name => {}
                    }
                }
            }
            let whole = got.is_ok();
            (got, whole)
        });
        match got {
            Ok((listing, reason)) if watching => {
                st.listing = Some(Arc::clone(&listing));
                Ok((listing, reason))
            }
            Ok((listing, _)) => {
                lock(&self.events).collecting = false;
                self.reset(st);
                Ok((listing, Some(WalkReason::WatcherUnavailable)))
            }
            Err(e) => {
                lock(&self.events).collecting = false;
                self.reset(st);
                Err(e)
            }
        }
    }

    /// [`PathIndex::listing`] without the first use's registration; `watching` starts the watcher
    /// (true when it runs).
    #[cfg(test)]
    fn listing_with(
        &self,
        watching: impl FnOnce() -> bool,
    ) -> Result<(Arc<Listing>, Option<WalkReason>), FsError> {
        let mut st = lock(&self.state);
        self.listing_locked(&mut st, watching, &|| false)
    }

    /// `quiet`: the watcher has nothing left to deliver ([`crate::versions::Versions::watch_quiet`]),
    /// so the fence file can be skipped.
    fn listing_locked(
        &self,
        st: &mut State,
        watching: impl FnOnce() -> bool,
        quiet: &dyn Fn() -> bool,
    ) -> Result<(Arc<Listing>, Option<WalkReason>), FsError> {
        st.last_used = Some(Instant::now());
        {
            // Record from before the watcher starts and before any walk, so no change between
            // them is lost.
            let mut ev = lock(&self.events);
            if !ev.collecting || st.listing.is_none() {
                ev.collecting = true;
                ev.dirty.clear();
                ev.overflow = false;
                ev.ignore_changed = false;
            }
        }
        if !watching() || !self.flush(quiet) {
            lock(&self.events).collecting = false;
            self.reset(st);
            let listing = Arc::new(self.walk_all()?);
            return Ok((listing, Some(WalkReason::WatcherUnavailable)));
        }
        let (dirty, overflow, ignore_changed) = {
            let mut ev = lock(&self.events);
            (
                std::mem::take(&mut ev.dirty),
                std::mem::replace(&mut ev.overflow, false),
                std::mem::replace(&mut ev.ignore_changed, false),
            )
        };
        if ignore_changed {
            let mut c = lock(&self.caches);
            c.ignore = None;
            c.derived.clear();
        }
        let reason = match &st.listing {
            None => Some(WalkReason::Built),
            Some(_) if overflow => Some(WalkReason::WatcherOverflow),
            Some(_) if dirty.len() > MAX_INCREMENTAL => Some(WalkReason::ManyChanges),
            Some(_) => None,
        };
        if let Some(reason) = reason {
            self.reset(st);
            if reason == WalkReason::Built
                && let Some(seed) = self.restore()
            {
                // Every change since the watcher started is in `dirty` or on the disk the
                // check read; a change after it will be an event.
                st.listing = Some(Arc::clone(&seed.listing));
                return Ok((seed.listing, None));
            }
            let listing = Arc::new(self.walk_all()?);
            st.listing = Some(Arc::clone(&listing));
            return Ok((listing, Some(reason)));
        }
        let Some(current) = st.listing.clone() else {
            let listing = Arc::new(self.walk_all()?);
            st.listing = Some(Arc::clone(&listing));
            return Ok((listing, Some(WalkReason::Built)));
        };
        if dirty.is_empty() {
            return Ok((current, None));
        }
        let updated = self.apply(current, dirty);
        st.listing = Some(Arc::clone(&updated));
        Ok((updated, None))
    }

    fn reset(&self, st: &mut State) {
        st.listing = None;
        *lock(&self.caches) = Caches::default();
    }
    /// Drops the index when it has not been used for `idle`; true when it did. Never waits for
    /// a listing in progress (that is a use).
    pub(crate) fn drop_if_idle(&self, idle: Duration) -> bool {
        let Ok(mut st) = self.state.try_lock() else {
            return false;
        };
        if st.listing.is_none() || st.last_used.is_some_and(|t| t.elapsed() < idle) {
            return false;
        }
        self.reset(&mut st);
        let mut ev = lock(&self.events);
        ev.collecting = false;
        ev.dirty.clear();
        true
    }

    /// Whether an index is held.
    #[cfg(test)]
    pub(crate) fn is_built(&self) -> bool {
        lock(&self.state).listing.is_some()
    }
}

/// Starts (once) the task that drops `index` after [`IDLE_DROP`] without use. Without a tokio
/// runtime nothing is started and the index lives as long as the gateway.
pub(crate) fn ensure_reaper(index: &Arc<PathIndex>) {
    if index.reaper.swap(true, Ordering::AcqRel) {
        return;
    }
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        index.reaper.store(false, Ordering::Release);
        return;
    };
    let weak = Arc::downgrade(index);
    handle.spawn(async move {
        loop {
            tokio::time::sleep(IDLE_DROP / 4).await;
            let Some(ix) = weak.upgrade() else { break };
            if ix.drop_if_idle(IDLE_DROP) {
                tracing::debug!("path index dropped after being idle");
            }
        }
    });
}

#[cfg(test)]
mod testing {
    use super::*;
    use codespace_runner_fs::Root;

    /// An index fed by a real watcher (started by the first listing).
    pub(super) struct Ix {
        ix: PathIndex,
        pub(super) versions: crate::versions::Versions,
    }

    impl std::ops::Deref for Ix {
        type Target = PathIndex;
        fn deref(&self) -> &PathIndex {
            &self.ix
        }
    }

    impl Ix {
        pub(super) fn get(&self) -> (Arc<Listing>, Option<WalkReason>) {
            self.ix
                .listing_with(|| self.versions.ensure_watching())
                .unwrap()
        }
    }

    pub(super) fn index(dir: &Path) -> Ix {
        index_with(dir, |ix| ix)
    }

    /// [`index`], the index changed by `f` before its watcher is made.
    pub(super) fn index_with(dir: &Path, f: impl FnOnce(PathIndex) -> PathIndex) -> Ix {
        let dir = std::fs::canonicalize(dir).unwrap();
        let root = Arc::new(Root::open(&dir).unwrap());
        let ix = f(PathIndex::new(root, &dir, 1_000_000));
        let versions = crate::versions::Versions::with_observer(
            &dir,
            codespace_runner_fs::TempNames::unregistered(),
            ix.observer(),
            ix.fence_dir(),
        );
        Ix { ix, versions }
    }

    /// What the listing tools show (the server's temp files left out).
    pub(super) fn paths(l: &Listing) -> Vec<&str> {
        l.entries
            .iter()
            .filter(|e| !e.temp)
            .map(|e| &*e.path)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{index, paths};
    use super::*;

    #[test]
    fn overflow_and_watcher_failure_walk_and_say_why() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("f"), b"").unwrap();
        let ix = index(tmp.path());
        ix.get();
        lock(&ix.events).overflow = true;
        let (_, why) = ix.get();
        assert_eq!(why, Some(WalkReason::WatcherOverflow));
        let (_, why) = ix.get();
        assert_eq!(why, None);
        let (l, why) = ix.listing_with(|| false).unwrap();
        assert_eq!(why, Some(WalkReason::WatcherUnavailable));
        assert_eq!(paths(&l), vec!["f"]);
        assert!(!ix.is_built());
    }

    #[test]
    fn the_first_walk_registers_every_directory_and_is_the_index() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("d/e/f")).unwrap();
        std::fs::write(tmp.path().join("a"), b"").unwrap();
        let dir = std::fs::canonicalize(tmp.path()).unwrap();
        let root = Arc::new(Root::open(&dir).unwrap());
        let ix = Arc::new(PathIndex::new(root, &dir, 1_000_000));
        let versions = Arc::new(crate::versions::Versions::with_observer(
            &dir,
            codespace_runner_fs::TempNames::unregistered(),
            ix.observer(),
            ix.fence_dir(),
        ));
        let (l, why) = ix.listing(&versions).unwrap();
        assert_eq!(why, Some(WalkReason::Built));
        assert_eq!(paths(&l), vec!["a", "d", "d/e", "d/e/f"]);
        // The walk registered the watcher's directories: it runs, the listing is the index.
        assert!(versions.is_watching());
        assert!(ix.is_built());
        // A change in the deepest directory the walk read is an event, so the next call re-checks
        // only it.
        std::fs::write(tmp.path().join("d/e/f/b"), b"").unwrap();
        std::fs::create_dir(tmp.path().join("d/e/f/g")).unwrap();
        std::fs::write(tmp.path().join("d/e/f/g/h"), b"").unwrap();
        let (l, why) = ix.listing(&versions).unwrap();
        assert_eq!(why, None);
        assert_eq!(
            paths(&l),
            vec!["a", "d", "d/e", "d/e/f", "d/e/f/b", "d/e/f/g", "d/e/f/g/h"]
        );
        // A directory made after it was re-checked is watched too.
        std::fs::write(tmp.path().join("d/e/f/g/i"), b"").unwrap();
        let (l, why) = ix.listing(&versions).unwrap();
        assert_eq!(why, None);
        assert!(paths(&l).contains(&"d/e/f/g/i"));
    }

    #[test]
    fn idle_index_is_dropped() {
        let tmp = tempfile::tempdir().unwrap();
        let ix = index(tmp.path());
        ix.get();
        assert!(!ix.drop_if_idle(Duration::from_secs(3600)));
        assert!(ix.is_built());
        assert!(ix.drop_if_idle(Duration::ZERO));
        assert!(!ix.is_built());
        assert!(!lock(&ix.events).collecting);
        let (_, why) = ix.get();
        assert_eq!(why, Some(WalkReason::Built));
    }
}
