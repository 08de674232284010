//! Secret masks: the command gets its own mount namespace in which every withheld path of the
//! plan is covered by an empty read-only file (`/dev/null`) or an empty read-only directory (a
//! fresh tmpfs), so no name, `..` trick or symlink inside the workspace reaches the real content.
//!
//! A mask cannot be undone by the command: seccomp refuses `mount`, `umount2`, `unshare`, `setns`,
//! `pivot_root`, namespace-creating `clone` and the new mount API (`open_tree`, `move_mount`,
//! `fsopen`, `fsconfig`, `fsmount`, `fspick`, `mount_setattr`), and `link()` across the mask's
//! mount boundary fails with `EXDEV`, so a masked file cannot be hardlinked either.
//!
//! Every target is opened beneath the workspace root with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)` and the mask is attached to that file
//! descriptor (`move_mount` with `MOVE_MOUNT_T_EMPTY_PATH`), so a symlink swapped in after the
//! engine's walk can never redirect a mask outside the workspace.

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{CWD, FileType, Mode, OFlags};
use rustix::io::Errno;
use rustix::mount::{
    FsMountFlags, FsOpenFlags, MountAttrFlags, MountPropagationFlags, MoveMountFlags, OpenTreeFlags,
};
use rustix::thread::UnshareFlags;

use crate::error::SandboxError;
use crate::mount::{open_target, relative_beneath, set_attr};

/// The file every masked non-directory shows: reads see end of file at once.
const FILE_MASK_SOURCE: &str = "/dev/null";

/// Most masks one plan may carry. Each is one mount; the kernel's default `fs.mount-max` is
/// 100 000 per namespace, and the whole plan travels in one environment string (128 KiB max).
pub const MAX_MASKS: usize = 1024;

fn masking(msg: impl Into<String>) -> SandboxError {
    SandboxError::Masking(msg.into())
}

/// Checks one mask path of a plan: absolute, strictly beneath `root`, no `.` or `..`.
/// Returns the part relative to `root`. Messages never echo the path.
pub(crate) fn relative_mask<'a>(
    root: &Path,
    mask: &'a Path,
    index: usize,
) -> Result<&'a Path, SandboxError> {
    relative_beneath(root, mask, "mask", index)
}

/// Moves the calling (single-threaded) process into a private mount namespace and covers every
/// path of `masks` (absolute, beneath `workspace_root`). Does nothing when `masks` is empty.
/// Returns how many masks were attached (see [`apply_mounts`]).
#[cfg(test)]
pub(crate) fn apply_masks(
    workspace_root: &Path,
    masks: &[std::path::PathBuf],
) -> Result<usize, SandboxError> {
    apply_mounts(workspace_root, masks, false, &[], &[], None)
}

/// Moves the calling (single-threaded) process into a private mount namespace, when the plan
/// needs one (masks, read-only paths or a stage), and in it:
/// 0. mounts the staged view over the root, when there is one ([`crate::stage`]);
/// 1. puts the write scope in place ([`crate::scope::attach_write_scope`]): a read-only bind
///    over every `read_only` path, a writable bind over every `write_paths` entry beneath one;
/// 2. pins every ancestor directory of a mask (beneath the root) as a mount point of its own,
///    so `rename(2)` or `rmdir(2)` of a secret's parent fails with `EBUSY` and no rename can
///    carry a withheld file away from the name its rule matches;
/// 3. covers every path of `masks` (absolute, beneath `workspace_root`);
/// 4. with `non_utf8_top_level`, covers every entry of the workspace root whose name is not
///    valid UTF-8, as read from the root here (so one created after the engine looked is
///    covered too): policy cannot decide a name it cannot spell, and a plan (JSON) cannot
///    carry it, so such an entry is withheld rather than the whole workspace refused.
///
/// Returns how many masks were attached: a path that no longer exists has nothing to hide, and
/// one that turned into a symlink is skipped (what it points to is decided by its own name).
///
/// Tries `unshare(CLONE_NEWNS)` (root, or already inside a user namespace of our own), then
/// `unshare(CLONE_NEWUSER | CLONE_NEWNS)` with the caller's uid/gid mapped to themselves. Any
/// failure is an error: the command must not run with a secret left visible or a read-only
/// path left writable.
pub(crate) fn apply_mounts(
    workspace_root: &Path,
    masks: &[std::path::PathBuf],
    non_utf8_top_level: bool,
    read_only: &[std::path::PathBuf],
    write_paths: &[std::path::PathBuf],
    stage: Option<&Path>,
) -> Result<usize, SandboxError> {
    if masks.is_empty() && read_only.is_empty() && !non_utf8_top_level && stage.is_none() {
        return Ok(0);
    }
    if masks.len() > MAX_MASKS {
        return Err(masking(format!(
            "{} masks exceed the limit of {MAX_MASKS}",
            masks.len()
        )));
    }
    enter_mount_namespace()?;
    // Nothing mounted below may propagate back to the host's namespace.
    rustix::mount::mount_change(
        "/",
        MountPropagationFlags::REC | MountPropagationFlags::PRIVATE,
    )
    .map_err(|e| masking(format!("cannot make the mount tree private: {e}")))?;
    // The staged view goes first: the masks and the scope below then cover it.
    if let Some(stage) = stage {
        crate::stage::mount_stage(workspace_root, stage)?;
    }
    // Opened after unshare, so it names the workspace in the new namespace.
    let root = rustix::fs::open(
        workspace_root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| masking(format!("cannot open the workspace root: {e}")))?;
    crate::scope::attach_write_scope(root.as_fd(), workspace_root, read_only, write_paths)?;
    let masked = cover_all(root.as_fd(), workspace_root, masks, non_utf8_top_level)?;
    reenter_cwd()?;
    Ok(masked)
}

/// Steps 2-4 of [`apply_mounts`] in the current mount namespace (already private, the write
/// scope in place): pins the masks' ancestors, covers the masks and, with `non_utf8_top_level`,
/// every top-level entry whose name is not UTF-8. Also how the server builds a prepared
/// namespace with masks ([`crate::mountns`]). Returns how many masks were attached.
pub(crate) fn cover_all(
    root: BorrowedFd<'_>,
    workspace_root: &Path,
    masks: &[std::path::PathBuf],
    non_utf8_top_level: bool,
) -> Result<usize, SandboxError> {
    if masks.len() > MAX_MASKS {
        return Err(masking(format!(
            "{} masks exceed the limit of {MAX_MASKS}",
            masks.len()
        )));
    }
    pin_ancestors(root, workspace_root, masks)?;
    let mut masked = 0;
    for (index, mask) in masks.iter().enumerate() {
        let rel = relative_mask(workspace_root, mask, index)?;
        masked += usize::from(cover(root, rel, "mask", index)?);
    }
    if non_utf8_top_level {
        for (index, name) in non_utf8_top_level_names(root)?.iter().enumerate() {
            let rel = Path::new(std::ffi::OsStr::from_bytes(name));
            masked += usize::from(cover(root, rel, "non-UTF-8 top-level entry", index)?);
        }
    }
    Ok(masked)
}

/// In a mount namespace built earlier by [`cover_all`] for the same masks (a prepared one the
/// helper just entered): whether every mask still covers what it must, as
/// [`cover_all`] would leave it now. Each mask path that exists (and is not a symlink, which
/// both skip) is the root of a read-only mount showing an empty directory or `/dev/null`;
/// every existing ancestor directory of a mask is a mount point; with `non_utf8_top_level`,
/// every such entry of the root, as listed now (one created after the build included), is a
/// mask too. Anything else (a secret created after the build, a mask detached because the host
/// removed or renamed what it covered, a check that cannot be made): `false`, and the helper
/// builds a fresh namespace.
pub(crate) fn masks_hold(
    root: BorrowedFd<'_>,
    workspace_root: &Path,
    masks: &[std::path::PathBuf],
    non_utf8_top_level: bool,
) -> bool {
    let Ok(ancestors) = mask_ancestors(workspace_root, masks) else {
        return false;
    };
    for dir in ancestors {
        match open_target(root, dir) {
            Ok(fd) => match rustix::fs::fstat(&fd) {
                Ok(st) if FileType::from_raw_mode(st.st_mode) != FileType::Directory => {}
                Ok(_) if crate::mount::fd_mount_root_read_only(fd.as_fd()).is_some() => {}
                _ => return false,
            },
            Err(Errno::NOENT | Errno::LOOP | Errno::NOTDIR) => {}
            Err(_) => return false,
        }
    }
    for (index, mask) in masks.iter().enumerate() {
        let Ok(rel) = relative_mask(workspace_root, mask, index) else {
            return false;
        };
        if !covered(root, rel) {
            return false;
        }
    }
    if non_utf8_top_level {
        let Ok(names) = non_utf8_top_level_names(root) else {
            return false;
        };
        for name in &names {
            if !covered(root, Path::new(std::ffi::OsStr::from_bytes(name))) {
                return false;
            }
        }
    }
    true
}

/// `rel` is gone, a symlink, or covered by a mask [`cover`] made (a read-only mount root showing
/// `/dev/null` or an empty directory).
fn covered(root: BorrowedFd<'_>, rel: &Path) -> bool {
    let target = match open_target(root, rel) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return true,
        Err(_) => return false,
    };
    let Ok(st) = rustix::fs::fstat(&target) else {
        return false;
    };
    let kind = FileType::from_raw_mode(st.st_mode);
    if kind == FileType::Symlink {
        return true;
    }
    if crate::mount::fd_mount_root_read_only(target.as_fd()) != Some(true) {
        return false;
    }
    match kind {
        FileType::CharacterDevice => rustix::fs::stat(FILE_MASK_SOURCE)
            .is_ok_and(|null| null.st_rdev == st.st_rdev && st.st_size == 0),
        FileType::Directory => rustix::fs::openat(
            target.as_fd(),
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()
        .and_then(|dir| rustix::fs::Dir::new(dir).ok())
        .is_some_and(|entries| {
            entries.flatten().all(|e| {
                let name = e.file_name().to_bytes();
                name == b"." || name == b".."
            })
        }),
        _ => false,
    }
}

/// Covers `rel` (beneath `root`) with an empty read-only directory or `/dev/null`. `Ok(false)`
/// when there is nothing to cover: it is gone, or it is a symlink (what it points to is decided
/// by its own name). Messages name the target by `role` and index, never by its path.
fn cover(root: BorrowedFd<'_>, rel: &Path, role: &str, index: usize) -> Result<bool, SandboxError> {
    let target = match open_target(root, rel) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(false),
        Err(e) => return Err(masking(format!("cannot open {role} #{index}: {e}"))),
    };
    let st = rustix::fs::fstat(&target)
        .map_err(|e| masking(format!("cannot stat {role} #{index}: {e}")))?;
    let mask_tree = match FileType::from_raw_mode(st.st_mode) {
        FileType::Symlink => return Ok(false),
        FileType::Directory => empty_dir_tree(),
        _ => empty_file_tree(),
    }
    .map_err(|e| masking(format!("cannot build {role} #{index}: {e}")))?;
    rustix::mount::move_mount(
        mask_tree.as_fd(),
        "",
        target.as_fd(),
        "",
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH | MoveMountFlags::MOVE_MOUNT_T_EMPTY_PATH,
    )
    .map_err(|e| masking(format!("cannot attach {role} #{index}: {e}")))?;
    Ok(true)
}

/// The names of the entries of the directory `root` that are not valid UTF-8 (read in the
/// command's mount namespace). More than [`MAX_MASKS`] of them fail closed.
fn non_utf8_top_level_names(root: BorrowedFd<'_>) -> Result<Vec<Vec<u8>>, SandboxError> {
    let list = |e: Errno| masking(format!("cannot list the workspace root: {e}"));
    let fd = rustix::fs::openat(
        root,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(list)?;
    let mut names = Vec::new();
    for entry in rustix::fs::Dir::new(fd).map_err(list)? {
        let name = entry.map_err(list)?.file_name().to_bytes().to_vec();
        if std::str::from_utf8(&name).is_ok() {
            continue;
        }
        if names.len() >= MAX_MASKS {
            return Err(masking(format!(
                "the workspace root holds more than {MAX_MASKS} entries whose names are not \
                 UTF-8"
            )));
        }
        names.push(name);
    }
    Ok(names)
}

/// The directories strictly between the workspace root and each mask, shallowest first, each
/// once.
fn mask_ancestors<'a>(
    workspace_root: &Path,
    masks: &'a [std::path::PathBuf],
) -> Result<Vec<&'a Path>, SandboxError> {
    let mut out: Vec<&Path> = Vec::new();
    for (index, mask) in masks.iter().enumerate() {
        let rel = relative_mask(workspace_root, mask, index)?;
        out.extend(
            rel.ancestors()
                .skip(1)
                .filter(|a| !a.as_os_str().is_empty()),
        );
    }
    out.sort_by_key(|p| (p.components().count(), *p));
    out.dedup();
    Ok(out)
}

/// Makes every ancestor directory of a mask a mount point of its own (a recursive bind of
/// itself, keeping the mounts and flags already beneath it), shallowest first. The kernel
/// refuses to rename or remove a mount point (`EBUSY`), so a command cannot move a secret's
/// parent (`mv .aws elsewhere`) out from under the rule that withholds the secret by path.
fn pin_ancestors(
    root: BorrowedFd<'_>,
    workspace_root: &Path,
    masks: &[std::path::PathBuf],
) -> Result<(), SandboxError> {
    for (index, dir) in mask_ancestors(workspace_root, masks)?
        .into_iter()
        .enumerate()
    {
        let target = match open_target(root, dir) {
            Ok(fd) => fd,
            // Gone, or a symlink on the way: the mask beneath it is skipped or refused below.
            Err(Errno::NOENT | Errno::LOOP | Errno::NOTDIR) => continue,
            Err(e) => return Err(masking(format!("cannot open mask ancestor #{index}: {e}"))),
        };
        let st = rustix::fs::fstat(&target)
            .map_err(|e| masking(format!("cannot stat mask ancestor #{index}: {e}")))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
            continue;
        }
        let tree = crate::scope::clone_tree(target.as_fd())
            .map_err(|e| masking(format!("cannot pin mask ancestor #{index}: {e}")))?;
        crate::scope::attach(tree.as_fd(), target.as_fd())
            .map_err(|e| masking(format!("cannot pin mask ancestor #{index}: {e}")))?;
    }
    Ok(())
}

fn enter_mount_namespace() -> Result<(), SandboxError> {
    // SAFETY: the helper is single-threaded here and CLONE_FILES is not involved, so no other
    // thread can observe the change of namespaces.
    if unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWNS) }.is_ok() {
        return Ok(());
    }
    let uid = rustix::process::getuid().as_raw();
    let gid = rustix::process::getgid().as_raw();
    // SAFETY: as above; CLONE_NEWUSER also requires a single-threaded caller, which holds.
    unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWUSER | UnshareFlags::NEWNS) }
        .map_err(|e| {
            SandboxError::Unavailable(format!("secret masking needs a mount namespace: {e}"))
        })?;
    let write = |file: &str, text: String| {
        fs::write(file, text)
            .map_err(|e| masking(format!("cannot write the user namespace {file}: {e}")))
    };
    write("/proc/self/setgroups", "deny".to_owned())?;
    write("/proc/self/gid_map", format!("{gid} {gid} 1\n"))?;
    write("/proc/self/uid_map", format!("{uid} {uid} 1\n"))
}

/// A detached read-only bind of `/dev/null`, ready to be attached over a non-directory.
fn empty_file_tree() -> Result<OwnedFd, Errno> {
    let tree = rustix::mount::open_tree(
        CWD,
        FILE_MASK_SOURCE,
        OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC,
    )?;
    set_read_only(tree.as_fd(), false)?;
    Ok(tree)
}

/// A detached, empty, read-only tmpfs, ready to be attached over a directory.
fn empty_dir_tree() -> Result<OwnedFd, Errno> {
    let fs = rustix::mount::fsopen("tmpfs", FsOpenFlags::FSOPEN_CLOEXEC)?;
    rustix::mount::fsconfig_set_string(fs.as_fd(), "mode", "0555")?;
    rustix::mount::fsconfig_set_string(fs.as_fd(), "size", "4k")?;
    rustix::mount::fsconfig_set_string(fs.as_fd(), "nr_inodes", "1")?;
    rustix::mount::fsconfig_create(fs.as_fd())?;
    rustix::mount::fsmount(
        fs.as_fd(),
        FsMountFlags::FSMOUNT_CLOEXEC,
        MountAttrFlags::MOUNT_ATTR_RDONLY
            | MountAttrFlags::MOUNT_ATTR_NOSUID
            | MountAttrFlags::MOUNT_ATTR_NODEV
            | MountAttrFlags::MOUNT_ATTR_NOEXEC,
    )
}

/// Adds read-only, nosuid and noexec to the detached tree `tree` (flags are only added, so
/// flags a user namespace locked stay as they are); with `recursive`, to every mount in it.
pub(crate) fn set_read_only(tree: BorrowedFd<'_>, recursive: bool) -> Result<(), Errno> {
    set_attr(
        tree,
        MountAttrFlags::MOUNT_ATTR_RDONLY
            | MountAttrFlags::MOUNT_ATTR_NOSUID
            | MountAttrFlags::MOUNT_ATTR_NOEXEC,
        recursive,
    )
}

/// The working directory was resolved before the masks existed; if it is (or lies beneath) a
/// masked directory it would still name the real one. Resolving it again lands on the mask.
fn reenter_cwd() -> Result<(), SandboxError> {
    let cwd = std::env::current_dir()
        .map_err(|e| masking(format!("cannot read the working directory: {e}")))?;
    std::env::set_current_dir(&cwd)
        .map_err(|e| masking(format!("cannot re-enter the working directory: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn mask_paths_must_lie_strictly_beneath_the_root() {
        let root = Path::new("/srv/ws");
        let ok = PathBuf::from("/srv/ws/sub/.env");
        assert_eq!(relative_mask(root, &ok, 0).unwrap(), Path::new("sub/.env"));
        for bad in ["rel/.env", "/srv/other/.env", "/srv/ws", "/srv/ws/../x"] {
            let err = relative_mask(root, Path::new(bad), 3)
                .unwrap_err()
                .to_string();
            assert!(err.contains("mask #3"), "{bad}: {err}");
            assert!(
                !err.contains("srv"),
                "{bad}: the message echoes the path: {err}"
            );
        }
    }

    #[test]
    fn no_masks_means_no_namespace() {
        assert_eq!(apply_masks(Path::new("/nonexistent"), &[]).unwrap(), 0);
    }

    #[test]
    fn too_many_masks_fail_closed_before_touching_namespaces() {
        let masks: Vec<PathBuf> = (0..=MAX_MASKS)
            .map(|i| PathBuf::from(format!("/nonexistent/{i}")))
            .collect();
        let err = apply_masks(Path::new("/nonexistent"), &masks).unwrap_err();
        assert!(matches!(err, SandboxError::Masking(_)), "{err}");
    }
}
