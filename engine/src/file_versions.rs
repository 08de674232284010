//! File reads off the async workers, with content versions cached by file identity.
//!
//! Every open, read and hash that may wait on the disk runs on tokio's blocking pool. The one
//! exception never waits: a small file the kernel can open and read from its caches alone
//! (`RESOLVE_CACHED`, `RWF_NOWAIT`, on a local file system) is read on the calling worker, which
//! saves the hand-off to a blocking thread and back, the largest share of a small `read`'s time;
//! anything the caches cannot serve is refused by the kernel at once and goes to the pool.
//!
//! A version is cached under the file's (device, inode, size, mtime, ctime) once the file has
//! been hashed without changing and its times are older than the hash by [`SETTLE`] (so a
//! write within the file system's timestamp granularity cannot hide behind an unchanged
//! identity); a cached file is read for its window only. Files above [`INLINE_HASH_BYTES`] are hashed one identity at a time (a
//! second reader of the same file waits for the first hash instead of repeating it) and at
//! most [`HASH_SLOTS`] at once. A file above `limits.max_hash_bytes` is `FILE_TOO_LARGE`
//! before any byte is read.

use crate::error::{ErrorCode, ToolError};
use codespace_runner_fs::{FileId, FsError, OpenedFile, RelPath, Root, Version};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};
use tokio::sync::Semaphore;

/// Versions remembered (the table is emptied when full).
const CACHE_MAX: usize = 4096;
/// Files up to this size are hashed straight away in the read's blocking step.
pub const INLINE_HASH_BYTES: u64 = 4 << 20;
/// Larger files hashed at the same time.
pub const HASH_SLOTS: usize = 2;
/// How much older than the hash a file's times must be for its version to be cached.
pub const SETTLE: Duration = Duration::from_secs(2);

/// A window of a file and facts about the whole file.
#[derive(Debug, Clone)]
pub(crate) struct Window {
    pub(crate) data: Vec<u8>,
    pub(crate) size: u64,
    pub(crate) version: Version,
    /// Hard-link count (`st_nlink`) of the file that was read, from the open descriptor.
    pub(crate) links: u64,
}

/// The cache and the hashing limits of one gateway.
#[derive(Debug)]
pub(crate) struct FileVersions {
    cache: Mutex<HashMap<FileId, Version>>,
    /// Identities being hashed, each behind its own lock.
    hashing: Mutex<HashMap<FileId, Arc<tokio::sync::Mutex<()>>>>,
    slots: Semaphore,
    /// See [`SETTLE`].
    settle: Duration,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The ToolError of a refused or failed file access; `FILE_TOO_LARGE` names the limit.
pub(crate) fn fs_error(e: FsError, limit_name: &str) -> ToolError {
    let too_large = matches!(e, FsError::TooLarge { .. });
    let mut t = ToolError::from(e);
    if too_large {
        t.message = format!("{} ({limit_name})", t.message);
    }
    t
}

fn joined(e: tokio::task::JoinError) -> ToolError {
    ToolError::new(ErrorCode::Internal, format!("file task: {e}"))
}

enum FirstStep {
    Done(Window),
    Big(OpenedFile),
}

impl FileVersions {
    pub(crate) fn new() -> FileVersions {
        FileVersions {
            cache: Mutex::new(HashMap::new()),
            hashing: Mutex::new(HashMap::new()),
            slots: Semaphore::new(HASH_SLOTS),
            settle: SETTLE,
        }
    }

    /// The same with another settle time (tests cache files they just wrote).
    #[cfg(test)]
    fn with_settle(settle: Duration) -> FileVersions {
        FileVersions {
            settle,
            ..FileVersions::new()
        }
    }

    fn cached(&self, id: &FileId) -> Option<Version> {
        lock(&self.cache).get(id).cloned()
    }

    fn remember(&self, id: &FileId, stable: bool, version: &Version, started: SystemTime) {
        if !stable || !id.settled_before(started, self.settle) {
            return;
        }
        let mut c = lock(&self.cache);
        if c.len() >= CACHE_MAX {
            c.clear();
        }
        c.insert(*id, version.clone());
    }

    /// The window from the cache's version, or a hash of the whole file.
    fn window_of(
        &self,
        f: &OpenedFile,
        offset: u64,
        limit: u64,
        max_hash_bytes: u64,
    ) -> Result<Window, FsError> {
        if let Some(version) = self.cached(&f.id) {
            return Ok(Window {
                data: f.read_window(offset, limit)?,
                size: f.id.size,
                version,
                links: f.links,
            });
        }
        let started = SystemTime::now();
        let h = f.hash_window(offset, limit, max_hash_bytes)?;
        self.remember(&f.id, h.stable, &h.version, started);
        Ok(Window {
            data: h.data,
            size: h.size,
            version: h.version,
            links: f.links,
        })
    }

    /// The read done on the calling (async) thread, when the kernel can serve it from its caches
    /// without waiting: a small file ([`codespace_runner_fs::NOWAIT_MAX_BYTES`]) on a local file
    /// system, opened with `RESOLVE_CACHED` and read whole with `RWF_NOWAIT` (see
    /// [`Root::open_for_read_nowait`]). Its version is the cached one or a hash of those few
    /// bytes (about what serializing them into the reply costs). `None`: anything else, to be
    /// done on the blocking pool; `Some(Err)` only for a special file.
    fn read_nowait(
        &self,
        root: &Root,
        rel: &RelPath,
        offset: u64,
        limit: u64,
        max_hash_bytes: u64,
    ) -> Option<Result<Window, ToolError>> {
        let f = match root.open_for_read_nowait(rel)? {
            Ok(f) => f,
            Err(e) => return Some(Err(fs_error(e, "limits.max_hash_bytes"))),
        };
        if f.id.size > max_hash_bytes {
            return None;
        }
        let started = SystemTime::now();
        let mut data = f.read_all_nowait()?;
        // A file that changed while read is left to the blocking path's rules.
        if !f.unchanged() {
            return None;
        }
        let version = match self.cached(&f.id) {
            Some(v) => v,
            None => {
                let v = Version::from_bytes(&data);
                self.remember(&f.id, true, &v, started);
                v
            }
        };
        let size = data.len() as u64;
        let from = usize::try_from(offset.min(size)).ok()?;
        let to = usize::try_from(offset.saturating_add(limit).min(size)).ok()?;
        let window = if from == 0 && to == data.len() {
            data
        } else {
            data.drain(from..to).collect()
        };
        Some(Ok(Window {
            data: window,
            size,
            version,
            links: f.links,
        }))
    }

    /// Reads the window `[offset, offset + limit)` of `rel` and the version of the whole file.
    pub(crate) async fn read(
        self: &Arc<Self>,
        root: &Arc<Root>,
        rel: &RelPath,
        offset: u64,
        limit: u64,
        max_hash_bytes: u64,
    ) -> Result<Window, ToolError> {
        if let Some(done) = self.read_nowait(root, rel, offset, limit, max_hash_bytes) {
            return done;
        }
        let (this, root_c, rel_c) = (Arc::clone(self), Arc::clone(root), rel.clone());
        let first = tokio::task::spawn_blocking(move || -> Result<FirstStep, FsError> {
            let f = root_c.open_for_read(&rel_c)?;
            if f.id.size > max_hash_bytes {
                return Err(FsError::too_large(
                    rel_c.as_str(),
                    f.id.size,
                    max_hash_bytes,
                ));
            }
            if f.id.size <= INLINE_HASH_BYTES || this.cached(&f.id).is_some() {
                return this
                    .window_of(&f, offset, limit, max_hash_bytes)
                    .map(FirstStep::Done);
            }
            Ok(FirstStep::Big(f))
        })
        .await
        .map_err(joined)?
        .map_err(|e| fs_error(e, "limits.max_hash_bytes"))?;
        let f = match first {
            FirstStep::Done(w) => return Ok(w),
            FirstStep::Big(f) => f,
        };
        // One hash per identity: later readers wait here and then find the version cached.
        let id = f.id;
        let gate = Arc::clone(lock(&self.hashing).entry(id).or_default());
        let held = gate.lock().await;
        let permit = self
            .slots
            .acquire()
            .await
            .map_err(|e| ToolError::new(ErrorCode::Internal, e.to_string()))?;
        let this = Arc::clone(self);
        let out =
            tokio::task::spawn_blocking(move || this.window_of(&f, offset, limit, max_hash_bytes))
                .await
                .map_err(joined)
                .and_then(|r| r.map_err(|e| fs_error(e, "limits.max_hash_bytes")));
        drop(permit);
        drop(held);
        {
            let mut h = lock(&self.hashing);
            // The map and this function hold the gate: nobody else waits on it.
            if Arc::strong_count(&gate) <= 2 {
                h.remove(&id);
            }
        }
        out
    }

    /// The version of `rel` (None when it does not exist), hashed under the same rules.
    pub(crate) async fn version(
        self: &Arc<Self>,
        root: &Arc<Root>,
        rel: &RelPath,
        max_hash_bytes: u64,
    ) -> Result<Option<Version>, ToolError> {
        match self.read(root, rel, 0, 0, max_hash_bytes).await {
            Ok(w) => Ok(Some(w.version)),
            Err(e) if e.code == ErrorCode::FileNotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Versions cached now (tests).
    #[cfg(test)]
    pub(crate) fn cached_count(&self) -> usize {
        lock(&self.cache).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> (tempfile::TempDir, Arc<Root>) {
        let dir = tempfile::tempdir().unwrap();
        let root = Arc::new(Root::open(dir.path()).unwrap());
        (dir, root)
    }

    #[tokio::test]
    async fn a_fresh_file_is_not_cached() {
        let (dir, root) = root();
        std::fs::write(dir.path().join("f.txt"), "0123456789").unwrap();
        let fv = Arc::new(FileVersions::new());
        let rel = RelPath::parse("f.txt").unwrap();
        let a = fv.read(&root, &rel, 2, 3, 1 << 20).await.unwrap();
        assert_eq!(a.data, b"234");
        assert_eq!(a.size, 10);
        assert_eq!(a.version, Version::from_bytes(b"0123456789"));
        // Written just now: a write in the same timestamp tick could hide; not cached.
        assert_eq!(fv.cached_count(), 0);
    }

    #[tokio::test]
    async fn a_settled_file_is_hashed_once_and_a_change_is_seen() {
        let (dir, root) = root();
        let path = dir.path().join("f.txt");
        std::fs::write(&path, "0123456789").unwrap();
        let fv = Arc::new(FileVersions::with_settle(Duration::ZERO));
        let rel = RelPath::parse("f.txt").unwrap();
        let a = fv.read(&root, &rel, 0, 4, 1 << 20).await.unwrap();
        assert_eq!(fv.cached_count(), 1);
        let b = fv.read(&root, &rel, 8, 4, 1 << 20).await.unwrap();
        assert_eq!((b.data.as_slice(), b.size), (&b"89"[..], 10));
        assert_eq!(b.version, a.version);
        // Another size (and times): another identity, hashed again.
        std::fs::write(&path, "01234567890").unwrap();
        let c = fv.read(&root, &rel, 0, 100, 1 << 20).await.unwrap();
        assert_eq!(c.version, Version::from_bytes(b"01234567890"));
        assert_eq!(c.data, b"01234567890");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_readers_of_a_big_file_share_one_hash() {
        let (dir, root) = root();
        let path = dir.path().join("big");
        std::fs::File::create(&path)
            .unwrap()
            .set_len(INLINE_HASH_BYTES + 1)
            .unwrap();
        let fv = Arc::new(FileVersions::with_settle(Duration::ZERO));
        let rel = RelPath::parse("big").unwrap();
        let tasks: Vec<_> = (0..4)
            .map(|i| {
                let (fv, root, rel) = (Arc::clone(&fv), Arc::clone(&root), rel.clone());
                tokio::spawn(async move { fv.read(&root, &rel, i, 1, u64::MAX).await })
            })
            .collect();
        let mut versions = Vec::new();
        for t in tasks {
            let w = t.await.unwrap().unwrap();
            assert_eq!(w.data, vec![0u8]);
            versions.push(w.version);
        }
        versions.dedup();
        assert_eq!(versions.len(), 1);
        assert_eq!(fv.cached_count(), 1);
        assert!(lock(&fv.hashing).is_empty(), "identity locks are released");
    }

    #[tokio::test]
    async fn a_file_over_the_limit_is_too_large_before_it_is_read() {
        let (dir, root) = root();
        let f = std::fs::File::create(dir.path().join("big")).unwrap();
        f.set_len(8 << 30).unwrap();
        let fv = Arc::new(FileVersions::new());
        let rel = RelPath::parse("big").unwrap();
        let e = fv.read(&root, &rel, 0, 1, 1 << 20).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::FileTooLarge, "{e}");
        assert!(e.message.contains("limits.max_hash_bytes"), "{e}");
        assert!(!e.message.contains(dir.path().to_str().unwrap()));
        assert_eq!(
            fv.version(&root, &RelPath::parse("none").unwrap(), 1)
                .await
                .unwrap(),
            None
        );
    }

    #[tokio::test]
    async fn every_window_of_a_small_file_matches_the_blocking_read() {
        let (dir, root) = root();
        let body: Vec<u8> = (0..5000u32).map(|i| (i % 97) as u8 + b' ').collect();
        std::fs::write(dir.path().join("f.txt"), &body).unwrap();
        let fv = Arc::new(FileVersions::with_settle(Duration::ZERO));
        let rel = RelPath::parse("f.txt").unwrap();
        for (offset, limit) in [
            (0, 1 << 20),
            (0, 10),
            (4990, 100),
            (5000, 5),
            (7000, 1),
            (3, 0),
        ] {
            let w = fv.read(&root, &rel, offset, limit, 1 << 20).await.unwrap();
            let h = root
                .open_for_read(&rel)
                .unwrap()
                .hash_window(offset, limit, 1 << 20)
                .unwrap();
            assert_eq!(w.data, h.data, "window {offset}+{limit}");
            assert_eq!((w.size, &w.version), (h.size, &h.version));
            assert_eq!(w.links, 1);
        }
        assert_eq!(fv.cached_count(), 1, "hashed once, then from the cache");
    }

    #[tokio::test]
    async fn a_fifo_is_refused_at_once() {
        let (dir, root) = root();
        let made = std::process::Command::new("mkfifo")
            .arg(dir.path().join("fifo"))
            .status()
            .unwrap();
        assert!(made.success());
        let fv = Arc::new(FileVersions::new());
        let rel = RelPath::parse("fifo").unwrap();
        let e = fv.read(&root, &rel, 0, 10, 1 << 20).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::SpecialFileRejected, "{e}");
    }

    #[test]
    fn only_settled_stable_hashes_are_remembered() {
        let fv = FileVersions::new();
        let now = SystemTime::now();
        let secs = |t: SystemTime| {
            let d = t.duration_since(std::time::UNIX_EPOCH).unwrap();
            (d.as_secs() as i64, i64::from(d.subsec_nanos()))
        };
        let id = |t: SystemTime| FileId {
            dev: 1,
            ino: 2,
            size: 3,
            mtime: secs(t),
            ctime: secs(t),
        };
        let v = Version::from_bytes(b"x");
        fv.remember(&id(now), true, &v, now);
        assert_eq!(fv.cached_count(), 0, "just written: not settled");
        let old = now - Duration::from_secs(10);
        fv.remember(&id(old), false, &v, now);
        assert_eq!(fv.cached_count(), 0, "changed while hashed");
        fv.remember(&id(old), true, &v, now);
        assert_eq!(fv.cached(&id(old)), Some(v));
    }
}
