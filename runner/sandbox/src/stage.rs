//! A staged view of the workspace (the `before_patch` hooks of issue 31): the command sees the
//! workspace as it would be after a patch, and the real tree is never writable by it.
//!
//! The caller writes the patch's new contents into a fresh private directory ([`write_stage`]:
//! `upper/<path>` for each written file, a whiteout — a character device 0:0, which the kernel
//! lets anyone create since Linux 5.8 — for each deleted one, and an empty `work/`). In the
//! command's own mount namespace the helper mounts an overlay (lower: the workspace root,
//! upper: the stage) read-only over the workspace root ([`mount_stage`]) before the masks, so
//! every mask covers the staged view too and Landlock's rules, opened afterwards, name the
//! overlay. The overlay is read-only (`EROFS` whatever Landlock says) and the stage directory
//! itself is in no Landlock rule, so the command can change neither the real tree nor its view.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Component, Path};

use rustix::fd::AsFd;
use rustix::fs::{Mode, OFlags};
use rustix::mount::{FsMountFlags, FsOpenFlags, MountAttrFlags, MoveMountFlags};

use crate::error::SandboxError;

/// Most staged files one plan's stage may hold.
pub const MAX_STAGED_FILES: usize = 4096;

/// One staged path: its new content and mode, or `None` for a path the patch deletes.
#[derive(Debug, Clone)]
pub struct StagedFile<'a> {
    /// Workspace-relative, normalized (no `.`, `..`, or leading `/`).
    pub path: &'a str,
    /// The new content and mode; `None`: deleted.
    pub content: Option<(&'a [u8], u32)>,
}

fn staging(msg: impl Into<String>) -> SandboxError {
    SandboxError::Masking(msg.into())
}

/// Writes `files` into the empty directory `dir` as an overlay upper layer (`dir/upper`) with
/// its work directory (`dir/work`). Paths must be relative and normal; directories on the way
/// are created `0755` (a directory the workspace has merges with it).
pub fn write_stage(dir: &Path, files: &[StagedFile<'_>]) -> Result<(), SandboxError> {
    if files.len() > MAX_STAGED_FILES {
        return Err(staging(format!(
            "{} staged files exceed the limit of {MAX_STAGED_FILES}",
            files.len()
        )));
    }
    let upper = dir.join("upper");
    let mut builder = std::fs::DirBuilder::new();
    builder.mode(0o755).recursive(true);
    for sub in ["upper", "work"] {
        builder
            .create(dir.join(sub))
            .map_err(|e| staging(format!("cannot create the stage's {sub} directory: {e}")))?;
    }
    for (index, f) in files.iter().enumerate() {
        let rel = Path::new(f.path);
        if rel.as_os_str().is_empty()
            || !rel.components().all(|c| matches!(c, Component::Normal(_)))
        {
            return Err(staging(format!(
                "staged file #{index} is not a normal relative path"
            )));
        }
        let target = upper.join(rel);
        if let Some(parent) = target.parent() {
            builder
                .create(parent)
                .map_err(|e| staging(format!("cannot stage file #{index}: {e}")))?;
        }
        match f.content {
            Some((data, mode)) => {
                let mut out = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(mode & 0o7777)
                    .open(&target)
                    .map_err(|e| staging(format!("cannot stage file #{index}: {e}")))?;
                out.write_all(data)
                    .map_err(|e| staging(format!("cannot stage file #{index}: {e}")))?;
            }
            None => rustix::fs::mknodat(
                rustix::fs::CWD,
                &target,
                rustix::fs::FileType::CharacterDevice,
                Mode::from_raw_mode(0o600),
                0,
            )
            .map_err(|e| staging(format!("cannot stage the deletion #{index}: {e}")))?,
        }
    }
    Ok(())
}

/// Escapes a directory for an overlay `lowerdir` (`:` separates layers, `\` escapes); the
/// stage's own directories are plain (a temp dir the runner named).
fn overlay_dir(p: &Path) -> Result<String, SandboxError> {
    let s = p
        .to_str()
        .ok_or_else(|| staging("the stage's directories must be UTF-8"))?;
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, ':' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    Ok(out)
}

/// A detached read-only overlay of `workspace_root` under the stage `dir` (see
/// [`write_stage`]); `userxattr` when a user namespace requires it.
fn overlay(
    workspace_root: &Path,
    dir: &Path,
    userxattr: bool,
) -> Result<rustix::fd::OwnedFd, SandboxError> {
    let fail = |what: &str, e: rustix::io::Errno| staging(format!("stage overlay: {what}: {e}"));
    let fs = rustix::mount::fsopen("overlay", FsOpenFlags::FSOPEN_CLOEXEC)
        .map_err(|e| fail("fsopen", e))?;
    let fd = fs.as_fd();
    rustix::mount::fsconfig_set_string(fd, "lowerdir", overlay_dir(workspace_root)?)
        .map_err(|e| fail("lowerdir", e))?;
    let plain = |p: std::path::PathBuf| {
        p.into_os_string()
            .into_string()
            .map_err(|_| staging("the stage's directories must be UTF-8"))
    };
    rustix::mount::fsconfig_set_string(fd, "upperdir", plain(dir.join("upper"))?)
        .map_err(|e| fail("upperdir", e))?;
    rustix::mount::fsconfig_set_string(fd, "workdir", plain(dir.join("work"))?)
        .map_err(|e| fail("workdir", e))?;
    if userxattr {
        rustix::mount::fsconfig_set_flag(fd, "userxattr").map_err(|e| fail("userxattr", e))?;
    }
    rustix::mount::fsconfig_create(fd).map_err(|e| fail("create", e))?;
    rustix::mount::fsmount(
        fd,
        FsMountFlags::FSMOUNT_CLOEXEC,
        MountAttrFlags::MOUNT_ATTR_RDONLY
            | MountAttrFlags::MOUNT_ATTR_NOSUID
            | MountAttrFlags::MOUNT_ATTR_NODEV,
    )
    .map_err(|e| fail("fsmount", e))
}

/// In the caller's (private) mount namespace, mounts the staged view read-only over
/// `workspace_root`. Any failure is an error: the command must not run on the unpatched tree.
pub(crate) fn mount_stage(workspace_root: &Path, dir: &Path) -> Result<(), SandboxError> {
    let tree = match overlay(workspace_root, dir, false) {
        Ok(t) => t,
        Err(_) => overlay(workspace_root, dir, true)?,
    };
    let target = rustix::fs::open(
        workspace_root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| staging(format!("cannot open the workspace root: {e}")))?;
    rustix::mount::move_mount(
        tree.as_fd(),
        "",
        target.as_fd(),
        "",
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH | MoveMountFlags::MOVE_MOUNT_T_EMPTY_PATH,
    )
    .map_err(|e| staging(format!("cannot attach the stage overlay: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stage_holds_new_contents_and_whiteouts_and_refuses_escapes() {
        let dir = tempfile::tempdir().unwrap();
        write_stage(
            dir.path(),
            &[
                StagedFile {
                    path: "src/a.rs",
                    content: Some((b"new\n", 0o644)),
                },
                StagedFile {
                    path: "gone.txt",
                    content: None,
                },
            ],
        )
        .unwrap();
        let upper = dir.path().join("upper");
        assert_eq!(std::fs::read(upper.join("src/a.rs")).unwrap(), b"new\n");
        use std::os::unix::fs::FileTypeExt;
        let gone = std::fs::symlink_metadata(upper.join("gone.txt")).unwrap();
        assert!(gone.file_type().is_char_device());
        assert!(dir.path().join("work").is_dir());
        for bad in ["../x", "/etc/passwd", "./a", ""] {
            let d = tempfile::tempdir().unwrap();
            let err = write_stage(
                d.path(),
                &[StagedFile {
                    path: bad,
                    content: Some((b"", 0o644)),
                }],
            );
            assert!(err.is_err(), "{bad:?} was staged");
        }
    }

    #[test]
    fn overlay_dirs_are_escaped() {
        assert_eq!(overlay_dir(Path::new("/a:b\\c")).unwrap(), "/a\\:b\\\\c");
    }
}
