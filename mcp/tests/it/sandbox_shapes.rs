//! Commands of different sandbox shapes never share what the server keeps warm for a shape (the
//! mount namespaces prepared ahead, `runner/sandbox/src/mountns.rs`): a workspace whose withheld
//! files change gets a new namespace for its new masks, and two workspaces whose masks and write
//! scopes differ, run interleaved, each see only their own view. A command tells which mount
//! namespace it ran in by `readlink /proc/self/ns/mnt`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::BTreeSet;
use std::path::Path;

use crate::process_common::skip_without_sandbox;
use crate::stdio_common::StdioServer;
use serde_json::json;

/// Most commands run while waiting for a prepared namespace to serve (each command after the
/// first finds it built once its background build ended; a handful is plenty).
const MAX_TRIES: usize = 60;

/// What a command reports: its mount namespace, the bytes it reads from each secret, and
/// whether it could write into `.git`, into `sub/` and at the root.
const PROBE: &str = "echo ns=$(readlink /proc/self/ns/mnt); \
    for f in .env id_rsa notes.txt; do echo $f=$(cat $f 2>/dev/null | wc -c); done; \
    if touch .git/probe 2>/dev/null; then echo git=WROTE; rm -f .git/probe; else echo git=REFUSED; fi; \
    if touch sub/probe 2>/dev/null; then echo sub=WROTE; rm -f sub/probe; else echo sub=REFUSED; fi; \
    if touch probe 2>/dev/null; then echo root=WROTE; rm -f probe; else echo root=REFUSED; fi";

struct View {
    ns: String,
    out: String,
}

fn probe(s: &mut StdioServer, ws: &str) -> View {
    let r = s.tool_ok(
        "exec_command",
        json!({"workspace_id": ws, "command": ["sh", "-c", PROBE], "yield_ms": 20000}),
    );
    assert_eq!(r["exit_code"], 0, "{r}");
    let out = r["chunk"].as_str().unwrap_or_default().to_owned();
    let ns = out
        .lines()
        .find_map(|l| l.strip_prefix("ns="))
        .unwrap_or_else(|| panic!("no namespace in {out}"))
        .to_owned();
    View { ns, out }
}

fn workspace(root: &Path, env: Option<&str>, key: Option<&str>) {
    std::fs::create_dir_all(root.join(".git")).unwrap();
    std::fs::create_dir_all(root.join("sub")).unwrap();
    std::fs::write(root.join("notes.txt"), "notes\n").unwrap();
    if let Some(env) = env {
        std::fs::write(root.join(".env"), env).unwrap();
    }
    if let Some(key) = key {
        std::fs::write(root.join("id_rsa"), key).unwrap();
    }
}

fn serve(dir: &Path, workspaces: serde_json::Value) -> StdioServer {
    let cfg = dir.join("config.json");
    std::fs::write(
        &cfg,
        json!({"workspaces": workspaces, "store": dir.join("store.db")}).to_string(),
    )
    .unwrap();
    let mut s = StdioServer::serve()
        .arg("--config")
        .arg(&cfg)
        .cwd(dir)
        .stderr_file(dir.join("stderr.log"))
        .spawn();
    s.initialize("sandbox-shapes-test");
    s
}

/// Runs the probe until two commands report the same mount namespace (a prepared one serving);
/// every view is checked by `check` on the way. `None` when none served within [`MAX_TRIES`].
fn until_shared(s: &mut StdioServer, ws: &str, check: impl Fn(&View)) -> Option<String> {
    let mut seen = BTreeSet::new();
    for _ in 0..MAX_TRIES {
        let v = probe(s, ws);
        check(&v);
        if !seen.insert(v.ns.clone()) {
            return Some(v.ns);
        }
    }
    None
}

/// Fails under `CI=true` when no prepared namespace ever served (the server has no mount
/// namespace of its own here): then the property cannot be observed.
fn require_shared(found: Option<String>, test: &str) -> Option<String> {
    if found.is_none() {
        let _ = codespace_test_skip::require(
            false,
            test,
            "no prepared mount namespace served a command (the server cannot unshare one)",
        );
    }
    found
}

#[test]
fn a_prepared_namespace_never_serves_a_command_whose_masks_differ() {
    const TEST: &str = "a_prepared_namespace_never_serves_a_command_whose_masks_differ";
    if skip_without_sandbox(TEST) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("w");
    workspace(&root, Some("TOKEN=secret\n"), None);
    let mut s = serve(dir.path(), json!({"w": {"root": root}}));
    let masked_env = |v: &View| {
        assert!(v.out.contains(".env=0"), "{}", v.out);
        assert!(v.out.contains("notes.txt=6"), "{}", v.out);
        assert!(v.out.contains("git=REFUSED"), "{}", v.out);
    };
    let Some(shared) = require_shared(until_shared(&mut s, "w", masked_env), TEST) else {
        return;
    };
    // A new secret: the listing withholds it, so the next plan's masks differ. The namespace
    // prepared for `.env` alone must not serve it (it would show the key).
    std::fs::write(root.join("id_rsa"), "PRIVATE KEY\n").unwrap();
    let both = |v: &View| {
        masked_env(v);
        assert!(
            v.out.contains("id_rsa=0"),
            "the new secret was readable: {}",
            v.out
        );
    };
    // Every command from now on sees both masks (the real invariant: a namespace of the old
    // shape would show the key). Namespace numbers are compared only between warm namespaces:
    // a command's own namespace dies with it and the kernel hands its inode number to the next
    // one made, but the old shape's warm namespace stays in the server's slot (a slot is dropped
    // only when a plan of its own shape finds it out of date, and no plan has the old shape any
    // more), so while both are alive equal numbers mean the same namespace.
    let Some(now_shared) = until_shared(&mut s, "w", both) else {
        panic!("the new shape was never served warm");
    };
    assert_ne!(
        now_shared, shared,
        "the warm namespace of the old shape served the new one"
    );
}

#[test]
fn workspaces_of_different_shapes_run_interleaved_each_see_only_their_own_view() {
    const TEST: &str =
        "workspaces_of_different_shapes_run_interleaved_each_see_only_their_own_view";
    if skip_without_sandbox(TEST) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // `a`: `.env` and `id_rsa` withheld, the whole workspace writable but `.git` (read-only
    // bind). `b`: only `.env` withheld (no key there), `sub/` (and its cwd) writable.
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    workspace(&a, Some("A_TOKEN=1\n"), Some("A KEY\n"));
    workspace(&b, Some("B_TOKEN=22\n"), None);
    let mut s = serve(
        dir.path(),
        json!({"a": {"root": a}, "b": {"root": b, "command_write_paths": ["sub"]}}),
    );
    let view_a = |v: &View| {
        for want in [
            ".env=0",
            "id_rsa=0",
            "notes.txt=6",
            "git=REFUSED",
            "sub=WROTE",
            "root=WROTE",
        ] {
            assert!(v.out.contains(want), "a: {want}: {}", v.out);
        }
    };
    let view_b = |v: &View| {
        for want in [
            ".env=0",
            "id_rsa=0",
            "notes.txt=6",
            "git=REFUSED",
            "sub=WROTE",
        ] {
            assert!(v.out.contains(want), "b: {want}: {}", v.out);
        }
    };
    // A namespace a command built for itself dies with it, and the kernel hands its inode
    // number to the next namespace made; so only a namespace that served two commands of one
    // workspace (a warm one, kept alive by the server) is compared with the other's warm ones.
    let (mut ns_a, mut ns_b) = (BTreeSet::new(), BTreeSet::new());
    let (mut hot_a, mut hot_b) = (BTreeSet::new(), BTreeSet::new());
    for _ in 0..MAX_TRIES {
        let va = probe(&mut s, "a");
        view_a(&va);
        if !ns_a.insert(va.ns.clone()) {
            hot_a.insert(va.ns.clone());
        }
        let vb = probe(&mut s, "b");
        view_b(&vb);
        if !ns_b.insert(vb.ns.clone()) {
            hot_b.insert(vb.ns.clone());
        }
        assert!(
            hot_a.is_disjoint(&hot_b),
            "one warm namespace served both workspaces: a {hot_a:?} b {hot_b:?}"
        );
        if !hot_a.is_empty() && !hot_b.is_empty() {
            break;
        }
    }
    let (warm_a, warm_b) = (!hot_a.is_empty(), !hot_b.is_empty());
    require_shared(
        (warm_a && warm_b).then_some(()).map(|()| String::new()),
        TEST,
    );
}
