//! Runs the in-repo apply_patch fixtures (`tests/fixtures/<scenario>/`) through parse + plan +
//! in-memory apply, and checks that every fixture directory is well formed.
//!
//! A fixture is `patch.txt`, an optional `before/` tree (missing = empty workspace), and exactly
//! one of `after/` (the tree after a successful apply) or `error.txt` (the expected error code;
//! the tree must stay `before/`).
// Test-only crate: helpers outside #[test] fns may fail loudly, as the tests themselves do.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::{MemFs, load_tree};

/// Codes that the gateway's path resolution raises, not the parser or planner: at this layer
/// such a fixture must parse and plan, and the rejection is asserted by the engine's tool-path
/// test (engine/tests/it/apply_patch.rs).
const GATEWAY_ONLY_CODES: &[&str] = &["PATH_ESCAPE"];

/// What a fixture expects.
#[derive(Debug)]
enum Outcome {
    /// The tree after a successful apply.
    Applied(BTreeMap<String, Vec<u8>>),
    /// Rejected with this error code; the tree is unchanged.
    Rejected(String),
}

#[derive(Debug)]
struct Fixture {
    name: String,
    patch: String,
    before: BTreeMap<String, Vec<u8>>,
    outcome: Outcome,
}

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// Loads one fixture directory, or says why it is malformed.
fn load_fixture(dir: &Path) -> Result<Fixture, String> {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let patch = std::fs::read_to_string(dir.join("patch.txt"))
        .map_err(|e| format!("{name}: patch.txt unreadable: {e}"))?;
    let after = dir.join("after");
    let error = dir.join("error.txt");
    let outcome = match (after.is_dir(), error.is_file()) {
        (true, false) => Outcome::Applied(load_tree(&after)),
        (false, true) => {
            let code = std::fs::read_to_string(&error)
                .map_err(|e| format!("{name}: error.txt unreadable: {e}"))?
                .trim()
                .to_string();
            if code.is_empty() {
                return Err(format!("{name}: error.txt is empty"));
            }
            Outcome::Rejected(code)
        }
        (true, true) => return Err(format!("{name}: has both after/ and error.txt")),
        (false, false) => return Err(format!("{name}: has neither after/ nor error.txt")),
    };
    Ok(Fixture {
        name,
        patch,
        before: load_tree(&dir.join("before")),
        outcome,
    })
}

fn all_fixtures() -> Vec<Fixture> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(fixtures_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs.iter()
        .map(|d| load_fixture(d).unwrap_or_else(|e| panic!("malformed fixture: {e}")))
        .collect()
}

fn describe(tree: &BTreeMap<String, Vec<u8>>) -> String {
    tree.iter()
        .map(|(p, d)| format!("{p}: {:?}\n", String::from_utf8_lossy(d)))
        .collect()
}

#[test]
fn every_fixture_applies_or_rejects_as_recorded() {
    let fixtures = all_fixtures();
    assert!(
        fixtures.len() >= 16,
        "expected at least 16 fixtures, found {}",
        fixtures.len()
    );
    for fx in fixtures {
        let mut fs = MemFs::from_tree(&fx.before);
        let result = fs.run(&fx.patch);
        let got = fs.tree();
        let name = &fx.name;
        match &fx.outcome {
            Outcome::Applied(expected) => {
                assert!(result.is_ok(), "{name}: expected success, got {result:?}");
                assert_eq!(
                    &got,
                    expected,
                    "{name}: tree differs\n--- got\n{}--- expected\n{}",
                    describe(&got),
                    describe(expected)
                );
            }
            Outcome::Rejected(code) if GATEWAY_ONLY_CODES.contains(&code.as_str()) => {
                assert!(
                    result.is_ok(),
                    "{name}: {code} is the gateway's to raise; parse + plan must accept it here, got {result:?}"
                );
            }
            Outcome::Rejected(code) => {
                let (got_code, message) =
                    result.expect_err("fixture with error.txt must be rejected");
                assert_eq!(&got_code, code, "{name}: {message}");
                assert_eq!(got, fx.before, "{name}: a rejected patch changed the tree");
            }
        }
    }
}

#[test]
fn fixtures_cover_successes_and_rejections() {
    let fixtures = all_fixtures();
    let applied = fixtures
        .iter()
        .filter(|f| matches!(f.outcome, Outcome::Applied(_)))
        .count();
    let rejected = fixtures.len() - applied;
    assert!(
        applied >= 8 && rejected >= 8,
        "{applied} applied, {rejected} rejected"
    );
}

#[test]
fn a_fixture_without_patch_txt_is_malformed() {
    let dir = tempfile::tempdir().unwrap();
    let fx = dir.path().join("no_patch");
    std::fs::create_dir_all(fx.join("after")).unwrap();
    std::fs::write(fx.join("after/a.txt"), "a\n").unwrap();
    let err = load_fixture(&fx).unwrap_err();
    assert!(err.contains("patch.txt"), "{err}");
}

#[test]
fn a_fixture_without_after_or_error_is_malformed() {
    let dir = tempfile::tempdir().unwrap();
    let fx = dir.path().join("no_outcome");
    std::fs::create_dir_all(fx.join("before")).unwrap();
    std::fs::write(fx.join("patch.txt"), "*** Begin Patch\n*** End Patch\n").unwrap();
    let err = load_fixture(&fx).unwrap_err();
    assert!(err.contains("neither after/ nor error.txt"), "{err}");
}

#[test]
fn a_fixture_with_both_after_and_error_is_malformed() {
    let dir = tempfile::tempdir().unwrap();
    let fx = dir.path().join("both");
    std::fs::create_dir_all(fx.join("after")).unwrap();
    std::fs::write(fx.join("patch.txt"), "*** Begin Patch\n*** End Patch\n").unwrap();
    std::fs::write(fx.join("error.txt"), "INVALID_PATCH\n").unwrap();
    let err = load_fixture(&fx).unwrap_err();
    assert!(err.contains("both"), "{err}");
}
