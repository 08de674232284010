//! Policy templates linked from the config (issue 32 item 3), through the real binary: one
//! template linked for a profile in one workspace decides differently in two workspaces of that
//! profile, and the linked policy's id (`team.writer[tester,api]`) shows in the audit rows,
//! `policy validate`, `policy test` and `policy diff` (a changed link is changed decisions); a
//! bad link (missing template, missing slot, a slot value of a type the template cannot take)
//! refuses start-up with a clear error, and a policy edit that breaks a link is refused by hot
//! reload with the last good set kept; the shipped example passes its own tests.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::cli_common::{both, repo};
use crate::stdio_common::{BIN, StdioServer};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(30);
const PATCH: &str = "*** Begin Patch\n*** Add File: notes.md\n+hello\n*** End Patch\n";

fn cli(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_remove("CODESPACE_CONFIG")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

struct Env {
    _dir: tempfile::TempDir,
    root: PathBuf,
    pol: PathBuf,
    schema: PathBuf,
}

impl Env {
    /// The shipped base and profiles plus the example template `team.writer`.
    fn new() -> Env {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let pol = root.join("policies");
        for sub in ["base", "profiles"] {
            std::fs::create_dir_all(pol.join(sub)).unwrap();
            for e in std::fs::read_dir(repo().join("policies").join(sub)).unwrap() {
                let p = e.unwrap().path();
                std::fs::copy(&p, pol.join(sub).join(p.file_name().unwrap())).unwrap();
            }
        }
        std::fs::copy(
            repo().join("policies/examples/templates/team-writer.cedar"),
            pol.join("profiles/team-writer.cedar"),
        )
        .unwrap();
        let schema = root.join("codespace.cedarschema");
        std::fs::copy(repo().join("schema/codespace.cedarschema"), &schema).unwrap();
        for ws in ["api", "docs"] {
            std::fs::create_dir_all(root.join(ws)).unwrap();
            std::fs::write(root.join(ws).join("README.md"), "hi\n").unwrap();
        }
        Env {
            _dir: dir,
            root,
            pol,
            schema,
        }
    }

    /// A config with workspaces `api` and `docs`, both of profile `tester`, and `links`.
    fn config(&self, name: &str, links: Value) -> String {
        let config = self.root.join(name);
        std::fs::write(
            &config,
            serde_json::to_string_pretty(&json!({
                "policies": {"dir": self.pol, "templates": links},
                "schema": self.schema, "store": self.root.join("audit.db"),
                "profiles": {"tester": {"extends": "read-only"}},
                "workspaces": {
                    "api": {"root": self.root.join("api"), "profile": "tester"},
                    "docs": {"root": self.root.join("docs"), "profile": "tester"},
                },
            }))
            .unwrap(),
        )
        .unwrap();
        config.display().to_string()
    }
}

fn tester_in(workspaces: &[&str]) -> Value {
    json!([{"template": "team.writer",
            "slots": {"principal": "PermissionProfile::\"tester\""},
            "workspaces": workspaces}])
}

fn json_lines(o: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn one_template_linked_per_workspace_decides_per_slot_and_every_tool_sees_the_link() {
    let e = Env::new();
    let config = e.config("codespace.json", tester_in(&["api"]));
    let mut s = StdioServer::serve()
        .arg("--config")
        .arg(&config)
        .stderr_file(e.root.join("stderr.log"))
        .deadline(DEADLINE)
        .spawn();
    s.initialize("templates");
    // The same profile: patches in api (linked), not in docs.
    s.tool_ok(
        "apply_patch",
        json!({"workspace_id": "api", "patch": PATCH}),
    );
    assert_eq!(
        std::fs::read_to_string(e.root.join("api/notes.md")).unwrap(),
        "hello\n"
    );
    let denied = s.tool_err(
        "apply_patch",
        json!({"workspace_id": "docs", "patch": PATCH}),
    );
    assert_eq!(denied["code"], "UNAUTHORIZED", "{denied}");
    assert!(!e.root.join("docs/notes.md").exists());
    let info = s.tool_ok("workspace_info", json!({"workspace_id": "api"}));
    let sha = info["policy"]["set_sha256"].as_str().unwrap().to_string();
    s.close_and_wait(DEADLINE);

    // The audit row names the linked policy that allowed it.
    let rows = json_lines(&cli(&["audit", "--config", &config, "--json"]));
    let allowed = rows
        .iter()
        .find(|r| r["tool"] == "apply_patch" && r["workspace"] == "api")
        .unwrap_or_else(|| panic!("{rows:?}"));
    assert_eq!(allowed["decision"], "allow", "{allowed}");
    assert!(
        allowed["policy_ids"]
            .as_array()
            .unwrap()
            .contains(&json!("team.writer[tester,api]")),
        "{allowed}"
    );

    // validate: the link is counted, its set hash is the server's, no unlinked warning.
    let o = cli(&["policy", "validate", "--config", &config]);
    assert!(o.status.success(), "{}", both(&o));
    let out = both(&o);
    assert!(out.contains(&sha), "{out}");
    assert!(
        out.contains("1 template(s), 1 linked policy from policies.templates"),
        "{out}"
    );
    assert!(!out.contains("warning"), "{out}");
    // Without the config the template is linked by nothing: a warning, and another hash.
    let pol = e.pol.display().to_string();
    let schema = e.schema.display().to_string();
    let o = cli(&[
        "policy",
        "validate",
        "--policies",
        &pol,
        "--schema",
        &schema,
    ]);
    assert!(o.status.success(), "{}", both(&o));
    assert!(
        both(&o).contains("template team.writer is linked by no entry of policies.templates"),
        "{}",
        both(&o)
    );
    assert!(!both(&o).contains(&sha), "{}", both(&o));

    // explain: the linked policy determines the allow and is evaluated like any other.
    let call = json!({"name": "apply_patch", "arguments": {"workspace_id": "api", "patch": PATCH}});
    let o = cli(&[
        "policy",
        "explain",
        "--config",
        &config,
        "--call",
        &call.to_string(),
    ]);
    assert!(o.status.success(), "{}", both(&o));
    let out = both(&o);
    assert!(out.contains("determining team.writer[tester,api]"), "{out}");
    assert!(!out.contains("error"), "{out}");

    // policy test runs against the config's links; coverage counts the linked policy.
    let case = e.root.join("linked.yaml");
    std::fs::write(
        &case,
        format!(
            "profiles: {{ tester: {{ extends: read-only }} }}\nworkspace: {{ id: api, profile: tester }}\ncases:\n  - name: patches api\n    call: {{ name: apply_patch, arguments: {{ workspace_id: api, patch: {PATCH:?} }} }}\n    decision: allow\n    reason: [\"team.writer[tester,api]\"]\n"
        ),
    )
    .unwrap();
    let o = cli(&[
        "policy",
        "test",
        "--config",
        &config,
        "--format",
        "json",
        case.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", both(&o));
    let report: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        report["coverage"]["by_profile"]["tester"]["percent"], 100.0,
        "{report}"
    );
    // Without the config's links the same case fails: nothing links the template.
    let o = cli(&[
        "policy",
        "test",
        "--policies",
        &pol,
        "--schema",
        &schema,
        case.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));

    // policy diff: moving the link from api to docs flips both recorded patches.
    let moved = e.config("moved.json", tester_in(&["docs"]));
    let o = cli(&[
        "policy",
        "diff",
        "--config",
        &config,
        "--against-config",
        &moved,
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(3), "{}", both(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let groups = v["groups"].as_array().unwrap();
    let narrowing = groups
        .iter()
        .find(|g| g["direction"] == "narrowing" && g["tool"] == "apply_patch")
        .unwrap_or_else(|| panic!("{v}"));
    assert!(
        narrowing["policies"]
            .as_array()
            .unwrap()
            .contains(&json!("-team.writer[tester,api]")),
        "{narrowing}"
    );
    let widening = groups
        .iter()
        .find(|g| g["direction"] == "widening" && g["tool"] == "apply_patch")
        .unwrap_or_else(|| panic!("{v}"));
    assert!(
        widening["policies"]
            .as_array()
            .unwrap()
            .contains(&json!("+team.writer[tester,docs]")),
        "{widening}"
    );
    // The same links: no flip.
    let o = cli(&[
        "policy",
        "diff",
        "--config",
        &config,
        "--against-config",
        &config,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", both(&o));
}

fn refused(e: &Env, name: &str, links: Value, want: &str) {
    let config = e.config(name, links);
    let o = cli(&["serve", "--config", &config]);
    assert!(!o.status.success(), "{}", both(&o));
    assert!(both(&o).contains(want), "want {want:?}:\n{}", both(&o));
    let o = cli(&["policy", "validate", "--config", &config]);
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    assert!(both(&o).contains(want), "want {want:?}:\n{}", both(&o));
}

#[test]
fn a_bad_link_refuses_start_up_and_a_reload_that_breaks_a_link_keeps_the_last_good_set() {
    let e = Env::new();
    refused(
        &e,
        "missing.json",
        json!([{"template": "team.writer2", "slots": {"principal": "PermissionProfile::\"tester\""}, "workspaces": ["api"]}]),
        "policies.templates[0] (template team.writer2): no template with @id(\"team.writer2\") in the set (templates: team.writer) (did you mean `team.writer`?)",
    );
    refused(
        &e,
        "no-principal.json",
        json!([{"template": "team.writer", "workspaces": ["api"]}]),
        "template team.writer has a ?principal slot; give slots.principal",
    );
    refused(
        &e,
        "static.json",
        json!([{"template": "read-only.permit.fs-read", "workspaces": ["api"]}]),
        "read-only.permit.fs-read is a static policy, not a template",
    );
    refused(
        &e,
        "wrong-type.json",
        json!([{"template": "team.writer", "slots": {"principal": "Workspace::\"api\""}, "workspaces": ["api"]}]),
        "linked policy team.writer[api,api]: validation error",
    );
    // A workspace the config does not have is the config's own error.
    let config = e.config("unknown-ws.json", tester_in(&["nosuch"]));
    let o = cli(&["serve", "--config", &config]);
    assert!(!o.status.success(), "{}", both(&o));
    assert!(
        both(&o)
            .contains("policies.templates[0] (template team.writer): unknown workspace `nosuch`"),
        "{}",
        both(&o)
    );

    // Hot reload: an edit that drops the template's ?principal slot breaks the link; refused.
    let config = e.config("codespace.json", tester_in(&["api"]));
    let mut s = StdioServer::serve()
        .arg("--config")
        .arg(&config)
        .stderr_file(e.root.join("stderr.log"))
        .deadline(DEADLINE)
        .spawn();
    s.initialize("templates-reload");
    let info = s.tool_ok("workspace_info", json!({"workspace_id": "api"}));
    let v1 = info["policy"]["set_sha256"].clone();
    let file = e.pol.join("profiles/team-writer.cedar");
    let text = std::fs::read_to_string(&file).unwrap();
    let edited = text.replace(
        "principal in ?principal",
        "principal in CodeSpace::PermissionProfile::\"tester\"",
    );
    assert_ne!(text, edited);
    let tmp = e.root.join("team-writer.new");
    std::fs::write(&tmp, &edited).unwrap();
    std::fs::rename(&tmp, &file).unwrap();
    wait_rejected(&mut s, &v1, "has no ?principal slot; drop slots.principal");
    // The last good set still links the template: api patches.
    s.tool_ok(
        "apply_patch",
        json!({"workspace_id": "api", "patch": PATCH}),
    );
    s.close_and_wait(DEADLINE);
}

fn wait_rejected(s: &mut StdioServer, v1: &Value, want: &str) {
    let end = Instant::now() + DEADLINE;
    loop {
        let info = s.tool_ok("workspace_info", json!({"workspace_id": "api"}));
        assert_eq!(&info["policy"]["set_sha256"], v1, "{info}");
        if let Some(r) = info["policy"].get("last_reload_rejected") {
            assert!(r.to_string().contains(want), "{r}");
            return;
        }
        assert!(Instant::now() < end, "the reload was never attempted");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_shipped_template_example_passes_its_tests() {
    let dir = tempfile::tempdir().unwrap();
    let pol = dir.path().join("policies");
    for sub in ["base", "profiles"] {
        std::fs::create_dir_all(pol.join(sub)).unwrap();
        for e in std::fs::read_dir(repo().join("policies").join(sub)).unwrap() {
            let p = e.unwrap().path();
            std::fs::copy(&p, pol.join(sub).join(p.file_name().unwrap())).unwrap();
        }
    }
    let example = repo().join("policies/examples/templates");
    std::fs::copy(
        example.join("team-writer.cedar"),
        pol.join("profiles/team-writer.cedar"),
    )
    .unwrap();
    let mut args: Vec<String> = vec![
        "policy".into(),
        "test".into(),
        "--fail-on-empty".into(),
        "--policies".into(),
        pol.display().to_string(),
        "--schema".into(),
        repo()
            .join("schema/codespace.cedarschema")
            .display()
            .to_string(),
    ];
    let tests: Vec<PathBuf> = std::fs::read_dir(example.join("tests"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(tests.len(), 3, "{tests:?}");
    args.extend(tests.iter().map(|p| p.display().to_string()));
    let o = cli(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(o.status.success(), "{}", both(&o));
    assert!(both(&o).contains("9 passed, 0 failed"), "{}", both(&o));
    assert!(!Path::new(&pol).join("tests").exists());
}

/// Whether cvc5 can be found; skips when not (fails under `CODESPACE_REQUIRE_ISOLATION=1`).
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

#[test]
fn policy_verify_proves_over_the_linked_policies() {
    if !have_solver() {
        return;
    }
    let e = Env::new();
    let props = e.root.join("props.toml");
    std::fs::write(
        &props,
        "[[property]]\nname = \"tester is read-only\"\nsubset = { a = \"tester\", b = \"read-only\" }\n",
    )
    .unwrap();
    // Unlinked, the template gives tester nothing: tester ⊆ read-only holds.
    let unlinked = e.config("unlinked.json", json!([]));
    let o = cli(&[
        "policy",
        "verify",
        "--config",
        &unlinked,
        "--properties",
        props.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", both(&o));
    assert!(
        both(&o).contains("proven  tester is read-only"),
        "{}",
        both(&o)
    );
    // Linked in api, tester may patch there: the property fails, every built-in still holds.
    let linked = e.config("codespace.json", tester_in(&["api"]));
    let o = cli(&[
        "policy",
        "verify",
        "--config",
        &linked,
        "--properties",
        props.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    let out = both(&o);
    assert!(out.contains("FAILED  tester is read-only"), "{out}");
    assert_eq!(out.matches("FAILED").count(), 1, "{out}");
    assert!(
        out.contains("apply_patch") || out.contains("fs_write") || out.contains("write"),
        "{out}"
    );
}
