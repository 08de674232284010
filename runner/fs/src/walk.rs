//! Bounded, no-follow recursive listing of a [`Root`].

use rustix::fd::OwnedFd;
use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};

use crate::error::FsError;
use crate::meta::Kind;
use crate::path::RelPath;
use crate::root::Root;
use crate::temp::{TempNames, parse_temp_name};

/// Caps on a walk. A walk that hits any cap returns what it gathered with `incomplete` set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalkLimits {
    /// Deepest path listed, in components (entries of the root are depth 1). Default 64.
    pub max_depth: usize,
    /// Most entries returned. Default 1 000 000.
    pub max_entries: usize,
    /// Also `lstat` every non-directory to report its link count in [`WalkEntry::links`] (one
    /// extra syscall per entry). Default false.
    pub stat_links: bool,
}

impl Default for WalkLimits {
    fn default() -> WalkLimits {
        WalkLimits {
            max_depth: 64,
            max_entries: 1_000_000,
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

/// Why a directory's content is not (wholly) in a [`Walk`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnlistedWhy {
    /// It lies at `max_depth`: listed, not descended.
    Depth,
    /// It could not be opened or read.
    Unreadable,
    /// It holds a name that is not valid UTF-8 (left out).
    NonUtf8Name,
}

/// A directory whose content a walk does not hold whole (its subtree is unknown).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unlisted {
    /// Workspace-relative path of the directory (`""` for the root).
    pub path: String,
    /// Why.
    pub why: UnlistedWhy,
    /// For [`UnlistedWhy::NonUtf8Name`]: the first such name, its bytes escaped (`caf\xe9`).
    pub name: Option<String>,
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
    /// `max_entries` cut the walk short (what was left out is not known).
    pub capped: bool,
    /// Directories whose content the walk does not hold whole (depth cap, unreadable, a name
    /// that is not UTF-8), in the order found; everything else beneath the start is listed
    /// unless `capped`.
    pub unlisted: Vec<Unlisted>,
}

/// Which entries a walk keeps.
pub(crate) enum Select<'a> {
    /// Every entry, the server's temporary files included.
    All,
    /// Everything except the server's temporary files (regular files `TempNames::is_server_temp` names).
    Visible(&'a TempNames),
    /// Only regular files named `.codespace-tmp-<instance>-<n>` whose instance id the predicate accepts.
    ServerTemps(&'a dyn Fn(&str) -> bool),
}

impl Select<'_> {
    fn keeps(&self, name: &str, kind: Kind) -> bool {
        match self {
            Select::All => true,
            Select::Visible(temps) => !(kind == Kind::File && temps.is_server_temp(name)),
            Select::ServerTemps(accept) => {
                kind == Kind::File && parse_temp_name(name).is_some_and(|(id, _)| accept(id))
            }
        }
    }
}

/// A directory being listed: its fd, its relative path, its depth, and the subdirectories still to visit.
struct Frame {
    /// The directory, read to its end: its fd opens the subdirectories.
    dir: Dir,
    prefix: String,
    depth: usize,
    pending: Vec<String>,
}

impl Root {
    /// Lists everything beneath the root, hidden entries included, never following a symlink; the
    /// server's own temporary files (see [`Root::temp_names`]) are never listed.
    ///
    /// Directories are opened one at a time relative to their parent with the same no-follow resolution as
    /// every other operation; at most `max_depth + 1` directory fds are open at once. A subdirectory that
    /// vanishes or turns into a symlink mid-walk is skipped. Only a failure to read the root itself is an
    /// error.
    pub fn walk(&self, limits: &WalkLimits) -> Result<Walk, FsError> {
        self.walk_under(&RelPath::root(), limits)
    }

    /// [`Root::walk`], keeping the entries `select` keeps (`max_entries` counts those).
    pub(crate) fn walk_selected(
        &self,
        limits: &WalkLimits,
        select: &Select<'_>,
    ) -> Result<Walk, FsError> {
        self.walk_under_selected(&RelPath::root(), limits, select)
    }

    /// Like [`Root::walk`], but lists only what lies beneath the directory `dir` (not `dir` itself).
    /// Paths stay workspace-relative and depth counts from the root, so `max_depth` means the same
    /// as for a whole walk. A `dir` that is missing, a symlink or not a directory is an error.
    /// The server's own temp files are never listed.
    pub fn walk_under(&self, dir: &RelPath, limits: &WalkLimits) -> Result<Walk, FsError> {
        self.walk_under_selected(dir, limits, &Select::Visible(self.temp_names()))
    }

    /// [`Root::walk_under`], the server's temporary files included (a caller that must see every
    /// path, such as secret masking, decides what to hide itself).
    pub fn walk_under_all(&self, dir: &RelPath, limits: &WalkLimits) -> Result<Walk, FsError> {
        self.walk_under_selected(dir, limits, &Select::All)
    }

    /// [`Root::walk_under_all`], calling `on_dir` with each directory's workspace-relative path
    /// (`""` for the root) once it is opened and before its entries are read (a file watcher
    /// registers it there, so a change the read misses is an event).
    pub fn walk_under_all_watching(
        &self,
        dir: &RelPath,
        limits: &WalkLimits,
        on_dir: &dyn Fn(&str),
    ) -> Result<Walk, FsError> {
        self.walk_under_inner(dir, limits, &Select::All, on_dir)
    }

    fn walk_under_selected(
        &self,
        dir: &RelPath,
        limits: &WalkLimits,
        select: &Select<'_>,
    ) -> Result<Walk, FsError> {
        self.walk_under_inner(dir, limits, select, &|_| {})
    }

    fn walk_under_inner(
        &self,
        dir: &RelPath,
        limits: &WalkLimits,
        select: &Select<'_>,
        on_dir: &dyn Fn(&str),
    ) -> Result<Walk, FsError> {
        let mut walk = Walk::default();
        let start_fd = self.open_at(
            self.as_fd(),
            dir.as_str(),
            OFlags::RDONLY | OFlags::DIRECTORY,
            Mode::empty(),
            dir.as_str(),
        )?;
        let (prefix, depth) = if dir.is_root() {
            (String::new(), 0)
        } else {
            (format!("{}/", dir.as_str()), dir.components().count())
        };
        let mut stack: Vec<Frame> = Vec::new();
        on_dir(dir.as_str());
        let start_frame = list_dir(start_fd, prefix, depth, limits, select, &mut walk)
            .map_err(|e| FsError::from_errno(dir.as_str(), e))?;
        stack.push(start_frame);
        while let Some(top) = stack.last_mut() {
            let Some(name) = top.pending.pop() else {
                stack.pop();
                continue;
            };
            let rel = format!("{}{}", top.prefix, name);
            let Ok(top_fd) = top.dir.fd() else {
                // Not reached on Linux (the stream's fd is its own); should it happen, the
                // subdirectories left are reported unlisted, never dropped silently.
                let dir = top
                    .prefix
                    .strip_suffix('/')
                    .unwrap_or(&top.prefix)
                    .to_owned();
                walk.incomplete = true;
                walk.unlisted.push(Unlisted {
                    path: dir,
                    why: UnlistedWhy::Unreadable,
                    name: None,
                });
                stack.pop();
                continue;
            };
            let opened = self.open_at(
                top_fd,
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
                    walk.unlisted.push(Unlisted {
                        path: rel,
                        why: UnlistedWhy::Unreadable,
                        name: None,
                    });
                    continue;
                }
            };
            let depth = top.depth + 1;
            on_dir(&rel);
            match list_dir(fd, format!("{rel}/"), depth, limits, select, &mut walk) {
                Ok(frame) => stack.push(frame),
                Err(_) => {
                    walk.incomplete = true;
                    walk.unlisted.push(Unlisted {
                        path: rel,
                        why: UnlistedWhy::Unreadable,
                        name: None,
                    });
                }
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
    select: &Select<'_>,
    walk: &mut Walk,
) -> Result<Frame, rustix::io::Errno> {
    let mut pending = Vec::new();
    // The stream owns the directory's fd (`read_from` would reopen it: a `fcntl`, an `openat`
    // and a `close` more per directory); the fd stats the entries and opens the subdirectories,
    // neither of which moves the stream's position.
    let mut dir = Dir::new(fd)?;
    let this_dir = || prefix.strip_suffix('/').unwrap_or(&prefix).to_owned();
    let mut odd_name_seen = false;
    while let Some(entry) = dir.read() {
        let entry = entry?;
        let raw = entry.file_name().to_bytes();
        if raw == b"." || raw == b".." {
            continue;
        }
        let Ok(name) = std::str::from_utf8(raw) else {
            walk.non_utf8_skipped += 1;
            if !odd_name_seen {
                odd_name_seen = true;
                walk.unlisted.push(Unlisted {
                    path: this_dir(),
                    why: UnlistedWhy::NonUtf8Name,
                    name: Some(raw.escape_ascii().to_string()),
                });
            }
            continue;
        };
        if walk.entries.len() >= limits.max_entries {
            walk.incomplete = true;
            walk.capped = true;
            break;
        }
        let lstat = || {
            let fd = dir.fd()?;
            rustix::fs::statat(fd, name, AtFlags::SYMLINK_NOFOLLOW)
        };
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
                walk.unlisted.push(Unlisted {
                    path: [prefix.as_str(), name].concat(),
                    why: UnlistedWhy::Depth,
                    name: None,
                });
            }
        }
        if select.keeps(name, kind) {
            walk.entries.push(WalkEntry {
                path: [prefix.as_str(), name].concat(),
                kind,
                ino: entry.ino(),
                links,
            });
        }
    }
    // Visit subdirectories in name order (popped from the end).
    pending.sort_unstable_by(|a, b| b.cmp(a));
    Ok(Frame {
        dir,
        prefix,
        depth,
        pending,
    })
}
