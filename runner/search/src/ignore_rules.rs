//! Ignore rules over a listing: which workspace-relative paths a search skips by default.
//!
//! The rules are ripgrep's defaults, evaluated against paths the caller already listed instead of
//! during a walk: hidden entries (a name starting with `.`) are skipped, and so is whatever a
//! `.ignore`, `.gitignore` or `.git/info/exclude` file excludes. As in ripgrep, a deeper file
//! overrides a shallower one, `.ignore` overrides `.gitignore` which overrides the repository's
//! `exclude`, a `.gitignore` does not reach into a nested repository (a directory holding `.git`),
//! and everything beneath a skipped directory is skipped (a negation cannot bring it back).
//! Unlike ripgrep, `.gitignore` files apply whether or not the tree is a git repository, and no
//! global or user-level excludes are read (they belong to the server's user, not the workspace).
//!
//! The ignore files' contents are supplied by the caller (read beneath the workspace root without
//! following symlinks); the pattern matching is the `ignore` crate's gitignore matcher.

use ignore::Match;
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use std::collections::{HashMap, HashSet};

/// Which kind of ignore file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IgnoreFileKind {
    /// `.ignore` (highest precedence).
    Ignore,
    /// `.gitignore`.
    Gitignore,
    /// `.git/info/exclude` of a repository (lowest).
    Exclude,
}

impl IgnoreFileKind {
    /// The kind of an ignore file, from its workspace-relative path, with the directory it governs.
    pub fn classify(path: &str) -> Option<(IgnoreFileKind, &str)> {
        let (dir, name) = match path.rsplit_once('/') {
            Some((d, n)) => (d, n),
            None => ("", path),
        };
        match name {
            ".ignore" => Some((IgnoreFileKind::Ignore, dir)),
            ".gitignore" => Some((IgnoreFileKind::Gitignore, dir)),
            "exclude" => {
                let repo = if dir == ".git/info" {
                    Some("")
                } else {
                    dir.strip_suffix("/.git/info")
                };
                repo.map(|r| (IgnoreFileKind::Exclude, r))
            }
            _ => None,
        }
    }
}

/// One ignore file's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IgnoreFile {
    /// The kind.
    pub kind: IgnoreFileKind,
    /// The directory it governs, workspace-relative (`""` for the root).
    pub dir: String,
    /// Its content.
    pub content: Vec<u8>,
}

/// The compiled rules of one workspace listing.
#[derive(Debug, Default)]
pub struct IgnoreRules {
    /// Matchers per directory, by kind.
    by_dir: HashMap<String, Vec<(IgnoreFileKind, Gitignore)>>,
    /// Directories that hold a `.git` entry (nested repository roots).
    repos: HashSet<String>,
}

/// What to skip.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IgnoreSelector {
    /// Skip hidden entries.
    pub hidden: bool,
    /// Skip what ignore files exclude.
    pub ignored: bool,
}

fn parent(path: &str) -> Option<&str> {
    match path.rsplit_once('/') {
        Some((d, _)) => Some(d),
        None if path.is_empty() => None,
        None => Some(""),
    }
}

impl IgnoreRules {
    /// Compiles `files`; `git_dirs` are the directories that contain a `.git` entry. A line that
    /// does not compile is ignored, as git does.
    pub fn build(files: &[IgnoreFile], git_dirs: impl IntoIterator<Item = String>) -> IgnoreRules {
        let mut by_dir: HashMap<String, Vec<(IgnoreFileKind, Gitignore)>> = HashMap::new();
        for f in files {
            let mut b = GitignoreBuilder::new(".");
            for line in String::from_utf8_lossy(&f.content).lines() {
                let _ = b.add_line(None, line);
            }
            if let Ok(gi) = b.build()
                && !gi.is_empty()
            {
                by_dir.entry(f.dir.clone()).or_default().push((f.kind, gi));
            }
        }
        for v in by_dir.values_mut() {
            v.sort_by_key(|(k, _)| *k);
        }
        IgnoreRules {
            by_dir,
            repos: git_dirs.into_iter().collect(),
        }
    }

    /// A memoizing filter over these rules.
    pub fn filter(&self, select: IgnoreSelector) -> IgnoreFilter<'_> {
        IgnoreFilter {
            rules: self,
            select,
            dirs: HashMap::new(),
        }
    }

    /// The decision of the ignore files alone for `path` (its ancestors are not consulted).
    fn matched(&self, path: &str, is_dir: bool) -> bool {
        let mut best: [Option<bool>; 3] = [None, None, None];
        let mut dir = parent(path);
        let mut in_nested_repo_above = false;
        while let Some(d) = dir {
            if let Some(list) = self.by_dir.get(d) {
                let rel = if d.is_empty() {
                    path
                } else {
                    path.get(d.len() + 1..).unwrap_or(path)
                };
                for (kind, gi) in list {
                    let slot = match kind {
                        IgnoreFileKind::Ignore => 0,
                        IgnoreFileKind::Gitignore => 1,
                        IgnoreFileKind::Exclude => 2,
                    };
                    // Git rules stop at the nearest repository root.
                    if *kind != IgnoreFileKind::Ignore && in_nested_repo_above {
                        continue;
                    }
                    if best.get(slot).is_some_and(Option::is_some) {
                        continue;
                    }
                    let decided = match gi.matched(rel, is_dir) {
                        Match::Ignore(_) => Some(true),
                        Match::Whitelist(_) => Some(false),
                        Match::None => None,
                    };
                    if let Some(cell) = best.get_mut(slot) {
                        *cell = decided;
                    }
                }
            }
            if self.repos.contains(d) {
                in_nested_repo_above = true;
            }
            dir = parent(d);
        }
        best.into_iter().flatten().next().unwrap_or(false)
    }
}

/// Decides paths one by one, remembering directory decisions.
#[derive(Debug)]
pub struct IgnoreFilter<'a> {
    rules: &'a IgnoreRules,
    select: IgnoreSelector,
    dirs: HashMap<String, bool>,
}

impl IgnoreFilter<'_> {
    /// Treats the directory `dir` and its ancestors as kept: a search rooted at a directory the
    /// caller named explicitly looks inside it even when it is hidden or ignored (as ripgrep does
    /// for a path on its command line). Entries beneath it are still judged.
    pub fn assume_kept(&mut self, dir: &str) {
        let mut cur = Some(dir);
        while let Some(d) = cur {
            if d.is_empty() {
                break;
            }
            self.dirs.insert(d.to_string(), false);
            cur = parent(d);
        }
    }

    /// True when `path` (a directory when `is_dir`) is skipped: it is hidden or ignored, or lies
    /// beneath a directory that is.
    pub fn is_skipped(&mut self, path: &str, is_dir: bool) -> bool {
        if !self.select.hidden && !self.select.ignored {
            return false;
        }
        if let Some(p) = parent(path)
            && !p.is_empty()
            && self.dir_skipped(p)
        {
            return true;
        }
        self.own(path, is_dir)
    }

    fn own(&self, path: &str, is_dir: bool) -> bool {
        let name = path.rsplit('/').next().unwrap_or(path);
        if self.select.hidden && name.starts_with('.') {
            return true;
        }
        self.select.ignored && self.rules.matched(path, is_dir)
    }

    fn dir_skipped(&mut self, dir: &str) -> bool {
        if let Some(v) = self.dirs.get(dir) {
            return *v;
        }
        // Walk up to the nearest known ancestor, then decide downwards.
        let mut chain: Vec<&str> = vec![dir];
        let mut cur = dir;
        let mut known = false;
        while let Some(p) = parent(cur) {
            if p.is_empty() {
                break;
            }
            if let Some(v) = self.dirs.get(p) {
                known = *v;
                break;
            }
            chain.push(p);
            cur = p;
        }
        let mut skipped = known;
        for d in chain.into_iter().rev() {
            skipped = skipped || self.own(d, true);
            self.dirs.insert(d.to_string(), skipped);
        }
        skipped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(files: &[(&str, &str)], git: &[&str]) -> IgnoreRules {
        let files: Vec<IgnoreFile> = files
            .iter()
            .map(|(p, c)| {
                let (kind, dir) = IgnoreFileKind::classify(p).unwrap();
                IgnoreFile {
                    kind,
                    dir: dir.to_string(),
                    content: c.as_bytes().to_vec(),
                }
            })
            .collect();
        IgnoreRules::build(&files, git.iter().map(|s| s.to_string()))
    }

    const ALL: IgnoreSelector = IgnoreSelector {
        hidden: true,
        ignored: true,
    };

    #[test]
    fn classify_names() {
        assert_eq!(
            IgnoreFileKind::classify(".gitignore"),
            Some((IgnoreFileKind::Gitignore, ""))
        );
        assert_eq!(
            IgnoreFileKind::classify("a/b/.ignore"),
            Some((IgnoreFileKind::Ignore, "a/b"))
        );
        assert_eq!(
            IgnoreFileKind::classify(".git/info/exclude"),
            Some((IgnoreFileKind::Exclude, ""))
        );
        assert_eq!(
            IgnoreFileKind::classify("v/.git/info/exclude"),
            Some((IgnoreFileKind::Exclude, "v"))
        );
        assert_eq!(IgnoreFileKind::classify("a/exclude"), None);
    }

    #[test]
    fn gitignore_hidden_and_directories() {
        let r = rules(&[(".gitignore", "target/\n*.log\n!keep.log\n")], &[]);
        let mut f = r.filter(ALL);
        assert!(f.is_skipped("target", true));
        assert!(f.is_skipped("target/debug/x", false));
        assert!(f.is_skipped("a/b.log", false));
        assert!(!f.is_skipped("a/keep.log", false));
        assert!(f.is_skipped(".hidden", false));
        assert!(f.is_skipped(".github/workflows/ci.yml", false));
        assert!(!f.is_skipped("src/main.rs", false));
        // `target/` names directories only.
        assert!(!f.is_skipped("src/target", false));
        let mut named = r.filter(ALL);
        named.assume_kept(".github");
        assert!(!named.is_skipped(".github/workflows/ci.yml", false));
        assert!(named.is_skipped(".github/.secret", false));
        let mut none = r.filter(IgnoreSelector {
            hidden: false,
            ignored: false,
        });
        assert!(!none.is_skipped("target/debug/x", false));
    }

    #[test]
    fn deeper_files_and_dot_ignore_take_precedence() {
        let r = rules(
            &[
                (".gitignore", "*.gen\n"),
                ("sub/.gitignore", "!keep.gen\n"),
                ("sub/.ignore", "secret.txt\n"),
                (".git/info/exclude", "local.txt\n"),
            ],
            &[""],
        );
        let mut f = r.filter(ALL);
        assert!(f.is_skipped("a.gen", false));
        assert!(!f.is_skipped("sub/keep.gen", false));
        assert!(f.is_skipped("sub/other.gen", false));
        assert!(f.is_skipped("sub/secret.txt", false));
        assert!(f.is_skipped("x/local.txt", false));
        assert!(!f.is_skipped("secret.txt", false));
    }

    #[test]
    fn a_negation_cannot_reach_into_an_ignored_directory() {
        let r = rules(
            &[(".gitignore", "build/\n"), ("build/.gitignore", "!x\n")],
            &[],
        );
        let mut f = r.filter(ALL);
        assert!(f.is_skipped("build/x", false));
    }

    #[test]
    fn gitignore_stops_at_a_nested_repository() {
        let r = rules(
            &[(".gitignore", "*.o\n"), (".ignore", "*.tmp\n")],
            &["", "vendor/lib"],
        );
        let mut f = r.filter(IgnoreSelector {
            hidden: false,
            ignored: true,
        });
        assert!(f.is_skipped("a.o", false));
        assert!(!f.is_skipped("vendor/lib/a.o", false));
        // `.ignore` is not a git file: it still applies.
        assert!(f.is_skipped("vendor/lib/a.tmp", false));
    }
}
