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
/// Entries keyed on one thread; more are split over a few.
const PARALLEL_KEY_FROM: usize = 4096;

/// The groups of one run of entries, numbered within the run.
struct RunGroups {
    /// Run-local group of each entry of the run.
    of_entry: Vec<u32>,
    /// Per run-local group: its first entry (index in the listing) and its key (`None`: an
    /// entry the plan cannot key, a group of its own).
    firsts: Vec<(usize, Option<String>)>,
}
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
            // A count read with the listing is used as it is (a change of it is an event that
            // re-reads the path); only the others are stat'ed here.
            let rels: Vec<Option<RelPath>> = listing
                .entries
                .iter()
                .map(|e| {
                    if e.kind == Kind::Dir || e.links.is_some() {
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
                    (kind, None) => e
                        .links
                        .map_or(0, |links| crate::links::links_value(kind, links)),
                    (_, Some(_)) => metas
                        .next()
                        .flatten()
                        .map_or(0, |(kind, links)| crate::links::links_value(kind, links)),
                })
                .collect()
        } else {
            Vec::new()
        };
        // Keying is the costly part (every path against the plan's patterns): contiguous runs
        // of entries are keyed on a few threads, each grouping its own run, then the runs'
        // groups are merged in order, so every group's representative is its first entry, as a
        // single pass would choose.
        let n = listing.entries.len();
        let threads = if n < PARALLEL_KEY_FROM {
            1
        } else {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
                .clamp(1, 4)
        };
        let chunk = n.div_ceil(threads).max(1);
        let key_run_fn = |lo: usize| -> RunGroups {
            let hi = (lo + chunk).min(n);
            let mut run = RunGroups {
                of_entry: Vec::with_capacity(hi - lo),
                firsts: Vec::new(),
            };
            let mut by_key: HashMap<String, u32> = HashMap::new();
            let mut key = String::with_capacity(64);
            for (i, e) in listing.entries.iter().enumerate().take(hi).skip(lo) {
                let links = link_counts.get(i).copied().unwrap_or(1);
                let group =
                    if plan.key_into(&mut key, &e.path, facts.is_server_owned(&e.path), links) {
                        match by_key.get(key.as_str()) {
                            Some(&g) => g,
                            None => {
                                let g = u32::try_from(run.firsts.len()).unwrap_or(u32::MAX);
                                by_key.insert(key.clone(), g);
                                run.firsts.push((i, Some(key.clone())));
                                g
                            }
                        }
                    } else {
                        run.firsts.push((i, None));
                        u32::try_from(run.firsts.len() - 1).unwrap_or(u32::MAX)
                    };
                run.of_entry.push(group);
            }
            run
        };
        let key_run = &key_run_fn;
        let starts: Vec<usize> = (0..n).step_by(chunk).collect();
        let runs: Vec<RunGroups> = if starts.len() > 1 {
            std::thread::scope(|s| {
                let handles: Vec<_> = starts
                    .iter()
                    .map(|&lo| s.spawn(move || key_run(lo)))
                    .collect();
                starts
                    .iter()
                    .zip(handles)
                    .map(|(&lo, h)| h.join().unwrap_or_else(|_| key_run(lo)))
                    .collect()
            })
        } else {
            starts.iter().map(|&lo| key_run(lo)).collect()
        };
        for run in runs {
            let mut global: Vec<u32> = Vec::with_capacity(run.firsts.len());
            for (i, key) in run.firsts {
                let links = link_counts.get(i).copied().unwrap_or(1);
                let i32_ = u32::try_from(i).unwrap_or(u32::MAX);
                let mut fresh = || {
                    reps.push(i32_);
                    rep_links.push(links);
                    u32::try_from(reps.len() - 1).unwrap_or(u32::MAX)
                };
                let g = match key {
                    Some(key) => *by_key.entry(key).or_insert_with(fresh),
                    None => fresh(),
                };
                global.push(g);
            }
            of_entry.extend(
                run.of_entry
                    .iter()
                    .map(|&g| global.get(g as usize).copied().unwrap_or(u32::MAX)),
            );
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
        super::in_runs(
            &paths,
            PARALLEL_STAT_FROM,
            |part| root.stat_many(part.iter().copied()),
            // A thread that died answers "cannot be examined" for its paths (links 0: a `read`
            // of such a path is decided as of a missing file).
            |p| {
                Err(codespace_runner_fs::FsError::NotFound {
                    path: p.as_str().to_string(),
                })
            },
        )
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

    #[test]
    fn groups_keyed_on_several_threads_equal_one_pass() {
        // More entries than one thread keys, with keys that recur across the runs: every
        // group's representative is the first entry of its key, and entries share a group iff
        // they share a key, as one pass in order gives.
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        for a in 0..40 {
            std::fs::create_dir_all(d.join(format!("d{a:02}"))).unwrap();
            for f in 0..120 {
                let name = match f % 4 {
                    0 => format!("f{f:03}.rs"),
                    1 => format!(".env.{f}"),
                    2 => format!("k{f}.pem"),
                    _ => format!("f{f:03}"),
                };
                std::fs::write(d.join(format!("d{a:02}/{name}")), b"").unwrap();
            }
        }
        std::fs::create_dir_all(d.join("d39/.git/hooks")).unwrap();
        std::fs::write(d.join("d39/.git/hooks/pre-commit"), b"").unwrap();
        let ix = index(d);
        let (l, _) = ix.get();
        assert!(l.entries.len() > super::PARALLEL_KEY_FROM);
        let store =
            crate::policy::PolicyStore::load(crate::policy::PolicySource::Embedded).unwrap();
        let plan = SignaturePlan::analyse(&store.snapshot().set);
        let facts = WorkspaceFacts::default();
        let groups = ix.groups(&l, "sha", &plan, &facts);
        let mut first: std::collections::HashMap<String, u32> = Default::default();
        let mut want_reps = Vec::new();
        for (i, e) in l.entries.iter().enumerate() {
            // No file here has a second name: every entry's `resource.links` is 1.
            let key = plan
                .key(&e.path, facts.is_server_owned(&e.path), 1)
                .unwrap();
            let g = *first.entry(key).or_insert_with(|| {
                want_reps.push(i as u32);
                (want_reps.len() - 1) as u32
            });
            assert_eq!(groups.of_entry[i], g, "{}", e.path);
        }
        assert_eq!(groups.reps, want_reps);
        assert!(groups.reps.len() > 3, "{} groups", groups.reps.len());
    }

    #[test]
    fn link_counts_read_by_the_walk_follow_a_new_name_of_the_inode() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        std::fs::create_dir_all(d.join("x")).unwrap();
        std::fs::write(d.join("a"), b"").unwrap();
        std::fs::write(d.join("x/b"), b"").unwrap();
        let ix = index(d);
        ix.want_links(true);
        let (l, _) = ix.get();
        let links =
            |l: &super::Listing, p: &str| l.entries.iter().find(|e| &*e.path == p).unwrap().links;
        assert_eq!(links(&l, "a"), Some(1), "read by the walk");
        assert_eq!(links(&l, "x"), None, "not for a directory");
        // A second name in another directory: the first name's count moves too.
        std::fs::hard_link(d.join("a"), d.join("x/c")).unwrap();
        let (l, why) = ix.get();
        assert_eq!(why, None);
        assert_eq!(links(&l, "a"), Some(2));
        assert_eq!(links(&l, "x/c"), Some(2));
        let store =
            crate::policy::PolicyStore::load(crate::policy::PolicySource::Embedded).unwrap();
        let plan = SignaturePlan::analyse(&store.snapshot().set);
        let groups = ix.groups(&l, "sha", &plan, &WorkspaceFacts::default());
        let at = l.entries.iter().position(|e| &*e.path == "a").unwrap();
        assert_eq!(groups.rep_links[groups.of_entry[at] as usize], 2);
        // And back when it goes.
        std::fs::remove_file(d.join("x/c")).unwrap();
        let (l, _) = ix.get();
        assert_eq!(links(&l, "a"), Some(1));
    }
}
