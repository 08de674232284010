//! `read`: the file tool, a handler of an [`Authorized`] call (`find` lives in `search.rs` with
//! the other listing tools).

use crate::error::{ErrorCode, ToolError};
use crate::gateway::Authorized;
use crate::policy::Action;
use crate::request::{check_read_args, path_request};
use crate::wire::{IMAGE_MAX_BYTES, READ_MAX_BYTES, ReadEncoding, ReadParams, ReadResult};
use base64::Engine as _;
use codespace_runner_fs::Kind;

/// `read` of one file (`path`; `paths` is served by the gateway, one such read per path).
pub(crate) async fn read(auth: &Authorized<'_>, p: &ReadParams) -> Result<ReadResult, ToolError> {
    check_read_args(p)?;
    read_one(auth, p).await
}

/// One file of `read`: a window (bytes, or the first/last lines) of a regular file and the
/// version of the whole file (read on the blocking pool; a file above
/// `limits.max_hash_bytes` is `FILE_TOO_LARGE`). The call was authorized with the file's link
/// count from a stat; if the file that was actually opened has another count (a hardlink
/// made in between), the read is decided again with that count.
async fn read_one(auth: &Authorized<'_>, p: &ReadParams) -> Result<ReadResult, ToolError> {
    let ws = auth.ws();
    let limit = p.limit.unwrap_or(READ_MAX_BYTES);
    if limit == 0 || limit > READ_MAX_BYTES {
        return Err(ToolError::new(
            ErrorCode::OutputLimit,
            format!("limit must be between 1 and {READ_MAX_BYTES} bytes"),
        ));
    }
    let offset = p.offset.unwrap_or(0);
    let rel = auth.target()?.clone();
    let max_hash = auth.config.limits.max_hash_bytes;
    // Through the workspace's runner (the one seam; today the host's).
    let window = |offset: u64, limit: u64| codespace_runner_api::ReadRequest {
        workspace: ws.facts.id.clone(),
        path: rel.as_str().to_string(),
        offset,
        limit,
        max_hash_bytes: max_hash,
    };
    let mut out = ws
        .runner
        .read(window(offset, limit))
        .await
        .map_err(crate::host_runner::to_tool_error)?;
    let mut offset = offset;
    if p.tail_lines.is_some() && out.size > READ_MAX_BYTES {
        // The last window of the file (its version is cached by the first read).
        offset = out.size - READ_MAX_BYTES;
        out = ws
            .runner
            .read(window(offset, READ_MAX_BYTES))
            .await
            .map_err(crate::host_runner::to_tool_error)?;
    }
    let opened_links = crate::links::links_value(Kind::File, out.links);
    if opened_links != 1 {
        let mut req = path_request(Action::READ, rel.as_str(), "", auth.session());
        req.links = opened_links;
        auth.decide_more(Action::READ, &[req])?;
    }
    let whole = p.encoding.is_none()
        && p.offset.is_none()
        && p.limit.is_none()
        && p.head_lines.is_none()
        && p.tail_lines.is_none();
    if whole && let Some(mime) = image_type(&out.data) {
        return read_image(auth, &rel, mime, out).await;
    }
    let mut data = out.data;
    if p.encoding.is_none() && data.contains(&0) {
        return Err(binary_file(rel.as_str(), out.size, &out.version));
    }
    if let Some(n) = p.head_lines {
        data.truncate(head_len(&data, n));
    } else if let Some(n) = p.tail_lines {
        let skip = tail_start(&data, n);
        data.drain(..skip);
        offset = offset.saturating_add(skip as u64);
    }
    if p.encoding == Some(ReadEncoding::Text) {
        // A window that ends inside a character ends before it instead (the next window
        // starts there), so a cut is never mistaken for binary content.
        let more = offset.saturating_add(data.len() as u64) < out.size;
        if let Err(e) = std::str::from_utf8(&data)
            && e.error_len().is_none()
            && more
        {
            data.truncate(e.valid_up_to());
        }
    }
    let byte_count = data.len() as u64;
    let end = offset.saturating_add(byte_count);
    let more = end < out.size;
    let (content, content_lossy, encoding) = match p.encoding {
        // Valid UTF-8 (the common case) becomes the content without a copy; only invalid
        // bytes take the lossy path.
        None => match String::from_utf8(data) {
            Ok(s) => (s, false, None),
            Err(e) => match String::from_utf8_lossy(e.as_bytes()) {
                std::borrow::Cow::Owned(s) => (s, true, None),
                std::borrow::Cow::Borrowed(s) => (s.to_string(), false, None),
            },
        },
        Some(ReadEncoding::Text) => match String::from_utf8(data) {
            Ok(s) => (s, false, None),
            Err(e) => {
                return Err(ToolError::new(
                    ErrorCode::BinaryFile,
                    format!(
                        "{} is not UTF-8 text (invalid byte at offset {} of {} bytes, version {}); \
                         read it with `encoding: \"base64\"`",
                        rel.as_str(),
                        offset.saturating_add(e.utf8_error().valid_up_to() as u64),
                        out.size,
                        out.version
                    ),
                ));
            }
        },
        Some(ReadEncoding::Base64) => (
            base64::engine::general_purpose::STANDARD.encode(&data),
            false,
            Some(ReadEncoding::Base64),
        ),
    };
    Ok(ReadResult {
        path: rel.as_str().to_string(),
        content,
        encoding,
        content_lossy,
        version: out.version.as_str().to_string(),
        truncated: more,
        offset: (offset > 0).then_some(offset),
        next_offset: more.then_some(end),
        byte_count,
        mime_type: None,
        image: None,
    })
}

/// The image type of a file that starts with `head`, told by its magic bytes: PNG, JPEG, GIF
/// (87a/89a) and WebP (a RIFF container of type `WEBP`).
fn image_type(head: &[u8]) -> Option<&'static str> {
    if head.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if head.starts_with(b"\xff\xd8\xff") {
        Some("image/jpeg")
    } else if head.starts_with(b"GIF87a") || head.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if head.starts_with(b"RIFF") && head.get(8..12) == Some(b"WEBP".as_slice()) {
        Some("image/webp")
    } else {
        None
    }
}

/// `BINARY_FILE` for a file asked for as text: its size and version (the sha256 of its bytes).
fn binary_file(path: &str, size: u64, version: &str) -> ToolError {
    ToolError::new(
        ErrorCode::BinaryFile,
        format!(
            "{path} is a binary file ({size} bytes, version {version}); read its bytes with \
             `encoding: \"base64\"` (windows of up to {READ_MAX_BYTES} bytes)"
        ),
    )
}

/// A whole image file as the result's image bytes (the MCP layer sends them as image content):
/// up to [`IMAGE_MAX_BYTES`], else `FILE_TOO_LARGE` with its size. The first window read it
/// whole when it was at most a window; a larger image is read again whole.
async fn read_image(
    auth: &Authorized<'_>,
    rel: &codespace_runner_fs::RelPath,
    mime: &'static str,
    first: codespace_runner_api::FileWindow,
) -> Result<ReadResult, ToolError> {
    if first.size > IMAGE_MAX_BYTES {
        return Err(ToolError::new(
            ErrorCode::FileTooLarge,
            format!(
                "{} is a {mime} image of {} bytes; images are returned as image content up to \
                 {IMAGE_MAX_BYTES} bytes (read it in windows with `encoding: \"base64\"`)",
                rel.as_str(),
                first.size
            ),
        ));
    }
    let out = if (first.data.len() as u64) < first.size {
        let ws = auth.ws();
        ws.runner
            .read(codespace_runner_api::ReadRequest {
                workspace: ws.facts.id.clone(),
                path: rel.as_str().to_string(),
                offset: 0,
                limit: IMAGE_MAX_BYTES,
                max_hash_bytes: auth.config.limits.max_hash_bytes,
            })
            .await
            .map_err(crate::host_runner::to_tool_error)?
    } else {
        first
    };
    // The file may have changed between the two reads: what was read is what is returned.
    let more = (out.data.len() as u64) < out.size;
    if more || image_type(&out.data) != Some(mime) {
        return Err(ToolError::new(
            ErrorCode::StaleRead,
            format!("{} changed while it was read; read it again", rel.as_str()),
        ));
    }
    Ok(ReadResult {
        path: rel.as_str().to_string(),
        content: String::new(),
        encoding: None,
        content_lossy: false,
        version: out.version,
        truncated: false,
        offset: None,
        next_offset: None,
        byte_count: out.data.len() as u64,
        mime_type: Some(mime.to_string()),
        image: Some(out.data),
    })
}

/// Length of the first `n` lines of `data` (each with its newline; all of it when it has fewer).
fn head_len(data: &[u8], n: u64) -> usize {
    let n = usize::try_from(n).unwrap_or(usize::MAX);
    data.iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .nth(n.saturating_sub(1))
        .map_or(data.len(), |(i, _)| i + 1)
}

/// Where the last `n` lines of `data` start (a final newline ends the last line; 0 when it has
/// fewer).
fn tail_start(data: &[u8], n: u64) -> usize {
    let n = usize::try_from(n).unwrap_or(usize::MAX);
    let body = data.strip_suffix(b"\n").unwrap_or(data);
    body.iter()
        .enumerate()
        .rev()
        .filter(|(_, b)| **b == b'\n')
        .nth(n.saturating_sub(1))
        .map_or(0, |(i, _)| i + 1)
}

#[cfg(test)]
mod tests {
    use super::{head_len, image_type, tail_start};

    #[test]
    fn images_are_told_by_their_first_bytes() {
        assert_eq!(image_type(b"\x89PNG\r\n\x1a\nrest"), Some("image/png"));
        assert_eq!(image_type(b"\xff\xd8\xff\xe0"), Some("image/jpeg"));
        assert_eq!(image_type(b"GIF89a.."), Some("image/gif"));
        assert_eq!(image_type(b"RIFF\0\0\0\0WEBPVP8 "), Some("image/webp"));
        assert_eq!(image_type(b"RIFF\0\0\0\0WAVEfmt "), None);
        assert_eq!(image_type(b"\x89PN"), None);
        assert_eq!(image_type(b""), None);
    }

    #[test]
    fn head_and_tail_cut_at_line_ends() {
        let d = b"a\nbb\nccc\n";
        assert_eq!(&d[..head_len(d, 1)], b"a\n");
        assert_eq!(&d[..head_len(d, 2)], b"a\nbb\n");
        assert_eq!(head_len(d, 9), d.len());
        assert_eq!(&d[tail_start(d, 1)..], b"ccc\n");
        assert_eq!(&d[tail_start(d, 2)..], b"bb\nccc\n");
        assert_eq!(tail_start(d, 9), 0);
        assert_eq!(&b"x\ny"[tail_start(b"x\ny", 1)..], b"y");
    }
}
