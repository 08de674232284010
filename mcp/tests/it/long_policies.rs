//! A long operator policy through the real binary: a permit whose condition is a 400-long `||`
//! chain used to overflow a 2 MiB runtime worker's stack while Cedar evaluated it, aborting the
//! whole server at the first call; the server's threads that evaluate policies now have stacks
//! sized for what the start-up thread can load (`codespace_engine::policy::EVAL_STACK_BYTES`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::stdio_common;

use serde_json::json;
use std::path::Path;
use stdio_common::StdioServer;

#[test]
fn a_policy_with_a_400_long_or_chain_is_evaluated_without_crashing_the_server() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(tmp.path()).unwrap();
    let pol = dir.join("policies");
    for sub in ["base", "profiles"] {
        std::fs::create_dir_all(pol.join(sub)).unwrap();
        for e in std::fs::read_dir(repo.join("policies").join(sub)).unwrap() {
            let p = e.unwrap().path();
            std::fs::copy(&p, pol.join(sub).join(p.file_name().unwrap())).unwrap();
        }
    }
    let chain: Vec<String> = (0..400)
        .map(|i| format!("resource.path == \"f{i}.txt\""))
        .collect();
    std::fs::write(
        pol.join("profiles/chain.cedar"),
        format!(
            "@id(\"chain.permit.read\")\npermit (principal in CodeSpace::PermissionProfile::\"chain\", \
             action == CodeSpace::Action::\"read\", resource)\nwhen {{\n  {}\n}};\n",
            chain.join(" ||\n  ")
        ),
    )
    .unwrap();
    let ws = dir.join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("f399.txt"), "last\n").unwrap();
    std::fs::write(ws.join("other.txt"), "no\n").unwrap();
    let config = json!({
        "policies": pol,
        "schema": repo.join("schema/codespace.cedarschema"),
        "store": dir.join("store.db"),
        "profiles": {"chain": {}},
        "workspaces": {"w": {"root": ws, "profile": "chain"}},
    });
    let cfg = dir.join("codespace.json");
    std::fs::write(&cfg, config.to_string()).unwrap();
    let mut s = StdioServer::serve()
        .arg("--config")
        .arg(&cfg)
        .cwd(&dir)
        .stderr_file(dir.join("stderr.log"))
        .spawn();
    s.initialize("long-policy");
    let r = s.tool_ok("read", json!({"workspace_id": "w", "path": "f399.txt"}));
    assert_eq!(r["content"], "last\n", "{r}");
    let err = s.tool_err("read", json!({"workspace_id": "w", "path": "other.txt"}));
    assert_eq!(err["code"], "UNAUTHORIZED", "{err}");
    // Still answering afterwards: the first alternative allows, and the file is not there.
    let again = s.tool_err("read", json!({"workspace_id": "w", "path": "f0.txt"}));
    assert_eq!(again["code"], "FILE_NOT_FOUND", "{again}");
}
