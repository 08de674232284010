//! Content search, ignore rules and fuzzy path ranking over a list of workspace-relative paths the
//! caller supplies.
//!
//! This crate decides nothing and opens nothing by path: the caller (the engine) lists the
//! workspace, withholds what policy would not let the caller read, and hands over the remaining
//! files with an opener that resolves each one beneath the workspace root without following a
//! symlink. What is here is pure machinery:
//!
//! - [`grep`]: a literal or regex search built on ripgrep's own crates (`grep-regex`,
//!   `grep-searcher`), with bounded patterns, binary and size skipping, capped lines, context lines,
//!   offset paging and a parallel search whose result is deterministic (path order, then line).
//! - [`ignore_rules`]: `.gitignore` / `.ignore` / `.git/info/exclude` and hidden-file rules (the
//!   `ignore` crate's gitignore matcher) applied to a listing instead of a walk.
//! - [`fuzzy`]: ranking paths against a fuzzy query with match positions (`nucleo-matcher`).
//!
//! Nothing here knows Cedar, MCP or JSON.

#![forbid(unsafe_code)]

pub mod fuzzy;
pub mod grep;
pub mod ignore_rules;

pub use fuzzy::{FuzzyQuery, Ranked, Scorer};
pub use grep::{
    GrepLimits, GrepOutcome, LineMatch, OpenError, Pattern, PatternError, PatternOptions, Skipped,
    Window,
};
pub use ignore_rules::{IgnoreFile, IgnoreFileKind, IgnoreRules, IgnoreSelector};
