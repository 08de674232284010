//! The decided secret masks of one workspace, cached beside its path index (see
//! [`crate::masks`] for how they are decided): the grouping of a listing by decision signature
//! and the mask sets decided for each caller, keyed by policy set and listing generation.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

/// Decided mask sets kept per workspace (one per caller identity, for the current listing).
const MASK_SETS_KEPT: usize = 8;

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
pub(crate) struct Grouped {
    /// Slot of each listing entry.
    pub(crate) slots: Vec<u32>,
    /// A representative entry of each slot.
    pub(crate) reps: Vec<u32>,
    /// Entries (indexes) of non-directories sharing an inode, only groups of two or more.
    pub(crate) aliases: Vec<Vec<u32>>,
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

    pub(crate) fn grouped(&self, sha: &str, generation: u64) -> Option<Arc<Grouped>> {
        let c = self.lock();
        c.grouped
            .as_ref()
            .filter(|(s, g, _)| s == sha && *g == generation)
            .map(|(_, _, grouped)| Arc::clone(grouped))
    }

    pub(crate) fn put_grouped(&self, sha: &str, generation: u64, grouped: Arc<Grouped>) {
        self.lock().grouped = Some((sha.to_string(), generation, grouped));
    }

    pub(crate) fn set(&self, key: &str) -> Option<Arc<Vec<Mask>>> {
        let c = self.lock();
        c.sets
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, m)| Arc::clone(m))
    }

    /// The most recently decided set and its key (for tests).
    #[cfg(test)]
    pub(crate) fn newest_set(&self) -> Option<(String, Arc<Vec<Mask>>)> {
        self.lock()
            .sets
            .front()
            .map(|(k, m)| (k.clone(), Arc::clone(m)))
    }

    pub(crate) fn put_set(&self, key: String, masks: Arc<Vec<Mask>>) {
        let mut c = self.lock();
        c.sets.retain(|(k, _)| *k != key);
        c.sets.push_front((key, masks));
        c.sets.truncate(MASK_SETS_KEPT);
    }
}
