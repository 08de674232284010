//! The decision cache never outlives its policy set and never changes an answer: repeated calls
//! give the same decision with the same determining policies, and a reloaded set decides anew.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use codespace_engine::{
    Config, ErrorCode, Gateway, PolicySource, PolicyStore, SandboxFacts, Session, ToolCall,
};
use serde_json::json;
use std::path::Path;
use std::sync::Arc;

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

#[tokio::test]
async fn cached_decisions_match_and_a_reload_invalidates_them() {
    let dir = tempfile::tempdir().unwrap();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    copy_dir(
        &repo.join("policies/base"),
        &dir.path().join("policies/base"),
    );
    copy_dir(
        &repo.join("policies/profiles"),
        &dir.path().join("policies/profiles"),
    );
    copy_dir(&repo.join("schema"), &dir.path().join("schema"));
    let root = dir.path().join("ws");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("a.txt"), "a").unwrap();
    std::fs::write(root.join(".env"), "s").unwrap();
    let cfg = Config::from_json(
        &format!(
            r#"{{"workspaces": {{"w": {{"root": "{}"}}}}}}"#,
            root.display()
        ),
        Path::new("/"),
    )
    .unwrap();
    let policy = Arc::new(
        PolicyStore::load(PolicySource::Dir {
            policies: dir.path().join("policies"),
            schema: dir.path().join("schema/codespace.cedarschema"),
        })
        .unwrap(),
    );
    let gw = Gateway::new(
        cfg,
        Arc::clone(&policy),
        None,
        SandboxFacts {
            sandbox_enforced: true,
            network_enforced: true,
            masking_enforced: true,
        },
    )
    .unwrap();
    let s = Session::stdio();
    let read = |p: &str| ToolCall::parse("read", &json!({"workspace_id": "w", "path": p})).unwrap();

    for _ in 0..3 {
        assert!(gw.call(&s, read("a.txt")).await.is_ok());
        let e = gw.call(&s, read(".env")).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::Unauthorized);
        assert_eq!(
            e.policy_ids.as_deref(),
            Some(&["base.forbid.secret-files".to_string()][..])
        );
        // `a.txt` and `b.txt` share a signature: the cached allow must not leak to `.env`.
        let e = gw.call(&s, read("sub/.env")).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::Unauthorized);
    }

    // A new forbid on a.txt: after the reload the same call is denied.
    std::fs::write(
        dir.path().join("policies/base/no-a.cedar"),
        "@id(\"base.forbid.no-a\")\n@reason(\"test\")\nforbid (principal, action, resource) when { resource.basename == \"a.txt\" };\n",
    )
    .unwrap();
    policy.reload().unwrap();
    let e = gw.call(&s, read("a.txt")).await.unwrap_err();
    assert_eq!(
        e.policy_ids.as_deref(),
        Some(&["base.forbid.no-a".to_string()][..])
    );
}

/// A long-running server must not grow its cache with every reload or every process: a reload
/// drops the entries of the superseded set, and decisions about a process (whose context names
/// it) are not cached at all.
#[tokio::test]
async fn the_cache_holds_one_policy_set_and_no_per_process_entries() {
    let dir = tempfile::tempdir().unwrap();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    for sub in ["policies/base", "policies/profiles"] {
        copy_dir(&repo.join(sub), &dir.path().join(sub));
    }
    copy_dir(&repo.join("schema"), &dir.path().join("schema"));
    let root = dir.path().join("ws");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("a.txt"), "a").unwrap();
    let cfg = Config::from_json(
        &format!(
            r#"{{"workspaces": {{"w": {{"root": "{}", "profile": "workspace-write", "network": "enabled", "sandbox": "off", "secret_masking": "off"}}}}}}"#,
            root.display()
        ),
        Path::new("/"),
    )
    .unwrap();
    let policy = Arc::new(
        PolicyStore::load(PolicySource::Dir {
            policies: dir.path().join("policies"),
            schema: dir.path().join("schema/codespace.cedarschema"),
        })
        .unwrap(),
    );
    let store = Arc::new(codespace_store::Store::open_in_memory().unwrap());
    let gw = Gateway::new(
        cfg,
        Arc::clone(&policy),
        Some(store),
        SandboxFacts {
            sandbox_enforced: false,
            network_enforced: false,
            masking_enforced: false,
        },
    )
    .unwrap();
    let s = Session::stdio();
    let call = |name: &str, args: serde_json::Value| ToolCall::parse(name, &args).unwrap();
    let read = || call("read", json!({"workspace_id": "w", "path": "a.txt"}));

    gw.call(&s, read()).await.unwrap();
    let one_set = gw.decider_counters().0;
    assert!(one_set > 0, "a read is cached");
    for i in 0..3 {
        std::fs::write(
            dir.path().join("policies/base/extra.cedar"),
            format!(
                "@id(\"base.forbid.extra-{i}\")\n@reason(\"test\")\nforbid (principal, action, resource) when {{ resource.basename == \"never-{i}\" }};\n"
            ),
        )
        .unwrap();
        policy.reload().unwrap();
        gw.call(&s, read()).await.unwrap();
        assert_eq!(
            gw.decider_counters().0,
            one_set,
            "reload {i}: entries of superseded sets are dropped"
        );
    }

    // Several processes, each read and polled: the process tools add nothing to the cache.
    let exec = || {
        call(
            "exec_command",
            json!({"workspace_id": "w", "command": ["true"], "yield_ms": 10000}),
        )
    };
    let first = serde_json::to_value(gw.call(&s, exec()).await.unwrap()).unwrap();
    assert_eq!(first["exit_code"], 0, "{first}");
    let with_exec = gw.decider_counters().0;
    for _ in 0..5 {
        let r = serde_json::to_value(gw.call(&s, exec()).await.unwrap()).unwrap();
        let pid = r["process_id"].as_str().unwrap().to_string();
        for tool in ["read_process", "process_status", "read_process"] {
            gw.call(&s, call(tool, json!({"process_id": pid})))
                .await
                .unwrap();
        }
    }
    assert_eq!(gw.decider_counters().0, with_exec);
}

/// `workspace_info`'s probes (~30 sub-requests) are decided once per policy set: a second call
/// asks the decider only its own request, and a reload that forbids commands changes the answer.
#[tokio::test]
async fn workspace_info_probes_are_decided_once_per_policy_set() {
    let dir = tempfile::tempdir().unwrap();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    for sub in ["policies/base", "policies/profiles"] {
        copy_dir(&repo.join(sub), &dir.path().join(sub));
    }
    copy_dir(&repo.join("schema"), &dir.path().join("schema"));
    let root = dir.path().join("ws");
    std::fs::create_dir(&root).unwrap();
    let cfg = Config::from_json(
        &format!(
            r#"{{"workspaces": {{"w": {{"root": "{}", "profile": "workspace-write"}}}}}}"#,
            root.display()
        ),
        Path::new("/"),
    )
    .unwrap();
    let policy = Arc::new(
        PolicyStore::load(PolicySource::Dir {
            policies: dir.path().join("policies"),
            schema: dir.path().join("schema/codespace.cedarschema"),
        })
        .unwrap(),
    );
    let gw = Gateway::new(
        cfg,
        Arc::clone(&policy),
        None,
        SandboxFacts {
            sandbox_enforced: true,
            network_enforced: true,
            masking_enforced: true,
        },
    )
    .unwrap();
    let s = Session::stdio();
    let info = || ToolCall::parse("workspace_info", &json!({"workspace_id": "w"})).unwrap();
    let mut asked = Vec::new();
    let mut answers = Vec::new();
    for _ in 0..3 {
        let before = gw.decider_counters().1;
        answers.push(serde_json::to_value(gw.call(&s, info()).await.unwrap()).unwrap());
        asked.push(gw.decider_counters().1 - before);
    }
    assert!(
        asked[0] >= 27,
        "the first call decides every probe: {asked:?}"
    );
    assert!(
        asked[1] <= 2 && asked[2] == asked[1],
        "later calls ask only their own request: {asked:?}"
    );
    assert_eq!(answers[0], answers[1]);
    assert_eq!(answers[1], answers[2]);
    let exec = |v: &serde_json::Value| v["execution"]["capabilities"]["exec"]["decision"].clone();
    // The shipped set forbids some probed commands (an `LD_PRELOAD` env): conditional.
    assert_eq!(exec(&answers[0]), "conditional", "{}", answers[0]);
    assert_eq!(answers[0]["execution"]["permissions"]["exec"], true);

    std::fs::write(
        dir.path().join("policies/base/no-exec.cedar"),
        "@id(\"base.forbid.no-exec\")\n@reason(\"test\")\nforbid (principal, action == CodeSpace::Action::\"exec_command\", resource);\n",
    )
    .unwrap();
    policy.reload().unwrap();
    let before = gw.decider_counters().1;
    let after = serde_json::to_value(gw.call(&s, info()).await.unwrap()).unwrap();
    assert!(
        gw.decider_counters().1 - before >= 27,
        "a reload decides anew"
    );
    assert_eq!(exec(&after), "denied", "{after}");
    assert_eq!(after["execution"]["permissions"]["exec"], false);
}
