//! Opening a relative path beneath a directory fd without ever following a symlink.
//!
//! The primary strategy is `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`. When the
//! kernel lacks `openat2` (ENOSYS) the path is walked one component at a time with `O_NOFOLLOW`, checking each
//! intermediate descriptor with `fstat`. Both report a symlink anywhere on the path as `ELOOP`, a non-directory
//! ancestor as `ENOTDIR` and a missing component as `ENOENT`.

use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

/// How many times a transient `EAGAIN`/`EINTR` from `openat2` is retried before giving up.
const MAX_RETRIES: usize = 32;

/// Which resolution strategy a [`crate::Root`] uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resolver {
    /// `openat2` with beneath / no-symlink resolution, falling back per call on ENOSYS.
    Openat2,
    /// Always walk component by component (the ENOSYS fallback, selectable for tests).
    ComponentWalk,
}

/// The resolve flags used for every `openat2` call.
fn resolve_flags() -> ResolveFlags {
    ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS
}

/// Opens `rel` (a normalized relative path without `..`; `"."` for `base` itself) beneath `base`.
///
/// `O_CLOEXEC` is always added; `O_NOFOLLOW` is added unless `O_PATH` is requested (with `O_PATH` the
/// no-symlink resolution itself rejects a symlink leaf).
pub(crate) fn open_beneath(
    base: BorrowedFd<'_>,
    rel: &str,
    flags: OFlags,
    mode: Mode,
    resolver: Resolver,
) -> Result<OwnedFd, Errno> {
    let mut flags = flags | OFlags::CLOEXEC;
    if !flags.contains(OFlags::PATH) {
        flags |= OFlags::NOFOLLOW;
    }
    if resolver == Resolver::Openat2 {
        let mut attempts = 0;
        loop {
            match rustix::fs::openat2(base, rel, flags, mode, resolve_flags()) {
                Err(Errno::AGAIN | Errno::INTR) if attempts < MAX_RETRIES => attempts += 1,
                Err(Errno::NOSYS) => break,
                other => return other,
            }
        }
    }
    walk_components(base, rel, flags, mode)
}

/// Whether the kernel knows `RESOLVE_CACHED` (Linux 5.12); cleared at the first `EINVAL`/`ENOSYS`.
static CACHED_RESOLVE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// [`open_beneath`] for a caller that must not wait: `openat2` with `RESOLVE_CACHED` (every
/// component must already be in the kernel's lookup cache, else `EAGAIN`) and `RESOLVE_NO_XDEV`
/// (no mount point crossed, so the file lives on the root's file system). `None` when the open
/// cannot be done that way, whatever the reason: the caller then opens with [`open_beneath`] on
/// a thread that may block, which also reports the real error.
pub(crate) fn open_beneath_cached(
    base: BorrowedFd<'_>,
    rel: &str,
    flags: OFlags,
) -> Option<OwnedFd> {
    use std::sync::atomic::Ordering;
    if !CACHED_RESOLVE.load(Ordering::Relaxed) {
        return None;
    }
    let flags = flags | OFlags::CLOEXEC | OFlags::NOFOLLOW;
    let how = resolve_flags() | ResolveFlags::NO_XDEV | ResolveFlags::CACHED;
    match rustix::fs::openat2(base, rel, flags, Mode::empty(), how) {
        Ok(fd) => Some(fd),
        Err(Errno::INVAL | Errno::NOSYS) => {
            // A kernel without RESOLVE_CACHED (or openat2): never ask again.
            CACHED_RESOLVE.store(false, Ordering::Relaxed);
            None
        }
        Err(_) => None,
    }
}

/// The ENOSYS fallback: open each component relative to the previous one, refusing symlinks.
fn walk_components(
    base: BorrowedFd<'_>,
    rel: &str,
    flags: OFlags,
    mode: Mode,
) -> Result<OwnedFd, Errno> {
    let comps: Vec<&str> = rel
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    if comps.contains(&"..") {
        return Err(Errno::XDEV);
    }
    let Some((leaf, ancestors)) = comps.split_last() else {
        // The base directory itself.
        return rustix::fs::openat(base, ".", flags, mode);
    };
    let mut current: Option<OwnedFd> = None;
    for comp in ancestors {
        let dir = current.as_ref().map_or(base, |fd| fd.as_fd());
        let next = rustix::fs::openat(
            dir,
            *comp,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        match FileType::from_raw_mode(rustix::fs::fstat(&next)?.st_mode) {
            FileType::Directory => {}
            FileType::Symlink => return Err(Errno::LOOP),
            _ => return Err(Errno::NOTDIR),
        }
        current = Some(next);
    }
    let dir = current.as_ref().map_or(base, |fd| fd.as_fd());
    if flags.contains(OFlags::PATH) {
        // O_PATH|O_NOFOLLOW opens a symlink itself: inspect and refuse it.
        let want_dir = flags.contains(OFlags::DIRECTORY);
        let fd = rustix::fs::openat(
            dir,
            *leaf,
            (flags - OFlags::DIRECTORY) | OFlags::NOFOLLOW,
            mode,
        )?;
        match FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode) {
            FileType::Symlink => Err(Errno::LOOP),
            FileType::Directory => Ok(fd),
            _ if want_dir => Err(Errno::NOTDIR),
            _ => Ok(fd),
        }
    } else {
        rustix::fs::openat(dir, *leaf, flags | OFlags::NOFOLLOW, mode)
    }
}
