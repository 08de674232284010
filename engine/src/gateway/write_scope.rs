//! The gateway's side of a command's write scope: before a command starts, `process_write` is
//! decided for each candidate directory (the command's `cwd`, the operator's
//! `command_write_paths`, `.git` and every nested `.git` the path index knows), audited under the
//! command's own decision id, and the answers become the sandbox's writable directories and
//! read-only mounts. A worker's workspace is stat'ed (and an operator's missing write path
//! created) through its environment's runner, never on this host.

use super::{Gateway, WorkspaceRuntime};
use crate::error::{ErrorCode, ToolError};
use crate::index::start::StartListing;
use crate::policy::PolicySnapshot;
use crate::policy::decide::Decision;
use crate::request::{ExecFacts, Session, write_scope_candidates, write_scope_requests};
use crate::wire::WritePaths;
use codespace_runner_fs::{Kind, RelPath, Root};
use std::sync::Arc;

/// Most nested `.git` (beneath subdirectories) one command's scope decides.
const MAX_NESTED_GIT: usize = 64;

/// A decided write scope, ready for the sandbox plan.
#[derive(Debug, Clone, Default)]
pub(crate) struct WriteScope {
    /// The wire view (`exec_command`'s `write_paths`).
    pub(crate) paths: WritePaths,
    /// The workspace root itself is writable.
    pub(crate) root_writable: bool,
    /// Writable directories beneath the root.
    pub(crate) writable: Vec<RelPath>,
    /// Denied paths beneath a writable directory: read-only mounts.
    pub(crate) read_only_mounts: Vec<RelPath>,
    /// The audit rows of the scope's decisions (under the command's decision id, right after
    /// its own rows), queued with the command's masks before it starts.
    pub(crate) rows: Vec<codespace_store::DecisionRow>,
}

/// One decided candidate.
struct Decided {
    path: RelPath,
    allowed: bool,
    /// Created (`mkdir -p`, no symlink followed; in a worker's workspace by its runner) when
    /// allowed and missing: only the operator's own candidates, never `.git`.
    create: bool,
}

/// Stats each decided candidate on the host root (blocking) and creates an allowed, missing
/// operator's candidate: a missing `.git` is not created (nothing to protect yet), nor
/// anything behind a symlink (it stays unwritable and is named nowhere).
fn resolve_host(root: &Root, decided: Vec<Decided>) -> Result<Vec<Resolved>, ToolError> {
    let mut out = Vec::with_capacity(decided.len());
    for c in decided {
        let kind = match root.stat(&c.path) {
            Ok(Some(m)) => Some(m.kind),
            Ok(None) => None,
            // A symlink or a file on the way: nothing there can be granted.
            Err(_) => continue,
        };
        let kind = if c.allowed && c.create && kind.is_none() {
            root.create_dirs(&c.path)
                .map_err(|e| cannot_create(&c.path, &e.to_string()))?;
            Some(Kind::Dir)
        } else {
            kind
        };
        out.push(Resolved { c, kind });
    }
    Ok(out)
}

/// [`resolve_host`] for a worker's workspace: each candidate is stat'ed (no-follow) and an
/// allowed, missing operator's candidate created through the environment's runner. A symlink
/// or a non-directory on the way skips the candidate as on the host; any other failure (the
/// worker unreachable) refuses the command rather than leave a denied `.git` unmounted.
async fn resolve_remote(
    ws: &WorkspaceRuntime,
    decided: Vec<Decided>,
) -> Result<Vec<Resolved>, ToolError> {
    use codespace_runner_api as api;
    let req = |p: &RelPath| api::PathRequest {
        workspace: ws.facts.id.clone(),
        path: p.as_str().to_string(),
    };
    let mut out = Vec::with_capacity(decided.len());
    for c in decided {
        let kind = match ws.runner.stat(req(&c.path)).await {
            Ok(s) => s.map(|s| match s.kind {
                api::FileKind::Dir => Kind::Dir,
                api::FileKind::Symlink => Kind::Symlink,
                api::FileKind::File => Kind::File,
                api::FileKind::Other => Kind::Other,
            }),
            Err(
                api::RunnerError::Symlink { .. }
                | api::RunnerError::NotDirectory { .. }
                | api::RunnerError::PathEscape { .. }
                | api::RunnerError::SpecialFile { .. },
            ) => continue,
            Err(e) => {
                return Err(ToolError::new(
                    ErrorCode::ProcessSpawnFailed,
                    format!(
                        "cannot decide the write scope of the command: `{}` could not be \
                         checked in environment `{}`: {e}",
                        c.path.as_str(),
                        ws.facts.environment
                    ),
                ));
            }
        };
        let kind = if c.allowed && c.create && kind.is_none() {
            ws.runner
                .make_dirs(req(&c.path))
                .await
                .map_err(|e| cannot_create(&c.path, &e.to_string()))?;
            Some(Kind::Dir)
        } else {
            kind
        };
        out.push(Resolved { c, kind });
    }
    Ok(out)
}

fn cannot_create(path: &RelPath, e: &str) -> ToolError {
    ToolError::new(
        ErrorCode::ProcessSpawnFailed,
        format!(
            "cannot create the write path `{}` of the command: {e}",
            path.as_str()
        ),
    )
}

/// A decided candidate and what is there (after any creation).
struct Resolved {
    c: Decided,
    kind: Option<Kind>,
}

/// Turns resolved candidates into the scope.
fn assemble(resolved: Vec<Resolved>) -> WriteScope {
    let mut scope = WriteScope::default();
    let mut denied: Vec<RelPath> = Vec::new();
    for Resolved { c, kind } in resolved {
        match (c.allowed, kind) {
            (true, Some(Kind::Dir)) => push(&mut scope.writable, c.path),
            (false, Some(Kind::Dir | Kind::File)) => push(&mut denied, c.path),
            _ => {}
        }
    }
    scope.root_writable = scope.writable.iter().any(RelPath::is_root);
    let beneath_writable = |p: &RelPath| {
        scope
            .writable
            .iter()
            .any(|w| w.is_root() || p.as_str().starts_with(&format!("{}/", w.as_str())))
    };
    scope.read_only_mounts = denied
        .iter()
        .filter(|p| !p.is_root() && beneath_writable(p))
        .cloned()
        .collect();
    scope.paths = WritePaths {
        writable: scope
            .writable
            .iter()
            .map(|p| p.as_str().to_string())
            .collect(),
        read_only: denied.iter().map(|p| p.as_str().to_string()).collect(),
    };
    scope.writable.retain(|p| !p.is_root());
    scope
}

/// Turns decided candidates into the scope on the host root (blocking: it stats and may
/// create directories).
#[cfg(test)]
fn shape(root: &Root, decided: Vec<Decided>) -> Result<WriteScope, ToolError> {
    Ok(assemble(resolve_host(root, decided)?))
}

fn push(list: &mut Vec<RelPath>, p: RelPath) {
    if !list.contains(&p) {
        list.push(p);
    }
}

/// Resolves the decided candidates where the workspace lives (its runner for a worker's
/// workspace, the blocking pool on this host) and assembles the scope carrying `rows`: the
/// common tail of a command's and a hook's write scope.
async fn resolve_and_assemble(
    ws: &WorkspaceRuntime,
    decided: Vec<Decided>,
    rows: Vec<codespace_store::DecisionRow>,
) -> Result<WriteScope, ToolError> {
    let resolved = if ws.is_remote() {
        resolve_remote(ws, decided).await?
    } else {
        let root = Arc::clone(ws.host_root()?);
        tokio::task::spawn_blocking(move || resolve_host(&root, decided))
            .await
            .map_err(|e| {
                ToolError::new(
                    ErrorCode::ProcessSpawnFailed,
                    format!("write scope task: {e}"),
                )
            })??
    };
    let mut scope = assemble(resolved);
    scope.rows = rows;
    Ok(scope)
}

/// Decides the write scope of a command about to start in `ws` (see the module doc). The
/// cwd's `process_write` was decided with the call (`exec`); the other candidates are
/// decided here.
pub(crate) async fn write_scope(
    gw: &Gateway,
    snap: &PolicySnapshot,
    ws: &WorkspaceRuntime,
    session: &Session,
    exec_decision: &Decision,
    exec: &ExecFacts,
    listing: &StartListing<'_>,
) -> Result<WriteScope, ToolError> {
    let configured = gw.config().command_write_paths(&ws.facts.id);
    let nested = nested_git(listing).await;
    let candidates = write_scope_candidates(&exec.cwd, &configured, &nested);
    let cwd_allowed = exec_decision
        .subs
        .iter()
        .find(|s| s.action == "process_write")
        .is_some_and(|s| s.allowed);
    let rest: Vec<RelPath> = candidates.iter().skip(1).cloned().collect();
    let reqs = write_scope_requests(exec, &rest);
    let d = gw
        .decider
        .probe(snap, &ws.facts, &exec_decision.tool, &reqs, session);
    let rows = gw
        .decider
        .shaping_rows(snap, exec_decision, &d, &ws.facts, &reqs, session);
    let mut decided = vec![Decided {
        path: exec.cwd.clone(),
        allowed: cwd_allowed,
        create: false,
    }];
    for (path, sub) in rest.into_iter().zip(&d.subs) {
        let create = configured.iter().any(|c| c == path.as_str());
        decided.push(Decided {
            path,
            allowed: sub.allowed,
            create,
        });
    }
    resolve_and_assemble(ws, decided, rows).await
}

/// The write scope of an `after_patch` hook (issue 31): the directories of the files the patch
/// wrote (`dirs`), each decided as `process_write` for the hook's command (`exec`, its context
/// carrying `context.hook`), plus `.git` and the nested `.git` as for every command; nothing is
/// created. Narrower than a command's scope at the root: the hook may write where the patch
/// wrote and no further (Landlock cannot grant a single file the rename most formatters use).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn hook_write_scope(
    gw: &Gateway,
    snap: &PolicySnapshot,
    ws: &WorkspaceRuntime,
    session: &Session,
    hook_decision: &Decision,
    exec: &ExecFacts,
    dirs: &[RelPath],
    listing: &StartListing<'_>,
) -> Result<WriteScope, ToolError> {
    let nested = nested_git(listing).await;
    let mut candidates: Vec<RelPath> = Vec::new();
    for c in dirs
        .iter()
        .cloned()
        .chain(RelPath::parse(".git").ok())
        .chain(nested)
    {
        if !candidates.contains(&c) {
            candidates.push(c);
        }
    }
    let reqs = write_scope_requests(exec, &candidates);
    let d = gw
        .decider
        .probe(snap, &ws.facts, &hook_decision.tool, &reqs, session);
    let rows = gw
        .decider
        .shaping_rows(snap, hook_decision, &d, &ws.facts, &reqs, session);
    let decided: Vec<Decided> = candidates
        .into_iter()
        .zip(&d.subs)
        .map(|(path, sub)| Decided {
            path,
            allowed: sub.allowed,
            create: false,
        })
        .collect();
    resolve_and_assemble(ws, decided, rows).await
}

/// The nested `.git` entries the workspace's path index lists (not the root's own `.git`,
/// always a candidate), at most [`MAX_NESTED_GIT`]; none when the index cannot list.
async fn nested_git(listing: &StartListing<'_>) -> Vec<RelPath> {
    let Ok(listing) = listing.get().await else {
        return Vec::new();
    };
    listing
        .entries
        .iter()
        .filter(|e| e.path.ends_with("/.git"))
        .filter_map(|e| RelPath::parse(&e.path).ok())
        .take(MAX_NESTED_GIT)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decided(path: &str, allowed: bool, create: bool) -> Decided {
        Decided {
            path: RelPath::parse(path).unwrap(),
            allowed,
            create,
        }
    }

    #[test]
    fn denied_paths_beneath_a_writable_one_become_read_only_mounts() {
        let dir = tempfile::tempdir().unwrap();
        for d in [".git", "src", "target"] {
            std::fs::create_dir(dir.path().join(d)).unwrap();
        }
        let root = Root::open(dir.path()).unwrap();
        let scope = shape(
            &root,
            vec![
                decided(".", true, false),
                decided("src", false, true),
                decided(".git", false, false),
            ],
        )
        .unwrap();
        assert!(scope.root_writable);
        assert!(scope.writable.is_empty());
        assert_eq!(scope.paths.writable, vec!["."]);
        assert_eq!(scope.paths.read_only, vec!["src", ".git"]);
        let mounts: Vec<&str> = scope.read_only_mounts.iter().map(RelPath::as_str).collect();
        assert_eq!(mounts, vec!["src", ".git"]);
    }

    #[test]
    fn only_target_is_created_and_writable_and_nothing_is_mounted() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(".git")).unwrap();
        let root = Root::open(dir.path()).unwrap();
        let scope = shape(
            &root,
            vec![
                decided(".", false, false),
                decided("target", true, true),
                decided(".git", false, false),
                decided("missing/.git", true, false),
            ],
        )
        .unwrap();
        assert!(!scope.root_writable);
        assert!(
            dir.path().join("target").is_dir(),
            "an allowed candidate is created"
        );
        assert!(
            !dir.path().join("missing").exists(),
            "a .git is never created"
        );
        assert_eq!(scope.paths.writable, vec!["target"]);
        assert_eq!(scope.paths.read_only, vec![".", ".git"]);
        assert!(scope.read_only_mounts.is_empty());
    }

    #[test]
    fn a_symlinked_candidate_is_never_granted() {
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/tmp", dir.path().join("target")).unwrap();
        let root = Root::open(dir.path()).unwrap();
        let scope = shape(&root, vec![decided("target", true, true)]).unwrap();
        assert!(scope.paths.writable.is_empty(), "{:?}", scope.paths);
    }
}
