//! The Unix-socket transport: private directory, peer uid, secret, stale sockets.

use super::{Req, Resp, handler};
use codespace_runner_worker::{Identity, Secret, WorkerError, unix};
use std::os::unix::fs::{MetadataExt, PermissionsExt};

type C = codespace_runner_worker::Client<Req, Resp, u32>;

fn uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

#[tokio::test]
async fn the_socket_is_0600_in_a_0700_directory_and_serves_the_allowed_uid() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("w").join("sock");
    let l = unix::bind(&path, uid()).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
    assert_eq!(
        std::fs::metadata(path.parent().unwrap()).unwrap().mode() & 0o777,
        0o700
    );
    let s = Secret::generate().unwrap();
    let me = Identity::this_build();
    let (s2, m2) = (s.clone(), me.clone());
    let server = tokio::spawn(async move { l.serve_forever(handler(), &s2, &m2).await });
    let (c, _ev) = unix::connect::<Req, Resp, u32>(&path, Some(uid()), &s, &me)
        .await
        .unwrap();
    assert_eq!(c.call(&Req::Ping).await.unwrap(), Resp::Pong);
    // A wrong secret: closed without an answer; the listener goes on serving.
    let wrong = Secret::generate().unwrap();
    let e = unix::connect::<Req, Resp, u32>(&path, None, &wrong, &me)
        .await
        .err()
        .unwrap();
    assert!(matches!(e, WorkerError::Handshake(_)), "{e}");
    // Expecting the worker under another uid: refused before hello.
    let e = unix::connect::<Req, Resp, u32>(&path, Some(uid() + 1), &s, &me)
        .await
        .err()
        .unwrap();
    assert!(e.to_string().contains("not the expected"), "{e}");
    let (c2, _ev) = unix::connect::<Req, Resp, u32>(&path, None, &s, &me)
        .await
        .unwrap();
    assert_eq!(c2.call(&Req::Ping).await.unwrap(), Resp::Pong);
    server.abort();
}

#[tokio::test]
async fn a_peer_of_another_uid_is_closed_unserved() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("w").join("sock");
    // Only uid+1 may talk to this worker: we are not it.
    let l = unix::bind(&path, uid() + 1).unwrap();
    let s = Secret::generate().unwrap();
    let me = Identity::this_build();
    let (s2, m2) = (s.clone(), me.clone());
    let _server = tokio::spawn(async move { l.serve_forever(handler(), &s2, &m2).await });
    let e = unix::connect::<Req, Resp, u32>(&path, None, &s, &me)
        .await
        .err()
        .unwrap();
    assert!(matches!(e, WorkerError::Handshake(_)), "{e}");
}

#[tokio::test]
async fn a_stale_socket_is_replaced_a_live_one_and_other_files_are_not() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("w");
    let path = dir.join("sock");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    // A dead worker's socket: bound, then its listener gone without removing the file.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    assert!(path.exists());
    let live = unix::bind(&path, uid()).unwrap();
    let e = unix::bind(&path, uid()).unwrap_err();
    assert!(e.to_string().contains("already listens"), "{e}");
    drop(live);
    assert!(!path.exists(), "the listener removes its socket");
    std::fs::write(&path, "x").unwrap();
    let e = unix::bind(&path, uid()).unwrap_err();
    assert!(e.to_string().contains("not a socket"), "{e}");
}

#[tokio::test]
async fn a_directory_others_can_enter_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("open");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let e = unix::bind(&dir.join("sock"), uid()).unwrap_err();
    assert!(e.to_string().contains("closed to others"), "{e}");
}

#[allow(dead_code)]
fn _types(_: C) {}
