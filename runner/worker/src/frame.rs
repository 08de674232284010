//! The frames on the wire, their two encodings, and the codec that cuts the byte stream into
//! them.
//!
//! The handshake ([`Hello`], [`Ack`]) is JSON, in the same shape since protocol 1, so two builds
//! of any protocol versions can still tell each other's version and refuse a mismatch by name.
//! Every frame after it ([`ClientFrame`], [`ServerFrame`]) is MessagePack (`rmp-serde`, structs
//! as maps with their field names): byte fields marked `serde_bytes` travel as one binary
//! string (a 10 KB window is 10 KB plus a few bytes, copied once, where JSON made it an array of
//! ~40 KB of numbers parsed one by one), and the format is self-describing, so the messages'
//! tagged enums and `#[serde(default)]` fields work as they do in JSON.

use serde::{Deserialize, Serialize};
use tokio_util::codec::LengthDelimitedCodec;

/// The largest frame either side sends or accepts (16 MiB): a longer length prefix is a
/// malformed frame, refused before its bytes are buffered.
pub const MAX_FRAME: usize = 16 * 1024 * 1024;

/// The gateway's first frame (JSON): who it is, and the worker's per-start secret.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum Hello {
    /// The only variant.
    Hello {
        /// [`crate::handshake::PROTOCOL_VERSION`] of the gateway.
        protocol: u32,
        /// [`crate::handshake::BUILD_ID`] of the gateway.
        build: String,
        /// The per-start secret (hex).
        secret: String,
    },
}

/// The worker's answer to a good `hello` (JSON).
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum Ack {
    /// The worker's own version and build id.
    Ack {
        /// [`crate::handshake::PROTOCOL_VERSION`] of the worker.
        protocol: u32,
        /// [`crate::handshake::BUILD_ID`] of the worker.
        build: String,
    },
    /// The worker refused the hello (read by every protocol version).
    Error {
        /// Why.
        message: String,
    },
}

/// What the gateway (client) sends after the handshake (MessagePack).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClientFrame<Req> {
    /// A call; the worker answers with a `response` of the same id.
    Request {
        /// Chosen by the client, unique among its in-flight calls.
        id: u64,
        /// The call.
        body: Req,
    },
}

/// What the worker (server) sends after the handshake (MessagePack).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerFrame<Resp, Ev> {
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

/// A handshake frame's bytes (JSON).
pub fn encode_handshake<T: Serialize>(frame: &T) -> Result<Vec<u8>, String> {
    serde_json::to_vec(frame).map_err(|e| e.to_string())
}

/// A handshake frame from its bytes (JSON).
pub fn decode_handshake<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, String> {
    serde_json::from_slice(bytes).map_err(|e| e.to_string())
}

/// A frame's bytes after the handshake (MessagePack, structs as maps).
pub fn encode_body<T: Serialize + ?Sized>(frame: &T) -> Result<Vec<u8>, String> {
    rmp_serde::to_vec_named(frame).map_err(|e| e.to_string())
}

/// A frame after the handshake from its bytes (MessagePack; nesting deeper than rmp-serde's
/// limit is refused, not recursed into).
pub fn decode_body<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, String> {
    rmp_serde::from_slice(bytes).map_err(|e| e.to_string())
}

/// The length-delimited codec both sides use (4-byte big-endian length, [`MAX_FRAME`]).
pub fn codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .length_field_length(4)
        .max_frame_length(MAX_FRAME)
        .new_codec()
}
