//! `RelPath`: a validated, normalized workspace-relative path.

use crate::error::{FsError, echo};

/// Longest accepted single component, in bytes (Linux `NAME_MAX`).
pub const MAX_COMPONENT_BYTES: usize = 255;
/// Longest accepted path, in bytes (Linux `PATH_MAX`).
pub const MAX_PATH_BYTES: usize = 4096;

/// A workspace-relative path that cannot name anything outside the workspace by its spelling alone:
/// no `..`, not absolute, no NUL, bounded length. Normalized: `.` components and repeated or trailing `/`
/// are removed. The workspace root itself is `"."`; a `RelPath` is never empty.
///
/// Spelling is only half of the sandbox: symlinks are handled when the path is resolved by
/// [`crate::Root`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RelPath(String);

impl RelPath {
    /// Parses and normalizes `s`.
    ///
    /// Errors (all `FsError::PathEscape`, code `PATH_ESCAPE`): empty input, absolute path, any `..`
    /// component, a NUL byte, a component longer than 255 bytes, or a path longer than 4096 bytes.
    /// `"."` and `"./"` parse to the root.
    pub fn parse(s: &str) -> Result<RelPath, FsError> {
        let escape = |reason: &'static str| FsError::PathEscape {
            path: echo(s),
            reason,
        };
        if s.is_empty() {
            return Err(escape("empty path"));
        }
        if s.contains('\0') {
            return Err(escape("contains a NUL byte"));
        }
        if s.len() > MAX_PATH_BYTES {
            return Err(escape("path too long"));
        }
        if s.starts_with('/') {
            return Err(escape("absolute paths are not allowed"));
        }
        // One pass checks every component; a path already in normal form (no empty or `.`
        // component: every path a listing or the store holds) is copied as it is, with no
        // component list and no join (issue 34: the index's restart parses every saved path).
        let mut normal = true;
        for comp in s.split('/') {
            match comp {
                "" | "." => normal = false,
                ".." => return Err(escape("`..` components are not allowed")),
                c if c.len() > MAX_COMPONENT_BYTES => return Err(escape("name too long")),
                _ => {}
            }
        }
        if normal {
            return Ok(RelPath(s.to_owned()));
        }
        let parts: Vec<&str> = s.split('/').filter(|c| !matches!(*c, "" | ".")).collect();
        if parts.is_empty() {
            return Ok(RelPath::root());
        }
        Ok(RelPath(parts.join("/")))
    }

    /// The workspace root, `"."`.
    pub fn root() -> RelPath {
        RelPath(String::from("."))
    }

    /// The normalized path, `'/'`-separated; `"."` for the root.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this is the workspace root.
    pub fn is_root(&self) -> bool {
        self.0 == "."
    }

    /// The parent directory (`"."` for a top-level name); `None` for the root.
    pub fn parent(&self) -> Option<RelPath> {
        if self.is_root() {
            return None;
        }
        match self.0.rsplit_once('/') {
            Some((head, _)) => Some(RelPath(head.to_owned())),
            None => Some(RelPath::root()),
        }
    }

    /// The last component; `None` for the root.
    pub fn file_name(&self) -> Option<&str> {
        if self.is_root() {
            return None;
        }
        match self.0.rsplit_once('/') {
            Some((_, tail)) => Some(tail),
            None => Some(&self.0),
        }
    }

    /// Appends one component. `name` must be a single plain name: not empty, not `.` or `..`, no `/`,
    /// no NUL; the result must respect the length limits. Errors are `PathEscape`.
    pub fn join(&self, name: &str) -> Result<RelPath, FsError> {
        let escape = |reason: &'static str| FsError::PathEscape {
            path: echo(name),
            reason,
        };
        if name.is_empty() || name == "." || name == ".." {
            return Err(escape("not a plain file name"));
        }
        if name.contains('/') {
            return Err(escape("a name must not contain `/`"));
        }
        let joined = if self.is_root() {
            name.to_owned()
        } else {
            format!("{}/{}", self.0, name)
        };
        RelPath::parse(&joined)
    }

    /// The components, outermost first (empty for the root).
    pub fn components(&self) -> impl Iterator<Item = &str> {
        self.0.split('/').filter(|c| *c != ".")
    }
}

impl std::fmt::Display for RelPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for RelPath {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> String {
        RelPath::parse(s).unwrap().as_str().to_owned()
    }

    #[test]
    fn normalizes() {
        assert_eq!(ok("."), ".");
        assert_eq!(ok("./"), ".");
        assert_eq!(ok("./."), ".");
        assert_eq!(ok("a//b/"), "a/b");
        assert_eq!(ok("./a/./b"), "a/b");
        assert_eq!(ok("a/."), "a");
        assert_eq!(ok(".hidden/x"), ".hidden/x");
        assert_eq!(ok("..."), "...");
    }

    /// The one-pass parse (a normal path copied as it is) against the component list it
    /// replaced, over every spelling of up to four components drawn from pieces that exercise
    /// each rule: the same path or the same error code for each.
    #[test]
    fn the_fast_path_agrees_with_the_component_list() {
        fn reference(s: &str) -> Option<String> {
            if s.is_empty() || s.contains('\0') || s.len() > MAX_PATH_BYTES || s.starts_with('/') {
                return None;
            }
            let mut parts = Vec::new();
            for c in s.split('/') {
                match c {
                    "" | "." => {}
                    ".." => return None,
                    c if c.len() > MAX_COMPONENT_BYTES => return None,
                    c => parts.push(c),
                }
            }
            Some(if parts.is_empty() {
                ".".to_owned()
            } else {
                parts.join("/")
            })
        }
        let long = "n".repeat(256);
        let pieces = ["a", "bc", ".", "..", "", "...", ".x", "a\0", long.as_str()];
        let mut spellings = vec![String::new()];
        let mut checked = 0;
        for _ in 0..4 {
            let mut next = Vec::new();
            for s in &spellings {
                for p in pieces {
                    for sep in ["/", "//"] {
                        let t = if s.is_empty() {
                            p.to_owned()
                        } else {
                            format!("{s}{sep}{p}")
                        };
                        for cand in [t.clone(), format!("{t}/"), format!("/{t}")] {
                            let got = RelPath::parse(&cand).ok().map(|r| r.as_str().to_owned());
                            assert_eq!(got, reference(&cand), "{cand:?}");
                            checked += 1;
                        }
                        next.push(t);
                    }
                }
            }
            spellings = next;
        }
        assert!(checked > 10_000, "{checked}");
    }

    #[test]
    fn rejects_escapes() {
        for s in [
            "",
            "..",
            "a/..",
            "../x",
            "/x",
            "//x",
            "a\0b",
            "a/b/../../..",
        ] {
            let err = RelPath::parse(s).unwrap_err();
            assert_eq!(err.code(), "PATH_ESCAPE", "{s:?}");
        }
    }

    #[test]
    fn length_limits() {
        assert!(RelPath::parse(&"a".repeat(255)).is_ok());
        assert_eq!(
            RelPath::parse(&"a".repeat(256)).unwrap_err().code(),
            "PATH_ESCAPE"
        );
        let long = vec!["abcd"; 1000].join("/"); // 4999 bytes
        assert_eq!(RelPath::parse(&long).unwrap_err().code(), "PATH_ESCAPE");
    }

    #[test]
    fn parent_file_name_join() {
        let root = RelPath::root();
        assert!(root.is_root());
        assert_eq!(root.parent(), None);
        assert_eq!(root.file_name(), None);
        let a = root.join("a").unwrap();
        assert_eq!(a.as_str(), "a");
        assert_eq!(a.parent(), Some(RelPath::root()));
        let ab = a.join("b.txt").unwrap();
        assert_eq!(ab.as_str(), "a/b.txt");
        assert_eq!(ab.file_name(), Some("b.txt"));
        assert_eq!(ab.parent().unwrap().as_str(), "a");
        assert_eq!(ab.components().collect::<Vec<_>>(), vec!["a", "b.txt"]);
        assert_eq!(root.components().count(), 0);
        for bad in ["", ".", "..", "x/y", "a\0"] {
            assert_eq!(a.join(bad).unwrap_err().code(), "PATH_ESCAPE", "{bad:?}");
        }
    }
}
