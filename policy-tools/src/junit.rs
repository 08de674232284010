//! The JUnit XML report of a policy test run (`codespace policy test --format junit`), written
//! with `quick-junit`: one suite per test file with the coverage as properties, and the gates
//! (coverage threshold, `--fail-on-empty`) as the cases of a `policy test gates` suite, so a
//! missed threshold is a failing test case in any CI that reads JUnit.

use super::suite::{CaseResult, Coverage, Gates};
use quick_junit::{NonSuccessKind, Property, Report, TestCase, TestCaseStatus, TestSuite};
use std::collections::BTreeMap;

/// A failed case: the first line as the message, every line as the description.
fn failure(message: &str, description: &str) -> TestCaseStatus {
    let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
    status.set_message(message).set_description(description);
    status
}

/// The JUnit XML report of `results` with the coverage and the gates' verdicts.
pub fn report_junit(results: &[CaseResult], coverage: &Coverage, gates: &Gates) -> String {
    let mut report = Report::new("codespace policy test");
    let verdicts = gates.evaluate(results, coverage);
    if !verdicts.is_empty() {
        let mut suite = TestSuite::new("policy test gates");
        for g in &verdicts {
            let status = if g.passed {
                TestCaseStatus::success()
            } else {
                failure(&g.message, &g.message)
            };
            let mut case = TestCase::new(g.name.as_str(), status);
            case.set_classname("policy test gates");
            suite.add_test_case(case);
        }
        report.add_test_suite(suite);
    }
    let mut by_file: BTreeMap<&str, Vec<&CaseResult>> = BTreeMap::new();
    for r in results {
        by_file.entry(r.file.as_str()).or_default().push(r);
    }
    for (file, cases) in by_file {
        let mut suite = TestSuite::new(file);
        suite.add_property(Property::new(
            "policy_coverage_percent",
            format!("{:.1}", coverage.percent()),
        ));
        suite.add_property(Property::new(
            "uncovered_policies",
            coverage.uncovered().join(" "),
        ));
        for r in cases {
            let status = if r.passed {
                TestCaseStatus::success()
            } else {
                failure(
                    r.failures.first().map(String::as_str).unwrap_or("failed"),
                    &r.failures.join("\n"),
                )
            };
            let mut case = TestCase::new(r.name.as_str(), status);
            case.set_classname(file);
            suite.add_test_case(case);
        }
        report.add_test_suite(suite);
    }
    report.to_string().unwrap_or_else(|e| {
        // Serializing into memory only fails on invalid UTF-8, which no input here can carry;
        // a report that says so still fails the run.
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"codespace policy test\" tests=\"1\" failures=\"1\"><testsuite name=\"report\" tests=\"1\" failures=\"1\"><testcase name=\"write report\"><failure message=\"cannot write the JUnit report\">{}</failure></testcase></testsuite></testsuites>\n",
            e.to_string().replace(['<', '>', '&', '"'], " ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(name: &str, failures: &[&str]) -> CaseResult {
        CaseResult {
            file: "f.yaml".into(),
            name: name.into(),
            passed: failures.is_empty(),
            failures: failures.iter().map(|s| (*s).to_string()).collect(),
            decision: None,
            refused: None,
            alternatives_reached: Default::default(),
        }
    }

    #[test]
    fn failures_are_escaped_and_counted() {
        let results = vec![
            case("ok", &[]),
            case("a <b> & \"c\"", &["line one <x>", "two"]),
        ];
        let coverage = Coverage {
            all: ["p".to_string()].into(),
            covered: Default::default(),
            alternatives: Vec::new(),
            alternatives_reached: Default::default(),
            by_profile: Default::default(),
            by_action: Default::default(),
        };
        let x = report_junit(&results, &coverage, &Gates::default());
        assert!(x.contains("failures=\"1\""), "{x}");
        assert!(x.contains("a &lt;b&gt; &amp; &quot;c&quot;"), "{x}");
        assert!(x.contains("message=\"line one &lt;x&gt;\""), "{x}");
        assert!(x.contains("policy_coverage_percent"), "{x}");
    }
}
