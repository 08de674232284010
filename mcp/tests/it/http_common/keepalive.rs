//! A raw HTTP/1.1 keep-alive client for MCP over streamable HTTP: one TCP connection carries
//! many requests, as a real MCP host's connection pool does (the per-request `Connection: close`
//! helper of the transport tests cannot show stalls that only keep-alive connections have).
//! Shared by the HTTP tests and the `http_load` example (included there with `#[path]`).

use std::net::SocketAddr;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// One response read off a keep-alive connection.
#[derive(Debug, Clone)]
pub struct RawResponse {
    pub status: u16,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    /// The decoded body (chunked transfer encoding removed).
    pub body: Vec<u8>,
}

impl RawResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The JSON-RPC messages of an SSE or JSON body, as text.
    pub fn messages(&self) -> Vec<String> {
        let text = String::from_utf8_lossy(&self.body);
        if self
            .header("content-type")
            .is_some_and(|c| c.starts_with("application/json"))
        {
            return vec![text.to_string()];
        }
        text.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(str::trim)
            .filter(|d| !d.is_empty())
            .map(str::to_string)
            .collect()
    }
}

fn bad(why: impl Into<String>) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, why.into())
}

/// One keep-alive connection to `/mcp`.
pub struct Conn {
    stream: BufReader<TcpStream>,
    host: String,
}

impl Conn {
    pub async fn connect(addr: SocketAddr) -> std::io::Result<Conn> {
        let stream = TcpStream::connect(addr).await?;
        // The client side must not add a Nagle stall of its own to what is measured.
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream: BufReader::new(stream),
            host: addr.to_string(),
        })
    }

    /// The client side's address of the connection.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.stream.get_ref().local_addr()
    }

    /// Sends one request and reads its whole response; the connection stays open.
    pub async fn request(
        &mut self,
        method: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> std::io::Result<RawResponse> {
        let mut req = format!("{method} /mcp HTTP/1.1\r\nHost: {}\r\n", self.host);
        for (k, v) in headers {
            req.push_str(k);
            req.push_str(": ");
            req.push_str(v);
            req.push_str("\r\n");
        }
        if method == "POST" {
            req.push_str("Content-Type: application/json\r\n");
            req.push_str("Accept: application/json, text/event-stream\r\n");
        }
        req.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
        let mut out = req.into_bytes();
        out.extend_from_slice(body);
        self.stream.get_mut().write_all(&out).await?;
        self.read_response().await
    }

    /// POSTs a JSON-RPC message in session `sid`.
    pub async fn post(
        &mut self,
        token: Option<&str>,
        sid: Option<&str>,
        body: &[u8],
    ) -> std::io::Result<RawResponse> {
        let auth = token.map(|t| format!("Bearer {t}"));
        let mut h: Vec<(&str, &str)> = Vec::new();
        if let Some(a) = &auth {
            h.push(("Authorization", a));
        }
        if let Some(s) = sid {
            h.push(("Mcp-Session-Id", s));
            h.push(("MCP-Protocol-Version", "2025-11-25"));
        }
        self.request("POST", &h, body).await
    }

    /// Initializes a session (initialize + notifications/initialized); returns its id.
    pub async fn initialize(&mut self, token: Option<&str>) -> std::io::Result<String> {
        let init = br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"keepalive","version":"1"}}}"#;
        let r = self.post(token, None, init).await?;
        if r.status != 200 {
            return Err(bad(format!("initialize: HTTP {}", r.status)));
        }
        let sid = r
            .header("mcp-session-id")
            .ok_or_else(|| bad("initialize: no session id"))?
            .to_string();
        let n = self
            .post(
                token,
                Some(&sid),
                br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            )
            .await?;
        if n.status != 202 {
            return Err(bad(format!("notifications/initialized: HTTP {}", n.status)));
        }
        Ok(sid)
    }

    async fn read_line(&mut self) -> std::io::Result<String> {
        let mut line = String::new();
        if self.stream.read_line(&mut line).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        Ok(line.trim_end_matches(['\r', '\n']).to_string())
    }

    async fn read_response(&mut self) -> std::io::Result<RawResponse> {
        let status_line = self.read_line().await?;
        let status = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse::<u16>().ok())
            .ok_or_else(|| bad(format!("bad status line {status_line:?}")))?;
        let mut headers = Vec::new();
        loop {
            let line = self.read_line().await?;
            if line.is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
        let get = |n: &str| headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
        let mut body = Vec::new();
        if get("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
            loop {
                let size_line = self.read_line().await?;
                let size =
                    usize::from_str_radix(size_line.split(';').next().unwrap_or("").trim(), 16)
                        .map_err(|_| bad(format!("bad chunk size {size_line:?}")))?;
                if size == 0 {
                    // Trailers (none expected) end with an empty line.
                    while !self.read_line().await?.is_empty() {}
                    break;
                }
                let start = body.len();
                body.resize(start + size, 0);
                if let Some(dst) = body.get_mut(start..) {
                    self.stream.read_exact(dst).await?;
                }
                let mut crlf = [0u8; 2];
                self.stream.read_exact(&mut crlf).await?;
            }
        } else if let Some(n) = get("content-length").and_then(|v| v.parse::<usize>().ok()) {
            body.resize(n, 0);
            self.stream.read_exact(&mut body).await?;
        }
        Ok(RawResponse {
            status,
            headers,
            body,
        })
    }
}
