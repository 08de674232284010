//! `read` and `find`: the file tools, after the gateway has authorized the call.

use crate::error::{ErrorCode, ToolError};
use crate::gateway::{Audit, Gateway, WorkspaceRuntime};
use crate::policy::PolicySnapshot;
use crate::request::{Session, path_request};
use crate::tools::{
    FIND_MAX_PATHS, FindParams, FindResult, READ_MAX_BYTES, ReadParams, ReadResult,
};
use codespace_runner_fs::{GlobFilter, Kind, RelPath, WalkLimits};
use sha2::{Digest, Sha256};

fn to_json<T: serde::Serialize>(v: &T) -> Result<serde_json::Value, ToolError> {
    serde_json::to_value(v).map_err(|e| ToolError::new(ErrorCode::Internal, e.to_string()))
}

impl Gateway {
    /// `read`: a window of a regular file and the version of the whole file.
    pub(crate) fn read(
        &self,
        ws: &WorkspaceRuntime,
        p: &ReadParams,
    ) -> Result<serde_json::Value, ToolError> {
        let limit = p.limit.unwrap_or(READ_MAX_BYTES);
        if limit == 0 || limit > READ_MAX_BYTES {
            return Err(ToolError::new(
                ErrorCode::OutputLimit,
                format!("limit must be between 1 and {READ_MAX_BYTES} bytes"),
            ));
        }
        let offset = p.offset.unwrap_or(0);
        let rel = RelPath::parse(&p.path)?;
        let out = ws.root.read(&rel, offset, limit)?;
        let byte_count = out.data.len() as u64;
        let end = offset.saturating_add(byte_count);
        let more = end < out.size;
        let content = String::from_utf8_lossy(&out.data);
        let content_lossy = matches!(content, std::borrow::Cow::Owned(_));
        to_json(&ReadResult {
            path: rel.as_str().to_string(),
            content: content.into_owned(),
            content_lossy,
            version: out.version.as_str().to_string(),
            truncated: more,
            offset: (offset > 0).then_some(offset),
            next_offset: more.then_some(end),
            byte_count,
        })
    }

    /// `find`: bounded no-follow walk → glob → policy filter (entries the caller may not `read`
    /// are withheld) → page.
    pub(crate) async fn find(
        &self,
        snap: &PolicySnapshot,
        ws: &WorkspaceRuntime,
        p: &FindParams,
        session: &Session,
    ) -> Result<serde_json::Value, ToolError> {
        let limit = p.limit.unwrap_or(FIND_MAX_PATHS);
        if limit == 0 || limit > FIND_MAX_PATHS {
            return Err(ToolError::new(
                ErrorCode::OutputLimit,
                format!("limit must be between 1 and {FIND_MAX_PATHS}"),
            ));
        }
        let offset = p.offset.unwrap_or(0);
        let glob =
            match p.glob.as_deref().filter(|g| !g.is_empty()) {
                Some(g) => Some(GlobFilter::new(g).map_err(|e| {
                    ToolError::new(ErrorCode::InvalidArguments, format!("glob: {e}"))
                })?),
                None => None,
            };
        let root = ws.root.clone();
        let walk = tokio::task::spawn_blocking(move || root.walk(&WalkLimits::default()))
            .await
            .map_err(|e| ToolError::new(ErrorCode::Internal, format!("walk task: {e}")))??;
        let candidates: Vec<String> = walk
            .entries
            .into_iter()
            .filter(|e| matches!(e.kind, Kind::File | Kind::Symlink))
            .map(|e| e.path)
            .filter(|path| glob.as_ref().is_none_or(|g| g.is_match(path)))
            .collect();
        // Withhold what the caller may not read: one `read` request per distinct decision
        // signature (paths the policy set cannot tell apart share one evaluation), decided in one
        // batch; the withheld entries are written to the audit log.
        let plan = self.signature_plan(snap);
        let mut slot_of_key: std::collections::HashMap<String, usize> = Default::default();
        let mut reqs = Vec::new();
        let mut slots = Vec::with_capacity(candidates.len());
        for path in &candidates {
            let owned = ws.facts.is_server_owned(path);
            let slot = match plan.key(path, owned) {
                Some(k) => *slot_of_key.entry(k).or_insert_with(|| {
                    reqs.push(path_request("read", path, "", session));
                    reqs.len() - 1
                }),
                None => {
                    reqs.push(path_request("read", path, "", session));
                    reqs.len() - 1
                }
            };
            slots.push(slot);
        }
        let decision = self.decide_reqs(snap, &ws.facts, "find", &reqs, session, Audit::None);
        let mut visible = Vec::with_capacity(candidates.len());
        let mut withheld_paths = Vec::new();
        for (path, slot) in candidates.into_iter().zip(slots) {
            if decision.subs.get(slot).is_some_and(|s| s.allowed) {
                visible.push(path);
            } else {
                withheld_paths.push((path, slot));
            }
        }
        let withheld = withheld_paths.len() as u64;
        self.audit_withheld(snap, &decision, &ws.facts, &reqs, &withheld_paths, session);
        let mut h = Sha256::new();
        for path in &visible {
            h.update(path.as_bytes());
            h.update(b"\n");
        }
        if walk.incomplete {
            h.update(b"\0incomplete");
        }
        let listing_version = format!("sha256:{}", hex::encode(h.finalize()));
        let total = visible.len() as u64;
        let start = usize::try_from(offset.min(total)).unwrap_or(usize::MAX);
        let take = usize::try_from(limit).unwrap_or(usize::MAX);
        let page: Vec<String> = visible.into_iter().skip(start).take(take).collect();
        let end = offset.min(total) + page.len() as u64;
        let more = end < total;
        to_json(&FindResult {
            paths: page,
            truncated: more || walk.incomplete,
            offset: (offset > 0).then_some(offset),
            next_offset: more.then_some(end),
            incomplete: walk.incomplete,
            listing_version,
            withheld,
        })
    }
}
