//! The supervisor over in-memory workers it can kill: restarts, backoff, one report per death.

use super::{Req, Resp, handler};
use codespace_runner_worker::supervisor::ConnectFn;
use codespace_runner_worker::{
    Client, Identity, Secret, Supervisor, WorkerError, WorkerState, serve_stream,
};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

type Servers = Arc<Mutex<Vec<tokio::task::JoinHandle<Result<(), WorkerError>>>>>;

/// A connect function starting an in-memory worker per call (failing while `fail` is set).
fn connector(servers: Servers, fail: Arc<Mutex<bool>>) -> ConnectFn<Req, Resp, u32> {
    Arc::new(move || {
        let servers = servers.clone();
        let fail = fail.clone();
        Box::pin(async move {
            if *fail.lock().unwrap() {
                return Err(WorkerError::Transport("no worker today".into()));
            }
            let s = Secret::generate()?;
            let (a, b) = tokio::io::duplex(64 * 1024);
            let s2 = s.clone();
            servers.lock().unwrap().push(tokio::spawn(async move {
                serve_stream(b, handler(), &s2, &Identity::this_build()).await
            }));
            let (r, w) = tokio::io::split(a);
            Client::handshake(r, w, &s, &Identity::this_build()).await
        })
    })
}

#[tokio::test]
async fn a_death_fails_the_call_in_flight_is_reported_once_and_the_next_call_restarts() {
    let servers: Servers = Arc::default();
    let fail = Arc::new(Mutex::new(false));
    let (dtx, mut drx) = mpsc::unbounded_channel::<String>();
    let sup = Arc::new(Supervisor::new(
        connector(servers.clone(), fail.clone()),
        Arc::new(move |r: &str| {
            let _ = dtx.send(r.to_string());
        }),
    ));
    assert_eq!(sup.status().state, WorkerState::Down);
    assert_eq!(sup.call(&Req::Ping).await.unwrap(), Resp::Pong);
    let st = sup.status();
    assert_eq!((st.state, st.restarts), (WorkerState::Connected, 0));
    assert_eq!(st.version, Some(Identity::this_build().label()));

    let s2 = sup.clone();
    let waiting = tokio::spawn(async move { s2.call(&Req::Wait).await });
    // The wait is in flight once a ping behind it is answered (one connection, in order).
    assert_eq!(sup.call(&Req::Ping).await.unwrap(), Resp::Pong);
    servers.lock().unwrap()[0].abort();
    assert!(matches!(
        waiting.await.unwrap(),
        Err(WorkerError::Disconnected(_))
    ));
    let reason = drx.recv().await.unwrap();
    assert!(!reason.is_empty());
    assert_eq!(sup.status().state, WorkerState::Down);

    assert_eq!(sup.call(&Req::Ping).await.unwrap(), Resp::Pong);
    let st = sup.status();
    assert_eq!((st.state, st.restarts), (WorkerState::Connected, 1));
    assert!(drx.try_recv().is_err(), "one report per death");
}

#[tokio::test]
async fn failed_attempts_back_off_and_say_why() {
    let servers: Servers = Arc::default();
    let fail = Arc::new(Mutex::new(true));
    let sup = Supervisor::new(connector(servers, fail.clone()), Arc::new(|_: &str| {}))
        .with_backoff(
            std::time::Duration::from_secs(3600),
            std::time::Duration::from_secs(7200),
        );
    let e = sup.call(&Req::Ping).await.unwrap_err();
    assert!(e.to_string().contains("no worker today"), "{e}");
    *fail.lock().unwrap() = false;
    // Within the backoff the supervisor does not try: the last reason and the wait.
    match sup.call(&Req::Ping).await.unwrap_err() {
        WorkerError::Unavailable {
            reason,
            retry_in_ms,
        } => {
            assert!(reason.contains("no worker today"));
            assert!(retry_in_ms > 3_000_000);
        }
        e => panic!("{e}"),
    }
    let st = sup.status();
    assert_eq!(st.state, WorkerState::Down);
    assert!(st.last_error.unwrap().contains("no worker today"));
}
