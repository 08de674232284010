//! The one way a test skips an invariant this host cannot run: under
//! `CODESPACE_REQUIRE_ISOLATION=1` (or `CI=true`, kept for compatibility) the skip fails the test
//! with a message naming the missing facility; otherwise it prints `skip: <test>: <why>` to stderr
//! and appends `skip\t<test>\t<why>` to the file `CODESPACE_SKIP_LOG` names (scripts/test.sh
//! counts them). Dev-only, no dependencies, so every crate's tests can use it without a cycle.
#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::fmt::Display;
use std::io::Write;
use std::path::PathBuf;

/// Set to `1` (`.ci/run` does): a skip fails the test instead.
pub const REQUIRE_VAR: &str = "CODESPACE_REQUIRE_ISOLATION";
/// A file each skip appends one line to (`<kind>\t<test>\t<why>`).
pub const LOG_VAR: &str = "CODESPACE_SKIP_LOG";

/// What a skip is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The host lacks a facility the invariant needs: fails under [`REQUIRE_VAR`].
    Missing,
    /// An opt-in input the run did not configure (an external data set a separate CI step
    /// feeds): never fails, still printed and logged.
    NotConfigured,
}

impl Kind {
    fn word(self) -> &'static str {
        match self {
            Kind::Missing => "skip",
            Kind::NotConfigured => "not-configured",
        }
    }
}

/// The skip settings of a run, read from the environment through a lookup (the tests pass
/// their own instead of setting process-wide variables).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skips {
    /// A skip of [`Kind::Missing`] fails the test.
    pub require: bool,
    /// Where each skip is appended, when set.
    pub log: Option<PathBuf>,
}

/// What a skip turned into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The test may return early: this line was printed (and logged).
    Skipped(String),
    /// The run requires the facility (or the log cannot be written): the test fails with this.
    Fail(String),
}

impl Skips {
    /// From the process environment.
    pub fn from_env() -> Skips {
        Skips::from_lookup(|k| std::env::var_os(k))
    }

    /// From `lookup` (a variable's value, `None` when unset).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<OsString>) -> Skips {
        let is = |k: &str, values: &[&str]| {
            lookup(k).is_some_and(|v| values.iter().any(|want| v.as_os_str() == *want))
        };
        Skips {
            require: is(REQUIRE_VAR, &["1", "true"]) || is("CI", &["true", "1"]),
            log: lookup(LOG_VAR).filter(|v| !v.is_empty()).map(PathBuf::from),
        }
    }

    /// Records that `test` cannot run its invariant because of `why`.
    pub fn skip(&self, kind: Kind, test: &str, why: &str) -> Outcome {
        // One line each: a reason never spans lines in the log.
        let why = why.replace(['\n', '\t'], " ");
        if kind == Kind::Missing && self.require {
            return Outcome::Fail(format!(
                "{test}: this host cannot run the test: {why} ({REQUIRE_VAR}=1 or CI=true \
                 requires every invariant to run: provide what is missing, or unset both to skip)"
            ));
        }
        if let Some(path) = &self.log {
            let line = format!("{}\t{test}\t{why}\n", kind.word());
            // One write of one short line on an O_APPEND file: concurrent tests do not
            // interleave. A log that cannot be written fails the test (the count would lie).
            let written = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .and_then(|mut f| f.write_all(line.as_bytes()));
            if let Err(e) = written {
                return Outcome::Fail(format!(
                    "{test}: cannot append to {LOG_VAR}={}: {e}",
                    path.display()
                ));
            }
        }
        Outcome::Skipped(format!("{}: {test}: {why}", kind.word()))
    }
}

fn record(kind: Kind, test: &str, why: &dyn Display) {
    match Skips::from_env().skip(kind, test, &why.to_string()) {
        Outcome::Skipped(line) => eprintln!("{line}"),
        #[allow(clippy::panic)] // failing the test is the point
        Outcome::Fail(message) => panic!("{message}"),
    }
}

/// Skips `test` because this host lacks what `why` names; the caller returns next. Fails the
/// test instead under `CODESPACE_REQUIRE_ISOLATION=1` / `CI=true`.
pub fn skip(test: &str, why: impl Display) {
    record(Kind::Missing, test, &why);
}

/// The running test's name (the test harness names each test's thread after it), for helpers
/// that are not told it; `"?"` outside a test thread.
pub fn this_test() -> String {
    std::thread::current().name().unwrap_or("?").to_owned()
}

/// `available`, after a [`skip`] when false: `if !require(ok, test, why) { return; }`.
pub fn require(available: bool, test: &str, why: impl Display) -> bool {
    if !available {
        skip(test, why);
    }
    available
}

/// Skips `test` because an opt-in input (`why`) was not configured for this run; never fails,
/// but is printed and counted (as `not-configured`).
pub fn not_configured(test: &str, why: impl Display) {
    record(Kind::NotConfigured, test, &why);
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn skips(vars: &[(&str, &str)]) -> Skips {
        let map: HashMap<String, OsString> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), OsString::from(v)))
            .collect();
        Skips::from_lookup(|k| map.get(k).cloned())
    }

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("codespace-test-skip-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn the_variables_decide_the_mode() {
        assert!(!skips(&[]).require);
        assert!(skips(&[(REQUIRE_VAR, "1")]).require);
        assert!(skips(&[("CI", "true")]).require);
        assert!(!skips(&[(REQUIRE_VAR, "0"), ("CI", "false")]).require);
        assert_eq!(skips(&[(LOG_VAR, "")]).log, None);
        assert_eq!(
            skips(&[(LOG_VAR, "/x/log")]).log,
            Some(PathBuf::from("/x/log"))
        );
    }

    #[test]
    fn without_require_a_skip_prints_and_logs_one_line() {
        let dir = scratch("log");
        let log = dir.join("skips");
        let s = skips(&[(LOG_VAR, log.to_str().unwrap())]);
        assert_eq!(
            s.skip(Kind::Missing, "t1", "no cgroup\nhere"),
            Outcome::Skipped("skip: t1: no cgroup here".into())
        );
        assert_eq!(
            s.skip(Kind::NotConfigured, "t2", "DATA unset"),
            Outcome::Skipped("not-configured: t2: DATA unset".into())
        );
        let text = std::fs::read_to_string(&log).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            text,
            "skip\tt1\tno cgroup here\nnot-configured\tt2\tDATA unset\n"
        );
    }

    #[test]
    fn under_require_a_missing_facility_fails_and_is_not_logged() {
        let dir = scratch("require");
        let log = dir.join("skips");
        let s = skips(&[(REQUIRE_VAR, "1"), (LOG_VAR, log.to_str().unwrap())]);
        let Outcome::Fail(message) = s.skip(Kind::Missing, "t", "Landlock is missing") else {
            panic!("a required facility was skipped");
        };
        assert!(message.contains("t: this host cannot run the test: Landlock is missing"));
        assert!(message.contains(REQUIRE_VAR));
        assert!(!log.exists());
        // An opt-in input left unset is not a missing facility: logged, never failed.
        assert_eq!(
            skips(&[("CI", "true")]).skip(Kind::NotConfigured, "t", "DATA unset"),
            Outcome::Skipped("not-configured: t: DATA unset".into())
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_test_name_is_the_thread_name() {
        assert_eq!(this_test(), "tests::the_test_name_is_the_thread_name");
    }

    #[test]
    fn a_log_that_cannot_be_written_fails_the_test() {
        let s = skips(&[(LOG_VAR, "/nonexistent-dir-of-codespace/skips")]);
        assert!(matches!(s.skip(Kind::Missing, "t", "x"), Outcome::Fail(m) if m.contains(LOG_VAR)));
    }
}
