//! `codespace worker`: the built binary served through the worker crate's transports — spawned
//! for stdio, as another uid on a socket; handshake mismatch; kill -9 mid-call and the
//! supervisor's restart. Synchronized on exits (pidfd), lines and answers, never on sleeps.

use codespace_mcp::worker_cli::{PingCall, PingReply};
use codespace_runner_worker::spawn::{SpawnSpec, spawn};
use codespace_runner_worker::supervisor::ConnectFn;
use codespace_runner_worker::{Identity, Secret, Supervisor, WorkerError, WorkerState, unix};
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use tokio::io::AsyncBufReadExt;

const BIN: &str = env!("CARGO_BIN_EXE_codespace");

type Client = codespace_runner_worker::Client<PingCall, PingReply, ()>;

fn stdio_spec() -> SpawnSpec {
    SpawnSpec {
        argv: vec![BIN.into(), "worker".into(), "--stdio".into()],
        env: Vec::new(),
    }
}

async fn pid_of(c: &Client) -> u32 {
    match c.call(&PingCall::Ping).await.unwrap() {
        PingReply::Pong { pid } => pid,
    }
}

/// Resolves when process `pid` has exited (its pidfd turns readable).
async fn exited(pid: u32) {
    let pid = rustix::process::Pid::from_raw(pid as i32).unwrap();
    let Ok(fd) = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()) else {
        return; // already gone
    };
    // `AsyncFd::register` is the unsafe replacement; the pidfd is ours, owned and open.
    #[allow(deprecated)]
    let fd = tokio::io::unix::AsyncFd::new(fd).unwrap();
    let _ = fd.readable().await.unwrap();
}

#[tokio::test]
async fn the_built_worker_answers_over_stdio_and_dies_with_its_client() {
    let s = Secret::generate().unwrap();
    let (c, _ev) = spawn::<PingCall, PingReply, ()>(&stdio_spec(), &s, &Identity::this_build())
        .await
        .unwrap();
    assert_eq!(c.peer(), &Identity::this_build());
    let pid = pid_of(&c).await;
    assert_ne!(pid, std::process::id());
    drop(c);
    exited(pid).await;
}

#[tokio::test]
async fn a_gateway_of_another_build_or_protocol_meets_the_worker_with_both_named() {
    let s = Secret::generate().unwrap();
    let me = Identity::this_build();
    let other = Identity {
        protocol: me.protocol,
        build: "0.0.0+other".into(),
    };
    let e = spawn::<PingCall, PingReply, ()>(&stdio_spec(), &s, &other)
        .await
        .err()
        .unwrap();
    let want = format!(
        "gateway {}/0.0.0+other met worker {}",
        me.protocol,
        me.label()
    );
    assert!(matches!(e, WorkerError::Mismatch { .. }), "{e}");
    assert!(e.to_string().contains(&want), "{e}");
    let older = Identity {
        protocol: 99,
        build: me.build.clone(),
    };
    let e = spawn::<PingCall, PingReply, ()>(&stdio_spec(), &s, &older)
        .await
        .err()
        .unwrap();
    assert!(
        e.to_string().contains(&format!(
            "gateway 99/{} met worker {}",
            me.build,
            me.label()
        )),
        "{e}"
    );
}

#[tokio::test]
async fn a_worker_that_fails_to_start_is_reported_with_its_stderr() {
    let spec = SpawnSpec {
        argv: vec![
            "sh".into(),
            "-c".into(),
            "echo no such worker here >&2; exit 3".into(),
        ],
        env: Vec::new(),
    };
    let s = Secret::generate().unwrap();
    let e = spawn::<PingCall, PingReply, ()>(&spec, &s, &Identity::this_build())
        .await
        .err()
        .unwrap();
    assert!(matches!(e, WorkerError::Handshake(_)), "{e}");
    assert!(e.to_string().contains("no such worker here"), "{e}");
}

#[tokio::test]
async fn kill_9_mid_call_fails_it_disconnected_and_the_next_call_restarts_the_worker() {
    let connect: ConnectFn<PingCall, PingReply, ()> = Arc::new(|| {
        Box::pin(async {
            let s = Secret::generate()?;
            spawn(&stdio_spec(), &s, &Identity::this_build()).await
        })
    });
    let (dtx, mut drx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let sup = Arc::new(Supervisor::new(
        connect,
        Arc::new(move |r: &str| {
            let _ = dtx.send(r.to_string());
        }),
    ));
    let PingReply::Pong { pid: first } = sup.call(&PingCall::Ping).await.unwrap();
    let s2 = sup.clone();
    let hanging = tokio::spawn(async move { s2.call(&PingCall::Hang).await });
    // The hang is in flight once the client holds a call waiting for its answer.
    let client = sup.client().await.unwrap();
    while client.in_flight() == 0 {
        tokio::task::yield_now().await;
    }
    drop(client);
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(first as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    let e = hanging.await.unwrap().unwrap_err();
    assert!(matches!(e, WorkerError::Disconnected(_)), "{e}");
    let reason = drx.recv().await.unwrap();
    assert!(reason.contains("closed"), "{reason}");
    assert_eq!(sup.status().state, WorkerState::Down);
    let PingReply::Pong { pid: second } = sup.call(&PingCall::Ping).await.unwrap();
    assert_ne!(first, second);
    let st = sup.status();
    assert_eq!((st.state, st.restarts), (WorkerState::Connected, 1));
    assert_eq!(st.version, Some(Identity::this_build().label()));
    assert!(drx.try_recv().is_err(), "one report per death");
}

/// A throwaway uid no account uses.
const OTHER_UID: u32 = 64_123;

/// Starts `codespace worker --socket DIR/sock --allow-uid ALLOW` as [`OTHER_UID`]; returns the
/// child once it printed `listening`.
async fn socket_worker_as_other_uid(
    dir: &std::path::Path,
    allow: u32,
    secret: &Secret,
) -> tokio::process::Child {
    let uid = OTHER_UID.to_string();
    let mut child = tokio::process::Command::new("setpriv")
        .args([
            "--reuid",
            &uid,
            "--regid",
            &uid,
            "--clear-groups",
            BIN,
            "worker",
            "--socket",
        ])
        .arg(dir.join("sock"))
        .arg("--allow-uid")
        .arg(allow.to_string())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut stdin, format!("{}\n", secret.expose()).as_bytes())
        .await
        .unwrap();
    drop(stdin);
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(
        lines.next_line().await.unwrap().as_deref(),
        Some("listening")
    );
    child
}

#[tokio::test]
async fn a_socket_worker_of_another_uid_refuses_a_peer_it_does_not_allow() {
    let test = "worker::a_socket_worker_of_another_uid_refuses_a_peer_it_does_not_allow";
    let root = rustix::process::geteuid().is_root();
    let setpriv = std::process::Command::new("setpriv")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !codespace_test_skip::require(
        root && setpriv,
        test,
        "needs root and setpriv (util-linux) to run the worker as a throwaway uid",
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let me = Identity::this_build();
    let s = Secret::generate().unwrap();

    // Allowed: only its own uid. We (root) may reach the socket, but are not that uid.
    let dir = tmp.path().join("a");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    rustix::fs::chown(&dir, Some(rustix::process::Uid::from_raw(OTHER_UID)), None).unwrap();
    let _w = socket_worker_as_other_uid(&dir, OTHER_UID, &s).await;
    let e = unix::connect::<PingCall, PingReply, ()>(&dir.join("sock"), None, &s, &me)
        .await
        .err()
        .unwrap();
    assert!(matches!(e, WorkerError::Handshake(_)), "{e}");
    // The gateway's own check: a worker not of the expected uid.
    let e = unix::connect::<PingCall, PingReply, ()>(&dir.join("sock"), Some(0), &s, &me)
        .await
        .err()
        .unwrap();
    assert!(e.to_string().contains("not the expected 0"), "{e}");

    // Allowed: root. Served; a wrong secret is not.
    let dir = tmp.path().join("b");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    rustix::fs::chown(&dir, Some(rustix::process::Uid::from_raw(OTHER_UID)), None).unwrap();
    let _w = socket_worker_as_other_uid(&dir, 0, &s).await;
    let wrong = Secret::generate().unwrap();
    let e = unix::connect::<PingCall, PingReply, ()>(&dir.join("sock"), None, &wrong, &me)
        .await
        .err()
        .unwrap();
    assert!(matches!(e, WorkerError::Handshake(_)), "{e}");
    let (c, _ev) =
        unix::connect::<PingCall, PingReply, ()>(&dir.join("sock"), Some(OTHER_UID), &s, &me)
            .await
            .unwrap();
    let PingReply::Pong { pid } = c.call(&PingCall::Ping).await.unwrap();
    assert_ne!(pid, std::process::id());
}

type RunnerClient = codespace_runner_worker::Client<
    codespace_runner_api::Call,
    codespace_runner_api::Reply,
    codespace_runner_api::Event,
>;

async fn open(c: &RunnerClient, root: &std::path::Path) -> codespace_runner_api::Reply {
    c.call(&codespace_runner_api::Call::OpenWorkspace(
        codespace_runner_api::OpenWorkspace {
            workspace: "w".into(),
            root: root.display().to_string(),
        },
    ))
    .await
    .unwrap()
}

#[tokio::test]
async fn the_worker_serves_the_runner_for_the_roots_it_is_given_and_reports_changes() {
    use codespace_runner_api::{Call, Event, ReadRequest, Reply};
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("a.txt"), "alpha\n").unwrap();
    std::os::unix::fs::symlink(&root, dir.path().join("link")).unwrap();
    let s = Secret::generate().unwrap();
    let (c, mut events): (RunnerClient, _) = spawn(&stdio_spec(), &s, &Identity::this_build())
        .await
        .unwrap();
    let read = Call::Read(ReadRequest {
        workspace: "w".into(),
        path: "a.txt".into(),
        offset: 0,
        limit: 100,
        max_hash_bytes: 1 << 20,
    });
    // No workspace yet: nothing is served.
    assert!(matches!(c.call(&read).await.unwrap(), Reply::Error(_)));
    // A root reached through a symlink, or a relative one, is refused with why.
    for bad in [dir.path().join("link"), std::path::PathBuf::from("root")] {
        match open(&c, &bad).await {
            Reply::Error(e) => assert_eq!(e.code(), "FILE_OPERATION_FAILED", "{e}"),
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    assert_eq!(open(&c, &root).await, Reply::Done);
    match c.call(&read).await.unwrap() {
        Reply::Window(w) => {
            assert_eq!(w.data, b"alpha\n");
            assert!(w.version.starts_with("sha256:"));
        }
        other => panic!("{other:?}"),
    }
    // A change made on the worker's side is reported by its watcher.
    std::fs::write(root.join("b.txt"), "beta\n").unwrap();
    loop {
        match events.recv().await.unwrap() {
            Event::FileChanged { workspace, paths } if paths.iter().any(|p| p == "b.txt") => {
                assert_eq!(workspace, "w");
                break;
            }
            Event::WatchLost { .. } => panic!("the watcher lost events"),
            _ => {}
        }
    }
}
