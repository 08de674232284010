//! Reading beneath a [`Root`]: windowed reads, whole-file reads, lstat and versions.

use std::io::Read;
use std::os::fd::OwnedFd;

use rustix::fs::{AtFlags, FileType, OFlags};
use rustix::io::Errno;

use crate::error::FsError;
use crate::meta::{Kind, Meta};
use crate::path::RelPath;
use crate::root::Root;
use crate::version::{Version, VersionHasher};

/// Size of the buffer used to stream file content.
pub(crate) const CHUNK: usize = 64 * 1024;

/// A window of a file together with facts about the whole file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadOutcome {
    /// The bytes in `[offset, offset + limit)` (shorter at end of file; empty past it).
    pub data: Vec<u8>,
    /// Size of the whole file in bytes, as read.
    pub size: u64,
    /// Version (SHA-256) of the whole file.
    pub version: Version,
    /// Hard-link count (`st_nlink`) of the file that was read, taken from the open descriptor.
    pub links: u64,
}

/// The whole content of a file with its permission bits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileContent {
    /// The content.
    pub data: Vec<u8>,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// Version (SHA-256) of `data`.
    pub version: Version,
}

impl Root {
    /// Opens `p` for reading as a regular file: no symlink anywhere, `O_NONBLOCK` so a FIFO cannot block,
    /// then `fstat` to refuse anything that is not a regular file. Returns the file, its mode bits
    /// and its link count.
    fn open_regular(&self, p: &RelPath) -> Result<(std::fs::File, u32, u64), FsError> {
        let fd = self.open_rel(p, OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY)?;
        let st = rustix::fs::fstat(&fd).map_err(|e| FsError::from_errno(p.as_str(), e))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(FsError::NotRegularFile {
                path: p.as_str().to_owned(),
            });
        }
        Ok((
            std::fs::File::from(fd),
            st.st_mode & 0o7777,
            crate::meta::nlink(&st),
        ))
    }

    /// Opens the regular file `p` for reading, with no symlink anywhere on the path (a FIFO cannot
    /// block: the open is non-blocking), and returns it with its metadata. Anything that is not a
    /// regular file is [`FsError::NotRegularFile`].
    pub fn open_file(&self, p: &RelPath) -> Result<(std::fs::File, Meta), FsError> {
        let fd = self.open_rel(p, OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY)?;
        let st = rustix::fs::fstat(&fd).map_err(|e| FsError::from_errno(p.as_str(), e))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(FsError::NotRegularFile {
                path: p.as_str().to_owned(),
            });
        }
        Ok((std::fs::File::from(fd), Meta::from_stat(&st)))
    }

    /// Reads the window `[offset, offset + limit)` of the regular file `p`, hashing the whole file.
    pub fn read(&self, p: &RelPath, offset: u64, limit: u64) -> Result<ReadOutcome, FsError> {
        let (mut file, _, links) = self.open_regular(p)?;
        let end = offset.saturating_add(limit);
        let mut hasher = VersionHasher::new();
        let mut data = Vec::new();
        let mut pos: u64 = 0;
        let mut buf = vec![0u8; CHUNK];
        loop {
            let n = read_some(&mut file, &mut buf, p)?;
            let Some(chunk) = buf.get(..n) else { break };
            if chunk.is_empty() {
                break;
            }
            hasher.update(chunk);
            let chunk_end = pos.saturating_add(n as u64);
            let from = offset.clamp(pos, chunk_end) - pos;
            let to = end.clamp(pos, chunk_end) - pos;
            if let Some(window) = chunk.get(from as usize..to as usize) {
                data.extend_from_slice(window);
            }
            pos = chunk_end;
        }
        Ok(ReadOutcome {
            data,
            size: pos,
            version: hasher.finish(),
            links,
        })
    }

    /// Reads the whole regular file `p`.
    pub fn read_all(&self, p: &RelPath) -> Result<FileContent, FsError> {
        let (mut file, mode, _) = self.open_regular(p)?;
        let mut data = Vec::new();
        file.read_to_end(&mut data)
            .map_err(|e| FsError::from_std(p.as_str(), &e))?;
        let version = Version::from_bytes(&data);
        Ok(FileContent {
            data,
            mode,
            version,
        })
    }

    /// lstat of `p` without following anything: `None` when `p` (or one of its ancestors) does not exist.
    /// An ancestor that is a symlink is `SymlinkRejected`; an ancestor that is not a directory is
    /// `NotDirectory`. A symlink leaf is reported as [`Kind::Symlink`].
    pub fn stat(&self, p: &RelPath) -> Result<Option<Meta>, FsError> {
        if p.is_root() {
            let st = rustix::fs::fstat(self.as_fd()).map_err(|e| FsError::from_errno(".", e))?;
            return Ok(Some(Meta::from_stat(&st)));
        }
        if !p.as_str().contains('/') {
            // A top-level name: its parent is the root fd itself, no directory to open.
            return match rustix::fs::statat(self.as_fd(), p.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => Ok(Some(Meta::from_stat(&st))),
                Err(Errno::NOENT) => Ok(None),
                Err(e) => Err(FsError::from_errno(p.as_str(), e)),
            };
        }
        let (dir, leaf) = match self.open_parent(p) {
            Ok(found) => found,
            Err(FsError::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        match rustix::fs::statat(&dir, leaf, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(Meta::from_stat(&st))),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(FsError::from_errno(p.as_str(), e)),
        }
    }

    /// [`Root::stat`] for a caller that must not wait: the path resolved from the kernel's lookup
    /// cache alone (`RESOLVE_CACHED`, no mount crossed, no symlink followed: a symlink leaf is
    /// itself stat'ed, like `lstat`) and the metadata of the opened inode. `None` when that cannot
    /// be done, whatever the reason (not cached, missing, another mount, an old kernel): the
    /// caller then asks [`Root::stat`] on a thread that may block.
    pub fn stat_nowait(&self, p: &RelPath) -> Option<Meta> {
        if p.is_root() {
            return rustix::fs::fstat(self.as_fd())
                .ok()
                .map(|st| Meta::from_stat(&st));
        }
        let fd = crate::resolve::open_beneath_cached(self.as_fd(), p.as_str(), OFlags::PATH)?;
        rustix::fs::fstat(&fd).ok().map(|st| Meta::from_stat(&st))
    }

    /// [`Root::stat`] of many paths, opening each parent directory once while its entries come
    /// in a row (as in a sorted listing; any order is correct, only slower). One result per path,
    /// in order.
    pub fn stat_many<'a>(
        &self,
        paths: impl IntoIterator<Item = &'a RelPath>,
    ) -> Vec<Result<Option<Meta>, FsError>> {
        /// Parent directories kept open (a sorted listing returns to a parent after its
        /// subdirectories).
        const KEPT: usize = 64;
        let mut open: Vec<(String, OwnedFd)> = Vec::new();
        // The entry used for the previous path: a sorted listing's files of one directory come
        // in a row, so this one comparison answers almost every path (no scan of `open`).
        let mut last: Option<usize> = None;
        let mut out = Vec::new();
        for p in paths {
            // The parent as a slice of the path (`"."` for a top-level name): no allocation.
            let parent = match p.as_str().rsplit_once('/') {
                _ if p.is_root() => None,
                Some((head, _)) => Some(head),
                None => Some("."),
            };
            let Some(parent) = parent else {
                out.push(self.stat(p));
                continue;
            };
            let hit = last
                .filter(|&i| open.get(i).is_some_and(|(d, _)| d == parent))
                .or_else(|| open.iter().rposition(|(d, _)| d == parent));
            let at = match hit {
                Some(i) => i,
                None => match self.open_parent(p) {
                    Ok((fd, _)) => {
                        if open.len() >= KEPT {
                            open.remove(0);
                        }
                        open.push((parent.to_string(), fd));
                        open.len() - 1
                    }
                    Err(FsError::NotFound { .. }) => {
                        out.push(Ok(None));
                        continue;
                    }
                    Err(e) => {
                        out.push(Err(e));
                        continue;
                    }
                },
            };
            last = Some(at);
            let (Some((_, dir)), Some(leaf)) = (open.get(at), p.file_name()) else {
                out.push(self.stat(p));
                continue;
            };
            out.push(
                match rustix::fs::statat(dir, leaf, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) => Ok(Some(Meta::from_stat(&st))),
                    Err(Errno::NOENT) => Ok(None),
                    Err(e) => Err(FsError::from_errno(p.as_str(), e)),
                },
            );
        }
        out
    }

    /// The version of the regular file `p`, or `None` when it does not exist. A symlink or special file is
    /// an error, as for [`Root::read`].
    pub fn version(&self, p: &RelPath) -> Result<Option<Version>, FsError> {
        match self.read(p, 0, 0) {
            Ok(out) => Ok(Some(out.version)),
            Err(FsError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Whether `p` names a regular file (lstat semantics); `false` when absent.
    pub fn is_file(&self, p: &RelPath) -> Result<bool, FsError> {
        Ok(matches!(
            self.stat(p)?,
            Some(Meta {
                kind: Kind::File,
                ..
            })
        ))
    }
}

/// One `read` call, retrying on `EINTR`.
fn read_some(file: &mut std::fs::File, buf: &mut [u8], p: &RelPath) -> Result<usize, FsError> {
    loop {
        match file.read(buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(FsError::from_std(p.as_str(), &e)),
        }
    }
}
