//! Mount primitives the secret masks (`mask.rs`) and the write scope (`scope.rs`) share: a plan
//! path checked to lie strictly beneath the workspace root, a target opened beneath the root
//! without following any symlink, and mount attributes added to a detached tree.

use std::path::{Component, Path};

use rustix::fd::{BorrowedFd, OwnedFd};
use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use rustix::mount::MountAttrFlags;

use crate::error::SandboxError;

/// Checks one path of a plan that must lie strictly beneath `root` (a mask, a write path, a
/// read-only path): absolute, no `.` or `..`. Returns the part relative to `root`; messages
/// name the path by its `role` and index, never echo it.
pub(crate) fn relative_beneath<'a>(
    root: &Path,
    path: &'a Path,
    role: &str,
    index: usize,
) -> Result<&'a Path, SandboxError> {
    let bad = |why: &str| SandboxError::InvalidPlan(format!("{role} #{index} {why}"));
    if !path.is_absolute() {
        return Err(bad("must be an absolute path"));
    }
    if path
        .components()
        .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
    {
        return Err(bad("must not contain `.` or `..`"));
    }
    let rel = path
        .strip_prefix(root)
        .map_err(|_| bad("must lie beneath the workspace root"))?;
    if rel.as_os_str().is_empty() {
        return Err(bad("must not be the workspace root itself"));
    }
    Ok(rel)
}

/// Opens `rel` beneath `root` as an `O_PATH` handle, following no symlink anywhere (a symlink
/// leaf is returned as itself).
pub(crate) fn open_target(root: BorrowedFd<'_>, rel: &Path) -> Result<OwnedFd, Errno> {
    rustix::fs::openat2(
        root,
        rel,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
}

/// `struct mount_attr` of `mount_setattr(2)` (size version 0).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// Adds `flags` to the detached tree `tree` (`mount_setattr(2)`), to every mount in it with
/// `recursive`.
pub(crate) fn set_attr(
    tree: BorrowedFd<'_>,
    flags: MountAttrFlags,
    recursive: bool,
) -> Result<(), Errno> {
    use rustix::fd::AsRawFd;
    let attr = MountAttr {
        attr_set: u64::from(flags.bits()),
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    let empty = c"";
    // SAFETY: `tree` is a valid open file descriptor for the call's duration, `empty` is a
    // NUL-terminated string, and `attr` is a live, correctly laid out `struct mount_attr` whose
    // size is passed alongside; the kernel reads it and writes nothing back.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            empty.as_ptr(),
            if recursive {
                libc::AT_EMPTY_PATH | libc::AT_RECURSIVE
            } else {
                libc::AT_EMPTY_PATH
            },
            &raw const attr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if ret == 0 {
        Ok(())
    } else {
        Err(Errno::from_io_error(&std::io::Error::last_os_error()).unwrap_or(Errno::INVAL))
    }
}

/// `Some(read_only)` when `fd` is the root of a mount, `None` when it is not one or cannot be
/// checked.
pub(crate) fn fd_mount_root_read_only(fd: rustix::fd::BorrowedFd<'_>) -> Option<bool> {
    let st = rustix::fs::statx(
        fd,
        "",
        rustix::fs::AtFlags::EMPTY_PATH,
        rustix::fs::StatxFlags::BASIC_STATS,
    )
    .ok()?;
    let known = st
        .stx_attributes_mask
        .contains(rustix::fs::StatxAttributes::MOUNT_ROOT);
    if !known
        || !st
            .stx_attributes
            .contains(rustix::fs::StatxAttributes::MOUNT_ROOT)
    {
        return None;
    }
    let vfs = rustix::fs::fstatvfs(fd).ok()?;
    Some(vfs.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY))
}
