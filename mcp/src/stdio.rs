//! The stdio transport with a JSON-RPC guard in front of rmcp. rmcp answers a request whose
//! envelope parses but whose params do not (e.g. `"params": "x"`) with an error that has no `id`,
//! and drops lines that are not JSON at all; a client waiting on that id would hang. The guard
//! reads stdin line by line, forwards every line rmcp can parse, and answers the rest itself:
//! `-32600 Invalid Request` with the request's id (or `null`), `-32700 Parse error` for non-JSON.
//! One writer task owns stdout, so replies never interleave.

use rmcp::model::ClientJsonRpcMessage;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream};
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

/// Wires the guard between `input`/`output` (the process's stdin/stdout).
pub fn guarded<R, W>(input: R, output: W) -> Guarded
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
        loop {
            let mut buf = Vec::new();
            match lines.read_until(b'\n', &mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let body = buf.strip_suffix(b"\n").unwrap_or(&buf);
            let body = body.strip_suffix(b"\r").unwrap_or(body);
            if parses(body) {
                if to_rmcp.write_all(&buf).await.is_err() {
                    break;
                }
                if !buf.ends_with(b"\n") && to_rmcp.write_all(b"\n").await.is_err() {
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
    fn valid_messages_parse() {
        assert!(parses(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#));
        assert!(!parses(
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":"x"}"#
        ));
    }
}
