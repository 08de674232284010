//! End-to-end over MCP, in process: an rmcp client talks to `CodeSpaceServer` over a duplex pipe,
//! with a real gateway (embedded policies, SQLite store) on a temporary workspace.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use codespace_engine::tool_names;
use codespace_tests::{Harness, Options, WS, make_fifo, null_pointers, write_file};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::path::Path;

fn basic(root: &Path) -> anyhow::Result<()> {
    write_file(root, "a.txt", "hello\n")?;
    write_file(root, "digits.txt", "0123456789")?;
    write_file(root, "src/main.rs", "fn main() {}\n")?;
    write_file(root, "src/lib.rs", "//! lib\n")?;
    write_file(root, ".hidden/inner.txt", "h\n")?;
    Ok(())
}

fn is_version(v: &Value) -> bool {
    v.as_str().is_some_and(|s| {
        s.strip_prefix("sha256:")
            .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
    })
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| (*s).to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initialize_negotiates_2025_11_25_with_identity_and_instructions() {
    let h = Harness::start(basic).await.unwrap();
    let info = h.client.peer_info().expect("server info after initialize");
    assert_eq!(info.protocol_version.as_str(), "2025-11-25");
    let server = info.server_info.as_ref().expect("serverInfo");
    assert_eq!(server.name, "codespace");
    assert!(!server.version.is_empty());
    let instructions = info.instructions.as_deref().unwrap_or_default();
    assert!(instructions.len() > 100, "instructions: {instructions:?}");
    assert!(instructions.contains("Cedar"), "{instructions}");
    assert!(
        instructions.to_lowercase().contains("model"),
        "{instructions}"
    );
    assert!(info.capabilities.tools.is_some(), "tools capability");
    h.check_no_absolute_paths().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_list_is_the_implemented_tools_each_with_description_and_schemas() {
    let h = Harness::start(basic).await.unwrap();
    let tools = h.client.list_all_tools().await.unwrap();
    let names: BTreeSet<String> = tools.iter().map(|t| t.name.to_string()).collect();
    let want: BTreeSet<String> = tool_names().iter().map(|s| s.to_string()).collect();
    assert_eq!(names, want);
    assert_eq!(tools.len(), tool_names().len(), "no duplicates");
    for t in &tools {
        let d = t.description.as_deref().unwrap_or_default();
        assert!(d.len() > 20, "{}: description {d:?}", t.name);
        assert_eq!(
            t.input_schema.get("type").and_then(Value::as_str),
            Some("object"),
            "{}: inputSchema {:?}",
            t.name,
            t.input_schema
        );
        let out = t
            .output_schema
            .as_ref()
            .unwrap_or_else(|| panic!("{}: no outputSchema", t.name));
        assert_eq!(
            out.get("type").and_then(Value::as_str),
            Some("object"),
            "{}: outputSchema",
            t.name
        );
    }
    // The read tool's input schema names its fields.
    let read = tools.iter().find(|t| t.name == "read").unwrap();
    let props = read.input_schema.get("properties").unwrap();
    for f in ["workspace_id", "path", "offset", "limit"] {
        assert!(props.get(f).is_some(), "read inputSchema lacks {f}");
    }
    h.check_no_absolute_paths().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_returns_content_version_and_omits_optional_fields() {
    let h = Harness::start(basic).await.unwrap();
    let r = h
        .ok("read", json!({"workspace_id": WS, "path": "a.txt"}))
        .await
        .unwrap();
    assert_eq!(r["path"], "a.txt");
    assert_eq!(r["content"], "hello\n");
    assert_eq!(r["content_lossy"], false);
    assert_eq!(r["truncated"], false);
    assert_eq!(r["byte_count"], 6);
    assert!(is_version(&r["version"]), "version {}", r["version"]);
    assert_eq!(
        keys(&r),
        set(&[
            "path",
            "content",
            "content_lossy",
            "version",
            "truncated",
            "byte_count"
        ]),
        "offset/next_offset are omitted on a whole read: {r}"
    );
    assert!(null_pointers(&r).is_empty(), "nulls in {r}");

    // Normalized path; same file, same version. A change gives a new version.
    let r2 = h
        .ok(
            "read",
            json!({"workspace_id": WS, "path": "./src//main.rs"}),
        )
        .await
        .unwrap();
    assert_eq!(r2["path"], "src/main.rs");
    let again = h
        .ok("read", json!({"workspace_id": WS, "path": "a.txt"}))
        .await
        .unwrap();
    assert_eq!(again["version"], r["version"]);
    write_file(&h.root, "a.txt", "hello, changed\n").unwrap();
    let changed = h
        .ok("read", json!({"workspace_id": WS, "path": "a.txt"}))
        .await
        .unwrap();
    assert_ne!(changed["version"], r["version"]);
    h.check_no_absolute_paths().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_pages_with_offset_limit_and_next_offset() {
    let h = Harness::start(basic).await.unwrap();
    let args = |offset: Option<u64>, limit: u64| {
        let mut a = json!({"workspace_id": WS, "path": "digits.txt", "limit": limit});
        if let Some(o) = offset {
            a["offset"] = json!(o);
        }
        a
    };
    let p1 = h.ok("read", args(None, 4)).await.unwrap();
    assert_eq!(p1["content"], "0123");
    assert_eq!(p1["truncated"], true);
    assert_eq!(p1["next_offset"], 4);
    assert_eq!(p1["byte_count"], 4);
    assert!(p1.get("offset").is_none(), "offset 0 is omitted: {p1}");

    let p2 = h.ok("read", args(Some(4), 4)).await.unwrap();
    assert_eq!(p2["content"], "4567");
    assert_eq!(p2["offset"], 4);
    assert_eq!(p2["next_offset"], 8);
    assert_eq!(p2["truncated"], true);

    let p3 = h.ok("read", args(Some(8), 4)).await.unwrap();
    assert_eq!(p3["content"], "89");
    assert_eq!(p3["offset"], 8);
    assert_eq!(p3["truncated"], false);
    assert_eq!(p3["byte_count"], 2);
    assert!(
        p3.get("next_offset").is_none(),
        "no next_offset at the end: {p3}"
    );

    // Every window carries the version of the whole file.
    assert_eq!(p1["version"], p2["version"]);
    assert_eq!(p2["version"], p3["version"]);
    for p in [&p1, &p2, &p3] {
        assert!(null_pointers(p).is_empty(), "nulls in {p}");
    }
    h.check_no_absolute_paths().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_of_invalid_utf8_is_lossy() {
    let h = Harness::start(|root| write_file(root, "bin.dat", [0x66u8, 0xff, 0xfe, 0x6f]))
        .await
        .unwrap();
    let r = h
        .ok("read", json!({"workspace_id": WS, "path": "bin.dat"}))
        .await
        .unwrap();
    assert_eq!(r["content_lossy"], true);
    assert_eq!(r["byte_count"], 4);
    assert!(r["content"].as_str().unwrap().contains('\u{fffd}'));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn find_lists_sorted_relative_paths_and_filters_by_glob() {
    let h = Harness::start(basic).await.unwrap();
    let all = h.ok("find", json!({"workspace_id": WS})).await.unwrap();
    let paths: Vec<&str> = all["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        vec![
            ".hidden/inner.txt",
            "a.txt",
            "digits.txt",
            "src/lib.rs",
            "src/main.rs"
        ]
    );
    assert_eq!(all["truncated"], false);
    assert_eq!(all["incomplete"], false);
    assert_eq!(all["withheld"], 0);
    assert!(is_version(&all["listing_version"]));
    assert!(
        all.get("offset").is_none() && all.get("next_offset").is_none(),
        "{all}"
    );
    assert!(null_pointers(&all).is_empty(), "nulls in {all}");

    let rs = h
        .ok("find", json!({"workspace_id": WS, "glob": "**/*.rs"}))
        .await
        .unwrap();
    assert_eq!(rs["paths"], json!(["src/lib.rs", "src/main.rs"]));
    let txt = h
        .ok("find", json!({"workspace_id": WS, "glob": "*.txt"}))
        .await
        .unwrap();
    assert_eq!(
        txt["paths"],
        json!([".hidden/inner.txt", "a.txt", "digits.txt"]),
        "a glob without / matches the file name at any depth"
    );
    h.check_no_absolute_paths().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn find_pages_with_offset_limit_and_next_offset() {
    let h = Harness::start(|root| {
        for i in 0..5 {
            write_file(root, &format!("f{i}.txt"), "x")?;
        }
        Ok(())
    })
    .await
    .unwrap();
    let full = h.ok("find", json!({"workspace_id": WS})).await.unwrap();
    let p1 = h
        .ok("find", json!({"workspace_id": WS, "limit": 2}))
        .await
        .unwrap();
    assert_eq!(p1["paths"], json!(["f0.txt", "f1.txt"]));
    assert_eq!(p1["truncated"], true);
    assert_eq!(p1["next_offset"], 2);
    assert!(p1.get("offset").is_none());
    let p2 = h
        .ok("find", json!({"workspace_id": WS, "offset": 2, "limit": 2}))
        .await
        .unwrap();
    assert_eq!(p2["paths"], json!(["f2.txt", "f3.txt"]));
    assert_eq!(p2["offset"], 2);
    assert_eq!(p2["next_offset"], 4);
    let p3 = h
        .ok("find", json!({"workspace_id": WS, "offset": 4, "limit": 2}))
        .await
        .unwrap();
    assert_eq!(p3["paths"], json!(["f4.txt"]));
    assert_eq!(p3["truncated"], false);
    assert!(p3.get("next_offset").is_none(), "{p3}");
    for p in [&p1, &p2, &p3] {
        assert_eq!(p["listing_version"], full["listing_version"]);
        assert!(null_pointers(p).is_empty(), "nulls in {p}");
    }
    // A change to the listing changes listing_version.
    write_file(&h.root, "f5.txt", "x").unwrap();
    let after = h.ok("find", json!({"workspace_id": WS})).await.unwrap();
    assert_ne!(after["listing_version"], full["listing_version"]);
    h.check_no_absolute_paths().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_workspace_is_workspace_not_found_for_every_tool() {
    let h = Harness::start(basic).await.unwrap();
    for (tool, args) in [
        ("read", json!({"workspace_id": "nope", "path": "a.txt"})),
        ("find", json!({"workspace_id": "nope"})),
        ("workspace_info", json!({"workspace_id": "nope"})),
    ] {
        let body = h.err(tool, args).await.unwrap();
        assert_eq!(body["code"], "WORKSPACE_NOT_FOUND", "{tool}: {body}");
        assert!(body["message"].as_str().unwrap().contains("nope"), "{body}");
    }
    h.check_no_absolute_paths().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_paths_are_path_escape() {
    let h = Harness::start(basic).await.unwrap();
    for path in ["../x", "src/../../x", "..", "/etc/passwd", "a\0b", ""] {
        let code = h
            .err_code("read", json!({"workspace_id": WS, "path": path}))
            .await
            .unwrap();
        assert_eq!(code, "PATH_ESCAPE", "path {path:?}");
    }
    h.check_no_absolute_paths().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absolute_input_path_is_refused_without_echoing_it() {
    // A client that guesses the root and sends it must not get it confirmed on the wire.
    let h = Harness::start(basic).await.unwrap();
    let abs = h.root.join("a.txt").display().to_string();
    let body = h
        .err("read", json!({"workspace_id": WS, "path": abs}))
        .await
        .unwrap();
    assert_eq!(body["code"], "PATH_ESCAPE");
    h.check_no_absolute_paths().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_and_non_directory_paths() {
    let h = Harness::start(basic).await.unwrap();
    for path in ["missing.txt", "nodir/missing.txt"] {
        let code = h
            .err_code("read", json!({"workspace_id": WS, "path": path}))
            .await
            .unwrap();
        assert_eq!(code, "FILE_NOT_FOUND", "{path}");
    }
    let code = h
        .err_code("read", json!({"workspace_id": WS, "path": "a.txt/inner"}))
        .await
        .unwrap();
    assert_eq!(code, "PATH_NOT_DIRECTORY");
    h.check_no_absolute_paths().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn symlinks_are_rejected_as_leaf_and_as_ancestor() {
    let h = Harness::start(|root| {
        basic(root)?;
        std::os::unix::fs::symlink("a.txt", root.join("leaf-link"))?;
        std::os::unix::fs::symlink("src", root.join("dir-link"))?;
        std::os::unix::fs::symlink("/etc", root.join("etc-link"))?;
        Ok(())
    })
    .await
    .unwrap();
    for path in [
        "leaf-link",
        "dir-link/main.rs",
        "etc-link/hostname",
        "etc-link",
    ] {
        let body = h
            .err("read", json!({"workspace_id": WS, "path": path}))
            .await
            .unwrap();
        assert_eq!(body["code"], "SYMLINK_REJECTED", "{path}: {body}");
    }
    // find lists symlinks but never follows them.
    let all = h.ok("find", json!({"workspace_id": WS})).await.unwrap();
    let paths: Vec<&str> = all["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert!(
        !paths
            .iter()
            .any(|p| p.starts_with("dir-link/") || p.starts_with("etc-link/"))
    );
    h.check_no_absolute_paths().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifos_and_directories_are_special_files() {
    let h = Harness::start(|root| {
        basic(root)?;
        make_fifo(root, "pipe")
    })
    .await
    .unwrap();
    for path in ["pipe", "src", "."] {
        let body = h
            .err("read", json!({"workspace_id": WS, "path": path}))
            .await
            .unwrap();
        assert_eq!(body["code"], "SPECIAL_FILE_REJECTED", "{path}: {body}");
    }
    h.check_no_absolute_paths().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_out_of_range_are_output_limit() {
    let h = Harness::start(basic).await.unwrap();
    let cases = [
        (
            "read",
            json!({"workspace_id": WS, "path": "a.txt", "limit": 0}),
        ),
        (
            "read",
            json!({"workspace_id": WS, "path": "a.txt", "limit": 1_048_577}),
        ),
        ("find", json!({"workspace_id": WS, "limit": 0})),
        ("find", json!({"workspace_id": WS, "limit": 10_001})),
    ];
    for (tool, args) in cases {
        let code = h.err_code(tool, args.clone()).await.unwrap();
        assert_eq!(code, "OUTPUT_LIMIT", "{tool} {args}");
    }
    // The maxima themselves are fine.
    h.ok(
        "read",
        json!({"workspace_id": WS, "path": "a.txt", "limit": 1_048_576}),
    )
    .await
    .unwrap();
    h.ok("find", json!({"workspace_id": WS, "limit": 10_000}))
        .await
        .unwrap();
    h.check_no_absolute_paths().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_invalid_arguments_are_invalid_arguments_naming_the_field() {
    let h = Harness::start(basic).await.unwrap();
    let cases = [
        ("read", json!({"workspace_id": WS}), "path"),
        ("read", json!({"path": "a.txt"}), "workspace_id"),
        (
            "read",
            json!({"workspace_id": WS, "path": 5}),
            "invalid type",
        ),
        (
            "read",
            json!({"workspace_id": WS, "path": "a.txt", "offset": "x"}),
            "invalid type",
        ),
        (
            "read",
            json!({"workspace_id": WS, "path": "a.txt", "limit": -1}),
            "invalid",
        ),
        (
            "find",
            json!({"workspace_id": WS, "glob": 7}),
            "invalid type",
        ),
        (
            "find",
            json!({"workspace_id": WS, "glob": "src/[a"}),
            "glob",
        ),
        ("workspace_info", json!({"workspace_id": 1}), "invalid type"),
    ];
    for (tool, args, needle) in cases {
        let body = h.err(tool, args.clone()).await.unwrap();
        assert_eq!(body["code"], "INVALID_ARGUMENTS", "{tool} {args}: {body}");
        let msg = body["message"].as_str().unwrap();
        assert!(
            msg.contains(needle),
            "{tool} {args}: message {msg:?} lacks {needle:?}"
        );
    }
    h.check_no_absolute_paths().unwrap();
}

/// Checks an UNAUTHORIZED ErrorBody and returns its decision id.
fn assert_unauthorized(body: &Value, policy: &str) -> String {
    assert_eq!(body["code"], "UNAUTHORIZED", "{body}");
    let id = body["decision_id"]
        .as_str()
        .expect("decision_id")
        .to_string();
    assert!(!id.is_empty());
    let ids = body["policy_ids"].as_array().expect("policy_ids");
    assert!(
        ids.iter().any(|p| p == policy),
        "policy_ids {ids:?} lack {policy}"
    );
    assert!(
        body["message"].as_str().unwrap().contains(policy),
        "the message names the policy and its reason: {body}"
    );
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_files_are_unauthorized_under_read_only_and_workspace_write() {
    for profile in ["read-only", "workspace-write"] {
        let h = Harness::with_profile(profile, |root| {
            basic(root)?;
            write_file(root, ".env", "SECRET=1\n")?;
            write_file(root, "app/.env.production", "SECRET=2\n")
        })
        .await
        .unwrap();
        for path in [".env", "app/.env.production"] {
            let body = h
                .err("read", json!({"workspace_id": WS, "path": path}))
                .await
                .unwrap();
            assert_unauthorized(&body, "base.forbid.secret-files");
            assert!(
                !body.to_string().contains("SECRET="),
                "{profile}: denial leaks content"
            );
        }
        // The same profile may read ordinary files.
        h.ok("read", json!({"workspace_id": WS, "path": "a.txt"}))
            .await
            .unwrap();
        assert!(
            !h.wire_text().contains("SECRET="),
            "{profile}: secret on the wire"
        );
        h.check_no_absolute_paths().unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_cannot_patch() {
    let h = Harness::with_profile("read-only", basic).await.unwrap();
    let args = json!({
        "workspace_id": WS,
        "patch": "*** Begin Patch\n*** Add File: new.txt\n+x\n*** End Patch\n",
    });
    if tool_names().contains(&"apply_patch") {
        let body = h.err("apply_patch", args).await.unwrap();
        assert_eq!(body["code"], "UNAUTHORIZED", "{body}");
        assert!(body["decision_id"].as_str().is_some_and(|s| !s.is_empty()));
        assert!(body["policy_ids"].is_array(), "{body}");
        assert!(
            body["message"].as_str().unwrap().contains("read-only"),
            "a default deny names the profile: {body}"
        );
    } else {
        let err = h.call("apply_patch", args).await;
        assert!(err.is_err(), "an unserved tool is a JSON-RPC error");
    }
    assert!(!h.root.join("new.txt").exists(), "nothing was written");
    h.check_no_absolute_paths().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_owned_config_inside_the_workspace_is_unauthorized_and_withheld() {
    let opts = Options {
        config_in_workspace: true,
        ..Options::default()
    };
    let h = Harness::start_with(opts, basic).await.unwrap();
    let body = h
        .err(
            "read",
            json!({"workspace_id": WS, "path": "codespace.json"}),
        )
        .await
        .unwrap();
    assert_unauthorized(&body, "base.forbid.server-owned-files");
    let all = h.ok("find", json!({"workspace_id": WS})).await.unwrap();
    assert!(
        !all["paths"]
            .as_array()
            .unwrap()
            .contains(&json!("codespace.json"))
    );
    assert_eq!(all["withheld"], 1);
    h.check_no_absolute_paths().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn find_withholds_what_policy_would_not_let_the_caller_read() {
    let h = Harness::start(|root| {
        basic(root)?;
        write_file(root, ".env", "S=1")?;
        write_file(root, "app/.env.local", "S=2")?;
        write_file(root, ".env.example", "S=")?;
        write_file(root, "keys/server.pem", "k")
    })
    .await
    .unwrap();
    let all = h.ok("find", json!({"workspace_id": WS})).await.unwrap();
    let paths: Vec<&str> = all["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    for hidden in [".env", "app/.env.local", "keys/server.pem"] {
        assert!(!paths.contains(&hidden), "{hidden} listed: {paths:?}");
    }
    assert!(paths.contains(&".env.example"), "{paths:?}");
    assert_eq!(all["withheld"], 3);
    // A glob that only matches withheld entries shows nothing but the count.
    let env = h
        .ok("find", json!({"workspace_id": WS, "glob": "**/.env*"}))
        .await
        .unwrap();
    assert_eq!(env["paths"], json!([".env.example"]));
    assert_eq!(env["withheld"], 2);
    // Each withheld entry is an audited deny of `find`.
    let rows = h.decisions().unwrap();
    assert!(
        rows.iter()
            .any(|r| r.tool == "find" && r.decision == "deny" && r.subject == ".env"),
        "no deny row for .env: {rows:?}"
    );
    h.check_no_absolute_paths().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allows_and_denies_are_audited_in_the_store() {
    let h = Harness::start(|root| {
        basic(root)?;
        write_file(root, ".env", "S=1")
    })
    .await
    .unwrap();
    h.ok("read", json!({"workspace_id": WS, "path": "a.txt"}))
        .await
        .unwrap();
    let body = h
        .err("read", json!({"workspace_id": WS, "path": ".env"}))
        .await
        .unwrap();
    let deny_id = assert_unauthorized(&body, "base.forbid.secret-files");
    let rows = h.decisions().unwrap();
    let allow = rows
        .iter()
        .find(|r| r.tool == "read" && r.decision == "allow" && r.subject == "a.txt")
        .unwrap_or_else(|| panic!("no allow row for a.txt: {rows:?}"));
    assert_eq!(allow.workspace, WS);
    assert_eq!(allow.profile, "workspace-write");
    assert!(!allow.policy_ids.is_empty(), "an allow names its permit");
    assert!(allow.policy_set_sha256.len() >= 64);
    let deny = rows
        .iter()
        .find(|r| r.decision_id == deny_id)
        .unwrap_or_else(|| panic!("no row for decision {deny_id}: {rows:?}"));
    assert_eq!(deny.decision, "deny");
    assert_eq!(deny.subject, ".env");
    assert_eq!(
        deny.policy_ids,
        vec!["base.forbid.secret-files".to_string()]
    );
    assert!(!deny.default_deny);
    assert_eq!(deny.transport.as_deref(), Some("stdio"));
    // The audit log holds relative paths only.
    for r in &rows {
        assert!(!r.subject.starts_with('/'), "absolute subject {r:?}");
    }
    h.check_no_absolute_paths().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workspace_info_without_a_workspace_is_server_identity() {
    let h = Harness::start(basic).await.unwrap();
    let info = h.ok("workspace_info", json!({})).await.unwrap();
    assert_eq!(info["server"], "codespace");
    assert_eq!(info["internal_model_calls"], false);
    assert_eq!(info["workspace_id_is_credential"], false);
    assert_eq!(info["workspace_id"], Value::Null);
    assert_eq!(info["tools_exposed"], json!(tool_names()));
    assert!(info.get("execution").is_none(), "{info}");
    assert!(info["policy"]["set_sha256"].as_str().is_some());
    h.check_no_absolute_paths().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workspace_info_permissions_follow_the_profile() {
    let ro = Harness::with_profile("read-only", basic).await.unwrap();
    let info = ro
        .ok("workspace_info", json!({"workspace_id": WS}))
        .await
        .unwrap();
    assert_eq!(info["workspace_id"], WS);
    assert_eq!(info["profile"], "read-only");
    let ex = &info["execution"];
    assert_eq!(
        ex["permissions"],
        json!({"read": true, "write": false, "exec": false})
    );
    assert_eq!(ex["files"]["read"]["available"], true);
    assert_eq!(ex["files"]["find"]["available"], true);
    assert_eq!(ex["files"]["patch"]["available"], false);
    assert_eq!(ex["process"]["available"], false);
    assert_eq!(ex["environment"]["client_selectable"], false);
    assert_eq!(ex["network"]["client_may_escalate"], false);
    ro.check_no_absolute_paths().unwrap();

    let rw = Harness::with_profile("workspace-write", basic)
        .await
        .unwrap();
    let info = rw
        .ok("workspace_info", json!({"workspace_id": WS}))
        .await
        .unwrap();
    assert_eq!(info["profile"], "workspace-write");
    let ex = &info["execution"];
    assert_eq!(
        ex["permissions"],
        json!({"read": true, "write": true, "exec": true}),
        "the harness reports an enforced sandbox, so exec is permitted"
    );
    assert_eq!(
        ex["files"]["patch"]["available"],
        json!(tool_names().contains(&"apply_patch"))
    );
    assert_eq!(ex["files"]["capabilities"]["read_max_bytes"], 1_048_576);
    assert_eq!(ex["files"]["capabilities"]["find_max_paths"], 10_000);
    rw.check_no_absolute_paths().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_response_ever_carries_the_workspace_root() {
    // A burst of successes and every error path, then one scan of all server output.
    let h = Harness::start(|root| {
        basic(root)?;
        write_file(root, ".env", "S=1")?;
        std::os::unix::fs::symlink("a.txt", root.join("ln"))?;
        make_fifo(root, "pipe")
    })
    .await
    .unwrap();
    let calls = [
        ("workspace_info", json!({"workspace_id": WS})),
        ("workspace_info", json!({})),
        ("read", json!({"workspace_id": WS, "path": "a.txt"})),
        ("find", json!({"workspace_id": WS})),
        (
            "read",
            json!({"workspace_id": WS, "path": "../../etc/passwd"}),
        ),
        ("read", json!({"workspace_id": WS, "path": "ln"})),
        ("read", json!({"workspace_id": WS, "path": "pipe"})),
        ("read", json!({"workspace_id": WS, "path": "src"})),
        ("read", json!({"workspace_id": WS, "path": "nope/x"})),
        ("read", json!({"workspace_id": WS, "path": "a.txt/x"})),
        ("read", json!({"workspace_id": WS, "path": ".env"})),
        (
            "read",
            json!({"workspace_id": WS, "path": "a.txt", "limit": 0}),
        ),
        ("find", json!({"workspace_id": WS, "glob": "[["})),
        ("find", json!({"workspace_id": "other"})),
    ];
    for (tool, args) in calls {
        let _ = h.call(tool, args).await.unwrap();
    }
    let _ = h.client.list_all_tools().await.unwrap();
    let wire = h.wire_text();
    assert!(wire.contains("SYMLINK_REJECTED") && wire.contains("UNAUTHORIZED"));
    h.check_no_absolute_paths().unwrap();
    h.close().await.unwrap();
}

/// Every schema node, with its JSON pointer, for wire-hygiene checks.
fn schema_nodes<'a>(v: &'a Value, at: String, out: &mut Vec<(String, &'a Value)>) {
    match v {
        Value::Object(m) => {
            out.push((at.clone(), v));
            for (k, child) in m {
                schema_nodes(child, format!("{at}/{k}"), out);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                schema_nodes(child, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_schemas_are_plain_json_schema_with_titles_and_truthful_hints() {
    let h = Harness::start(basic).await.unwrap();
    let info = h.client.peer_info().expect("server info");
    let server = info.server_info.as_ref().expect("serverInfo");
    assert_eq!(server.title.as_deref(), Some("CodeSpace"));
    let tools = h.client.list_all_tools().await.unwrap();
    for t in &tools {
        let title = t.title.as_deref().unwrap_or_default();
        assert!(!title.is_empty(), "{}: no title", t.name);
        let mut schemas = vec![Value::Object((*t.input_schema).clone())];
        if let Some(out) = &t.output_schema {
            schemas.push(Value::Object((**out).clone()));
        }
        for schema in &schemas {
            let mut nodes = Vec::new();
            schema_nodes(schema, String::new(), &mut nodes);
            for (at, node) in nodes {
                if let Some(f) = node.get("format").and_then(Value::as_str) {
                    assert!(
                        !f.starts_with("uint") && !f.starts_with("int") && f != "double",
                        "{}{at}: non-standard format {f}",
                        t.name
                    );
                }
                assert!(
                    !node.get("type").is_some_and(Value::is_array),
                    "{}{at}: type array instead of anyOf: {node}",
                    t.name
                );
            }
        }
    }
    let tool = |name: &str| tools.iter().find(|t| t.name == name).unwrap();
    let resize = Value::Object((*tool("process_resize").input_schema).clone());
    for field in ["rows", "cols"] {
        assert_eq!(resize["properties"][field]["minimum"], json!(1), "{field}");
    }
    let hints = |name: &str| tool(name).annotations.clone().unwrap();
    let stdin = hints("write_stdin");
    assert_eq!(stdin.destructive_hint, Some(true));
    assert_eq!(hints("read").read_only_hint, Some(true));
    assert_eq!(hints("read").idempotent_hint, Some(true));
    assert_eq!(hints("apply_patch").destructive_hint, Some(true));
    // The harness workspace is network-restricted (the default): commands reach no other host.
    assert_eq!(hints("exec_command").open_world_hint, Some(false));
    assert_eq!(stdin.open_world_hint, Some(false));
    // Every output schema is `anyOf` the result's schema and the ErrorBody's (tool errors carry
    // the ErrorBody as structuredContent too).
    let status = Value::Object((*tool("operation_status").output_schema.clone().unwrap()).clone());
    assert!(
        status["anyOf"][0]["required"]
            .as_array()
            .is_some_and(|r| r.contains(&json!("operation_id"))),
        "operation_status has a real output schema: {status:?}"
    );
    assert_eq!(status["anyOf"][1], json!({"$ref": "#/$defs/ErrorBody"}));
    assert_eq!(
        status["$defs"]["ErrorBody"]["required"],
        json!(["code", "message"])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_tools_are_open_world_when_a_workspace_has_network() {
    let opts = Options {
        workspace_extra: json!({"network": "enabled"}),
        ..Options::default()
    };
    let h = Harness::start_with(opts, basic).await.unwrap();
    let tools = h.client.list_all_tools().await.unwrap();
    for name in ["exec_command", "write_stdin"] {
        let t = tools.iter().find(|t| t.name == name).unwrap();
        assert_eq!(
            t.annotations.as_ref().unwrap().open_world_hint,
            Some(true),
            "{name}"
        );
    }
}
