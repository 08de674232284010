//! `read`: the file tool, a handler of an [`Authorized`] call (`find` lives in `search.rs` with
//! the other listing tools).

use crate::error::{ErrorCode, ToolError};
use crate::gateway::Authorized;
use crate::request::path_request;
use crate::wire::{READ_MAX_BYTES, ReadParams, ReadResult};
use codespace_runner_fs::{Kind, RelPath};

fn to_json<T: serde::Serialize>(v: &T) -> Result<serde_json::Value, ToolError> {
    serde_json::to_value(v).map_err(|e| ToolError::new(ErrorCode::Internal, e.to_string()))
}

impl Authorized<'_> {
    /// `read`: a window of a regular file and the version of the whole file (read on the
    /// blocking pool; a file above `limits.max_hash_bytes` is `FILE_TOO_LARGE`). The call was
    /// authorized with the file's link count from a stat; if the file that was actually opened
    /// has another count (a hardlink made in between), the read is decided again with that count.
    pub(crate) async fn read(&self, p: &ReadParams) -> Result<serde_json::Value, ToolError> {
        let ws = self.ws();
        let limit = p.limit.unwrap_or(READ_MAX_BYTES);
        if limit == 0 || limit > READ_MAX_BYTES {
            return Err(ToolError::new(
                ErrorCode::OutputLimit,
                format!("limit must be between 1 and {READ_MAX_BYTES} bytes"),
            ));
        }
        let offset = p.offset.unwrap_or(0);
        let rel = RelPath::parse(&p.path)?;
        let out = self
            .file_versions
            .read(
                &ws.root,
                &rel,
                offset,
                limit,
                self.config.limits.max_hash_bytes,
            )
            .await?;
        let opened_links = crate::links::links_value(Kind::File, out.links);
        if opened_links != 1 {
            let mut req = path_request("read", rel.as_str(), "", self.session());
            req.links = opened_links;
            self.decide_more("read", &[req])?;
        }
        let byte_count = out.data.len() as u64;
        let end = offset.saturating_add(byte_count);
        let more = end < out.size;
        // Valid UTF-8 (the common case) becomes the content without a copy; only invalid
        // bytes take the lossy path.
        let (content, content_lossy) = match String::from_utf8(out.data) {
            Ok(s) => (s, false),
            Err(e) => match String::from_utf8_lossy(e.as_bytes()) {
                std::borrow::Cow::Owned(s) => (s, true),
                std::borrow::Cow::Borrowed(s) => (s.to_string(), false),
            },
        };
        // Serialized with an empty content, which then moves in: the window is never copied
        // into the JSON value (the key keeps its place, so the object is the same).
        let mut v = to_json(&ReadResult {
            path: rel.as_str().to_string(),
            content: String::new(),
            content_lossy,
            version: out.version.as_str().to_string(),
            truncated: more,
            offset: (offset > 0).then_some(offset),
            next_offset: more.then_some(end),
            byte_count,
        })?;
        if let Some(slot) = v.get_mut("content") {
            *slot = serde_json::Value::String(content);
        }
        Ok(v)
    }
}
