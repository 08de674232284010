//! The stdio transport with a JSON-RPC guard, handed to rmcp as its [`Transport`]. rmcp answers
//! a request whose envelope parses but whose params do not (e.g. `"params": "x"`) with an error
//! that has no `id`, and drops lines that are not JSON at all; a client waiting on that id would
//! hang. The guard reads stdin line by line, parses each line once into the message rmcp serves,
//! and answers the rest itself: `-32600 Invalid Request` with the request's id (or `null`),
//! `-32700 Parse error` for non-JSON.
//!
//! The common path has no hand-off of its own: rmcp's service loop reads the next message
//! straight from stdin through [`StdioTransport::receive`], and each reply is serialized and
//! written to stdout with one `write` and a flush by the send future rmcp spawns (replies never
//! interleave: the writer is behind a lock). When stdin or stdout is a pipe it is driven by the
//! runtime's reactor (non-blocking), not through tokio's blocking-pool `Stdin`/`Stdout`.
//!
//! A line longer than the message limit (`limits.max_message_bytes`) is never buffered past the
//! limit: the rest of it is skipped up to its newline, and the request is answered with
//! `-32600` carrying its id when the id can be read from the part kept (a top-level `"id"` in
//! the first `limit` bytes), `null` otherwise; `-32700` when that part is not a JSON object.

use rmcp::RoleServer;
use rmcp::model::ClientJsonRpcMessage;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::{Value, json};
use std::pin::Pin;
use std::sync::Arc;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};

/// Read buffer of stdin.
const READ_BUF_BYTES: usize = 64 * 1024;

/// The reply to a line rmcp cannot parse, or None when no reply is due (a notification or a
/// client response: JSON-RPC never answers those).
pub fn reject_reply(line: &[u8]) -> Option<Value> {
    let text = String::from_utf8_lossy(line);
    if text.trim().is_empty() {
        return None;
    }
    let value: Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => {
            return Some(json!({"jsonrpc": "2.0", "id": null,
                "error": {"code": -32700, "message": format!("Parse error: {e}")}}));
        }
    };
    let Value::Object(obj) = &value else {
        return Some(json!({"jsonrpc": "2.0", "id": null,
            "error": {"code": -32600, "message": "Invalid Request: a message must be a JSON object"}}));
    };
    let id = match obj.get("id") {
        Some(id @ (Value::Number(_) | Value::String(_))) => id.clone(),
        Some(_) => Value::Null,
        // No id: a notification (or garbage shaped like one): nothing to answer.
        None => return None,
    };
    if obj.get("method").is_none() && (obj.contains_key("result") || obj.contains_key("error")) {
        // A (malformed) response from the client: never answered.
        return None;
    }
    let why = match serde_json::from_value::<ClientJsonRpcMessage>(value.clone()) {
        Ok(_) => "unexpected message".to_string(),
        Err(e) => e.to_string(),
    };
    Some(json!({"jsonrpc": "2.0", "id": id,
        "error": {"code": -32600, "message": format!("Invalid Request: {why}")}}))
}

/// Skips JSON whitespace from `i`.
fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while b
        .get(i)
        .is_some_and(|c| matches!(c, b' ' | b'\t' | b'\r' | b'\n'))
    {
        i += 1;
    }
    i
}

/// The end (exclusive) of the JSON string starting at `i` (a `"`), if it ends within `b`.
fn string_end(b: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    loop {
        match b.get(j)? {
            b'\\' => j += 2,
            b'"' => return Some(j + 1),
            _ => j += 1,
        }
    }
}

/// The end (exclusive) of the JSON value starting at `i`, if it ends within `b` (a scalar must
/// be followed by a delimiter to count as complete).
fn value_end(b: &[u8], i: usize) -> Option<usize> {
    match b.get(i)? {
        b'"' => string_end(b, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            loop {
                match b.get(j)? {
                    b'"' => {
                        j = string_end(b, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
        }
        _ => {
            let mut j = i;
            while !matches!(b.get(j)?, b',' | b'}' | b']' | b' ' | b'\t' | b'\r' | b'\n') {
                j += 1;
            }
            Some(j)
        }
    }
}

/// What the kept prefix of an oversized line says about it: `Some(id)` when it is a JSON
/// object whose top-level `"id"` lies complete in the prefix (`Null` when the id is not a
/// string or number, or cannot be read), `None` when it is not a JSON object at all.
fn prefix_id(b: &[u8]) -> Option<Value> {
    let mut i = skip_ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    loop {
        i = skip_ws(b, i);
        if b.get(i) != Some(&b'"') {
            return Some(Value::Null);
        }
        let Some(key_end) = string_end(b, i) else {
            return Some(Value::Null);
        };
        let key = b
            .get(i..key_end)
            .and_then(|k| serde_json::from_slice::<String>(k).ok());
        i = skip_ws(b, key_end);
        if b.get(i) != Some(&b':') {
            return Some(Value::Null);
        }
        i = skip_ws(b, i + 1);
        let Some(end) = value_end(b, i) else {
            return Some(Value::Null);
        };
        if key.as_deref() == Some("id") {
            let id = b
                .get(i..end)
                .and_then(|v| serde_json::from_slice::<Value>(v).ok())
                .filter(|v| v.is_string() || v.is_number())
                .unwrap_or(Value::Null);
            return Some(id);
        }
        i = skip_ws(b, end);
        if b.get(i) != Some(&b',') {
            return Some(Value::Null);
        }
        i += 1;
    }
}

/// The reply to a line longer than `limit` bytes, from the `limit` bytes kept.
pub fn oversized_reply(prefix: &[u8], limit: usize) -> Value {
    match prefix_id(prefix) {
        Some(id) => json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32600,
            "message": format!("Invalid Request: message larger than the limit of {limit} bytes (limits.max_message_bytes)")}}),
        None => json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700,
            "message": format!("Parse error: message larger than the limit of {limit} bytes (limits.max_message_bytes) and not a JSON object")}}),
    }
}

/// One line read by [`read_line_bounded`].
#[derive(Debug, PartialEq, Eq)]
enum Line {
    /// End of input.
    Eof,
    /// A line of at most the limit (without its newline).
    Whole,
    /// A longer line: the buffer holds its first `limit` bytes; the rest was skipped.
    Oversized,
}

/// A line being read: what is kept of it so far. It lives across calls, so a read that is
/// cancelled (rmcp polls `receive` in a `select!`) resumes where it stopped.
#[derive(Debug, Default)]
struct LineState {
    buf: Vec<u8>,
    oversized: bool,
    seen_any: bool,
}

impl LineState {
    /// Forgets the line returned last (keeps the buffer's capacity).
    fn reset(&mut self) {
        self.buf.clear();
        self.oversized = false;
        self.seen_any = false;
    }
}

/// Reads one line into `st.buf` without ever holding more than `limit` bytes of it. A final
/// line without a newline counts as a line. Cancel-safe: bytes are consumed from `r` only
/// together with their effect on `st`; call [`LineState::reset`] after using a line.
async fn read_line_bounded<R: AsyncBufRead + Unpin>(
    r: &mut R,
    st: &mut LineState,
    limit: usize,
) -> std::io::Result<Line> {
    loop {
        let avail = r.fill_buf().await?;
        if avail.is_empty() {
            return Ok(match (st.seen_any, st.oversized) {
                (false, _) => Line::Eof,
                (true, false) => Line::Whole,
                (true, true) => Line::Oversized,
            });
        }
        st.seen_any = true;
        let (chunk, used, done) = match avail.iter().position(|&c| c == b'\n') {
            Some(pos) => (avail.get(..pos).unwrap_or_default(), pos + 1, true),
            None => (avail, avail.len(), false),
        };
        if !st.oversized {
            let room = limit.saturating_sub(st.buf.len());
            if chunk.len() > room {
                st.buf
                    .extend_from_slice(chunk.get(..room).unwrap_or_default());
                st.oversized = true;
            } else {
                st.buf.extend_from_slice(chunk);
            }
        }
        r.consume(used);
        if done {
            return Ok(if st.oversized {
                Line::Oversized
            } else {
                Line::Whole
            });
        }
    }
}

/// True when rmcp will accept the line as a message.
#[cfg(test)]
fn parses(line: &[u8]) -> bool {
    serde_json::from_slice::<ClientJsonRpcMessage>(line).is_ok()
}

/// Where replies go: one writer, one message per write, flushed.
type Out = Arc<tokio::sync::Mutex<Pin<Box<dyn AsyncWrite + Send>>>>;

/// Writes `bytes` (one whole message and its newline) and flushes.
async fn write_message(out: &Out, bytes: &[u8]) -> std::io::Result<()> {
    let mut w = out.lock().await;
    w.write_all(bytes).await?;
    w.flush().await
}

/// The transport's output, shared with its send futures.
#[derive(Clone)]
pub struct StdioOutput(Out);

impl std::fmt::Debug for StdioOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StdioOutput").finish_non_exhaustive()
    }
}

impl StdioOutput {
    /// Waits for a write in progress (the lock), then flushes.
    pub async fn flush(&self) -> std::io::Result<()> {
        self.0.lock().await.flush().await
    }
}

/// The guarded stdio transport rmcp serves (see the module docs).
pub struct StdioTransport {
    input: BufReader<Pin<Box<dyn AsyncRead + Send>>>,
    line: LineState,
    limit: usize,
    out: Out,
    /// A guard reply being written; the next message waits for it, so replies keep the order of
    /// the lines they answer relative to later messages.
    replying: Option<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for StdioTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StdioTransport")
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}

impl StdioTransport {
    /// The guard over `input`/`output`; lines longer than `max_line_bytes` are answered, never
    /// handed to rmcp.
    pub fn new<R, W>(input: R, output: W, max_line_bytes: usize) -> StdioTransport
    where
        R: AsyncRead + Send + 'static,
        W: AsyncWrite + Send + 'static,
    {
        let input: Pin<Box<dyn AsyncRead + Send>> = Box::pin(input);
        let output: Pin<Box<dyn AsyncWrite + Send>> = Box::pin(output);
        StdioTransport {
            input: BufReader::with_capacity(READ_BUF_BYTES, input),
            line: LineState::default(),
            limit: max_line_bytes,
            out: Arc::new(tokio::sync::Mutex::new(output)),
            replying: None,
        }
    }

    /// The process's stdin and stdout: pipes through the reactor, anything else (a terminal, a
    /// file) through tokio's blocking-pool handles.
    pub fn process_stdio(max_line_bytes: usize) -> StdioTransport {
        let input: Pin<Box<dyn AsyncRead + Send>> = match crate::stdio_pipes::stdin_pipe() {
            Some(p) => Box::pin(p),
            None => Box::pin(tokio::io::stdin()),
        };
        let output: Pin<Box<dyn AsyncWrite + Send>> = match crate::stdio_pipes::stdout_pipe() {
            Some(p) => Box::pin(p),
            None => Box::pin(tokio::io::stdout()),
        };
        StdioTransport::new(input, output, max_line_bytes)
    }

    /// A handle on the output, to flush it after the service ended.
    pub fn output(&self) -> StdioOutput {
        StdioOutput(Arc::clone(&self.out))
    }

    /// Answers a line itself (the guard), in a task of its own so that a cancelled `receive`
    /// never leaves half a reply on stdout.
    fn reply(&mut self, reply: &Value) {
        let mut bytes = reply.to_string().into_bytes();
        bytes.push(b'\n');
        let out = Arc::clone(&self.out);
        self.replying = Some(tokio::spawn(async move {
            let _ = write_message(&out, &bytes).await;
        }));
    }
}

impl Transport<RoleServer> for StdioTransport {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let out = Arc::clone(&self.out);
        let bytes = serde_json::to_vec(&item).map(|mut b| {
            b.push(b'\n');
            b
        });
        async move {
            let bytes = bytes.map_err(std::io::Error::other)?;
            write_message(&out, &bytes).await
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            if let Some(h) = self.replying.as_mut() {
                let _ = h.await;
                self.replying = None;
            }
            let got = read_line_bounded(&mut self.input, &mut self.line, self.limit).await;
            let line = std::mem::take(&mut self.line.buf);
            self.line.reset();
            match got {
                Ok(Line::Eof) | Err(_) => return None,
                Ok(Line::Oversized) => {
                    tracing::warn!(
                        limit = self.limit,
                        "stdio message over the size limit refused"
                    );
                    self.reply(&oversized_reply(&line, self.limit));
                }
                Ok(Line::Whole) => {
                    let body = line.strip_suffix(b"\r").unwrap_or(&line);
                    match serde_json::from_slice::<ClientJsonRpcMessage>(body) {
                        Ok(m) => {
                            self.line.buf = line;
                            self.line.buf.clear();
                            return Some(m);
                        }
                        Err(_) => {
                            if let Some(reply) = reject_reply(body) {
                                self.reply(&reply);
                            }
                        }
                    }
                }
            }
            // Keep the buffer's capacity for the next line.
            self.line.buf = line;
            self.line.buf.clear();
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        if let Some(h) = self.replying.take() {
            let _ = h.await;
        }
        self.out.lock().await.flush().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_keep_the_request_id() {
        let r = reject_reply(br#"{"jsonrpc":"2.0","id":24,"method":"tools/call","params":"x"}"#)
            .unwrap();
        assert_eq!(r["id"], 24);
        assert_eq!(r["error"]["code"], -32600);
        let r =
            reject_reply(br#"{"jsonrpc":"2.0","id":"a","method":"ping","params":{"_meta":true}}"#)
                .unwrap();
        assert_eq!(r["id"], "a");
    }

    #[test]
    fn parse_errors_and_non_objects_get_null_ids() {
        let r = reject_reply(b"garbage").unwrap();
        assert_eq!(r["id"], Value::Null);
        assert_eq!(r["error"]["code"], -32700);
        let r = reject_reply(b"[1,2]").unwrap();
        assert_eq!(r["error"]["code"], -32600);
        assert_eq!(r["id"], Value::Null);
    }

    #[test]
    fn notifications_and_responses_are_never_answered() {
        assert!(
            reject_reply(br#"{"jsonrpc":"2.0","method":"notifications/x","params":7}"#).is_none()
        );
        assert!(reject_reply(br#"{"jsonrpc":"2.0","id":3,"result":5,"bogus":1}"#).is_none());
        assert!(reject_reply(b"   ").is_none());
    }

    #[test]
    fn ids_are_read_from_the_top_level_of_a_prefix() {
        let id = |s: &str| prefix_id(s.as_bytes());
        assert_eq!(
            id(r#"{"jsonrpc":"2.0","id":7,"method":"x","params":{"p":"xxxx"#),
            Some(json!(7))
        );
        assert_eq!(id(r#" { "id" : "a\"b" , "#), Some(json!("a\"b")));
        // Nested ids are not the request's.
        assert_eq!(
            id(r#"{"params":{"id":5},"id":-3.5,"method":"#),
            Some(json!(-3.5))
        );
        assert_eq!(id(r#"{"params":{"id":5,"pad":"xxxx"#), Some(Value::Null));
        // An id cut off by the end of the prefix is not guessed.
        assert_eq!(id(r#"{"id":12"#), Some(Value::Null));
        assert_eq!(id(r#"{"id":"abc"#), Some(Value::Null));
        assert_eq!(id(r#"{"id":null,"#), Some(Value::Null));
        assert_eq!(id(r#"{"id":{"x":1},"#), Some(Value::Null));
        assert_eq!(id(r#"{"a":"}\"{","id":1,"#), Some(json!(1)));
        assert_eq!(id("[1,2"), None);
        assert_eq!(id("garbage"), None);
    }

    #[tokio::test]
    async fn lines_are_read_within_the_limit() {
        let input: &[u8] = b"short\n0123456789abcdef\ntail-without-newline";
        let mut r = tokio::io::BufReader::with_capacity(4, input);
        let mut st = LineState::default();
        let mut next = async |r: &mut tokio::io::BufReader<&[u8]>, limit| {
            st.reset();
            let line = read_line_bounded(r, &mut st, limit).await.unwrap();
            (line, st.buf.clone())
        };
        assert_eq!(next(&mut r, 8).await, (Line::Whole, b"short".to_vec()));
        assert_eq!(
            next(&mut r, 8).await,
            (Line::Oversized, b"01234567".to_vec())
        );
        assert_eq!(
            next(&mut r, 64).await,
            (Line::Whole, b"tail-without-newline".to_vec())
        );
        assert_eq!(next(&mut r, 64).await.0, Line::Eof);
        // Exactly the limit fits.
        let mut r = tokio::io::BufReader::new(&b"12345678\n"[..]);
        assert_eq!(next(&mut r, 8).await.0, Line::Whole);
    }

    #[tokio::test]
    async fn a_cancelled_read_resumes_the_same_line() {
        let (mut tx, rx) = tokio::io::duplex(64);
        let mut r = tokio::io::BufReader::new(rx);
        let mut st = LineState::default();
        tx.write_all(b"{\"half\":").await.unwrap();
        // The read stops waiting for the rest (as rmcp's select! drops it)...
        let waited = tokio::time::timeout(
            std::time::Duration::from_millis(20),
            read_line_bounded(&mut r, &mut st, 64),
        )
        .await;
        assert!(waited.is_err(), "no newline yet");
        // ...and the next read finishes the same line.
        tx.write_all(b"1}\n").await.unwrap();
        assert_eq!(
            read_line_bounded(&mut r, &mut st, 64).await.unwrap(),
            Line::Whole
        );
        assert_eq!(st.buf, b"{\"half\":1}");
    }

    /// Lines written to a transport over in-memory pipes, and every reply line it wrote.
    async fn exchange(input: &[u8], limit: usize) -> (Vec<String>, Vec<Value>) {
        let (mut client_w, server_r) = tokio::io::duplex(1 << 16);
        let (server_w, client_r) = tokio::io::duplex(1 << 16);
        let mut t = StdioTransport::new(server_r, server_w, limit);
        client_w.write_all(input).await.unwrap();
        drop(client_w);
        let mut methods = Vec::new();
        while let Some(m) = Transport::<RoleServer>::receive(&mut t).await {
            methods.push(serde_json::to_value(&m).unwrap()["method"].to_string());
        }
        Transport::<RoleServer>::close(&mut t).await.unwrap();
        drop(t);
        let mut out = String::new();
        let mut client_r = client_r;
        tokio::io::AsyncReadExt::read_to_string(&mut client_r, &mut out)
            .await
            .unwrap();
        let replies = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        (methods, replies)
    }

    #[tokio::test]
    async fn good_lines_reach_rmcp_and_the_guard_answers_the_rest() {
        let input = concat!(
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":"x"}"#,
            "\r\n",
            "garbage\n",
            "\n",
            r#"{"jsonrpc":"2.0","id":"big","method":"ping","params":{"pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}}"#,
            "\n",
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            "\r\n",
            // The client's answer to a server->client request (elicitation, roots) goes to rmcp.
            r#"{"jsonrpc":"2.0","id":9,"result":{"action":"accept"}}"#,
            "\n",
        );
        let (methods, replies) = exchange(input.as_bytes(), 80).await;
        assert_eq!(
            methods,
            [r#""ping""#, r#""notifications/initialized""#, "null"]
        );
        let got: Vec<(Value, Value)> = replies
            .iter()
            .map(|r| (r["id"].clone(), r["error"]["code"].clone()))
            .collect();
        assert_eq!(
            got,
            [
                (json!(2), json!(-32600)),
                (Value::Null, json!(-32700)),
                (json!("big"), json!(-32600)),
            ]
        );
    }

    #[tokio::test]
    async fn server_requests_and_notifications_go_out_as_lines() {
        let (_client_w, server_r) = tokio::io::duplex(64);
        let (server_w, mut client_r) = tokio::io::duplex(1 << 16);
        let mut t = StdioTransport::new(server_r, server_w, 1024);
        for v in [
            json!({"jsonrpc":"2.0","id":3,"method":"elicitation/create",
                   "params":{"message":"ok?","requestedSchema":{"type":"object","properties":{}}}}),
            json!({"jsonrpc":"2.0","method":"notifications/progress",
                   "params":{"progressToken":"t","progress":1.0}}),
        ] {
            let msg: TxJsonRpcMessage<RoleServer> = serde_json::from_value(v).unwrap();
            Transport::<RoleServer>::send(&mut t, msg).await.unwrap();
        }
        drop(t);
        let mut out = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut client_r, &mut out)
            .await
            .unwrap();
        let methods: Vec<Value> = out
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap()["method"].clone())
            .collect();
        assert_eq!(
            methods,
            [json!("elicitation/create"), json!("notifications/progress")]
        );
    }

    #[tokio::test]
    async fn replies_are_whole_lines() {
        let (_client_w, server_r) = tokio::io::duplex(64);
        let (server_w, mut client_r) = tokio::io::duplex(1 << 16);
        let mut t = StdioTransport::new(server_r, server_w, 1024);
        let msg: TxJsonRpcMessage<RoleServer> =
            serde_json::from_value(json!({"jsonrpc":"2.0","id":7,"result":{}})).unwrap();
        let sends: Vec<_> = (0..3)
            .map(|_| tokio::spawn(Transport::<RoleServer>::send(&mut t, msg.clone())))
            .collect();
        for s in sends {
            s.await.unwrap().unwrap();
        }
        drop(t);
        let mut out = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut client_r, &mut out)
            .await
            .unwrap();
        assert_eq!(out.lines().count(), 3, "{out}");
        for l in out.lines() {
            assert_eq!(serde_json::from_str::<Value>(l).unwrap()["id"], 7);
        }
    }

    #[test]
    fn oversized_replies_keep_the_id_or_say_parse_error() {
        let r = oversized_reply(br#"{"jsonrpc":"2.0","id":"q","method":"#, 10);
        assert_eq!(
            (r["id"].clone(), r["error"]["code"].clone()),
            (json!("q"), json!(-32600))
        );
        let r = oversized_reply(b"not json", 10);
        assert_eq!(
            (r["id"].clone(), r["error"]["code"].clone()),
            (Value::Null, json!(-32700))
        );
    }

    #[test]
    fn valid_messages_parse() {
        assert!(parses(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#));
        assert!(!parses(
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":"x"}"#
        ));
    }
}
