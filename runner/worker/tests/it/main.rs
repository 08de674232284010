//! The worker protocol end to end in one process: in-memory streams and real Unix sockets.
// Test code: helpers outside #[test] fns fail loudly, as the tests themselves do.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod protocol;
mod sockets;
mod supervisor;

use codespace_runner_worker::{BoxFuture, EventSender, Handler};
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub enum Req {
    Ping,
    /// Answers once a `Release` came.
    Wait,
    Release,
    /// Pushes this event, then answers.
    Emit(u32),
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub enum Resp {
    Pong,
    Released,
    Done,
}

#[derive(Default)]
pub struct TestHandler {
    release: Notify,
    events: Mutex<Option<EventSender<u32>>>,
}

impl Handler for TestHandler {
    type Req = Req;
    type Resp = Resp;
    type Ev = u32;

    fn handle(&self, req: Req) -> BoxFuture<'_, Resp> {
        Box::pin(async move {
            match req {
                Req::Ping => Resp::Pong,
                Req::Wait => {
                    self.release.notified().await;
                    Resp::Released
                }
                Req::Release => {
                    self.release.notify_waiters();
                    Resp::Done
                }
                Req::Emit(n) => {
                    let tx = self.events.lock().unwrap().clone();
                    tx.unwrap().send(&n).await.unwrap();
                    Resp::Done
                }
            }
        })
    }

    fn attach(&self, events: EventSender<u32>) {
        *self.events.lock().unwrap() = Some(events);
    }
}

pub fn handler() -> Arc<TestHandler> {
    Arc::new(TestHandler::default())
}
