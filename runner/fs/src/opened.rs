//! An open regular file and its identity, for reads whose version may come from a cache.
//!
//! [`FileId`] is what a file's content version can be cached under: device, inode, size,
//! modification and status-change times. Any write through any name changes the mtime and
//! ctime (and an atomic replace changes the inode), so an unchanged identity means unchanged
//! content — except within the timestamp granularity of a write that raced the hash, which
//! the caller rules out by caching only files whose times are older than the hash (see
//! [`FileId::settled_before`]).

use std::os::unix::fs::FileExt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustix::fs::{FileType, OFlags, Stat};

use crate::error::FsError;
use crate::path::RelPath;
use crate::read::CHUNK;
use crate::root::Root;
use crate::version::{Version, VersionHasher};

/// The identity of a file's content: equal identities mean equal content (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileId {
    /// `st_dev`.
    pub dev: u64,
    /// `st_ino`.
    pub ino: u64,
    /// `st_size`.
    pub size: u64,
    /// `st_mtime` as (seconds, nanoseconds).
    pub mtime: (i64, i64),
    /// `st_ctime` as (seconds, nanoseconds).
    pub ctime: (i64, i64),
}

fn as_time((secs, nanos): (i64, i64)) -> SystemTime {
    let secs = u64::try_from(secs).unwrap_or(0);
    let nanos = u32::try_from(nanos).unwrap_or(0);
    UNIX_EPOCH + Duration::new(secs, 0) + Duration::from_nanos(u64::from(nanos))
}

impl FileId {
    fn from_stat(st: &Stat) -> FileId {
        FileId {
            dev: st.st_dev,
            ino: st.st_ino,
            size: u64::try_from(st.st_size).unwrap_or(0),
            mtime: (st.st_mtime, i64::try_from(st.st_mtime_nsec).unwrap_or(0)),
            ctime: (st.st_ctime, i64::try_from(st.st_ctime_nsec).unwrap_or(0)),
        }
    }

    /// True when both times are at least `margin` older than `t`: a write racing a hash that
    /// started at `t` would have moved them past this point, whatever the file system's
    /// timestamp granularity (up to `margin`).
    pub fn settled_before(&self, t: SystemTime, margin: Duration) -> bool {
        let newest = as_time(self.mtime).max(as_time(self.ctime));
        newest
            .checked_add(margin)
            .is_some_and(|settled| settled <= t)
    }
}

/// A regular file opened beneath a root (no symlink on the way, non-blocking open, refused
/// unless regular), with its identity at open time.
#[derive(Debug)]
pub struct OpenedFile {
    file: std::fs::File,
    path: String,
    /// The identity at open time.
    pub id: FileId,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// Hard-link count (`st_nlink`) at open time.
    pub links: u64,
}

/// The result of [`OpenedFile::hash_window`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HashedWindow {
    /// The bytes of the window.
    pub data: Vec<u8>,
    /// Bytes read in all.
    pub size: u64,
    /// The version of everything read.
    pub version: Version,
    /// True when the identity after the hash is the one at open: nothing wrote the file
    /// meanwhile, so `version` may be cached under [`OpenedFile::id`].
    pub stable: bool,
}

impl Root {
    /// Opens the regular file `p` for reading; see [`OpenedFile`].
    pub fn open_for_read(&self, p: &RelPath) -> Result<OpenedFile, FsError> {
        let fd = self.open_rel(p, OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY)?;
        let st = rustix::fs::fstat(&fd).map_err(|e| FsError::from_errno(p.as_str(), e))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(FsError::NotRegularFile {
                path: p.as_str().to_owned(),
            });
        }
        Ok(OpenedFile {
            file: std::fs::File::from(fd),
            path: p.as_str().to_owned(),
            id: FileId::from_stat(&st),
            mode: st.st_mode & 0o7777,
            links: crate::meta::nlink(&st),
        })
    }
}

impl OpenedFile {
    fn current_id(&self) -> Result<FileId, FsError> {
        let st = rustix::fs::fstat(&self.file).map_err(|e| FsError::from_errno(&self.path, e))?;
        Ok(FileId::from_stat(&st))
    }

    /// The window `[offset, offset + limit)` only, read in place (no whole-file pass).
    pub fn read_window(&self, offset: u64, limit: u64) -> Result<Vec<u8>, FsError> {
        let want = usize::try_from(limit.min(self.id.size.saturating_sub(offset))).unwrap_or(0);
        let mut data = vec![0u8; want];
        let mut got = 0usize;
        while let Some(rest) = data.get_mut(got..).filter(|r| !r.is_empty()) {
            match self.file.read_at(rest, offset.saturating_add(got as u64)) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(FsError::from_std(&self.path, &e)),
            }
        }
        data.truncate(got);
        Ok(data)
    }

    /// The whole content, refused with `FILE_TOO_LARGE` when the file is (or grows while being
    /// read) larger than `max_bytes`: never more than `max_bytes` plus one chunk in memory.
    pub fn read_all_bounded(&self, max_bytes: u64) -> Result<Vec<u8>, FsError> {
        if self.id.size > max_bytes {
            return Err(FsError::too_large(&self.path, self.id.size, max_bytes));
        }
        let mut data = Vec::with_capacity(usize::try_from(self.id.size).unwrap_or(0));
        let mut buf = vec![0u8; CHUNK];
        loop {
            let n = match self.file.read_at(&mut buf, data.len() as u64) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(FsError::from_std(&self.path, &e)),
            };
            let Some(chunk) = buf.get(..n).filter(|c| !c.is_empty()) else {
                return Ok(data);
            };
            if (data.len() + n) as u64 > max_bytes {
                return Err(FsError::too_large(
                    &self.path,
                    (data.len() + n) as u64,
                    max_bytes,
                ));
            }
            data.extend_from_slice(chunk);
        }
    }

    /// Hashes the whole file while keeping the window `[offset, offset + limit)`; refuses a
    /// file larger than `max_hash_bytes` (by its size at open, and again if it grows while
    /// being read) with `FILE_TOO_LARGE`. Memory stays at the window plus one chunk.
    pub fn hash_window(
        &self,
        offset: u64,
        limit: u64,
        max_hash_bytes: u64,
    ) -> Result<HashedWindow, FsError> {
        if self.id.size > max_hash_bytes {
            return Err(FsError::too_large(&self.path, self.id.size, max_hash_bytes));
        }
        let end = offset.saturating_add(limit);
        let mut hasher = VersionHasher::new();
        let mut data = Vec::new();
        let mut pos: u64 = 0;
        let mut buf = vec![0u8; CHUNK];
        loop {
            let n = match self.file.read_at(&mut buf, pos) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(FsError::from_std(&self.path, &e)),
            };
            let Some(chunk) = buf.get(..n).filter(|c| !c.is_empty()) else {
                break;
            };
            let chunk_end = pos.saturating_add(n as u64);
            if chunk_end > max_hash_bytes {
                return Err(FsError::too_large(&self.path, chunk_end, max_hash_bytes));
            }
            hasher.update(chunk);
            let from = offset.clamp(pos, chunk_end) - pos;
            let to = end.clamp(pos, chunk_end) - pos;
            if let Some(window) = chunk.get(from as usize..to as usize) {
                data.extend_from_slice(window);
            }
            pos = chunk_end;
        }
        let stable = self.current_id().is_ok_and(|now| now == self.id) && pos == self.id.size;
        Ok(HashedWindow {
            data,
            size: pos,
            version: hasher.finish(),
            stable,
        })
    }
}
