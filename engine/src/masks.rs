//! Secret masks for commands: which workspace paths a command must not see. Cedar decides, not a
//! second list: a bounded no-follow walk lists every entry, each entry is asked exactly the
//! request a `read` of that path would make (action `read`, `resource.tool == "read"`, the
//! caller's session), one evaluation per decision signature, and every denied path is masked by
//! the sandbox helper (see `codespace_runner_sandbox`, `mask.rs`). A file that shares its inode
//! with a masked file (a hardlink alias inside the workspace) is masked too.
//!
//! The candidate requests say `links = 1` (the answer for the *name*): aliases are found by inode
//! number instead, because masking every multiply-linked file would put read-only mounts over
//! build outputs that tools such as cargo replace in place. docs/security.md has the reasoning.
//!
//! A walk that cannot see everything (entry or depth cap, an unreadable directory, a name that is
//! not UTF-8) fails closed: the command is refused unless the operator set `secret_masking: off`.

use crate::config::SecretMasking;
use crate::decide::Decision;
use crate::error::{ErrorCode, ToolError};
use crate::gateway::{Audit, Gateway, SandboxFacts, WorkspaceRuntime};
use crate::policy::PolicySnapshot;
use crate::request::{Session, SubRequest, path_request};
use crate::signature::SignaturePlan;
use codespace_runner_fs::{Kind, Walk, WalkLimits};
use codespace_store::DecisionRow;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Most entries the mask walk lists before it gives up (and the exec fails closed). The same
/// bound as `limits.max_walk_entries`' default.
pub const MASK_WALK_MAX_ENTRIES: usize = 1_000_000;

/// Most paths one command may have masked (each is one mount in its namespace).
pub const MAX_MASKS: usize = codespace_runner_sandbox::MAX_MASKS;

/// The Cedar fact `resource.workspace.environment.secret_masking` of a workspace: `off` when the
/// operator opted out, else `enforced` when the probe says masks work, else `unavailable`.
pub(crate) fn masking_fact(switch: SecretMasking, sandbox: SandboxFacts) -> &'static str {
    match switch {
        SecretMasking::Off => "off",
        SecretMasking::Required if sandbox.masking_enforced => "enforced",
        SecretMasking::Required => "unavailable",
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

/// What the walk found, grouped for deciding: each entry's signature slot, one request per slot.
struct Grouped {
    walk: Walk,
    slots: Vec<usize>,
    reqs: Vec<SubRequest>,
    /// Inode number → entries (indexes) of non-directories sharing it, only groups of two or more.
    aliases: Vec<Vec<usize>>,
}

fn refuse(msg: impl std::fmt::Display) -> ToolError {
    ToolError::new(
        ErrorCode::ProcessSpawnFailed,
        format!("secret masking: {msg}"),
    )
}

/// Walks the workspace and groups its entries by decision signature (blocking: disk and CPU).
fn walk_and_group(
    root: &codespace_runner_fs::Root,
    plan: &SignaturePlan,
    server_owned: &dyn Fn(&str) -> bool,
    session: &Session,
) -> Result<Grouped, ToolError> {
    let limits = WalkLimits {
        max_entries: MASK_WALK_MAX_ENTRIES,
        ..WalkLimits::default()
    };
    let walk = root.walk(&limits)?;
    if walk.incomplete {
        return Err(refuse(format!(
            "the workspace could not be listed completely (more than {MASK_WALK_MAX_ENTRIES} \
             entries, deeper than {} levels, or an unreadable directory), so the paths policy \
             withholds cannot all be masked; the command was not started (an operator can set \
             secret_masking: off for this workspace)",
            limits.max_depth
        )));
    }
    if walk.non_utf8_skipped > 0 {
        return Err(refuse(format!(
            "{} entries have names that are not UTF-8, so policy cannot decide them and they \
             cannot be masked; the command was not started (rename them, or an operator can \
             set secret_masking: off for this workspace)",
            walk.non_utf8_skipped
        )));
    }
    let mut slot_of_key: HashMap<String, usize> = HashMap::new();
    let mut reqs = Vec::new();
    let mut slots = Vec::with_capacity(walk.entries.len());
    let mut key = String::with_capacity(64);
    for e in &walk.entries {
        let cacheable = plan.key_into(&mut key, &e.path, server_owned(&e.path), 1);
        let known = if cacheable {
            slot_of_key.get(key.as_str()).copied()
        } else {
            None
        };
        let slot = match known {
            Some(slot) => slot,
            None => {
                reqs.push(path_request("read", &e.path, "", session));
                if cacheable {
                    slot_of_key.insert(key.clone(), reqs.len() - 1);
                }
                reqs.len() - 1
            }
        };
        slots.push(slot);
    }
    let mut by_ino: Vec<(u64, usize)> = walk
        .entries
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e.kind, Kind::File | Kind::Other))
        .map(|(i, e)| (e.ino, i))
        .collect();
    by_ino.sort_unstable();
    let aliases = by_ino
        .chunk_by(|a, b| a.0 == b.0)
        .filter(|run| run.len() > 1)
        .map(|run| run.iter().map(|(_, i)| *i).collect())
        .collect();
    Ok(Grouped {
        walk,
        slots,
        reqs,
        aliases,
    })
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

/// The masks of a decided walk: every denied entry (symlinks excepted: what they point to is
/// decided by its own name), nothing beneath a masked directory, plus every alias of a masked file.
fn select(g: &Grouped, d: &Decision) -> Vec<Mask> {
    let denied = |i: usize| {
        g.slots
            .get(i)
            .and_then(|slot| d.subs.get(*slot))
            .is_none_or(|s| !s.allowed)
    };
    let policy_ids = |i: usize| {
        g.slots
            .get(i)
            .and_then(|slot| d.subs.get(*slot))
            .map(|s| s.policy_ids.clone())
            .unwrap_or_default()
    };
    let entries = &g.walk.entries;
    let mut masked_dirs: HashSet<&str> = HashSet::new();
    let mut chosen: Vec<(usize, Vec<String>)> = Vec::new();
    // Sorted by path, so a directory comes before everything beneath it.
    for (i, e) in entries.iter().enumerate() {
        if e.kind == Kind::Symlink || !denied(i) || beneath_any(&e.path, &masked_dirs) {
            continue;
        }
        if e.kind == Kind::Dir {
            masked_dirs.insert(e.path.as_str());
        }
        chosen.push((i, policy_ids(i)));
    }
    let mut is_chosen: HashSet<usize> = chosen.iter().map(|(i, _)| *i).collect();
    for group in &g.aliases {
        let Some(withheld) = group.iter().copied().find(|i| denied(*i)) else {
            continue;
        };
        for &i in group {
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
                path: e.path.clone(),
                policy_ids,
            })
        })
        .collect()
}

impl Gateway {
    /// The masks a command started by `session` in `ws` needs (empty unless the workspace's
    /// masking is `enforced`). `Err` refuses the command: the walk was incomplete or there are
    /// more masks than one command can carry.
    pub(crate) async fn secret_masks(
        &self,
        snap: &PolicySnapshot,
        ws: &WorkspaceRuntime,
        session: &Session,
    ) -> Result<Vec<Mask>, ToolError> {
        if ws.facts.secret_masking != "enforced" {
            return Ok(Vec::new());
        }
        let plan = self.signature_plan(snap);
        let root = Arc::clone(&ws.root);
        let facts = ws.facts.clone();
        let who = session.clone();
        let grouped = tokio::task::spawn_blocking(move || {
            walk_and_group(&root, &plan, &|p| facts.is_server_owned(p), &who)
        })
        .await
        .map_err(|e| refuse(format!("walk task: {e}")))??;
        let decision =
            self.decide_reqs(snap, &ws.facts, "read", &grouped.reqs, session, Audit::None);
        let masks = select(&grouped, &decision);
        if masks.len() > MAX_MASKS {
            return Err(refuse(format!(
                "policy withholds {} paths of this workspace from reading, more than the {MAX_MASKS} \
                 one command can have masked; the command was not started (withhold a directory \
                 instead of its files, or an operator can set secret_masking: off)",
                masks.len()
            )));
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
        if let Err(e) = store.insert_decisions(&rows) {
            tracing::error!(error = %e, decision_id = %exec.decision_id, "audit write failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(masking_fact(SecretMasking::Required, on), "enforced");
        assert_eq!(masking_fact(SecretMasking::Required, off), "unavailable");
        assert_eq!(masking_fact(SecretMasking::Off, on), "off");
        assert_eq!(masking_fact(SecretMasking::Off, off), "off");
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
