//! The worker protocol: a gateway talks to a worker (`codespace worker --stdio|--socket`) over
//! any byte stream with small framed serde messages, generic over the message types.
//!
//! **Wire.** Each frame is a 4-byte big-endian length and a document, at most [`MAX_FRAME`]
//! bytes (`tokio_util::codec::LengthDelimitedCodec`). The handshake's two frames are JSON
//! ([`frame::Hello`], [`frame::Ack`]: their shape never changes, so any two versions can name
//! each other); every frame after them is MessagePack (`rmp-serde`, see [`frame`] for why).
//! The gateway sends [`frame::ClientFrame`]s (`request {id, body}`), the worker
//! [`frame::ServerFrame`]s (`response {id, body}`, `event {body}`, `error`). Requests
//! are multiplexed by id: the worker runs each in its own task, so a long poll never holds up a
//! ping; the client matches replies by id.
//!
//! **Handshake** ([`handshake`]): the gateway's `hello` carries the protocol version, the build
//! id ([`BUILD_ID`], computed at build time) and the per-start secret; a worker that finds the
//! secret wrong closes without a byte; otherwise it answers with its own version and build id,
//! and either side refuses a mismatch with an error naming both (`gateway 3/abc met worker 2/def`).
//!
//! **Why not tarpc.** tarpc is request/response only (the worker pushes events: process exits,
//! version bumps), its transport starts serving at once (our handshake must refuse a wrong
//! secret or a foreign build before any request is read), and it brings its own context,
//! deadline and tracing types across the seam, plus a dependency tree that is not in our
//! `Cargo.lock`. What we need — ids, a map of pending replies, an events queue — is a few hundred
//! lines over `tokio-util`'s codec, which we already link.
//!
//! Transports: [`spawn`] (an argv whose stdin/stdout is the worker: ssh, `podman exec -i`,
//! `kubectl exec -i`, `command`), [`unix`] (socket listen with peer-uid check, connect).
//! [`supervisor`] reconnects after a death with backoff and reports the worker's state.

#![forbid(unsafe_code)]

pub mod client;
pub mod error;
pub mod frame;
pub mod handshake;
pub mod server;
pub mod spawn;
pub mod supervisor;
pub mod unix;

pub use client::{Client, EventReceiver};
pub use error::WorkerError;
pub use frame::MAX_FRAME;
pub use futures_util::future::BoxFuture;
pub use handshake::{BUILD_ID, Identity, PROTOCOL_VERSION, Secret};
pub use server::{EventSender, Handler, serve, serve_stream};
pub use supervisor::{Supervisor, WorkerState, WorkerStatus};
