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

use codespace_runner_fs::{
    FsError, Kind, RelPath, Root, TempNames, Unlisted, UnlistedWhy, WalkLimits,
};
use codespace_runner_search::{IgnoreFile, IgnoreFileKind, IgnoreRules};
use std::collections::{HashMap, HashSet, VecDeque};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::policy::signature::SignaturePlan;
use crate::request::WorkspaceFacts;
use crate::versions::WatchObserver;
use crate::wire::WalkReason;

/// Dirty paths one refresh re-checks one by one; more than this and the tree is walked again.
const MAX_INCREMENTAL: usize = 2_000;
/// Dirty paths remembered between two uses; more than this counts as an overflow.
const MAX_DIRTY: usize = 20_000;
/// An index unused this long is dropped (rebuilt by a walk on next use).
pub(crate) const IDLE_DROP: Duration = Duration::from_secs(600);
/// Derived listings kept per workspace.
const DERIVED_KEPT: usize = 8;
/// Largest ignore file read (bytes); the rest of a longer one is ignored.
const MAX_IGNORE_FILE_BYTES: u64 = 1024 * 1024;

/// Listing generations are unique across the process.
static GENERATION: AtomicU64 = AtomicU64::new(1);

fn next_generation() -> u64 {
    GENERATION.fetch_add(1, Ordering::Relaxed)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// True for the server's own temporary files, which the listing tools do not show.
///
/// This is the one hook every listing path (walks and watcher refreshes) goes through: an entry is
/// hidden only when it is a **regular file** named `.codespace-tmp-<instance>-<n>` of an instance
/// the store recorded ([`TempNames::is_server_temp`]); a directory (and everything beneath it), a
/// symlink or a FIFO with such a name is listed like any other, and a user's look-alike stays
/// listed. Hidden entries stay in the listing (marked [`Entry::temp`]) so secret masks, which
/// must see every path, never depend on what the listing tools hide.
pub(crate) fn is_server_temp(temps: &TempNames, path: &str, kind: Kind) -> bool {
    kind == Kind::File
        && path
            .rsplit('/')
            .next()
            .is_some_and(|name| temps.is_server_temp(name))
}

/// What one thread of [`PathIndex::walk_all`] gathered.
#[derive(Default)]
struct Part {
    entries: Vec<codespace_runner_fs::WalkEntry>,
    incomplete: bool,
    capped: bool,
    non_utf8: usize,
    unlisted: Vec<Unlisted>,
}

fn unreadable(dir: &str) -> Unlisted {
    Unlisted {
        path: dir.to_string(),
        why: UnlistedWhy::Unreadable,
        name: None,
    }
}

/// `unlisted` sorted by path with every directory beneath another one dropped (the outer one
/// covers it), one entry per directory.
fn outermost(mut unlisted: Vec<Unlisted>) -> Vec<Unlisted> {
    unlisted.sort_by(|a, b| a.path.cmp(&b.path));
    let mut out: Vec<Unlisted> = Vec::with_capacity(unlisted.len());
    for u in unlisted {
        let covered = out.last().is_some_and(|o: &Unlisted| {
            o.path.is_empty()
                || o.path == u.path
                || u.path
                    .strip_prefix(o.path.as_str())
                    .is_some_and(|rest| rest.starts_with('/'))
        });
        if !covered {
            out.push(u);
        }
    }
    out
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
    /// A temporary file of the server ([`is_server_temp`]): `find`, `grep` and `find_files` leave
    /// it out; secret masks do not.
    pub(crate) temp: bool,
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
    /// A background build is under way (first use): wait for it.
    warming: bool,
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

/// How long a listing waits for its fence event before it walks instead.
const FENCE_WAIT: Duration = Duration::from_secs(2);

/// The path index of one workspace.
#[derive(Debug)]
pub(crate) struct PathIndex {
    root: Arc<Root>,
    /// The root as the watcher reports it.
    root_abs: PathBuf,
    limits: WalkLimits,
    events: Arc<Mutex<Events>>,
    state: Mutex<State>,
    caches: Mutex<Caches>,
    /// Signalled when a background build ends.
    warmed: Condvar,
    reaper: AtomicBool,
    fence: Option<Arc<Fence>>,
    /// The decided secret masks of this workspace's listings (see [`crate::masks`]).
    pub(crate) masks: crate::mask_cache::MaskCache,
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
            root,
            root_abs: root_abs.to_path_buf(),
            limits: WalkLimits {
                max_entries,
                ..WalkLimits::default()
            },
            events: Arc::new(Mutex::new(Events::default())),
            state: Mutex::new(State::default()),
            caches: Mutex::new(Caches::default()),
            warmed: Condvar::new(),
            reaper: AtomicBool::new(false),
            masks: crate::mask_cache::MaskCache::default(),
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

    /// The fence directory the watcher must also watch (outside the workspace).
    pub(crate) fn fence_dir(&self) -> Option<PathBuf> {
        self.fence.as_ref().map(|f| f.dir.path().to_path_buf())
    }

    /// Waits until the watcher delivered every event queued before this call; false when that
    /// cannot be shown (no fence event within [`FENCE_WAIT`]; the fence is then given up).
    fn flush(&self) -> bool {
        let Some(f) = &self.fence else {
            return false;
        };
        if f.broken.load(Ordering::Acquire) {
            return false;
        }
        let n = f.next.fetch_add(1, Ordering::AcqRel) + 1;
        let path = f.dir.path().join(format!("f{n}"));
        if std::fs::File::create(&path).is_err() {
            f.broken.store(true, Ordering::Release);
            return false;
        }
        let _ = std::fs::remove_file(&path);
        let seen = lock(&f.seen);
        match f.cv.wait_timeout_while(seen, FENCE_WAIT, |s| *s < n) {
            Ok((_, t)) if !t.timed_out() => true,
            _ => {
                tracing::warn!("file watcher fence not seen; listings walk the tree");
                f.broken.store(true, Ordering::Release);
                false
            }
        }
    }

    /// The watcher callback that feeds this index.
    pub(crate) fn observer(&self) -> WatchObserver {
        let events = Arc::clone(&self.events);
        let root = self.root_abs.clone();
        let fence = self.fence.clone();
        Arc::new(move |res: &notify::Result<notify::Event>| {
            use notify::EventKind;
            use notify::event::ModifyKind;
            if let (Some(f), Ok(e)) = (&fence, res)
                && matches!(e.kind, EventKind::Create(_))
            {
                let n = e
                    .paths
                    .iter()
                    .filter(|p| p.starts_with(f.dir.path()))
                    .filter_map(|p| p.file_name()?.to_str()?.strip_prefix('f')?.parse().ok())
                    .max();
                if let Some(n) = n {
                    let mut seen = lock(&f.seen);
                    *seen = (*seen).max(n);
                    f.cv.notify_all();
                    return;
                }
            }
            let mut ev = lock(&events);
            if !ev.collecting {
                return;
            }
            let event = match res {
                Ok(e) if !e.need_rescan() => e,
                _ => {
                    ev.overflow = true;
                    ev.dirty.clear();
                    return;
                }
            };
            let listing_change = match event.kind {
                EventKind::Access(_) => return,
                EventKind::Modify(ModifyKind::Data(_) | ModifyKind::Metadata(_)) => false,
                _ => true,
            };
            for p in &event.paths {
                let Ok(rel) = p.strip_prefix(&root) else {
                    continue;
                };
                let Some(rel) = rel.to_str() else {
                    // A name the listing cannot hold: walk again, which counts it.
                    ev.overflow = true;
                    ev.dirty.clear();
                    return;
                };
                if !listing_change {
                    if IgnoreFileKind::classify(rel).is_some() {
                        ev.ignore_changed = true;
                    }
                    continue;
                }
                if rel.is_empty() {
                    // The root itself changed: trust nothing.
                    ev.overflow = true;
                    ev.dirty.clear();
                    return;
                }
                if IgnoreFileKind::classify(rel).is_some() {
                    ev.ignore_changed = true;
                }
                ev.dirty.insert(rel.to_string());
            }
            if ev.dirty.len() > MAX_DIRTY {
                ev.overflow = true;
                ev.dirty.clear();
            }
        })
    }

    /// A full no-follow walk, in parallel: one walk lists the first two levels, then the
    /// directories of the second level are walked by a few threads (each with `walk_under`, the
    /// same no-follow walk) and the results are merged in path order.
    fn walk_all(&self) -> Result<Listing, FsError> {
        let top_limits = WalkLimits {
            max_depth: self.limits.max_depth.min(2),
            ..self.limits
        };
        let top = self.root.walk_under_all(&RelPath::root(), &top_limits)?;
        let mut non_utf8 = top.non_utf8_skipped;
        let deeper = self.limits.max_depth > 2;
        let mut capped = top.capped || top.entries.len() >= self.limits.max_entries;
        // The second level's directories are walked below when the cap is deeper.
        let mut unlisted: Vec<Unlisted> = top
            .unlisted
            .into_iter()
            .filter(|u| !(deeper && u.why == UnlistedWhy::Depth))
            .collect();
        // `incomplete` is what the listing tools report: a cap hit or a directory unreadable
        // (a name that is not UTF-8 is counted in `non_utf8` instead, as before).
        let mut incomplete = capped
            || unlisted.iter().any(|u| u.why != UnlistedWhy::NonUtf8Name)
            || (top.incomplete && !deeper);
        let work: Vec<&str> = if deeper {
            top.entries
                .iter()
                .filter(|e| e.kind == Kind::Dir && e.path.contains('/'))
                .map(|e| e.path.as_str())
                .collect()
        } else {
            Vec::new()
        };
        let threads = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
            .clamp(1, 4)
            .min(work.len().max(1));
        let next = std::sync::atomic::AtomicUsize::new(0);
        let walk_some = || {
            let mut part = Part::default();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(dir) = work.get(i) else { break };
                if part.entries.len() >= self.limits.max_entries {
                    part.capped = true;
                    break;
                }
                match RelPath::parse(dir).map(|rel| self.root.walk_under_all(&rel, &self.limits)) {
                    Ok(Ok(w)) => {
                        part.incomplete |= w.incomplete;
                        part.capped |= w.capped;
                        part.non_utf8 += w.non_utf8_skipped;
                        part.entries.extend(w.entries);
                        part.unlisted.extend(w.unlisted);
                    }
                    Ok(Err(FsError::NotFound { .. })) => {}
                    _ => {
                        part.incomplete = true;
                        part.unlisted.push(unreadable(dir));
                    }
                }
            }
            part
        };
        let parts: Vec<Part> = if threads > 1 {
            std::thread::scope(|s| {
                let handles: Vec<_> = (0..threads).map(|_| s.spawn(walk_some)).collect();
                handles
                    .into_iter()
                    .map(|h| {
                        h.join().unwrap_or_else(|_| Part {
                            capped: true,
                            ..Part::default()
                        })
                    })
                    .collect()
            })
        } else {
            vec![walk_some()]
        };
        let mut all = top.entries;
        for part in parts {
            incomplete |= part.incomplete || part.capped;
            capped |= part.capped;
            non_utf8 += part.non_utf8;
            all.extend(part.entries);
            unlisted.extend(part.unlisted);
        }
        all.sort_unstable_by(|a, b| a.path.cmp(&b.path));
        if all.len() > self.limits.max_entries {
            all.truncate(self.limits.max_entries);
            incomplete = true;
            capped = true;
        }
        let temps = self.root.temp_names();
        let entries = all
            .into_iter()
            .map(|e| Entry {
                temp: is_server_temp(temps, &e.path, e.kind),
                path: e.path.into_boxed_str(),
                kind: e.kind,
                ino: e.ino,
            })
            .collect();
        Ok(Listing {
            entries,
            incomplete,
            generation: next_generation(),
            non_utf8,
            capped,
            unlisted: outermost(unlisted),
        })
    }

    /// The current listing, and why it was walked when it was. Blocking: call it off the async
    /// workers.
    ///
    /// On first use, when the watcher does not run yet, the call is answered from a walk of its
    /// own while a background thread starts the watcher and then builds the index (watch first,
    /// walk second, so the index misses nothing); calls arriving meanwhile wait for that build.
    pub(crate) fn listing(
        self: &Arc<Self>,
        versions: &Arc<crate::versions::Versions>,
    ) -> Result<(Arc<Listing>, Option<WalkReason>), FsError> {
        let mut st = lock(&self.state);
        while st.warming {
            st = match self.warmed.wait(st) {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
        }
        if st.listing.is_none() && !versions.is_watching() && !versions.recently_failed() {
            st.warming = true;
            drop(st);
            // Answer first, then warm up: the background build does not compete with this walk.
            let walked = self.walk_all();
            let me = Arc::clone(self);
            let v = Arc::clone(versions);
            let spawned = std::thread::Builder::new()
                .name("codespace-index".into())
                .spawn(move || {
                    let mut st = lock(&me.state);
                    if let Err(e) = me.listing_locked(&mut st, || v.ensure_watching()) {
                        tracing::warn!(error = %e, "path index build failed");
                    }
                    st.warming = false;
                    me.warmed.notify_all();
                });
            if spawned.is_err() {
                lock(&self.state).warming = false;
                self.warmed.notify_all();
            }
            let listing = Arc::new(walked?);
            return Ok((listing, Some(WalkReason::Built)));
        }
        self.listing_locked(&mut st, || versions.ensure_watching())
    }

    /// [`PathIndex::listing`] without the background first build; `watching` starts the watcher
    /// (true when it runs).
    #[cfg(test)]
    fn listing_with(
        &self,
        watching: impl FnOnce() -> bool,
    ) -> Result<(Arc<Listing>, Option<WalkReason>), FsError> {
        let mut st = lock(&self.state);
        self.listing_locked(&mut st, watching)
    }

    fn listing_locked(
        &self,
        st: &mut State,
        watching: impl FnOnce() -> bool,
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
        if !watching() || !self.flush() {
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

    /// Re-checks `dirty` paths against the disk and returns the updated listing.
    fn apply(&self, current: Arc<Listing>, dirty: HashSet<String>) -> Arc<Listing> {
        let mut dirty: Vec<String> = dirty.into_iter().collect();
        dirty.sort();
        let entries = &current.entries;
        let find = |p: &str| entries.partition_point(|e| &*e.path < p);
        // Ranges of old entries to drop: each dirty path and everything beneath it.
        let mut ranges: Vec<(usize, usize)> = Vec::new();
        let mut additions: Vec<Entry> = Vec::new();
        let mut incomplete = current.incomplete;
        let mut non_utf8 = current.non_utf8;
        let mut capped = current.capped;
        // A dirty path is looked at again whole: what was unlisted at or beneath it is decided
        // anew below (an unlisted directory above it stays unlisted).
        let mut unlisted: Vec<Unlisted> = current
            .unlisted
            .iter()
            .filter(|u| {
                !dirty.iter().any(|p| {
                    u.path == *p
                        || u.path
                            .strip_prefix(p.as_str())
                            .is_some_and(|rest| rest.starts_with('/'))
                })
            })
            .cloned()
            .collect();
        let temps = self.root.temp_names();
        for p in &dirty {
            let at = find(p);
            if entries.get(at).is_some_and(|e| &*e.path == p.as_str()) {
                ranges.push((at, at + 1));
            }
            let lo = find(&format!("{p}/"));
            let hi = find(&format!("{p}0"));
            if lo < hi {
                ranges.push((lo, hi));
            }
            let Ok(rel) = RelPath::parse(p) else { continue };
            let depth = rel.components().count();
            if depth > self.limits.max_depth {
                // Beneath a directory at the depth cap, which is unlisted already.
                continue;
            }
            // Gone, or no longer reachable without a symlink: not listed.
            if let Ok(Some(meta)) = self.root.stat(&rel) {
                additions.push(Entry {
                    path: p.clone().into_boxed_str(),
                    kind: meta.kind,
                    ino: meta.ino,
                    temp: is_server_temp(temps, p, meta.kind),
                });
                if meta.kind == Kind::Dir && depth >= self.limits.max_depth {
                    // Listed, not descended (as a walk does at the cap).
                    incomplete = true;
                    unlisted.push(Unlisted {
                        path: p.clone(),
                        why: UnlistedWhy::Depth,
                        name: None,
                    });
                } else if meta.kind == Kind::Dir {
                    match self.root.walk_under_all(&rel, &self.limits) {
                        Ok(w) => {
                            incomplete |= w.incomplete;
                            capped |= w.capped;
                            non_utf8 += w.non_utf8_skipped;
                            unlisted.extend(w.unlisted);
                            additions.extend(w.entries.into_iter().map(|e| Entry {
                                temp: is_server_temp(temps, &e.path, e.kind),
                                path: e.path.into_boxed_str(),
                                kind: e.kind,
                                ino: e.ino,
                            }));
                        }
                        Err(FsError::NotFound { .. }) => {}
                        Err(_) => {
                            incomplete = true;
                            unlisted.push(unreadable(p));
                        }
                    }
                }
            }
        }
        ranges.sort_unstable();
        additions.sort_by(|a, b| a.path.cmp(&b.path));
        additions.dedup_by(|a, b| a.path == b.path);
        // Merge the kept old entries with the additions (an addition replaces an equal path).
        let old: Vec<Entry> = match Arc::try_unwrap(current) {
            Ok(l) => l.entries,
            Err(shared) => shared.entries.clone(),
        };
        let mut merged: Vec<Entry> = Vec::with_capacity(old.len() + additions.len());
        let mut r = ranges.iter().peekable();
        let mut adds = additions.into_iter().peekable();
        for (i, e) in old.into_iter().enumerate() {
            while r.peek().is_some_and(|&&(_, hi)| hi <= i) {
                r.next();
            }
            if r.peek().is_some_and(|&&(lo, hi)| lo <= i && i < hi) {
                continue;
            }
            while adds.peek().is_some_and(|a| a.path < e.path) {
                if let Some(a) = adds.next() {
                    merged.push(a);
                }
            }
            if adds.peek().is_some_and(|a| a.path == e.path) {
                continue;
            }
            merged.push(e);
        }
        merged.extend(adds);
        if merged.len() > self.limits.max_entries {
            merged.truncate(self.limits.max_entries);
            incomplete = true;
            capped = true;
        }
        Arc::new(Listing {
            entries: merged,
            incomplete,
            generation: next_generation(),
            non_utf8,
            capped,
            unlisted: outermost(unlisted),
        })
    }

    /// The decision-signature groups of `listing` under the plan of policy set `sha`.
    pub(crate) fn groups(
        &self,
        listing: &Listing,
        sha: &str,
        plan: &SignaturePlan,
        facts: &WorkspaceFacts,
    ) -> Arc<Groups> {
        {
            let c = lock(&self.caches);
            if let Some((s, g, groups)) = &c.groups
                && s == sha
                && *g == listing.generation
            {
                return Arc::clone(groups);
            }
        }
        let mut of_entry = Vec::with_capacity(listing.entries.len());
        let mut reps: Vec<u32> = Vec::new();
        let mut rep_links: Vec<i64> = Vec::new();
        let mut by_key: HashMap<String, u32> = HashMap::new();
        // When the policy set reads `resource.links`, an entry is listed iff a `read` of it (with
        // its real link count) is allowed: one no-follow stat per file.
        let uses_links = plan.uses_links();
        // One no-follow stat per file, each directory opened once for its files (not once per
        // file): 0 when a file is gone or cannot be examined, 1 for directories.
        let link_counts: Vec<i64> = if uses_links {
            let rels: Vec<Option<RelPath>> = listing
                .entries
                .iter()
                .map(|e| {
                    if e.kind == Kind::Dir {
                        None
                    } else {
                        RelPath::parse(&e.path).ok()
                    }
                })
                .collect();
            let mut metas = self.root.stat_many(rels.iter().flatten()).into_iter();
            listing
                .entries
                .iter()
                .zip(&rels)
                .map(|(e, rel)| match (e.kind, rel) {
                    (Kind::Dir, _) => 1,
                    (_, None) => 0,
                    (_, Some(_)) => metas
                        .next()
                        .and_then(|m| m.ok().flatten())
                        .map_or(0, |m| crate::links::links_value(m.kind, m.links)),
                })
                .collect()
        } else {
            Vec::new()
        };
        for (i, e) in listing.entries.iter().enumerate() {
            let links = link_counts.get(i).copied().unwrap_or(1);
            let i = u32::try_from(i).unwrap_or(u32::MAX);
            let group = match plan.key(&e.path, facts.is_server_owned(&e.path), links) {
                Some(key) => *by_key.entry(key).or_insert_with(|| {
                    reps.push(i);
                    rep_links.push(links);
                    u32::try_from(reps.len() - 1).unwrap_or(u32::MAX)
                }),
                None => {
                    reps.push(i);
                    rep_links.push(links);
                    u32::try_from(reps.len() - 1).unwrap_or(u32::MAX)
                }
            };
            of_entry.push(group);
        }
        let groups = Arc::new(Groups {
            of_entry,
            reps,
            rep_links,
        });
        lock(&self.caches).groups =
            Some((sha.to_string(), listing.generation, Arc::clone(&groups)));
        groups
    }

    /// The ignore rules of `listing` (its ignore files read beneath the root, no symlink followed).
    pub(crate) fn ignore_rules(&self, listing: &Listing) -> Arc<IgnoreRules> {
        {
            let c = lock(&self.caches);
            if let Some((g, rules)) = &c.ignore
                && *g == listing.generation
            {
                return Arc::clone(rules);
            }
        }
        let mut files = Vec::new();
        let mut git_dirs = Vec::new();
        for e in &listing.entries {
            let name = e.path.rsplit('/').next().unwrap_or(&e.path);
            if name == ".git" {
                git_dirs.push(
                    e.path
                        .rsplit_once('/')
                        .map_or(String::new(), |(d, _)| d.to_string()),
                );
            }
            if e.kind != Kind::File {
                continue;
            }
            let Some((kind, dir)) = IgnoreFileKind::classify(&e.path) else {
                continue;
            };
            let Ok(rel) = RelPath::parse(&e.path) else {
                continue;
            };
            let Ok((file, _)) = self.root.open_file(&rel) else {
                continue;
            };
            let mut content = Vec::new();
            if file
                .take(MAX_IGNORE_FILE_BYTES)
                .read_to_end(&mut content)
                .is_ok()
            {
                files.push(IgnoreFile {
                    kind,
                    dir: dir.to_string(),
                    content,
                });
            }
        }
        let rules = Arc::new(IgnoreRules::build(&files, git_dirs));
        lock(&self.caches).ignore = Some((listing.generation, Arc::clone(&rules)));
        rules
    }

    /// A cached derived listing.
    pub(crate) fn derived(&self, key: &str) -> Option<Arc<Derived>> {
        let c = lock(&self.caches);
        c.derived
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, d)| Arc::clone(d))
    }

    /// Caches a derived listing.
    pub(crate) fn put_derived(&self, key: String, d: Arc<Derived>) {
        let mut c = lock(&self.caches);
        c.derived.retain(|(k, _)| *k != key);
        c.derived.push_front((key, d));
        c.derived.truncate(DERIVED_KEPT);
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
mod tests {
    use super::*;

    /// An index fed by a real watcher (started by the first listing).
    struct Ix {
        ix: PathIndex,
        versions: crate::versions::Versions,
    }

    impl std::ops::Deref for Ix {
        type Target = PathIndex;
        fn deref(&self) -> &PathIndex {
            &self.ix
        }
    }

    impl Ix {
        fn get(&self) -> (Arc<Listing>, Option<WalkReason>) {
            self.ix
                .listing_with(|| self.versions.ensure_watching())
                .unwrap()
        }
    }

    fn index(dir: &Path) -> Ix {
        let dir = std::fs::canonicalize(dir).unwrap();
        let root = Arc::new(Root::open(&dir).unwrap());
        let ix = PathIndex::new(root, &dir, 1_000_000);
        let versions = crate::versions::Versions::with_observer(
            &dir,
            codespace_runner_fs::TempNames::unregistered(),
            ix.observer(),
            ix.fence_dir(),
        );
        Ix { ix, versions }
    }

    /// What the listing tools show (the server's temp files left out).
    fn paths(l: &Listing) -> Vec<&str> {
        l.entries
            .iter()
            .filter(|e| !e.temp)
            .map(|e| &*e.path)
            .collect()
    }

    #[test]
    fn dirty_paths_are_rechecked_and_merged_in_order() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        std::fs::create_dir_all(d.join("a/b")).unwrap();
        std::fs::write(d.join("a/b/c"), b"").unwrap();
        std::fs::write(d.join("a-b"), b"").unwrap();
        std::fs::write(d.join("z"), b"").unwrap();
        let ix = index(d);
        let (l, why) = ix.get();
        assert_eq!(why, Some(WalkReason::Built));
        assert_eq!(paths(&l), vec!["a", "a-b", "a/b", "a/b/c", "z"]);
        // Remove a subtree, add a new directory with content, add a temp file.
        std::fs::remove_dir_all(d.join("a/b")).unwrap();
        std::fs::create_dir_all(d.join("n/m")).unwrap();
        std::fs::write(d.join("n/m/f"), b"").unwrap();
        std::fs::write(d.join(ix.root.temp_names().next_name()), b"").unwrap();
        let (l2, why) = ix.get();
        assert_eq!(why, None);
        assert_ne!(l2.generation, l.generation);
        assert_eq!(paths(&l2), vec!["a", "a-b", "n", "n/m", "n/m/f", "z"]);
        assert_eq!(paths(&l2), paths(&ix.walk_all().unwrap()));
        // The temp file is in the listing (masks see it), marked.
        assert_eq!(l2.entries.iter().filter(|e| e.temp).count(), 1);
    }

    #[test]
    fn a_directory_with_a_temp_name_is_listed_with_its_subtree() {
        // Security round 3, item 2: only regular files may be hidden by that name.
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        std::fs::create_dir_all(d.join("config")).unwrap();
        std::fs::write(d.join("config/.env"), b"S=1").unwrap();
        let ix = index(d);
        ix.get();
        let name = ix.root.temp_names().next_name();
        std::fs::rename(d.join("config"), d.join(&name)).unwrap();
        std::os::unix::fs::symlink("x", d.join(ix.root.temp_names().next_name())).unwrap();
        let (l, why) = ix.get();
        assert_eq!(why, None);
        let env = format!("{name}/.env");
        assert!(paths(&l).contains(&name.as_str()), "{:?}", paths(&l));
        assert!(paths(&l).contains(&env.as_str()), "{:?}", paths(&l));
        assert_eq!(
            paths(&l).len(),
            3,
            "the symlink is listed too: {:?}",
            paths(&l)
        );
        assert_eq!(paths(&l), paths(&ix.walk_all().unwrap()));
    }

    #[test]
    fn unlisted_directories_are_the_outermost_ones() {
        let u = |p: &str| Unlisted {
            path: p.into(),
            why: UnlistedWhy::Depth,
            name: None,
        };
        let got = outermost(vec![u("a/b/c"), u("a/b"), u("ab"), u("a/b"), u("x/y")]);
        let got: Vec<&str> = got.iter().map(|u| u.path.as_str()).collect();
        assert_eq!(got, vec!["a/b", "ab", "x/y"]);
        assert_eq!(outermost(vec![u("a"), u("")]).len(), 1);
    }

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
    fn a_change_made_before_the_call_is_always_seen() {
        // The fence makes the watcher deliver everything queued before the listing.
        let tmp = tempfile::tempdir().unwrap();
        let ix = index(tmp.path());
        ix.get();
        for i in 0..50 {
            std::fs::write(tmp.path().join(format!("f{i}")), b"").unwrap();
            let (l, why) = ix.get();
            assert_eq!(why, None);
            assert!(
                l.entries.iter().any(|e| *e.path == *format!("f{i}")),
                "f{i}"
            );
        }
    }

    #[test]
    fn first_use_answers_from_a_walk_and_builds_the_index_in_the_background() {
        let tmp = tempfile::tempdir().unwrap();
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
        assert_eq!(paths(&l), vec!["a"]);
        // The next call waits for the background build and reads the index.
        std::fs::write(tmp.path().join("b"), b"").unwrap();
        let (l, why) = ix.listing(&versions).unwrap();
        assert!(versions.is_watching());
        assert_eq!(paths(&l), vec!["a", "b"]);
        assert!(why.is_none() || why == Some(WalkReason::Built), "{why:?}");
        let (_, why) = ix.listing(&versions).unwrap();
        assert_eq!(why, None);
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

    #[test]
    fn the_parallel_walk_equals_the_plain_walk() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        for a in 0..6 {
            for b in 0..5 {
                for c in 0..4 {
                    std::fs::create_dir_all(d.join(format!("a{a}/b{b}/c{c}"))).unwrap();
                    std::fs::write(d.join(format!("a{a}/b{b}/c{c}/f")), b"").unwrap();
                }
                std::fs::write(d.join(format!("a{a}/b{b}-x")), b"").unwrap();
            }
        }
        std::fs::write(d.join("top"), b"").unwrap();
        std::os::unix::fs::symlink("/", d.join("a0/b0/root-link")).unwrap();
        let ix = index(d);
        let fast = ix.walk_all().unwrap();
        let plain = Root::open(d).unwrap().walk(&WalkLimits::default()).unwrap();
        let plain: Vec<&str> = plain.entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths(&fast), plain);
        assert!(!fast.incomplete);
        // Caps still hold.
        let capped = PathIndex::new(Arc::new(Root::open(d).unwrap()), d, 50);
        let l = capped.walk_all().unwrap();
        assert_eq!(l.entries.len(), 50);
        assert!(l.incomplete);
    }

    #[test]
    fn server_temp_names_are_hidden() {
        let temps = TempNames::new("0123456789abcdef").unwrap();
        let own = temps.next_name();
        let f = Kind::File;
        assert!(is_server_temp(&temps, &format!("a/{own}"), f));
        for kind in [Kind::Dir, Kind::Symlink, Kind::Other] {
            assert!(
                !is_server_temp(&temps, &format!("a/{own}"), kind),
                "{kind:?}"
            );
        }
        assert!(!is_server_temp(&temps, "a/.codespace-tmp-notes", f));
        assert!(!is_server_temp(
            &temps,
            "a/.codespace-tmp-fedcba9876543210-1",
            f
        ));
        assert!(!is_server_temp(&temps, "a/codespace-tmp-1", f));
    }
}
