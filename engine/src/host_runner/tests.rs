//! Tests of the host runner: each method, and a `RemoteRunner` over JSON behaving like it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;
use codespace_runner_api::{Call, RemoteRunner, Reply, Wire, serve_call};

/// A worker in memory: every call and reply crosses as JSON, answered by a host runner.
struct JsonWire(Arc<HostRunner>);

impl Wire for JsonWire {
    fn call(&self, call: Call) -> BoxFuture<'_, Result<Reply, RunnerError>> {
        Box::pin(async move {
            let sent = serde_json::to_string(&call).unwrap();
            let call: Call = serde_json::from_str(&sent).unwrap();
            let reply = serve_call(&*self.0, call).await;
            let back = serde_json::to_string(&reply).unwrap();
            Ok(serde_json::from_str(&back).unwrap())
        })
    }
    fn subscribe(&self, sink: EventSink) {
        self.0.subscribe(sink);
    }
}

fn host(dir: &std::path::Path) -> Arc<HostRunner> {
    let path = std::fs::canonicalize(dir).unwrap();
    let h = HostRunner::new(
        Arc::new(FileVersions::new()),
        TableLimits {
            cgroups: false,
            ..TableLimits::default()
        },
        None,
    );
    h.add_workspace("w", Arc::new(Root::open(&path).unwrap()), path);
    Arc::new(h)
}

fn ws() -> String {
    "w".to_string()
}

#[tokio::test]
async fn a_remote_runner_over_json_behaves_like_the_host_runner() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "hello\nworld\n").unwrap();
    std::fs::create_dir(dir.path().join("d")).unwrap();
    std::fs::write(dir.path().join("d/b.txt"), "b\n").unwrap();
    std::os::unix::fs::symlink("a.txt", dir.path().join("link")).unwrap();
    let local = host(dir.path());
    let remote: Arc<dyn Runner> = Arc::new(RemoteRunner::new(JsonWire(host(dir.path()))));
    let local_dyn: Arc<dyn Runner> = local;
    for r in [&local_dyn, &remote] {
        // read: a window and the whole file's facts; errors keep their code and message.
        let read = |path: &str, offset, limit| api::ReadRequest {
            workspace: ws(),
            path: path.into(),
            offset,
            limit,
            max_hash_bytes: 1 << 20,
        };
        let w = r.read(read("a.txt", 6, 5)).await.unwrap();
        assert_eq!((w.data.as_slice(), w.size, w.links), (&b"world"[..], 12, 1));
        assert!(w.version.starts_with("sha256:"));
        let e = r.read(read("missing", 0, 1)).await.unwrap_err();
        assert_eq!(e.code(), "FILE_NOT_FOUND");
        assert_eq!(e.to_string(), "file not found: missing");
        let e = r.read(read("link", 0, 1)).await.unwrap_err();
        assert_eq!(e.code(), "SYMLINK_REJECTED");
        let mut big = read("a.txt", 0, 1);
        big.max_hash_bytes = 3;
        let e = r.read(big).await.unwrap_err();
        assert_eq!(e.code(), "FILE_TOO_LARGE");
        assert!(e.to_string().ends_with("(limits.max_hash_bytes)"), "{e}");
        // stat and version.
        let path = |p: &str| api::PathRequest {
            workspace: ws(),
            path: p.into(),
        };
        let st = r.stat(path("d")).await.unwrap().unwrap();
        assert_eq!(st.kind, api::FileKind::Dir);
        assert_eq!(r.stat(path("nope")).await.unwrap(), None);
        let v = r
            .version(api::VersionRequest {
                workspace: ws(),
                path: "a.txt".into(),
                max_hash_bytes: 1 << 20,
            })
            .await
            .unwrap();
        assert_eq!(v.as_deref(), Some(w.version.as_str()));
        // walk.
        let l = r
            .walk(api::WalkRequest {
                workspace: ws(),
                path: ".".into(),
                max_depth: 8,
                max_entries: 100,
                stat_links: true,
            })
            .await
            .unwrap();
        let names: Vec<&str> = l.entries.iter().map(|e| e.path.as_str()).collect();
        assert!(
            names.contains(&"d/b.txt") && names.contains(&"link"),
            "{names:?}"
        );
        // grep.
        let g = r
            .grep(api::GrepRequest {
                workspace: ws(),
                files: vec!["a.txt".into(), "d/b.txt".into()],
                pattern: "wor".into(),
                regex: false,
                case_insensitive: false,
                context_lines: 0,
                offset: 0,
                max_matches: 10,
                max_file_bytes: 1 << 20,
                max_line_chars: 100,
                max_output_bytes: 1 << 20,
            })
            .await
            .unwrap();
        assert_eq!(g.matches.len(), 1);
        assert_eq!((g.matches[0].file, g.matches[0].line_number), (0, 2));
    }
    // patch: snapshot, journal (kept by the caller), apply; a change after the snapshot
    // is refused before anything is written.
    for (r, name) in [(&local_dyn, "l.txt"), (&remote, "r.txt")] {
        let changes = vec![api::FileChange::Write {
            path: name.into(),
            data: b"new\n".to_vec(),
            mode: 0o644,
        }];
        let snap = r
            .snapshot(api::SnapshotRequest {
                workspace: ws(),
                changes: changes.clone(),
            })
            .await
            .unwrap();
        assert_eq!(
            snap,
            vec![api::Backup {
                path: name.into(),
                before: None
            }]
        );
        assert!(!dir.path().join(name).exists(), "a snapshot writes nothing");
        std::fs::write(dir.path().join(name), "outside\n").unwrap();
        let e = r
            .apply(api::ApplyRequest {
                workspace: ws(),
                changes: changes.clone(),
                journaled: snap,
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), "STALE_READ", "{e}");
        assert_eq!(std::fs::read(dir.path().join(name)).unwrap(), b"outside\n");
        let snap = r
            .snapshot(api::SnapshotRequest {
                workspace: ws(),
                changes: changes.clone(),
            })
            .await
            .unwrap();
        let done = r
            .apply(api::ApplyRequest {
                workspace: ws(),
                changes,
                journaled: snap.clone(),
            })
            .await
            .unwrap();
        assert_eq!(done.files.len(), 1);
        assert_eq!(std::fs::read(dir.path().join(name)).unwrap(), b"new\n");
        r.restore(api::RestoreRequest {
            workspace: ws(),
            backups: snap,
        })
        .await
        .unwrap();
        assert_eq!(std::fs::read(dir.path().join(name)).unwrap(), b"outside\n");
    }
    // exec: spawn (no sandbox plan: the operator turned it off), read, wait; exit events.
    for r in [&local_dyn, &remote] {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        r.subscribe(Arc::new(move |e| {
            let _ = tx.send(e);
        }));
        let p = r
            .spawn(api::SpawnRequest {
                workspace: ws(),
                argv: vec!["/bin/sh".into(), "-c".into(), "cat a.txt; exit 3".into()],
                cwd: ".".into(),
                env: vec![("PATH".into(), "/usr/bin:/bin".into())],
                tty: None,
                timeout_ms: None,
                separate_stderr: false,
                owner: "test".into(),
                sandbox: None,
            })
            .await
            .unwrap();
        let id = api::ProcessRef {
            process_id: p.process_id.clone(),
        };
        let st = r.wait(id.clone()).await.unwrap();
        assert_eq!(
            (st.state, st.exit_code),
            (api::ProcessState::Exited, Some(3))
        );
        let out = r
            .read_output(api::OutputRequest {
                process_id: p.process_id.clone(),
                stream: api::OutputStream::Stdout,
                cursor: 0,
                max_bytes: None,
                wait_ms: 0,
                tail: false,
            })
            .await
            .unwrap();
        assert_eq!(out.data, b"hello\nworld\n");
        match rx.recv().await.unwrap() {
            api::Event::ProcessExited { status } => {
                assert_eq!(status.process_id, p.process_id)
            }
            other => panic!("{other:?}"),
        }
        let e = r
            .status(api::ProcessRef {
                process_id: "nope".into(),
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), "PROCESS_NOT_FOUND");
        // A sandbox plan without a helper fails closed: nothing runs.
        let e = r
            .spawn(api::SpawnRequest {
                workspace: ws(),
                argv: vec!["/bin/true".into()],
                cwd: ".".into(),
                env: Vec::new(),
                tty: None,
                timeout_ms: None,
                separate_stderr: false,
                owner: "test".into(),
                sandbox: Some(api::SandboxSpec {
                    write_workspace: false,
                    write_paths: Vec::new(),
                    read_only: Vec::new(),
                    masks: Vec::new(),
                    network: api::SandboxNetwork::Restricted,
                    tmp_dir: None,
                    extra_read: Vec::new(),
                    home_dir: None,
                    private_tmp: None,
                    mask_non_utf8_top_level: false,
                    proxy_relay: None,
                    stage: None,
                }),
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), "PROCESS_SPAWN_FAILED");
    }
}

#[test]
fn errors_map_to_the_tool_error_they_came_from() {
    for code in ErrorCode::ALL {
        let t = ToolError::new(*code, "m");
        let back = to_tool_error(from_tool_error(t.clone()));
        if from_tool_error(t.clone()).code() == "INTERNAL" {
            assert_eq!(back.code, ErrorCode::Internal);
        } else {
            assert_eq!(back, t);
        }
    }
}
