//! Warm spare sandbox helpers (`runner/process/src/spare.rs`, `runner/sandbox/src/spare.rs`):
//! the helper of the next command is started ahead and gets its command only when used. A
//! spare serves exactly one command and carries nothing from before its use: two workspaces
//! of different sandbox shapes run interleaved each see only their own view, environment and
//! working directory; a secret created after the spare was started is masked in the command
//! it serves; spares die with the server (`kill -9`) and at its shutdown. A command tells it
//! was served warm by the helper's step line (`CODESPACE_SANDBOX_STEPS=1`: its first mark is
//! `spare=` instead of `start=`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use crate::process_common::{skip_without_sandbox, wait_pids_gone};
use crate::stdio_common::StdioServer;
use serde_json::json;

/// What a command reports: its pid, tag, working directory, the bytes of each secret, whether
/// the plan's variable reached it, and whether it could write at the root and into `sub/`
/// (`$1` is the workspace root relative to the working directory).
const PROBE: &str = "echo pid=$$; echo tag=${WS_TAG:-none}; echo other=${OTHER_ONLY:-none}; \
    echo cwd=$(pwd); \
    for f in .env id_rsa notes.txt; do echo $f=$(cat $1/$f 2>/dev/null | wc -c); done; \
    echo plan=$(env | grep -c CODESPACE_SANDBOX_PLAN); \
    if touch $1/probe 2>/dev/null; then echo root=WROTE; rm -f $1/probe; else echo root=REFUSED; fi; \
    if touch $1/sub/probe 2>/dev/null; then echo sub=WROTE; rm -f $1/sub/probe; else echo sub=REFUSED; fi";

struct View {
    out: String,
    pid: i64,
    warm: bool,
}

/// Whether a warm spare served the command whose output is `out` (its step line's first mark).
fn served_warm(out: &str) -> bool {
    let steps = out
        .lines()
        .find(|l| l.starts_with("codespace-sandbox-steps:"))
        .unwrap_or_else(|| panic!("no step line in {out}"));
    let warm = steps.contains(" spare=");
    assert!(
        warm != steps.contains(" start="),
        "one first mark, start or spare: {steps}"
    );
    warm
}

/// The probe in `cwd` (`.` or `sub`) of workspace `ws`.
fn probe(s: &mut StdioServer, ws: &str, cwd: &str) -> View {
    let up = if cwd == "." { "." } else { ".." };
    let r = s.tool_ok(
        "exec_command",
        json!({"workspace_id": ws, "command": ["sh", "-c", PROBE, "probe", up],
               "cwd": cwd, "yield_ms": 20000}),
    );
    assert_eq!(r["exit_code"], 0, "{r}");
    let out = r["chunk"].as_str().unwrap_or_default().to_owned();
    let warm = served_warm(&out);
    let pid = out
        .lines()
        .find_map(|l| l.strip_prefix("pid="))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {out}"));
    View { out, pid, warm }
}

fn workspace(root: &Path, env: &str, key: Option<&str>) {
    std::fs::create_dir_all(root.join("sub")).unwrap();
    std::fs::write(root.join("notes.txt"), "notes\n").unwrap();
    std::fs::write(root.join(".env"), env).unwrap();
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
    s.initialize("warm-spare-test");
    s
}

/// The pids of the server's children waiting as spares.
fn spares_of(server: u32) -> Vec<i64> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i64>() else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let ppid = stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if ppid == Some(server) && cmdline.split(|b| *b == 0).any(|a| a == b"__sandbox-spare") {
            out.push(pid);
        }
    }
    out
}

/// Fails under `CI=true` when no command was ever served warm (then nothing was observed).
fn require_warm(warm: usize, test: &str) -> bool {
    codespace_test_skip::require(
        warm > 0,
        test,
        "no command was served by a warm spare helper",
    )
}

#[test]
fn spares_serve_interleaved_workspaces_of_different_shapes_each_only_its_own_view() {
    const TEST: &str =
        "spares_serve_interleaved_workspaces_of_different_shapes_each_only_its_own_view";
    if skip_without_sandbox(TEST) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // `a`: `.env` and `id_rsa` withheld, the workspace writable, its own variable. `b`: only
    // `.env` withheld (no key there), only `sub/` writable, another variable of its own.
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    workspace(&a, "A_TOKEN=1\n", Some("A KEY\n"));
    workspace(&b, "B_TOKEN=22\n", None);
    let steps = ("CODESPACE_SANDBOX_STEPS", "1");
    let mut s = serve(
        dir.path(),
        json!({
            "a": {"root": a, "env": {steps.0: steps.1, "WS_TAG": "a"}},
            "b": {"root": b, "command_write_paths": ["sub"],
                  "env": {steps.0: steps.1, "WS_TAG": "b", "OTHER_ONLY": "b-only"}},
        }),
    );
    let view_a = |v: &View| {
        for want in [
            "tag=a\n",
            "other=none\n",
            &format!("cwd={}\n", a.display()),
            ".env=0\n",
            "id_rsa=0\n",
            "notes.txt=6\n",
            "plan=0\n",
            "root=WROTE\n",
            "sub=WROTE\n",
        ] {
            assert!(v.out.contains(want), "a: {want}: {}", v.out);
        }
    };
    let view_b = |v: &View| {
        for want in [
            "tag=b\n",
            "other=b-only\n",
            &format!("cwd={}\n", b.join("sub").display()),
            ".env=0\n",
            "id_rsa=0\n",
            "notes.txt=6\n",
            "plan=0\n",
            "root=REFUSED\n",
            "sub=WROTE\n",
        ] {
            assert!(v.out.contains(want), "b: {want}: {}", v.out);
        }
    };
    let mut pids = BTreeSet::new();
    let (mut warm_a, mut warm_b) = (0, 0);
    for _ in 0..8 {
        let v = probe(&mut s, "a", ".");
        view_a(&v);
        warm_a += usize::from(v.warm);
        assert!(pids.insert(v.pid), "a process served twice: {}", v.out);
        let v = probe(&mut s, "b", "sub");
        view_b(&v);
        warm_b += usize::from(v.warm);
        assert!(pids.insert(v.pid), "a process served twice: {}", v.out);
    }
    if !require_warm(warm_a.min(warm_b), TEST) {
        return;
    }
    s.close_and_wait(Duration::from_secs(20));
}

#[test]
fn a_spare_started_before_a_new_secret_masks_it_in_the_command_it_serves() {
    const TEST: &str = "a_spare_started_before_a_new_secret_masks_it_in_the_command_it_serves";
    if skip_without_sandbox(TEST) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("w");
    workspace(&root, "TOKEN=secret\n", None);
    let mut s = serve(
        dir.path(),
        json!({"w": {"root": root, "env": {"CODESPACE_SANDBOX_STEPS": "1"}}}),
    );
    // Until a command was served warm: a spare then waits for the next one.
    let mut warm = 0;
    for _ in 0..10 {
        let v = probe(&mut s, "w", ".");
        assert!(
            v.out.contains(".env=0\n") && v.out.contains("id_rsa=0\n"),
            "{}",
            v.out
        );
        warm += usize::from(v.warm);
        if warm > 0 {
            break;
        }
    }
    if !require_warm(warm, TEST) {
        return;
    }
    let waiting = spares_of(s.pid());
    assert_eq!(waiting.len(), 1, "one spare waits per helper: {waiting:?}");
    // A secret created after that spare started: the plan it is handed masks it.
    std::fs::write(root.join("id_rsa"), "PRIVATE KEY\n").unwrap();
    let v = probe(&mut s, "w", ".");
    assert!(v.warm, "the waiting spare did not serve: {}", v.out);
    assert_eq!(v.pid, waiting[0], "the command is the spare's process");
    assert!(
        v.out.contains("id_rsa=0\n"),
        "the new secret was readable: {}",
        v.out
    );
    assert!(
        v.out.contains(".env=0\n") && v.out.contains("notes.txt=6\n"),
        "{}",
        v.out
    );
    // Clean shutdown kills the next spare.
    let next = spares_of(s.pid());
    s.close_and_wait(Duration::from_secs(20));
    assert!(
        wait_pids_gone(&next, Duration::from_secs(10)).is_empty(),
        "a spare outlived the server's shutdown: {next:?}"
    );
}

#[test]
fn a_spare_dies_with_a_killed_server() {
    const TEST: &str = "a_spare_dies_with_a_killed_server";
    if skip_without_sandbox(TEST) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("w");
    workspace(&root, "TOKEN=secret\n", None);
    let mut s = serve(dir.path(), json!({"w": {"root": root}}));
    let r = s.tool_ok(
        "exec_command",
        json!({"workspace_id": "w", "command": ["true"], "yield_ms": 20000}),
    );
    assert_eq!(r["exit_code"], 0, "{r}");
    // The spare is started right after the command: wait for it (bounded).
    let mut waiting = Vec::new();
    for _ in 0..500 {
        waiting = spares_of(s.pid());
        if !waiting.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    if !codespace_test_skip::require(!waiting.is_empty(), TEST, "no spare was started") {
        return;
    }
    s.kill();
    assert!(
        wait_pids_gone(&waiting, Duration::from_secs(10)).is_empty(),
        "a spare outlived its killed server: {waiting:?}"
    );
}

/// A server over two workspaces in `dir` whose commands report their helper's steps: `open`,
/// the network granted (no namespace of its own), and `closed`, none (a private namespace,
/// which its spare may make while it waits).
fn serve_both_network_shapes(dir: &Path) -> StdioServer {
    let (open, closed) = (dir.join("open"), dir.join("closed"));
    workspace(&open, "A=1\n", None);
    workspace(&closed, "B=1\n", None);
    let steps = json!({"CODESPACE_SANDBOX_STEPS": "1"});
    serve(
        dir,
        json!({
            "open": {"root": open, "network": "enabled", "env": steps},
            "closed": {"root": closed, "env": steps},
        }),
    )
}

/// The server's own network namespace (as `readlink /proc/self/ns/net` prints it).
fn server_net(s: &StdioServer) -> String {
    std::fs::read_link(format!("/proc/{}/ns/net", s.pid()))
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// The network namespace a command of `ws` runs in (`/proc/self/ns/net`), and whether a warm
/// spare served it.
fn net_probe(s: &mut StdioServer, ws: &str) -> (String, bool) {
    let r = s.tool_ok(
        "exec_command",
        json!({"workspace_id": ws, "command": ["readlink", "/proc/self/ns/net"],
               "yield_ms": 20000}),
    );
    assert_eq!(r["exit_code"], 0, "{r}");
    let out = r["chunk"].as_str().unwrap_or_default().to_owned();
    let warm = served_warm(&out);
    let net = out
        .lines()
        .find(|l| l.starts_with("net:["))
        .unwrap_or_else(|| panic!("no namespace in {out}"))
        .to_owned();
    (net, warm)
}

#[test]
fn a_spare_of_one_network_shape_never_serves_a_command_of_the_other() {
    const TEST: &str = "a_spare_of_one_network_shape_never_serves_a_command_of_the_other";
    if skip_without_sandbox(TEST) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut s = serve_both_network_shapes(dir.path());
    let host = server_net(&s);
    let (mut warm_open, mut warm_closed) = (0, 0);
    // Interleaved: each shape's spare waits beside the other's.
    for _ in 0..8 {
        let (net, warm) = net_probe(&mut s, "open");
        assert_eq!(
            net, host,
            "a command with the network ran in a private namespace"
        );
        warm_open += usize::from(warm);
        let (net, warm) = net_probe(&mut s, "closed");
        assert_ne!(
            net, host,
            "a command without the network ran in the server's namespace"
        );
        warm_closed += usize::from(warm);
    }
    if !require_warm(warm_open.min(warm_closed), TEST) {
        return;
    }
    s.close_and_wait(Duration::from_secs(20));
}

#[test]
fn a_command_served_warm_holds_no_capability_in_any_set() {
    // A spare drops its bounding set while it waits (runner/sandbox/src/caps.rs): the command
    // it serves must still hold nothing in any of the five sets, with and without the network
    // (whose spares wait in different namespaces), as a cold helper's command does.
    const TEST: &str = "a_command_served_warm_holds_no_capability_in_any_set";
    if skip_without_sandbox(TEST) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut s = serve_both_network_shapes(dir.path());
    // The bounding set can only be emptied by a server holding CAP_SETPCAP (bit 8); without it
    // the helper accepts a full one (it has nothing to lose and cannot gain under no_new_privs).
    let own = std::fs::read_to_string("/proc/self/status").unwrap();
    let eff = own
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:\t"))
        .map(|h| u64::from_str_radix(h.trim(), 16).unwrap())
        .unwrap();
    let bounding_dropped = eff & (1 << 8) != 0;
    let mut warm = [0usize; 2];
    for _ in 0..4 {
        for (i, ws) in ["open", "closed"].into_iter().enumerate() {
            let r = s.tool_ok(
                "exec_command",
                json!({"workspace_id": ws, "command": ["grep", "^Cap", "/proc/self/status"],
                       "yield_ms": 20000}),
            );
            assert_eq!(r["exit_code"], 0, "{r}");
            let out = r["chunk"].as_str().unwrap_or_default().to_owned();
            if served_warm(&out) {
                warm[i] += 1;
            }
            let sets: Vec<&str> = out.lines().filter(|l| l.starts_with("Cap")).collect();
            for set in ["CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:"] {
                if set == "CapBnd:" && !bounding_dropped {
                    continue;
                }
                let line = sets
                    .iter()
                    .find(|l| l.starts_with(set))
                    .unwrap_or_else(|| panic!("no {set} in {out}"));
                assert!(
                    line.ends_with("\t0000000000000000"),
                    "{ws}: a capability is held: {line}"
                );
            }
        }
    }
    if !require_warm(warm[0].min(warm[1]), TEST) {
        return;
    }
    s.close_and_wait(Duration::from_secs(20));
}

/// A command without the network: prints the namespace it runs in, tries each earlier
/// command's abstract socket (`reached=<name>` when one answers), then binds its own and either
/// holds it while its stdin stays open (`hold`) or leaves it to a child in a session of its own
/// that outlives the command (a leftover) and exits.
const NET_LEFTOVER: &str = r#"
import os, signal, socket, sys
tag, me, mode, earlier = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
print("net=" + os.readlink("/proc/self/ns/net"))
for name in earlier:
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        c.connect("\0" + tag + name)
        print("reached=" + name)
    except OSError:
        pass
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind("\0" + tag + me)
s.listen(8)
print("bound", flush=True)
if mode == "hold":
    sys.stdin.read()
elif os.fork() == 0:
    os.setsid()
    null = os.open("/dev/null", os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    while True:
        signal.pause()
"#;

/// The namespace a [`NET_LEFTOVER`] output names, and the earlier sockets it reached.
fn net_and_reached(out: &str) -> (String, Vec<String>) {
    let net = out
        .lines()
        .find_map(|l| l.strip_prefix("net="))
        .unwrap_or_else(|| panic!("no namespace in {out}"))
        .to_owned();
    let reached = out
        .lines()
        .filter_map(|l| l.strip_prefix("reached="))
        .map(str::to_owned)
        .collect();
    (net, reached)
}

#[test]
fn a_network_namespace_is_used_again_only_once_every_process_of_its_command_is_gone() {
    // A spare's private namespace goes back for a later spare only once its command's cgroup
    // is removed (runner/process/src/spare.rs): a command that still runs keeps its namespace
    // to itself, and what a finished command left behind (a socket held by a leftover child)
    // is gone before any later command can run in that namespace. Where the kernel has
    // Landlock's abstract-socket scope (ABI 6), a command cannot reach another's abstract
    // socket even in one namespace: there the namespaces' identities are what this test checks.
    // (Checked to fail when a namespace goes back at its command's start.)
    const TEST: &str =
        "a_network_namespace_is_used_again_only_once_every_process_of_its_command_is_gone";
    if skip_without_sandbox(TEST) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut s = serve_both_network_shapes(dir.path());
    let host = server_net(&s);
    // Abstract socket names of this run only.
    let tag = format!(
        "codespace-test-{}-",
        dir.path().file_name().unwrap().to_string_lossy()
    );
    let command_of = |me: &str, mode: &str, earlier: &[String]| {
        let mut command = vec![
            "python3".to_owned(),
            "-c".to_owned(),
            NET_LEFTOVER.to_owned(),
            tag.clone(),
            me.to_owned(),
            mode.to_owned(),
        ];
        command.extend(earlier.iter().cloned());
        command
    };
    // The holder must be served warm: only a spare's namespace can go back. A spare waits
    // once a first command has started; a holder that went cold is ended and started again.
    net_probe(&mut s, "closed");
    let mut holder = None;
    for attempt in 0..5 {
        let r = s.tool_ok(
            "exec_command",
            json!({"workspace_id": "closed", "background": true,
                   "command": command_of(&format!("held{attempt}"), "hold", &[])}),
        );
        let id = r["process_id"].as_str().unwrap().to_owned();
        let (out, _) = crate::env_common::read_until(&mut s, &id, 0, "bound\n");
        assert!(
            out.contains("bound\n"),
            "the holding command did not bind: {out}"
        );
        if served_warm(&out) {
            holder = Some((id, format!("held{attempt}"), net_and_reached(&out).0));
            break;
        }
        s.tool_ok("terminate_process", json!({"process_id": id}));
    }
    if !require_warm(usize::from(holder.is_some()), TEST) {
        return;
    }
    let (held_id, held, held_net) = holder.unwrap();
    assert_ne!(
        held_net, host,
        "a command without the network ran in the server's namespace"
    );

    let mut earlier = vec![held];
    let mut seen: Vec<String> = Vec::new();
    let (mut warm, mut used_again) = (0usize, 0usize);
    for i in 0..16 {
        let me = format!("c{i}");
        let cmd = command_of(&me, "leave", &earlier);
        let r = s.tool_ok(
            "exec_command",
            json!({"workspace_id": "closed", "command": cmd, "yield_ms": 20000}),
        );
        assert_eq!(r["exit_code"], 0, "{r}");
        let out = r["chunk"].as_str().unwrap_or_default().to_owned();
        warm += usize::from(served_warm(&out));
        let (net, reached) = net_and_reached(&out);
        assert!(
            reached.is_empty(),
            "command {i} reached the sockets of {reached:?} (namespace {net}, earlier ones {seen:?})"
        );
        assert_ne!(net, host, "command {i} ran in the server's namespace");
        assert_ne!(
            net, held_net,
            "command {i} ran in the namespace of a command that still runs"
        );
        used_again += usize::from(seen.contains(&net));
        seen.push(net);
        earlier.push(me);
    }
    // The holder's end: once its cgroup is gone its namespace may serve a later command, which
    // must find its socket gone with it.
    s.tool_ok("terminate_process", json!({"process_id": held_id}));
    for i in 16..20 {
        let me = format!("c{i}");
        let cmd = command_of(&me, "leave", &earlier);
        let r = s.tool_ok(
            "exec_command",
            json!({"workspace_id": "closed", "command": cmd, "yield_ms": 20000}),
        );
        assert_eq!(r["exit_code"], 0, "{r}");
        let (net, reached) = net_and_reached(r["chunk"].as_str().unwrap_or_default());
        assert!(
            reached.is_empty(),
            "command {i} reached {reached:?} in {net}"
        );
        earlier.push(me);
    }
    if !require_warm(warm, TEST)
        || !codespace_test_skip::require(
            used_again > 0,
            TEST,
            "no namespace was used again (commands have no cgroup here?)",
        )
    {
        return;
    }
    s.close_and_wait(Duration::from_secs(20));
}
