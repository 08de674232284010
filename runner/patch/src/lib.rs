//! V4A patch parsing and planning (pure).
//!
//! [`parse`] turns `apply_patch` ("V4A") text into a [`Patch`]; [`plan`] checks the whole patch
//! against file states supplied by the caller and computes every resulting file, without any I/O.
//! Writing the [`Plan`] (temp file + rename, rollback) is the caller's job.
//!
//! Line endings: each file line keeps its own terminator (`\n`, `\r\n` or a lone `\r`); lines
//! the patch inserts take the file's most common terminator; an updated file always ends with a
//! terminator. A UTF-8 byte-order mark is kept. A [`Hunk::Write`] (built by the caller, never
//! parsed from V4A text) writes exact bytes instead: nothing is added, converted or kept.
//!
//! ```
//! use codespace_runner_patch::{FileState, PlannedChange, parse, plan};
//!
//! let patch = parse("*** Begin Patch\n*** Update File: a.txt\n@@\n-old\n+new\n*** End Patch\n")?;
//! let plan = plan(&patch, |path| {
//!     Ok::<_, std::io::Error>(match path {
//!         "a.txt" => FileState::File { data: b"old\r\n".to_vec(), mode: 0o644 },
//!         _ => FileState::Absent,
//!     })
//! })?;
//! assert_eq!(
//!     plan.changes,
//!     vec![PlannedChange::Update {
//!         path: "a.txt".into(),
//!         old: b"old\r\n".to_vec(),
//!         new: b"new\r\n".to_vec(),
//!         mode: 0o644,
//!     }]
//! );
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]

mod align;
mod conflicts;
mod error;
mod matching;
mod model;
mod parse;
mod plan;
mod quote;
mod source;
mod text;
mod update;

pub use error::{ParseError, PlanError};
pub use model::{Chunk, Hunk, Patch, TouchKind, WriteMode};
pub use parse::parse;
pub use plan::{FileState, Plan, PlannedChange, plan};
