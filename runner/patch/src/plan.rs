//! The pure planner: checks a whole patch against caller-supplied file states and computes every
//! resulting file before anything is written.

use crate::conflicts;
use crate::error::PlanError;
use crate::model::{Hunk, Patch, WriteMode};
use crate::quote::quote;
use crate::update;

/// What the planner sees of one path (the caller reads disk; the planner is pure).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileState {
    /// Nothing exists at the path.
    Absent,
    /// A regular file with its bytes and permission bits.
    File {
        /// The file's current contents.
        data: Vec<u8>,
        /// The file's mode bits (kept by Update and Move).
        mode: u32,
    },
    /// A directory.
    Directory,
    /// A symbolic link (never followed).
    Symlink,
    /// Anything else: device, fifo, socket, …
    Special,
}

/// The computed effect of a whole patch, one change per hunk in patch order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The changes, in patch order.
    pub changes: Vec<PlannedChange>,
}

/// The effect of one hunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlannedChange {
    /// Create `path` with `new` (the caller picks the mode of new files).
    Add {
        /// Path as spelled in the patch.
        path: String,
        /// Contents of the new file.
        new: Vec<u8>,
    },
    /// Rewrite `path` in place.
    Update {
        /// Path as spelled in the patch.
        path: String,
        /// Contents seen by the planner.
        old: Vec<u8>,
        /// Contents to write.
        new: Vec<u8>,
        /// Mode of the existing file, to keep.
        mode: u32,
    },
    /// Remove `path`.
    Delete {
        /// Path as spelled in the patch.
        path: String,
        /// Contents seen by the planner.
        old: Vec<u8>,
        /// Mode of the removed file.
        mode: u32,
    },
    /// Write `to` with `new` and remove `from`; the file keeps its mode.
    Move {
        /// Source path as spelled in the patch.
        from: String,
        /// Destination path as spelled in the patch.
        to: String,
        /// Contents of the source seen by the planner.
        old: Vec<u8>,
        /// Contents to write at the destination.
        new: Vec<u8>,
        /// Mode of the source file, given to the destination.
        mode: u32,
    },
}

/// An existing regular file found by a lookup.
struct Existing {
    data: Vec<u8>,
    mode: u32,
}

/// Plans `patch`: looks up every touched path (each exactly once, in patch order), applies the
/// checks, then computes every new file. Nothing here touches the file system.
///
/// Rules (stricter than Codex on purpose): Add onto any existing path is `AddFileExists`; a
/// Move onto any existing path is `MoveDestinationExists`; Update or Delete of an absent path is
/// `FileNotFound`; a directory to update or delete is `InvalidPatch`; symlinks and special files
/// are rejected wherever they appear. All lookups and checks run before any content is computed,
/// so the first failing hunk in patch order determines the error.
pub fn plan<E>(
    patch: &Patch,
    mut lookup: impl FnMut(&str) -> Result<FileState, E>,
) -> Result<Plan, PlanError<E>> {
    if let Some(message) = conflicts::check(patch) {
        return Err(PlanError::InvalidPatch(message));
    }
    let mut sources: Vec<Option<Existing>> = Vec::with_capacity(patch.hunks.len());
    for hunk in &patch.hunks {
        let source = match hunk {
            Hunk::Write {
                path,
                mode: WriteMode::Create,
                ..
            }
            | Hunk::Add { path, .. } => {
                must_be_free(path, lookup(path).map_err(PlanError::Lookup)?, || {
                    PlanError::AddFileExists(path.clone())
                })?;
                None
            }
            Hunk::Delete { path } | Hunk::Write { path, .. } => {
                Some(must_exist(path, lookup(path).map_err(PlanError::Lookup)?)?)
            }
            Hunk::Update { path, move_to, .. } => {
                let existing = must_exist(path, lookup(path).map_err(PlanError::Lookup)?)?;
                if let Some(dest) = move_to {
                    must_be_free(dest, lookup(dest).map_err(PlanError::Lookup)?, || {
                        PlanError::MoveDestinationExists(dest.clone())
                    })?;
                }
                Some(existing)
            }
        };
        sources.push(source);
    }
    let mut changes = Vec::with_capacity(patch.hunks.len());
    for (hunk, source) in patch.hunks.iter().zip(sources) {
        changes.push(change(hunk, source)?);
    }
    Ok(Plan { changes })
}

/// The planned change of one hunk whose lookups passed.
fn change<E>(hunk: &Hunk, source: Option<Existing>) -> Result<PlannedChange, PlanError<E>> {
    let (path, source) = match (hunk, source) {
        (Hunk::Add { path, contents }, _) => {
            return Ok(PlannedChange::Add {
                path: path.clone(),
                new: contents.as_bytes().to_vec(),
            });
        }
        (
            Hunk::Write {
                path,
                data,
                mode: WriteMode::Create,
            },
            _,
        ) => {
            return Ok(PlannedChange::Add {
                path: path.clone(),
                new: data.clone(),
            });
        }
        (hunk, Some(source)) => (hunk.path(), source),
        (hunk, None) => {
            return Err(PlanError::FileNotFound(hunk.path().to_string()));
        }
    };
    let Existing { data, mode } = source;
    match hunk {
        Hunk::Write {
            data: bytes,
            mode: how,
            ..
        } => {
            let new = match how {
                WriteMode::Append => {
                    let mut all = Vec::with_capacity(data.len().saturating_add(bytes.len()));
                    all.extend_from_slice(&data);
                    all.extend_from_slice(bytes);
                    all
                }
                WriteMode::Replace | WriteMode::Create => bytes.clone(),
            };
            Ok(PlannedChange::Update {
                path: path.to_string(),
                old: data,
                new,
                mode,
            })
        }
        Hunk::Update {
            move_to, chunks, ..
        } => {
            let new = if chunks.is_empty() {
                data.clone()
            } else {
                let text = std::str::from_utf8(&data).map_err(|_| {
                    PlanError::InvalidPatch(format!(
                        "{} is not valid UTF-8 text, so its lines cannot be matched",
                        quote(path)
                    ))
                })?;
                update::apply(path, text, chunks).map_err(PlanError::InvalidPatch)?
            };
            Ok(match move_to {
                Some(to) => PlannedChange::Move {
                    from: path.to_string(),
                    to: to.clone(),
                    old: data,
                    new,
                    mode,
                },
                None => PlannedChange::Update {
                    path: path.to_string(),
                    old: data,
                    new,
                    mode,
                },
            })
        }
        _ => Ok(PlannedChange::Delete {
            path: path.to_string(),
            old: data,
            mode,
        }),
    }
}

/// Requires a regular file at `path` (Update source, Delete target).
fn must_exist<E>(path: &str, state: FileState) -> Result<Existing, PlanError<E>> {
    match state {
        FileState::File { data, mode } => Ok(Existing { data, mode }),
        FileState::Absent => Err(PlanError::FileNotFound(path.to_string())),
        FileState::Directory => Err(PlanError::InvalidPatch(format!(
            "{} is a directory, not a file",
            quote(path)
        ))),
        FileState::Symlink => Err(PlanError::SymlinkRejected(path.to_string())),
        FileState::Special => Err(PlanError::SpecialFileRejected(path.to_string())),
    }
}

/// Requires nothing at `path` (Add target, Move destination); `exists` builds the error for an
/// existing file or directory.
fn must_be_free<E>(
    path: &str,
    state: FileState,
    exists: impl FnOnce() -> PlanError<E>,
) -> Result<(), PlanError<E>> {
    match state {
        FileState::Absent => Ok(()),
        FileState::File { .. } | FileState::Directory => Err(exists()),
        FileState::Symlink => Err(PlanError::SymlinkRejected(path.to_string())),
        FileState::Special => Err(PlanError::SpecialFileRejected(path.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse;
    use std::collections::HashMap;

    fn states(entries: &[(&str, FileState)]) -> HashMap<String, FileState> {
        entries
            .iter()
            .map(|(p, s)| (p.to_string(), s.clone()))
            .collect()
    }

    fn file(data: &str) -> FileState {
        FileState::File {
            data: data.as_bytes().to_vec(),
            mode: 0o644,
        }
    }

    fn run(body: &str, fs: &HashMap<String, FileState>) -> Result<Plan, PlanError<String>> {
        let patch = parse(&format!("*** Begin Patch\n{body}\n*** End Patch")).unwrap();
        plan(&patch, |p| {
            Ok(fs.get(p).cloned().unwrap_or(FileState::Absent))
        })
    }

    #[test]
    fn plans_every_kind_in_patch_order() {
        let fs = states(&[
            ("u", file("a\n")),
            ("d", file("gone\n")),
            (
                "m",
                FileState::File {
                    data: b"x\n".to_vec(),
                    mode: 0o755,
                },
            ),
        ]);
        let plan = run(
            "*** Add File: n\n+hi\n*** Update File: u\n-a\n+b\n*** Delete File: d\n*** Update File: m\n*** Move to: m2\n-x\n+y",
            &fs,
        )
        .unwrap();
        assert_eq!(
            plan.changes,
            vec![
                PlannedChange::Add {
                    path: "n".into(),
                    new: b"hi\n".to_vec()
                },
                PlannedChange::Update {
                    path: "u".into(),
                    old: b"a\n".to_vec(),
                    new: b"b\n".to_vec(),
                    mode: 0o644
                },
                PlannedChange::Delete {
                    path: "d".into(),
                    old: b"gone\n".to_vec(),
                    mode: 0o644
                },
                PlannedChange::Move {
                    from: "m".into(),
                    to: "m2".into(),
                    old: b"x\n".to_vec(),
                    new: b"y\n".to_vec(),
                    mode: 0o755
                },
            ]
        );
    }

    #[test]
    fn each_path_is_looked_up_once_in_order() {
        let patch = parse("*** Begin Patch\n*** Add File: a\n+1\n*** Update File: b\n*** Move to: c\n-x\n+y\n*** Delete File: d\n*** End Patch").unwrap();
        let mut seen = Vec::new();
        let _ = plan(&patch, |p| {
            seen.push(p.to_string());
            Ok::<_, String>(if p == "a" || p == "c" {
                FileState::Absent
            } else {
                file("x\n")
            })
        })
        .unwrap();
        assert_eq!(seen, vec!["a", "b", "c", "d"]);
    }

    #[test]
    fn lookup_error_is_passed_through() {
        let patch = parse("*** Begin Patch\n*** Delete File: a\n*** End Patch").unwrap();
        let err = plan(&patch, |_| Err::<FileState, _>("disk on fire")).unwrap_err();
        assert!(matches!(err, PlanError::Lookup("disk on fire")));
    }

    #[test]
    fn add_onto_existing_file_or_directory() {
        for state in [file("x"), FileState::Directory] {
            let fs = states(&[("a", state)]);
            let err = run("*** Add File: a\n+1", &fs).unwrap_err();
            assert_eq!(err.code(), "ADD_FILE_EXISTS");
        }
    }

    #[test]
    fn move_onto_existing_path() {
        let fs = states(&[("a", file("x\n")), ("b", file("y\n"))]);
        let err = run("*** Update File: a\n*** Move to: b\n-x\n+z", &fs).unwrap_err();
        assert_eq!(err.code(), "MOVE_DESTINATION_EXISTS");
        assert_eq!(
            err.to_string(),
            "cannot move to 'b': the destination already exists"
        );
    }

    #[test]
    fn update_or_delete_of_absent_path() {
        let fs = states(&[]);
        assert_eq!(
            run("*** Delete File: a", &fs).unwrap_err().code(),
            "FILE_NOT_FOUND"
        );
        assert_eq!(
            run("*** Update File: a\n-x\n+y", &fs).unwrap_err().code(),
            "FILE_NOT_FOUND"
        );
    }

    #[test]
    fn delete_of_directory_is_invalid() {
        let fs = states(&[("dir", FileState::Directory)]);
        let err = run("*** Delete File: dir", &fs).unwrap_err();
        assert_eq!(err.code(), "INVALID_PATCH");
        assert!(err.to_string().contains("'dir' is a directory"), "{err}");
    }

    #[test]
    fn symlinks_and_special_files_are_rejected_everywhere() {
        for (state, code) in [
            (FileState::Symlink, "SYMLINK_REJECTED"),
            (FileState::Special, "SPECIAL_FILE_REJECTED"),
        ] {
            let fs = states(&[("s", state), ("f", file("x\n"))]);
            for body in [
                "*** Add File: s\n+1",
                "*** Delete File: s",
                "*** Update File: s\n-x\n+y",
                "*** Update File: f\n*** Move to: s\n-x\n+y",
            ] {
                assert_eq!(run(body, &fs).unwrap_err().code(), code, "{body}");
            }
        }
    }

    #[test]
    fn non_utf8_update_is_invalid_but_delete_and_rename_work() {
        let bytes = FileState::File {
            data: vec![0xff, 0xfe, b'\n'],
            mode: 0o600,
        };
        let fs = states(&[("bin", bytes)]);
        let err = run("*** Update File: bin\n-x\n+y", &fs).unwrap_err();
        assert_eq!(err.code(), "INVALID_PATCH");
        assert!(err.to_string().contains("not valid UTF-8"), "{err}");
        assert!(run("*** Delete File: bin", &fs).is_ok());
        let plan = run("*** Update File: bin\n*** Move to: bin2", &fs).unwrap();
        assert_eq!(
            plan.changes,
            vec![PlannedChange::Move {
                from: "bin".into(),
                to: "bin2".into(),
                old: vec![0xff, 0xfe, b'\n'],
                new: vec![0xff, 0xfe, b'\n'],
                mode: 0o600
            }]
        );
    }

    #[test]
    fn lookup_failures_win_over_later_content_errors() {
        // Hunk 1 has a context mismatch, hunk 2 a missing file: lookups run first.
        let fs = states(&[("a", file("x\n"))]);
        let err = run(
            "*** Update File: a\n-nope\n+y\n*** Delete File: missing",
            &fs,
        )
        .unwrap_err();
        assert_eq!(err.code(), "FILE_NOT_FOUND");
    }

    #[test]
    fn duplicate_paths_are_invalid_before_any_lookup() {
        let patch = parse("*** Begin Patch\n*** Delete File: a\n*** Delete File: a\n*** End Patch")
            .unwrap();
        let mut calls = 0;
        let err = plan(&patch, |_| {
            calls += 1;
            Ok::<_, String>(FileState::Absent)
        })
        .unwrap_err();
        assert_eq!(err.code(), "INVALID_PATCH");
        assert_eq!(calls, 0);
    }

    #[test]
    fn context_not_found_names_the_path() {
        let fs = states(&[("src/a.rs", file("x\n"))]);
        let err = run("*** Update File: src/a.rs\n-nope\n+y", &fs).unwrap_err();
        assert_eq!(err.code(), "INVALID_PATCH");
        assert!(err.to_string().contains("'src/a.rs'"), "{err}");
        assert!(err.to_string().contains("'nope'"), "{err}");
    }

    fn write(path: &str, data: &[u8], mode: WriteMode) -> Patch {
        Patch {
            hunks: vec![Hunk::Write {
                path: path.into(),
                data: data.to_vec(),
                mode,
            }],
        }
    }

    fn plan_write(p: &Patch, fs: &HashMap<String, FileState>) -> Result<Plan, PlanError<String>> {
        plan(p, |path| {
            Ok(fs.get(path).cloned().unwrap_or(FileState::Absent))
        })
    }

    #[test]
    fn whole_file_writes_keep_exact_bytes_and_the_file_mode() {
        let fs = states(&[(
            "w",
            FileState::File {
                data: b"a\r\nb".to_vec(),
                mode: 0o755,
            },
        )]);
        // No final newline, CR, NUL and non-UTF-8 bytes: written as given.
        let bytes = b"x\r\ny\0\xff";
        let replaced = plan_write(&write("w", bytes, WriteMode::Replace), &fs).unwrap();
        assert_eq!(
            replaced.changes,
            vec![PlannedChange::Update {
                path: "w".into(),
                old: b"a\r\nb".to_vec(),
                new: bytes.to_vec(),
                mode: 0o755,
            }]
        );
        let appended = plan_write(&write("w", b"\rc", WriteMode::Append), &fs).unwrap();
        assert_eq!(
            appended.changes,
            vec![PlannedChange::Update {
                path: "w".into(),
                old: b"a\r\nb".to_vec(),
                new: b"a\r\nb\rc".to_vec(),
                mode: 0o755,
            }]
        );
        let created = plan_write(&write("n", b"", WriteMode::Create), &fs).unwrap();
        assert_eq!(
            created.changes,
            vec![PlannedChange::Add {
                path: "n".into(),
                new: Vec::new(),
            }]
        );
        assert_eq!(
            write("n", b"", WriteMode::Create).touched_paths(),
            vec![("n".to_string(), crate::TouchKind::Add)]
        );
        assert_eq!(
            write("w", b"", WriteMode::Append).touched_paths(),
            vec![("w".to_string(), crate::TouchKind::Update)]
        );
    }

    #[test]
    fn whole_file_writes_refuse_what_their_mode_does_not_allow() {
        let fs = states(&[
            ("w", file("x")),
            ("d", FileState::Directory),
            ("l", FileState::Symlink),
        ]);
        let code = |p: &Patch| plan_write(p, &fs).unwrap_err().code();
        assert_eq!(
            code(&write("w", b"y", WriteMode::Create)),
            "ADD_FILE_EXISTS"
        );
        assert_eq!(
            code(&write("d", b"y", WriteMode::Create)),
            "ADD_FILE_EXISTS"
        );
        assert_eq!(
            code(&write("gone", b"y", WriteMode::Replace)),
            "FILE_NOT_FOUND"
        );
        assert_eq!(
            code(&write("gone", b"y", WriteMode::Append)),
            "FILE_NOT_FOUND"
        );
        assert_eq!(code(&write("d", b"y", WriteMode::Replace)), "INVALID_PATCH");
        assert_eq!(
            code(&write("l", b"y", WriteMode::Append)),
            "SYMLINK_REJECTED"
        );
    }
}
