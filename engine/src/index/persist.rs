//! The path index kept across restarts: saved in the store at a clean shutdown, taken back on the
//! first use after a start, and trusted only once checked against the disk.
//!
//! The check rests on directory stamps: (device, inode, mtime, ctime) of every listed directory
//! (and the root), each taken *before* the listing it vouches for was read. Adding, removing or
//! renaming a name changes its directory's mtime and ctime, and ctime cannot be set back by a
//! user, so a directory whose stamp is unchanged still has the names the listing holds for it.
//! Going down from the root, every directory is either vouched for by its stamp or listed again
//! (its direct names compared with the saved ones; what differs is re-checked like a path the
//! watcher marked dirty, a new directory walked whole). A stamp whose ctime lies within
//! [`RACY`] of when it was taken vouches for nothing (a change in the same clock tick would not
//! move it), nor does one taken through a different root (device and inode of the root fd and of
//! the configured path must match the saved ones). Only whole listings are saved (no cap hit, no
//! unreadable directory, no name that is not UTF-8), and only on local file systems, whose directory
//! times move with every change of a name ([`codespace_runner_fs::Root::on_local_fs`]). When anything does not fit, the caller walks.

use codespace_runner_fs::{Kind, RelPath, UnlistedWhy, WalkLimits};
use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::{Entry, Listing, OnDir, PathIndex, Seed, Stamp, Stamps, lock, walk::is_server_temp};

/// Directories a restart's check stamps on one thread; from this many on, a few share them.
const PARALLEL_STAMP_FROM: usize = 256;
/// Version of the saved layout; another version is not read.
const FORMAT: u32 = 1;
const MAGIC: &[u8; 4] = b"CSPI";
/// A directory changed this close to when its stamp was taken is listed again whatever its stamp
/// says (file-system timestamps come from a coarse clock).
#[cfg(not(test))]
const RACY: Duration = Duration::from_secs(2);
/// Tests wait for the file system's clock to tick instead (see `tests::tick`).
#[cfg(test)]
const RACY: Duration = Duration::from_millis(50);

fn secs_nanos(t: SystemTime) -> (i64, i64) {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => (
            i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            i64::from(d.subsec_nanos()),
        ),
        Err(_) => (0, 0),
    }
}

/// The stamp of the directory at `abs`, unless it is not a directory (a symlink is not followed)
/// or changed at or after `since` less [`RACY`].
fn stamp_at(abs: &Path, since: (i64, i64)) -> Option<Stamp> {
    let m = std::fs::symlink_metadata(abs).ok()?;
    if !m.is_dir() {
        return None;
    }
    let ctime = (m.ctime(), m.ctime_nsec());
    let nanos = |(s, n): (i64, i64)| i128::from(s) * 1_000_000_000 + i128::from(n);
    if nanos(ctime) >= nanos(since) - RACY.as_nanos() as i128 {
        return None;
    }
    Some(Stamp {
        dev: m.dev(),
        ino: m.ino(),
        mtime: (m.mtime(), m.mtime_nsec()),
        ctime,
    })
}

fn kind_byte(k: Kind) -> u8 {
    match k {
        Kind::File => 0,
        Kind::Dir => 1,
        Kind::Symlink => 2,
        Kind::Other => 3,
    }
}

fn byte_kind(b: u8) -> Option<Kind> {
    Some(match b {
        0 => Kind::File,
        1 => Kind::Dir,
        2 => Kind::Symlink,
        3 => Kind::Other,
        _ => return None,
    })
}

fn put_stamp(out: &mut Vec<u8>, s: &Stamp) {
    out.extend_from_slice(&s.dev.to_le_bytes());
    out.extend_from_slice(&s.ino.to_le_bytes());
    for v in [s.mtime.0, s.mtime.1, s.ctime.0, s.ctime.1] {
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// Reads the saved layout; `None` on anything unexpected.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let head = self.0.get(..n)?;
        self.0 = self.0.get(n..)?;
        Some(head)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1)?.first().copied()
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn i64(&mut self) -> Option<i64> {
        Some(i64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn stamp(&mut self) -> Option<Stamp> {
        Some(Stamp {
            dev: self.u64()?,
            ino: self.u64()?,
            mtime: (self.i64()?, self.i64()?),
            ctime: (self.i64()?, self.i64()?),
        })
    }
}

/// The saved layout: magic, format, limits, the root's device and inode, its stamp (if any), then
/// per entry its kind, inode, stamp (directories that have one) and path.
fn encode(listing: &Listing, stamps: &Stamps, root: (u64, u64), limits: &WalkLimits) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + listing.entries.len() * 48);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT.to_le_bytes());
    out.extend_from_slice(&(limits.max_depth as u64).to_le_bytes());
    out.extend_from_slice(&(limits.max_entries as u64).to_le_bytes());
    out.extend_from_slice(&root.0.to_le_bytes());
    out.extend_from_slice(&root.1.to_le_bytes());
    match stamps.get("") {
        Some(s) => {
            out.push(1);
            put_stamp(&mut out, s);
        }
        None => out.push(0),
    }
    out.extend_from_slice(&(listing.entries.len() as u64).to_le_bytes());
    for e in &listing.entries {
        out.push(kind_byte(e.kind));
        out.extend_from_slice(&e.ino.to_le_bytes());
        match stamps.get(&e.path) {
            Some(s) if e.kind == Kind::Dir => {
                out.push(1);
                put_stamp(&mut out, s);
            }
            _ => out.push(0),
        }
        out.extend_from_slice(&(e.path.len() as u32).to_le_bytes());
        out.extend_from_slice(e.path.as_bytes());
    }
    out
}

/// The saved listing (its `temp` marks recomputed by the caller), its stamps (the root's under
/// `""`) and the root's device and inode.
fn decode(data: &[u8], limits: &WalkLimits) -> Option<(Vec<Entry>, Stamps, (u64, u64))> {
    let mut c = Cursor(data);
    if c.take(4)? != MAGIC || c.u32()? != FORMAT {
        return None;
    }
    if c.u64()? != limits.max_depth as u64 || c.u64()? != limits.max_entries as u64 {
        return None;
    }
    let root = (c.u64()?, c.u64()?);
    let mut stamps = Stamps::new();
    match c.u8()? {
        0 => {}
        1 => {
            stamps.insert("".into(), c.stamp()?);
        }
        _ => return None,
    }
    let n = usize::try_from(c.u64()?).ok()?;
    if n > limits.max_entries {
        return None;
    }
    let mut entries = Vec::with_capacity(n);
    let mut prev: Option<Box<str>> = None;
    for _ in 0..n {
        let kind = byte_kind(c.u8()?)?;
        let ino = c.u64()?;
        let stamp = match c.u8()? {
            0 => None,
            1 => Some(c.stamp()?),
            _ => return None,
        };
        let len = usize::try_from(c.u32()?).ok()?;
        let path: Box<str> = std::str::from_utf8(c.take(len)?).ok()?.into();
        // Sorted and unique, each a valid relative path, as a walk gives them.
        if prev.as_ref().is_some_and(|p| *p >= path) || RelPath::parse(&path).is_err() {
            return None;
        }
        if let Some(s) = stamp {
            stamps.insert(path.clone(), s);
        }
        prev = Some(path.clone());
        entries.push(Entry {
            path,
            kind,
            ino,
            temp: false,
            links: None,
        });
    }
    if !c.0.is_empty() {
        return None;
    }
    Some((entries, stamps, root))
}

/// `path`'s parent (`""` for an entry of the root).
fn parent_of(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(p, _)| p)
}

impl PathIndex {
    /// Device and inode of the root, when the configured path (what the watcher watches and the
    /// stamps are read through) still names the directory the root fd holds.
    fn root_identity(&self) -> Option<(u64, u64)> {
        let fd = self.root.as_ref()?.as_fd().try_clone_to_owned().ok()?;
        let held = std::fs::File::from(fd).metadata().ok()?;
        let named = std::fs::symlink_metadata(&self.root_abs).ok()?;
        (named.dev() == held.dev() && named.ino() == held.ino()).then_some((held.dev(), held.ino()))
    }

    /// Stamps of every directory of `listing` (the root under `""`), taken now for a listing
    /// read from `since` on: a directory changed since then (less [`RACY`]) gets none.
    pub(super) fn stamp_dirs(&self, listing: &Listing, since: SystemTime) -> Stamps {
        let since = secs_nanos(since);
        let mut stamps = Stamps::new();
        if let Some(s) = stamp_at(&self.root_abs, since) {
            stamps.insert("".into(), s);
        }
        for e in listing.entries.iter().filter(|e| e.kind == Kind::Dir) {
            if let Some(s) = stamp_at(&self.root_abs.join(&*e.path), since) {
                stamps.insert(e.path.clone(), s);
            }
        }
        stamps
    }

    /// The stamp of each directory of `dirs` (in order), each registered with `on_dir` first,
    /// split in contiguous runs over a few threads as a walk is (issue 34: a restart's check
    /// took longer than the walk it saves). A run whose thread died answers no stamps: its
    /// directories are listed again, which registers them.
    fn stamp_each(
        &self,
        dirs: &[&Entry],
        since: (i64, i64),
        on_dir: OnDir<'_>,
    ) -> Vec<Option<Stamp>> {
        let stamp = |part: &[&Entry]| {
            part.iter()
                .map(|e| {
                    on_dir(&e.path);
                    stamp_at(&self.root_abs.join(&*e.path), since)
                })
                .collect()
        };
        super::in_runs(dirs, PARALLEL_STAMP_FROM, stamp, |_| None)
    }

    /// Checks `seed` against the disk: directories that may have changed are listed again and
    /// what differs is re-checked. Returns the current listing with the stamps taken for it, or
    /// `None` when the caller must walk instead. Blocking.
    /// `on_dir` is called with each directory before its stamp is taken or it is read.
    fn validate(&self, seed: Seed, check_root: (u64, u64), on_dir: OnDir<'_>) -> Option<Seed> {
        let Seed {
            listing,
            stamps: saved,
        } = seed;
        if listing.incomplete
            || listing.capped
            || listing.non_utf8 > 0
            || !listing.unlisted.is_empty()
            || !self.root.as_ref().is_some_and(|r| r.on_local_fs())
        {
            return None;
        }
        let since = secs_nanos(SystemTime::now());
        let mut fresh = Stamps::new();
        // A changed stamp is a changed directory, and so is a missing one.
        let moved = |now: Option<Stamp>, path: &str| match now {
            Some(n) => saved.get(path) != Some(&n),
            None => true,
        };
        // A root that is not the one the listing was read from: nothing in it holds.
        let root = self.root_identity()?;
        if check_root != root {
            return None;
        }
        on_dir("");
        let root_now = stamp_at(&self.root_abs, since);
        let mut changed: Vec<&str> = Vec::new();
        if moved(root_now, "") {
            changed.push("");
        }
        if let Some(n) = root_now {
            fresh.insert("".into(), n);
        }
        let dirs: Vec<&Entry> = listing
            .entries
            .iter()
            .filter(|e| e.kind == Kind::Dir)
            .collect();
        for (e, n) in dirs.iter().zip(self.stamp_each(&dirs, since, on_dir)) {
            if moved(n, &e.path) {
                changed.push(&e.path);
            }
            if let Some(n) = n {
                fresh.insert(e.path.clone(), n);
            }
        }
        if changed.is_empty() {
            return Some(Seed {
                listing,
                stamps: fresh,
            });
        }
        // Each changed directory's direct names now against the saved ones.
        let mut saved: HashMap<&str, Vec<&Entry>> = HashMap::new();
        let wanted: HashSet<&str> = changed.iter().copied().collect();
        for e in &listing.entries {
            let p = parent_of(&e.path);
            if wanted.contains(p) {
                saved.entry(p).or_default().push(e);
            }
        }
        let mut dirty: HashSet<String> = HashSet::new();
        for dir in &changed {
            let rel = if dir.is_empty() {
                RelPath::root()
            } else {
                match RelPath::parse(dir) {
                    Ok(r) => r,
                    Err(_) => return None,
                }
            };
            let depth = if dir.is_empty() {
                0
            } else {
                rel.components().count()
            };
            let one_level = WalkLimits {
                max_depth: depth + 1,
                ..self.limits
            };
            match self
                .root
                .as_ref()?
                .walk_under_all_watching(&rel, &one_level, on_dir)
            {
                Ok(w) => {
                    if w.capped
                        || w.non_utf8_skipped > 0
                        || w.unlisted.iter().any(|u| u.why != UnlistedWhy::Depth)
                    {
                        return None;
                    }
                    let before: HashMap<&str, (Kind, u64)> = saved
                        .get(dir)
                        .into_iter()
                        .flatten()
                        .map(|e| (&*e.path, (e.kind, e.ino)))
                        .collect();
                    for e in &w.entries {
                        if before.get(e.path.as_str()) != Some(&(e.kind, e.ino)) {
                            dirty.insert(e.path.clone());
                        }
                    }
                    let now: HashSet<&str> = w.entries.iter().map(|e| e.path.as_str()).collect();
                    for p in before.keys().filter(|p| !now.contains(**p)) {
                        dirty.insert((*p).to_string());
                    }
                }
                Err(_) if dir.is_empty() => return None,
                // Gone or no longer a directory: re-checked as a whole.
                Err(_) => {
                    dirty.insert((*dir).to_string());
                }
            }
        }
        tracing::debug!(
            directories = changed.len(),
            paths = dirty.len(),
            "path index: directories listed again"
        );
        let listing = self.apply_with(listing, dirty, on_dir);
        Some(Seed {
            listing,
            stamps: fresh,
        })
    }

    /// Takes the saved index of this workspace from the store, if any, and validates it.
    pub(super) fn restore(&self) -> Option<Seed> {
        self.restore_with(super::NO_REGISTRATION)
    }

    /// [`PathIndex::restore`], calling `on_dir` with each directory before its stamp is taken or
    /// it is read.
    pub(super) fn restore_with(&self, on_dir: OnDir<'_>) -> Option<Seed> {
        let p = self.persist.as_ref()?;
        let data = match p.store.take_path_index(&p.registration) {
            Ok(Some(d)) => d,
            Ok(None) => return None,
            Err(e) => {
                tracing::warn!(error = %e, "reading the saved path index failed");
                return None;
            }
        };
        // The workspace registration is keyed by the root's device and inode already; the saved
        // ones are checked again (and a root replaced by a directory that reuses the inode has
        // other times: its stamp moves).
        let (mut entries, stamps, root) = decode(&data, &self.limits)?;
        let temps = self.root.as_ref()?.temp_names();
        for e in &mut entries {
            e.temp = is_server_temp(temps, &e.path, e.kind);
        }
        let seed = Seed {
            listing: Arc::new(Listing {
                entries,
                incomplete: false,
                generation: super::walk::next_generation(),
                non_utf8: 0,
                capped: false,
                unlisted: Vec::new(),
            }),
            stamps,
        };
        let t = std::time::Instant::now();
        let out = self.validate(seed, root, on_dir);
        tracing::debug!(
            restored = out.is_some(),
            ms = t.elapsed().as_millis() as u64,
            "saved path index checked"
        );
        out
    }

    /// Saves the current listing in the store (a clean shutdown). Only a listing the watcher
    /// kept current is saved; its stamps are taken before the last changes are applied, so a
    /// change after them moves a stamp. Blocking.
    pub(crate) fn persist(&self, versions: &crate::versions::Versions) {
        let Some(p) = self.persist.as_ref() else {
            return;
        };
        let mut st = lock(&self.state);
        let Some(current) = st.listing.clone() else {
            return;
        };
        if !versions.is_watching() {
            return;
        }
        let stamps = self.stamp_dirs(&current, SystemTime::now());
        drop(current);
        let Ok((listing, why)) = self.listing_locked(&mut st, || versions.is_watching(), &|| {
            versions.watch_quiet()
        }) else {
            return;
        };
        if why.is_some()
            || listing.incomplete
            || listing.capped
            || listing.non_utf8 > 0
            || !listing.unlisted.is_empty()
        {
            return;
        }
        let Some(root) = self.root_identity() else {
            return;
        };
        let data = encode(&listing, &stamps, root, &self.limits);
        if let Err(e) = p.store.save_path_index(&p.registration, &data) {
            tracing::warn!(error = %e, "saving the path index failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{Ix, index_with, paths};
    use super::*;
    use codespace_store::Store;

    fn store(dir: &Path) -> (Arc<Store>, String) {
        let store = Arc::new(Store::open(&dir.join("s.db")).unwrap());
        let reg = store.register_workspace("w", "1:1", "reg-1").unwrap();
        (store, reg)
    }

    fn saved(ws: &Path, store: &Arc<Store>, reg: &str) -> Ix {
        index_with(ws, |ix| ix.saved_in(Arc::clone(store), reg))
    }

    /// Waits until every directory under `dir` last changed more than [`RACY`] ago by the file
    /// system's clock, so stamps taken now vouch for them (the path where a stamp is trusted).
    fn settle(dir: &Path) {
        fn newest(p: &Path, at: &mut (i64, i64)) {
            let m = std::fs::symlink_metadata(p).unwrap();
            *at = (*at).max((m.ctime(), m.ctime_nsec()));
            if m.is_dir() {
                for e in std::fs::read_dir(p).unwrap() {
                    newest(&e.unwrap().path(), at);
                }
            }
        }
        let mut at = (0, 0);
        newest(dir, &mut at);
        let probe = dir.parent().unwrap().join("clock-probe");
        loop {
            std::fs::write(&probe, b"").unwrap();
            let m = std::fs::symlink_metadata(&probe).unwrap();
            let now = i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec());
            let then = i128::from(at.0) * 1_000_000_000 + i128::from(at.1);
            if now - then > 2 * RACY.as_nanos() as i128 {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn a_restart_sees_what_changed_while_it_was_down() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        for d in ["a", "b/c", "keep/deep/er", "k"] {
            std::fs::create_dir_all(ws.join(d)).unwrap();
        }
        for f in ["a/x", "a/y", "b/c/d", "keep/deep/er/f", "k/file"] {
            std::fs::write(ws.join(f), b"").unwrap();
        }
        let (store, reg) = store(tmp.path());
        settle(&ws);
        {
            let ix = saved(&ws, &store, &reg);
            ix.get();
            ix.persist(&ix.versions);
        }
        // Offline: a file added and one removed, a directory renamed, a file replaced by a
        // directory with content, a file replaced by another (new inode) under the same name.
        std::fs::write(ws.join("a/new"), b"").unwrap();
        std::fs::remove_file(ws.join("a/y")).unwrap();
        std::fs::rename(ws.join("b/c"), ws.join("b/c2")).unwrap();
        std::fs::remove_file(ws.join("k/file")).unwrap();
        std::fs::create_dir(ws.join("k/file")).unwrap();
        std::fs::write(ws.join("k/file/inner"), b"").unwrap();
        std::fs::write(ws.join("keep/deep/er/g"), b"").unwrap();
        std::fs::rename(ws.join("keep/deep/er/g"), ws.join("keep/deep/er/f")).unwrap();
        let ix = saved(&ws, &store, &reg);
        let seed = ix.restore().expect("the saved index is used");
        let walked = ix.walk_all().unwrap();
        assert_eq!(paths(&seed.listing), paths(&walked));
        assert_eq!(seed.listing.entries, walked.entries, "kinds and inodes too");
        assert!(paths(&seed.listing).contains(&"k/file/inner"));
        // Taken: a second start without a clean shutdown in between walks.
        assert!(ix.restore().is_none());
    }

    #[test]
    fn a_restart_over_many_directories_checks_and_registers_each_one() {
        // More directories than one thread stamps: the check is split over threads.
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        let n = PARALLEL_STAMP_FROM + 150;
        for i in 0..n {
            let d = ws.join(format!("d{i:04}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("f"), b"").unwrap();
        }
        let (store, reg) = store(tmp.path());
        settle(&ws);
        {
            let ix = saved(&ws, &store, &reg);
            ix.get();
            ix.persist(&ix.versions);
        }
        // Offline: a change in the first directory, one in the middle and one in the last, so
        // each run of the split has one.
        std::fs::write(ws.join("d0000/new"), b"").unwrap();
        std::fs::remove_file(ws.join(format!("d{:04}/f", n / 2))).unwrap();
        std::fs::write(ws.join(format!("d{:04}/g", n - 1)), b"").unwrap();
        let ix = saved(&ws, &store, &reg);
        let seen = std::sync::Mutex::new(HashSet::<String>::new());
        let on_dir = |rel: &str| {
            seen.lock().unwrap().insert(rel.to_string());
        };
        let seed = ix.restore_with(&on_dir).expect("the saved index is used");
        let walked = ix.walk_all().unwrap();
        assert_eq!(seed.listing.entries, walked.entries);
        let dirs: HashSet<String> = walked
            .entries
            .iter()
            .filter(|e| e.kind == Kind::Dir)
            .map(|e| e.path.to_string())
            .chain([String::new()])
            .collect();
        assert_eq!(dirs.len(), n + 1);
        assert_eq!(*seen.lock().unwrap(), dirs, "every directory registered");
        // Every directory is stamped but the three changed within `RACY` (whose stamps would
        // vouch for nothing).
        let changed = [
            "d0000".to_string(),
            format!("d{:04}", n / 2),
            format!("d{:04}", n - 1),
        ];
        let stamped: HashSet<String> = seed.stamps.keys().map(|k| k.to_string()).collect();
        let unstamped: HashSet<String> = dirs.difference(&stamped).cloned().collect();
        assert_eq!(unstamped, changed.into_iter().collect());
    }

    #[test]
    fn a_listing_no_stamp_vouches_for_is_listed_again() {
        // Changed right before the save (no settling): every stamp is racy, and the restore
        // still matches the disk.
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        std::fs::create_dir_all(ws.join("a/b")).unwrap();
        std::fs::write(ws.join("a/b/f"), b"").unwrap();
        let (store, reg) = store(tmp.path());
        {
            let ix = saved(&ws, &store, &reg);
            ix.get();
            ix.persist(&ix.versions);
        }
        std::fs::write(ws.join("a/b/g"), b"").unwrap();
        std::fs::remove_file(ws.join("a/b/f")).unwrap();
        let ix = saved(&ws, &store, &reg);
        let seed = ix.restore().expect("restored");
        assert_eq!(paths(&seed.listing), vec!["a", "a/b", "a/b/g"]);
    }

    #[test]
    fn a_root_replaced_by_another_directory_is_walked_again() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        std::fs::create_dir_all(ws.join("old")).unwrap();
        std::fs::write(ws.join("old/f"), b"").unwrap();
        let (store, reg) = store(tmp.path());
        settle(&ws);
        {
            let ix = saved(&ws, &store, &reg);
            ix.get();
            ix.persist(&ix.versions);
        }
        std::fs::rename(&ws, tmp.path().join("gone")).unwrap();
        std::fs::create_dir_all(ws.join("new")).unwrap();
        let ix = saved(&ws, &store, &reg);
        assert!(
            ix.restore().is_none(),
            "another root: the saved index is not used"
        );
        let (l, _) = ix.get();
        assert_eq!(paths(&l), vec!["new"]);
    }

    #[test]
    fn the_layout_round_trips_and_refuses_damage() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("a/b")).unwrap();
        std::fs::write(tmp.path().join("a/b/c"), b"").unwrap();
        let ix = super::super::testing::index(tmp.path());
        let l = ix.walk_all().unwrap();
        let root = Stamp {
            dev: 1,
            ino: 2,
            mtime: (3, 4),
            ctime: (5, 6),
        };
        let mut stamps = Stamps::new();
        stamps.insert("a".into(), root);
        stamps.insert("".into(), root);
        let data = encode(&l, &stamps, (7, 8), &ix.limits);
        let (entries, s, r) = decode(&data, &ix.limits).unwrap();
        assert_eq!(entries, l.entries);
        assert_eq!(s, stamps);
        assert_eq!(r, (7, 8));
        for cut in [0, 3, data.len() / 2, data.len() - 1] {
            assert!(decode(&data[..cut], &ix.limits).is_none(), "{cut}");
        }
        let other = WalkLimits {
            max_entries: 5,
            ..ix.limits
        };
        assert!(decode(&data, &other).is_none());
    }
}
