//! The HTTP a proxy client speaks: a bounded request head, its parse, the head forwarded for an
//! absolute-form request, and the proxy's own responses.

use tokio::io::{AsyncRead, AsyncReadExt};

use crate::target::{Scheme, parse_authority};

/// Largest request head the proxy reads (request line and headers); a longer one gets `431`.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;

/// Why no request could be read.
#[derive(Debug)]
pub(crate) enum HeadError {
    /// The client closed (or failed) before a whole head arrived.
    Closed,
    /// The head is longer than [`MAX_HEAD_BYTES`].
    TooLarge,
}

/// A parsed proxy request.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ProxyRequest {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) scheme: Scheme,
    /// For `Http`: the head to send to the origin (origin-form, `Connection: close`).
    pub(crate) forward_head: Vec<u8>,
}

fn head_end(buf: &[u8]) -> Option<usize> {
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4);
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|p| p + 2);
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Reads until the end of the request head. Returns the head's length; `buf` may hold bytes
/// beyond it (the start of a body), which the caller forwards.
pub(crate) async fn read_head<R: AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
) -> Result<usize, HeadError> {
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = head_end(buf) {
            return Ok(end);
        }
        if buf.len() > MAX_HEAD_BYTES {
            return Err(HeadError::TooLarge);
        }
        let n = reader
            .read(&mut chunk)
            .await
            .map_err(|_| HeadError::Closed)?;
        if n == 0 {
            return Err(HeadError::Closed);
        }
        buf.extend_from_slice(chunk.get(..n).ok_or(HeadError::Closed)?);
    }
}

/// Headers that concern the hop to the proxy, never forwarded.
/// `Host` is replaced by the decided authority, so an allowed address cannot be asked for
/// another site it also serves.
const HOP_HEADERS: &[&str] = &[
    "host",
    "proxy-connection",
    "proxy-authorization",
    "connection",
    "keep-alive",
];

/// Parses a request head: `CONNECT host:port HTTP/1.x` or `METHOD http://host[:port]/path HTTP/1.x`.
pub(crate) fn parse_request(head: &[u8]) -> Result<ProxyRequest, String> {
    let text =
        std::str::from_utf8(head).map_err(|_| "the request head is not UTF-8".to_string())?;
    let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
    let request_line = lines.next().unwrap_or("");
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("malformed request line".into());
    };
    if !version.starts_with("HTTP/1.") {
        return Err("only HTTP/1.x is spoken".into());
    }
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err("malformed method".into());
    }
    if method == "CONNECT" {
        let (host, port) = parse_authority(target, None)?;
        return Ok(ProxyRequest {
            host,
            port,
            scheme: Scheme::Connect,
            forward_head: Vec::new(),
        });
    }
    let lower = target.get(..7).map(str::to_ascii_lowercase);
    if lower.as_deref() != Some("http://") {
        return Err(
            "only CONNECT and absolute-form http:// requests are proxied (use CONNECT for https)"
                .into(),
        );
    }
    let rest = target.get(7..).unwrap_or("");
    let split = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(split);
    let (host, port) = parse_authority(authority, Some(80))?;
    let path = match path {
        "" => "/".to_string(),
        p if p.starts_with('/') => p.to_string(),
        p => format!("/{p}"),
    };
    let mut out = format!("{method} {path} {version}\r\nHost: {authority}\r\n");
    for line in lines {
        if line.is_empty() {
            continue;
        }
        let name = line
            .split(':')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        if HOP_HEADERS.contains(&name.as_str()) {
            continue;
        }
        out.push_str(line);
        out.push_str("\r\n");
    }
    out.push_str("Connection: close\r\n\r\n");
    Ok(ProxyRequest {
        host,
        port,
        scheme: Scheme::Http,
        forward_head: out.into_bytes(),
    })
}

/// A complete response of the proxy itself, closing the connection.
pub(crate) fn response(status: u16, reason: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The answer to an allowed `CONNECT` once the target is connected.
pub(crate) const CONNECT_ESTABLISHED: &[u8] = b"HTTP/1.1 200 Connection established\r\n\r\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_and_absolute_form_parse_and_host_is_the_decided_authority() {
        let r = parse_request(b"CONNECT crates.io:443 HTTP/1.1\r\nHost: crates.io:443\r\n\r\n")
            .unwrap();
        assert_eq!(
            (r.host.as_str(), r.port, r.scheme),
            ("crates.io", 443, Scheme::Connect)
        );
        let r = parse_request(
            b"GET http://Example.org:8080/a?b=1 HTTP/1.1\r\nHost: evil.example\r\nProxy-Connection: keep-alive\r\nConnection: keep-alive\r\nAccept: */*\r\n\r\n",
        )
        .unwrap();
        assert_eq!(
            (r.host.as_str(), r.port, r.scheme),
            ("example.org", 8080, Scheme::Http)
        );
        let head = String::from_utf8(r.forward_head).unwrap();
        assert_eq!(
            head,
            "GET /a?b=1 HTTP/1.1\r\nHost: Example.org:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        let r = parse_request(b"GET http://h HTTP/1.0\r\n\r\n").unwrap();
        assert_eq!(r.port, 80);
        assert!(
            String::from_utf8(r.forward_head)
                .unwrap()
                .starts_with("GET / HTTP/1.0\r\n")
        );
    }

    #[test]
    fn other_forms_are_refused() {
        for bad in [
            &b"GET /path HTTP/1.1\r\n\r\n"[..],
            b"GET https://h/ HTTP/1.1\r\n\r\n",
            b"CONNECT h HTTP/1.1\r\n\r\n",
            b"CONNECT h:443 HTTP/2\r\n\r\n",
            b"get http://h/ HTTP/1.1\r\n\r\n",
            b"GET http://u@h/ HTTP/1.1\r\n\r\n",
            b"\xff\xfe\r\n\r\n",
        ] {
            assert!(
                parse_request(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn head_end_finds_crlf_and_lf() {
        assert_eq!(head_end(b"A\r\n\r\nbody"), Some(5));
        assert_eq!(head_end(b"A\n\nbody"), Some(3));
        assert_eq!(head_end(b"A\r\n"), None);
    }
}
