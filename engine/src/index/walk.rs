//! Walking the tree into a listing: the full no-follow walk (in parallel), the re-check of the
//! paths the watcher marked dirty, and which entries are the server's own temporary files.

use codespace_runner_fs::{FsError, Kind, RelPath, TempNames, Unlisted, UnlistedWhy, WalkLimits};
use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{Entry, Listing, PathIndex};

/// Listing generations are unique across the process.
static GENERATION: AtomicU64 = AtomicU64::new(1);

pub(super) fn next_generation() -> u64 {
    GENERATION.fetch_add(1, Ordering::Relaxed)
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
    /// The subtree of each second-level directory this thread walked, sorted by path, with
    /// that directory's path.
    subtrees: Vec<(usize, Vec<codespace_runner_fs::WalkEntry>)>,
    /// Entries in `subtrees`.
    entries: usize,
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
pub(super) fn outermost(mut unlisted: Vec<Unlisted>) -> Vec<Unlisted> {
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

/// The entries of `top` (the first two levels) and of each second-level directory's subtree
/// (`(directory + "/", its entries sorted by path)`), sorted by path, without sorting them all again.
///
/// Every path of a directory `d`'s subtree starts with `d/`, and no other path here does (`top`
/// holds nothing deeper than `d`, subtrees belong to distinct directories of the same depth).
/// So in byte order the subtree is one run: it sits where `d/` would, which is not always
/// right after `d` (`d-x` and `d.txt` sort between `d` and `d/`). The subtrees are ordered by
/// that key and merged with the sorted `top` in one pass.
fn splice_sorted(
    mut top: Vec<codespace_runner_fs::WalkEntry>,
    mut keyed: Vec<(String, Vec<codespace_runner_fs::WalkEntry>)>,
) -> Vec<codespace_runner_fs::WalkEntry> {
    top.sort_unstable_by(|a, b| a.path.cmp(&b.path));
    keyed.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let total = top.len() + keyed.iter().map(|(_, es)| es.len()).sum::<usize>();
    let mut all = Vec::with_capacity(total);
    let mut blocks = keyed.into_iter().peekable();
    for e in top {
        while let Some((_, block)) = blocks.next_if(|(key, _)| key.as_str() < e.path.as_str()) {
            all.extend(block);
        }
        all.push(e);
    }
    for (_, block) in blocks {
        all.extend(block);
    }
    all
}

impl PathIndex {
    /// A full no-follow walk, in parallel: one walk lists the first two levels, then the
    /// directories of the second level are walked by a few threads (each with `walk_under`, the
    /// same no-follow walk) and the results are merged in path order.
    pub(super) fn walk_all(&self) -> Result<Listing, FsError> {
        self.walk_all_with(super::NO_REGISTRATION)
    }

    /// [`PathIndex::walk_all`], calling `on_dir` with each directory before it is read.
    pub(super) fn walk_all_with(&self, on_dir: super::OnDir<'_>) -> Result<Listing, FsError> {
        let limits = WalkLimits {
            stat_links: self.links.load(Ordering::Acquire),
            ..self.limits
        };
        let top_limits = WalkLimits {
            max_depth: limits.max_depth.min(2),
            ..limits
        };
        let root = self.local_root()?;
        let top = root.walk_under_all_watching(&RelPath::root(), &top_limits, on_dir)?;
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
                if part.entries >= self.limits.max_entries {
                    part.capped = true;
                    break;
                }
                match RelPath::parse(dir)
                    .map(|rel| root.walk_under_all_watching(&rel, &limits, on_dir))
                {
                    Ok(Ok(w)) => {
                        part.incomplete |= w.incomplete;
                        part.capped |= w.capped;
                        part.non_utf8 += w.non_utf8_skipped;
                        part.entries += w.entries.len();
                        // Sorted here, on this thread: the merge below only splices.
                        let mut subtree = w.entries;
                        subtree.sort_unstable_by(|a, b| a.path.cmp(&b.path));
                        part.subtrees.push((i, subtree));
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
        let mut subtrees = Vec::new();
        for part in parts {
            incomplete |= part.incomplete || part.capped;
            capped |= part.capped;
            non_utf8 += part.non_utf8;
            subtrees.extend(
                part.subtrees
                    .into_iter()
                    .filter_map(|(i, es)| work.get(i).map(|dir| (format!("{dir}/"), es))),
            );
            unlisted.extend(part.unlisted);
        }
        let mut all = splice_sorted(top.entries, subtrees);
        if all.len() > self.limits.max_entries {
            all.truncate(self.limits.max_entries);
            incomplete = true;
            capped = true;
        }
        let temps = root.temp_names();
        let entries = all
            .into_iter()
            .map(|e| Entry {
                temp: is_server_temp(temps, &e.path, e.kind),
                path: e.path.into_boxed_str(),
                kind: e.kind,
                ino: e.ino,
                links: e.links,
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

    /// Re-checks `dirty` paths against the disk and returns the updated listing.
    pub(super) fn apply(&self, current: Arc<Listing>, dirty: HashSet<String>) -> Arc<Listing> {
        self.apply_with(current, dirty, super::NO_REGISTRATION)
    }

    /// [`PathIndex::apply`], calling `on_dir` with each directory before it is read.
    pub(super) fn apply_with(
        &self,
        current: Arc<Listing>,
        dirty: HashSet<String>,
        on_dir: super::OnDir<'_>,
    ) -> Arc<Listing> {
        let Some(root) = self.root.as_deref() else {
            return current;
        };
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
        let temps = root.temp_names();
        let limits = WalkLimits {
            stat_links: self.links.load(Ordering::Acquire),
            ..self.limits
        };
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
            if let Ok(Some(meta)) = root.stat(&rel) {
                additions.push(Entry {
                    path: p.clone().into_boxed_str(),
                    kind: meta.kind,
                    ino: meta.ino,
                    temp: is_server_temp(temps, p, meta.kind),
                    links: (limits.stat_links && meta.kind != Kind::Dir).then_some(meta.links),
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
                    match root.walk_under_all_watching(&rel, &limits, on_dir) {
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
                                links: e.links,
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
        // A name added or removed moves the link count of every other name of its inode: those
        // counts are read again below.
        let mut moved_inos: HashSet<u64> = additions
            .iter()
            .filter(|a| a.kind != Kind::Dir)
            .map(|a| a.ino)
            .collect();
        let mut r = ranges.iter().peekable();
        let mut adds = additions.into_iter().peekable();
        for (i, e) in old.into_iter().enumerate() {
            while r.peek().is_some_and(|&&(_, hi)| hi <= i) {
                r.next();
            }
            if r.peek().is_some_and(|&&(lo, hi)| lo <= i && i < hi) {
                if e.kind != Kind::Dir {
                    moved_inos.insert(e.ino);
                }
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
        if limits.stat_links && !moved_inos.is_empty() {
            for e in merged
                .iter_mut()
                .filter(|e| e.kind != Kind::Dir && moved_inos.contains(&e.ino))
            {
                e.links = RelPath::parse(&e.path)
                    .ok()
                    .and_then(|rel| root.stat(&rel).ok().flatten())
                    .map(|m| m.links);
            }
        }
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
}

#[cfg(test)]
mod tests {
    use super::super::testing::{index, paths};
    use super::*;
    use crate::wire::WalkReason;
    use codespace_runner_fs::Root;

    #[test]
    fn subtrees_walked_on_threads_are_spliced_in_byte_order() {
        // Second-level directories whose siblings share their prefix and sort between `d` and
        // `d/` (`d-x`, `d.txt`, `d0`), in several top directories, so several threads walk
        // subtrees: the listing is in byte order, every path once, as a sort of it gives.
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        for top in ["a", "a-b", "b"] {
            for sub in ["d", "d-x", "d0", "e"] {
                std::fs::create_dir_all(d.join(format!("{top}/{sub}/k/l"))).unwrap();
                std::fs::write(d.join(format!("{top}/{sub}/k/l/f")), b"").unwrap();
                std::fs::write(d.join(format!("{top}/{sub}/-f")), b"").unwrap();
            }
            std::fs::write(d.join(format!("{top}/d.txt")), b"").unwrap();
            std::fs::write(d.join(format!("{top}/d/.z")), b"").unwrap();
        }
        std::fs::write(d.join("a.txt"), b"").unwrap();
        let ix = index(d);
        let l = ix.walk_all().unwrap();
        let got = paths(&l);
        let mut want = got.clone();
        want.sort_unstable();
        want.dedup();
        assert_eq!(got, want);
        // 3 top dirs + a.txt; per top dir 4 subdirs × (dir, k, k/l, k/l/f, -f) + d.txt + d/.z.
        assert_eq!(got.len(), 4 + 3 * (4 * 5 + 2));
        let at = |p: &str| got.iter().position(|x| *x == p).unwrap();
        assert!(at("a/d") < at("a/d-x") && at("a/d-x") < at("a/d.txt"));
        assert!(at("a/d.txt") < at("a/d/-f") && at("a/d/k/l/f") < at("a/d0"));
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
        std::fs::write(
            d.join(ix.root.as_ref().unwrap().temp_names().next_name()),
            b"",
        )
        .unwrap();
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
        let name = ix.root.as_ref().unwrap().temp_names().next_name();
        std::fs::rename(d.join("config"), d.join(&name)).unwrap();
        std::os::unix::fs::symlink(
            "x",
            d.join(ix.root.as_ref().unwrap().temp_names().next_name()),
        )
        .unwrap();
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
