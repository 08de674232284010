//! The process tools through the real gateway path (in-process, sandbox helper = the built
//! binary): pipes and PTY, interactive shells, resize, floods through cursors, timeouts,
//! terminate, leases, limits, idempotency, foreign clients, records and workspace_info.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::process_common;

use codespace_engine::ErrorCode;
use process_common::*;
use serde_json::json;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_through_pipes_returns_output_and_exit_in_the_same_call() {
    let e = env();
    let r = run(&e.gw, &["echo", "hello", "world"], 10_000).await;
    assert_eq!(r["dispatch_status"], "confirmed");
    assert!(r["process_id"].as_str().unwrap().starts_with("proc-"));
    assert_eq!(r["chunk"], "hello world\n");
    assert_eq!(r["cursor"], 12);
    assert_eq!(r["state"], "exited");
    assert_eq!(r["exit_code"], 0);
    assert_eq!(r["eof"], true);
    // The cwd is the workspace root and the environment is the runner's, not ours.
    std::fs::write(e.root.join("marker.txt"), "m").unwrap();
    let (code, out) = run_to_end(&e.gw, &["sh", "-c", "ls; env | sort"]).await;
    assert_eq!(code, Some(0));
    assert!(out.contains("marker.txt"), "{out}");
    assert!(
        out.contains("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
        "{out}"
    );
    assert!(out.contains("LANG=C.UTF-8"), "{out}");
    assert!(!out.contains("TERM="), "no TERM without a tty: {out}");
    assert!(
        !out.contains("CARGO"),
        "the server's environment leaked: {out}"
    );
    assert!(!out.contains("CODESPACE_SANDBOX_PLAN"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_through_a_pty_sees_a_terminal() {
    let e = env();
    let r = call(
        &e.gw,
        "exec_command",
        json!({"workspace_id": "w", "command": ["sh", "-c", "test -t 1 && echo tty-yes $TERM"],
               "tty": true, "yield_ms": 10_000}),
    )
    .await
    .unwrap();
    let id = r["process_id"].as_str().unwrap();
    let mut out = r["chunk"].as_str().unwrap().to_string();
    if r["eof"] != true {
        out.push_str(&read_all(&e.gw, id, r["cursor"].as_u64().unwrap()).await.0);
    }
    assert!(out.contains("tty-yes xterm"), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interactive_bash_over_pipes_is_driven_with_write_stdin() {
    let e = env();
    let r = run(&e.gw, &["bash", "--norc", "--noprofile"], 0).await;
    let id = r["process_id"].as_str().unwrap().to_string();
    let w = call(
        &e.gw,
        "write_stdin",
        json!({"process_id": id, "data": "echo $((6*7))\n"}),
    )
    .await
    .unwrap();
    assert_eq!(w["ok"], true);
    assert!(w["operation_id"].as_str().unwrap().starts_with("op-"));
    let (out, _) = read_until(&e.gw, &id, 0, "42\n").await;
    assert_eq!(out, "42\n");
    call(
        &e.gw,
        "write_stdin",
        json!({"process_id": id, "data": "exit 3\n"}),
    )
    .await
    .unwrap();
    let s = wait_exited(&e.gw, &id, Duration::from_secs(10)).await;
    assert_eq!(s["exit_code"], 3);
    assert_eq!(s["termination"], "exited");
    // Writing to an exited process is refused with a contract code.
    let err = call(
        &e.gw,
        "write_stdin",
        json!({"process_id": id, "data": "x\n"}),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            err.code,
            ErrorCode::ProcessNotFound | ErrorCode::ProcessNotRunning
        ),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pty_bash_sees_resize_through_stty_size() {
    let e = env();
    let r = call(
        &e.gw,
        "exec_command",
        json!({"workspace_id": "w", "command": ["bash", "--norc", "--noprofile", "-i"], "tty": true}),
    )
    .await
    .unwrap();
    let id = r["process_id"].as_str().unwrap().to_string();
    call(
        &e.gw,
        "write_stdin",
        json!({"process_id": id, "data": "stty size\n"}),
    )
    .await
    .unwrap();
    let (_, cursor) = read_until(&e.gw, &id, 0, "24 80").await;
    let rs = call(
        &e.gw,
        "process_resize",
        json!({"process_id": id, "rows": 40, "cols": 132}),
    )
    .await
    .unwrap();
    assert_eq!(rs, json!({"ok": true, "rows": 40, "cols": 132}));
    call(
        &e.gw,
        "write_stdin",
        json!({"process_id": id, "data": "stty size\n"}),
    )
    .await
    .unwrap();
    read_until(&e.gw, &id, cursor, "40 132").await;
    let bad = call(
        &e.gw,
        "process_resize",
        json!({"process_id": id, "rows": 0, "cols": 80}),
    )
    .await
    .unwrap_err();
    assert_eq!(bad.code, ErrorCode::InvalidArguments);
    call(&e.gw, "terminate_process", json!({"process_id": id}))
        .await
        .unwrap();
    wait_exited(&e.gw, &id, Duration::from_secs(10)).await;
    let gone = call(
        &e.gw,
        "process_resize",
        json!({"process_id": id, "rows": 10, "cols": 10}),
    )
    .await
    .unwrap_err();
    assert_eq!(gone.code, ErrorCode::ProcessNotRunning, "{gone}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resize_of_a_pipe_process_is_not_tty() {
    let e = env();
    let r = run(&e.gw, &["sleep", "30"], 0).await;
    let id = r["process_id"].as_str().unwrap();
    let err = call(
        &e.gw,
        "process_resize",
        json!({"process_id": id, "rows": 10, "cols": 10}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::ProcessNotTty);
    call(&e.gw, "terminate_process", json!({"process_id": id}))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_flood_is_read_through_cursors_with_a_bounded_window() {
    const RING: u64 = 64 * 1024;
    const TOTAL: u64 = 8 * 1024 * 1024;
    let e = env_with(Opts {
        limits: json!({"output_ring_bytes": RING}),
        ..Opts::default()
    });
    let r = run(
        &e.gw,
        &[
            "sh",
            "-c",
            &format!("head -c {TOTAL} /dev/zero | tr '\\0' 'a'"),
        ],
        0,
    )
    .await;
    let id = r["process_id"].as_str().unwrap().to_string();
    let (mut cursor, mut read, mut lost_seen) = (0u64, 0u64, false);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let c = call(
            &e.gw,
            "read_process",
            json!({"process_id": id, "cursor": cursor, "wait_ms": 2000}),
        )
        .await
        .unwrap();
        let chunk = c["chunk"].as_str().unwrap();
        assert!(
            chunk.len() as u64 <= RING,
            "a read returned more than the ring"
        );
        assert!(chunk.bytes().all(|b| b == b'a'));
        let retained = c["retained_from"].as_u64().unwrap();
        let next = c["cursor"].as_u64().unwrap();
        // Bytes are either returned or reported lost, never duplicated.
        let start = cursor.max(retained);
        assert_eq!(next - start, chunk.len() as u64);
        lost_seen |= c["output_lost"] == true;
        read += chunk.len() as u64;
        cursor = next;
        if c["eof"] == true {
            break;
        }
        assert!(Instant::now() < deadline, "flood not drained in time");
    }
    assert_eq!(cursor, TOTAL);
    assert!(read <= TOTAL);
    let s = wait_exited(&e.gw, &id, Duration::from_secs(10)).await;
    assert_eq!(s["output_total"], TOTAL);
    assert_eq!(s["output_retained_from"], TOTAL - RING);
    assert!(lost_seen || read == TOTAL);
    // Reading from 0 now gives the retained window only.
    let c = call(&e.gw, "read_process", json!({"process_id": id}))
        .await
        .unwrap();
    assert_eq!(c["output_lost"], true);
    assert_eq!(c["retained_from"], TOTAL - RING);
    assert_eq!(c["chunk"].as_str().unwrap().len() as u64, RING);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stderr_flood_does_not_deadlock_stdout() {
    let e = env();
    // 3 MB to stderr before anything on stdout: a runner that drained only stdout would hang
    // here with the child blocked on a full stderr pipe.
    let r = run(
        &e.gw,
        &[
            "sh",
            "-c",
            "head -c 3000000 /dev/zero >&2; head -c 3000000 /dev/zero; echo done",
        ],
        20_000,
    )
    .await;
    assert_eq!(r["state"], "exited", "{r}");
    assert_eq!(r["exit_code"], 0);
    let id = r["process_id"].as_str().unwrap();
    let s = wait_exited(&e.gw, id, Duration::from_secs(5)).await;
    // No ordering between the two pipes is promised; every byte of both arrives.
    assert_eq!(s["output_total"], 6_000_005);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_kills_a_term_ignoring_process_and_its_grandchild() {
    let e = env();
    let r = call(
        &e.gw,
        "exec_command",
        json!({"workspace_id": "w", "timeout_ms": 700, "command": ["sh", "-c",
            "trap '' TERM; (trap '' TERM; exec sleep 1000) & echo grandchild $!; while :; do sleep 0.05; done"]}),
    )
    .await
    .unwrap();
    let id = r["process_id"].as_str().unwrap().to_string();
    let (out, _) = read_until(&e.gw, &id, 0, "\n").await;
    let gc: i64 = out
        .trim()
        .strip_prefix("grandchild ")
        .unwrap()
        .parse()
        .unwrap();
    assert!(pid_alive(gc));
    let s = wait_exited(&e.gw, &id, Duration::from_secs(15)).await;
    assert_eq!(s["termination"], "timeout", "{s}");
    assert!(s.get("exit_code").is_none(), "{s}");
    assert!(
        wait_pids_gone(&[gc], Duration::from_secs(5)).is_empty(),
        "grandchild survived"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminate_ends_the_process_and_frees_the_workspace() {
    let e = env();
    let r = run(&e.gw, &["sleep", "1000"], 0).await;
    let id = r["process_id"].as_str().unwrap().to_string();
    let t = call(&e.gw, "terminate_process", json!({"process_id": id}))
        .await
        .unwrap();
    assert_eq!(t["ok"], true);
    let s = wait_exited(&e.gw, &id, Duration::from_secs(10)).await;
    assert_eq!(s["termination"], "terminated");
    let again = exec_when_free(&e.gw, "w", &["true"]).await;
    assert_eq!(again["exit_code"], 0);
    // The operation trail has the exec and the terminate.
    let op = call(
        &e.gw,
        "operation_status",
        json!({"operation_id": t["operation_id"]}),
    )
    .await
    .unwrap();
    assert_eq!(op["kind"], "terminate");
    let op = call(
        &e.gw,
        "operation_status",
        json!({"operation_id": r["operation_id"]}),
    )
    .await
    .unwrap();
    assert_eq!(op["kind"], "exec");
    assert_eq!(op["process_id"], json!(id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_process_holds_the_workspace_but_reads_still_work() {
    let e = env_with(Opts {
        extra_workspaces: vec!["v"],
        ..Opts::default()
    });
    std::fs::write(e.root.join("a.txt"), "alpha\n").unwrap();
    let r = run(&e.gw, &["sleep", "1000"], 0).await;
    let id = r["process_id"].as_str().unwrap().to_string();
    let busy = call(
        &e.gw,
        "exec_command",
        json!({"workspace_id": "w", "command": ["true"]}),
    )
    .await
    .unwrap_err();
    assert_eq!(busy.code, ErrorCode::WorkspaceBusy);
    assert!(busy.message.contains(&id), "{busy}");
    let patch = "*** Begin Patch\n*** Add File: b.txt\n+b\n*** End Patch\n";
    let busy = call(
        &e.gw,
        "apply_patch",
        json!({"workspace_id": "w", "patch": patch}),
    )
    .await
    .unwrap_err();
    assert_eq!(busy.code, ErrorCode::WorkspaceBusy);
    let read = call(&e.gw, "read", json!({"workspace_id": "w", "path": "a.txt"}))
        .await
        .unwrap();
    assert_eq!(read["content"], "alpha\n");
    let found = call(&e.gw, "find", json!({"workspace_id": "w"}))
        .await
        .unwrap();
    assert_eq!(found["paths"], json!(["a.txt"]));
    // Another workspace is independent.
    let other = call(
        &e.gw,
        "exec_command",
        json!({"workspace_id": "v", "command": ["true"], "yield_ms": 10_000}),
    )
    .await
    .unwrap();
    assert_eq!(other["exit_code"], 0);
    call(&e.gw, "terminate_process", json!({"process_id": id}))
        .await
        .unwrap();
    exec_when_free(&e.gw, "w", &["true"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_process_limit_is_enforced_across_workspaces() {
    let e = env_with(Opts {
        limits: json!({"max_live_processes": 2}),
        extra_workspaces: vec!["v", "u"],
        ..Opts::default()
    });
    let mut ids = Vec::new();
    for ws in ["w", "v"] {
        let r = call(
            &e.gw,
            "exec_command",
            json!({"workspace_id": ws, "command": ["sleep", "1000"]}),
        )
        .await
        .unwrap();
        ids.push(r["process_id"].as_str().unwrap().to_string());
    }
    assert_eq!(e.gw.live_processes(), 2);
    let err = call(
        &e.gw,
        "exec_command",
        json!({"workspace_id": "u", "command": ["true"]}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::WorkspaceBusy);
    assert!(
        err.message.contains("maximum number of live processes"),
        "{err}"
    );
    // The refused exec did not keep workspace `u` busy.
    call(&e.gw, "terminate_process", json!({"process_id": ids[0]}))
        .await
        .unwrap();
    wait_exited(&e.gw, &ids[0], Duration::from_secs(10)).await;
    let ok = exec_when_free(&e.gw, "u", &["true"]).await;
    assert_eq!(ok["exit_code"], 0);
    call(&e.gw, "terminate_process", json!({"process_id": ids[1]}))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operation_key_replays_the_same_process_and_never_starts_a_second() {
    let e = env();
    let args = json!({"workspace_id": "w", "command": ["sleep", "1000"], "operation_key": "k-1"});
    let first = call(&e.gw, "exec_command", args.clone()).await.unwrap();
    assert_eq!(first["replayed"], false);
    let second = call(&e.gw, "exec_command", args.clone()).await.unwrap();
    assert_eq!(second["replayed"], true);
    assert_eq!(second["process_id"], first["process_id"]);
    assert_eq!(second["operation_id"], first["operation_id"]);
    assert_eq!(e.gw.live_processes(), 1);
    let conflict = call(
        &e.gw,
        "exec_command",
        json!({"workspace_id": "w", "command": ["sleep", "999"], "operation_key": "k-1"}),
    )
    .await
    .unwrap_err();
    assert_eq!(conflict.code, ErrorCode::OperationKeyConflict);
    let by_key = call(&e.gw, "operation_status", json!({"operation_key": "k-1"}))
        .await
        .unwrap();
    assert_eq!(by_key["process_id"], first["process_id"]);
    call(
        &e.gw,
        "terminate_process",
        json!({"process_id": first["process_id"]}),
    )
    .await
    .unwrap();
    // After the process ended, the key still replays (no second process).
    wait_exited(
        &e.gw,
        first["process_id"].as_str().unwrap(),
        Duration::from_secs(10),
    )
    .await;
    let third = call(&e.gw, "exec_command", args).await.unwrap();
    assert_eq!(third["process_id"], first["process_id"]);
    assert_eq!(e.gw.live_processes(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_client_cannot_steer_a_process() {
    let e = env();
    let r = run(&e.gw, &["sleep", "1000"], 0).await;
    let id = r["process_id"].as_str().unwrap().to_string();
    for (tool, args) in [
        ("read_process", json!({"process_id": id})),
        ("write_stdin", json!({"process_id": id, "data": "x"})),
        ("terminate_process", json!({"process_id": id})),
        ("process_status", json!({"process_id": id})),
    ] {
        let err = call_as(&e.gw, &other_client(), tool, args)
            .await
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::Unauthorized, "{tool}: {err}");
        assert!(
            err.policy_ids
                .as_ref()
                .unwrap()
                .iter()
                .any(|p| p == "base.forbid.foreign-process"),
            "{tool}: {err:?}"
        );
    }
    let s = call(&e.gw, "process_status", json!({"process_id": id}))
        .await
        .unwrap();
    assert_eq!(s["state"], "running");
    let unknown = call(&e.gw, "read_process", json!({"process_id": "proc-nope"}))
        .await
        .unwrap_err();
    assert_eq!(unknown.code, ErrorCode::ProcessNotFound);
    call(&e.gw, "terminate_process", json!({"process_id": id}))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_commands_fail_before_anything_starts() {
    let e = env();
    let empty = call(
        &e.gw,
        "exec_command",
        json!({"workspace_id": "w", "command": []}),
    )
    .await
    .unwrap_err();
    assert_eq!(empty.code, ErrorCode::InvalidCommand);
    let missing = call(
        &e.gw,
        "exec_command",
        json!({"workspace_id": "w", "command": ["definitely-not-a-program-xyz"]}),
    )
    .await
    .unwrap_err();
    assert_eq!(missing.code, ErrorCode::ProcessSpawnFailed, "{missing}");
    assert!(missing.operation_id.is_some());
    assert!(!missing.message.contains(e.root.to_str().unwrap()));
    assert_eq!(e.gw.live_processes(), 0);
    // The failed exec did not keep the lease.
    run(&e.gw, &["true"], 10_000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_profile_cannot_exec() {
    let e = env_with(Opts {
        profile: "read-only",
        ..Opts::default()
    });
    let err = call(
        &e.gw,
        "exec_command",
        json!({"workspace_id": "w", "command": ["true"]}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::Unauthorized);
    let info = call(&e.gw, "workspace_info", json!({"workspace_id": "w"}))
        .await
        .unwrap();
    assert_eq!(info["execution"]["process"]["available"], false);
    assert_eq!(info["execution"]["permissions"]["exec"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_records_and_workspace_info_reflect_reality() {
    let e = env();
    let r = run(&e.gw, &["sh", "-c", "exit 7"], 10_000).await;
    let id = r["process_id"].as_str().unwrap().to_string();
    assert_eq!(r["exit_code"], 7);
    let store = e.gw.store().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let row = loop {
        let row = store.process(&id).unwrap().unwrap();
        if row.state == "exited" {
            break row;
        }
        assert!(
            Instant::now() < deadline,
            "process row never updated: {row:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(row.exit_code, Some(7));
    assert_eq!(row.termination.as_deref(), Some("exited"));
    assert_eq!(row.program, "sh");
    assert!(row.argv_sha256.starts_with("sha256:"));
    assert_eq!(row.operation_id, r["operation_id"].as_str().unwrap());
    let info = call(&e.gw, "workspace_info", json!({"workspace_id": "w"}))
        .await
        .unwrap();
    let x = &info["execution"];
    assert_eq!(x["process"]["available"], true);
    assert_eq!(
        x["process"]["capabilities"]["tty"]["resize_supported"],
        true
    );
    assert_eq!(x["permissions"]["exec"], true);
    let probe = codespace_runner_sandbox::probe();
    let expected_sandbox = if probe.sandbox_available() {
        "linux-sandbox"
    } else {
        "none"
    };
    assert_eq!(x["isolation"]["command_sandbox"], expected_sandbox);
    let expected_net = if probe.network_enforceable() {
        "enforced"
    } else {
        "none"
    };
    assert_eq!(x["network"]["enforcement"], expected_net);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_kills_every_process_group() {
    let e = env_with(Opts {
        extra_workspaces: vec!["v"],
        ..Opts::default()
    });
    let mut pids = Vec::new();
    for ws in ["w", "v"] {
        let r = call(
            &e.gw,
            "exec_command",
            json!({"workspace_id": ws, "command": ["sh", "-c", "sleep 1000 & echo $!; wait"]}),
        )
        .await
        .unwrap();
        let id = r["process_id"].as_str().unwrap().to_string();
        let (out, _) = read_until(&e.gw, &id, 0, "\n").await;
        pids.push(out.trim().parse::<i64>().unwrap());
    }
    assert!(pids.iter().all(|p| pid_alive(*p)));
    e.gw.shutdown().await;
    assert_eq!(e.gw.live_processes(), 0);
    assert!(wait_pids_gone(&pids, Duration::from_secs(5)).is_empty());
}
