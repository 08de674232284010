//! The Markdown report of a policy test run (`codespace policy test --format markdown`): a
//! verdict line, the failed cases with their reasons, the gates and the coverage per profile, in
//! a shape that fits a pull-request comment.

use super::suite::{CaseResult, Coverage, Gates};

/// A table cell: pipes escaped, line ends flattened.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace(['\n', '\r'], " ")
}

/// The Markdown report of `results` with the coverage and the gates' verdicts.
pub fn report_markdown(results: &[CaseResult], coverage: &Coverage, gates: &Gates) -> String {
    let passed = results.iter().filter(|r| r.passed).count();
    let failed = results.len() - passed;
    let verdicts = gates.evaluate(results, coverage);
    let gates_failed = verdicts.iter().filter(|g| !g.passed).count();
    let mut o = String::from("### Policy tests\n\n");
    o.push_str(&if failed == 0 && gates_failed == 0 {
        format!("**:white_check_mark: {passed} passed**, 0 failed")
    } else {
        format!("**:x: {failed} failed**, {passed} passed")
    });
    o.push_str(&format!(
        "; coverage {}/{} policies ({:.1}%)",
        coverage.covered.len(),
        coverage.all.len(),
        coverage.percent()
    ));
    if gates_failed > 0 {
        o.push_str(&format!("; {gates_failed} gate(s) missed"));
    }
    o.push_str(".\n");
    let failures: Vec<&CaseResult> = results.iter().filter(|r| !r.passed).collect();
    if !failures.is_empty() {
        o.push_str("\n| File | Case | Why |\n|---|---|---|\n");
        for r in failures {
            o.push_str(&format!(
                "| {} | {} | {} |\n",
                cell(&r.file),
                cell(&r.name),
                cell(&r.failures.join("; "))
            ));
        }
    }
    if !verdicts.is_empty() {
        o.push_str("\n| Gate | Result |\n|---|---|\n");
        for g in &verdicts {
            o.push_str(&format!(
                "| {} | {} {} |\n",
                cell(&g.name),
                if g.passed { "met:" } else { "**missed**:" },
                cell(&g.message)
            ));
        }
    }
    let groups: Vec<(&str, f64, Vec<&String>)> = coverage.groups(&coverage.by_profile).collect();
    if !groups.is_empty() {
        o.push_str("\n| Profile | Coverage | Uncovered |\n|---|---:|---|\n");
        for (g, pct, unc) in groups {
            o.push_str(&format!(
                "| `{}` | {pct:.0}% | {} |\n",
                cell(g),
                unc.iter()
                    .map(|u| format!("`{}`", cell(u)))
                    .collect::<Vec<_>>()
                    .join(" ")
            ));
        }
    }
    let uncovered = coverage.uncovered();
    if !uncovered.is_empty() {
        o.push_str(&format!(
            "\n<details><summary>{} uncovered policies</summary>\n\n{}\n\n</details>\n",
            uncovered.len(),
            uncovered
                .iter()
                .map(|u| format!("- `{u}`"))
                .collect::<Vec<_>>()
                .join("\n")
        ));
    }
    o
}
