//! Patch-level checks that need no file system: empty paths, one hunk per path, and no path
//! that is both a file and the parent directory of another touched path.

use std::collections::HashMap;

use crate::model::{Hunk, Patch};
use crate::quote::quote;

/// A comparison key for a relative path: `.` and empty components dropped.
fn key(path: &str) -> String {
    path.split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect::<Vec<_>>()
        .join("/")
}

/// Whether a header path is written as a directory: its last component is empty or `.`
/// (`dir/`, `dir/.`). Such a path never names a file, and dropping the slash would create
/// or touch a file named `dir` the author did not mean.
fn names_directory(path: &str) -> bool {
    matches!(path.rsplit('/').next(), Some("" | "."))
}

/// An `InvalidPatch` message when hunks conflict, else `None`.
pub(crate) fn check(patch: &Patch) -> Option<String> {
    if patch.hunks.is_empty() {
        return Some("the patch contains no hunks".into());
    }
    let mut seen: HashMap<String, &str> = HashMap::new();
    let mut order: Vec<(String, &str)> = Vec::new();
    for hunk in &patch.hunks {
        if let Hunk::Update {
            path,
            move_to: None,
            chunks,
        } = hunk
            && chunks.is_empty()
        {
            return Some(format!("the Update of {} has no chunks", quote(path)));
        }
        let mut paths = vec![hunk.path()];
        if let Hunk::Update {
            path,
            move_to: Some(dest),
            ..
        } = hunk
        {
            if key(path) == key(dest) {
                return Some(format!("{} is moved onto itself", quote(path)));
            }
            paths.push(dest);
        }
        for path in paths {
            let k = key(path);
            if k.is_empty() {
                return Some(format!("{} is not a file path", quote(path)));
            }
            if names_directory(path) {
                return Some(format!(
                    "{} names a directory (it ends in '/' or '/.'); a hunk names a file: \
                     write the file's path, e.g. {}",
                    quote(path),
                    quote(&format!("{k}/file.txt"))
                ));
            }
            order.push((k.clone(), path));
            if let Some(first) = seen.insert(k, path) {
                return Some(format!(
                    "{} is touched by more than one hunk (also as {}); combine them into one hunk",
                    quote(path),
                    quote(first)
                ));
            }
        }
    }
    for (k, path) in &order {
        let mut ancestor = k.as_str();
        while let Some((parent, _)) = ancestor.rsplit_once('/') {
            if let Some(other) = seen.get(parent) {
                return Some(format!(
                    "{} is used as a file and as the parent directory of {}",
                    quote(other),
                    quote(path)
                ));
            }
            ancestor = parent;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse;

    fn check_text(body: &str) -> Option<String> {
        check(&parse(&format!("*** Begin Patch\n{body}\n*** End Patch")).unwrap())
    }

    #[test]
    fn distinct_paths_pass() {
        assert_eq!(
            check_text("*** Add File: a/x\n+1\n*** Delete File: a/y"),
            None
        );
    }

    #[test]
    fn same_path_twice_is_rejected() {
        let m = check_text("*** Add File: a\n+1\n*** Delete File: ./a").unwrap();
        assert!(m.contains("touched by more than one hunk"), "{m}");
    }

    #[test]
    fn move_target_equal_to_other_hunk_path_is_rejected() {
        let m =
            check_text("*** Update File: a\n*** Move to: b\n-x\n+y\n*** Delete File: b").unwrap();
        assert!(m.contains("'b' is touched by more than one hunk"), "{m}");
    }

    #[test]
    fn move_onto_itself_is_rejected() {
        let m = check_text("*** Update File: a\n*** Move to: ./a\n-x\n+y").unwrap();
        assert!(m.contains("moved onto itself"), "{m}");
    }

    #[test]
    fn file_and_parent_directory_conflict() {
        let m = check_text("*** Add File: a\n+1\n*** Add File: a/b/c\n+2").unwrap();
        assert!(
            m.contains("'a' is used as a file and as the parent directory of 'a/b/c'"),
            "{m}"
        );
    }

    #[test]
    fn dot_path_is_rejected() {
        let m = check_text("*** Delete File: ./").unwrap();
        assert!(m.contains("not a file path"), "{m}");
    }

    #[test]
    fn trailing_slash_paths_are_rejected_for_every_hunk_kind() {
        for body in [
            "*** Add File: dir/\n+x",
            "*** Add File: dir/\n",
            "*** Add File: a/dir/.\n+x",
            "*** Delete File: dir/",
            "*** Update File: f\n*** Move to: dir/\n-a\n+b",
            "*** Update File: dir/\n-a\n+b",
        ] {
            let m = check_text(body).unwrap_or_else(|| panic!("accepted: {body}"));
            assert!(m.contains("names a directory"), "{body}: {m}");
        }
        assert_eq!(check_text("*** Add File: dir/x\n+1"), None);
    }

    #[test]
    fn empty_patch_value_is_rejected() {
        assert!(check(&Patch { hunks: vec![] }).is_some());
    }

    #[test]
    fn hand_built_update_without_chunks_is_rejected() {
        let patch = Patch {
            hunks: vec![Hunk::Update {
                path: "a".into(),
                move_to: None,
                chunks: vec![],
            }],
        };
        assert_eq!(
            check(&patch),
            Some("the Update of 'a' has no chunks".into())
        );
    }
}
