//! Review output (issue 32 item 5), through the real binary: `policy test --format markdown`
//! and `policy diff --format markdown` fit a pull-request comment; `policy diff --log FILE`
//! replays the JSON lines `codespace audit --json` exported, without the store; `--format sarif`
//! of both is SARIF 2.1.0 with results at the test case or the changed policy; commands' secret
//! masks are replayed too (mask widened / narrowed).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::cli_common::{both, repo, run};
use crate::stdio_common;

use serde_json::json;
use stdio_common::StdioServer;

#[test]
fn policy_test_markdown_names_the_failed_cases_and_the_gates() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("t.yaml");
    std::fs::write(
        &f,
        "workspace: { id: w, profile: read-only }\ncases:\n  - name: reads\n    call: { name: read, arguments: { workspace_id: w, path: a } }\n    decision: allow\n  - name: runs | pipes\n    call: { name: exec_command, arguments: { workspace_id: w, command: [ls] } }\n    decision: allow\n",
    )
    .unwrap();
    let o = run(&[
        "policy",
        "test",
        f.to_str().unwrap(),
        "--format",
        "markdown",
        "--coverage-min-profile",
        "100",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    let md = String::from_utf8(o.stdout).unwrap();
    assert!(md.starts_with("### Policy tests\n"), "{md}");
    assert!(md.contains("**:x: 1 failed**, 1 passed"), "{md}");
    // The case name's pipe is escaped so the table holds.
    assert!(
        md.contains("| runs \\| pipes | decision: expected allow"),
        "{md}"
    );
    assert!(md.contains("**missed**"), "{md}");
    assert!(md.contains("| `read-only` |"), "{md}");
}

#[test]
fn policy_diff_replays_an_exported_log_as_markdown() {
    let mut s = StdioServer::serve_temp_workspace().spawn();
    s.initialize("review");
    s.tool_ok("read", json!({"workspace_id": "default", "path": "a.txt"}));
    // A mutating call's reply means the read's queued row is committed.
    s.tool_ok(
        "apply_patch",
        json!({"workspace_id": "default",
               "patch": "*** Begin Patch\n*** Add File: b.txt\n+x\n*** End Patch\n"}),
    );
    let store = s.dir().join("store.db");
    let export = run(&[
        "audit",
        "--json",
        "--all-rows",
        "--store",
        store.to_str().unwrap(),
    ]);
    assert!(export.status.success(), "{}", both(&export));
    let log = s.dir().join("traffic.jsonl");
    std::fs::write(&log, &export.stdout).unwrap();

    // A candidate that withholds a.txt: a narrowing flip of the logged read.
    let cand = s.dir().join("candidate");
    for sub in ["base", "profiles"] {
        std::fs::create_dir_all(cand.join(sub)).unwrap();
        for e in std::fs::read_dir(repo().join("policies").join(sub)).unwrap() {
            let p = e.unwrap().path();
            std::fs::copy(&p, cand.join(sub).join(p.file_name().unwrap())).unwrap();
        }
    }
    std::fs::write(
        cand.join("base/extra.cedar"),
        "@id(\"operator.forbid.a\")\n@reason(\"a.txt is private\")\nforbid (principal, action, resource)\nwhen { resource has path && resource.path == \"a.txt\" };\n",
    )
    .unwrap();
    let o = run(&[
        "policy",
        "diff",
        "--policies",
        "policies",
        "--schema",
        "schema/codespace.cedarschema",
        "--against",
        cand.to_str().unwrap(),
        "--against-schema",
        "schema/codespace.cedarschema",
        "--store",
        "/nonexistent/never-read.db",
        "--log",
        log.to_str().unwrap(),
        "--format",
        "markdown",
    ]);
    let md = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(o.status.code(), Some(2), "{}", both(&o));
    assert!(md.starts_with("### Policy diff\n"), "{md}");
    assert!(md.contains("narrowing** flip(s), no widening"), "{md}");
    assert!(md.contains("from the log "), "{md}");
    assert!(
        md.contains("| narrowing | 1 | `read` | `+operator.forbid.a`"),
        "{md}"
    );
    assert!(md.contains("<details><summary>Examples</summary>"), "{md}");

    // The same log as JSON says where it came from.
    let o = run(&[
        "policy",
        "diff",
        "--policies",
        "policies",
        "--schema",
        "schema/codespace.cedarschema",
        "--against",
        cand.to_str().unwrap(),
        "--against-schema",
        "schema/codespace.cedarschema",
        "--log",
        log.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", both(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["narrowing"], 1, "{v}");
    assert_eq!(v["widening"], 0, "{v}");
}

/// The fields SARIF 2.1.0 requires of a log with one run, and every result's rule and message.
fn assert_sarif(v: &serde_json::Value) {
    assert_eq!(v["version"], "2.1.0", "{v}");
    assert!(
        v["$schema"]
            .as_str()
            .unwrap()
            .contains("sarif-schema-2.1.0"),
        "{v}"
    );
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "{v}");
    assert_eq!(runs[0]["tool"]["driver"]["name"], "codespace", "{v}");
    let rules: Vec<&str> = runs[0]["tool"]["driver"]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    for r in runs[0]["results"].as_array().unwrap() {
        let id = r["ruleId"].as_str().unwrap();
        assert!(
            rules.contains(&id),
            "result's rule {id} is not in the driver's rules: {v}"
        );
        assert!(!r["message"]["text"].as_str().unwrap().is_empty(), "{v}");
        assert!(
            ["error", "warning", "note", "none"].contains(&r["level"].as_str().unwrap()),
            "{v}"
        );
        for l in r["locations"].as_array().into_iter().flatten() {
            let uri = l["physicalLocation"]["artifactLocation"]["uri"]
                .as_str()
                .unwrap();
            assert!(!uri.contains(' '), "{v}");
        }
    }
}

#[test]
fn policy_test_sarif_reports_failing_cases_at_their_lines() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("t.yaml");
    std::fs::write(
        &f,
        "workspace: { id: w, profile: read-only }\ncases:\n  - name: reads\n    call: { name: read, arguments: { workspace_id: w, path: a } }\n    decision: allow\n  - name: runs\n    call: { name: exec_command, arguments: { workspace_id: w, command: [ls] } }\n    decision: allow\n",
    )
    .unwrap();
    let o = run(&[
        "policy",
        "test",
        f.to_str().unwrap(),
        "--format",
        "sarif",
        "--coverage-min",
        "100",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_sarif(&v);
    let results = v["runs"][0]["results"].as_array().unwrap();
    // The failing case and the missed coverage gate; the passing case is a rule, not a result.
    assert_eq!(results.len(), 2, "{v}");
    let case = &results[0];
    assert!(
        case["ruleId"].as_str().unwrap().ends_with("t.yaml::runs"),
        "{v}"
    );
    assert_eq!(case["level"], "error", "{v}");
    assert!(
        case["message"]["text"]
            .as_str()
            .unwrap()
            .contains("expected allow"),
        "{v}"
    );
    let loc = &case["locations"][0]["physicalLocation"];
    assert!(
        loc["artifactLocation"]["uri"]
            .as_str()
            .unwrap()
            .ends_with("/t.yaml"),
        "{v}"
    );
    assert_eq!(loc["region"]["startLine"], 6, "{v}");
    assert!(
        results[1]["ruleId"].as_str().unwrap().starts_with("gate:"),
        "{v}"
    );
    let rules = v["runs"][0]["tool"]["driver"]["rules"].as_array().unwrap();
    assert!(
        rules
            .iter()
            .any(|r| r["id"].as_str().unwrap().ends_with("t.yaml::reads")),
        "{v}"
    );
}

#[test]
fn policy_diff_sarif_points_at_the_changed_policy() {
    let dir = tempfile::tempdir().unwrap();
    let cand = dir.path().join("candidate");
    for sub in ["base", "profiles"] {
        std::fs::create_dir_all(cand.join(sub)).unwrap();
        for e in std::fs::read_dir(repo().join("policies").join(sub)).unwrap() {
            let p = e.unwrap().path();
            std::fs::copy(&p, cand.join(sub).join(p.file_name().unwrap())).unwrap();
        }
    }
    std::fs::write(
        cand.join("base/extra.cedar"),
        "@id(\"operator.forbid.a\")\n@reason(\"a.txt is private\")\nforbid (principal, action, resource)\nwhen { resource has path && resource.path == \"a.txt\" };\n",
    )
    .unwrap();
    std::fs::create_dir_all(cand.join("tests")).unwrap();
    std::fs::write(
        cand.join("tests/reads.yaml"),
        "workspace: { id: w, profile: read-only }\ncases:\n  - name: reads a\n    call: { name: read, arguments: { workspace_id: w, path: a.txt } }\n    decision: allow\n",
    )
    .unwrap();
    let o = run(&[
        "policy",
        "diff",
        "--policies",
        "policies",
        "--schema",
        "schema/codespace.cedarschema",
        "--against",
        cand.to_str().unwrap(),
        "--against-schema",
        "schema/codespace.cedarschema",
        "--store",
        "/nonexistent/never-read.db",
        "--tests",
        "--format",
        "sarif",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", both(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_sarif(&v);
    let results = v["runs"][0]["results"].as_array().unwrap();
    assert_eq!(results.len(), 1, "{v}");
    let r = &results[0];
    assert_eq!(r["ruleId"], "operator.forbid.a", "{v}");
    assert_eq!(r["level"], "error", "{v}");
    assert_eq!(r["properties"]["direction"], "narrowing", "{v}");
    assert!(
        r["message"]["text"]
            .as_str()
            .unwrap()
            .starts_with("narrowing: 1 request"),
        "{v}"
    );
    let loc = &r["locations"][0]["physicalLocation"];
    assert!(
        loc["artifactLocation"]["uri"]
            .as_str()
            .unwrap()
            .ends_with("candidate/base/extra.cedar"),
        "{v}"
    );
    assert!(loc["region"]["startLine"].as_u64().unwrap() >= 1, "{v}");
    let rules = v["runs"][0]["tool"]["driver"]["rules"].as_array().unwrap();
    assert_eq!(
        rules[0]["shortDescription"]["text"], "a.txt is private",
        "{v}"
    );
    assert_eq!(v["runs"][0]["properties"]["narrowing"], 1, "{v}");
}

#[test]
fn explain_names_the_failing_conjuncts_and_the_nearest_miss_of_a_default_deny() {
    let mut s = StdioServer::serve_temp_workspace().spawn();
    s.initialize("review");
    s.tool_ok("read", json!({"workspace_id": "default", "path": "a.txt"}));
    s.tool_ok(
        "apply_patch",
        json!({"workspace_id": "default",
               "patch": "*** Begin Patch\n*** Add File: b.txt\n+x\n*** End Patch\n"}),
    );
    let store = s.dir().join("store.db");
    let export = run(&[
        "audit",
        "--json",
        "--all-rows",
        "--store",
        store.to_str().unwrap(),
    ]);
    assert!(export.status.success(), "{}", both(&export));
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&export.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let read = rows
        .iter()
        .find(|r| r["tool"] == "read" && r["path"] == "a.txt")
        .unwrap_or_else(|| panic!("no read row: {rows:?}"));
    let dec = read["decision_id"].as_str().unwrap();

    // A crafted set under which the logged read is a default deny: three permits whose scope
    // matches, missing by one conjunct, by two, and by an `unless` alternative.
    let crafted = s.dir().join("crafted");
    std::fs::create_dir_all(crafted.join("base")).unwrap();
    std::fs::create_dir_all(crafted.join("profiles")).unwrap();
    std::fs::write(
        crafted.join("profiles/near.cedar"),
        "@id(\"crafted.near\")\npermit (principal, action, resource)\nwhen { resource has path && resource.path == \"b.txt\" };\n\n@id(\"crafted.far\")\npermit (principal, action, resource)\nwhen { resource has path && resource.path == \"c.txt\" && resource.path == \"d.txt\" };\n\n@id(\"crafted.unless\")\npermit (principal, action, resource)\nwhen { resource has path && resource.path like \"*.md\" }\nunless { resource has path && resource.path == \"a.txt\" };\n",
    )
    .unwrap();
    let explain = |json: bool| {
        let mut a = vec![
            "policy",
            "explain",
            "--policies",
            crafted.to_str().unwrap(),
            "--schema",
            "schema/codespace.cedarschema",
            "--store",
            store.to_str().unwrap(),
            "--decision-id",
            dec,
        ];
        if json {
            a.push("--json");
        }
        run(&a)
    };
    let o = explain(false);
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(o.status.code(), Some(2), "{}", both(&o));
    assert!(out.contains("CHANGED"), "{out}");
    let miss = out
        .lines()
        .find(|l| l.contains("nearest miss:"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(miss.contains("crafted.near"), "{out}");
    assert!(miss.contains("1 failing conjunct(s)"), "{out}");
    assert!(miss.contains("\"b.txt\""), "{out}");
    assert!(!miss.contains("has"), "the guard held: {out}");
    assert!(
        out.contains("failed: when {") && out.contains("\"d.txt\""),
        "{out}"
    );

    let o = explain(true);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let req = &v["requests"][0]["requests"][0];
    assert_eq!(req["nearest_miss"]["policy"], "crafted.near", "{v}");
    assert_eq!(
        req["nearest_miss"]["failing"].as_array().unwrap().len(),
        1,
        "{v}"
    );
    let by_id = |id: &str| {
        req["policies"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["id"] == id)
            .unwrap()
            .clone()
    };
    assert_eq!(
        by_id("crafted.far")["failing_conjuncts"]
            .as_array()
            .unwrap()
            .len(),
        2,
        "{v}"
    );
    // `unless { a && b }` is one alternative: it failed because it held.
    let unl = by_id("crafted.unless")["failing_conjuncts"].clone();
    let clauses: Vec<&str> = unl
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["clause"].as_str().unwrap())
        .collect();
    assert_eq!(clauses, ["when", "unless"], "{v}");
}

/// A copy of the shipped `base/` and `profiles/` under `dir`.
fn copy_policies(dir: &std::path::Path) {
    for sub in ["base", "profiles"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
        for e in std::fs::read_dir(repo().join("policies").join(sub)).unwrap() {
            let p = e.unwrap().path();
            std::fs::copy(&p, dir.join(sub).join(p.file_name().unwrap())).unwrap();
        }
    }
}

/// `policy diff` of the live set against `cand` over the config's store, in `format`.
fn diff_masks(cfg: &std::path::Path, cand: &std::path::Path, format: &str) -> std::process::Output {
    run(&[
        "policy",
        "diff",
        "--config",
        cfg.to_str().unwrap(),
        "--policies",
        "policies",
        "--schema",
        "schema/codespace.cedarschema",
        "--against",
        cand.to_str().unwrap(),
        "--against-schema",
        "schema/codespace.cedarschema",
        "--format",
        format,
    ])
}

#[test]
fn policy_diff_replays_the_masks_of_recorded_commands_in_every_format() {
    let test = "policy_diff_replays_the_masks_of_recorded_commands_in_every_format";
    let probe = codespace_runner_sandbox::probe();
    if !codespace_test_skip::require(
        probe.masking_available(),
        test,
        format!("no sandbox or no mount namespaces for secret masks ({probe:?})"),
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join(".env"), "PASSWORD=hunter2\n").unwrap();
    std::fs::write(root.join("notes.txt"), "notes\n").unwrap();
    let cfg = dir.path().join("config.json");
    std::fs::write(
        &cfg,
        json!({
            "workspaces": {"w": {"root": root, "profile": "workspace-write"}},
            "store": dir.path().join("store.db"),
        })
        .to_string(),
    )
    .unwrap();
    let mut s = StdioServer::serve().arg("--config").arg(&cfg).spawn();
    s.initialize("masks");
    let r = s.tool_ok(
        "exec_command",
        json!({"workspace_id": "w", "command": ["true"], "yield_ms": 5000}),
    );
    assert!(r["process_id"].is_string(), "{r}");
    // A mutating call's reply means the command's queued mask rows are committed.
    s.tool_ok(
        "apply_patch",
        json!({"workspace_id": "w",
               "patch": "*** Begin Patch\n*** Add File: b.txt\n+x\n*** End Patch\n"}),
    );
    s.close_and_wait(std::time::Duration::from_secs(30));

    // A candidate that stops withholding `.env`: the command's mask widens.
    let open = dir.path().join("open");
    copy_policies(&open);
    let g = open.join("base/guardrails.cedar");
    let text = std::fs::read_to_string(&g).unwrap();
    let at = text.find("@id(\"base.forbid.secret-files\")").unwrap();
    let when = at + text[at..].find("when\n{").unwrap();
    std::fs::write(
        &g,
        format!(
            "{}unless {{ resource.path == \".env\" }}\n{}",
            &text[..when],
            &text[when..]
        ),
    )
    .unwrap();
    let o = diff_masks(&cfg, &open, "json");
    assert_eq!(o.status.code(), Some(3), "{}", both(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["mask_widened"], 1, "{v}");
    assert_eq!(v["mask_narrowed"], 0, "{v}");
    let m = &v["mask_changes"][0];
    assert_eq!(m["change"], "mask_widened", "{v}");
    assert_eq!(m["path"], ".env", "{v}");
    assert_eq!(m["text"], "mask widened: .env no longer withheld", "{v}");
    assert_eq!(m["workspace"], "w", "{v}");
    assert_eq!(m["commands"], 1, "{v}");
    assert_eq!(
        m["policies"],
        json!(["+read-only.permit.fs-read", "-base.forbid.secret-files"]),
        "{v}"
    );
    assert!(m["examples"][0].as_str().unwrap().contains("`true`"), "{v}");
    // No call flipped: the masks are the only change.
    assert_eq!(v["widening"], 0, "{v}");
    let o = diff_masks(&cfg, &open, "text");
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(o.status.code(), Some(3), "{}", both(&o));
    assert!(
        text.contains(
            "mask widened: .env no longer withheld (workspace w, profile workspace-write)"
        ),
        "{text}"
    );
    assert!(text.contains("1 mask(s) widened, 0 narrowed"), "{text}");
    let o = diff_masks(&cfg, &open, "markdown");
    let md = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        md.contains("| mask widened | 1 | `exec_command`: mask widened: .env no longer withheld (workspace `w`) | `+read-only.permit.fs-read` `-base.forbid.secret-files` |"),
        "{md}"
    );
    assert!(md.contains("**1 widened**"), "{md}");
    let o = diff_masks(&cfg, &open, "sarif");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_sarif(&v);
    let results = v["runs"][0]["results"].as_array().unwrap();
    assert!(
        results
            .iter()
            .any(|r| r["properties"]["change"] == "mask_widened"
                && r["message"]["text"]
                    .as_str()
                    .unwrap()
                    .contains("mask widened: .env no longer withheld")),
        "{v}"
    );

    // The same from an exported log, without the store or the config.
    let export = run(&[
        "audit",
        "--json",
        "--all-rows",
        "--store",
        dir.path().join("store.db").to_str().unwrap(),
    ]);
    assert!(export.status.success(), "{}", both(&export));
    let log = dir.path().join("traffic.jsonl");
    std::fs::write(&log, &export.stdout).unwrap();
    let o = run(&[
        "policy",
        "diff",
        "--policies",
        "policies",
        "--schema",
        "schema/codespace.cedarschema",
        "--against",
        open.to_str().unwrap(),
        "--against-schema",
        "schema/codespace.cedarschema",
        "--against-log",
        log.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(3), "{}", both(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["mask_changes"][0]["path"], ".env", "{v}");
    assert_eq!(v["unreplayable_rows"], 0, "{v}");

    // A candidate that withholds `notes.txt` too: found in the workspace's listing (no call
    // named it), the mask narrows.
    let closed = dir.path().join("closed");
    copy_policies(&closed);
    std::fs::write(
        closed.join("base/extra.cedar"),
        "@id(\"operator.forbid.notes\")\n@reason(\"notes are private\")\nforbid (principal, action, resource)\nwhen { resource has path && resource.path == \"notes.txt\" };\n",
    )
    .unwrap();
    let o = diff_masks(&cfg, &closed, "json");
    assert_eq!(o.status.code(), Some(2), "{}", both(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["mask_widened"], 0, "{v}");
    assert_eq!(v["mask_narrowed"], 1, "{v}");
    let m = &v["mask_changes"][0];
    assert_eq!(m["text"], "mask narrowed: notes.txt now withheld", "{v}");
    assert!(
        m["policies"]
            .as_array()
            .unwrap()
            .contains(&json!("+operator.forbid.notes")),
        "{v}"
    );
    let o = diff_masks(&cfg, &closed, "text");
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        text.contains("mask narrowed: notes.txt now withheld"),
        "{text}"
    );
    let o = diff_masks(&cfg, &closed, "markdown");
    let md = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(md.contains("| mask narrowed | 1 |"), "{md}");
}
