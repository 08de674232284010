//! The SARIF 2.1.0 reports of `codespace policy test --format sarif` and `codespace policy diff
//! --format sarif`, for code-scanning views of a pull request: one run whose tool is `codespace`,
//! rules named by test case ids (test) or policy ids (diff), one `error` result per failing case,
//! missed gate or flip group, located at the test file or the policy's file and line.

use super::replay::Flip;
use super::suite::{CaseResult, Coverage, Gates};
use codespace_policy::PolicySnapshot;
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// The `$schema` of every report.
pub const SARIF_SCHEMA: &str =
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json";

/// A path as a SARIF artifact URI: a relative reference with `/` separators, or a `file://`
/// URI when absolute; characters a URI may not hold bare are percent-encoded.
pub fn artifact_uri(path: &str) -> String {
    let mut out = String::new();
    let p = path.replace('\\', "/");
    if p.starts_with('/') {
        out.push_str("file://");
    }
    for c in p.chars() {
        match c {
            'A'..='Z' | 'a'..='z' | '0'..='9' | '/' | '-' | '.' | '_' | '~' | '@' | '+' => {
                out.push(c)
            }
            _ => {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.push_str(&format!("%{b:02X}"));
                }
            }
        }
    }
    out
}

/// A location: a file and, when known, a 1-based line.
fn location(uri: &str, line: Option<usize>, message: Option<String>) -> Value {
    let mut phys = json!({ "artifactLocation": { "uri": artifact_uri(uri) } });
    if let (Some(line), Some(obj)) = (line.filter(|l| *l > 0), phys.as_object_mut()) {
        obj.insert("region".into(), json!({ "startLine": line }));
    }
    let mut loc = json!({ "physicalLocation": phys });
    if let (Some(m), Some(obj)) = (message, loc.as_object_mut()) {
        obj.insert("message".into(), json!({ "text": m }));
    }
    loc
}

/// Where policy `id` of `snap` is written: the file (under the set's directory, or `policies/`
/// for the shipped set) and its first line; `None` for an id the set does not hold.
pub fn policy_location(snap: &PolicySnapshot, id: &str) -> Option<Value> {
    let meta = snap.meta.get(id)?;
    let path = match &snap.bundle.dir {
        Some(dir) => dir.join(&meta.file).display().to_string(),
        None => format!("policies/{}", meta.file),
    };
    Some(location(
        &path,
        Some(meta.line),
        Some(format!("policy {id}")),
    ))
}

/// The 1-based line of the case named `name` in a test file's `text` (its `name:` line), when
/// it can be found as written.
pub fn case_line(text: &str, name: &str) -> Option<usize> {
    text.lines()
        .position(|l| {
            let t = l.trim_start().trim_start_matches("- ").trim_start();
            t.strip_prefix("name:").is_some_and(|v| {
                let v = v.trim();
                v == name || v.trim_matches('"') == name || v.trim_matches('\'') == name
            })
        })
        .map(|i| i + 1)
}

fn rule(id: &str, description: &str) -> Value {
    json!({ "id": id, "shortDescription": { "text": description } })
}

fn document(rules: Vec<Value>, results: Vec<Value>, properties: Value) -> Value {
    json!({
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": { "driver": {
                "name": "codespace",
                "version": env!("CARGO_PKG_VERSION"),
                "rules": rules,
            }},
            "results": results,
            "properties": properties,
        }],
    })
}

/// The SARIF report of a test run: a rule per case (`file::name`) and per gate (`gate:name`),
/// an `error` result per failing case (at the test file and the case's line when `line_of`
/// finds it, with the policies that determined its decision as related locations) and per
/// missed gate.
pub fn report_sarif_tests(
    results: &[CaseResult],
    coverage: &Coverage,
    gates: &Gates,
    snap: &PolicySnapshot,
    line_of: &dyn Fn(&str, &str) -> Option<usize>,
) -> Value {
    let mut rules: BTreeMap<String, Value> = BTreeMap::new();
    let mut out = Vec::new();
    for r in results {
        let id = format!("{}::{}", r.file, r.name);
        rules
            .entry(id.clone())
            .or_insert_with(|| rule(&id, &format!("policy test case {}", r.name)));
        if r.passed {
            continue;
        }
        let mut res = json!({
            "ruleId": id,
            "level": "error",
            "kind": "fail",
            "message": { "text": format!("{} :: {}: {}", r.file, r.name, r.failures.join("; ")) },
            "locations": [location(&r.file, line_of(&r.file, &r.name), None)],
        });
        let mut related: Vec<String> = r
            .decision
            .iter()
            .flat_map(|d| d.subs.iter().flat_map(|s| s.policy_ids.iter().cloned()))
            .collect();
        related.sort();
        related.dedup();
        let related: Vec<Value> = related
            .iter()
            .filter_map(|p| policy_location(snap, p))
            .enumerate()
            .map(|(i, mut l)| {
                if let Some(o) = l.as_object_mut() {
                    o.insert("id".into(), json!(i));
                }
                l
            })
            .collect();
        if let (false, Some(o)) = (related.is_empty(), res.as_object_mut()) {
            o.insert("relatedLocations".into(), Value::Array(related));
        }
        out.push(res);
    }
    for g in gates.evaluate(results, coverage) {
        let id = format!("gate:{}", g.name);
        rules
            .entry(id.clone())
            .or_insert_with(|| rule(&id, &format!("policy test gate {}", g.name)));
        if !g.passed {
            out.push(json!({
                "ruleId": id,
                "level": "error",
                "kind": "fail",
                "message": { "text": g.message },
            }));
        }
    }
    document(
        rules.into_values().collect(),
        out,
        json!({
            "passed": results.iter().filter(|r| r.passed).count(),
            "failed": results.iter().filter(|r| !r.passed).count(),
            "coverage_percent": coverage.percent(),
            "uncovered": coverage.uncovered(),
        }),
    )
}

/// One group of flipped answers of `policy diff`.
#[derive(Debug, Clone)]
pub struct FlipGroup<'a> {
    /// Which way access moved.
    pub flip: Flip,
    /// The tool.
    pub tool: &'a str,
    /// The action.
    pub action: &'a str,
    /// The policies whose part changed: `+id` now determines, `-id` no longer does, or
    /// `(default deny)` / `(evaluation error)`.
    pub policies: &'a [String],
    /// Requests in the group.
    pub count: usize,
    /// A few example labels.
    pub examples: Vec<String>,
    /// A change of commands' secret masks rather than of calls' answers: what it says
    /// (`mask widened: .env no longer withheld …`); its `count` is of commands.
    pub change: Option<String>,
}

/// `; e.g. a, b` (empty without examples).
fn examples(labels: &[String]) -> String {
    if labels.is_empty() {
        String::new()
    } else {
        format!("; e.g. {}", labels.join(", "))
    }
}

/// The rule id of a changed-policy entry: the policy id without its sign, or `default-deny` /
/// `evaluation-error`.
fn diff_rule_id(p: &str) -> String {
    match p {
        "(default deny)" => "default-deny".into(),
        "(evaluation error)" => "evaluation-error".into(),
        _ => p.trim_start_matches(['+', '-']).to_string(),
    }
}

/// The SARIF report of a diff: a rule per policy whose part changed, an `error` result per flip
/// group (ruleId its first changed policy), located at each changed policy's file and line (an
/// added part in the candidate set, a removed part in the live set).
pub fn report_sarif_diff(
    live: &PolicySnapshot,
    candidate: &PolicySnapshot,
    groups: &[FlipGroup<'_>],
    properties: Value,
) -> Value {
    let mut rules: BTreeMap<String, Value> = BTreeMap::new();
    let mut out = Vec::new();
    for g in groups {
        let mut locations = Vec::new();
        for p in g.policies {
            let id = diff_rule_id(p);
            let loc = if p.starts_with('+') {
                policy_location(candidate, &id)
            } else if p.starts_with('-') {
                policy_location(live, &id)
            } else {
                None
            };
            let reason = candidate
                .meta
                .get(&id)
                .or_else(|| live.meta.get(&id))
                .and_then(|m| m.reason.clone());
            rules.entry(id.clone()).or_insert_with(|| {
                rule(
                    &id,
                    &reason.unwrap_or_else(|| match id.as_str() {
                        "default-deny" => "no policy permitted (default deny)".into(),
                        "evaluation-error" => "a policy failed to evaluate".into(),
                        _ => format!("policy {id}"),
                    }),
                )
            });
            locations.extend(loc);
        }
        let rule_id = g
            .policies
            .first()
            .map(|p| diff_rule_id(p))
            .unwrap_or_else(|| "default-deny".into());
        let what = if g.action == g.tool {
            g.tool.to_string()
        } else {
            format!("{}/{}", g.tool, g.action)
        };
        let mut res = json!({
            "ruleId": rule_id,
            "level": "error",
            "kind": "fail",
            "message": { "text": match &g.change {
                None => format!(
                    "{}: {} request(s) of {what} change answer under the candidate ({}){}",
                    g.flip.as_str(),
                    g.count,
                    g.policies.join(" "),
                    examples(&g.examples)
                ),
                Some(change) => format!(
                    "{}: {change}, for {} command(s) of {} under the candidate ({}){}",
                    g.flip.as_str(),
                    g.count,
                    g.tool,
                    g.policies.join(" "),
                    examples(&g.examples)
                ),
            }},
            "properties": {
                "direction": g.flip.as_str(),
                "tool": g.tool,
                "action": g.action,
                "count": g.count,
                "policies": g.policies,
                "change": g.change.as_ref().map(|_| match g.flip {
                    Flip::Widening => "mask_widened",
                    Flip::Narrowing => "mask_narrowed",
                }),
            },
        });
        if let (false, Some(o)) = (locations.is_empty(), res.as_object_mut()) {
            o.insert("locations".into(), Value::Array(locations));
        }
        out.push(res);
    }
    document(rules.into_values().collect(), out, properties)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_are_references() {
        assert_eq!(artifact_uri("base/a b.cedar"), "base/a%20b.cedar");
        assert_eq!(artifact_uri("/tmp/x#y"), "file:///tmp/x%23y");
        assert_eq!(artifact_uri("policies\\t.yaml"), "policies/t.yaml");
    }

    #[test]
    fn case_lines_are_found() {
        let t = "cases:\n  - name: reads\n    call: {}\n  - name: \"runs it\"\n";
        assert_eq!(case_line(t, "reads"), Some(2));
        assert_eq!(case_line(t, "runs it"), Some(4));
        assert_eq!(case_line(t, "absent"), None);
    }
}
