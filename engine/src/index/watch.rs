//! The watcher's feed into the index: the events recorded between two uses (dirty paths,
//! overflow, ignore-file changes) and the fence that proves every change made before a call was
//! delivered.

use codespace_runner_search::IgnoreFileKind;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{PathIndex, lock};
use crate::versions::WatchObserver;

/// Dirty paths remembered between two uses; more than this counts as an overflow.
const MAX_DIRTY: usize = 20_000;

/// How long a listing waits for its fence event before it walks instead.
const FENCE_WAIT: Duration = Duration::from_secs(2);

impl PathIndex {
    /// The fence directory the watcher must also watch (outside the workspace).
    pub(crate) fn fence_dir(&self) -> Option<PathBuf> {
        self.fence.as_ref().map(|f| f.dir.path().to_path_buf())
    }

    /// Waits until the watcher delivered every event queued before this call; false when that
    /// cannot be shown (no fence event within [`FENCE_WAIT`]; the fence is then given up).
    /// `quiet` true (the watcher holds nothing undelivered) shows it without a fence file.
    pub(super) fn flush(&self, quiet: &dyn Fn() -> bool) -> bool {
        let Some(f) = &self.fence else {
            return false;
        };
        if f.broken.load(Ordering::Acquire) {
            return false;
        }
        if quiet() {
            return true;
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

    /// [`PathIndex::flush`] for the operation ledger (a command's changed files are read once
    /// every event before its exit was delivered).
    pub(crate) fn flush_watch(&self, versions: &crate::versions::Versions) -> bool {
        self.flush(&|| versions.watch_quiet())
    }

    /// The watcher callback that feeds this index.
    pub(crate) fn observer(&self) -> WatchObserver {
        let events = Arc::clone(&self.events);
        let root = self.root_abs.clone();
        let fence = self.fence.clone();
        let links = Arc::clone(&self.links);
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
                EventKind::Modify(ModifyKind::Data(_)) => false,
                // A link count the listing holds may have moved.
                EventKind::Modify(ModifyKind::Metadata(_)) => links.load(Ordering::Acquire),
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
                    if matches!(event.kind, EventKind::Modify(ModifyKind::Metadata(_))) {
                        // The root's own permissions or times: no name changed.
                        continue;
                    }
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
}

#[cfg(test)]
mod tests {
    use super::super::testing::index;

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
}
