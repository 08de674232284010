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

/// The smallest read buffer of a hash.
const SMALL_CHUNK: usize = 4096;

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

/// The largest file [`OpenedFile::read_all_nowait`] reads.
pub const NOWAIT_MAX_BYTES: u64 = 64 * 1024;

impl Root {
    /// [`Root::open_for_read`] for a caller that must not wait on the disk (an async worker):
    /// only on a local file system, only when every path component is in the kernel's lookup
    /// cache (`RESOLVE_CACHED`) and no mount point is crossed (`RESOLVE_NO_XDEV`); symlinks are
    /// refused as always. `None` when that cannot be done: the caller then uses
    /// [`Root::open_for_read`] on a thread that may block (which reports the real error, e.g.
    /// `FILE_NOT_FOUND`). `Some(Err(NotRegularFile))` for a special file (not opened twice).
    pub fn open_for_read_nowait(&self, p: &RelPath) -> Option<Result<OpenedFile, FsError>> {
        if !self.nowait_reads() || p.is_root() {
            return None;
        }
        let fd = crate::resolve::open_beneath_cached(
            self.as_fd(),
            p.as_str(),
            OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY,
        )?;
        let st = rustix::fs::fstat(&fd).ok()?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Some(Err(FsError::NotRegularFile {
                path: p.as_str().to_owned(),
            }));
        }
        Some(Ok(OpenedFile {
            file: std::fs::File::from(fd),
            path: p.as_str().to_owned(),
            id: FileId::from_stat(&st),
            mode: st.st_mode & 0o7777,
            links: crate::meta::nlink(&st),
        }))
    }
}

impl OpenedFile {
    /// The whole file, if it is at most [`NOWAIT_MAX_BYTES`] and every byte of it is in the
    /// page cache: one `RWF_NOWAIT` read, which returns what is cached without waiting on the
    /// disk. `None` when the file is larger, not wholly cached, changed size since it was
    /// opened, or the file system cannot read without waiting: read it with
    /// [`OpenedFile::hash_window`] on a thread that may block instead.
    pub fn read_all_nowait(&self) -> Option<Vec<u8>> {
        if self.id.size > NOWAIT_MAX_BYTES {
            return None;
        }
        let want = usize::try_from(self.id.size).ok()?;
        // One byte more than the size: a file that grew is seen in the same read.
        let mut buf = vec![0u8; want + 1];
        let n = loop {
            match rustix::io::preadv2(
                &self.file,
                &mut [std::io::IoSliceMut::new(&mut buf)],
                0,
                rustix::io::ReadWriteFlags::NOWAIT,
            ) {
                Ok(n) => break n,
                Err(rustix::io::Errno::INTR) => {}
                Err(_) => return None,
            }
        };
        if n != want {
            return None;
        }
        buf.truncate(n);
        Some(buf)
    }

    /// True when the file's identity (size, times, inode) is still the one it was opened with.
    pub fn unchanged(&self) -> bool {
        self.current_id().is_ok_and(|now| now == self.id)
    }

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
        // The window's size is known from the size at open (a file that changes meanwhile
        // only grows or shrinks the vector).
        let want = limit.min(self.id.size.saturating_sub(offset));
        let mut data = Vec::with_capacity(usize::try_from(want).unwrap_or(0));
        let mut pos: u64 = 0;
        // A small file needs no 64 KiB buffer (zeroed on every read): its size and one byte
        // (to see the end in the same read) is enough.
        let buf_len = usize::try_from(self.id.size.saturating_add(1))
            .unwrap_or(CHUNK)
            .clamp(SMALL_CHUNK, CHUNK);
        let mut buf = vec![0u8; buf_len];
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
