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

/// Fills `links` of every sub-request that names a path (the builder said 1).
pub fn fill_links(root: &Root, reqs: &mut [SubRequest]) {
    for r in reqs.iter_mut().filter(|r| r.path != ".") {
        r.links = links_at(root, &r.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
