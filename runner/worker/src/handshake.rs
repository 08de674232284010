//! The handshake's values: who a side is ([`Identity`]: protocol version + build id) and the
//! per-start secret ([`Secret`]), and the worker's reading of the secret line.

use crate::WorkerError;
use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// The protocol version: bumped on any incompatible change of the frames or the messages.
/// 2: the frames after the handshake are MessagePack with byte fields as binary strings (1 sent
/// them as JSON, bytes as arrays of numbers).
pub const PROTOCOL_VERSION: u32 = 2;

/// This build's id: `CODESPACE_BUILD_ID` at build time, else `<crate version>+<git commit>`.
pub const BUILD_ID: &str = env!("CODESPACE_BUILD_ID");

/// A side's protocol version and build id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// [`PROTOCOL_VERSION`], unless a test pretends otherwise.
    pub protocol: u32,
    /// [`BUILD_ID`], unless a test pretends otherwise.
    pub build: String,
}

impl Identity {
    /// This build's identity.
    pub fn this_build() -> Identity {
        Identity {
            protocol: PROTOCOL_VERSION,
            build: BUILD_ID.to_string(),
        }
    }

    /// `<protocol>/<build>`, as errors and `workspace_info` show it.
    pub fn label(&self) -> String {
        format!("{}/{}", self.protocol, self.build)
    }
}

/// The longest secret line the worker reads (the generated ones are 64 hex digits).
pub const MAX_SECRET_LEN: usize = 256;

/// A per-start secret: 32 random bytes as hex. Its `Debug` does not show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Secret {
    /// A fresh secret from the OS's random source.
    pub fn generate() -> Result<Secret, WorkerError> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes)
            .map_err(|e| WorkerError::Transport(format!("no random source for the secret: {e}")))?;
        Ok(Secret(hex::encode(bytes)))
    }

    /// A secret from text (a line without its terminator): 16 to [`MAX_SECRET_LEN`] visible
    /// ASCII characters.
    pub fn parse(text: &str) -> Result<Secret, WorkerError> {
        let ok = (16..=MAX_SECRET_LEN).contains(&text.len())
            && text.bytes().all(|b| b.is_ascii_graphic());
        if ok {
            Ok(Secret(text.to_string()))
        } else {
            Err(WorkerError::Handshake(
                "the secret must be 16 to 256 visible ASCII characters".into(),
            ))
        }
    }

    /// The text sent in `hello` and on the secret line.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Compares in time independent of where the texts differ.
    pub fn matches(&self, other: &str) -> bool {
        let (a, b) = (self.0.as_bytes(), other.as_bytes());
        let mut diff = u8::from(a.len() != b.len());
        for (x, y) in a.iter().zip(b.iter()) {
            diff |= x ^ y;
        }
        diff == 0
    }
}

/// Reads the secret line a worker started for stdio or a socket gets first on its stdin
/// (never in argv, which `ps` and ssh logs show; never in its environment, which its
/// children would inherit). Reads at most [`MAX_SECRET_LEN`] + 1 bytes.
pub async fn read_secret_line<R: AsyncBufRead + Unpin>(
    input: &mut R,
) -> Result<Secret, WorkerError> {
    let mut line = Vec::new();
    loop {
        let buf = input
            .fill_buf()
            .await
            .map_err(|e| WorkerError::io("reading the secret line", &e))?;
        if buf.is_empty() {
            return Err(WorkerError::Handshake(
                "stdin closed before the secret line".into(),
            ));
        }
        if let Some(nl) = buf.iter().position(|&b| b == b'\n') {
            line.extend_from_slice(buf.get(..nl).unwrap_or_default());
            input.consume(nl + 1);
            break;
        }
        let n = buf.len();
        line.extend_from_slice(buf);
        input.consume(n);
        if line.len() > MAX_SECRET_LEN {
            return Err(WorkerError::Handshake("the secret line is too long".into()));
        }
    }
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    let text = String::from_utf8(line)
        .map_err(|_| WorkerError::Handshake("the secret line is not UTF-8".into()))?;
    Secret::parse(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_secret_line_is_read_without_eating_the_frames_after_it() {
        let data = b"0123456789abcdef0123\n\x00\x00\x00\x02{}".to_vec();
        let mut r = tokio::io::BufReader::new(&data[..]);
        let s = read_secret_line(&mut r).await.unwrap();
        assert!(s.matches("0123456789abcdef0123"));
        let mut rest = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut r, &mut rest)
            .await
            .unwrap();
        assert_eq!(rest, b"\x00\x00\x00\x02{}");
    }

    #[tokio::test]
    async fn a_long_or_missing_secret_line_is_refused() {
        let long = vec![b'a'; 1000];
        let mut r = tokio::io::BufReader::new(&long[..]);
        assert!(read_secret_line(&mut r).await.is_err());
        let mut r = tokio::io::BufReader::new(&b""[..]);
        assert!(read_secret_line(&mut r).await.is_err());
        let mut r = tokio::io::BufReader::new(&b"short\n"[..]);
        assert!(read_secret_line(&mut r).await.is_err());
    }

    #[test]
    fn secrets_compare_and_hide() {
        let s = Secret::generate().unwrap();
        assert!(s.matches(s.expose()));
        assert!(!s.matches("x"));
        assert_eq!(format!("{s:?}"), "Secret(..)");
        assert_ne!(s, Secret::generate().unwrap());
    }
}
