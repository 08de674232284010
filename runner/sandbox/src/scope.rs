//! A command's write scope in its own mount namespace: a read-only bind over each denied
//! candidate that lies beneath a writable one (`.git` by default), and a writable bind over each
//! writable candidate beneath such a read-only one.
//!
//! Landlock grants rights beneath a directory and cannot take a subtree back, so "the workspace
//! except `.git`" needs the mount: Landlock grants write beneath the workspace, and the
//! read-only bind over `.git` makes every write there fail with `EROFS` whatever Landlock says.
//! The bind is a mount point, so the command cannot rename or remove it (`EBUSY`) to write a
//! fresh `.git` in its place; seccomp refuses every call that could undo a mount.
//!
//! Every path is opened beneath the workspace root with no symlink anywhere on the way (the same
//! `openat2` resolution as masks); a read-only path that turned into a symlink refuses the
//! command, one that no longer exists has nothing to protect and is skipped.

use std::path::{Path, PathBuf};

use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::FileType;
use rustix::io::Errno;
use rustix::mount::{MountAttrFlags, MoveMountFlags, OpenTreeFlags};

use crate::error::SandboxError;
use crate::mount::{open_target, relative_beneath, set_attr};

/// Most write paths, and most read-only paths, one plan may carry (each is at most one mount).
pub const MAX_SCOPE_PATHS: usize = 256;

fn scope_err(msg: String) -> SandboxError {
    SandboxError::Masking(msg)
}

/// A detached recursive copy of the mount tree at `target` (the mounts beneath it come along,
/// which a user namespace requires anyway for mounts it inherited locked).
pub(crate) fn clone_tree(target: BorrowedFd<'_>) -> Result<OwnedFd, Errno> {
    rustix::mount::open_tree(
        target,
        "",
        OpenTreeFlags::OPEN_TREE_CLONE
            | OpenTreeFlags::OPEN_TREE_CLOEXEC
            | OpenTreeFlags::AT_RECURSIVE
            | OpenTreeFlags::AT_EMPTY_PATH,
    )
}

/// Attaches the detached `tree` over `target`.
pub(crate) fn attach(tree: BorrowedFd<'_>, target: BorrowedFd<'_>) -> Result<(), Errno> {
    rustix::mount::move_mount(
        tree,
        "",
        target,
        "",
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH | MoveMountFlags::MOVE_MOUNT_T_EMPTY_PATH,
    )
}

/// One bind waiting to be attached: the tree was cloned before any bind of the scope existed.
struct Pending<'a> {
    rel: &'a Path,
    tree: OwnedFd,
    role: &'static str,
    index: usize,
}

/// True when `ancestor` is a strict ancestor of `path` (both relative to the root).
fn strictly_beneath(path: &Path, ancestor: &Path) -> bool {
    path != ancestor && path.starts_with(ancestor)
}

/// Puts the write scope in place in the (already private) mount namespace: every
/// `read_only` path gets a read-only bind of itself, every `write_paths` entry that lies beneath
/// a read-only path gets a writable bind of itself on top (cloned before the read-only binds
/// exist), attached shallowest first. Returns how many binds were attached.
pub(crate) fn attach_write_scope(
    root: BorrowedFd<'_>,
    workspace_root: &Path,
    read_only: &[PathBuf],
    write_paths: &[PathBuf],
) -> Result<usize, SandboxError> {
    if read_only.is_empty() {
        return Ok(0);
    }
    let ro: Vec<&Path> = read_only
        .iter()
        .enumerate()
        .map(|(i, p)| relative_beneath(workspace_root, p, "read-only path", i))
        .collect::<Result<_, _>>()?;
    let mut pending: Vec<Pending<'_>> = Vec::new();
    for (index, rel) in ro.iter().copied().enumerate() {
        let Some(tree) = clone_of(root, rel, "read-only path", index, true)? else {
            continue;
        };
        set_attr(
            tree.as_fd(),
            MountAttrFlags::MOUNT_ATTR_RDONLY | MountAttrFlags::MOUNT_ATTR_NOSUID,
            true,
        )
        .map_err(|e| {
            scope_err(format!(
                "cannot make read-only path #{index} read-only: {e}"
            ))
        })?;
        pending.push(Pending {
            rel,
            tree,
            role: "read-only path",
            index,
        });
    }
    for (index, path) in write_paths.iter().enumerate() {
        let rel = relative_beneath(workspace_root, path, "write path", index)?;
        if !ro.iter().any(|r| strictly_beneath(rel, r)) {
            continue;
        }
        if let Some(tree) = clone_of(root, rel, "write path", index, false)? {
            pending.push(Pending {
                rel,
                tree,
                role: "write path",
                index,
            });
        }
    }
    pending.sort_by_key(|p| p.rel.components().count());
    let mut attached = 0;
    for p in &pending {
        // Opened again now: beneath an earlier bind, the path names that bind's copy.
        let target = open_target(root, p.rel)
            .map_err(|e| scope_err(format!("cannot open {} #{} again: {e}", p.role, p.index)))?;
        attach(p.tree.as_fd(), target.as_fd())
            .map_err(|e| scope_err(format!("cannot attach {} #{}: {e}", p.role, p.index)))?;
        attached += 1;
    }
    Ok(attached)
}

/// A detached copy of the tree at `rel`, or `None` when nothing is there. A symlink refuses the
/// command when `symlink_refuses` (a read-only path must not be swapped for a link), else is
/// skipped (a writable path behind a link gets no bind, so it stays read-only).
fn clone_of(
    root: BorrowedFd<'_>,
    rel: &Path,
    role: &str,
    index: usize,
    symlink_refuses: bool,
) -> Result<Option<OwnedFd>, SandboxError> {
    let target = match open_target(root, rel) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        Err(e) => return Err(scope_err(format!("cannot open {role} #{index}: {e}"))),
    };
    let st = rustix::fs::fstat(&target)
        .map_err(|e| scope_err(format!("cannot stat {role} #{index}: {e}")))?;
    if FileType::from_raw_mode(st.st_mode) == FileType::Symlink {
        if symlink_refuses {
            return Err(scope_err(format!(
                "{role} #{index} is a symlink; the command was not started"
            )));
        }
        return Ok(None);
    }
    clone_tree(target.as_fd())
        .map(Some)
        .map_err(|e| scope_err(format!("cannot copy {role} #{index}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beneath_is_strict_and_by_component() {
        assert!(strictly_beneath(Path::new("src/gen"), Path::new("src")));
        assert!(!strictly_beneath(Path::new("src"), Path::new("src")));
        assert!(!strictly_beneath(Path::new("srcx/gen"), Path::new("src")));
    }

    #[test]
    fn no_read_only_path_means_no_mount() {
        let root = rustix::fs::open(
            "/",
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY,
            rustix::fs::Mode::empty(),
        )
        .unwrap();
        let n = attach_write_scope(root.as_fd(), Path::new("/"), &[], &["/x".into()]).unwrap();
        assert_eq!(n, 0);
    }
}
