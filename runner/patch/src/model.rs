//! Data model of a parsed V4A patch: hunks, chunks and the paths they touch.

/// A parsed patch: its hunks, in patch order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Patch {
    /// The file operations, in the order they appear in the patch text.
    pub hunks: Vec<Hunk>,
}

/// One file operation of a patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hunk {
    /// `*** Add File: path` followed by `+` lines.
    Add {
        /// Path of the file to create, as spelled in the patch.
        path: String,
        /// The new file's text: every `+` line without its `+`, each followed by `\n`.
        contents: String,
    },
    /// `*** Delete File: path`.
    Delete {
        /// Path of the file to remove, as spelled in the patch.
        path: String,
    },
    /// A whole-file change with exact bytes (the `write_file` tool; no V4A text spells it):
    /// the file's new content is `data` (replace), its old content followed by `data` (append),
    /// or `data` in a file that must not exist yet (create). No line ending is added or changed.
    Write {
        /// Path of the file, as given.
        path: String,
        /// The bytes to write or append.
        data: Vec<u8>,
        /// Replace, append or create.
        mode: WriteMode,
    },
    /// `*** Update File: path`, optionally `*** Move to: dest`, then chunks.
    Update {
        /// Path of the file to change, as spelled in the patch.
        path: String,
        /// Destination of a rename, when the hunk has a `*** Move to:` line.
        move_to: Option<String>,
        /// The edits, in file order. Empty only for a pure rename.
        chunks: Vec<Chunk>,
    },
}

/// One edit of an Update hunk: lines to find and what replaces them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Chunk {
    /// The `@@ <context>` line text, located before the chunk's lines are searched.
    pub context: Option<String>,
    /// Context (` `) and removed (`-`) lines, in order: the text to find.
    pub old_lines: Vec<String>,
    /// Context (` `) and added (`+`) lines, in order: the replacement.
    pub new_lines: Vec<String>,
    /// The chunk was followed by `*** End of File`: it is anchored at the end of the file.
    pub is_end_of_file: bool,
}

/// How a [`Hunk::Write`] changes its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WriteMode {
    /// The existing file's bytes become exactly the data (the file must exist).
    Replace,
    /// The data is added after the existing file's last byte (the file must exist).
    Append,
    /// A new file holding exactly the data (nothing may exist at the path).
    Create,
}

/// How a hunk touches one path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TouchKind {
    /// The path is created by an Add hunk.
    Add,
    /// The path is changed in place by an Update hunk.
    Update,
    /// The path is removed by a Delete hunk.
    Delete,
    /// The path is the source of an Update hunk with `*** Move to:`.
    MoveFrom,
    /// The path is the destination of an Update hunk with `*** Move to:`.
    MoveTo,
}

impl Hunk {
    /// The path named in the hunk header (for a move, the source).
    pub fn path(&self) -> &str {
        match self {
            Hunk::Add { path, .. }
            | Hunk::Delete { path }
            | Hunk::Update { path, .. }
            | Hunk::Write { path, .. } => path,
        }
    }
}

impl Patch {
    /// Every path the patch touches, in patch order; a move yields its source then its destination.
    pub fn touched_paths(&self) -> Vec<(String, TouchKind)> {
        let mut out = Vec::with_capacity(self.hunks.len());
        for hunk in &self.hunks {
            match hunk {
                Hunk::Add { path, .. } => out.push((path.clone(), TouchKind::Add)),
                Hunk::Delete { path } => out.push((path.clone(), TouchKind::Delete)),
                Hunk::Write {
                    path,
                    mode: WriteMode::Create,
                    ..
                } => out.push((path.clone(), TouchKind::Add)),
                Hunk::Write { path, .. } => out.push((path.clone(), TouchKind::Update)),
                Hunk::Update {
                    path,
                    move_to: None,
                    ..
                } => out.push((path.clone(), TouchKind::Update)),
                Hunk::Update {
                    path,
                    move_to: Some(dest),
                    ..
                } => {
                    out.push((path.clone(), TouchKind::MoveFrom));
                    out.push((dest.clone(), TouchKind::MoveTo));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn touched_paths_lists_every_path_in_patch_order() {
        let patch = Patch {
            hunks: vec![
                Hunk::Delete { path: "d".into() },
                Hunk::Update {
                    path: "m".into(),
                    move_to: Some("n".into()),
                    chunks: vec![],
                },
                Hunk::Add {
                    path: "a".into(),
                    contents: String::new(),
                },
                Hunk::Update {
                    path: "u".into(),
                    move_to: None,
                    chunks: vec![Chunk::default()],
                },
            ],
        };
        assert_eq!(
            patch.touched_paths(),
            vec![
                ("d".to_string(), TouchKind::Delete),
                ("m".to_string(), TouchKind::MoveFrom),
                ("n".to_string(), TouchKind::MoveTo),
                ("a".to_string(), TouchKind::Add),
                ("u".to_string(), TouchKind::Update),
            ]
        );
        assert_eq!(patch.hunks.get(1).map(Hunk::path), Some("m"));
    }
}
