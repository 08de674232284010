//! Shared fixtures for the integration tests: a temp dir holding a workspace root and an outside sibling.
#![allow(dead_code)]

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use codespace_runner_fs::{RelPath, Root};

/// Content of files planted outside the root; must never come back from a read.
pub const MARKER: &[u8] = b"OUTSIDE-MARKER-7f3a9c2e-never-read-me";

/// A temp dir with `root/` (the workspace) and `outside/` (a sibling holding marker files).
pub struct Fixture {
    pub tmp: tempfile::TempDir,
    pub root_path: PathBuf,
    pub outside: PathBuf,
}

impl Fixture {
    pub fn new() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let root_path = tmp.path().join("root");
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&root_path).unwrap();
        std::fs::create_dir_all(outside.join("etc")).unwrap();
        std::fs::write(outside.join("secret"), MARKER).unwrap();
        std::fs::write(outside.join("file"), MARKER).unwrap();
        std::fs::write(outside.join("etc/passwd"), MARKER).unwrap();
        Fixture {
            tmp,
            root_path,
            outside,
        }
    }

    pub fn root(&self) -> Root {
        Root::open(&self.root_path).unwrap()
    }

    pub fn abs(&self, rel: &str) -> PathBuf {
        self.root_path.join(rel)
    }

    pub fn write(&self, rel: &str, data: &[u8]) {
        let p = self.abs(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(p, data).unwrap();
    }

    pub fn mkdir(&self, rel: &str) {
        std::fs::create_dir_all(self.abs(rel)).unwrap();
    }

    pub fn symlink(&self, rel: &str, target: impl AsRef<Path>) {
        symlink(target, self.abs(rel)).unwrap();
    }

    /// Names of the entries of the outside directory (to prove nothing was created there).
    pub fn outside_listing(&self) -> Vec<String> {
        let mut names: Vec<String> = walk_names(&self.outside);
        names.sort();
        names
    }
}

fn walk_names(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        out.push(e.path().display().to_string());
        if e.file_type().unwrap().is_dir() {
            out.extend(walk_names(&e.path()));
        }
    }
    out
}

pub fn rel(s: &str) -> RelPath {
    RelPath::parse(s).unwrap()
}
