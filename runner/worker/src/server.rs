//! The worker's side: [`serve`] checks the handshake, then runs each request in its own task
//! through a [`Handler`] and writes responses and events back, whatever order they finish in.

use crate::frame::{Ack, ClientFrame, Hello, ServerFrame, codec, decode_body, decode_handshake};
use crate::{Identity, Secret, WorkerError};
use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::{SinkExt, StreamExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::marker::PhantomData;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio_util::codec::{FramedRead, FramedWrite};

/// Requests one connection runs at once; the next waits (the reader stops reading).
pub const MAX_IN_FLIGHT: usize = 256;
/// Frames (responses and events) queued for the writer; a full queue holds the producers.
pub const OUT_QUEUE: usize = 256;

/// What a worker serves. `handle` runs concurrently for the requests of a connection.
pub trait Handler: Send + Sync + 'static {
    /// A request.
    type Req: DeserializeOwned + Send + 'static;
    /// Its answer.
    type Resp: Serialize + Send + 'static;
    /// What the worker reports on its own.
    type Ev: Serialize + Send + 'static;

    /// Answers one request.
    fn handle(&self, req: Self::Req) -> BoxFuture<'_, Self::Resp>;

    /// Called once per connection, after the handshake, with the sender for that connection's
    /// events (the default drops it: no events).
    fn attach(&self, events: EventSender<Self::Ev>) {
        drop(events);
    }
}

/// The handler's way to push events to the gateway (bounded: `send` waits while the queue is
/// full). Fails with [`WorkerError::Disconnected`] once the connection is gone.
pub struct EventSender<Ev> {
    tx: mpsc::Sender<Bytes>,
    _ev: PhantomData<fn(Ev)>,
}

impl<Ev> Clone for EventSender<Ev> {
    fn clone(&self) -> Self {
        EventSender {
            tx: self.tx.clone(),
            _ev: PhantomData,
        }
    }
}

impl<Ev: Serialize> EventSender<Ev> {
    fn encode(ev: &Ev) -> Result<Bytes, WorkerError> {
        encode(&ServerFrame::<(), &Ev>::Event { body: ev })
    }

    /// Queues an event, waiting while the queue is full.
    pub async fn send(&self, ev: &Ev) -> Result<(), WorkerError> {
        let bytes = Self::encode(ev)?;
        self.tx
            .send(bytes)
            .await
            .map_err(|_| WorkerError::Disconnected("the gateway is gone".into()))
    }

    /// Queues an event if there is room now.
    pub fn try_send(&self, ev: &Ev) -> Result<(), WorkerError> {
        let bytes = Self::encode(ev)?;
        self.tx.try_send(bytes).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => {
                WorkerError::Protocol("the event queue is full".into())
            }
            mpsc::error::TrySendError::Closed(_) => {
                WorkerError::Disconnected("the gateway is gone".into())
            }
        })
    }

    /// The connection is gone.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

/// A frame after the handshake as bytes ([`crate::frame::encode_body`]), within [`MAX_FRAME`].
///
/// [`MAX_FRAME`]: crate::frame::MAX_FRAME
pub(crate) fn encode<T: Serialize>(frame: &T) -> Result<Bytes, WorkerError> {
    capped(crate::frame::encode_body(frame).map_err(WorkerError::Protocol)?)
}

/// A handshake frame as bytes ([`crate::frame::encode_handshake`]).
pub(crate) fn encode_handshake<T: Serialize>(frame: &T) -> Result<Bytes, WorkerError> {
    capped(crate::frame::encode_handshake(frame).map_err(WorkerError::Protocol)?)
}

fn capped(v: Vec<u8>) -> Result<Bytes, WorkerError> {
    if v.len() > crate::frame::MAX_FRAME {
        return Err(WorkerError::Protocol(format!(
            "a frame of {} bytes is over the {} byte cap",
            v.len(),
            crate::frame::MAX_FRAME
        )));
    }
    Ok(Bytes::from(v))
}

/// Serves one connection: the handshake (a wrong secret closes without a byte written; a
/// version or build mismatch is answered with this side's `ack`, then closed), then requests
/// until the gateway closes its end. A malformed frame is answered with an `error` frame and
/// closes the connection. Returns `Ok` when the gateway closed cleanly.
pub async fn serve<H, R, W>(
    reader: R,
    writer: W,
    handler: Arc<H>,
    secret: &Secret,
    me: &Identity,
) -> Result<(), WorkerError>
where
    H: Handler,
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let mut input = FramedRead::new(reader, codec());
    let mut output = FramedWrite::new(writer, codec());

    let first = match input.next().await {
        None => return Err(WorkerError::Handshake("closed before hello".into())),
        Some(Err(e)) => return Err(WorkerError::Handshake(format!("unreadable hello: {e}"))),
        Some(Ok(b)) => b,
    };
    let (protocol, build) = match decode_handshake::<Hello>(&first) {
        Ok(Hello::Hello {
            protocol,
            build,
            secret: given,
        }) if secret.matches(&given) => (protocol, build),
        // Not a hello, or the wrong secret: nothing is written back.
        _ => {
            return Err(WorkerError::Handshake(
                "refused: no hello with the right secret".into(),
            ));
        }
    };
    let ack = encode_handshake(&Ack::Ack {
        protocol: me.protocol,
        build: me.build.clone(),
    })?;
    output
        .send(ack)
        .await
        .map_err(|e| WorkerError::io("writing ack", &e))?;
    let gateway = Identity { protocol, build };
    if gateway != *me {
        return Err(WorkerError::Mismatch {
            gateway: gateway.label(),
            worker: me.label(),
        });
    }

    let (out_tx, mut out_rx) = mpsc::channel::<Bytes>(OUT_QUEUE);
    let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
    let mut writer_task = tokio::spawn(async move {
        let mut stopping = false;
        loop {
            let first = tokio::select! {
                b = out_rx.recv() => b,
                _ = &mut stop_rx, if !stopping => {
                    // No new frames; what is queued still goes out.
                    stopping = true;
                    out_rx.close();
                    out_rx.recv().await
                }
            };
            let Some(b) = first else { break };
            // Feed what is queued, flush once the queue is empty.
            if output.feed(b).await.is_err() {
                return;
            }
            while let Ok(b) = out_rx.try_recv() {
                if output.feed(b).await.is_err() {
                    return;
                }
            }
            if SinkExt::<Bytes>::flush(&mut output).await.is_err() {
                return;
            }
        }
        let _ = SinkExt::<Bytes>::close(&mut output).await;
    });
    handler.attach(EventSender {
        tx: out_tx.clone(),
        _ev: PhantomData,
    });

    let permits = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let mut tasks = JoinSet::new();
    let result = loop {
        tokio::select! {
            frame = input.next() => {
                let bytes = match frame {
                    None => break Ok(()),
                    Some(Err(e)) => break Err(WorkerError::Protocol(format!("unreadable frame: {e}"))),
                    Some(Ok(b)) => b,
                };
                let (id, req) = match decode_body::<ClientFrame<H::Req>>(&bytes) {
                    Ok(ClientFrame::Request { id, body }) => (id, body),
                    Err(e) => break Err(WorkerError::Protocol(format!("malformed frame: {e}"))),
                };
                let Ok(permit) = permits.clone().acquire_owned().await else {
                    break Ok(());
                };
                let handler = handler.clone();
                let out = out_tx.clone();
                tasks.spawn(async move {
                    let resp = handler.handle(req).await;
                    let frame = encode(&ServerFrame::<&H::Resp, ()>::Response { id, body: &resp })
                        .or_else(|e| encode(&ServerFrame::<(), ()>::Error { message: format!("response {id}: {e}") }));
                    if let Ok(frame) = frame {
                        let _ = out.send(frame).await;
                    }
                    drop(permit);
                });
            }
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            _ = &mut writer_task => break Err(WorkerError::Disconnected("the output stream closed".into())),
        }
    };
    // Whatever was still running is cancelled: the gateway is gone or broke the protocol.
    tasks.abort_all();
    if let Err(e) = &result
        && let WorkerError::Protocol(message) = e
        && let Ok(frame) = encode(&ServerFrame::<(), ()>::Error {
            message: message.clone(),
        })
    {
        let _ = out_tx.send(frame).await;
    }
    drop(out_tx);
    // The handler may still hold event senders: stop the writer after what is queued (a peer
    // that reads nothing more gets 5 s).
    let _ = stop_tx.send(());
    if !writer_task.is_finished() {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), &mut writer_task).await;
        writer_task.abort();
    }
    result
}

/// [`serve`] over one bidirectional stream.
pub async fn serve_stream<H, S>(
    stream: S,
    handler: Arc<H>,
    secret: &Secret,
    me: &Identity,
) -> Result<(), WorkerError>
where
    H: Handler,
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (r, w) = tokio::io::split(stream);
    serve(r, w, handler, secret, me).await
}
