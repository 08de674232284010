//! What is cached per listing generation: the decision-signature groups of the entries, the
//! compiled ignore rules, and a few derived `find` listings (so paging reads a cached list).

use codespace_runner_fs::{Kind, RelPath, Root};
use codespace_runner_search::{IgnoreFile, IgnoreFileKind, IgnoreRules};
use std::collections::HashMap;
use std::io::Read;
use std::sync::Arc;

use super::{Derived, Groups, Listing, PathIndex, lock};
use crate::policy::signature::SignaturePlan;
use crate::request::WorkspaceFacts;

/// Derived listings kept per workspace.
const DERIVED_KEPT: usize = 8;
/// Paths stat'ed for link counts on one thread; more are split over a few.
const PARALLEL_STAT_FROM: usize = 4096;
/// Largest ignore file read (bytes); the rest of a longer one is ignored.
const MAX_IGNORE_FILE_BYTES: u64 = 1024 * 1024;

impl PathIndex {
    /// The decision-signature groups of `listing` under the plan of policy set `sha`.
    pub(crate) fn groups(
        &self,
        listing: &Listing,
        sha: &str,
        plan: &SignaturePlan,
        facts: &WorkspaceFacts,
    ) -> Arc<Groups> {
        {
            let c = lock(&self.caches);
            if let Some((s, g, groups)) = &c.groups
                && s == sha
                && *g == listing.generation
            {
                return Arc::clone(groups);
            }
        }
        let mut of_entry = Vec::with_capacity(listing.entries.len());
        let mut reps: Vec<u32> = Vec::new();
        let mut rep_links: Vec<i64> = Vec::new();
        let mut by_key: HashMap<String, u32> = HashMap::new();
        // When the policy set reads `resource.links`, an entry is listed iff a `read` of it (with
        // its real link count) is allowed: one no-follow stat per file.
        let uses_links = plan.uses_links();
        // One no-follow stat per file, each directory opened once for its files (not once per
        // file): 0 when a file is gone or cannot be examined, 1 for directories.
        let link_counts: Vec<i64> = if uses_links {
            let rels: Vec<Option<RelPath>> = listing
                .entries
                .iter()
                .map(|e| {
                    if e.kind == Kind::Dir {
                        None
                    } else {
                        RelPath::parse(&e.path).ok()
                    }
                })
                .collect();
            // What each path is and its link count (`None`: gone or not examinable).
            let metas: Vec<Option<(Kind, u64)>> = match (&self.root, &self.runner) {
                (Some(root), _) => Self::stat_in_parallel(root, &rels)
                    .into_iter()
                    .map(|m| m.ok().flatten().map(|m| (m.kind, m.links)))
                    .collect(),
                (None, Some(files)) => rels
                    .iter()
                    .flatten()
                    .map(|r| files.kind_and_links(r.as_str()).ok().flatten())
                    .collect(),
                (None, None) => Vec::new(),
            };
            let mut metas = metas.into_iter();
            listing
                .entries
                .iter()
                .zip(&rels)
                .map(|(e, rel)| match (e.kind, rel) {
                    (Kind::Dir, _) => 1,
                    (_, None) => 0,
                    (_, Some(_)) => metas
                        .next()
                        .flatten()
                        .map_or(0, |(kind, links)| crate::links::links_value(kind, links)),
                })
                .collect()
        } else {
            Vec::new()
        };
        for (i, e) in listing.entries.iter().enumerate() {
            let links = link_counts.get(i).copied().unwrap_or(1);
            let i = u32::try_from(i).unwrap_or(u32::MAX);
            let group = match plan.key(&e.path, facts.is_server_owned(&e.path), links) {
                Some(key) => *by_key.entry(key).or_insert_with(|| {
                    reps.push(i);
                    rep_links.push(links);
                    u32::try_from(reps.len() - 1).unwrap_or(u32::MAX)
                }),
                None => {
                    reps.push(i);
                    rep_links.push(links);
                    u32::try_from(reps.len() - 1).unwrap_or(u32::MAX)
                }
            };
            of_entry.push(group);
        }
        let groups = Arc::new(Groups {
            of_entry,
            reps,
            rep_links,
        });
        lock(&self.caches).groups =
            Some((sha.to_string(), listing.generation, Arc::clone(&groups)));
        groups
    }

    /// A no-follow stat of every path of `rels` (in order), split in contiguous runs over a few
    /// threads: a sorted listing keeps a directory's files together, so each thread opens each
    /// of its directories once ([`codespace_runner_fs::Root::stat_many`]).
    fn stat_in_parallel(
        root: &Root,
        rels: &[Option<RelPath>],
    ) -> Vec<Result<Option<codespace_runner_fs::Meta>, codespace_runner_fs::FsError>> {
        let paths: Vec<&RelPath> = rels.iter().flatten().collect();
        let threads = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
            .clamp(1, 4);
        if threads == 1 || paths.len() < PARALLEL_STAT_FROM {
            return root.stat_many(paths);
        }
        let chunk = paths.len().div_ceil(threads);
        std::thread::scope(|s| {
            let handles: Vec<_> = paths
                .chunks(chunk)
                .map(|part| s.spawn(move || root.stat_many(part.iter().copied())))
                .collect();
            let mut out = Vec::with_capacity(paths.len());
            for (h, part) in handles.into_iter().zip(paths.chunks(chunk)) {
                match h.join() {
                    Ok(metas) => out.extend(metas),
                    // A thread that died answers "cannot be examined" for its paths (links 0:
                    // a `read` of such a path is decided as of a missing file).
                    Err(_) => out.extend(part.iter().map(|p| {
                        Err(codespace_runner_fs::FsError::NotFound {
                            path: p.as_str().to_string(),
                        })
                    })),
                }
            }
            out
        })
    }

    /// The ignore rules of `listing` (its ignore files read beneath the root, no symlink followed).
    pub(crate) fn ignore_rules(&self, listing: &Listing) -> Arc<IgnoreRules> {
        {
            let c = lock(&self.caches);
            if let Some((g, rules)) = &c.ignore
                && *g == listing.generation
            {
                return Arc::clone(rules);
            }
        }
        let mut files = Vec::new();
        let mut git_dirs = Vec::new();
        for e in &listing.entries {
            let name = e.path.rsplit('/').next().unwrap_or(&e.path);
            if name == ".git" {
                git_dirs.push(
                    e.path
                        .rsplit_once('/')
                        .map_or(String::new(), |(d, _)| d.to_string()),
                );
            }
            if e.kind != Kind::File {
                continue;
            }
            let Some((kind, dir)) = IgnoreFileKind::classify(&e.path) else {
                continue;
            };
            let Ok(rel) = RelPath::parse(&e.path) else {
                continue;
            };
            let content = match (&self.root, &self.runner) {
                (Some(root), _) => {
                    let Ok((file, _)) = root.open_file(&rel) else {
                        continue;
                    };
                    let mut content = Vec::new();
                    file.take(MAX_IGNORE_FILE_BYTES)
                        .read_to_end(&mut content)
                        .map(|_| content)
                        .ok()
                }
                (None, Some(files)) => files.head(rel.as_str(), MAX_IGNORE_FILE_BYTES),
                (None, None) => None,
            };
            if let Some(content) = content {
                files.push(IgnoreFile {
                    kind,
                    dir: dir.to_string(),
                    content,
                });
            }
        }
        let rules = Arc::new(IgnoreRules::build(&files, git_dirs));
        lock(&self.caches).ignore = Some((listing.generation, Arc::clone(&rules)));
        rules
    }

    /// A cached derived listing.
    pub(crate) fn derived(&self, key: &str) -> Option<Arc<Derived>> {
        let c = lock(&self.caches);
        c.derived
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, d)| Arc::clone(d))
    }

    /// Caches a derived listing.
    pub(crate) fn put_derived(&self, key: String, d: Arc<Derived>) {
        let mut c = lock(&self.caches);
        c.derived.retain(|(k, _)| *k != key);
        c.derived.push_front((key, d));
        c.derived.truncate(DERIVED_KEPT);
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::index;
    use crate::policy::signature::SignaturePlan;
    use crate::request::WorkspaceFacts;

    #[test]
    fn link_counts_stat_ed_in_parallel_runs_match_each_file() {
        // More files than one thread stats, spread over directories, with hard-link aliases at
        // both ends of the listing and in the middle: each file's group carries its own count.
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        for a in 0..50 {
            std::fs::create_dir_all(d.join(format!("d{a:02}"))).unwrap();
            for f in 0..100 {
                std::fs::write(d.join(format!("d{a:02}/f{f:03}")), b"").unwrap();
            }
        }
        for (src, alias) in [
            ("d00/f000", "d00/alias"),
            ("d25/f050", "d49/zz-alias"),
            ("d49/f099", "d12/alias"),
        ] {
            std::fs::hard_link(d.join(src), d.join(alias)).unwrap();
        }
        let ix = index(d);
        let (l, _) = ix.get();
        assert!(l.entries.len() > super::PARALLEL_STAT_FROM);
        // The shipped policies read `resource.links` (base.forbid.hardlinked-files).
        let store =
            crate::policy::PolicyStore::load(crate::policy::PolicySource::Embedded).unwrap();
        let plan = SignaturePlan::analyse(&store.snapshot().set);
        assert!(plan.uses_links());
        let groups = ix.groups(&l, "sha", &plan, &WorkspaceFacts::default());
        for (i, e) in l.entries.iter().enumerate() {
            let g = groups.of_entry[i] as usize;
            let want = if e.kind == codespace_runner_fs::Kind::Dir {
                1
            } else {
                let m = std::fs::symlink_metadata(d.join(&*e.path)).unwrap();
                std::os::unix::fs::MetadataExt::nlink(&m) as i64
            };
            assert_eq!(groups.rep_links[g], want, "{}", e.path);
        }
        assert_eq!(groups.rep_links.iter().filter(|&&n| n == 2).count(), 1);
    }
}
