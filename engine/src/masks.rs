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
//! A listing that cannot see everything fails closed **for the affected paths only**: a directory
//! whose subtree the listing does not hold whole (deeper than the depth cap, unreadable, or
//! holding a name that is not UTF-8: see [`Listing::unlisted`]) is masked whole, as if policy
//! withheld it, and the command runs. A name that is not UTF-8 at the top level (where the
//! directory to mask would be the root) becomes the [`NON_UTF8_TOP_LEVEL`] mask instead: the
//! sandbox helper masks every top-level entry whose name is not UTF-8, found by reading the root
//! itself (`SandboxPlan::mask_non_utf8_top_level`). Only what cannot be narrowed refuses the
//! command: a listing cut by `limits.max_walk_entries` (what is missing is unknown).
//!
//! More masks than one command can carry ([`MAX_MASKS`]) are coalesced into masks of their
//! parent directories ([`coalesce`]): nothing withheld is ever unmasked, and the other files of a
//! coalesced directory are hidden from the command too.

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

/// The path of the mask that stands for every top-level entry whose name is not UTF-8 (a name
/// neither policy nor the plan can carry): it becomes `SandboxPlan::mask_non_utf8_top_level`
/// rather than a path, and counts as one mask.
pub(crate) const NON_UTF8_TOP_LEVEL: &str = "";

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

/// Fails closed on a listing whose missing paths cannot be narrowed to paths to mask: one cut by
/// the entry cap, or (never seen: the walk fails instead) an unreadable root.
pub(crate) fn check_complete(listing: &Listing, max_entries: usize) -> Result<(), ToolError> {
    if listing.capped {
        return Err(refuse(format!(
            "the workspace has more than {max_entries} entries (limits.max_walk_entries), so the \
             paths policy withholds cannot all be found and masked; the command was not started \
             (remove files, raise limits.max_walk_entries, or an operator can set \
             secret_masking: off for this workspace)"
        )));
    }
    if listing
        .unlisted
        .iter()
        .any(|u| u.path.is_empty() && u.why != codespace_runner_fs::UnlistedWhy::NonUtf8Name)
    {
        return Err(refuse(
            "the workspace root could not be listed, so the paths policy withholds cannot be \
             found and masked; the command was not started",
        ));
    }
    Ok(())
}

/// What an operator reads about the directories masked whole because the listing could not hold
/// them (what to remove to see them again), `None` when there are none.
pub(crate) fn unlisted_note(listing: &Listing) -> Option<String> {
    use codespace_runner_fs::UnlistedWhy;
    if listing.unlisted.is_empty() {
        return None;
    }
    let shown: Vec<String> = listing
        .unlisted
        .iter()
        .take(NOTE_PATHS)
        .map(|u| match (u.why, &u.name) {
            (UnlistedWhy::NonUtf8Name, name) if u.path.is_empty() => format!(
                "the top level (holds `{}`, a name that is not UTF-8: every such top-level \
                 entry is masked, not the whole workspace)",
                name.as_deref().unwrap_or("?")
            ),
            (UnlistedWhy::Depth, _) => format!(
                "`{}` (deeper than {} levels)",
                u.path,
                codespace_runner_fs::WalkLimits::default().max_depth
            ),
            (UnlistedWhy::Unreadable, _) => format!("`{}` (cannot be listed)", u.path),
            (UnlistedWhy::NonUtf8Name, Some(name)) => {
                format!("`{}` (holds `{name}`, a name that is not UTF-8)", u.path)
            }
            (UnlistedWhy::NonUtf8Name, None) => {
                format!("`{}` (holds a name that is not UTF-8)", u.path)
            }
        })
        .collect();
    let more = listing.unlisted.len().saturating_sub(NOTE_PATHS);
    Some(format!(
        "secret masking: {} director{} could not be listed whole and {} masked whole for \
         commands: {}{}; remove or rename what makes {} unlistable to see {} again",
        listing.unlisted.len(),
        if listing.unlisted.len() == 1 {
            "y"
        } else {
            "ies"
        },
        if listing.unlisted.len() == 1 {
            "is"
        } else {
            "are"
        },
        shown.join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        },
        if listing.unlisted.len() == 1 {
            "it"
        } else {
            "them"
        },
        if listing.unlisted.len() == 1 {
            "it"
        } else {
            "them"
        },
    ))
}

/// Paths a note names before it says "and N more".
const NOTE_PATHS: usize = 10;

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
    // Directories the listing could not hold whole are masked whole (nothing beneath them needs
    // a mask of its own).
    let mut masked_dirs: HashSet<&str> = listing
        .unlisted
        .iter()
        .filter(|u| !u.path.is_empty())
        .map(|u| u.path.as_str())
        .collect();
    let unlisted = masked_dirs.clone();
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
    let mut masks: Vec<Mask> = chosen
        .into_iter()
        .filter_map(|(i, policy_ids)| {
            entries.get(i).map(|e| Mask {
                path: e.path.to_string(),
                policy_ids,
            })
        })
        .collect();
    let have: HashSet<String> = masks.iter().map(|m| m.path.clone()).collect();
    for dir in unlisted {
        if !have.contains(dir) && !beneath_any(dir, &masked_dirs) {
            masks.push(Mask {
                path: dir.to_string(),
                policy_ids: Vec::new(),
            });
        }
    }
    if listing
        .unlisted
        .iter()
        .any(|u| u.path.is_empty() && u.why == codespace_runner_fs::UnlistedWhy::NonUtf8Name)
    {
        masks.push(Mask {
            path: NON_UTF8_TOP_LEVEL.to_string(),
            policy_ids: Vec::new(),
        });
    }
    masks.sort_by(|a, b| a.path.cmp(&b.path));
    masks
}

/// Number of path components.
fn depth(path: &str) -> usize {
    path.split('/').count()
}

/// Fits `masks` (none beneath another) into `max` by replacing masks with a mask of a directory
/// above them, deepest directories first (they hide the least), the one holding the most masks
/// first among equals: every path masked before is masked after (itself or a directory above
/// it), and a coalesced directory hides its other entries too. Returns the masks and the
/// directories that replaced masks beneath them; `Err` with the count left when even one mask
/// per top-level entry is too many (the root cannot be masked).
pub(crate) fn coalesce(masks: Vec<Mask>, max: usize) -> Result<(Vec<Mask>, Vec<String>), usize> {
    use std::collections::BTreeMap;
    if masks.len() <= max {
        return Ok((masks, Vec::new()));
    }
    let mut cur: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for m in masks {
        cur.entry(m.path).or_default().extend(m.policy_ids);
    }
    // Every directory above a mask, with how many masks lie beneath it.
    let mut beneath: HashMap<&str, usize> = HashMap::new();
    for path in cur.keys() {
        let mut p = path.as_str();
        while let Some((parent, _)) = p.rsplit_once('/') {
            *beneath.entry(parent).or_default() += 1;
            p = parent;
        }
    }
    let mut candidates: Vec<(usize, usize, String)> = beneath
        .into_iter()
        .filter(|(_, n)| *n >= 2)
        .map(|(dir, n)| (depth(dir), n, dir.to_string()))
        .collect();
    candidates.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)).then(a.2.cmp(&b.2)));
    let mut widened: Vec<String> = Vec::new();
    for (_, _, dir) in candidates {
        if cur.len() <= max {
            break;
        }
        let kids: Vec<String> = cur
            .range(format!("{dir}/")..format!("{dir}0"))
            .map(|(k, _)| k.clone())
            .collect();
        if kids.len() < 2 {
            continue;
        }
        let mut ids: Vec<String> = Vec::new();
        for k in &kids {
            ids.extend(cur.remove(k).unwrap_or_default());
        }
        ids.sort();
        ids.dedup();
        cur.insert(dir.clone(), ids);
        widened.retain(|w| !w.starts_with(&format!("{dir}/")));
        widened.push(dir);
    }
    if cur.len() > max {
        return Err(cur.len());
    }
    widened.sort();
    let masks = cur
        .into_iter()
        .map(|(path, policy_ids)| Mask { path, policy_ids })
        .collect();
    Ok((masks, widened))
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

    fn m(p: &str) -> Mask {
        Mask {
            path: p.to_string(),
            policy_ids: vec![format!("id-{p}")],
        }
    }

    /// Every path of `before` is masked by `after` (itself or a directory above it).
    fn still_masked(before: &[Mask], after: &[Mask]) -> bool {
        let dirs: HashSet<&str> = after.iter().map(|m| m.path.as_str()).collect();
        before
            .iter()
            .all(|b| dirs.contains(b.path.as_str()) || beneath_any(&b.path, &dirs))
    }

    #[test]
    fn coalescing_keeps_every_mask_and_fits_the_limit() {
        let few = vec![m("a"), m("b/c")];
        assert_eq!(coalesce(few.clone(), 2).unwrap(), (few, Vec::new()));
        // 30 files in one directory, 5 in another, 3 scattered: limit 10.
        let mut before: Vec<Mask> = (0..30).map(|i| m(&format!("logs/x/f{i:02}"))).collect();
        before.extend((0..5).map(|i| m(&format!("src/e{i}"))));
        before.extend([m("top"), m("deep/a/b/c/d"), m("deep/a/q/r")]);
        before.sort_by(|a, b| a.path.cmp(&b.path));
        let (after, widened) = coalesce(before.clone(), 10).unwrap();
        assert!(after.len() <= 10, "{after:?}");
        assert!(still_masked(&before, &after), "{after:?}");
        assert!(widened.contains(&"logs/x".to_string()), "{widened:?}");
        // The deepest, biggest group went first; the rest stay as they were.
        assert!(after.iter().any(|x| x.path == "src/e0"), "{after:?}");
        assert!(after.iter().any(|x| x.path == "deep/a/b/c/d"), "{after:?}");
        let logs = after.iter().find(|x| x.path == "logs/x").unwrap();
        assert_eq!(
            logs.policy_ids.len(),
            30,
            "the policies of every file it replaces"
        );
        // Only top-level entries left and still too many: refused.
        let tops: Vec<Mask> = (0..5).map(|i| m(&format!("t{i}"))).collect();
        assert_eq!(coalesce(tops, 4), Err(5));
        // Masks in sibling directories meet in their common parent.
        let spread: Vec<Mask> = (0..8).map(|i| m(&format!("r/s{i}/only"))).collect();
        let (after, widened) = coalesce(spread.clone(), 1).unwrap();
        assert_eq!(
            after.iter().map(|x| x.path.as_str()).collect::<Vec<_>>(),
            ["r"]
        );
        assert_eq!(widened, ["r"]);
        assert!(still_masked(&spread, &after));
        // Deep masks that need no coalescing are left alone.
        assert!(after.len() <= 1);
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
