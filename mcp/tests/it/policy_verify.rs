//! `policy verify` on commands and the operator's profile tree, through the real binary and cvc5:
//! "no profile lets a command write .git/**" proven for the shipped set and refuted (with a
//! replayed counterexample) without its guardrail; `--config` puts the operator's profiles where
//! `extends` says, so `--properties` (subset, never_writes, writes_only) need no hand-written
//! assumptions. Without cvc5 these skip (`codespace_test_skip`), and fail under
//! `CODESPACE_REQUIRE_ISOLATION=1`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_codespace");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Whether cvc5 can be found; skips when not (`codespace_test_skip`: fails under
/// `CODESPACE_REQUIRE_ISOLATION=1`; the CI installs it: scripts/test.sh and
/// scripts/ci-policy-verify.sh).
fn have_solver() -> bool {
    let found = std::env::var_os("CVC5").is_some_and(|p| Path::new(&p).is_file())
        || std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("cvc5").is_file()));
    codespace_test_skip::require(
        found,
        &codespace_test_skip::this_test(),
        "cvc5 is not installed (scripts/test.sh installs it)",
    )
}

fn verify(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(["policy", "verify"])
        .args(args)
        .current_dir(repo())
        .env_remove("CODESPACE_CONFIG")
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A copy of the shipped policies and schema under `root`, with `edit` applied to the files
/// (path relative to policies/, new text) and `extra` files added.
fn policies(root: &Path, edit: impl Fn(&str, String) -> String, extra: &[(&str, &str)]) -> PathBuf {
    let pol = root.join("policies");
    for sub in ["base", "profiles"] {
        std::fs::create_dir_all(pol.join(sub)).unwrap();
        for e in std::fs::read_dir(repo().join("policies").join(sub)).unwrap() {
            let p = e.unwrap().path();
            let name = format!("{sub}/{}", p.file_name().unwrap().to_str().unwrap());
            let t = edit(&name, std::fs::read_to_string(&p).unwrap());
            std::fs::write(pol.join(&name), t).unwrap();
        }
    }
    for (name, t) in extra {
        std::fs::write(pol.join(name), t).unwrap();
    }
    std::fs::create_dir_all(root.join("schema")).unwrap();
    std::fs::copy(
        repo().join("schema/codespace.cedarschema"),
        root.join("schema/codespace.cedarschema"),
    )
    .unwrap();
    pol
}

/// The shipped guardrails without `base.forbid.git-metadata-command-write`.
fn without_git_guardrail(name: &str, t: String) -> String {
    if name != "base/guardrails.cedar" {
        return t;
    }
    let start = t
        .find("@id(\"base.forbid.git-metadata-command-write\")")
        .expect("the shipped guardrail");
    let end = start + t[start..].find("};").unwrap() + 2;
    format!("{}{}", &t[..start], &t[end..])
}

#[test]
fn the_git_command_write_property_is_proven_for_the_shipped_set_and_bites_without_its_guardrail() {
    if !have_solver() {
        return;
    }
    let o = verify(&[]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("proven  no profile lets a command write .git/**"),
        "{out}"
    );
    assert!(
        out.contains(
            "proven  read-only never permits fs_write, proc_spawn, proc_io, sandbox or net"
        ),
        "{out}"
    );
    assert!(out.contains("proven  read-only ⊆ workspace-write"), "{out}");

    let dir = tempfile::tempdir().unwrap();
    let pol = policies(dir.path(), without_git_guardrail, &[]);
    let o = verify(&["--policies", pol.to_str().unwrap()]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    let line = out
        .lines()
        .find(|l| l.contains("process_write: counterexample:"))
        .unwrap_or_else(|| panic!("no counterexample: {out}"));
    assert!(
        out.contains("FAILED  no profile lets a command write .git/**"),
        "{out}"
    );
    // A concrete request: the profile, the action, a path under .git, and the permit that
    // lets it through, replayed through the real authorizer.
    assert!(
        line.contains("principal CodeSpace::PermissionProfile::\"workspace-write\""),
        "{line}"
    );
    assert!(
        line.contains("action CodeSpace::Action::\"process_write\""),
        "{line}"
    );
    let path = line
        .split("path \"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap();
    assert!(
        path == ".git"
            || path.starts_with(".git/")
            || path.ends_with("/.git")
            || path.contains("/.git/"),
        "{path}"
    );
    assert!(
        line.contains(
            "the authorizer says allow under the set (by workspace-write.permit.process-write)"
        ),
        "{line}"
    );
}

const CI_RUNNER: &str = r#"@id("ci-runner.permit.cargo")
permit (principal == CodeSpace::PermissionProfile::"ci-runner", action == CodeSpace::Action::"exec_command", resource)
when { context has command && context.command.program == "cargo" };

@id("ci-runner.permit.write-target")
permit (principal == CodeSpace::PermissionProfile::"ci-runner", action == CodeSpace::Action::"process_write", resource)
when { resource.path == "target" || resource.path like "target/*" };
"#;

const PROPERTIES: &str = r#"
[[property]]
subset = { a = "read-only", b = "ci-runner" }

[[property]]
writes_only = { profile = "ci-runner", paths = ["target/**"] }

[[property]]
never_writes = { profiles = ["ci-runner"], paths = ["src/**", "Cargo.toml", "**/.git/**"] }

[[property]]
name = "ci-runner writes only src/**"
writes_only = { profile = "ci-runner", paths = ["src/**"] }
"#;

/// A config whose `ci-runner` extends read-only, its policies, and a properties file.
fn operator(root: &Path) -> (PathBuf, PathBuf) {
    let pol = policies(root, |_, t| t, &[("profiles/ci-runner.cedar", CI_RUNNER)]);
    let ws = root.join("ws");
    std::fs::create_dir(&ws).unwrap();
    let config = root.join("codespace.json");
    std::fs::write(
        &config,
        serde_json::to_string_pretty(&json!({
            "policies": pol,
            "schema": root.join("schema/codespace.cedarschema"),
            "store": root.join("audit.db"),
            "profiles": {"ci-runner": {"extends": "read-only"}},
            "workspaces": {"w": {"root": ws, "profile": "ci-runner"}},
        }))
        .unwrap(),
    )
    .unwrap();
    let props = root.join("verify.toml");
    std::fs::write(&props, PROPERTIES).unwrap();
    (config, props)
}

#[test]
fn custom_properties_hold_on_the_config_tree_and_a_false_one_shows_the_request() {
    if !have_solver() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (config, props) = operator(dir.path());
    let o = verify(&[
        "--config",
        config.to_str().unwrap(),
        "--properties",
        props.to_str().unwrap(),
    ]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    // Proven only because ci-runner sits below read-only and nowhere else: without the tree,
    // the solver could put ci-runner below workspace-write and let it write anywhere.
    for proven in [
        "proven  read-only ⊆ ci-runner",
        "proven  commands of ci-runner write only target/**",
        "proven  no command of ci-runner writes src/**, Cargo.toml, **/.git/**",
        "proven  read-only ⊆ workspace-write",
        "proven  no profile lets a command write .git/**",
    ] {
        assert!(out.contains(proven), "{proven}: {out}");
    }
    assert!(
        out.contains("FAILED  ci-runner writes only src/**"),
        "{out}"
    );
    let line = out
        .lines()
        .find(|l| l.contains("process_write: counterexample:"))
        .unwrap_or_else(|| panic!("no counterexample: {out}"));
    assert!(
        line.contains("principal CodeSpace::PermissionProfile::\"ci-runner\""),
        "{line}"
    );
    assert!(line.contains("path \"target"), "{line}");
    assert!(
        line.contains("allow under the set (by ci-runner.permit.write-target)"),
        "{line}"
    );
    assert!(out.contains("8 of 9 properties proven"), "{out}");

    // The same files with ci-runner below workspace-write: it inherits the workspace-wide write.
    let cfg = std::fs::read_to_string(&config).unwrap().replace(
        "\"extends\": \"read-only\"",
        "\"extends\": \"workspace-write\"",
    );
    std::fs::write(&config, cfg).unwrap();
    let o = verify(&[
        "--config",
        config.to_str().unwrap(),
        "--properties",
        props.to_str().unwrap(),
    ]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("FAILED  commands of ci-runner write only target/**"),
        "{out}"
    );
    assert!(
        out.contains("principal CodeSpace::PermissionProfile::\"ci-runner\"")
            && out.contains("allow under the set (by workspace-write.permit.process-write)"),
        "{out}"
    );
}

#[test]
fn a_subset_that_does_not_hold_names_both_decisions() {
    if !have_solver() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let narrow = "@id(\"base.forbid.ww-notes\")\n@reason(\"notes are private\")\nforbid (principal == CodeSpace::PermissionProfile::\"workspace-write\", action == CodeSpace::Action::\"read\", resource)\nwhen { resource.path == \"notes.txt\" };\n";
    let pol = policies(dir.path(), |_, t| t, &[("base/narrow.cedar", narrow)]);
    let o = verify(&["--policies", pol.to_str().unwrap()]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("FAILED  read-only ⊆ workspace-write"), "{out}");
    assert!(out.contains("path \"notes.txt\""), "{out}");
    assert!(
        out.contains("the authorizer says allow under the set (by read-only.permit.fs-read); as workspace-write the authorizer says deny (by base.forbid.ww-notes)"),
        "{out}"
    );
}

#[test]
fn a_properties_file_naming_an_unknown_profile_is_refused_with_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let props = dir.path().join("verify.toml");
    std::fs::write(
        &props,
        "[[property]]\nwrites_only = { profile = \"ci-runner\", paths = [\"target/**\"] }\n",
    )
    .unwrap();
    // Without --config, ci-runner is no profile a workspace can have.
    let o = Command::new(BIN)
        .args(["policy", "verify", "--properties", props.to_str().unwrap()])
        .current_dir(repo())
        .env_remove("CODESPACE_CONFIG")
        .env("CVC5", std::env::current_exe().unwrap())
        .output()
        .unwrap();
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("property 1: writes_only.profile: unknown profile `ci-runner` (the config's profiles: read-only, workspace-write)"),
        "{out}"
    );
    assert!(!out.contains("proven"), "{out}");
}

/// `policy diff`: a candidate that widens where commands may write (a `process_write` that
/// flips deny → allow, a sandbox capability and not a gating request) is a widening: exit 3.
#[test]
fn diff_counts_a_widened_command_write_scope_as_widening() {
    let dir = tempfile::tempdir().unwrap();
    let pol = policies(dir.path(), without_git_guardrail, &[]);
    let o = Command::new(BIN)
        .args(["policy", "diff", "--policies", "policies", "--against"])
        .arg(&pol)
        .args(["--tests", "--store"])
        .arg(dir.path().join("none.db"))
        .current_dir(repo())
        .env_remove("CODESPACE_CONFIG")
        .output()
        .unwrap();
    let out = text(&o);
    assert_eq!(o.status.code(), Some(3), "{out}");
    assert!(
        out.lines().any(|l| l.starts_with("WIDENING")
            && l.contains("exec_command/process_write")
            && l.contains("-base.forbid.git-metadata-command-write")),
        "{out}"
    );
    assert!(
        out.contains("git-metadata-command-write.yaml :: a command in .git/hooks runs without write access there"),
        "{out}"
    );
}
