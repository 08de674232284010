//! Bounded, no-follow recursive listing of a [`Root`].

use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};

use crate::error::FsError;
use crate::meta::Kind;
use crate::root::Root;

/// Caps on a walk. A walk that hits any cap returns what it gathered with `incomplete` set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalkLimits {
    /// Deepest path listed, in components (entries of the root are depth 1). Default 64.
    pub max_depth: usize,
    /// Most directories whose contents are read, the root included. Default 10 000.
    pub max_dirs: usize,
    /// Most entries returned. Default 50 000.
    pub max_entries: usize,
    /// Also `lstat` every non-directory to report its link count in [`WalkEntry::links`] (one
    /// extra syscall per entry). Default false.
    pub stat_links: bool,
}

impl Default for WalkLimits {
    fn default() -> WalkLimits {
        WalkLimits {
            max_depth: 64,
            max_dirs: 10_000,
            max_entries: 50_000,
            stat_links: false,
        }
    }
}

/// One listed path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalkEntry {
    /// Workspace-relative, `'/'`-separated path.
    pub path: String,
    /// What it is (symlinks are listed as such and never followed).
    pub kind: Kind,
    /// Inode number from the directory entry (`d_ino`); names of one inode share it.
    pub ino: u64,
    /// Hard-link count (`st_nlink`) of a non-directory, when the walk was asked for it
    /// ([`WalkLimits::stat_links`]); `None` for directories and otherwise.
    pub links: Option<u64>,
}

/// The result of [`Root::walk`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Walk {
    /// Every entry found, sorted by path in byte order.
    pub entries: Vec<WalkEntry>,
    /// A cap cut the walk short, or a subdirectory could not be read.
    pub incomplete: bool,
    /// Entries skipped because their name is not valid UTF-8.
    pub non_utf8_skipped: usize,
}

/// A directory being listed: its fd, its relative path, its depth, and the subdirectories still to visit.
struct Frame {
    fd: OwnedFd,
    prefix: String,
    depth: usize,
    pending: Vec<String>,
}

impl Root {
    /// Lists everything beneath the root, hidden entries included, never following a symlink.
    ///
    /// Directories are opened one at a time relative to their parent with the same no-follow resolution as
    /// every other operation; at most `max_depth + 1` directory fds are open at once. A subdirectory that
    /// vanishes or turns into a symlink mid-walk is skipped. Only a failure to read the root itself is an
    /// error.
    pub fn walk(&self, limits: &WalkLimits) -> Result<Walk, FsError> {
        let mut walk = Walk::default();
        if limits.max_dirs == 0 {
            walk.incomplete = true;
            return Ok(walk);
        }
        let root_fd = self.open_at(
            self.as_fd(),
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY,
            Mode::empty(),
            ".",
        )?;
        let mut dirs_read = 1;
        let mut stack: Vec<Frame> = Vec::new();
        let root_frame = list_dir(root_fd, String::new(), 0, limits, &mut walk)
            .map_err(|e| FsError::from_errno(".", e))?;
        stack.push(root_frame);
        while let Some(top) = stack.last_mut() {
            let Some(name) = top.pending.pop() else {
                stack.pop();
                continue;
            };
            if dirs_read >= limits.max_dirs {
                walk.incomplete = true;
                break;
            }
            let rel = format!("{}{}", top.prefix, name);
            let opened = self.open_at(
                top.fd.as_fd(),
                &name,
                OFlags::RDONLY | OFlags::DIRECTORY,
                Mode::empty(),
                &rel,
            );
            let fd = match opened {
                Ok(fd) => fd,
                Err(FsError::NotFound { .. }) => continue,
                Err(_) => {
                    walk.incomplete = true;
                    continue;
                }
            };
            dirs_read += 1;
            let depth = top.depth + 1;
            match list_dir(fd, format!("{rel}/"), depth, limits, &mut walk) {
                Ok(frame) => stack.push(frame),
                Err(_) => walk.incomplete = true,
            }
            if walk.entries.len() >= limits.max_entries && walk.incomplete {
                break;
            }
        }
        // Paths are unique, so an unstable sort gives the same order without its allocation.
        walk.entries.sort_unstable_by(|a, b| a.path.cmp(&b.path));
        Ok(walk)
    }
}

/// Reads one directory's entries into `walk` and returns a frame holding the subdirectories to visit.
/// `depth` is the depth of the directory itself (0 for the root).
fn list_dir(
    fd: OwnedFd,
    prefix: String,
    depth: usize,
    limits: &WalkLimits,
    walk: &mut Walk,
) -> Result<Frame, rustix::io::Errno> {
    let mut pending = Vec::new();
    let mut dir = Dir::read_from(&fd)?;
    while let Some(entry) = dir.read() {
        let entry = entry?;
        let raw = entry.file_name().to_bytes();
        if raw == b"." || raw == b".." {
            continue;
        }
        let Ok(name) = std::str::from_utf8(raw) else {
            walk.non_utf8_skipped += 1;
            continue;
        };
        if walk.entries.len() >= limits.max_entries {
            walk.incomplete = true;
            break;
        }
        let lstat = || rustix::fs::statat(&fd, name, AtFlags::SYMLINK_NOFOLLOW);
        let (kind, mut nlink) = match entry.file_type() {
            FileType::Unknown => match lstat() {
                Ok(st) => (Kind::from_mode(st.st_mode), Some(crate::meta::nlink(&st))),
                Err(_) => continue,
            },
            ft => (Kind::from_file_type(ft), None),
        };
        let links = if kind == Kind::Dir || !limits.stat_links {
            None
        } else {
            if nlink.is_none() {
                match lstat() {
                    Ok(st) => nlink = Some(crate::meta::nlink(&st)),
                    // Gone since the listing: nothing to report.
                    Err(_) => continue,
                }
            }
            nlink
        };
        if kind == Kind::Dir {
            if depth + 1 < limits.max_depth {
                pending.push(name.to_owned());
            } else {
                walk.incomplete = true;
            }
        }
        walk.entries.push(WalkEntry {
            path: [prefix.as_str(), name].concat(),
            kind,
            ino: entry.ino(),
            links,
        });
    }
    // Visit subdirectories in name order (popped from the end).
    pending.sort_unstable_by(|a, b| b.cmp(a));
    Ok(Frame {
        fd,
        prefix,
        depth,
        pending,
    })
}
