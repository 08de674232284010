//! The `codespace` binary as a subprocess: start-up refusals (invalid policies, invalid config)
//! and the `policy validate` / `policy test` commands CI relies on.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_codespace");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).unwrap();
        }
    }
}

/// A temp dir holding a copy of the shipped `policies/` and `schema/`, and a workspace `ws/`.
fn policy_copy() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    copy_dir(&repo().join("policies"), &t.path().join("policies"));
    copy_dir(&repo().join("schema"), &t.path().join("schema"));
    std::fs::create_dir(t.path().join("ws")).unwrap();
    std::fs::write(t.path().join("ws/a.txt"), "a\n").unwrap();
    t
}

fn run(args: &[&str], cwd: &Path) -> Output {
    Command::new(BIN)
        .args(args)
        .current_dir(cwd)
        .env_remove("CODESPACE_CONFIG")
        .env_remove("CODESPACE_LOG")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn write_config(dir: &Path, json: &serde_json::Value) -> PathBuf {
    let p = dir.join("config.json");
    std::fs::write(&p, serde_json::to_vec_pretty(json).unwrap()).unwrap();
    p
}

fn schema_arg(t: &Path) -> String {
    t.join("schema/codespace.cedarschema").display().to_string()
}

#[test]
fn serve_refuses_a_broken_policy_naming_file_and_line() {
    let t = policy_copy();
    let file = t.path().join("policies/profiles/read-only.cedar");
    let mut src = std::fs::read_to_string(&file).unwrap();
    src.push_str("\npermit (principal, action, resource) when { not_a_variable };\n");
    let bad_line = src.lines().count();
    std::fs::write(&file, src).unwrap();
    let cfg = write_config(
        t.path(),
        &serde_json::json!({
            "workspaces": {"w": {"root": t.path().join("ws")}},
            "policies": t.path().join("policies"),
            "schema": t.path().join("schema/codespace.cedarschema"),
        }),
    );
    let store = t.path().join("store.db");
    let out = run(
        &[
            "serve",
            "--config",
            cfg.to_str().unwrap(),
            "--store",
            store.to_str().unwrap(),
        ],
        t.path(),
    );
    let err = text(&out.stderr);
    assert!(!out.status.success(), "serve started with a broken policy");
    assert!(
        err.contains(&format!("read-only.cedar:{bad_line}")),
        "stderr names file and line {bad_line}: {err}"
    );
    assert!(
        out.stdout.is_empty(),
        "nothing on stdout: {}",
        text(&out.stdout)
    );
}

#[test]
fn serve_refuses_a_policy_that_fails_schema_validation() {
    let t = policy_copy();
    let file = t.path().join("policies/profiles/workspace-write.cedar");
    let mut src = std::fs::read_to_string(&file).unwrap();
    src.push_str(
        "\n@id(\"workspace-write.permit.bogus\")\npermit (principal, action, resource) when { resource.no_such_attribute == 1 };\n",
    );
    std::fs::write(&file, src).unwrap();
    let cfg = write_config(
        t.path(),
        &serde_json::json!({
            "workspaces": {"w": {"root": t.path().join("ws")}},
            "policies": t.path().join("policies"),
            "schema": t.path().join("schema/codespace.cedarschema"),
        }),
    );
    let store = t.path().join("store.db");
    let out = run(
        &[
            "serve",
            "--config",
            cfg.to_str().unwrap(),
            "--store",
            store.to_str().unwrap(),
        ],
        t.path(),
    );
    let err = text(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("workspace-write.cedar"), "{err}");
    assert!(err.contains("no_such_attribute"), "{err}");
}

#[test]
fn serve_refuses_an_invalid_config_with_one_line_naming_the_field() {
    let t = policy_copy();
    let ws = t.path().join("ws");
    let cases = [
        (
            serde_json::json!({"workspaces": {"w": {"root": "relative/ws"}}}),
            "workspaces.w.root",
        ),
        (
            serde_json::json!({"workspaces": {"w": {"root": ws, "environment": "mars"}}}),
            "workspaces.w.environment",
        ),
        (
            serde_json::json!({"workspaces": {"w": {"root": ws, "profile": "superuser"}}}),
            "workspaces.w.profile",
        ),
        (
            serde_json::json!({"workspaces": {"w": {"root": ws}}, "colour": "red"}),
            "colour",
        ),
        (
            serde_json::json!({"workspaces": {"w": {"root": ws, "netwrk": "enabled"}}}),
            "netwrk",
        ),
    ];
    for (json, field) in cases {
        let cfg = write_config(t.path(), &json);
        let store = t.path().join("store.db");
        let out = run(
            &[
                "serve",
                "--config",
                cfg.to_str().unwrap(),
                "--store",
                store.to_str().unwrap(),
            ],
            t.path(),
        );
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{json}: serve started");
        let lines: Vec<&str> = err
            .lines()
            .filter(|l| l.contains("invalid config"))
            .collect();
        assert_eq!(lines.len(), 1, "{json}: one error line expected: {err}");
        assert!(
            lines[0].contains(field),
            "{json}: line lacks {field}: {}",
            lines[0]
        );
    }
}

#[test]
fn policy_validate_accepts_the_shipped_set_and_rejects_a_broken_one() {
    let t = policy_copy();
    let policies = t.path().join("policies").display().to_string();
    let schema = schema_arg(t.path());
    let ok = run(
        &[
            "policy",
            "validate",
            "--policies",
            &policies,
            "--schema",
            &schema,
        ],
        t.path(),
    );
    assert_eq!(ok.status.code(), Some(0), "{}", text(&ok.stderr));
    assert!(text(&ok.stdout).contains("ok:"), "{}", text(&ok.stdout));

    // A forbid without @reason is a lint error.
    let file = t.path().join("policies/base/guardrails.cedar");
    let mut src = std::fs::read_to_string(&file).unwrap();
    src.push_str("\n@id(\"base.forbid.no-reason\")\nforbid (principal, action, resource) when { resource.path == \"x\" };\n");
    std::fs::write(&file, &src).unwrap();
    let lint = run(
        &[
            "policy",
            "validate",
            "--policies",
            &policies,
            "--schema",
            &schema,
        ],
        t.path(),
    );
    assert_eq!(
        lint.status.code(),
        Some(1),
        "a forbid without @reason must fail validation"
    );
    assert!(
        text(&lint.stderr).contains("guardrails.cedar"),
        "{}",
        text(&lint.stderr)
    );

    // A syntax error.
    src.push_str("\nforbid (principal, action, resource\n");
    std::fs::write(&file, &src).unwrap();
    let bad = run(
        &[
            "policy",
            "validate",
            "--policies",
            &policies,
            "--schema",
            &schema,
        ],
        t.path(),
    );
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        text(&bad.stderr).contains("guardrails.cedar:"),
        "{}",
        text(&bad.stderr)
    );
}

#[test]
fn policy_test_passes_the_shipped_tests() {
    let t = policy_copy();
    let policies = t.path().join("policies").display().to_string();
    let schema = schema_arg(t.path());
    let out = run(
        &[
            "policy",
            "test",
            "--policies",
            &policies,
            "--schema",
            &schema,
        ],
        t.path(),
    );
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    let summary = stdout
        .lines()
        .rev()
        .find(|l| l.ends_with(" failed"))
        .unwrap_or_else(|| panic!("no summary line: {stdout}"));
    let (passed, failed) = summary.split_once(" passed, ").unwrap();
    assert!(passed.trim().parse::<u32>().unwrap() > 10, "{summary}");
    assert_eq!(failed, "0 failed");
}

#[test]
fn policy_test_fails_on_a_wrong_expectation() {
    let t = policy_copy();
    let policies = t.path().join("policies").display().to_string();
    let schema = schema_arg(t.path());
    let case = t.path().join("wrong.yaml");
    std::fs::write(
        &case,
        "description: a deliberately wrong expectation\n\
         workspace: { id: w, profile: read-only }\n\
         cases:\n\
         \x20 - name: read-only may read (claimed deny)\n\
         \x20   call: { name: read, arguments: { workspace_id: w, path: src/main.rs } }\n\
         \x20   decision: deny\n\
         \x20 - name: read-only may read (right)\n\
         \x20   call: { name: read, arguments: { workspace_id: w, path: src/main.rs } }\n\
         \x20   decision: allow\n",
    )
    .unwrap();
    let out = run(
        &[
            "policy",
            "test",
            "--policies",
            &policies,
            "--schema",
            &schema,
            case.to_str().unwrap(),
        ],
        t.path(),
    );
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("FAILED"), "{stdout}");
    assert!(stdout.contains("1 passed, 1 failed"), "{stdout}");
}
