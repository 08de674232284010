//! Runs the 25 external apply_patch conformance scenarios (the directory CODESPACE_PATCH_SCENARIOS
//! names) against parse + plan + in-memory apply; skipped when it is unset (see
//! scripts/ci-conformance-patch.sh).
// Test-only crate: helpers outside #[test] fns may fail loudly, as the tests themselves do.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use common::{MemFs, load_tree};

/// The external scenarios: the directory CODESPACE_PATCH_SCENARIOS names. Unset: `None`, after a
/// `not-configured:` line; set to a missing directory: the test fails. Never looks beside the repo.
fn scenarios_dir() -> Option<PathBuf> {
    let Some(p) = std::env::var_os("CODESPACE_PATCH_SCENARIOS") else {
        codespace_test_skip::not_configured(
            &codespace_test_skip::this_test(),
            "external apply_patch scenarios (CODESPACE_PATCH_SCENARIOS unset; \
             scripts/ci-conformance-patch.sh sets it)",
        );
        return None;
    };
    let dir = PathBuf::from(p);
    assert!(
        dir.is_dir(),
        "external apply_patch scenarios missing at {} (CODESPACE_PATCH_SCENARIOS is set)",
        dir.display()
    );
    Some(dir)
}

/// What a scenario must produce under our rules.
enum Expect {
    /// Success: the tree equals `expected/`.
    Applied,
    /// Rejected with this code; the tree equals `expected/` (which equals `input/`).
    Rejected(&'static str),
    /// Deliberately stricter than Codex: rejected with this code and the tree stays `input/`
    /// (upstream's `expected/` shows Codex's overwrite or partial result instead).
    StricterRejected(&'static str),
}

/// Every scenario and our expectation. Keep in sync with the shared directory.
const SCENARIOS: &[(&str, Expect)] = &[
    ("001_add_file", Expect::Applied),
    ("002_multiple_operations", Expect::Applied),
    ("003_multiple_chunks", Expect::Applied),
    ("004_move_to_new_directory", Expect::Applied),
    ("005_rejects_empty_patch", Expect::Rejected("INVALID_PATCH")),
    (
        "006_rejects_missing_context",
        Expect::Rejected("INVALID_PATCH"),
    ),
    (
        "007_rejects_missing_file_delete",
        Expect::Rejected("FILE_NOT_FOUND"),
    ),
    (
        "008_rejects_empty_update_hunk",
        Expect::Rejected("INVALID_PATCH"),
    ),
    (
        "009_requires_existing_file_for_update",
        Expect::Rejected("FILE_NOT_FOUND"),
    ),
    // Codex overwrites the destination; the tool contract refuses a Move onto an existing file.
    (
        "010_move_overwrites_existing_destination",
        Expect::StricterRejected("MOVE_DESTINATION_EXISTS"),
    ),
    // Codex overwrites the file; the tool contract refuses an Add onto an existing file.
    (
        "011_add_overwrites_existing_file",
        Expect::StricterRejected("ADD_FILE_EXISTS"),
    ),
    (
        "012_delete_directory_fails",
        Expect::Rejected("INVALID_PATCH"),
    ),
    (
        "013_rejects_invalid_hunk_header",
        Expect::Rejected("INVALID_PATCH"),
    ),
    ("014_update_file_appends_trailing_newline", Expect::Applied),
    // Codex applies hunks one by one and leaves the first Add on disk; we plan the whole patch
    // first, so the missing Update target rejects everything and nothing is written.
    (
        "015_failure_after_partial_success_leaves_changes",
        Expect::StricterRejected("FILE_NOT_FOUND"),
    ),
    ("016_pure_addition_update_chunk", Expect::Applied),
    ("017_whitespace_padded_hunk_header", Expect::Applied),
    ("018_whitespace_padded_patch_markers", Expect::Applied),
    ("019_unicode_simple", Expect::Applied),
    ("020_delete_file_success", Expect::Applied),
    ("020_whitespace_padded_patch_marker_lines", Expect::Applied),
    ("021_update_file_deletion_only", Expect::Applied),
    ("022_update_file_end_of_file_marker", Expect::Applied),
    ("023_preserves_crlf_line_endings", Expect::Applied),
    ("024_preserves_mixed_line_endings", Expect::Applied),
];

fn describe(tree: &BTreeMap<String, Vec<u8>>) -> String {
    tree.iter()
        .map(|(p, d)| format!("{p}: {:?}\n", String::from_utf8_lossy(d)))
        .collect()
}

fn run_scenario(name: &str) {
    let (_, expect) = SCENARIOS
        .iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("{name} is not in SCENARIOS"));
    let Some(dir) = scenarios_dir() else {
        return;
    };
    let dir = dir.join(name);
    assert!(dir.is_dir(), "scenario {name} missing at {}", dir.display());
    let patch = std::fs::read_to_string(dir.join("patch.txt")).unwrap();
    let input = load_tree(&dir.join("input"));
    let expected = load_tree(&dir.join("expected"));
    let mut fs = MemFs::from_tree(&input);
    let result = fs.run(&patch);
    let after = fs.tree();
    match expect {
        Expect::Applied => {
            assert!(result.is_ok(), "{name}: expected success, got {result:?}");
            assert_eq!(
                after,
                expected,
                "{name}: tree differs\n--- got\n{}--- expected\n{}",
                describe(&after),
                describe(&expected)
            );
        }
        Expect::Rejected(code) => {
            let (got, message) = result.expect_err("scenario must be rejected");
            assert_eq!(got, *code, "{name}: {message}");
            assert_eq!(after, expected, "{name}: tree changed");
            assert_eq!(after, input, "{name}: tree changed");
        }
        Expect::StricterRejected(code) => {
            let (got, message) = result.expect_err("scenario must be rejected");
            assert_eq!(got, *code, "{name}: {message}");
            assert_eq!(after, input, "{name}: tree changed");
            assert_ne!(
                after, expected,
                "{name}: upstream expectation should differ"
            );
        }
    }
}

#[test]
fn scenario_list_matches_the_shared_directory() {
    let Some(dir) = scenarios_dir() else {
        return;
    };
    let mut on_disk: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    on_disk.sort();
    let listed: Vec<String> = SCENARIOS.iter().map(|(n, _)| n.to_string()).collect();
    assert_eq!(on_disk, listed);
    assert_eq!(listed.len(), 25);
}

macro_rules! scenarios {
    ($($test:ident => $name:literal,)*) => {
        $(
            #[test]
            fn $test() {
                run_scenario($name);
            }
        )*
    };
}

scenarios! {
    s001_add_file => "001_add_file",
    s002_multiple_operations => "002_multiple_operations",
    s003_multiple_chunks => "003_multiple_chunks",
    s004_move_to_new_directory => "004_move_to_new_directory",
    s005_rejects_empty_patch => "005_rejects_empty_patch",
    s006_rejects_missing_context => "006_rejects_missing_context",
    s007_rejects_missing_file_delete => "007_rejects_missing_file_delete",
    s008_rejects_empty_update_hunk => "008_rejects_empty_update_hunk",
    s009_requires_existing_file_for_update => "009_requires_existing_file_for_update",
    s010_move_onto_existing_destination_is_refused => "010_move_overwrites_existing_destination",
    s011_add_onto_existing_file_is_refused => "011_add_overwrites_existing_file",
    s012_delete_directory_fails => "012_delete_directory_fails",
    s013_rejects_invalid_hunk_header => "013_rejects_invalid_hunk_header",
    s014_update_file_appends_trailing_newline => "014_update_file_appends_trailing_newline",
    s015_failure_rejects_the_whole_patch => "015_failure_after_partial_success_leaves_changes",
    s016_pure_addition_update_chunk => "016_pure_addition_update_chunk",
    s017_whitespace_padded_hunk_header => "017_whitespace_padded_hunk_header",
    s018_whitespace_padded_patch_markers => "018_whitespace_padded_patch_markers",
    s019_unicode_simple => "019_unicode_simple",
    s020_delete_file_success => "020_delete_file_success",
    s020_whitespace_padded_patch_marker_lines => "020_whitespace_padded_patch_marker_lines",
    s021_update_file_deletion_only => "021_update_file_deletion_only",
    s022_update_file_end_of_file_marker => "022_update_file_end_of_file_marker",
    s023_preserves_crlf_line_endings => "023_preserves_crlf_line_endings",
    s024_preserves_mixed_line_endings => "024_preserves_mixed_line_endings",
}
