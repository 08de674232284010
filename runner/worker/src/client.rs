//! The gateway's side: [`Client`] sends the handshake, then multiplexes calls by id over one
//! stream; when the stream ends every in-flight call fails with `Disconnected`. A call writes
//! its own frame (one `write` on the stream, under a lock shared by the calls; no writer task
//! to hand it to), and one reader task hands each answer to its call.

use crate::frame::{Ack, ClientFrame, Hello, ServerFrame, codec, decode_body, decode_handshake};
use crate::server::{encode, encode_handshake};
use crate::{Identity, Secret, WorkerError};
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::AbortHandle;
use tokio_util::codec::{FramedRead, FramedWrite, LengthDelimitedCodec};

/// Events queued for the [`EventReceiver`]; when it is full further events are dropped and
/// counted (a reader that stalls must not hold up the replies behind them).
pub const EVENT_QUEUE: usize = 1024;
/// The reader's first buffer: a 10 KB file window's answer is read in one `read`, not two
/// with a reallocation between them (the default is 8 KiB).
const READ_BUFFER: usize = 64 * 1024;

/// The stream's write half, shared by the calls (each writes its whole frame under the lock;
/// a call dropped mid-write leaves the rest of its frame buffered, sent before the next one).
type Output =
    tokio::sync::Mutex<FramedWrite<Pin<Box<dyn AsyncWrite + Send>>, LengthDelimitedCodec>>;

type Pending<Resp> = Option<HashMap<u64, oneshot::Sender<Resp>>>;

struct Shared<Resp> {
    /// `None` once the connection is closed: nothing can be added any more.
    pending: Mutex<Pending<Resp>>,
    closed: watch::Sender<Option<String>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<Resp> Shared<Resp> {
    /// Closes once (the first reason wins): the pending senders are dropped, so every waiting
    /// call wakes up with `Disconnected`.
    fn close(&self, reason: String) {
        let taken = lock(&self.pending).take();
        drop(taken);
        self.closed.send_if_modified(|r| {
            if r.is_none() {
                *r = Some(reason);
                true
            } else {
                false
            }
        });
    }

    fn reason(&self) -> String {
        self.closed
            .borrow()
            .clone()
            .unwrap_or_else(|| "the connection closed".into())
    }
}

/// The events the worker pushed, in order; see [`EVENT_QUEUE`].
pub struct EventReceiver<Ev> {
    rx: mpsc::Receiver<Ev>,
    dropped: Arc<AtomicU64>,
}

impl<Ev> EventReceiver<Ev> {
    /// The next event; `None` once the connection is gone and the queue drained.
    pub async fn recv(&mut self) -> Option<Ev> {
        self.rx.recv().await
    }

    /// Events dropped because this receiver's queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// A future-friendly view of a client's end: cheap to clone, holds no connection alive.
#[derive(Clone)]
pub struct CloseSignal(watch::Receiver<Option<String>>);

impl CloseSignal {
    /// Waits until the connection is closed; returns why.
    pub async fn wait(mut self) -> String {
        match self.0.wait_for(|r| r.is_some()).await {
            Ok(r) => r.clone().unwrap_or_default(),
            Err(_) => "the connection closed".into(),
        }
    }
}

/// One connection to a worker. Dropping it closes the stream (and, for a spawned worker,
/// kills the worker's process group).
pub struct Client<Req, Resp, Ev> {
    shared: Arc<Shared<Resp>>,
    out: Output,
    next_id: AtomicU64,
    peer: Identity,
    tasks: Vec<AbortHandle>,
    detail: Option<Arc<dyn Fn() -> String + Send + Sync>>,
    guard: Option<Box<dyn std::any::Any + Send + Sync>>,
    _msg: PhantomData<fn(Req) -> Ev>,
}

impl<Req, Resp, Ev> Drop for Client<Req, Resp, Ev> {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        self.shared.close("the client was dropped".into());
    }
}

/// Removes a call's pending entry when the call is dropped before its answer.
struct PendingGuard<'a, Resp> {
    shared: &'a Shared<Resp>,
    id: u64,
}

impl<Resp> Drop for PendingGuard<'_, Resp> {
    fn drop(&mut self) {
        if let Some(m) = lock(&self.shared.pending).as_mut() {
            m.remove(&self.id);
        }
    }
}

impl<Req, Resp, Ev> Client<Req, Resp, Ev>
where
    Req: Serialize,
    Resp: DeserializeOwned + Send + 'static,
    Ev: DeserializeOwned + Send + 'static,
{
    /// Says hello over `reader`/`writer` and checks the worker's answer; then starts the
    /// reader and writer tasks. A worker that closes without answering (wrong secret, not
    /// started) is a [`WorkerError::Handshake`]; another version or build a
    /// [`WorkerError::Mismatch`] naming both.
    pub async fn handshake<R, W>(
        reader: R,
        writer: W,
        secret: &Secret,
        me: &Identity,
    ) -> Result<(Self, EventReceiver<Ev>), WorkerError>
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let mut input = FramedRead::with_capacity(reader, codec(), READ_BUFFER);
        let writer: Pin<Box<dyn AsyncWrite + Send>> = Box::pin(writer);
        let mut output = FramedWrite::new(writer, codec());
        let hello = encode_handshake(&Hello::Hello {
            protocol: me.protocol,
            build: me.build.clone(),
            secret: secret.expose().to_string(),
        })?;
        output
            .send(hello)
            .await
            .map_err(|e| WorkerError::Handshake(format!("the worker does not take input: {e}")))?;
        let peer = match input.next().await {
            None => {
                return Err(WorkerError::Handshake(
                    "the worker closed the connection without answering (a wrong secret, or it did not start)".into(),
                ));
            }
            Some(Err(e)) => return Err(WorkerError::Handshake(format!("unreadable answer: {e}"))),
            Some(Ok(b)) => match decode_handshake::<Ack>(&b) {
                Ok(Ack::Ack { protocol, build }) => Identity { protocol, build },
                Ok(Ack::Error { message }) => {
                    return Err(WorkerError::Handshake(message));
                }
                Err(e) => return Err(WorkerError::Handshake(format!("malformed answer: {e}"))),
            },
        };
        if peer != *me {
            return Err(WorkerError::Mismatch {
                gateway: me.label(),
                worker: peer.label(),
            });
        }

        let (closed, _) = watch::channel(None);
        let shared = Arc::new(Shared {
            pending: Mutex::new(Some(HashMap::new())),
            closed,
        });
        let (ev_tx, ev_rx) = mpsc::channel::<Ev>(EVENT_QUEUE);
        let dropped = Arc::new(AtomicU64::new(0));

        let r_shared = shared.clone();
        let r_dropped = dropped.clone();
        let reader = tokio::spawn(async move {
            let reason = loop {
                let b = match input.next().await {
                    None => break "the worker closed the connection".to_string(),
                    Some(Err(e)) => break format!("reading from the worker: {e}"),
                    Some(Ok(b)) => b,
                };
                match decode_body::<ServerFrame<Resp, Ev>>(&b) {
                    Ok(ServerFrame::Response { id, body }) => {
                        let tx = lock(&r_shared.pending).as_mut().and_then(|m| m.remove(&id));
                        if let Some(tx) = tx {
                            let _ = tx.send(body);
                        }
                    }
                    Ok(ServerFrame::Event { body }) => {
                        if let Err(mpsc::error::TrySendError::Full(_)) = ev_tx.try_send(body) {
                            r_dropped.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Ok(ServerFrame::Error { message }) => {
                        break format!("the worker reported a protocol error: {message}");
                    }
                    Err(e) => break format!("a malformed frame from the worker: {e}"),
                }
            };
            r_shared.close(reason);
        });

        let client = Client {
            shared,
            out: tokio::sync::Mutex::new(output),
            next_id: AtomicU64::new(1),
            peer,
            tasks: vec![reader.abort_handle()],
            detail: None,
            guard: None,
            _msg: PhantomData,
        };
        Ok((client, EventReceiver { rx: ev_rx, dropped }))
    }

    /// Sends `req` and waits for its answer. Calls run concurrently; if the connection ends
    /// first the call fails with [`WorkerError::Disconnected`], never hangs.
    pub async fn call(&self, req: &Req) -> Result<Resp, WorkerError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let frame = encode(&ClientFrame::Request { id, body: req })?;
        let (tx, rx) = oneshot::channel();
        match lock(&self.shared.pending).as_mut() {
            None => return Err(WorkerError::Disconnected(self.shared.reason())),
            Some(m) => {
                m.insert(id, tx);
            }
        }
        let _guard = PendingGuard {
            shared: &self.shared,
            id,
        };
        {
            let mut out = self.out.lock().await;
            if let Err(e) = SinkExt::<Bytes>::send(&mut *out, frame).await {
                self.shared.close(format!("writing to the worker: {e}"));
                return Err(WorkerError::Disconnected(self.shared.reason()));
            }
        }
        rx.await
            .map_err(|_| WorkerError::Disconnected(self.shared.reason()))
    }
}

impl<Req, Resp, Ev> Client<Req, Resp, Ev> {
    /// The worker's protocol version and build id, from its `ack`.
    pub fn peer(&self) -> &Identity {
        &self.peer
    }

    /// Calls waiting for their answer.
    pub fn in_flight(&self) -> usize {
        lock(&self.shared.pending).as_ref().map_or(0, |m| m.len())
    }

    /// Why the connection closed, once it has.
    pub fn close_reason(&self) -> Option<String> {
        self.shared.closed.borrow().clone()
    }

    /// The connection has closed.
    pub fn is_closed(&self) -> bool {
        self.shared.closed.borrow().is_some()
    }

    /// Resolves when the connection closes, with why.
    pub async fn closed(&self) -> String {
        self.close_signal().wait().await
    }

    /// A handle that resolves when the connection closes, without keeping it open.
    pub fn close_signal(&self) -> CloseSignal {
        CloseSignal(self.shared.closed.subscribe())
    }

    /// What the transport knows beyond the stream (a spawned worker's stderr tail).
    pub fn transport_detail(&self) -> Option<String> {
        self.detail.as_ref().map(|d| d()).filter(|s| !s.is_empty())
    }

    /// Attaches what the transport must keep alive with the client (a child process) and its
    /// detail source.
    pub fn attach_transport(
        &mut self,
        guard: Box<dyn std::any::Any + Send + Sync>,
        detail: Option<Arc<dyn Fn() -> String + Send + Sync>>,
    ) {
        self.guard = Some(guard);
        self.detail = detail;
    }
}
