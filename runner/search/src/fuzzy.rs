//! Fuzzy ranking of paths with `nucleo-matcher` (the matcher of the helix editor), configured
//! for paths: a match at the start of a component scores higher.
//!
//! The query is split on whitespace; every word must match (fuzzily, case-insensitive unless the
//! word has an upper-case letter). No other syntax is interpreted.

use nucleo_matcher::pattern::{AtomKind, CaseMatching, Normalization, Pattern};
use nucleo_matcher::{Config, Matcher, Utf32Str};
use std::cmp::Reverse;

/// A compiled fuzzy query.
#[derive(Debug)]
pub struct FuzzyQuery {
    pattern: Pattern,
}

/// One ranked path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ranked {
    /// The caller's id of the path.
    pub id: usize,
    /// Higher is better.
    pub score: u32,
    /// Matched character positions (Unicode scalar values, 0-based), sorted.
    pub indices: Vec<u32>,
}

fn matcher() -> Matcher {
    Matcher::new(Config::DEFAULT.match_paths())
}

impl FuzzyQuery {
    /// Compiles `query`. An empty (or all-whitespace) query matches nothing.
    pub fn new(query: &str) -> FuzzyQuery {
        FuzzyQuery {
            pattern: Pattern::new(
                query,
                CaseMatching::Smart,
                Normalization::Smart,
                AtomKind::Fuzzy,
            ),
        }
    }

    /// True when the query has no word.
    pub fn is_empty(&self) -> bool {
        self.pattern.atoms.is_empty()
    }

    /// Whether `path` matches.
    pub fn matches(&self, m: &mut Scorer, path: &str) -> bool {
        !self.is_empty()
            && self
                .pattern
                .score(Utf32Str::new(path, &mut m.buf), &mut m.matcher)
                .is_some()
    }

    /// The best `limit` of `candidates` (`(id, path)`), best first; ties go to the shorter path,
    /// then to the smaller path in byte order, so the ranking is deterministic.
    pub fn rank<'a>(
        &self,
        candidates: impl IntoIterator<Item = (usize, &'a str)>,
        limit: usize,
    ) -> Vec<Ranked> {
        if self.is_empty() || limit == 0 {
            return Vec::new();
        }
        let candidates: Vec<(usize, &'a str)> = candidates.into_iter().collect();
        let score_all = |chunk: &[(usize, &'a str)]| {
            let mut m = Scorer::new();
            let mut hits: Vec<(u32, &'a str, usize)> = Vec::new();
            for &(id, path) in chunk {
                if let Some(score) = self
                    .pattern
                    .score(Utf32Str::new(path, &mut m.buf), &mut m.matcher)
                {
                    hits.push((score, path, id));
                }
            }
            hits
        };
        // Large lists are scored on every core; the ranking below is the same either way.
        let threads = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
            .min(4);
        let mut hits: Vec<(u32, &'a str, usize)> = if threads > 1 && candidates.len() >= 8192 {
            let size = candidates.len().div_ceil(threads);
            std::thread::scope(|s| {
                let handles: Vec<_> = candidates
                    .chunks(size)
                    .map(|chunk| s.spawn(move || score_all(chunk)))
                    .collect();
                handles
                    .into_iter()
                    .flat_map(|h| h.join().unwrap_or_default())
                    .collect()
            })
        } else {
            score_all(&candidates)
        };
        let mut m = Scorer::new();
        let order = |a: &(u32, &str, usize)| (Reverse(a.0), a.1.len(), a.1.to_owned());
        if hits.len() > limit {
            hits.select_nth_unstable_by(limit, |a, b| {
                (Reverse(a.0), a.1.len(), a.1).cmp(&(Reverse(b.0), b.1.len(), b.1))
            });
            hits.truncate(limit);
        }
        hits.sort_by_cached_key(order);
        hits.into_iter()
            .map(|(score, path, id)| {
                let mut indices = Vec::new();
                let _ = self.pattern.indices(
                    Utf32Str::new(path, &mut m.buf),
                    &mut m.matcher,
                    &mut indices,
                );
                indices.sort_unstable();
                indices.dedup();
                Ranked { id, score, indices }
            })
            .collect()
    }
}

/// Reusable matcher state for [`FuzzyQuery::matches`].
#[derive(Debug)]
pub struct Scorer {
    matcher: Matcher,
    buf: Vec<char>,
}

impl Scorer {
    /// Fresh state.
    pub fn new() -> Scorer {
        Scorer {
            matcher: matcher(),
            buf: Vec::new(),
        }
    }
}

impl Default for Scorer {
    fn default() -> Scorer {
        Scorer::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_component_starts_first_with_indices() {
        let paths = [
            "src/engine/gateway.rs",
            "docs/gate_way_notes.md",
            "src/grep/agent_way.rs",
            "README.md",
        ];
        let q = FuzzyQuery::new("gateway");
        let ranked = q.rank(paths.iter().copied().enumerate(), 10);
        assert_eq!(ranked.first().map(|r| r.id), Some(0));
        assert!(ranked.iter().all(|r| r.id != 3));
        let best = &ranked[0];
        let chars: Vec<char> = paths[0].chars().collect();
        let picked: String = best.indices.iter().map(|&i| chars[i as usize]).collect();
        assert_eq!(picked, "gateway");
        assert!(ranked.windows(2).all(|w| w[0].score >= w[1].score));
    }

    #[test]
    fn every_word_must_match_and_limit_applies() {
        let paths = ["a/main.rs", "b/main.py", "c/lib.rs"];
        let q = FuzzyQuery::new("main rs");
        let ids: Vec<usize> = q
            .rank(paths.iter().copied().enumerate(), 10)
            .iter()
            .map(|r| r.id)
            .collect();
        assert_eq!(ids, vec![0]);
        let q = FuzzyQuery::new("rs");
        assert_eq!(q.rank(paths.iter().copied().enumerate(), 1).len(), 1);
        assert!(
            FuzzyQuery::new("   ")
                .rank(paths.iter().copied().enumerate(), 5)
                .is_empty()
        );
    }

    #[test]
    fn large_lists_rank_the_same_as_small_ones() {
        let paths: Vec<String> = (0..20_000)
            .map(|i| format!("d{}/file_{i}.rs", i % 97))
            .collect();
        let q = FuzzyQuery::new("d42 fil 7");
        let all = q.rank(paths.iter().map(String::as_str).enumerate(), 25);
        let mut one_by_one: Vec<Ranked> = Vec::new();
        for chunk in paths.chunks(5000).enumerate() {
            let base = chunk.0 * 5000;
            one_by_one.extend(
                q.rank(
                    chunk
                        .1
                        .iter()
                        .map(String::as_str)
                        .enumerate()
                        .map(|(i, p)| (base + i, p)),
                    25,
                ),
            );
        }
        one_by_one.sort_by(|a, b| {
            (std::cmp::Reverse(a.score), paths[a.id].len(), &paths[a.id]).cmp(&(
                std::cmp::Reverse(b.score),
                paths[b.id].len(),
                &paths[b.id],
            ))
        });
        one_by_one.truncate(25);
        assert_eq!(all, one_by_one);
    }

    #[test]
    fn ties_are_deterministic() {
        let paths = ["z/ab.rs", "y/ab.rs", "x/ab.rs"];
        let q = FuzzyQuery::new("ab");
        let ids: Vec<usize> = q
            .rank(paths.iter().copied().enumerate(), 10)
            .iter()
            .map(|r| r.id)
            .collect();
        assert_eq!(ids, vec![2, 1, 0]);
        let mut s = Scorer::new();
        assert!(q.matches(&mut s, "q/ab"));
        assert!(!q.matches(&mut s, "q/b"));
    }
}
