//! `resource.links`: the hard-link count the gateway puts in every Operation, read from disk with
//! no symlink followed beneath the workspace root fd. A file reached through a name whose inode
//! has other names is decided with that fact, so a guardrail can refuse hardlink aliases of
//! withheld files (see docs/security.md, "Hardlink aliases").

use crate::request::SubRequest;
use codespace_runner_fs::{Kind, RelPath, Root};

/// The `links` value of a file of `kind` with `nlink` names: a directory counts as one name (its
/// `st_nlink` counts subdirectories, not aliases; directories cannot be hardlinked).
pub fn links_value(kind: Kind, nlink: u64) -> i64 {
    if kind == Kind::Dir {
        1
    } else {
        i64::try_from(nlink).unwrap_or(i64::MAX)
    }
}

/// The `links` value of `path` beneath `root`: `st_nlink` of an existing non-directory, 1 for a
/// directory or the root, 0 when nothing is there. A path that cannot be examined (a symlink or
/// non-directory on the way) also says 0: the operation itself then fails on the same path.
pub fn links_at(root: &Root, path: &str) -> i64 {
    if path == "." {
        return 1;
    }
    let Ok(rel) = RelPath::parse(path) else {
        return 0;
    };
    match root.stat(&rel) {
        Ok(Some(meta)) => links_value(meta.kind, meta.links),
        Ok(None) | Err(_) => 0,
    }
}

/// Fills `links` of every sub-request that names a path (the builder said 1). It stats: call it
/// on a thread that may block, or through [`fill_links_async`].
pub fn fill_links(root: &Root, reqs: &mut [SubRequest]) {
    for r in reqs.iter_mut().filter(|r| r.path != ".") {
        r.links = links_at(root, &r.path);
    }
}

/// [`fill_links`] without blocking an async worker: from the kernel's caches alone when every
/// path is there ([`Root::stat_nowait`]), else all of them on the blocking pool.
pub async fn fill_links_async(
    root: &std::sync::Arc<Root>,
    reqs: &mut Vec<SubRequest>,
) -> Result<(), crate::ToolError> {
    let cached: Option<Vec<i64>> = reqs
        .iter()
        .filter(|r| r.path != ".")
        .map(|r| {
            let rel = RelPath::parse(&r.path).ok()?;
            root.stat_nowait(&rel).map(|m| links_value(m.kind, m.links))
        })
        .collect();
    if let Some(values) = cached {
        for (r, v) in reqs.iter_mut().filter(|r| r.path != ".").zip(values) {
            r.links = v;
        }
        return Ok(());
    }
    let root = std::sync::Arc::clone(root);
    let mut owned = std::mem::take(reqs);
    *reqs = tokio::task::spawn_blocking(move || {
        fill_links(&root, &mut owned);
        owned
    })
    .await
    .map_err(|e| {
        crate::ToolError::new(crate::ErrorCode::Internal, format!("blocking task: {e}"))
    })?;
    Ok(())
}

/// [`fill_links_async`] for a workspace: beneath its host `root`, or, for a worker's workspace
/// (no host root), through its `runner` (`Runner::stat`; nothing is examined on this host).
pub(crate) async fn fill_links_via(
    root: Option<&std::sync::Arc<Root>>,
    runner: &dyn codespace_runner_api::Runner,
    workspace: &str,
    reqs: &mut Vec<SubRequest>,
) -> Result<(), crate::ToolError> {
    if let Some(root) = root {
        return fill_links_async(root, reqs).await;
    }
    for r in reqs.iter_mut().filter(|r| r.path != ".") {
        let stat = runner
            .stat(codespace_runner_api::PathRequest {
                workspace: workspace.to_string(),
                path: r.path.clone(),
            })
            .await;
        r.links = match stat {
            Ok(Some(s)) => links_value(
                match s.kind {
                    codespace_runner_api::FileKind::Dir => Kind::Dir,
                    codespace_runner_api::FileKind::File => Kind::File,
                    codespace_runner_api::FileKind::Symlink => Kind::Symlink,
                    codespace_runner_api::FileKind::Other => Kind::Other,
                },
                s.links,
            ),
            Ok(None) | Err(_) => 0,
        };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn the_cached_and_the_blocking_counts_agree() {
        let dir = tempfile::tempdir().unwrap();
        let root_path = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::write(root_path.join("one"), "1").unwrap();
        std::fs::create_dir_all(root_path.join("d")).unwrap();
        std::fs::write(root_path.join("d/two"), "2").unwrap();
        std::fs::hard_link(root_path.join("d/two"), root_path.join("alias")).unwrap();
        std::os::unix::fs::symlink("d", root_path.join("link")).unwrap();
        let root = std::sync::Arc::new(Root::open(&root_path).unwrap());
        let paths = [
            "one", "d/two", "alias", "d", "link", "link/two", "missing", ".",
        ];
        let session = crate::request::Session {
            client: "c".into(),
            transport: "stdio".into(),
            user: None,
        };
        let reqs = || -> Vec<SubRequest> {
            paths
                .iter()
                .map(|p| crate::request::path_request(crate::policy::Action::READ, p, "", &session))
                .collect()
        };
        let mut blocking = reqs();
        fill_links(&root, &mut blocking);
        // Warm the lookup cache, then the cached path answers; with a missing path it cannot,
        // and the blocking pool does: both give the blocking answer.
        let mut cached = reqs();
        cached.retain(|r| r.path != "missing" && r.path != "link/two");
        fill_links_async(&root, &mut cached).await.unwrap();
        for r in &cached {
            let want = blocking.iter().find(|b| b.path == r.path).unwrap().links;
            assert_eq!(r.links, want, "{}", r.path);
        }
        let mut mixed = reqs();
        fill_links_async(&root, &mut mixed).await.unwrap();
        let got: Vec<i64> = mixed.iter().map(|r| r.links).collect();
        let want: Vec<i64> = blocking.iter().map(|r| r.links).collect();
        assert_eq!(got, want);
        assert_eq!(want, [1, 2, 2, 1, 1, 0, 0, 1]);
        // The cached stat itself: a symlink leaf is the link, never its target.
        let link = RelPath::parse("link").unwrap();
        if let Some(m) = root.stat_nowait(&link) {
            assert_eq!(m.kind, codespace_runner_fs::Kind::Symlink);
        }
    }

    #[test]
    fn links_follow_the_documented_rule() {
        let dir = tempfile::tempdir().unwrap();
        let root_path = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::write(root_path.join("one"), "1").unwrap();
        std::fs::write(root_path.join("two"), "2").unwrap();
        std::fs::hard_link(root_path.join("two"), root_path.join("alias")).unwrap();
        std::fs::create_dir_all(root_path.join("d/e/f")).unwrap();
        std::os::unix::fs::symlink("d", root_path.join("link")).unwrap();
        let root = Root::open(&root_path).unwrap();
        assert_eq!(links_at(&root, "."), 1);
        assert_eq!(links_at(&root, "one"), 1);
        assert_eq!(links_at(&root, "alias"), 2);
        assert_eq!(links_at(&root, "d"), 1, "a directory is one name");
        assert_eq!(links_at(&root, "missing"), 0);
        assert_eq!(
            links_at(&root, "link"),
            1,
            "the symlink itself, not followed"
        );
        assert_eq!(links_at(&root, "link/e"), 0, "never through a symlink");
    }
}
