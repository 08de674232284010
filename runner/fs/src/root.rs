//! `Root`: the directory fd every operation resolves beneath, and the shared open helpers.

use std::path::Path;
use std::sync::Arc;

use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{Mode, OFlags};

use crate::error::FsError;
use crate::path::RelPath;
use crate::resolve::{Resolver, open_beneath};
use crate::temp::TempNames;

/// An open workspace root. Every operation resolves its [`RelPath`] beneath this descriptor and refuses
/// to follow any symlink, so nothing outside the root can be read or written through it.
#[derive(Debug)]
pub struct Root {
    fd: OwnedFd,
    resolver: Resolver,
    temps: Arc<TempNames>,
    /// The root lies on a local disk or memory file system, whose opens and cached reads do not
    /// wait on anything but the disk (see [`Root::open_for_read_nowait`]).
    local_fs: bool,
}

/// `f_type`s of file systems whose `open` of a cached path and `RWF_NOWAIT` read of cached pages
/// complete without waiting: ext2/3/4, XFS, Btrfs, tmpfs, overlayfs, F2FS. Network and FUSE file
/// systems (whose open asks a server or a daemon) are not in the list.
const LOCAL_FS_TYPES: &[i64] = &[
    0xEF53,
    0x5846_5342,
    0x9123_683E,
    0x0102_1994,
    0x794C_7630,
    0xF2F5_2010,
];

/// Whether `fd` lies on a file system of [`LOCAL_FS_TYPES`].
fn on_local_fs(fd: BorrowedFd<'_>) -> bool {
    rustix::fs::fstatfs(fd).is_ok_and(|st| {
        // `f_type` is a `c_long` on most targets and a `u32` on some: widen it either way.
        #[allow(clippy::useless_conversion)]
        let magic = i64::from(st.f_type) & 0xFFFF_FFFF;
        LOCAL_FS_TYPES.contains(&magic)
    })
}

impl Root {
    /// Opens `abs_root` (canonicalized first), which must be an existing directory.
    ///
    /// Errors never mention `abs_root`; they name the root as `"."`.
    pub fn open(abs_root: &Path) -> Result<Root, FsError> {
        Root::open_with(abs_root, Resolver::Openat2)
    }

    /// Like [`Root::open`] but always resolves paths with the component-by-component `O_NOFOLLOW` walk
    /// that is otherwise only used when the kernel lacks `openat2`. Meant for tests of that fallback.
    pub fn open_with_component_walk(abs_root: &Path) -> Result<Root, FsError> {
        Root::open_with(abs_root, Resolver::ComponentWalk)
    }

    fn open_with(abs_root: &Path, resolver: Resolver) -> Result<Root, FsError> {
        let canonical = std::fs::canonicalize(abs_root).map_err(|e| FsError::from_std(".", &e))?;
        let fd = rustix::fs::open(
            &canonical,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| FsError::from_errno(".", e))?;
        // The component walk stands for a kernel without openat2: no cached opens either.
        let local_fs = resolver == Resolver::Openat2 && on_local_fs(fd.as_fd());
        Ok(Root {
            fd,
            resolver,
            temps: TempNames::unregistered(),
            local_fs,
        })
    }

    /// Names this root's temporary files after `names` (a server instance) and hides the temporary files
    /// of every instance `names` knows from [`Root::walk`]. A root opened without it uses
    /// [`TempNames::unregistered`].
    pub fn with_temp_names(mut self, names: Arc<TempNames>) -> Root {
        self.temps = names;
        self
    }

    /// The temporary names of this root: `temp_names().is_server_temp(leaf)` tells a server temporary
    /// file from a user's file, for any walker of the tree.
    pub fn temp_names(&self) -> &TempNames {
        &self.temps
    }

    /// The root directory descriptor (an `O_PATH` fd).
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Whether reads may try [`Root::open_for_read_nowait`] (a local file system, openat2).
    pub(crate) fn nowait_reads(&self) -> bool {
        self.local_fs
    }

    /// Whether the root lies on a local disk or memory file system ([`LOCAL_FS_TYPES`]), whose
    /// directory times move with every change of a name.
    pub fn on_local_fs(&self) -> bool {
        self.local_fs
    }

    /// Opens `rel` beneath `base` with this root's resolver; errors are reported against `shown`.
    pub(crate) fn open_at(
        &self,
        base: BorrowedFd<'_>,
        rel: &str,
        flags: OFlags,
        mode: Mode,
        shown: &str,
    ) -> Result<OwnedFd, FsError> {
        open_beneath(base, rel, flags, mode, self.resolver)
            .map_err(|e| FsError::from_errno(shown, e))
    }

    /// Opens `p` beneath the root.
    pub(crate) fn open_rel(&self, p: &RelPath, flags: OFlags) -> Result<OwnedFd, FsError> {
        self.open_at(self.as_fd(), p.as_str(), flags, Mode::empty(), p.as_str())
    }

    /// Opens the parent directory of `p` as an `O_PATH` directory fd and returns it with the leaf name.
    /// The root itself has no parent: operating on it is refused.
    pub(crate) fn open_parent<'p>(&self, p: &'p RelPath) -> Result<(OwnedFd, &'p str), FsError> {
        let (Some(parent), Some(leaf)) = (p.parent(), p.file_name()) else {
            return Err(FsError::io(
                p.as_str(),
                "the workspace root itself cannot be changed",
            ));
        };
        let fd = self.open_at(
            self.as_fd(),
            parent.as_str(),
            OFlags::PATH | OFlags::DIRECTORY,
            Mode::empty(),
            p.as_str(),
        )?;
        Ok((fd, leaf))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Root>();
    }

    #[test]
    fn operations_on_the_root_itself_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let root = Root::open(tmp.path()).unwrap();
        let err = root.open_parent(&RelPath::root()).unwrap_err();
        assert_eq!(err.code(), "FILE_OPERATION_FAILED");
        assert_eq!(
            root.remove_empty_dir(&RelPath::root()).unwrap_err().code(),
            "FILE_OPERATION_FAILED"
        );
    }
}
