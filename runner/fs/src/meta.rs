//! File kinds and lstat-style metadata.

use rustix::fs::{FileType, Stat};

/// What a directory entry is. Symlinks are reported as such, never followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (never followed).
    Symlink,
    /// Anything else: FIFO, socket, character or block device.
    Other,
}

impl Kind {
    /// The kind for a rustix file type.
    pub(crate) fn from_file_type(ft: FileType) -> Kind {
        match ft {
            FileType::RegularFile => Kind::File,
            FileType::Directory => Kind::Dir,
            FileType::Symlink => Kind::Symlink,
            _ => Kind::Other,
        }
    }

    /// The kind encoded in a raw `st_mode`.
    pub(crate) fn from_mode(st_mode: u32) -> Kind {
        Kind::from_file_type(FileType::from_raw_mode(st_mode))
    }
}

/// `st_nlink` as u64 (it is narrower on some architectures).
#[allow(
    clippy::useless_conversion,
    reason = "st_nlink is u64 on x86_64 but u32 on aarch64"
)]
pub(crate) fn nlink(st: &Stat) -> u64 {
    u64::from(st.st_nlink)
}

/// Metadata of one path, without following a symlink leaf.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    /// What the path is.
    pub kind: Kind,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// Size in bytes as reported by the kernel.
    pub size: u64,
    /// Last modification time, milliseconds since the Unix epoch.
    pub mtime_ms: i64,
    /// Number of hard links (`st_nlink`): names the inode has. For a directory this counts its
    /// subdirectories' `..` entries, not aliases.
    pub links: u64,
    /// Inode number (`st_ino`): names of one inode share it.
    pub ino: u64,
}

impl Meta {
    /// Metadata from a `stat` result.
    pub(crate) fn from_stat(st: &Stat) -> Meta {
        Meta {
            kind: Kind::from_mode(st.st_mode),
            mode: st.st_mode & 0o7777,
            size: u64::try_from(st.st_size).unwrap_or(0),
            mtime_ms: st
                .st_mtime
                .saturating_mul(1000)
                .saturating_add(i64::try_from(st.st_mtime_nsec).unwrap_or(0) / 1_000_000),
            links: nlink(st),
            ino: st.st_ino,
        }
    }
}
