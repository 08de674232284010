//! The index's source when a workspace's files are its runner's (a worker's environment), beside
//! the local walks of `walk.rs`: the full listing is one `Runner::walk` of the root, a link count
//! is `Runner::stat`, an ignore file is `Runner::read`. Nothing here opens a host path.
//!
//! There is no fence across the wire (nothing proves that every change the worker's watcher saw
//! before a call has arrived), so a runner's listing is walked again on every use and says so
//! (`walk_reason: watcher_unavailable`): the index stays a cache of the disk, never a source of
//! truth. Called on blocking threads only (each call waits for the runner's future there).

use codespace_runner_api::{self as api, RunnerError};
use codespace_runner_fs::{FsError, Kind, Unlisted, UnlistedWhy};
use std::sync::Arc;
use std::time::Instant;

use super::walk::{next_generation, outermost};
use super::{Entry, Listing, PathIndex, RunnerFiles, lock};
use crate::wire::WalkReason;

/// Waits for `fut` on this (blocking) thread, on the runtime the thread belongs to.
fn wait<T>(
    fut: impl std::future::Future<Output = Result<T, RunnerError>>,
) -> Result<T, RunnerError> {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => handle.block_on(fut),
        Err(_) => Err(RunnerError::internal("no runtime to reach the runner from")),
    }
}

fn io(e: &RunnerError) -> FsError {
    FsError::Io {
        path: ".".into(),
        message: format!("the environment's runner: {e}"),
    }
}

fn kind(k: api::FileKind) -> Kind {
    match k {
        api::FileKind::File => Kind::File,
        api::FileKind::Dir => Kind::Dir,
        api::FileKind::Symlink => Kind::Symlink,
        api::FileKind::Other => Kind::Other,
    }
}

impl RunnerFiles {
    /// The whole workspace listed by the runner, capped by `limits`.
    fn walk(&self, limits: &codespace_runner_fs::WalkLimits) -> Result<Listing, FsError> {
        let l = wait(self.runner.walk(api::WalkRequest {
            workspace: self.workspace.clone(),
            path: ".".into(),
            max_depth: limits.max_depth as u64,
            max_entries: limits.max_entries as u64,
            stat_links: false,
        }))
        .map_err(|e| io(&e))?;
        let unlisted: Vec<Unlisted> = l
            .unlisted
            .into_iter()
            .map(|u| Unlisted {
                path: if u.path == "." { String::new() } else { u.path },
                why: match u.why {
                    api::UnlistedReason::Depth => UnlistedWhy::Depth,
                    api::UnlistedReason::Unreadable => UnlistedWhy::Unreadable,
                    api::UnlistedReason::NonUtf8Name => UnlistedWhy::NonUtf8Name,
                },
                name: u.name,
            })
            .collect();
        let mut entries: Vec<Entry> = l
            .entries
            .into_iter()
            .map(|e| Entry {
                path: e.path.into_boxed_str(),
                kind: kind(e.kind),
                ino: e.ino,
                temp: e.temp,
                links: None,
            })
            .collect();
        entries.sort_unstable_by(|a, b| a.path.cmp(&b.path));
        Ok(Listing {
            entries,
            incomplete: l.incomplete || l.capped,
            generation: next_generation(),
            non_utf8: usize::try_from(l.non_utf8_skipped).unwrap_or(usize::MAX),
            capped: l.capped,
            unlisted: outermost(unlisted),
        })
    }

    /// What `path` is and its link count (`Ok(None)`: gone; `Err`: it could not be examined).
    pub(super) fn kind_and_links(&self, path: &str) -> Result<Option<(Kind, u64)>, ()> {
        wait(self.runner.stat(api::PathRequest {
            workspace: self.workspace.clone(),
            path: path.to_string(),
        }))
        .map(|s| s.map(|s| (kind(s.kind), s.links)))
        .map_err(drop)
    }

    /// The first `max` bytes of the regular file `path` (`None`: not readable).
    pub(super) fn head(&self, path: &str, max: u64) -> Option<Vec<u8>> {
        wait(self.runner.read(api::ReadRequest {
            workspace: self.workspace.clone(),
            path: path.to_string(),
            offset: 0,
            limit: max,
            max_hash_bytes: u64::MAX,
        }))
        .ok()
        .map(|w| w.data)
    }
}

impl PathIndex {
    /// A runner's listing: walked on every use (see the module's note), kept only as the
    /// caches' key.
    pub(super) fn listing_remote(
        &self,
        files: &RunnerFiles,
    ) -> Result<(Arc<Listing>, Option<WalkReason>), FsError> {
        let mut st = lock(&self.state);
        st.last_used = Some(Instant::now());
        let listing = Arc::new(files.walk(&self.limits)?);
        let unchanged = st.listing.as_ref().is_some_and(|old| same(old, &listing));
        let listing = match (&st.listing, unchanged) {
            // The same tree as last time: keep its generation, so the decision groups cached
            // for it are reused. Ignore files may have changed in place (no watcher tells):
            // their rules and the `find` pages derived with them are read again.
            (Some(old), true) => {
                let mut c = lock(&self.caches);
                c.ignore = None;
                c.derived.clear();
                Arc::clone(old)
            }
            _ => {
                *lock(&self.caches) = super::Caches::default();
                st.listing = Some(Arc::clone(&listing));
                listing
            }
        };
        Ok((listing, Some(WalkReason::WatcherUnavailable)))
    }
}

/// Whether two listings hold the same entries and the same facts (all but the generation).
fn same(a: &Listing, b: &Listing) -> bool {
    a.entries == b.entries
        && a.incomplete == b.incomplete
        && a.non_utf8 == b.non_utf8
        && a.capped == b.capped
        && a.unlisted == b.unlisted
}
