//! The stdio transport with a JSON-RPC guard in front of rmcp. rmcp answers a request whose
//! envelope parses but whose params do not (e.g. `"params": "x"`) with an error that has no `id`,
//! and drops lines that are not JSON at all; a client waiting on that id would hang. The guard
//! reads stdin line by line, forwards every line rmcp can parse, and answers the rest itself:
//! `-32600 Invalid Request` with the request's id (or `null`), `-32700 Parse error` for non-JSON.
//! One writer task owns stdout, so replies never interleave.
//!
//! A line longer than the message limit (`limits.max_message_bytes`) is never buffered past the
//! limit: the rest of it is skipped up to its newline, and the request is answered with
//! `-32600` carrying its id when the id can be read from the part kept (a top-level `"id"` in
//! the first `limit` bytes), `null` otherwise; `-32700` when that part is not a JSON object.

use rmcp::model::ClientJsonRpcMessage;
use serde_json::{Value, json};
use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream,
};
use tokio::sync::mpsc;

/// Buffer between the guard and rmcp in each direction.
const PIPE_BYTES: usize = 1 << 20;

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

/// Reads one line into `buf` (cleared first) without ever holding more than `limit` bytes of
/// it. A final line without a newline counts as a line.
async fn read_line_bounded<R: AsyncBufRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    limit: usize,
) -> std::io::Result<Line> {
    buf.clear();
    let mut oversized = false;
    let mut seen_any = false;
    loop {
        let avail = r.fill_buf().await?;
        if avail.is_empty() {
            return Ok(match (seen_any, oversized) {
                (false, _) => Line::Eof,
                (true, false) => Line::Whole,
                (true, true) => Line::Oversized,
            });
        }
        seen_any = true;
        let (chunk, used, done) = match avail.iter().position(|&c| c == b'\n') {
            Some(pos) => (avail.get(..pos).unwrap_or_default(), pos + 1, true),
            None => (avail, avail.len(), false),
        };
        if !oversized {
            let room = limit.saturating_sub(buf.len());
            if chunk.len() > room {
                buf.extend_from_slice(chunk.get(..room).unwrap_or_default());
                oversized = true;
            } else {
                buf.extend_from_slice(chunk);
            }
        }
        r.consume(used);
        if done {
            return Ok(if oversized {
                Line::Oversized
            } else {
                Line::Whole
            });
        }
    }
}

/// True when rmcp will accept the line as a message.
fn parses(line: &[u8]) -> bool {
    serde_json::from_slice::<ClientJsonRpcMessage>(line).is_ok()
}

/// The guarded transport: hand `transport` to rmcp; await `flushed` after the service ends so
/// its last replies reach stdout before the process exits.
#[derive(Debug)]
pub struct Guarded {
    /// `(reader, writer)` for rmcp.
    pub transport: (DuplexStream, DuplexStream),
    /// Ends when everything rmcp wrote has been written to stdout.
    pub flushed: tokio::task::JoinHandle<()>,
}

/// Wires the guard between `input`/`output` (the process's stdin/stdout); lines longer than
/// `max_line_bytes` are answered, never forwarded.
pub fn guarded<R, W>(input: R, output: W, max_line_bytes: usize) -> Guarded
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (mut to_rmcp, rmcp_in) = tokio::io::duplex(PIPE_BYTES);
    let (rmcp_out, from_rmcp) = tokio::io::duplex(PIPE_BYTES);
    // `None` marks the end of rmcp's output: the writer stops there.
    let (tx, mut rx) = mpsc::channel::<Option<Vec<u8>>>(256);

    // The only writer of stdout.
    let flushed = tokio::spawn(async move {
        let mut output = output;
        while let Some(Some(mut line)) = rx.recv().await {
            if !line.ends_with(b"\n") {
                line.push(b'\n');
            }
            if output.write_all(&line).await.is_err() || output.flush().await.is_err() {
                break;
            }
        }
    });

    // rmcp's output, line by line, to the writer.
    let tx_out = tx.clone();
    tokio::spawn(async move {
        let mut lines = BufReader::new(from_rmcp);
        loop {
            let mut buf = Vec::new();
            match lines.read_until(b'\n', &mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if tx_out.send(Some(buf)).await.is_err() {
                        break;
                    }
                }
            }
        }
        let _ = tx_out.send(None).await;
    });

    // stdin, line by line: forward what rmcp can parse, answer the rest.
    tokio::spawn(async move {
        let mut lines = BufReader::new(input);
        let mut buf = Vec::new();
        loop {
            match read_line_bounded(&mut lines, &mut buf, max_line_bytes).await {
                Ok(Line::Eof) | Err(_) => break,
                Ok(Line::Oversized) => {
                    tracing::warn!(
                        limit = max_line_bytes,
                        "stdio message over the size limit refused"
                    );
                    let reply = oversized_reply(&buf, max_line_bytes);
                    if tx.send(Some(reply.to_string().into_bytes())).await.is_err() {
                        break;
                    }
                    continue;
                }
                Ok(Line::Whole) => {}
            }
            let body = buf.strip_suffix(b"\r").unwrap_or(&buf);
            if parses(body) {
                if to_rmcp.write_all(body).await.is_err() || to_rmcp.write_all(b"\n").await.is_err()
                {
                    break;
                }
            } else if let Some(reply) = reject_reply(body)
                && tx.send(Some(reply.to_string().into_bytes())).await.is_err()
            {
                break;
            }
        }
        // EOF on stdin: rmcp sees EOF and ends the session.
        let _ = to_rmcp.shutdown().await;
    });

    Guarded {
        transport: (rmcp_in, rmcp_out),
        flushed,
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
        let mut buf = Vec::new();
        assert_eq!(
            read_line_bounded(&mut r, &mut buf, 8).await.unwrap(),
            Line::Whole
        );
        assert_eq!(buf, b"short");
        assert_eq!(
            read_line_bounded(&mut r, &mut buf, 8).await.unwrap(),
            Line::Oversized
        );
        assert_eq!(buf, b"01234567");
        assert_eq!(
            read_line_bounded(&mut r, &mut buf, 64).await.unwrap(),
            Line::Whole
        );
        assert_eq!(buf, b"tail-without-newline");
        assert_eq!(
            read_line_bounded(&mut r, &mut buf, 64).await.unwrap(),
            Line::Eof
        );
        // Exactly the limit fits.
        let mut r = tokio::io::BufReader::new(&b"12345678\n"[..]);
        assert_eq!(
            read_line_bounded(&mut r, &mut buf, 8).await.unwrap(),
            Line::Whole
        );
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
