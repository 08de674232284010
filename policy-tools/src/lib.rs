//! Policy tooling the CLI uses and the server library does not link: the policy test suite
//! runner (YAML cases, coverage, gates) with its JUnit, Markdown and SARIF reports, replaying recorded requests under
//! another set (`policy diff`), per-alternative coverage of `||` chains, and the test gate of hot
//! reload. Decisions come from `codespace_policy::Decider`, never from Cedar directly (only
//! explanations and coverage evaluate single policies).

#![forbid(unsafe_code)]

pub mod alternatives;
pub mod cases;
pub mod junit;
pub mod markdown;
pub mod replay;
pub mod sarif;
pub mod suite;

use codespace_policy::PolicySnapshot;
use codespace_policy::config::Profile;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The reload test gate ([`codespace_policy::reload::TestGate`]): every `.yaml` test file of
/// `dir` run against the candidate `snap` with `profiles`; one line per failure.
pub fn reload_gate(
    snap: &PolicySnapshot,
    dir: &Path,
    profiles: &BTreeMap<String, Profile>,
) -> Vec<String> {
    let mut problems = Vec::new();
    let mut files: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
            .collect(),
        // No tests directory: the set has no tests to fail.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => {
            return vec![format!(
                "tests: cannot list the test directory: {}",
                e.kind()
            )];
        }
    };
    files.sort();
    let mut parsed_files = Vec::new();
    for f in files {
        let name = f
            .file_name()
            .map(|n| format!("tests/{}", n.to_string_lossy()))
            .unwrap_or_default();
        let parsed = std::fs::read_to_string(&f)
            .map_err(|e| e.to_string())
            .and_then(|t| suite::parse_file(&t));
        parsed_files.push((name, parsed));
    }
    // The links the test files declare, linked beside the set's own.
    let linked = match suite::with_test_links(
        snap,
        parsed_files.iter().filter_map(|(_, p)| p.as_ref().ok()),
    ) {
        Ok(l) => l,
        Err(e) => {
            problems.extend(e.0.into_iter().map(|l| format!("tests: links: {l}")));
            return problems;
        }
    };
    let snap = linked.as_ref().unwrap_or(snap);
    for (name, parsed) in parsed_files {
        match parsed {
            Ok(tf) => {
                for r in
                    suite::run_file_in(snap, profiles, &name, &tf, suite::RunOptions::default())
                        .into_iter()
                        .map(|o| o.result)
                        .filter(|r| !r.passed)
                {
                    problems.push(format!(
                        "test {} :: {}: {}",
                        r.file,
                        r.name,
                        r.failures.join("; ")
                    ));
                }
            }
            Err(e) => problems.push(format!("test {name}: cannot parse: {e}")),
        }
    }
    problems
}
