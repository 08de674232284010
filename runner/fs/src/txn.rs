//! All-or-nothing commit of a set of file changes, with a rollback journal.
//!
//! [`commit`] snapshots every touched path, hands the snapshot to a [`Journal`] before writing anything,
//! applies the changes step by step and, on any failure, restores every touched path from the snapshot.

use std::collections::HashSet;

use crate::error::FsError;
use crate::meta::Kind;
use crate::path::RelPath;
use crate::root::Root;
use crate::version::Version;

/// One change to apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Create or replace `path` with `data` and permission bits `mode` (missing parents are created).
    Write {
        /// Target file.
        path: RelPath,
        /// New content.
        data: Vec<u8>,
        /// Permission bits to set.
        mode: u32,
    },
    /// Remove the regular file `path` (it must exist).
    Delete {
        /// File to remove.
        path: RelPath,
    },
    /// Write `data` to `to` (which must not exist unless it equals `from`) and remove `from`.
    Move {
        /// Existing source file.
        from: RelPath,
        /// Destination (missing parents are created).
        to: RelPath,
        /// Content of the destination.
        data: Vec<u8>,
        /// Permission bits of the destination.
        mode: u32,
    },
}

/// The state of one touched path before the commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backup {
    /// The touched path.
    pub path: RelPath,
    /// Content and permission bits before; `None` when the file did not exist.
    pub before: Option<(Vec<u8>, u32)>,
}

/// Durable record of the backups of an in-flight commit, so an interrupted commit can be undone at start-up
/// with [`restore`].
pub trait Journal {
    /// Persists `backups`; called once, before anything is written. An error aborts the commit untouched.
    fn record(&mut self, backups: &[Backup]) -> Result<(), String>;
    /// Marks the commit finished (applied, or completely rolled back).
    fn finish(&mut self) -> Result<(), String>;
}

/// Before and after versions of one touched path (`None` = absent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileOutcome {
    /// The touched path.
    pub path: RelPath,
    /// Version before the commit.
    pub before: Option<Version>,
    /// Version after the commit.
    pub after: Option<Version>,
}

/// What a successful commit did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitReport {
    /// One entry per touched path, in order of first appearance.
    pub files: Vec<FileOutcome>,
    /// Directories created, outermost first.
    pub created_dirs: Vec<RelPath>,
    /// Number of steps applied.
    pub steps: usize,
}

/// Why a commit did not (fully) happen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommitError {
    /// Refused while taking the snapshot (e.g. a symlink, a missing file to delete, an existing move
    /// destination); nothing was written.
    #[error("commit refused: {cause}")]
    Refused {
        /// The refusal.
        cause: FsError,
    },
    /// The journal could not record the backups; nothing was written.
    #[error("could not record the rollback journal: {message}")]
    Journal {
        /// The journal's error.
        message: String,
    },
    /// A step failed and every touched path was restored.
    #[error("commit failed and was rolled back: {cause}")]
    RolledBack {
        /// The failure that triggered the rollback.
        cause: FsError,
    },
    /// A step failed and restoring some paths failed too.
    #[error("commit failed and could not be fully rolled back ({} paths): {cause}", files.len())]
    Partial {
        /// The failure that triggered the rollback.
        cause: FsError,
        /// Workspace-relative paths that could not be restored.
        files: Vec<String>,
    },
    /// Every change was applied but the journal could not be marked finished. Restoring from that journal
    /// later would undo this commit.
    #[error("changes applied but the journal could not be finished: {message}")]
    JournalFinish {
        /// The journal's error.
        message: String,
        /// What was applied.
        report: CommitReport,
    },
}

/// One unit of work; the fault hook runs before each.
enum Step<'a> {
    CreateDirs(RelPath),
    Write(&'a RelPath, &'a [u8], u32),
    Remove(&'a RelPath),
}

/// Applies `changes` all-or-nothing.
///
/// 1. Snapshots every touched path (refusing symlinks and special files).
/// 2. Calls `journal.record` before any write.
/// 3. Applies the changes as steps (`create_dirs` of a parent, `write_atomic`, `remove_file`), calling
///    `fault(step_index)` before each step; an error from `fault` is treated as that step failing.
/// 4. On failure restores every touched path and removes the directories it created, returning
///    `RolledBack`, or `Partial` when restoring failed.
/// 5. Calls `journal.finish` on success and after a complete rollback.
pub fn commit(
    root: &Root,
    changes: &[Change],
    journal: &mut dyn Journal,
    fault: &mut dyn FnMut(usize) -> Result<(), FsError>,
) -> Result<CommitReport, CommitError> {
    let backups = snapshot(root, changes).map_err(|cause| CommitError::Refused { cause })?;
    journal
        .record(&backups)
        .map_err(|message| CommitError::Journal { message })?;
    let steps = plan(changes);
    let mut created_dirs: Vec<RelPath> = Vec::new();
    for (index, step) in steps.iter().enumerate() {
        if let Err(cause) = fault(index).and_then(|()| run_step(root, step, &mut created_dirs)) {
            return Err(roll_back(root, &backups, &created_dirs, journal, cause));
        }
    }
    let report = CommitReport {
        files: outcomes(&backups, changes),
        created_dirs,
        steps: steps.len(),
    };
    match journal.finish() {
        Ok(()) => Ok(report),
        Err(message) => Err(CommitError::JournalFinish { message, report }),
    }
}

/// Restores every backup: rewrites the old content and mode (skipped when already identical), removes
/// files that did not exist before. Directories created by the interrupted commit are not known here and
/// are left in place. Returns the paths that could not be restored.
pub fn restore(root: &Root, backups: &[Backup]) -> Result<(), Vec<String>> {
    let failed: Vec<String> = backups
        .iter()
        .filter(|b| restore_one(root, b).is_err())
        .map(|b| b.path.as_str().to_owned())
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(failed)
    }
}

fn restore_one(root: &Root, backup: &Backup) -> Result<(), FsError> {
    match &backup.before {
        Some((data, mode)) => {
            if let Ok(current) = root.read_all(&backup.path)
                && current.data == *data
                && current.mode == *mode
            {
                return Ok(());
            }
            match root.write_atomic(&backup.path, data, *mode) {
                Err(FsError::NotFound { .. }) => {
                    if let Some(parent) = backup.path.parent() {
                        root.create_dirs(&parent)?;
                    }
                    root.write_atomic(&backup.path, data, *mode)
                }
                other => other,
            }
        }
        // A non-directory ancestor means the file cannot exist there: nothing to remove.
        None => match root.stat(&backup.path) {
            Ok(None) | Err(FsError::NotDirectory { .. }) => Ok(()),
            Ok(Some(_)) => root.remove_file(&backup.path),
            Err(e) => Err(e),
        },
    }
}

/// Restores after a failed step and decides between `RolledBack` and `Partial`.
fn roll_back(
    root: &Root,
    backups: &[Backup],
    created_dirs: &[RelPath],
    journal: &mut dyn Journal,
    cause: FsError,
) -> CommitError {
    let mut failed = restore(root, backups).err().unwrap_or_default();
    for dir in created_dirs.iter().rev() {
        if root.remove_empty_dir(dir).is_err() {
            failed.push(dir.as_str().to_owned());
        }
    }
    if failed.is_empty() {
        // The workspace is back to its prior state; a stale journal would only restore it again.
        let _ = journal.finish();
        CommitError::RolledBack { cause }
    } else {
        CommitError::Partial {
            cause,
            files: failed,
        }
    }
}

/// Every distinct touched path in order of first appearance.
fn touched(changes: &[Change]) -> Vec<&RelPath> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for change in changes {
        let paths: Vec<&RelPath> = match change {
            Change::Write { path, .. } | Change::Delete { path } => vec![path],
            Change::Move { from, to, .. } => vec![from, to],
        };
        for p in paths {
            if seen.insert(p) {
                out.push(p);
            }
        }
    }
    out
}

/// Reads the prior state of every touched path and checks the preconditions of each change.
fn snapshot(root: &Root, changes: &[Change]) -> Result<Vec<Backup>, FsError> {
    let mut backups = Vec::new();
    for path in touched(changes) {
        let before = match root.stat(path)? {
            None => None,
            Some(meta) if meta.kind == Kind::File => {
                let content = root.read_all(path)?;
                Some((content.data, content.mode))
            }
            Some(meta) if meta.kind == Kind::Symlink => {
                return Err(FsError::SymlinkRejected {
                    path: path.as_str().to_owned(),
                });
            }
            Some(_) => {
                return Err(FsError::NotRegularFile {
                    path: path.as_str().to_owned(),
                });
            }
        };
        backups.push(Backup {
            path: path.clone(),
            before,
        });
    }
    let exists = |p: &RelPath| backups.iter().any(|b| &b.path == p && b.before.is_some());
    for change in changes {
        match change {
            Change::Delete { path } | Change::Move { from: path, .. } if !exists(path) => {
                return Err(FsError::NotFound {
                    path: path.as_str().to_owned(),
                });
            }
            Change::Move { from, to, .. } if from != to && exists(to) => {
                return Err(FsError::AlreadyExists {
                    path: to.as_str().to_owned(),
                });
            }
            _ => {}
        }
    }
    Ok(backups)
}

/// The steps of `changes`, in order.
fn plan(changes: &[Change]) -> Vec<Step<'_>> {
    let mut steps = Vec::new();
    for change in changes {
        match change {
            Change::Write { path, data, mode } => {
                push_parent(&mut steps, path);
                steps.push(Step::Write(path, data, *mode));
            }
            Change::Delete { path } => steps.push(Step::Remove(path)),
            Change::Move {
                from,
                to,
                data,
                mode,
            } => {
                push_parent(&mut steps, to);
                steps.push(Step::Write(to, data, *mode));
                if from != to {
                    steps.push(Step::Remove(from));
                }
            }
        }
    }
    steps
}

/// Adds a `create_dirs` step for the parent of `path` unless it is the root.
fn push_parent(steps: &mut Vec<Step<'_>>, path: &RelPath) {
    if let Some(parent) = path.parent().filter(|p| !p.is_root()) {
        steps.push(Step::CreateDirs(parent));
    }
}

fn run_step(root: &Root, step: &Step<'_>, created: &mut Vec<RelPath>) -> Result<(), FsError> {
    match step {
        Step::CreateDirs(dir) => {
            created.extend(root.create_dirs(dir)?);
            Ok(())
        }
        Step::Write(path, data, mode) => root.write_atomic(path, data, *mode),
        Step::Remove(path) => root.remove_file(path),
    }
}

/// Before/after versions of each touched path, replaying the changes over the backups.
fn outcomes(backups: &[Backup], changes: &[Change]) -> Vec<FileOutcome> {
    let mut files: Vec<FileOutcome> = backups
        .iter()
        .map(|b| {
            let before = b.before.as_ref().map(|(data, _)| Version::from_bytes(data));
            FileOutcome {
                path: b.path.clone(),
                after: before.clone(),
                before,
            }
        })
        .collect();
    let mut set = |p: &RelPath, v: Option<Version>| {
        if let Some(f) = files.iter_mut().find(|f| &f.path == p) {
            f.after = v;
        }
    };
    for change in changes {
        match change {
            Change::Write { path, data, .. } => set(path, Some(Version::from_bytes(data))),
            Change::Delete { path } => set(path, None),
            Change::Move { from, to, data, .. } => {
                set(from, None);
                set(to, Some(Version::from_bytes(data)));
            }
        }
    }
    files
}
