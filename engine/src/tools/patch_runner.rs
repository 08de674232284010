//! `apply_patch` on a worker's workspace, beside `patch.rs` (which plans and checks as for any
//! workspace): the planner's reads through the runner (`stat`, `read`), and the commit through
//! it: `snapshot` checked against the plan, the journal in the gateway's store, `apply` (refused
//! by the runner unless the paths still equal the journaled snapshot), and what a failure or a
//! lost worker leaves.

use crate::error::{ErrorCode, ToolError};
use crate::versions::Known;
use codespace_runner_fs::txn::Change;
use codespace_runner_fs::{FsError, RelPath, Version};
use codespace_runner_patch::FileState;
use codespace_store::{JournalEntry, Store};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The outcome of a commit (host or runner).
pub(crate) enum Applied {
    Done,
    Stale(Vec<String>),
    Failed {
        status: crate::facts::OperationStatus,
        err: ToolError,
    },
}

/// A runner's error as the planner's lookup error (same meaning; a runner that cannot be
/// reached is an I/O failure naming it).
fn runner_fs_error(path: &str, e: codespace_runner_api::RunnerError) -> FsError {
    use codespace_runner_api::RunnerError as R;
    let path = path.to_string();
    match e {
        R::PathEscape { .. } => FsError::PathEscape {
            path,
            reason: "refused by the environment's runner",
        },
        R::NotFound { .. } => FsError::NotFound { path },
        R::NotDirectory { .. } => FsError::NotDirectory { path },
        R::Symlink { .. } => FsError::SymlinkRejected { path },
        R::SpecialFile { .. } => FsError::NotRegularFile { path },
        other => FsError::Io {
            path,
            message: format!("the environment's runner: {other}"),
        },
    }
}

/// [`lookup`] through a runner: its stat, then the whole file when it is one (at most
/// `max_bytes`, else `FILE_TOO_LARGE` without reading it).
pub(crate) async fn lookup_remote(
    runner: &dyn codespace_runner_api::Runner,
    workspace: &str,
    path: &str,
    max_bytes: u64,
) -> Result<FileState, FsError> {
    use codespace_runner_api::FileKind as K;
    let rel = RelPath::parse(path)?;
    let stat = runner
        .stat(codespace_runner_api::PathRequest {
            workspace: workspace.to_string(),
            path: rel.as_str().to_string(),
        })
        .await
        .map_err(|e| runner_fs_error(path, e))?;
    let Some(stat) = stat else {
        return Ok(FileState::Absent);
    };
    Ok(match stat.kind {
        K::Dir => FileState::Directory,
        K::Symlink => FileState::Symlink,
        K::Other => FileState::Special,
        K::File => {
            if stat.size > max_bytes {
                return Err(FsError::TooLarge {
                    path: rel.as_str().to_string(),
                    size: stat.size,
                    limit: max_bytes,
                });
            }
            let w = runner
                .read(codespace_runner_api::ReadRequest {
                    workspace: workspace.to_string(),
                    path: rel.as_str().to_string(),
                    offset: 0,
                    limit: max_bytes,
                    max_hash_bytes: max_bytes,
                })
                .await
                .map_err(|e| match e {
                    codespace_runner_api::RunnerError::TooLarge { .. } => FsError::TooLarge {
                        path: rel.as_str().to_string(),
                        size: stat.size,
                        limit: max_bytes,
                    },
                    other => runner_fs_error(path, other),
                })?;
            if w.data.len() as u64 != w.size {
                return Err(FsError::TooLarge {
                    path: rel.as_str().to_string(),
                    size: w.size,
                    limit: max_bytes,
                });
            }
            FileState::File {
                data: w.data,
                mode: stat.mode,
            }
        }
    })
}

/// The runner's form of a planned change.
fn change_dto(c: &Change) -> codespace_runner_api::FileChange {
    use codespace_runner_api::FileChange as F;
    match c {
        Change::Write { path, data, mode } => F::Write {
            path: path.as_str().to_string(),
            data: data.clone(),
            mode: *mode,
        },
        Change::Delete { path } => F::Delete {
            path: path.as_str().to_string(),
        },
        Change::Move {
            from,
            to,
            data,
            mode,
        } => F::Move {
            from: from.as_str().to_string(),
            to: to.as_str().to_string(),
            data: data.clone(),
            mode: *mode,
        },
    }
}

/// The commit of a worker's workspace, through its runner: `snapshot` (what each touched path
/// is now), checked against what the plan read (else `STALE_READ`, nothing written), recorded
/// as the journal in the store, then `apply`, which the runner refuses, writing nothing, unless
/// the paths still equal the journaled snapshot, and which rolls back on a failed step. A
/// runner that cannot be reached mid-apply leaves the journal: it is restored through the
/// runner that owns the files when it is attached again
/// ([`crate::gateway::patches::recover_worker`]). The test hooks' steps are 0 after the journal
/// and 1 before the apply (a gated hook holds between snapshot and apply).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn commit_remote(
    runner: &dyn codespace_runner_api::Runner,
    store: &Arc<Store>,
    workspace: &str,
    registration: &str,
    op: &str,
    changes: &[Change],
    at_plan: &BTreeMap<String, Known>,
    hooks: &Arc<crate::gateway::patches::PatchHooks>,
) -> Applied {
    use crate::facts::OperationStatus as S;
    let changes: Vec<codespace_runner_api::FileChange> = changes.iter().map(change_dto).collect();
    let to_err = crate::host_runner::to_tool_error;
    let backups = match runner
        .snapshot(codespace_runner_api::SnapshotRequest {
            workspace: workspace.to_string(),
            changes: changes.clone(),
        })
        .await
    {
        Ok(b) => b,
        Err(e) => {
            return Applied::Failed {
                status: S::Rejected,
                err: to_err(e),
            };
        }
    };
    // What is there now must be what the plan read.
    let stale: Vec<String> = backups
        .iter()
        .filter(|b| {
            let now = b.before.as_ref().map_or(Known::Absent, |(d, _)| {
                Known::Version(Version::from_bytes(d).as_str().to_string())
            });
            at_plan.get(&b.path).is_some_and(|k| *k != now)
        })
        .map(|b| b.path.clone())
        .collect();
    if !stale.is_empty() {
        return Applied::Stale(stale);
    }
    let entries: Vec<JournalEntry> = backups
        .iter()
        .map(|b| JournalEntry {
            path: b.path.clone(),
            before: b.before.as_ref().map(|(d, _)| d.clone()),
            mode: b.before.as_ref().map(|(_, m)| *m),
            created_dirs: Vec::new(),
        })
        .collect();
    let journaled = {
        let (store, op, ws, reg) = (
            Arc::clone(store),
            op.to_string(),
            workspace.to_string(),
            registration.to_string(),
        );
        tokio::task::spawn_blocking(move || {
            store
                .journal_begin(&op, &ws, &reg, &entries)
                .map_err(|e| e.to_string())
        })
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r)
    };
    if let Err(message) = journaled {
        return Applied::Failed {
            status: S::Rejected,
            err: ToolError::new(
                ErrorCode::Internal,
                format!("cannot write the rollback journal; nothing was written ({message})"),
            ),
        };
    }
    let clear = || {
        let (store, op) = (Arc::clone(store), op.to_string());
        async move {
            let cleared = tokio::task::spawn_blocking(move || store.journal_clear(&op)).await;
            if !matches!(cleared, Ok(Ok(()))) {
                tracing::error!("cannot clear the journal");
            }
        }
    };
    for step in 0..2 {
        let fault = match &hooks.fault {
            Some(_) => {
                let f = Arc::clone(hooks);
                tokio::task::spawn_blocking(move || f.fault.as_ref().map_or(Ok(()), |f| f(step)))
                    .await
                    .unwrap_or(Ok(()))
            }
            None => Ok(()),
        };
        if let Err(cause) = fault {
            clear().await;
            return Applied::Failed {
                status: S::Rejected,
                err: ToolError::from(cause),
            };
        }
    }
    let applied = runner
        .apply(codespace_runner_api::ApplyRequest {
            workspace: workspace.to_string(),
            changes,
            journaled: backups.clone(),
        })
        .await;
    match applied {
        Ok(_) => {
            clear().await;
            Applied::Done
        }
        // Refused before any write: the paths changed since the snapshot.
        Err(codespace_runner_api::RunnerError::Stale { .. }) => {
            clear().await;
            Applied::Stale(backups.into_iter().map(|b| b.path).collect())
        }
        // Nothing is known of the apply: the journal stays for the worker's recovery.
        Err(e @ codespace_runner_api::RunnerError::Unavailable { .. }) => Applied::Failed {
            status: S::Unknown,
            err: to_err(e),
        },
        // The runner rolled its steps back; restore the snapshot as well (what a partial
        // rollback left is put back; the rest is already as it was).
        Err(e) => {
            let restored = runner
                .restore(codespace_runner_api::RestoreRequest {
                    workspace: workspace.to_string(),
                    backups,
                })
                .await;
            let err = to_err(e);
            match restored {
                Ok(()) => {
                    clear().await;
                    Applied::Failed {
                        status: S::FailedRolledBack,
                        err: ToolError::new(
                            err.code,
                            format!(
                                "the patch failed and every touched file was restored (failed_rolled_back): {}",
                                err.message
                            ),
                        ),
                    }
                }
                Err(r) => Applied::Failed {
                    status: S::FailedPartial,
                    err: ToolError::new(
                        ErrorCode::FileOperationFailed,
                        format!(
                            "the patch failed ({}) and restoring it failed (failed_partial): {r}",
                            err.message
                        ),
                    ),
                },
            }
        }
    }
}
