//! The operator's hooks around `apply_patch` (issue 31) on the real binary: a passing
//! `before_patch` hook sees the patched tree and lets the patch apply (a hook whose `paths` match
//! nothing does not run); a failing one leaves every file untouched, the operation `failed` and
//! `HOOK_FAILED` with its exit code and output; a `before_patch` hook can write nothing and read
//! no masked secret; an `after_patch` formatter's change is visible with a new version and
//! recorded in the ledger, and it cannot write beyond the patched directories; a hook a policy
//! denies never runs (audited as a `hook` deny). Host environment only (a worker runs hooks
//! through the same `Runner::spawn`, not exercised here).

use crate::stdio_common::StdioServer;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// True (after a skip) when the staged view cannot be built here (no sandbox or no mount
/// namespaces); under `CI=true` or `CODESPACE_REQUIRE_ISOLATION=1` that fails the test.
fn skip(test: &str) -> bool {
    let probe = codespace_runner_sandbox::probe();
    if probe.masking_available() {
        return false;
    }
    codespace_test_skip::skip(
        test,
        format!("no sandbox or no mount namespaces ({probe:?})"),
    );
    true
}

fn patch(body: &str) -> String {
    format!("*** Begin Patch\n{body}*** End Patch\n")
}

/// A config for workspace `w` rooted at `<dir>/ws` with `hooks`, its store in `dir`, `extra`
/// merged in.
fn config(dir: &Path, hooks: Value, extra: Value) -> PathBuf {
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let mut cfg = json!({
        "store": dir.join("store.db"),
        "workspaces": {"w": {"root": ws, "profile": "workspace-write", "hooks": hooks}},
    });
    if let (Value::Object(c), Value::Object(e)) = (&mut cfg, extra) {
        c.extend(e);
    }
    let path = dir.join("config.json");
    std::fs::write(&path, cfg.to_string()).unwrap();
    path
}

fn serve(cfg: &Path) -> StdioServer {
    let mut s = StdioServer::serve().arg("--config").arg(cfg).spawn();
    s.initialize("hooks-test");
    s
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap()
}

fn query(store: &Path, sql: &str, op: &str) -> Vec<String> {
    let conn = rusqlite::Connection::open(store).unwrap();
    let mut st = conn.prepare(sql).unwrap();
    st.query_map([op], |r| r.get::<_, String>(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[test]
fn a_passing_before_patch_hook_sees_the_patched_tree_and_the_patch_applies() {
    if skip("a_passing_before_patch_hook_sees_the_patched_tree_and_the_patch_applies") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let hooks = json!({"before_patch": [
        {"command": ["sh", "-c", "grep -q NEW a.txt && test ! -e gone.txt && cat added.txt"],
         "paths": ["*.txt"]},
        {"command": ["false"], "paths": ["*.never"]},
    ]});
    let cfg = config(t.path(), hooks, json!({}));
    let ws = t.path().join("ws");
    std::fs::write(ws.join("a.txt"), "old\n").unwrap();
    std::fs::write(ws.join("gone.txt"), "bye\n").unwrap();
    let mut s = serve(&cfg);
    let body = "*** Update File: a.txt\n@@\n-old\n+NEW\n*** Delete File: gone.txt\n\
                *** Add File: added.txt\n+fresh\n";
    let r = s.tool_ok(
        "apply_patch",
        json!({"workspace_id": "w", "patch": patch(body)}),
    );
    assert_eq!(r["status"], "applied", "{r}");
    let hooks = r["hooks"].as_array().unwrap();
    assert_eq!(hooks.len(), 1, "the *.never hook does not run: {r}");
    assert_eq!(hooks[0]["stage"], "before_patch");
    assert_eq!(hooks[0]["exit_code"], 0, "{r}");
    assert!(
        hooks[0]["output"].as_str().unwrap().contains("fresh"),
        "{r}"
    );
    assert_eq!(read(&ws.join("a.txt")), "NEW\n");
    assert!(!ws.join("gone.txt").exists());
}

#[test]
fn a_failing_before_patch_hook_leaves_every_file_untouched_and_the_operation_failed() {
    if skip("a_failing_before_patch_hook_leaves_every_file_untouched_and_the_operation_failed") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let hooks = json!({"before_patch": [
        {"command": ["sh", "-c", "echo checking; cat a.txt; exit 3"]},
    ]});
    let cfg = config(t.path(), hooks, json!({}));
    let ws = t.path().join("ws");
    std::fs::write(ws.join("a.txt"), "old\n").unwrap();
    std::fs::write(ws.join("gone.txt"), "bye\n").unwrap();
    let mut s = serve(&cfg);
    let body = "*** Update File: a.txt\n@@\n-old\n+NEW\n*** Delete File: gone.txt\n\
                *** Add File: added.txt\n+fresh\n";
    let e = s.tool_err(
        "apply_patch",
        json!({"workspace_id": "w", "patch": patch(body)}),
    );
    assert_eq!(e["code"], "HOOK_FAILED", "{e}");
    let msg = e["message"].as_str().unwrap();
    assert!(
        msg.contains("exited with 3") && msg.contains("checking") && msg.contains("NEW"),
        "the exit code and the output, run on the patched tree: {msg}"
    );
    assert_eq!(read(&ws.join("a.txt")), "old\n");
    assert_eq!(read(&ws.join("gone.txt")), "bye\n");
    assert!(!ws.join("added.txt").exists());
    let op = e["operation_id"].as_str().unwrap().to_string();
    let st = s.tool_ok("operation_status", json!({"operation_id": op}));
    assert_eq!(st["status"], "failed", "{st}");
    s.close_and_wait(Duration::from_secs(30));
    let store = t.path().join("store.db");
    let result = query(
        &store,
        "SELECT result FROM operations WHERE operation_id = ?1",
        &op,
    );
    let result: Value = serde_json::from_str(&result[0]).unwrap();
    assert_eq!(result["hooks"][0]["exit_code"], 3, "{result}");
    assert_eq!(result["error"]["code"], "HOOK_FAILED", "{result}");
}

#[test]
fn a_before_patch_hook_writes_nothing_and_reads_no_masked_secret() {
    if skip("a_before_patch_hook_writes_nothing_and_reads_no_masked_secret") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let ws_abs = t.path().join("ws");
    let script = format!(
        "echo x > a.txt && echo wrote-a; echo y > new.txt && echo wrote-new; \
         rm -f keep.txt && echo removed; echo z > '{}/a.txt' && echo wrote-abs; \
         cat .env; echo done",
        ws_abs.display()
    );
    let hooks = json!({"before_patch": [{"command": ["sh", "-c", script]}]});
    let cfg = config(t.path(), hooks, json!({}));
    std::fs::write(ws_abs.join("a.txt"), "old\n").unwrap();
    std::fs::write(ws_abs.join("keep.txt"), "keep\n").unwrap();
    std::fs::write(ws_abs.join(".env"), "API_KEY=hunter2\n").unwrap();
    let mut s = serve(&cfg);
    let body = "*** Update File: a.txt\n@@\n-old\n+NEW\n";
    let r = s.tool_ok(
        "apply_patch",
        json!({"workspace_id": "w", "patch": patch(body)}),
    );
    assert_eq!(r["status"], "applied", "{r}");
    let out = r["hooks"][0]["output"].as_str().unwrap();
    assert!(out.contains("done"), "{r}");
    for refused in ["wrote-a", "wrote-new", "removed", "wrote-abs", "hunter2"] {
        assert!(!out.contains(refused), "{refused}: {out}");
    }
    assert_eq!(read(&ws_abs.join("a.txt")), "NEW\n", "only the patch wrote");
    assert_eq!(read(&ws_abs.join("keep.txt")), "keep\n");
    assert!(!ws_abs.join("new.txt").exists());
}

#[test]
fn an_after_patch_formatter_change_is_visible_versioned_and_recorded() {
    if skip("an_after_patch_formatter_change_is_visible_versioned_and_recorded") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let hooks = json!({"after_patch": [{
        "command": ["sh", "-c",
            "tr a-z A-Z < src/a.txt > src/a.tmp && mv src/a.tmp src/a.txt && echo formatted; \
             echo z > top.txt && echo wrote-top; exit 1"],
        "paths": ["src/**"],
    }]});
    let cfg = config(t.path(), hooks, json!({}));
    let ws = t.path().join("ws");
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::write(ws.join("src/a.txt"), "old\n").unwrap();
    let mut s = serve(&cfg);
    let body = "*** Update File: src/a.txt\n@@\n-old\n+new text\n";
    let r = s.tool_ok(
        "apply_patch",
        json!({"workspace_id": "w", "patch": patch(body)}),
    );
    assert_eq!(
        r["status"], "applied",
        "a failing after_patch hook is no rollback: {r}"
    );
    let h = &r["hooks"][0];
    assert_eq!(h["stage"], "after_patch", "{r}");
    assert_eq!(h["exit_code"], 1, "{r}");
    let out = h["output"].as_str().unwrap();
    assert!(
        out.contains("formatted") && !out.contains("wrote-top"),
        "{out}"
    );
    assert!(!ws.join("top.txt").exists(), "beyond the patched directory");
    let after = r["changes"][0]["after_version"]
        .as_str()
        .unwrap()
        .to_string();
    let now = s.tool_ok("read", json!({"workspace_id": "w", "path": "src/a.txt"}));
    assert_eq!(now["content"], "NEW TEXT\n", "{now}");
    assert_ne!(
        now["version"], after,
        "the formatter's write is a new version"
    );
    // A patch pinned to the pre-formatter version is refused.
    let stale = s.tool_err(
        "apply_patch",
        json!({"workspace_id": "w", "patch": patch("*** Update File: src/a.txt\n@@\n-NEW TEXT\n+x\n"),
               "expected_versions": {"src/a.txt": after}}),
    );
    assert_eq!(stale["code"], "VERSION_CONFLICT", "{stale}");
    let op = r["operation_id"].as_str().unwrap().to_string();
    s.close_and_wait(Duration::from_secs(30));
    let changed = query(
        &t.path().join("store.db"),
        "SELECT path FROM ledger_files WHERE operation_id = ?1 AND kind = 'changed' \
         AND process_id IS NOT NULL",
        &op,
    );
    assert!(changed.iter().any(|p| p == "src/a.txt"), "{changed:?}");
}

/// The shipped policies and schema with `base/test-hooks.cedar` forbidding every hook.
fn policies_forbidding_hooks(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let policies = dir.join("policies");
    for sub in ["base", "profiles"] {
        std::fs::create_dir_all(policies.join(sub)).unwrap();
        for f in std::fs::read_dir(src.join("policies").join(sub)).unwrap() {
            let p = f.unwrap().path();
            std::fs::copy(&p, policies.join(sub).join(p.file_name().unwrap())).unwrap();
        }
    }
    std::fs::write(
        policies.join("base/test-hooks.cedar"),
        "@id(\"operator.forbid.hooks\")\n@reason(\"no hooks here\")\n\
         forbid (principal, action == CodeSpace::Action::\"hook\", resource);\n",
    )
    .unwrap();
    std::fs::create_dir_all(dir.join("schema")).unwrap();
    std::fs::copy(
        src.join("schema/codespace.cedarschema"),
        dir.join("schema/codespace.cedarschema"),
    )
    .unwrap();
    policies
}

#[test]
fn a_hook_denied_by_policy_never_runs() {
    if skip("a_hook_denied_by_policy_never_runs") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let policies = policies_forbidding_hooks(t.path());
    let hooks = json!({
        "before_patch": [{"command": ["true"], "paths": ["*.md"]}],
        "after_patch": [{"command": ["sh", "-c", "touch ran"], "paths": ["*.txt"]}],
    });
    let cfg = config(t.path(), hooks, json!({"policies": policies}));
    let ws = t.path().join("ws");
    std::fs::write(ws.join("a.txt"), "old\n").unwrap();
    std::fs::write(ws.join("b.md"), "old\n").unwrap();
    let mut s = serve(&cfg);
    // after_patch: the patch stays, the hook is reported denied and did not run.
    let r = s.tool_ok(
        "apply_patch",
        json!({"workspace_id": "w", "patch": patch("*** Update File: a.txt\n@@\n-old\n+new\n")}),
    );
    assert_eq!(r["status"], "applied", "{r}");
    assert_eq!(r["hooks"][0]["error"], "denied", "{r}");
    assert!(r["hooks"][0]["exit_code"].is_null(), "{r}");
    assert!(!ws.join("ran").exists(), "a denied hook ran");
    // before_patch: fail closed, nothing applied.
    let e = s.tool_err(
        "apply_patch",
        json!({"workspace_id": "w", "patch": patch("*** Update File: b.md\n@@\n-old\n+new\n")}),
    );
    assert_eq!(e["code"], "HOOK_FAILED", "{e}");
    assert!(
        e["message"].as_str().unwrap().contains("denied by policy"),
        "{e}"
    );
    assert_eq!(read(&ws.join("b.md")), "old\n");
    s.close_and_wait(Duration::from_secs(30));
    let conn = rusqlite::Connection::open(t.path().join("store.db")).unwrap();
    let denies: i64 = conn
        .query_row(
            "SELECT count(*) FROM decisions WHERE action = 'hook' AND decision = 'deny' \
             AND policy_ids LIKE '%operator.forbid.hooks%'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(denies, 2, "both hooks' denies are audited");
}

#[test]
fn a_hook_with_an_empty_command_or_a_missing_program_or_an_unknown_key_fails_the_load() {
    let t = tempfile::tempdir().unwrap();
    for (hooks, want) in [
        (
            json!({"before_patch": [{"command": []}]}),
            "hooks.before_patch[0].command",
        ),
        (
            json!({"after_patch": [{"command": ["no-such-formatter-cs"]}]}),
            "program `no-such-formatter-cs` not found",
        ),
        (
            json!({"before_patch": [{"command": ["true"], "when": "x"}]}),
            "unknown field `when`",
        ),
        (
            json!({"before_commit": []}),
            "unknown field `before_commit`",
        ),
    ] {
        let cfg = config(t.path(), hooks, json!({}));
        let out = std::process::Command::new(crate::stdio_common::BIN)
            .args(["serve", "--config"])
            .arg(&cfg)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{want}: {err}");
    }
}
