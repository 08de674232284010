//! Secrets withheld from commands too (issue: secret masks and hardlink aliases), end to end
//! through the gateway with the real `codespace` binary as the sandbox helper: under the shipped
//! policy no command reveals `.env` (by any name, copy, link, interpreter or `find -exec`), a
//! policy set that does not withhold it lets commands see it, an operator policy masks a path
//! without code changes, hardlink aliases are refused to `read` and hidden from `find` and from
//! commands, the mask set is in the audit log, and what the listing cannot see is masked whole
//! (an unlistable directory, too many masks coalesced) while later commands still run.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::process_common;

use codespace_engine::{
    Config, ErrorCode, Gateway, PolicySource, PolicyStore, SandboxFacts, Session, ToolCall,
};
use process_common::*;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const SECRET: &str = "hunter2";

/// True (after a skip, which fails under `CODESPACE_REQUIRE_ISOLATION=1`) when masks cannot
/// be enforced on this host.
fn skip(test: &str) -> bool {
    if skip_without_sandbox(test) {
        return true;
    }
    let probe = codespace_runner_sandbox::probe();
    !codespace_test_skip::require(
        probe.masking_available(),
        test,
        format!("no mount namespaces for secret masks ({probe:?})"),
    )
}

/// [`skip`] (the round-3 tests' name for it, from when only they failed under `CI=true`).
fn skip_unless_ci(test: &str) -> bool {
    skip(test)
}

fn python3() -> bool {
    let found = std::process::Command::new("python3")
        .args(["-c", "pass"])
        .status()
        .is_ok_and(|s| s.success());
    codespace_test_skip::require(
        found,
        &codespace_test_skip::this_test(),
        "python3 is not installed",
    )
}

/// `.env`, `sub/.env`, `config/prod.yaml` (secrets) and `notes.txt` (not a secret).
fn plant(root: &Path) {
    std::fs::write(root.join(".env"), format!("PASSWORD={SECRET}\n")).unwrap();
    std::fs::create_dir_all(root.join("sub/deeper")).unwrap();
    std::fs::write(root.join("sub/.env"), format!("TOKEN={SECRET}\n")).unwrap();
    std::fs::create_dir_all(root.join("config")).unwrap();
    std::fs::write(root.join("config/prod.yaml"), "db_password: prod-pw-42\n").unwrap();
    std::fs::write(root.join("notes.txt"), "just notes\n").unwrap();
}

/// Runs `words` to completion once the workspace lease is free (the previous command's exit
/// watcher may still hold it); returns (exit code, all output).
async fn run_free(gw: &Gateway, words: &[&str]) -> (Option<i64>, String) {
    let r = exec_when_free(gw, "w", words).await;
    assert_eq!(
        r["state"], "exited",
        "{words:?} did not finish in time: {r}"
    );
    let mut out = r["chunk"].as_str().unwrap().to_string();
    if r["eof"] != true {
        let id = r["process_id"].as_str().unwrap();
        let (rest, _) = read_all(gw, id, r["cursor"].as_u64().unwrap()).await;
        out.push_str(&rest);
    }
    (r["exit_code"].as_i64(), out)
}

async fn sh(e: &Env, script: &str) -> (Option<i64>, String) {
    run_free(&e.gw, &["sh", "-c", script]).await
}

/// A copy of the shipped policies (and schema) under `dir`, passed through `edit(base, text)`
/// for every base file; `extra` adds base files.
fn policies_copy(dir: &Path, edit: impl Fn(&str) -> String, extra: &[(&str, &str)]) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let policies = dir.join("policies");
    for sub in ["base", "profiles"] {
        std::fs::create_dir_all(policies.join(sub)).unwrap();
        for f in std::fs::read_dir(src.join("policies").join(sub)).unwrap() {
            let f = f.unwrap().path();
            if f.extension().is_some_and(|x| x == "cedar") {
                let text = std::fs::read_to_string(&f).unwrap();
                let text = if sub == "base" { edit(&text) } else { text };
                std::fs::write(policies.join(sub).join(f.file_name().unwrap()), text).unwrap();
            }
        }
    }
    for (name, text) in extra {
        std::fs::write(policies.join("base").join(name), text).unwrap();
    }
    std::fs::create_dir_all(dir.join("schema")).unwrap();
    std::fs::copy(
        src.join("schema/codespace.cedarschema"),
        dir.join("schema/codespace.cedarschema"),
    )
    .unwrap();
    policies
}

/// Removes the policy with `@id(id)` from a policy file's text.
fn without_policy(text: &str, id: &str) -> String {
    let marker = format!("@id(\"{id}\")");
    let start = text.find(&marker).expect("policy present");
    let end = text[start + marker.len()..]
        .find("\n@id(")
        .map_or(text.len(), |i| start + marker.len() + i + 1);
    format!("{}{}", &text[..start], &text[end..])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shipped_policy_hides_secret_files_from_every_command() {
    if skip("shipped_policy_hides_secret_files_from_every_command") {
        return;
    }
    let e = env();
    plant(&e.root);
    std::fs::create_dir(e.root.join("dir-link-target")).unwrap();
    let scripts = [
        "cat .env",
        "cat sub/.env",
        "cp .env x && cat x",
        "ln .env y 2>&1; cat y",
        "find . -name .env -exec cat {} \\;",
        "cd sub && cat .env ../.env",
        "cd sub/deeper && cat ../../.env ../.env",
        "cat sub/deeper/../../.env ./sub/../.env",
        "ln -s .env l && cat l; ln -s sub s2 && cat s2/.env",
        "cat \"$PWD/.env\" \"$PWD/sub/.env\"",
        "cat /proc/$PPID/root\"$PWD\"/.env; cat /proc/$PPID/cwd/.env",
        "umount .env 2>&1; unshare -m cat .env 2>&1; cat .env",
        "grep -r PASSWORD . ; tar cf - . | tar xOf - ./.env",
    ];
    for script in scripts {
        let (_, out) = sh(&e, script).await;
        assert!(
            !out.contains(SECRET),
            "`{script}` revealed the secret: {out}"
        );
    }
    if python3() {
        let (code, out) = run_free(
            &e.gw,
            &["python3", "-c", "print(repr(open('.env').read()))"],
        )
        .await;
        assert_eq!((code, out.as_str()), (Some(0), "''\n"));
    }
    // The `ln` above failed with EXDEV and created nothing; the real files are untouched.
    let (_, out) = sh(&e, "ln .env z 2>&1; echo rc=$?").await;
    assert!(
        out.contains("cross-device") && out.contains("rc=1"),
        "{out}"
    );
    assert!(!e.root.join("z").exists() && !e.root.join("y").exists());
    assert!(
        std::fs::read_to_string(e.root.join(".env"))
            .unwrap()
            .contains(SECRET)
    );
    // What policy does not withhold stays readable.
    let (code, out) = sh(&e, "cat notes.txt config/prod.yaml").await;
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(out, "just notes\ndb_password: prod-pw-42\n");
}

/// Security round 3, item 14: the secret patterns added to `base.forbid.secret-files` (`*.env`,
/// Terraform state and variables, cargo and gh credentials, `credentials.json`, `.vault-token`)
/// are withheld from `read` and masked from commands, with no other change: masks ask the same
/// policy. Near misses (`example.env`, `.cargo/config.toml`) stay visible to both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_three_secret_patterns_are_withheld_from_read_and_masked_from_commands() {
    if skip("round_three_secret_patterns_are_withheld_from_read_and_masked_from_commands") {
        return;
    }
    let e = env();
    let secrets = [
        "prod.env",
        "deploy/staging.env",
        "infra/terraform.tfstate",
        "infra/terraform.tfstate.backup",
        "infra/prod.tfvars",
        ".cargo/credentials.toml",
        ".cargo/credentials",
        "gh/hosts.yml",
        "gcp/credentials.json",
        ".vault-token",
    ];
    for rel in secrets {
        let path = e.root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, format!("token={SECRET}\n")).unwrap();
    }
    std::fs::write(e.root.join("example.env"), "token=placeholder\n").unwrap();
    std::fs::write(e.root.join(".cargo/config.toml"), "[build]\n").unwrap();
    for rel in secrets {
        let (_, out) = sh(&e, &format!("cat {rel} 2>&1; echo end")).await;
        assert!(
            !out.contains(SECRET),
            "`cat {rel}` revealed the secret: {out}"
        );
        assert!(out.ends_with("end\n"), "{out}");
        let err = call(&e.gw, "read", json!({"workspace_id": "w", "path": rel}))
            .await
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::Unauthorized, "{rel}: {}", err.message);
        assert!(
            err.message.contains("base.forbid.secret-files"),
            "{rel}: {}",
            err.message
        );
    }
    let (_, out) = sh(&e, "grep -r token= . ; cat */*.env *.env").await;
    assert!(!out.contains(SECRET), "{out}");
    assert!(out.contains("placeholder"), "{out}");
    let (code, out) = sh(&e, "cat .cargo/config.toml").await;
    assert_eq!((code, out.as_str()), (Some(0), "[build]\n"));
    let ok = call(
        &e.gw,
        "read",
        json!({"workspace_id": "w", "path": "example.env"}),
    )
    .await
    .unwrap();
    assert!(ok.to_string().contains("placeholder"), "{ok}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mask_set_is_in_the_audit_log_without_contents() {
    if skip("the_mask_set_is_in_the_audit_log_without_contents") {
        return;
    }
    let e = env();
    plant(&e.root);
    let (code, _) = run_free(&e.gw, &["true"]).await;
    assert_eq!(code, Some(0));
    let store = e.gw.store().unwrap();
    let rows = store
        .query_decisions(&codespace_store::DecisionQuery {
            tool: Some("exec_command".into()),
            ..Default::default()
        })
        .unwrap();
    let exec_id = &rows
        .iter()
        .find(|r| r.action == "exec_command")
        .unwrap()
        .decision_id;
    let mut masked: Vec<(&str, &Vec<String>)> = rows
        .iter()
        .filter(|r| &r.decision_id == exec_id && r.action == "read")
        .map(|r| (r.subject.as_str(), &r.policy_ids))
        .collect();
    masked.sort();
    let secret_files = vec!["base.forbid.secret-files".to_string()];
    assert_eq!(
        masked,
        vec![(".env", &secret_files), ("sub/.env", &secret_files)],
        "{rows:#?}"
    );
    assert!(
        rows.iter()
            .all(|r| r.decision == codespace_store::MASKED || r.action != "read")
    );
    let dump = format!("{rows:?}");
    assert!(!dump.contains(SECRET), "contents in the audit log");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_set_that_does_not_withhold_env_lets_commands_see_it() {
    if skip("a_policy_set_that_does_not_withhold_env_lets_commands_see_it") {
        return;
    }
    let pdir = tempfile::tempdir().unwrap();
    let policies = policies_copy(
        pdir.path(),
        |t| {
            if t.contains("base.forbid.secret-files") {
                without_policy(t, "base.forbid.secret-files")
            } else {
                t.to_string()
            }
        },
        &[],
    );
    let e = env_with(Opts {
        policies: Some((policies, json!({}))),
        ..Opts::default()
    });
    plant(&e.root);
    let (code, out) = sh(&e, "cat .env sub/.env").await;
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(out.matches(SECRET).count(), 2, "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_policy_withholding_config_prod_yaml_masks_it_without_code_changes() {
    if skip("an_operator_policy_withholding_config_prod_yaml_masks_it_without_code_changes") {
        return;
    }
    let pdir = tempfile::tempdir().unwrap();
    let operator = r#"@id("operator.forbid.prod-config")
@reason("production configuration holds credentials")
forbid (principal, action in [CodeSpace::Action::"fs_read", CodeSpace::Action::"fs_write"], resource)
when { resource.path == "config/prod.yaml" };
"#;
    let policies = policies_copy(pdir.path(), str::to_string, &[("operator.cedar", operator)]);
    let e = env_with(Opts {
        policies: Some((policies, json!({}))),
        ..Opts::default()
    });
    plant(&e.root);
    let (_, out) = sh(
        &e,
        "cat config/prod.yaml; cd config && cat prod.yaml ./../config/prod.yaml",
    )
    .await;
    assert!(!out.contains("prod-pw-42"), "{out}");
    let err = call(
        &e.gw,
        "read",
        json!({"workspace_id": "w", "path": "config/prod.yaml"}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::Unauthorized);
    assert!(
        err.message.contains("operator.forbid.prod-config"),
        "{}",
        err.message
    );
    // The rest of config/ is not masked.
    std::fs::write(e.root.join("config/dev.yaml"), "db_password: dev\n").unwrap();
    let (_, out) = sh(&e, "cat config/dev.yaml").await;
    assert_eq!(out, "db_password: dev\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hardlink_alias_of_a_secret_is_refused_to_read_hidden_from_find_and_masked() {
    if skip("a_hardlink_alias_of_a_secret_is_refused_to_read_hidden_from_find_and_masked") {
        return;
    }
    let e = env();
    plant(&e.root);
    // Made outside the server (a command cannot: see the EXDEV case).
    std::fs::hard_link(e.root.join(".env"), e.root.join("notes-copy.txt")).unwrap();
    let err = call(
        &e.gw,
        "read",
        json!({"workspace_id": "w", "path": "notes-copy.txt"}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::Unauthorized, "{}", err.message);
    assert!(
        err.message.contains("base.forbid.hardlinked-files"),
        "{}",
        err.message
    );
    assert_eq!(
        err.policy_ids.as_deref(),
        Some(&["base.forbid.hardlinked-files".to_string()][..])
    );
    assert!(!err.message.contains(SECRET));
    // find lists an entry iff it can be read.
    let listed = call(&e.gw, "find", json!({"workspace_id": "w"}))
        .await
        .unwrap();
    let paths: Vec<&str> = listed["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert!(
        !paths.contains(&"notes-copy.txt") && !paths.contains(&".env"),
        "{paths:?}"
    );
    assert!(paths.contains(&"notes.txt"), "{paths:?}");
    // The alias is masked from commands too (same inode as a masked file).
    let (_, out) = sh(&e, "cat notes-copy.txt; cat notes.txt").await;
    assert_eq!(out, "just notes\n");
    // A file with one name is read as before.
    let ok = call(
        &e.gw,
        "read",
        json!({"workspace_id": "w", "path": "notes.txt"}),
    )
    .await
    .unwrap();
    assert_eq!(ok["content"], "just notes\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_cannot_create_a_hardlink_alias_for_the_read_tool() {
    if skip("a_command_cannot_create_a_hardlink_alias_for_the_read_tool") {
        return;
    }
    let e = env();
    plant(&e.root);
    let (_, out) = sh(
        &e,
        "ln .env notes2.txt 2>&1; ln sub/.env sub/n 2>&1; echo end",
    )
    .await;
    assert!(out.contains("cross-device"), "{out}");
    let err = call(
        &e.gw,
        "read",
        json!({"workspace_id": "w", "path": "notes2.txt"}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::FileNotFound, "{}", err.message);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workspace_info_reports_secret_masking_and_off_shows_every_file() {
    if skip("workspace_info_reports_secret_masking_and_off_shows_every_file") {
        return;
    }
    let e = env();
    let info = call(&e.gw, "workspace_info", json!({"workspace_id": "w"}))
        .await
        .unwrap();
    assert_eq!(
        info["execution"]["isolation"]["secret_masking"], "enforced",
        "{info}"
    );
    let off = env_with(Opts {
        secret_masking: Some("off"),
        ..Opts::default()
    });
    plant(&off.root);
    let info = call(&off.gw, "workspace_info", json!({"workspace_id": "w"}))
        .await
        .unwrap();
    assert_eq!(info["execution"]["isolation"]["secret_masking"], "off");
    let (_, out) = sh(&off, "cat .env").await;
    assert!(out.contains(SECRET), "opted out: {out}");
    // The file tools still withhold it.
    let err = call(
        &off.gw,
        "read",
        json!({"workspace_id": "w", "path": ".env"}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::Unauthorized);
}

/// Paths of a `find` of everything (type any) in `w`.
async fn find_all(e: &Env) -> Vec<String> {
    let r = call(&e.gw, "find", json!({"workspace_id": "w", "type": "any"}))
        .await
        .unwrap();
    r["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_string())
        .collect()
}

/// `n` nested directories named `d` (a relative path).
fn chain(name: &str, n: usize) -> String {
    vec![name; n].join("/")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deep_chain_masks_only_its_subtree_and_later_commands_still_run() {
    // Security round 3, item 13: a 65-level chain used to refuse every later command.
    if skip_unless_ci("a_deep_chain_masks_only_its_subtree_and_later_commands_still_run") {
        return;
    }
    let e = env();
    plant(&e.root);
    let deep = chain("d", 70);
    std::fs::create_dir_all(e.root.join(&deep)).unwrap();
    std::fs::write(e.root.join(&deep).join(".env"), format!("X={SECRET}\n")).unwrap();
    std::fs::write(e.root.join(&deep).join("plain.txt"), "deep plain\n").unwrap();
    // A command can make such a chain too.
    let (code, out) = sh(&e, &format!("mkdir -p {} && echo made", chain("e", 70))).await;
    assert_eq!((code, out.as_str()), (Some(0), "made\n"));
    let (code, out) = sh(
        &e,
        &format!("touch ran; cat notes.txt; cat {deep}/.env {deep}/plain.txt; echo end"),
    )
    .await;
    assert_eq!(code, Some(0), "{out}");
    assert!(!out.contains(SECRET), "{out}");
    assert!(
        !out.contains("deep plain"),
        "the unlisted subtree is masked whole: {out}"
    );
    assert!(
        out.contains("just notes\n") && out.contains("end\n"),
        "{out}"
    );
    assert!(e.root.join("ran").exists());
    // The operator is told what to remove.
    let events =
        e.gw.store()
            .unwrap()
            .events(Some("masks_widened"), 10)
            .unwrap();
    let text = format!("{events:?}");
    assert!(text.contains("deeper than 64 levels"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_that_is_not_utf8_masks_its_directory_and_later_commands_still_run() {
    if skip_unless_ci("a_name_that_is_not_utf8_masks_its_directory_and_later_commands_still_run") {
        return;
    }
    use std::os::unix::ffi::OsStrExt;
    let e = env();
    plant(&e.root);
    let odd = e
        .root
        .join("vendor")
        .join(std::ffi::OsStr::from_bytes(b"caf\xe9"));
    std::fs::create_dir_all(&odd).unwrap();
    std::fs::write(odd.join(".env"), format!("X={SECRET}\n")).unwrap();
    std::fs::write(e.root.join("vendor/lib.txt"), "vendored\n").unwrap();
    // A command can make one too (in a directory of its own).
    let (code, _) = sh(&e, "mkdir -p junk && touch \"junk/$(printf 'x\\377')\"").await;
    assert_eq!(code, Some(0));
    let (code, out) = sh(
        &e,
        "touch ran; cat notes.txt vendor/*/.env vendor/lib.txt; echo end",
    )
    .await;
    assert!(!out.contains(SECRET), "{out}");
    assert!(!out.contains("vendored"), "vendor/ is masked whole: {out}");
    assert!(
        out.contains("just notes\n") && out.contains("end\n"),
        "{out}"
    );
    assert!(code.is_some(), "{out}");
    assert!(e.root.join("ran").exists());
    let events =
        e.gw.store()
            .unwrap()
            .events(Some("masks_widened"), 10)
            .unwrap();
    let text = format!("{events:?}");
    assert!(
        text.contains("vendor") && text.contains("not UTF-8"),
        "{text}"
    );
    // At the top level the directory to mask would be the root: every top-level entry whose
    // name is not UTF-8 is masked instead, and later commands still run. A command makes one,
    // holding a secret; the next commands cannot read it (nor the one made before them).
    std::fs::write(
        e.root.join(std::ffi::OsStr::from_bytes(b"top\xff")),
        format!("{SECRET}\n"),
    )
    .unwrap();
    let (code, _) = sh(
        &e,
        &format!("printf '{SECRET}\\n' > \"$(printf 'made\\376')\"; mkdir \"$(printf 'd\\375')\" && printf '{SECRET}\\n' > \"$(printf 'd\\375')/k\""),
    )
    .await;
    assert_eq!(code, Some(0));
    assert!(
        std::fs::read_to_string(e.root.join(std::ffi::OsStr::from_bytes(b"made\xfe")))
            .unwrap()
            .contains(SECRET)
    );
    let (code, out) = sh(
        &e,
        "touch ran2; cat \"$(printf 'top\\377')\" \"$(printf 'made\\376')\" \
         \"$(printf 'd\\375')/k\" notes.txt; echo end",
    )
    .await;
    assert!(!out.contains(SECRET), "{out}");
    assert!(
        out.contains("just notes\n") && out.contains("end\n"),
        "{out}"
    );
    assert!(code.is_some(), "{out}");
    assert!(e.root.join("ran2").exists());
    let events =
        e.gw.store()
            .unwrap()
            .events(Some("masks_widened"), 10)
            .unwrap();
    let text = format!("{events:?}");
    assert!(text.contains("top level"), "{text}");
    assert!(!text.contains(e.root.to_str().unwrap()), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_withheld_files_than_masks_are_coalesced_and_later_commands_still_run() {
    if skip_unless_ci("more_withheld_files_than_masks_are_coalesced_and_later_commands_still_run") {
        return;
    }
    let e = env();
    plant(&e.root);
    std::fs::create_dir_all(e.root.join("certs/many")).unwrap();
    for i in 0..1100 {
        std::fs::write(
            e.root.join(format!("certs/many/k{i}.pem")),
            format!("{SECRET}\n"),
        )
        .unwrap();
    }
    std::fs::write(e.root.join("certs/many/README"), "about the keys\n").unwrap();
    std::fs::write(e.root.join("certs/other.txt"), "other\n").unwrap();
    let (code, out) = sh(
        &e,
        "touch ran; cat notes.txt certs/many/k7.pem certs/many/k1099.pem certs/many/README \
         certs/other.txt .env; echo end",
    )
    .await;
    assert!(code.is_some(), "{out}");
    assert!(!out.contains(SECRET), "{out}");
    assert!(
        !out.contains("about the keys"),
        "a coalesced directory hides its other files too: {out}"
    );
    assert!(
        out.contains("just notes\n") && out.contains("other\n"),
        "{out}"
    );
    assert!(e.root.join("ran").exists());
    let events =
        e.gw.store()
            .unwrap()
            .events(Some("masks_widened"), 10)
            .unwrap();
    let text = format!("{events:?}");
    assert!(
        text.contains("certs/many") && text.contains("1024"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_renamed_to_a_server_temp_name_stays_listed_and_masked() {
    // Security round 3, item 2: only the server's own regular temp files are hidden.
    if skip_unless_ci("a_directory_renamed_to_a_server_temp_name_stays_listed_and_masked") {
        return;
    }
    let e = env();
    std::fs::create_dir(e.root.join("config")).unwrap();
    std::fs::write(e.root.join("config/.env"), format!("PASSWORD={SECRET}\n")).unwrap();
    std::fs::write(e.root.join("config/app.toml"), "name = \"needle-app\"\n").unwrap();
    // The path index is built and kept by the watcher before the rename, as on a live server.
    assert!(find_all(&e).await.contains(&"config/app.toml".to_string()));
    assert!(find_all(&e).await.contains(&"config/app.toml".to_string()));
    let (code, _) = run_free(&e.gw, &["true"]).await;
    assert_eq!(code, Some(0));
    // The live instance id (a command can learn it by watching any apply_patch's temp file).
    let live = e.gw.temp_names().instance().to_string();
    let hidden = format!(".codespace-tmp-{live}-7");
    let (_, out) = sh(&e, &format!("mv config {hidden} 2>&1; echo rc=$?")).await;
    if !out.contains("rc=0") {
        // Refused inside commands (a mask's ancestors may not be renamed there): the user can
        // still do it outside the server, and the index must behave the same.
        assert!(out.contains("busy"), "{out}");
        std::fs::rename(e.root.join("config"), e.root.join(&hidden)).unwrap();
    }
    let app = format!("{hidden}/app.toml");
    let env_path = format!("{hidden}/.env");
    let listed = find_all(&e).await;
    assert!(
        listed.contains(&hidden) && listed.contains(&app),
        "{listed:?}"
    );
    assert!(!listed.contains(&env_path), "{listed:?}");
    let g = call(
        &e.gw,
        "grep",
        json!({"workspace_id": "w", "pattern": "needle-app", "respect_gitignore": false}),
    )
    .await
    .unwrap();
    assert_eq!(g["matches"][0]["path"], app.as_str(), "{g}");
    let ff = call(
        &e.gw,
        "find_files",
        json!({"workspace_id": "w", "query": "app.toml"}),
    )
    .await
    .unwrap();
    assert_eq!(ff["matches"][0]["path"], app.as_str(), "{ff}");
    let err = call(
        &e.gw,
        "read",
        json!({"workspace_id": "w", "path": env_path}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::Unauthorized, "{}", err.message);
    let (_, out) = sh(&e, &format!("cat {env_path} {app}")).await;
    assert!(
        !out.contains(SECRET),
        "the renamed secret is unmasked: {out}"
    );
    assert!(out.contains("needle-app"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn where_masks_cannot_be_enforced_the_shipped_guardrail_refuses_exec() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap().join("ws");
    std::fs::create_dir(&root).unwrap();
    let cfg = json!({"workspaces": {"w": {"root": root}}}).to_string();
    let gw = Gateway::new(
        Config::from_json(&cfg, Path::new("/")).unwrap(),
        Arc::new(PolicyStore::load(PolicySource::Embedded).unwrap()),
        Some(Arc::new(
            codespace_store::Store::open(&dir.path().join("s.db")).unwrap(),
        )),
        SandboxFacts {
            sandbox_enforced: true,
            network_enforced: true,
            masking_enforced: false,
        },
    )
    .unwrap()
    .with_helper_exe(PathBuf::from(BIN));
    let s = Session::stdio();
    let exec = json!({"workspace_id": "w", "command": ["true"]});
    let err = gw
        .call(&s, ToolCall::parse("exec_command", &exec).unwrap())
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Unauthorized);
    assert_eq!(
        err.policy_ids.as_deref(),
        Some(&["base.forbid.exec-without-secret-masking".to_string()][..])
    );
    let info = gw
        .call(
            &s,
            ToolCall::parse("workspace_info", &json!({"workspace_id": "w"})).unwrap(),
        )
        .await
        .unwrap();
    let info = serde_json::to_value(info).unwrap();
    assert_eq!(
        info["execution"]["isolation"]["secret_masking"],
        "unavailable"
    );
    assert_eq!(info["execution"]["permissions"]["exec"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_read_decision_does_not_outlive_a_new_hardlink() {
    // No sandbox needed: this is the read tool and the decision cache.
    let e = env();
    std::fs::write(e.root.join("a.txt"), "a\n").unwrap();
    let args = json!({"workspace_id": "w", "path": "a.txt"});
    let ok = call(&e.gw, "read", args.clone()).await.unwrap();
    assert_eq!(ok["content"], "a\n");
    // The same path, the same policy set: only the link count changed.
    std::fs::hard_link(e.root.join("a.txt"), e.root.join("b.txt")).unwrap();
    let err = call(&e.gw, "read", args.clone()).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Unauthorized, "{}", err.message);
    assert!(
        err.message.contains("base.forbid.hardlinked-files"),
        "{}",
        err.message
    );
    let listed = call(&e.gw, "find", json!({"workspace_id": "w"}))
        .await
        .unwrap();
    assert_eq!(listed["paths"], json!([]), "{listed}");
    assert_eq!(listed["withheld"], 2);
    std::fs::remove_file(e.root.join("b.txt")).unwrap();
    let ok = call(&e.gw, "read", args).await.unwrap();
    assert_eq!(ok["content"], "a\n");
}
