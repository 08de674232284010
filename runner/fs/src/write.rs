//! Mutations beneath a [`Root`]: atomic writes, `mkdir -p`, removals and no-replace renames.
//!
//! Each operation opens the parent directory with no-follow resolution and then acts on the leaf name
//! with `*at` calls relative to that directory fd, so a symlink anywhere on the path is never followed.

use std::io::Write;

use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{AtFlags, Mode, OFlags, RenameFlags};
use rustix::io::Errno;

use crate::error::FsError;
use crate::meta::Kind;
use crate::path::RelPath;
use crate::root::Root;
use crate::temp::TempNames;

/// Attempts at finding an unused temporary name.
const TEMP_ATTEMPTS: usize = 16;

/// Mode of directories created by [`Root::create_dirs`] (before the umask).
const DIR_MODE: u32 = 0o755;

impl Root {
    /// Atomically replaces (or creates) the regular file `p` with `data` and permission bits `mode`.
    ///
    /// Writes a temporary file named by the root's [`TempNames`] (`.codespace-tmp-<instance>-<n>`),
    /// created with `O_CREAT|O_EXCL` in the parent directory, fsyncs it, applies `mode`, then `renameat`s
    /// it over `p` within the same directory fd. An existing symlink leaf is `SymlinkRejected`, a
    /// directory or special file `NotRegularFile`; nothing is followed. The parent directory must exist.
    /// Once the names are sealed ([`TempNames::seal`]) every write fails.
    pub fn write_atomic(&self, p: &RelPath, data: &[u8], mode: u32) -> Result<(), FsError> {
        let (dir, leaf) = self.open_parent(p)?;
        match leaf_kind(&dir, leaf, p)? {
            None | Some(Kind::File) => {}
            Some(Kind::Symlink) => return Err(symlink(p)),
            Some(Kind::Dir | Kind::Other) => return Err(not_regular(p)),
        }
        let temps = self.temp_names();
        if !temps.begin() {
            return Err(FsError::io(p.as_str(), "the server is shutting down"));
        }
        let (tmp_name, fd) = match create_temp(temps, &dir, p) {
            Ok(created) => created,
            Err(e) => {
                temps.end();
                return Err(e);
            }
        };
        let written = fill_temp(fd, data, mode, p).and_then(|()| {
            rustix::fs::renameat(&dir, tmp_name.as_str(), &dir, leaf)
                .map_err(|e| FsError::from_errno(p.as_str(), e))
        });
        // A temporary file that could not be removed stays counted: the instance then does not count as
        // having left nothing behind, and the next start sweeps it.
        if written.is_ok()
            || rustix::fs::unlinkat(&dir, tmp_name.as_str(), AtFlags::empty()).is_ok()
        {
            temps.end();
        }
        written?;
        sync_dir(&dir);
        Ok(())
    }

    /// `mkdir -p` without following symlinks. Returns the directories it created, outermost first, so a
    /// rollback can remove them (innermost first). An existing symlink component is `SymlinkRejected`, a
    /// non-directory component `NotDirectory`. On failure the directories created so far are removed again.
    pub fn create_dirs(&self, p: &RelPath) -> Result<Vec<RelPath>, FsError> {
        let mut created: Vec<RelPath> = Vec::new();
        let result = self.create_dirs_inner(p, &mut created);
        match result {
            Ok(()) => Ok(created),
            Err(e) => {
                for dir in created.iter().rev() {
                    let _ = self.remove_empty_dir(dir);
                }
                Err(e)
            }
        }
    }

    fn create_dirs_inner(&self, p: &RelPath, created: &mut Vec<RelPath>) -> Result<(), FsError> {
        let mut current: Option<OwnedFd> = None;
        let mut prefix = RelPath::root();
        for comp in p.components() {
            prefix = prefix.join(comp)?;
            let dir: BorrowedFd<'_> = current.as_ref().map_or(self.as_fd(), |fd| fd.as_fd());
            match rustix::fs::mkdirat(dir, comp, Mode::from_bits_truncate(DIR_MODE)) {
                Ok(()) => created.push(prefix.clone()),
                Err(Errno::EXIST) => {}
                Err(e) => return Err(FsError::from_errno(prefix.as_str(), e)),
            }
            let next = self.open_at(
                dir,
                comp,
                OFlags::PATH | OFlags::DIRECTORY,
                Mode::empty(),
                prefix.as_str(),
            )?;
            current = Some(next);
        }
        Ok(())
    }

    /// Removes the regular file (or symlink, which is not followed) `p`. A directory is refused with an
    /// `Io` error, a FIFO/socket/device with `NotRegularFile`.
    pub fn remove_file(&self, p: &RelPath) -> Result<(), FsError> {
        let (dir, leaf) = self.open_parent(p)?;
        match leaf_kind(&dir, leaf, p)? {
            None => return Err(not_found(p)),
            Some(Kind::File | Kind::Symlink) => {}
            Some(Kind::Dir) => return Err(FsError::io(p.as_str(), "is a directory, not a file")),
            Some(Kind::Other) => return Err(not_regular(p)),
        }
        rustix::fs::unlinkat(&dir, leaf, AtFlags::empty())
            .map_err(|e| FsError::from_errno(p.as_str(), e))?;
        sync_dir(&dir);
        Ok(())
    }

    /// Removes the empty directory `p`. A symlink is `SymlinkRejected`, a non-directory `NotDirectory`, a
    /// non-empty directory an `Io` error.
    pub fn remove_empty_dir(&self, p: &RelPath) -> Result<(), FsError> {
        let (dir, leaf) = self.open_parent(p)?;
        match leaf_kind(&dir, leaf, p)? {
            None => return Err(not_found(p)),
            Some(Kind::Dir) => {}
            Some(Kind::Symlink) => return Err(symlink(p)),
            Some(Kind::File | Kind::Other) => {
                return Err(FsError::NotDirectory {
                    path: p.as_str().to_owned(),
                });
            }
        }
        match rustix::fs::unlinkat(&dir, leaf, AtFlags::REMOVEDIR) {
            Ok(()) => {
                sync_dir(&dir);
                Ok(())
            }
            Err(Errno::NOTEMPTY | Errno::EXIST) => {
                Err(FsError::io(p.as_str(), "directory is not empty"))
            }
            Err(e) => Err(FsError::from_errno(p.as_str(), e)),
        }
    }

    /// Renames `from` to `to` without ever replacing an existing `to` (`renameat2(RENAME_NOREPLACE)`;
    /// on filesystems without it, a regular file is moved with `linkat` + `unlinkat`). `from` must be a
    /// regular file or a directory; an existing `to` is `AlreadyExists`. Both parents must exist.
    pub fn rename_noreplace(&self, from: &RelPath, to: &RelPath) -> Result<(), FsError> {
        let (from_dir, from_leaf) = self.open_parent(from)?;
        let (to_dir, to_leaf) = self.open_parent(to)?;
        let kind = match leaf_kind(&from_dir, from_leaf, from)? {
            None => return Err(not_found(from)),
            Some(Kind::Symlink) => return Err(symlink(from)),
            Some(Kind::Other) => return Err(not_regular(from)),
            Some(kind) => kind,
        };
        let renamed = rustix::fs::renameat_with(
            &from_dir,
            from_leaf,
            &to_dir,
            to_leaf,
            RenameFlags::NOREPLACE,
        );
        match renamed {
            Ok(()) => {}
            Err(Errno::EXIST) => {
                return Err(FsError::AlreadyExists {
                    path: to.as_str().to_owned(),
                });
            }
            Err(Errno::INVAL) if kind == Kind::File => {
                link_then_unlink(&from_dir, from_leaf, &to_dir, to_leaf, from, to)?;
            }
            Err(e) => return Err(FsError::from_errno(from.as_str(), e)),
        }
        sync_dir(&to_dir);
        sync_dir(&from_dir);
        Ok(())
    }
}

/// The kind of `leaf` inside `dir` (not following a symlink), `None` when absent.
pub(crate) fn leaf_kind(dir: &OwnedFd, leaf: &str, p: &RelPath) -> Result<Option<Kind>, FsError> {
    match rustix::fs::statat(dir, leaf, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(Kind::from_mode(st.st_mode))),
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(FsError::from_errno(p.as_str(), e)),
    }
}

/// No-replace move for filesystems without `RENAME_NOREPLACE`: `linkat` fails if `to` exists.
fn link_then_unlink(
    from_dir: &OwnedFd,
    from_leaf: &str,
    to_dir: &OwnedFd,
    to_leaf: &str,
    from: &RelPath,
    to: &RelPath,
) -> Result<(), FsError> {
    match rustix::fs::linkat(from_dir, from_leaf, to_dir, to_leaf, AtFlags::empty()) {
        Ok(()) => {}
        Err(Errno::EXIST) => {
            return Err(FsError::AlreadyExists {
                path: to.as_str().to_owned(),
            });
        }
        Err(e) => return Err(FsError::from_errno(from.as_str(), e)),
    }
    rustix::fs::unlinkat(from_dir, from_leaf, AtFlags::empty())
        .map_err(|e| FsError::from_errno(from.as_str(), e))
}

/// Creates a fresh temporary file of `temps` in `dir` with `O_CREAT|O_EXCL|O_NOFOLLOW`.
fn create_temp(
    temps: &TempNames,
    dir: &OwnedFd,
    p: &RelPath,
) -> Result<(String, OwnedFd), FsError> {
    for _ in 0..TEMP_ATTEMPTS {
        let name = temps.next_name();
        let opened = rustix::fs::openat(
            dir,
            name.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_bits_truncate(0o600),
        );
        match opened {
            Ok(fd) => return Ok((name, fd)),
            Err(Errno::EXIST) => {}
            Err(e) => return Err(FsError::from_errno(p.as_str(), e)),
        }
    }
    Err(FsError::io(p.as_str(), "could not create a temporary file"))
}

/// Writes `data` to the temporary file, fsyncs it and sets `mode`.
fn fill_temp(fd: OwnedFd, data: &[u8], mode: u32, p: &RelPath) -> Result<(), FsError> {
    let mut file = std::fs::File::from(fd);
    file.write_all(data)
        .map_err(|e| FsError::from_std(p.as_str(), &e))?;
    rustix::fs::fchmod(&file, Mode::from_bits_truncate(mode & 0o7777))
        .map_err(|e| FsError::from_errno(p.as_str(), e))?;
    rustix::fs::fsync(&file).map_err(|e| FsError::from_errno(p.as_str(), e))
}

/// Best-effort fsync of a directory (given as an `O_PATH` fd) so a rename or unlink is durable.
fn sync_dir(dir: &OwnedFd) {
    if let Ok(fd) = rustix::fs::openat(
        dir,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        let _ = rustix::fs::fsync(&fd);
    }
}

fn symlink(p: &RelPath) -> FsError {
    FsError::SymlinkRejected {
        path: p.as_str().to_owned(),
    }
}

fn not_regular(p: &RelPath) -> FsError {
    FsError::NotRegularFile {
        path: p.as_str().to_owned(),
    }
}

fn not_found(p: &RelPath) -> FsError {
    FsError::NotFound {
        path: p.as_str().to_owned(),
    }
}
