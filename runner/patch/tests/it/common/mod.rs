//! Test support: an in-memory file tree that answers planner lookups and applies plans.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::path::Path;

use codespace_runner_patch::{FileState, Plan, PlanError, PlannedChange, parse, plan};

/// Mode given to files loaded from disk or created by Add.
pub const DEFAULT_MODE: u32 = 0o644;

/// A flat map of relative path → (bytes, mode); directories are implied by file paths, plus
/// explicit non-file entries (symlinks, special files).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemFs {
    pub files: BTreeMap<String, (Vec<u8>, u32)>,
    pub others: BTreeMap<String, FileState>,
}

impl MemFs {
    pub fn from_files(files: &[(&str, &[u8])]) -> Self {
        MemFs {
            files: files
                .iter()
                .map(|(p, d)| (p.to_string(), (d.to_vec(), DEFAULT_MODE)))
                .collect(),
            others: BTreeMap::new(),
        }
    }

    pub fn from_tree(tree: &BTreeMap<String, Vec<u8>>) -> Self {
        MemFs {
            files: tree
                .iter()
                .map(|(p, d)| (p.clone(), (d.clone(), DEFAULT_MODE)))
                .collect(),
            others: BTreeMap::new(),
        }
    }

    pub fn lookup(&self, path: &str) -> Result<FileState, Infallible> {
        if let Some((data, mode)) = self.files.get(path) {
            return Ok(FileState::File {
                data: data.clone(),
                mode: *mode,
            });
        }
        if let Some(state) = self.others.get(path) {
            return Ok(state.clone());
        }
        let prefix = format!("{path}/");
        if self.files.keys().any(|k| k.starts_with(&prefix)) {
            return Ok(FileState::Directory);
        }
        Ok(FileState::Absent)
    }

    pub fn apply(&mut self, plan: &Plan) {
        for change in &plan.changes {
            match change {
                PlannedChange::Add { path, new } => {
                    self.files.insert(path.clone(), (new.clone(), DEFAULT_MODE));
                }
                PlannedChange::Update {
                    path, new, mode, ..
                } => {
                    self.files.insert(path.clone(), (new.clone(), *mode));
                }
                PlannedChange::Delete { path, .. } => {
                    self.files.remove(path);
                }
                PlannedChange::Move {
                    from,
                    to,
                    new,
                    mode,
                    ..
                } => {
                    self.files.remove(from);
                    self.files.insert(to.clone(), (new.clone(), *mode));
                }
            }
        }
    }

    /// Parses and plans `patch`; on success applies it. Returns the error code on failure.
    pub fn run(&mut self, patch: &str) -> Result<(), (String, String)> {
        let parsed = parse(patch).map_err(|e| {
            let e: PlanError<Infallible> = e.into();
            (e.code().to_string(), e.to_string())
        })?;
        let planned =
            plan(&parsed, |p| self.lookup(p)).map_err(|e| (e.code().to_string(), e.to_string()))?;
        self.apply(&planned);
        Ok(())
    }

    pub fn tree(&self) -> BTreeMap<String, Vec<u8>> {
        self.files
            .iter()
            .map(|(p, (d, _))| (p.clone(), d.clone()))
            .collect()
    }

    pub fn text(&self, path: &str) -> String {
        String::from_utf8(self.files[path].0.clone()).unwrap()
    }
}

/// Every regular file under `root`, keyed by its '/'-separated relative path. A missing root is
/// an empty tree.
pub fn load_tree(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    if root.exists() {
        walk(root, root, &mut out);
    }
    out
}

fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            walk(root, &path, out);
        } else {
            let rel = path.strip_prefix(root).unwrap();
            let key = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            out.insert(key, std::fs::read(&path).unwrap());
        }
    }
}
