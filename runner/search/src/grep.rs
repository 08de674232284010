//! Line search over a list of files with ripgrep's crates: `grep-regex` compiles the pattern
//! (literal unless asked otherwise, with bounded program and DFA sizes), `grep-searcher` reads each
//! file line by line, detects binary data and reports matched and context lines to our sink.
//!
//! Files are searched in parallel, but the answer is a pure function of the file list and the file
//! contents: matches are numbered in (file order, line) order, a page is the window
//! `[offset, offset + max_matches)` of that sequence, and every count the outcome carries covers
//! exactly the files up to the one that completed the page.

use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkMatch};
use std::collections::{BTreeMap, VecDeque};
use std::fs::File;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Longest pattern accepted, in bytes.
pub const MAX_PATTERN_BYTES: usize = 4096;
/// Compiled regex program size limit (bytes).
pub const REGEX_SIZE_LIMIT: usize = 4 * 1024 * 1024;
/// Lazy DFA cache limit per searching thread (bytes).
pub const DFA_SIZE_LIMIT: usize = 8 * 1024 * 1024;
/// Deepest nesting of groups/repetitions in a regex.
pub const NEST_LIMIT: u32 = 64;
/// Most context lines before and after a match.
pub const MAX_CONTEXT_LINES: usize = 10;

/// How to compile a pattern.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PatternOptions {
    /// Treat the pattern as a regular expression (Rust `regex` syntax); otherwise it is a literal.
    pub regex: bool,
    /// Match without regard to case.
    pub case_insensitive: bool,
    /// Lines of context before and after each match (at most [`MAX_CONTEXT_LINES`]).
    pub context_lines: usize,
}

/// Why a pattern was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    /// Longer than [`MAX_PATTERN_BYTES`].
    #[error("pattern is {0} bytes; the limit is {MAX_PATTERN_BYTES}")]
    TooLong(usize),
    /// More context lines than [`MAX_CONTEXT_LINES`].
    #[error("context_lines is {0}; the limit is {MAX_CONTEXT_LINES}")]
    TooMuchContext(usize),
    /// The regex does not parse, or compiles past the size limits.
    #[error("{0}")]
    Invalid(String),
}

/// A compiled, bounded pattern.
#[derive(Debug, Clone)]
pub struct Pattern {
    matcher: RegexMatcher,
    context: usize,
}

impl Pattern {
    /// Compiles `pattern`. A regex over the size limits is refused here, before any file is read.
    pub fn new(pattern: &str, opts: &PatternOptions) -> Result<Pattern, PatternError> {
        if pattern.len() > MAX_PATTERN_BYTES {
            return Err(PatternError::TooLong(pattern.len()));
        }
        if opts.context_lines > MAX_CONTEXT_LINES {
            return Err(PatternError::TooMuchContext(opts.context_lines));
        }
        let matcher = RegexMatcherBuilder::new()
            .fixed_strings(!opts.regex)
            .case_insensitive(opts.case_insensitive)
            .line_terminator(Some(b'\n'))
            .size_limit(REGEX_SIZE_LIMIT)
            .dfa_size_limit(DFA_SIZE_LIMIT)
            .nest_limit(NEST_LIMIT)
            .build(pattern)
            .map_err(|e| PatternError::Invalid(e.to_string()))?;
        Ok(Pattern {
            matcher,
            context: opts.context_lines,
        })
    }

    fn searcher(&self, limits: &GrepLimits) -> Searcher {
        SearcherBuilder::new()
            .line_number(true)
            .before_context(self.context)
            .after_context(self.context)
            .binary_detection(BinaryDetection::quit(0))
            .heap_limit(Some(limits.heap_limit))
            .build()
    }
}

/// Which matches a call wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Matches to skip (in path, then line order).
    pub offset: u64,
    /// Most matches to return.
    pub max_matches: u64,
}

/// Caps of one search.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrepLimits {
    /// Files larger than this are not searched (counted in [`Skipped::too_large`]).
    pub max_file_bytes: u64,
    /// Each returned line (match or context) is cut to this many characters.
    pub max_line_chars: usize,
    /// Bytes of line text (matches and context) one page may carry; the page ends early past it.
    pub max_output_bytes: usize,
    /// Largest line buffer the searcher may grow to (bytes); a longer line makes the file unreadable.
    pub heap_limit: usize,
    /// Searching threads (at least 1).
    pub threads: usize,
}

impl Default for GrepLimits {
    fn default() -> GrepLimits {
        GrepLimits {
            max_file_bytes: 32 * 1024 * 1024,
            max_line_chars: 500,
            max_output_bytes: 4 * 1024 * 1024,
            heap_limit: 64 * 1024 * 1024,
            threads: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
                .min(8),
        }
    }
}

/// Why the opener could not hand over a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenError {
    /// It is gone, is no longer a regular file, or cannot be opened (counted as unreadable).
    Unreadable,
}

/// Files passed over, by reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Skipped {
    /// Binary files (a NUL byte).
    pub binary: u64,
    /// Files over [`GrepLimits::max_file_bytes`].
    pub too_large: u64,
    /// Files that could not be opened or read.
    pub unreadable: u64,
}

/// One matching line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineMatch {
    /// Index of the file in the list given to [`search`].
    pub file: usize,
    /// 1-based line number.
    pub line_number: u64,
    /// The line (lossy UTF-8, without its terminator, capped).
    pub line: String,
    /// The line was cut to [`GrepLimits::max_line_chars`].
    pub line_truncated: bool,
    /// Up to `context_lines` lines before it.
    pub before: Vec<String>,
    /// Up to `context_lines` lines after it.
    pub after: Vec<String>,
}

/// The result of [`search`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GrepOutcome {
    /// The page's matches, in file order then line order.
    pub matches: Vec<LineMatch>,
    /// `(file index, total matches in that file)` for each file with a match on this page.
    pub file_counts: Vec<(usize, u64)>,
    /// Files skipped, among the files searched up to the end of this page.
    pub skipped: Skipped,
    /// More matches follow this page.
    pub truncated: bool,
    /// Where the next page starts (only when `truncated`).
    pub next_offset: Option<u64>,
    /// Files whose outcome this page accounts for (a prefix of the list).
    pub files_examined: usize,
}

/// What searching one file produced.
#[derive(Debug, Default)]
struct FileResult {
    /// Matching lines in the file (0 when skipped).
    count: u64,
    /// The first matches of the file (local indices `skip..skip + records.len()`).
    records: Vec<LineMatch>,
    skip: Option<SkipReason>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SkipReason {
    Binary,
    TooLarge,
    Unreadable,
}

/// Collects matched lines with their context; keeps `keep` records after skipping `skip`
/// matches and counts the rest.
struct CollectSink {
    file: usize,
    skip: u64,
    keep: usize,
    ctx: usize,
    line_cap: usize,
    count: u64,
    records: Vec<LineMatch>,
    /// The last `ctx` lines seen (number, text), for before-context.
    recent: VecDeque<(u64, String)>,
    /// Records still collecting after-context.
    open: Vec<usize>,
    binary: bool,
}

/// `bytes` without its line terminator, as capped lossy UTF-8.
fn cap_line(bytes: &[u8], cap: usize) -> (String, bool) {
    let mut b = bytes;
    if let Some(rest) = b.strip_suffix(b"\n") {
        b = rest;
    }
    if let Some(rest) = b.strip_suffix(b"\r") {
        b = rest;
    }
    let window = b.get(..b.len().min(cap.saturating_mul(4))).unwrap_or(b);
    let text = String::from_utf8_lossy(window);
    let mut out = String::with_capacity(text.len().min(cap));
    for (n, c) in text.chars().enumerate() {
        if n == cap {
            return (out, true);
        }
        out.push(c);
    }
    (out, window.len() < b.len())
}

impl CollectSink {
    fn new(file: usize, skip: u64, keep: usize, ctx: usize, line_cap: usize) -> CollectSink {
        CollectSink {
            file,
            skip,
            keep,
            ctx,
            line_cap,
            count: 0,
            records: Vec::new(),
            recent: VecDeque::new(),
            open: Vec::new(),
            binary: false,
        }
    }

    fn line(&mut self, number: u64, bytes: &[u8], is_match: bool) {
        if is_match {
            self.count += 1;
        }
        let keeping = is_match && self.count > self.skip && self.records.len() < self.keep;
        let want_recent = self.ctx > 0 && self.records.len() < self.keep;
        if !keeping && !want_recent && self.open.is_empty() {
            return;
        }
        let (text, truncated) = cap_line(bytes, self.line_cap);
        // After-context of earlier records.
        let ctx = self.ctx as u64;
        let records = &mut self.records;
        self.open.retain(|&i| match records.get_mut(i) {
            Some(r) if number <= r.line_number + ctx && r.after.len() < ctx as usize => {
                r.after.push(text.clone());
                r.after.len() < ctx as usize
            }
            _ => false,
        });
        if keeping {
            let before: Vec<String> = self
                .recent
                .iter()
                .filter(|(n, _)| *n + ctx >= number && *n < number)
                .map(|(_, t)| t.clone())
                .collect();
            self.records.push(LineMatch {
                file: self.file,
                line_number: number,
                line: text.clone(),
                line_truncated: truncated,
                before,
                after: Vec::new(),
            });
            if self.ctx > 0 {
                self.open.push(self.records.len() - 1);
            }
        }
        if self.ctx > 0 {
            self.recent.push_back((number, text));
            while self.recent.len() > self.ctx {
                self.recent.pop_front();
            }
        }
    }

    fn lines(&mut self, first: Option<u64>, bytes: &[u8], is_match: bool) {
        let mut number = first.unwrap_or(0);
        let mut rest = bytes;
        while !rest.is_empty() {
            let end = rest
                .iter()
                .position(|&b| b == b'\n')
                .map_or(rest.len(), |i| i + 1);
            let (line, tail) = rest.split_at(end);
            self.line(number, line, is_match);
            number += 1;
            rest = tail;
        }
    }
}

impl Sink for CollectSink {
    type Error = std::io::Error;

    fn matched(&mut self, _s: &Searcher, m: &SinkMatch<'_>) -> Result<bool, std::io::Error> {
        self.lines(m.line_number(), m.bytes(), true);
        Ok(true)
    }

    fn context(&mut self, _s: &Searcher, c: &SinkContext<'_>) -> Result<bool, std::io::Error> {
        self.lines(c.line_number(), c.bytes(), false);
        Ok(true)
    }

    fn context_break(&mut self, _s: &Searcher) -> Result<bool, std::io::Error> {
        self.recent.clear();
        self.open.clear();
        Ok(true)
    }

    fn binary_data(&mut self, _s: &Searcher, _offset: u64) -> Result<bool, std::io::Error> {
        self.binary = true;
        Ok(false)
    }
}

/// Which matches of one file to record: `skip` are counted but not recorded, then up to `keep` are.
#[derive(Debug, Clone, Copy)]
struct Take {
    skip: u64,
    keep: usize,
}

/// Searches one file.
fn search_one<P, O>(
    pattern: &Pattern,
    searcher: &mut Searcher,
    limits: &GrepLimits,
    (index, item): (usize, &P),
    open: &O,
    take: Take,
) -> FileResult
where
    O: Fn(&P) -> Result<File, OpenError>,
{
    let Take { skip, keep } = take;
    let file = match open(item) {
        Ok(f) => f,
        Err(OpenError::Unreadable) => {
            return FileResult {
                skip: Some(SkipReason::Unreadable),
                ..FileResult::default()
            };
        }
    };
    match file.metadata() {
        Ok(m) if m.len() > limits.max_file_bytes => {
            return FileResult {
                skip: Some(SkipReason::TooLarge),
                ..FileResult::default()
            };
        }
        Ok(m) if m.is_file() => {}
        _ => {
            return FileResult {
                skip: Some(SkipReason::Unreadable),
                ..FileResult::default()
            };
        }
    }
    let mut sink = CollectSink::new(index, skip, keep, pattern.context, limits.max_line_chars);
    match searcher.search_file(&pattern.matcher, &file, &mut sink) {
        Ok(()) if sink.binary => FileResult {
            skip: Some(SkipReason::Binary),
            ..FileResult::default()
        },
        Ok(()) => FileResult {
            count: sink.count,
            records: sink.records,
            skip: None,
        },
        Err(_) => FileResult {
            skip: Some(SkipReason::Unreadable),
            ..FileResult::default()
        },
    }
}

/// The in-order accounting of finished files.
struct Frontier {
    /// Finished files not yet accounted (out of order).
    pending: BTreeMap<usize, FileResult>,
    /// The next file to account.
    next: usize,
    /// Matches in accounted files.
    seen: u64,
    out: GrepOutcome,
    /// Bytes of line text taken so far.
    bytes: usize,
    /// A file whose records did not cover the window: (file index, local skip, keep).
    refetch: Option<(usize, u64, usize)>,
    done: bool,
}

fn record_bytes(r: &LineMatch) -> usize {
    r.line.len()
        + r.before
            .iter()
            .chain(&r.after)
            .map(String::len)
            .sum::<usize>()
}

impl Frontier {
    /// Accounts every finished file that is next in order; true once the page is complete.
    fn advance(&mut self, window: &Window, limits: &GrepLimits) -> bool {
        let end = window.offset.saturating_add(window.max_matches);
        while !self.done {
            let Some(res) = self.pending.remove(&self.next) else {
                break;
            };
            let index = self.next;
            self.next += 1;
            self.out.files_examined = self.next;
            match res.skip {
                Some(SkipReason::Binary) => self.out.skipped.binary += 1,
                Some(SkipReason::TooLarge) => self.out.skipped.too_large += 1,
                Some(SkipReason::Unreadable) => self.out.skipped.unreadable += 1,
                None => {}
            }
            let start = self.seen;
            self.seen += res.count;
            if res.count == 0 {
                continue;
            }
            // The part of this file's matches inside the window, in local indices.
            let lo = window.offset.max(start) - start;
            let hi = end.min(self.seen).saturating_sub(start);
            if lo < hi {
                let stored = res.records.len() as u64;
                if hi > stored && self.refetch.is_none() {
                    let keep = usize::try_from(hi - lo).unwrap_or(usize::MAX);
                    self.refetch = Some((index, lo, keep));
                    self.out.file_counts.push((index, res.count));
                } else {
                    let mut taken = 0u64;
                    for r in res
                        .records
                        .into_iter()
                        .skip(usize::try_from(lo).unwrap_or(usize::MAX))
                    {
                        if taken == hi - lo {
                            break;
                        }
                        let b = record_bytes(&r);
                        if self.bytes + b > limits.max_output_bytes && !self.out.matches.is_empty()
                        {
                            // The page is full by size: it ends before this match.
                            self.out.truncated = true;
                            self.out.next_offset = Some(start + lo + taken);
                            self.done = true;
                            break;
                        }
                        self.bytes += b;
                        self.out.matches.push(r);
                        taken += 1;
                    }
                    if taken > 0 {
                        self.out.file_counts.push((index, res.count));
                    }
                    if self.done {
                        return true;
                    }
                }
            }
            if self.seen > end {
                self.out.truncated = true;
                self.out.next_offset = Some(end);
                self.done = true;
            }
        }
        self.done
    }
}

/// Searches `files` in order (in parallel) and returns the page `window` of their matches.
///
/// `open` hands over an open file for an item (or says why not); it is called from several
/// threads. Items are searched at most once each, except that the file where a page starts deep
/// inside its own matches is searched a second time to collect them.
pub fn search<P, O>(
    pattern: &Pattern,
    files: &[P],
    open: O,
    window: Window,
    limits: &GrepLimits,
) -> GrepOutcome
where
    P: Sync,
    O: Fn(&P) -> Result<File, OpenError> + Sync,
{
    let keep = usize::try_from(window.max_matches).unwrap_or(usize::MAX);
    let frontier = Mutex::new(Frontier {
        pending: BTreeMap::new(),
        next: 0,
        seen: 0,
        out: GrepOutcome::default(),
        bytes: 0,
        refetch: None,
        done: false,
    });
    let next_item = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let threads = limits.threads.clamp(1, 64).min(files.len().max(1));
    let work = || {
        let mut searcher = pattern.searcher(limits);
        loop {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let i = next_item.fetch_add(1, Ordering::Relaxed);
            let Some(item) = files.get(i) else { break };
            let res = search_one(
                pattern,
                &mut searcher,
                limits,
                (i, item),
                &open,
                Take { skip: 0, keep },
            );
            let mut f = match frontier.lock() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            f.pending.insert(i, res);
            if f.advance(&window, limits) {
                stop.store(true, Ordering::Relaxed);
            }
        }
    };
    if threads <= 1 {
        work();
    } else {
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(work);
            }
        });
    }
    let mut f = match frontier.into_inner() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    };
    if let Some((index, lo, want)) = f.refetch.take()
        && let Some(item) = files.get(index)
    {
        // The page starts inside this file past what the first pass recorded.
        let mut searcher = pattern.searcher(limits);
        let res = search_one(
            pattern,
            &mut searcher,
            limits,
            (index, item),
            &open,
            Take {
                skip: lo,
                keep: want,
            },
        );
        let mut bytes = 0usize;
        let mut page: Vec<LineMatch> = Vec::with_capacity(res.records.len());
        let mut cut: Option<u64> = None;
        for (k, r) in res.records.into_iter().enumerate() {
            let b = record_bytes(&r);
            if bytes + b > limits.max_output_bytes && !page.is_empty() {
                cut = Some(window.offset + k as u64);
                break;
            }
            bytes += b;
            page.push(r);
        }
        let later_bytes: usize = f.out.matches.iter().map(record_bytes).sum();
        if let Some(at) = cut {
            // The refetched file alone fills the page.
            f.out.matches = page;
            f.out.file_counts.retain(|(i, _)| *i == index);
            f.out.truncated = true;
            f.out.next_offset = Some(at);
        } else if bytes + later_bytes > limits.max_output_bytes {
            // Keep what fits after the refetched part, in order.
            let mut kept = page;
            let mut total = bytes;
            let mut dropped_from: Option<u64> = None;
            let later = std::mem::take(&mut f.out.matches);
            for r in later {
                let b = record_bytes(&r);
                if dropped_from.is_none() && total + b <= limits.max_output_bytes {
                    total += b;
                    kept.push(r);
                } else if dropped_from.is_none() {
                    dropped_from = Some(window.offset + kept.len() as u64);
                }
            }
            let files_kept: Vec<usize> = kept.iter().map(|m| m.file).collect();
            f.out.file_counts.retain(|(i, _)| files_kept.contains(i));
            f.out.matches = kept;
            if let Some(at) = dropped_from {
                f.out.truncated = true;
                f.out.next_offset = Some(at);
            }
        } else {
            let mut all = page;
            all.append(&mut f.out.matches);
            f.out.matches = all;
        }
    }
    f.out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn tree(files: &[(&str, &[u8])]) -> (tempfile::TempDir, Vec<std::path::PathBuf>) {
        let dir = tempfile::tempdir().unwrap();
        let mut paths = Vec::new();
        for (name, content) in files {
            let p = dir.path().join(name);
            let mut f = File::create(&p).unwrap();
            f.write_all(content).unwrap();
            paths.push(p);
        }
        (dir, paths)
    }

    fn opener(p: &std::path::PathBuf) -> Result<File, OpenError> {
        File::open(p).map_err(|_| OpenError::Unreadable)
    }

    fn run(
        pat: &str,
        opts: PatternOptions,
        files: &[std::path::PathBuf],
        offset: u64,
        max: u64,
        threads: usize,
    ) -> GrepOutcome {
        let p = Pattern::new(pat, &opts).unwrap();
        let limits = GrepLimits {
            threads,
            ..GrepLimits::default()
        };
        search(
            &p,
            files,
            opener,
            Window {
                offset,
                max_matches: max,
            },
            &limits,
        )
    }

    #[test]
    fn literal_is_default_and_regex_is_opt_in() {
        let (_d, files) = tree(&[("a", b"a.c\nabc\n")]);
        let lit = run("a.c", PatternOptions::default(), &files, 0, 10, 1);
        assert_eq!(lit.matches.len(), 1);
        assert_eq!(lit.matches[0].line, "a.c");
        let re = run(
            "a.c",
            PatternOptions {
                regex: true,
                ..Default::default()
            },
            &files,
            0,
            10,
            1,
        );
        assert_eq!(re.matches.len(), 2);
    }

    #[test]
    fn case_insensitive_and_line_numbers() {
        let (_d, files) = tree(&[("a", b"x\nHello\nhello\n")]);
        let out = run(
            "HELLO",
            PatternOptions {
                case_insensitive: true,
                ..Default::default()
            },
            &files,
            0,
            10,
            1,
        );
        let nums: Vec<u64> = out.matches.iter().map(|m| m.line_number).collect();
        assert_eq!(nums, vec![2, 3]);
        assert_eq!(out.file_counts, vec![(0, 2)]);
    }

    #[test]
    fn context_lines_before_and_after_each_match() {
        let (_d, files) = tree(&[("a", b"1\n2\nhit3\n4\nhit5\n6\n7\n")]);
        let out = run(
            "hit",
            PatternOptions {
                context_lines: 1,
                ..Default::default()
            },
            &files,
            0,
            10,
            1,
        );
        assert_eq!(out.matches.len(), 2);
        assert_eq!(out.matches[0].before, vec!["2"]);
        assert_eq!(out.matches[0].after, vec!["4"]);
        assert_eq!(out.matches[1].before, vec!["4"]);
        assert_eq!(out.matches[1].after, vec!["6"]);
        let two = run(
            "hit",
            PatternOptions {
                context_lines: 2,
                ..Default::default()
            },
            &files,
            0,
            10,
            1,
        );
        assert_eq!(two.matches[0].before, vec!["1", "2"]);
        assert_eq!(two.matches[0].after, vec!["4", "hit5"]);
        assert_eq!(two.matches[1].before, vec!["hit3", "4"]);
        assert_eq!(two.matches[1].after, vec!["6", "7"]);
    }

    #[test]
    fn binary_and_too_large_files_are_skipped_and_counted() {
        let big = vec![b'x'; 2048];
        let (_d, files) = tree(&[
            ("a", b"needle\n"),
            ("b", b"needle\0\n"),
            ("c", &big),
            ("d", b"needle\n"),
        ]);
        let p = Pattern::new("needle", &PatternOptions::default()).unwrap();
        let mut missing = files.clone();
        missing.push(std::path::PathBuf::from("/nonexistent/zz"));
        let out = search(
            &p,
            &missing,
            opener,
            Window {
                offset: 0,
                max_matches: 10,
            },
            &GrepLimits {
                max_file_bytes: 1024,
                threads: 2,
                ..GrepLimits::default()
            },
        );
        assert_eq!(out.matches.len(), 2);
        assert_eq!(
            out.skipped,
            Skipped {
                binary: 1,
                too_large: 1,
                unreadable: 1
            }
        );
        assert!(!out.truncated);
        assert_eq!(out.files_examined, 5);
    }

    #[test]
    fn long_lines_are_capped_as_lossy_utf8() {
        let mut line = vec![b'a'; 1000];
        line.extend_from_slice(b"needle\xff\n");
        let (_d, files) = tree(&[("a", &line), ("b", b"needle\xff\n")]);
        let out = run("needle", PatternOptions::default(), &files, 0, 10, 1);
        assert_eq!(out.matches[0].line.chars().count(), 500);
        assert!(out.matches[0].line_truncated);
        assert_eq!(out.matches[1].line, "needle\u{fffd}");
        assert!(!out.matches[1].line_truncated);
    }

    #[test]
    fn pages_are_deterministic_and_complete_across_threads() {
        let mut contents: Vec<(String, Vec<u8>)> = Vec::new();
        for i in 0..60 {
            let mut c = Vec::new();
            for j in 0..(i % 7) {
                c.extend_from_slice(format!("line {j} needle {i}\nfiller\n").as_bytes());
            }
            contents.push((format!("f{i:03}"), c));
        }
        let refs: Vec<(&str, &[u8])> = contents
            .iter()
            .map(|(n, c)| (n.as_str(), c.as_slice()))
            .collect();
        let (_d, files) = tree(&refs);
        let all = run("needle", PatternOptions::default(), &files, 0, 10_000, 1);
        let total = all.matches.len() as u64;
        assert!(total > 100);
        for threads in [1, 2, 4] {
            let mut got = Vec::new();
            let mut offset = 0;
            loop {
                let page = run(
                    "needle",
                    PatternOptions::default(),
                    &files,
                    offset,
                    7,
                    threads,
                );
                got.extend(page.matches.iter().map(|m| (m.file, m.line_number)));
                match page.next_offset {
                    Some(n) => {
                        assert!(page.truncated);
                        offset = n;
                    }
                    None => break,
                }
            }
            let want: Vec<(usize, u64)> = all
                .matches
                .iter()
                .map(|m| (m.file, m.line_number))
                .collect();
            assert_eq!(got, want, "threads {threads}");
        }
    }

    #[test]
    fn a_page_starting_deep_inside_one_file_is_refetched() {
        let mut c = Vec::new();
        for j in 0..50 {
            c.extend_from_slice(format!("needle {j}\n").as_bytes());
        }
        let (_d, files) = tree(&[("a", &c), ("b", b"needle b\n")]);
        let out = run("needle", PatternOptions::default(), &files, 45, 3, 2);
        let lines: Vec<&str> = out.matches.iter().map(|m| m.line.as_str()).collect();
        assert_eq!(lines, vec!["needle 45", "needle 46", "needle 47"]);
        assert_eq!(out.next_offset, Some(48));
        let out = run("needle", PatternOptions::default(), &files, 48, 3, 2);
        let lines: Vec<&str> = out.matches.iter().map(|m| m.line.as_str()).collect();
        assert_eq!(lines, vec!["needle 48", "needle 49", "needle b"]);
        assert_eq!(out.file_counts, vec![(0, 50), (1, 1)]);
        assert!(!out.truncated);
    }

    #[test]
    fn output_bytes_cap_ends_the_page_early_with_next_offset() {
        let mut c = Vec::new();
        for j in 0..100 {
            c.extend_from_slice(format!("needle {j} {}\n", "x".repeat(90)).as_bytes());
        }
        let (_d, files) = tree(&[("a", &c)]);
        let p = Pattern::new("needle", &PatternOptions::default()).unwrap();
        let out = search(
            &p,
            &files,
            opener,
            Window {
                offset: 0,
                max_matches: 100,
            },
            &GrepLimits {
                max_output_bytes: 1000,
                threads: 1,
                ..GrepLimits::default()
            },
        );
        assert!(out.truncated);
        assert_eq!(out.matches.len(), 10);
        assert_eq!(out.next_offset, Some(10));
    }

    #[test]
    fn bad_and_oversized_patterns_are_refused() {
        let opts = PatternOptions {
            regex: true,
            ..Default::default()
        };
        assert!(matches!(
            Pattern::new("a(b", &opts),
            Err(PatternError::Invalid(_))
        ));
        let t = std::time::Instant::now();
        assert!(matches!(
            Pattern::new(r"(\w{100}){100}", &opts),
            Err(PatternError::Invalid(_))
        ));
        assert!(t.elapsed() < std::time::Duration::from_secs(5));
        assert!(matches!(
            Pattern::new(&"a".repeat(5000), &PatternOptions::default()),
            Err(PatternError::TooLong(5000))
        ));
        assert!(matches!(
            Pattern::new(
                "a",
                &PatternOptions {
                    context_lines: 11,
                    ..Default::default()
                }
            ),
            Err(PatternError::TooMuchContext(11))
        ));
        // A literal is never a regex, whatever it contains.
        assert!(Pattern::new("a(b", &PatternOptions::default()).is_ok());
    }
}
