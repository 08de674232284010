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
use crate::facts::SandboxFacts;
use crate::index::Listing;
use crate::mask_cache::{Grouped, Mask};
use crate::policy::decide::Decision;
use crate::policy::signature::SignaturePlan;
use codespace_runner_fs::Kind;
use std::collections::{HashMap, HashSet};

/// Most paths one command may have masked (each is one mount in its namespace).
pub const MAX_MASKS: usize = codespace_runner_sandbox::MAX_MASKS;

/// Candidate requests decided on the async worker (through the decision cache); more are decided
/// on the blocking pool.
pub(crate) const INLINE_DECISIONS: usize = 256;

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

pub(crate) fn refuse(msg: impl std::fmt::Display) -> ToolError {
    ToolError::new(
        ErrorCode::ProcessSpawnFailed,
        format!("secret masking: {msg}"),
    )
}

/// Fails closed on a listing that does not show every path of the workspace.
pub(crate) fn check_complete(listing: &Listing, max_entries: usize) -> Result<(), ToolError> {
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
pub(crate) fn group(
    listing: &Listing,
    plan: &SignaturePlan,
    server_owned: &dyn Fn(&str) -> bool,
) -> Grouped {
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
pub(crate) fn select(listing: &Listing, g: &Grouped, d: &Decision) -> Vec<Mask> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::MaskingFact;

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
