//! End-to-end over MCP, in process: the everyday `read`/`find` arguments — several `paths` in one
//! call (each decided as its own `read`), `head_lines`/`tail_lines`, `encoding` (`BINARY_FILE`,
//! exact base64), and `find` rooted at a directory.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use base64::Engine as _;
use codespace_tests::{Harness, WS, write_file};
use serde_json::{Value, json};
use std::path::Path;

/// A PNG signature and header followed by bytes that are not UTF-8.
const PNG: &[u8] = &[
    0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 0x0d, b'I', b'H', b'D', b'R', 0, 0, 0,
    1, 0, 0, 0, 1, 8, 6, 0, 0, 0, 0x1f, 0x15, 0xc4, 0x89, 0xff, 0xfe, 0x00, 0x80,
];

fn tree(root: &Path) -> anyhow::Result<()> {
    write_file(root, "a.txt", "one\ntwo\nthree\nfour\n")?;
    write_file(root, "src/main.rs", "fn main() {}\n")?;
    write_file(root, "src/deep/x.rs", "//! x\n")?;
    write_file(root, "src/.env", "S=2\n")?;
    write_file(root, ".env", "S=1\n")?;
    write_file(root, "img/logo.png", PNG)?;
    write_file(root, "utf8.txt", "aé\n")?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_paths_decides_each_path_and_reports_each_failure_as_that_files_error() {
    let h = Harness::start(tree).await.unwrap();
    let r = h
        .ok(
            "read",
            json!({"workspace_id": WS, "paths": ["a.txt", ".env", "missing.txt", "src/main.rs"]}),
        )
        .await
        .unwrap();
    let files = r["files"].as_array().unwrap();
    assert_eq!(files.len(), 4, "{r}");
    assert_eq!(files[0]["path"], "a.txt");
    assert_eq!(files[0]["content"], "one\ntwo\nthree\nfour\n");
    assert_eq!(files[1]["path"], ".env");
    assert_eq!(files[1]["error"]["code"], "UNAUTHORIZED", "{r}");
    assert!(files[1].get("content").is_none(), "{r}");
    assert!(
        !h.wire_text().contains("S=1"),
        "the denied file's bytes left the server"
    );
    assert_eq!(files[2]["error"]["code"], "FILE_NOT_FOUND", "{r}");
    assert_eq!(files[3]["content"], "fn main() {}\n");
    // One audit row per path, as a single read of it would write.
    let rows = h.decisions().unwrap();
    let row = |subject: &str, decision: &str| {
        rows.iter()
            .filter(|r| r.tool == "read" && r.subject == subject && r.decision == decision)
            .count()
    };
    assert_eq!(row("a.txt", "allow"), 1, "{rows:?}");
    assert_eq!(row("src/main.rs", "allow"), 1, "{rows:?}");
    assert_eq!(row(".env", "deny"), 1, "{rows:?}");

    // An unknown workspace fails the call, as a single read does.
    let body = h
        .err("read", json!({"workspace_id": "nope", "paths": ["a.txt"]}))
        .await
        .unwrap();
    assert_eq!(body["code"], "WORKSPACE_NOT_FOUND", "{body}");
    // All denied is still a result.
    let r = h
        .ok(
            "read",
            json!({"workspace_id": WS, "paths": [".env", "src/.env"]}),
        )
        .await
        .unwrap();
    for f in r["files"].as_array().unwrap() {
        assert_eq!(f["error"]["code"], "UNAUTHORIZED", "{r}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_rejects_bad_argument_combinations() {
    let h = Harness::start(tree).await.unwrap();
    let many: Vec<String> = (0..65).map(|i| format!("f{i}.txt")).collect();
    for args in [
        json!({"workspace_id": WS}),
        json!({"workspace_id": WS, "path": "a.txt", "paths": ["a.txt"]}),
        json!({"workspace_id": WS, "paths": []}),
        json!({"workspace_id": WS, "paths": many}),
        json!({"workspace_id": WS, "path": "a.txt", "head_lines": 0}),
        json!({"workspace_id": WS, "path": "a.txt", "head_lines": 1, "tail_lines": 1}),
        json!({"workspace_id": WS, "path": "a.txt", "head_lines": 1, "offset": 2}),
        json!({"workspace_id": WS, "path": "a.txt", "tail_lines": 1, "limit": 2}),
        json!({"workspace_id": WS, "paths": ["a.txt"], "tail_lines": 0}),
        json!({"workspace_id": WS, "path": "a.txt", "encoding": "utf16"}),
    ] {
        let body = h.err("read", args.clone()).await.unwrap();
        assert_eq!(body["code"], "INVALID_ARGUMENTS", "{args} -> {body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_lines_and_tail_lines_return_whole_lines() {
    let h = Harness::start(tree).await.unwrap();
    let head = h
        .ok(
            "read",
            json!({"workspace_id": WS, "path": "a.txt", "head_lines": 2}),
        )
        .await
        .unwrap();
    assert_eq!(head["content"], "one\ntwo\n");
    assert_eq!(head["truncated"], true);
    assert_eq!(head["next_offset"], 8);
    let tail = h
        .ok(
            "read",
            json!({"workspace_id": WS, "path": "a.txt", "tail_lines": 2}),
        )
        .await
        .unwrap();
    assert_eq!(tail["content"], "three\nfour\n");
    assert_eq!(tail["offset"], 8);
    assert_eq!(tail["truncated"], false);
    assert_eq!(head["version"], tail["version"]);
    let all = h
        .ok(
            "read",
            json!({"workspace_id": WS, "path": "a.txt", "tail_lines": 99}),
        )
        .await
        .unwrap();
    assert_eq!(all["content"], "one\ntwo\nthree\nfour\n");
    // With `paths`, every file gets the same cut.
    let r = h
        .ok(
            "read",
            json!({"workspace_id": WS, "paths": ["a.txt", "src/main.rs"], "head_lines": 1}),
        )
        .await
        .unwrap();
    assert_eq!(r["files"][0]["content"], "one\n");
    assert_eq!(r["files"][1]["content"], "fn main() {}\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_files_are_binary_file_as_text_and_exact_as_base64() {
    let h = Harness::start(tree).await.unwrap();
    let body = h
        .err(
            "read",
            json!({"workspace_id": WS, "path": "img/logo.png", "encoding": "text"}),
        )
        .await
        .unwrap();
    assert_eq!(body["code"], "BINARY_FILE", "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("base64"),
        "{body}"
    );
    let r = h
        .ok(
            "read",
            json!({"workspace_id": WS, "path": "img/logo.png", "encoding": "base64"}),
        )
        .await
        .unwrap();
    assert_eq!(r["encoding"], "base64");
    assert_eq!(r["content_lossy"], false);
    assert_eq!(r["byte_count"], PNG.len());
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(r["content"].as_str().unwrap())
        .unwrap();
    assert_eq!(bytes, PNG);
    // Text files read as text are unchanged; `encoding` is omitted from a text result.
    let t = h
        .ok(
            "read",
            json!({"workspace_id": WS, "path": "a.txt", "encoding": "text"}),
        )
        .await
        .unwrap();
    assert_eq!(t["content"], "one\ntwo\nthree\nfour\n");
    assert!(t.get("encoding").is_none(), "{t}");
    // A window cut inside a character is text: it ends before that character.
    let w = h
        .ok(
            "read",
            json!({"workspace_id": WS, "path": "utf8.txt", "limit": 2, "encoding": "text"}),
        )
        .await
        .unwrap();
    assert_eq!(w["content"], "a", "{w}");
    assert_eq!(w["next_offset"], 1, "{w}");
    // Among `paths`, the binary file is that file's BINARY_FILE.
    let r = h
        .ok(
            "read",
            json!({"workspace_id": WS, "paths": ["img/logo.png", "a.txt"], "encoding": "text"}),
        )
        .await
        .unwrap();
    assert_eq!(r["files"][0]["error"]["code"], "BINARY_FILE", "{r}");
    assert_eq!(r["files"][1]["content"], "one\ntwo\nthree\nfour\n");
}

fn paths_of(v: &Value) -> Vec<&str> {
    v["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn find_with_path_lists_under_that_directory_only() {
    let h = Harness::start(tree).await.unwrap();
    let r = h
        .ok("find", json!({"workspace_id": WS, "path": "src"}))
        .await
        .unwrap();
    assert_eq!(paths_of(&r), ["src/deep/x.rs", "src/main.rs"], "{r}");
    assert_eq!(r["withheld"], 1, "src/.env is withheld: {r}");
    // Depth counts from the named directory.
    let r = h
        .ok(
            "find",
            json!({"workspace_id": WS, "path": "src", "max_depth": 1}),
        )
        .await
        .unwrap();
    assert_eq!(paths_of(&r), ["src/main.rs"], "{r}");
    let code = h
        .err_code("find", json!({"workspace_id": WS, "path": "a.txt"}))
        .await
        .unwrap();
    assert_eq!(code, "PATH_NOT_DIRECTORY");
    let code = h
        .err_code("find", json!({"workspace_id": WS, "path": "nope"}))
        .await
        .unwrap();
    assert_eq!(code, "FILE_NOT_FOUND");
    let code = h
        .err_code("find", json!({"workspace_id": WS, "path": "../x"}))
        .await
        .unwrap();
    assert_eq!(code, "PATH_ESCAPE");
    // The find decision is on the named directory.
    let rows = h.decisions().unwrap();
    assert!(
        rows.iter()
            .any(|r| r.tool == "find" && r.decision == "allow" && r.subject == "src"),
        "{rows:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_read_and_find_schemas_name_the_new_arguments() {
    let tools = codespace_mcp::server::tool_list();
    let schema = |name: &str| {
        let t = tools.iter().find(|t| t.name == name).unwrap();
        serde_json::to_value(&*t.input_schema).unwrap()
    };
    let read = schema("read");
    for arg in ["paths", "head_lines", "tail_lines", "encoding"] {
        assert!(
            read["properties"].get(arg).is_some(),
            "read lacks {arg}: {read}"
        );
    }
    let find = schema("find");
    assert!(find["properties"].get("path").is_some(), "{find}");
}
