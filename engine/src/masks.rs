//! Secret masks for commands: which workspace paths a command must not see. Cedar decides, not a
//! second list: every entry of the workspace's path index (see [`crate::index`]: kept current by
//! the file watcher and fenced, so a change made before the call is always seen) is asked exactly
//! the request a `read` of that path would make (action `read`, `resource.tool == "read"`, the
//! caller's session), one evaluation per decision signature, and every denied path is masked by
//! the sandbox helper (see `codespace_runner_sandbox`, `mask.rs`). A file that shares its inode
//! with a masked file (a hardlink alias inside the workspace) is masked too.
//!
//! The decided mask set is cached per (policy set, listing generation, caller): a listing
//! generation changes whenever any path of the workspace appears, disappears or is replaced, and a
//! reload changes the policy set, so a repeated command costs one fenced look at the index.
//!
//! The candidate requests say `links = 1` (the answer for the *name*): aliases are found by inode
//! number instead (the index keeps each entry's `d_ino`, so no per-file stat), because masking
//! every multiply-linked file would put read-only mounts over build outputs that tools such as
//! cargo replace in place. docs/security.md has the reasoning.
//!
//! A listing that cannot see everything (`limits.max_walk_entries` or the depth cap, an unreadable
//! directory, a name that is not UTF-8) fails closed: the command is refused unless the operator
//! set `secret_masking: off`.

use crate::config::SecretMasking;
use crate::error::{ErrorCode, ToolError};
use crate::gateway::{Audit, Gateway, SandboxFacts, WorkspaceRuntime};
use crate::index::Listing;
use crate::policy::PolicySnapshot;
use crate::policy::decide::{Decision, decide};
use crate::policy::signature::SignaturePlan;
use crate::request::{Session, SubRequest, path_request};
use codespace_runner_fs::Kind;
use codespace_store::DecisionRow;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

/// Most paths one command may have masked (each is one mount in its namespace).
pub const MAX_MASKS: usize = codespace_runner_sandbox::MAX_MASKS;

/// Candidate requests decided on the async worker (through the decision cache); more are decided
/// on the blocking pool.
const INLINE_DECISIONS: usize = 256;

/// Decided mask sets kept per workspace (one per caller identity, for the current listing).
const MASK_SETS_KEPT: usize = 8;

/// The Cedar fact `resource.workspace.environment.secret_masking` of a workspace: `off` when the
/// operator opted out, else `enforced` when the probe says masks work, else `unavailable`.
pub(crate) fn masking_fact(
    switch: SecretMasking,
    sandbox: SandboxFacts,
) -> crate::facts::MaskingFact {
    match switch {
        SecretMasking::Off => crate::facts::MaskingFact::Off,
        SecretMasking::Required if sandbox.masking_enforced => crate::facts::MaskingFact::Enforced,
        SecretMasking::Required => crate::facts::MaskingFact::Unavailable,
    }
}

/// One masked path and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mask {
    /// Workspace-relative path.
    pub(crate) path: String,
    /// The policies that withhold it (for an alias: those of the name it aliases).
    pub(crate) policy_ids: Vec<String>,
}

/// A listing grouped for deciding: each entry's signature slot, one representative per slot, and
/// the hard-link alias groups. Depends on the policy set's plan and the listing only.
#[derive(Debug)]
struct Grouped {
    /// Slot of each listing entry.
    slots: Vec<u32>,
    /// A representative entry of each slot.
    reps: Vec<u32>,
    /// Entries (indexes) of non-directories sharing an inode, only groups of two or more.
    aliases: Vec<Vec<u32>>,
}

/// What [`MaskCache`] remembers: the grouping of one (policy set, listing), and the decided masks
/// of (policy set, listing, caller).
#[derive(Debug, Default)]
struct Cached {
    grouped: Option<(String, u64, Arc<Grouped>)>,
    sets: VecDeque<(String, Arc<Vec<Mask>>)>,
}

/// The mask cache of one workspace (it lives in the workspace's path index, so dropping the index
/// drops it too). Keys carry the listing generation, which no later listing reuses.
#[derive(Debug, Default)]
pub(crate) struct MaskCache {
    inner: Mutex<Cached>,
}

impl MaskCache {
    fn lock(&self) -> MutexGuard<'_, Cached> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn grouped(&self, sha: &str, generation: u64) -> Option<Arc<Grouped>> {
        let c = self.lock();
        c.grouped
            .as_ref()
            .filter(|(s, g, _)| s == sha && *g == generation)
            .map(|(_, _, grouped)| Arc::clone(grouped))
    }

    fn put_grouped(&self, sha: &str, generation: u64, grouped: Arc<Grouped>) {
        self.lock().grouped = Some((sha.to_string(), generation, grouped));
    }

    fn set(&self, key: &str) -> Option<Arc<Vec<Mask>>> {
        let c = self.lock();
        c.sets
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, m)| Arc::clone(m))
    }

    fn put_set(&self, key: String, masks: Arc<Vec<Mask>>) {
        let mut c = self.lock();
        c.sets.retain(|(k, _)| *k != key);
        c.sets.push_front((key, masks));
        c.sets.truncate(MASK_SETS_KEPT);
    }
}

fn refuse(msg: impl std::fmt::Display) -> ToolError {
    ToolError::new(
        ErrorCode::ProcessSpawnFailed,
        format!("secret masking: {msg}"),
    )
}

/// Fails closed on a listing that does not show every path of the workspace.
fn check_complete(listing: &Listing, max_entries: usize) -> Result<(), ToolError> {
    if listing.incomplete {
        return Err(refuse(format!(
            "the workspace could not be listed completely (more than {max_entries} entries \
             (limits.max_walk_entries), deeper than {} levels, or an unreadable directory), so \
             the paths policy withholds cannot all be masked; the command was not started (an \
             operator can set secret_masking: off for this workspace)",
            codespace_runner_fs::WalkLimits::default().max_depth
        )));
    }
    if listing.non_utf8 > 0 {
        return Err(refuse(format!(
            "{} entries have names that are not UTF-8, so policy cannot decide them and they \
             cannot be masked; the command was not started (rename them, or an operator can \
             set secret_masking: off for this workspace)",
            listing.non_utf8
        )));
    }
    Ok(())
}

/// Groups a listing's entries by decision signature (`links = 1`: the answer for the name) and
/// finds its hard-link alias groups by inode number. CPU only; run it off the async workers.
fn group(listing: &Listing, plan: &SignaturePlan, server_owned: &dyn Fn(&str) -> bool) -> Grouped {
    let mut slot_of_key: HashMap<String, u32> = HashMap::new();
    let mut reps: Vec<u32> = Vec::new();
    let mut slots = Vec::with_capacity(listing.entries.len());
    let mut key = String::with_capacity(64);
    for (i, e) in listing.entries.iter().enumerate() {
        let i = u32::try_from(i).unwrap_or(u32::MAX);
        let cacheable = plan.key_into(&mut key, &e.path, server_owned(&e.path), 1);
        let known = if cacheable {
            slot_of_key.get(key.as_str()).copied()
        } else {
            None
        };
        let slot = match known {
            Some(slot) => slot,
            None => {
                reps.push(i);
                let slot = u32::try_from(reps.len() - 1).unwrap_or(u32::MAX);
                if cacheable {
                    slot_of_key.insert(key.clone(), slot);
                }
                slot
            }
        };
        slots.push(slot);
    }
    let mut by_ino: Vec<(u64, u32)> = listing
        .entries
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e.kind, Kind::File | Kind::Other))
        .map(|(i, e)| (e.ino, u32::try_from(i).unwrap_or(u32::MAX)))
        .collect();
    by_ino.sort_unstable();
    let aliases = by_ino
        .chunk_by(|a, b| a.0 == b.0)
        .filter(|run| run.len() > 1)
        .map(|run| run.iter().map(|(_, i)| *i).collect())
        .collect();
    Grouped {
        slots,
        reps,
        aliases,
    }
}

/// True when `path` lies beneath one of `dirs`.
fn beneath_any(path: &str, dirs: &HashSet<&str>) -> bool {
    let mut p = path;
    while let Some((parent, _)) = p.rsplit_once('/') {
        if dirs.contains(parent) {
            return true;
        }
        p = parent;
    }
    false
}

/// The masks of a decided listing: every denied entry (symlinks excepted: what they point to is
/// decided by its own name), nothing beneath a masked directory, plus every alias of a masked file.
fn select(listing: &Listing, g: &Grouped, d: &Decision) -> Vec<Mask> {
    let sub = |i: usize| g.slots.get(i).and_then(|slot| d.subs.get(*slot as usize));
    let denied = |i: usize| sub(i).is_none_or(|s| !s.allowed);
    let policy_ids = |i: usize| sub(i).map(|s| s.policy_ids.clone()).unwrap_or_default();
    let entries = &listing.entries;
    let mut masked_dirs: HashSet<&str> = HashSet::new();
    let mut chosen: Vec<(usize, Vec<String>)> = Vec::new();
    // Sorted by path, so a directory comes before everything beneath it.
    for (i, e) in entries.iter().enumerate() {
        if e.kind == Kind::Symlink || !denied(i) || beneath_any(&e.path, &masked_dirs) {
            continue;
        }
        if e.kind == Kind::Dir {
            masked_dirs.insert(&e.path);
        }
        chosen.push((i, policy_ids(i)));
    }
    let mut is_chosen: HashSet<usize> = chosen.iter().map(|(i, _)| *i).collect();
    for group in &g.aliases {
        let Some(withheld) = group.iter().map(|i| *i as usize).find(|i| denied(*i)) else {
            continue;
        };
        for i in group.iter().map(|i| *i as usize) {
            let covered = entries
                .get(i)
                .is_none_or(|e| beneath_any(&e.path, &masked_dirs));
            if !covered && is_chosen.insert(i) {
                chosen.push((i, policy_ids(withheld)));
            }
        }
    }
    chosen.sort_by_key(|(i, _)| *i);
    chosen
        .into_iter()
        .filter_map(|(i, policy_ids)| {
            entries.get(i).map(|e| Mask {
                path: e.path.to_string(),
                policy_ids,
            })
        })
        .collect()
}

impl Gateway {
    /// The masks a command started by `session` in `ws` needs (empty unless the workspace's
    /// masking is `enforced`). `Err` refuses the command: the listing was incomplete or there
    /// are more masks than one command can carry.
    pub(crate) async fn secret_masks(
        &self,
        snap: &PolicySnapshot,
        ws: &WorkspaceRuntime,
        session: &Session,
    ) -> Result<Vec<Mask>, ToolError> {
        if ws.facts.secret_masking != crate::facts::MaskingFact::Enforced {
            return Ok(Vec::new());
        }
        crate::index::ensure_reaper(&ws.index);
        let index = Arc::clone(&ws.index);
        let versions = Arc::clone(&ws.versions);
        let (listing, _) = tokio::task::spawn_blocking(move || index.listing(&versions))
            .await
            .map_err(|e| refuse(format!("listing task: {e}")))?
            .map_err(|e| refuse(format!("the workspace could not be listed: {e}")))?;
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
                let plan = self.signature_plan(snap);
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
            .map(|e| path_request("read", &e.path, "", session))
            .collect();
        let live = self.policy().snapshot();
        let decision = if reqs.len() <= INLINE_DECISIONS || live.sha256 != snap.sha256 {
            self.decide_reqs(snap, &ws.facts, "read", &reqs, session, Audit::None)
        } else {
            // Paths the policy set tells apart one by one: evaluate them off the async workers.
            let base = self
                .entities(snap, &ws.facts)
                .unwrap_or_else(|_| cedar_policy::Entities::empty());
            let facts = ws.facts.clone();
            tokio::task::spawn_blocking(move || decide(&live, &base, &facts, "read", &reqs))
                .await
                .map_err(|e| refuse(format!("decision task: {e}")))?
        };
        let masks = select(&listing, &grouped, &decision);
        if masks.len() > MAX_MASKS {
            return Err(refuse(format!(
                "policy withholds {} paths of this workspace from reading, more than the {MAX_MASKS} \
                 one command can have masked; the command was not started (withhold a directory \
                 instead of its files, or an operator can set secret_masking: off)",
                masks.len()
            )));
        }
        // Only an error-free decision is reused: an evaluation error denies (masks) this time,
        // and is asked again next time.
        if decision.subs.iter().all(|s| s.errors.is_empty()) {
            cache.put_set(key, Arc::new(masks.clone()));
        }
        Ok(masks)
    }

    /// Audit rows for the masks of a started command: one `read` deny row per masked path, under
    /// the command's own decision id (paths and policy ids only, never contents).
    pub(crate) fn audit_masks(&self, exec: &Decision, masks: &[Mask], session: &Session) {
        let Some(store) = &self.store else { return };
        if masks.is_empty() {
            return;
        }
        let at_ms = codespace_store::now_ms();
        let first = exec.subs.len();
        let rows: Vec<DecisionRow> = masks
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
                decision: "deny".into(),
                policy_ids: m.policy_ids.clone(),
                errors: Vec::new(),
                default_deny: m.policy_ids.is_empty(),
                duration_us: 0,
                path: Some(m.path.clone()),
                ..DecisionRow::default()
            })
            .collect();
        // Written ahead like the command's own decision (it runs right after).
        crate::audit::append(store, rows, &exec.decision_id, true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::config::Config;
    use crate::facts::MaskingFact;
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
        let masks = gw.secret_masks(&snap, ws, &Session::stdio()).await?;
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
        let cached = |gw: &Gateway| {
            let c = gw.workspace("w").unwrap().index.masks.lock();
            c.sets.front().map(|(k, m)| (k.clone(), Arc::clone(m)))
        };
        let (key, set) = cached(&gw).expect("a decided set is cached");
        assert_eq!(masks_of(&gw).await.unwrap(), [".env"]);
        let (key2, set2) = cached(&gw).unwrap();
        if key2 != key {
            // The index was rebuilt in between (no watcher here): nothing to reuse.
            println!("skip: the listing changed between two asks (no file watcher?)");
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
            err.message.contains("could not be listed completely"),
            "{}",
            err.message
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_name_that_is_not_utf8_refuses_the_command_even_when_created_later() {
        use std::os::unix::ffi::OsStrExt;
        let (_dir, root) = tree();
        let gw = gateway(&root, "");
        assert_eq!(masks_of(&gw).await.unwrap(), [".env"]);
        assert_eq!(masks_of(&gw).await.unwrap(), [".env"]);
        let odd = root
            .join("src")
            .join(std::ffi::OsStr::from_bytes(b"bad\xff.env"));
        std::fs::write(&odd, "SECRET=3").unwrap();
        let err = masks_of(&gw).await.unwrap_err();
        assert!(err.message.contains("not UTF-8"), "{}", err.message);
        std::fs::remove_file(&odd).unwrap();
        assert_eq!(masks_of(&gw).await.unwrap(), [".env"]);
    }

    #[test]
    fn the_fact_follows_the_switch_and_the_probe() {
        let on = SandboxFacts {
            sandbox_enforced: true,
            network_enforced: true,
            masking_enforced: true,
        };
        let off = SandboxFacts {
            masking_enforced: false,
            ..on
        };
        assert_eq!(
            masking_fact(SecretMasking::Required, on),
            MaskingFact::Enforced
        );
        assert_eq!(
            masking_fact(SecretMasking::Required, off),
            MaskingFact::Unavailable
        );
        assert_eq!(masking_fact(SecretMasking::Off, on), MaskingFact::Off);
        assert_eq!(masking_fact(SecretMasking::Off, off), MaskingFact::Off);
    }

    #[test]
    fn beneath_any_checks_whole_components() {
        let dirs: HashSet<&str> = ["a/b", "s"].into_iter().collect();
        assert!(beneath_any("a/b/c", &dirs));
        assert!(beneath_any("s/x/y", &dirs));
        assert!(!beneath_any("a/bc/d", &dirs));
        assert!(
            !beneath_any("a/b", &dirs),
            "the directory itself is not beneath itself"
        );
        assert!(!beneath_any("sx/y", &dirs));
    }
}
