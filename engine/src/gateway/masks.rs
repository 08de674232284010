//! The gateway's side of secret masks: deciding, for a command about to start, which paths of its
//! workspace policy withholds from `read` (one evaluation per decision signature, cached per
//! policy set, listing generation and caller), and the audit rows of the masks a command got.

use super::{Gateway, Services, WorkspaceRuntime};
use crate::error::ToolError;
use crate::mask_cache::Mask;
use crate::masks::{
    INLINE_DECISIONS, MAX_MASKS, check_complete, coalesce, group, refuse, select, unlisted_note,
};
use crate::policy::PolicySnapshot;
use crate::policy::decide::Decision;
use crate::request::{Session, SubRequest, path_request};
use codespace_store::DecisionRow;
use std::sync::Arc;

impl Gateway {
    /// The masks a command started by `session` in `ws` needs (empty unless the workspace's
    /// masking is `enforced`). Directories the listing cannot hold whole are masked whole, and
    /// more masks than one command can carry are coalesced into directory masks (both with a
    /// `masks_widened` event saying what to remove); top-level names that are not UTF-8 get the
    /// [`crate::masks::NON_UTF8_TOP_LEVEL`] mask. `Err` refuses the command: the listing hit its
    /// entry cap, or even one mask per top-level entry is too many.
    pub(crate) async fn secret_masks(
        &self,
        snap: &PolicySnapshot,
        ws: &WorkspaceRuntime,
        session: &Session,
        listing: &crate::index::start::StartListing<'_>,
    ) -> Result<Vec<Mask>, ToolError> {
        if ws.facts.secret_masking != crate::facts::MaskingFact::Enforced {
            return Ok(Vec::new());
        }
        let listing = Arc::clone(
            listing
                .get()
                .await
                .as_ref()
                .map_err(|e| refuse(e.clone()))?,
        );
        check_complete(&listing, self.config().limits.max_walk_entries)?;
        let cache = &ws.index.masks;
        let key = format!(
            "{}\0{}\0{}\0{}",
            snap.sha256, listing.generation, session.client, session.transport
        );
        if let Some(masks) = cache.set(&key) {
            return Ok(masks.to_vec());
        }
        let grouped = match cache.grouped(&snap.sha256, listing.generation) {
            Some(g) => g,
            None => {
                let plan = self.decider.signature_plan(snap);
                let facts = ws.facts.clone();
                let l = Arc::clone(&listing);
                let g = tokio::task::spawn_blocking(move || {
                    Arc::new(group(&l, &plan, &|p| facts.is_server_owned(p)))
                })
                .await
                .map_err(|e| refuse(format!("grouping task: {e}")))?;
                cache.put_grouped(&snap.sha256, listing.generation, Arc::clone(&g));
                g
            }
        };
        let reqs: Vec<SubRequest> = grouped
            .reps
            .iter()
            .filter_map(|&i| listing.entries.get(i as usize))
            .map(|e| path_request(crate::policy::Action::READ, &e.path, "", session))
            .collect();
        let live = self.policy().snapshot();
        let decision = if reqs.len() <= INLINE_DECISIONS || live.sha256 != snap.sha256 {
            self.decider.probe(snap, &ws.facts, "read", &reqs, session)
        } else {
            // Paths the policy set tells apart one by one: evaluate them off the async workers.
            let decider = Arc::clone(&self.decider);
            let facts = ws.facts.clone();
            let session = session.clone();
            tokio::task::spawn_blocking(move || {
                decider.probe_uncached(&live, &facts, "read", &reqs, &session)
            })
            .await
            .map_err(|e| refuse(format!("decision task: {e}")))?
        };
        let selected = select(&listing, &grouped, &decision);
        let wanted = selected.len();
        let (masks, widened) = coalesce(selected, MAX_MASKS).map_err(|left| {
            refuse(format!(
                "policy withholds {wanted} paths of this workspace from reading, and even masking \
                 whole top-level directories leaves {left}, more than the {MAX_MASKS} one command \
                 can have masked; the command was not started (remove withheld files from the \
                 top level of the workspace, withhold whole directories, or an operator can set \
                 secret_masking: off)"
            ))
        })?;
        note_widened_masks(self, ws, &listing, wanted, &widened).await;
        // Only an error-free decision is reused: an evaluation error denies (masks) this time,
        // and is asked again next time.
        if decision.subs.iter().all(|s| s.errors.is_empty()) {
            cache.put_set(key, Arc::new(masks.clone()));
        }
        Ok(masks)
    }
}

impl Services {
    /// Audit rows of the sandbox a command is about to get, queued before its start for one
    /// group commit: its write scope's rows (`scope_rows`), then one `read` row per masked path
    /// with decision `masked` (not `deny`: the call was allowed, the path withheld from it),
    /// under the command's own decision id after its own rows (paths and policy ids only,
    /// never contents).
    pub(crate) fn audit_masks(
        &self,
        exec: &Decision,
        scope_rows: Vec<DecisionRow>,
        masks: &[Mask],
        session: &Session,
    ) {
        let Some(store) = &self.store else { return };
        if masks.is_empty() && scope_rows.is_empty() {
            return;
        }
        let at_ms = codespace_store::now_ms();
        let first = exec.subs.len() + scope_rows.len();
        let mask_rows: Vec<DecisionRow> = masks
            .iter()
            .enumerate()
            .map(|(i, m)| DecisionRow {
                decision_id: exec.decision_id.clone(),
                at_ms,
                policy_set_sha256: exec.policy_sha256.clone(),
                profile: exec.profile.clone(),
                workspace: exec.workspace.clone(),
                tool: exec.tool.clone(),
                action: "read".into(),
                sub_index: i64::try_from(first + i).unwrap_or(i64::MAX),
                subject: m.path.clone(),
                client: Some(session.client.clone()),
                transport: Some(session.transport.clone()),
                // Not a refused call: the command runs, this path is withheld from it.
                decision: codespace_store::MASKED.into(),
                policy_ids: m.policy_ids.clone(),
                errors: Vec::new(),
                default_deny: m.policy_ids.is_empty(),
                duration_us: 0,
                path: Some(m.path.clone()),
                ..DecisionRow::default()
            })
            .collect();
        let mut rows = scope_rows;
        rows.extend(mask_rows);
        // Queued, not waited for: the command's own decision (which allowed it) is already
        // written ahead; these rows say how its sandbox was shaped and follow in the next group
        // commit, so a command's start does not wait for a second commit.
        crate::audit::append(store, rows, &exec.decision_id, false);
    }
}

/// Says (a `masks_widened` event and a warning in the log) which directories were masked
/// whole: those the listing could not hold, and those that replaced too many masks.
async fn note_widened_masks(
    gw: &Gateway,
    ws: &WorkspaceRuntime,
    listing: &crate::index::Listing,
    wanted: usize,
    widened: &[String],
) {
    let mut notes: Vec<String> = unlisted_note(listing).into_iter().collect();
    if !widened.is_empty() {
        let shown: Vec<&str> = widened.iter().take(10).map(String::as_str).collect();
        notes.push(format!(
            "secret masking: policy withholds {wanted} paths, more than the {MAX_MASKS} one \
             command can have masked, so {} director{} masked whole for commands (their other \
             files are hidden from commands too): {}{}; remove withheld files there, or \
             withhold whole directories, to see the rest again",
            widened.len(),
            if widened.len() == 1 {
                "y is"
            } else {
                "ies are"
            },
            shown.join(", "),
            if widened.len() > shown.len() {
                format!(" and {} more", widened.len() - shown.len())
            } else {
                String::new()
            }
        ));
    }
    if notes.is_empty() {
        return;
    }
    for note in &notes {
        tracing::warn!(workspace = %ws.facts.id, "{note}");
    }
    if let Some(store) = gw.store() {
        let detail = serde_json::json!({
            "workspace": ws.facts.id,
            "unlisted": listing.unlisted.iter().map(|u| u.path.as_str()).collect::<Vec<_>>(),
            "coalesced": widened,
            "notes": notes,
        });
        let store = Arc::clone(store);
        // A write to the store: off the async workers, recorded before the command starts.
        let written =
            tokio::task::spawn_blocking(move || store.insert_event("masks_widened", &detail)).await;
        if !matches!(written, Ok(Ok(_))) {
            tracing::warn!("masks_widened event not recorded");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;
    use crate::facts::SandboxFacts;

    use crate::config::Config;
    use crate::policy::{PolicySource, PolicyStore};
    use std::path::Path;

    fn gateway(root: &Path, extra: &str) -> Gateway {
        let json = format!(
            r#"{{"workspaces": {{"w": {{"root": "{}", "profile": "workspace-write"}}}}{extra}}}"#,
            root.display()
        );
        Gateway::new(
            Config::from_json(&json, Path::new("/")).unwrap(),
            Arc::new(PolicyStore::load(PolicySource::Embedded).unwrap()),
            None,
            SandboxFacts {
                sandbox_enforced: true,
                network_enforced: true,
                masking_enforced: true,
            },
        )
        .unwrap()
    }

    async fn masks_of(gw: &Gateway) -> Result<Vec<String>, ToolError> {
        let snap = gw.policy().snapshot();
        let ws = gw.workspace("w").unwrap();
        let listing = crate::index::start::StartListing::new(&ws.index, &ws.versions);
        let masks = gw
            .secret_masks(&snap, ws, &Session::stdio(), &listing)
            .await?;
        Ok(masks.into_iter().map(|m| m.path).collect())
    }

    fn tree() -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap().join("ws");
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::write(root.join(".env"), "SECRET=1").unwrap();
        std::fs::write(root.join("src/main.rs"), "fn main() {}").unwrap();
        (dir, root)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_repeated_command_reuses_the_decided_masks() {
        let (_dir, root) = tree();
        let gw = gateway(&root, "");
        assert_eq!(masks_of(&gw).await.unwrap(), [".env"]);
        // The second ask may build the index (the first answered from its own walk): after it,
        // the set is cached under the index's listing.
        assert_eq!(masks_of(&gw).await.unwrap(), [".env"]);
        let cached = |gw: &Gateway| gw.workspace("w").unwrap().index.masks.newest_set();
        let (key, set) = cached(&gw).expect("a decided set is cached");
        assert_eq!(masks_of(&gw).await.unwrap(), [".env"]);
        let (key2, set2) = cached(&gw).unwrap();
        if key2 != key {
            // The index was rebuilt in between (no watcher here): nothing to reuse.
            codespace_test_skip::skip(
                "a_repeated_command_reuses_the_decided_masks",
                "the listing changed between two asks (no file watcher?)",
            );
            return;
        }
        assert!(
            Arc::ptr_eq(&set, &set2),
            "an unchanged listing and policy set decide nothing again"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_withheld_file_or_alias_created_between_commands_is_masked_by_the_next() {
        let (_dir, root) = tree();
        let gw = gateway(&root, "");
        assert_eq!(masks_of(&gw).await.unwrap(), [".env"]);
        assert_eq!(masks_of(&gw).await.unwrap(), [".env"]);
        std::fs::write(root.join("src/.env"), "SECRET=2").unwrap();
        assert_eq!(masks_of(&gw).await.unwrap(), [".env", "src/.env"]);
        std::fs::hard_link(root.join(".env"), root.join("src/notes.txt")).unwrap();
        assert_eq!(
            masks_of(&gw).await.unwrap(),
            [".env", "src/.env", "src/notes.txt"]
        );
        std::fs::remove_file(root.join("src/.env")).unwrap();
        assert_eq!(masks_of(&gw).await.unwrap(), [".env", "src/notes.txt"]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_incomplete_listing_refuses_the_command() {
        let (_dir, root) = tree();
        for i in 0..10 {
            std::fs::write(root.join(format!("f{i}")), "x").unwrap();
        }
        let gw = gateway(&root, r#", "limits": {"max_walk_entries": 5}"#);
        let err = masks_of(&gw).await.unwrap_err();
        assert_eq!(err.code, ErrorCode::ProcessSpawnFailed);
        assert!(
            err.message.contains("more than 5 entries"),
            "{}",
            err.message
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_name_that_is_not_utf8_masks_its_directory_even_when_created_later() {
        use std::os::unix::ffi::OsStrExt;
        let (_dir, root) = tree();
        let gw = gateway(&root, "");
        assert_eq!(masks_of(&gw).await.unwrap(), [".env"]);
        assert_eq!(masks_of(&gw).await.unwrap(), [".env"]);
        let odd = root
            .join("src")
            .join(std::ffi::OsStr::from_bytes(b"bad\xff.env"));
        std::fs::write(&odd, "SECRET=3").unwrap();
        assert_eq!(masks_of(&gw).await.unwrap(), [".env", "src"]);
        std::fs::remove_file(&odd).unwrap();
        assert_eq!(masks_of(&gw).await.unwrap(), [".env"]);
        // At the top level the directory would be the root: the helper masks every top-level
        // name that is not UTF-8 instead (the `""` mask), and the command runs.
        let top = root.join(std::ffi::OsStr::from_bytes(b"caf\xe9"));
        std::fs::write(&top, "SECRET=4").unwrap();
        assert_eq!(masks_of(&gw).await.unwrap(), ["", ".env"]);
        std::fs::remove_file(&top).unwrap();
        assert_eq!(masks_of(&gw).await.unwrap(), [".env"]);
    }
}
