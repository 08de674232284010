//! The frames on the wire and the codec that cuts the byte stream into them.

use serde::{Deserialize, Serialize};
use tokio_util::codec::LengthDelimitedCodec;

/// The largest frame either side sends or accepts (16 MiB): a longer length prefix is a
/// malformed frame, refused before its bytes are buffered.
pub const MAX_FRAME: usize = 16 * 1024 * 1024;

/// What the gateway (client) sends.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum ClientFrame<Req> {
    /// First frame: who the gateway is, and the worker's per-start secret.
    Hello {
        /// [`crate::handshake::PROTOCOL_VERSION`] of the gateway.
        protocol: u32,
        /// [`crate::handshake::BUILD_ID`] of the gateway.
        build: String,
        /// The per-start secret (hex).
        secret: String,
    },
    /// A call; the worker answers with a `response` of the same id.
    Request {
        /// Chosen by the client, unique among its in-flight calls.
        id: u64,
        /// The call.
        body: Req,
    },
}

/// What the worker (server) sends.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum ServerFrame<Resp, Ev> {
    /// Answer to a good `hello`: the worker's own version and build id.
    Ack {
        /// [`crate::handshake::PROTOCOL_VERSION`] of the worker.
        protocol: u32,
        /// [`crate::handshake::BUILD_ID`] of the worker.
        build: String,
    },
    /// The answer to request `id`.
    Response {
        /// The request's id.
        id: u64,
        /// The answer.
        body: Resp,
    },
    /// Something the worker reports on its own (a process exited, a file changed).
    Event {
        /// The event.
        body: Ev,
    },
    /// The peer broke the protocol; the connection closes after this frame.
    Error {
        /// What was wrong.
        message: String,
    },
}

/// The length-delimited codec both sides use (4-byte big-endian length, [`MAX_FRAME`]).
pub fn codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .length_field_length(4)
        .max_frame_length(MAX_FRAME)
        .new_codec()
}
