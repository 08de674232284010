//! `find`, `grep` and `find_files`: the listing tools, handlers of an [`Authorized`] call.
//!
//! All three read the workspace's path index ([`crate::index`]) and withhold every entry a `read`
//! of it would not be allowed: the question asked per entry is exactly the request `read` would
//! make (action `read`, `resource.tool == "read"`), decided once per decision signature (paths the
//! policy set cannot tell apart share one evaluation, [`crate::policy::signature`]). A withheld file is
//! never opened. Listing, filtering and searching run on the blocking pool.

use crate::error::{ErrorCode, ToolError};
use crate::gateway::Authorized;
use crate::index::{Derived, Groups, Listing};
use crate::policy::Action;
use crate::policy::decide::Decision;
use crate::request::{SubRequest, path_request};
use crate::wire::{
    EntryType, FIND_FILES_DEFAULT_LIMIT, FIND_FILES_MAX_LIMIT, FIND_MAX_PATHS, FindEntry,
    FindFilesMatch, FindFilesParams, FindFilesResult, FindParams, FindResult, GREP_DEFAULT_MATCHES,
    GREP_MAX_FILE_BYTES, GREP_MAX_LINE_CHARS, GREP_MAX_MATCHES, GREP_MAX_OUTPUT_BYTES,
    GrepFileCount, GrepMatch, GrepParams, GrepResult, GrepSkipped, ListingSource, WalkReason,
};
use codespace_runner_fs::{GlobFilter, Kind, RelPath};
use codespace_runner_search::{
    FuzzyQuery, GrepLimits, IgnoreSelector, OpenError, Pattern, PatternOptions, Scorer, Window,
};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Arc;

/// Representatives decided on the async worker (through the decision cache); more are decided on
/// the blocking pool.
const INLINE_DECISIONS: usize = 256;
/// Most `exclude` globs.
const MAX_EXCLUDES: usize = 64;
/// Deepest `max_depth`.
const MAX_DEPTH: u64 = 64;

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ToolError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ToolError::new(ErrorCode::Internal, format!("blocking task: {e}")))
}

fn invalid(msg: impl Into<String>) -> ToolError {
    ToolError::new(ErrorCode::InvalidArguments, msg)
}

fn compile_glob(field: &str, g: &str) -> Result<GlobFilter, ToolError> {
    GlobFilter::new(g).map_err(|e| invalid(format!("{field}: {e}")))
}

fn source(why: Option<WalkReason>) -> ListingSource {
    if why.is_some() {
        ListingSource::Walk
    } else {
        ListingSource::Index
    }
}

fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::File => "file",
        Kind::Dir => "dir",
        Kind::Symlink => "symlink",
        Kind::Other => "other",
    }
}

fn depth_of(path: &str) -> u64 {
    path.bytes().filter(|&b| b == b'/').count() as u64 + 1
}

/// `sha256:` over a sequence of paths (one per line) and the incomplete marker.
fn listing_version<'a>(paths: impl Iterator<Item = &'a str>, incomplete: bool) -> String {
    let mut h = Sha256::new();
    for p in paths {
        h.update(p.as_bytes());
        h.update(b"\n");
    }
    if incomplete {
        h.update(b"\0incomplete");
    }
    format!("sha256:{}", hex::encode(h.finalize()))
}

/// Entries beneath a matching `exclude` directory are excluded too (memoized per directory).
struct Excluder<'a> {
    globs: &'a [GlobFilter],
    dirs: HashMap<String, bool>,
}

impl Excluder<'_> {
    fn own(&self, path: &str) -> bool {
        self.globs.iter().any(|g| g.is_match(path))
    }

    fn excluded(&mut self, path: &str) -> bool {
        if self.globs.is_empty() {
            return false;
        }
        if let Some((parent, _)) = path.rsplit_once('/')
            && self.dir_excluded(parent)
        {
            return true;
        }
        self.own(path)
    }

    fn dir_excluded(&mut self, dir: &str) -> bool {
        if let Some(v) = self.dirs.get(dir) {
            return *v;
        }
        let v = match dir.rsplit_once('/') {
            Some((parent, _)) => self.dir_excluded(parent),
            None => false,
        } || self.own(dir);
        self.dirs.insert(dir.to_string(), v);
        v
    }
}

/// What the listing tools show of one path.
#[derive(Debug, Clone, Copy)]
struct PathMeta {
    kind: Kind,
    size: u64,
    mtime_ms: i64,
}

/// lstat-style facts of `rel` (no symlink followed): beneath the host root on the blocking pool,
/// or, for a worker's workspace, through its runner.
async fn path_meta(
    ws: &crate::gateway::WorkspaceRuntime,
    rel: &RelPath,
) -> Result<Option<PathMeta>, ToolError> {
    match &ws.root {
        Some(root) => {
            let root = Arc::clone(root);
            let r = rel.clone();
            Ok(blocking(move || root.stat(&r)).await??.map(|m| PathMeta {
                kind: m.kind,
                size: m.size,
                mtime_ms: m.mtime_ms,
            }))
        }
        None => {
            let stat = ws
                .runner
                .stat(codespace_runner_api::PathRequest {
                    workspace: ws.facts.id.clone(),
                    path: rel.as_str().to_string(),
                })
                .await
                .map_err(crate::host_runner::to_tool_error)?;
            Ok(stat.map(|s| PathMeta {
                kind: match s.kind {
                    codespace_runner_api::FileKind::File => Kind::File,
                    codespace_runner_api::FileKind::Dir => Kind::Dir,
                    codespace_runner_api::FileKind::Symlink => Kind::Symlink,
                    codespace_runner_api::FileKind::Other => Kind::Other,
                },
                size: s.size,
                mtime_ms: s.mtime_ms,
            }))
        }
    }
}

/// A runner's grep page as the search crate's outcome (file indices into the same list).
fn outcome_of(page: codespace_runner_api::GrepPage) -> codespace_runner_search::GrepOutcome {
    let idx = |f: u64| usize::try_from(f).unwrap_or(usize::MAX);
    codespace_runner_search::GrepOutcome {
        matches: page
            .matches
            .into_iter()
            .map(|m| codespace_runner_search::LineMatch {
                file: idx(m.file),
                line_number: m.line_number,
                line: m.line,
                line_truncated: m.line_truncated,
                before: m.before,
                after: m.after,
            })
            .collect(),
        file_counts: page
            .file_counts
            .into_iter()
            .map(|(f, n)| (idx(f), n))
            .collect(),
        skipped: codespace_runner_search::Skipped {
            binary: page.skipped_binary,
            too_large: page.skipped_too_large,
            unreadable: page.skipped_unreadable,
        },
        truncated: page.truncated,
        next_offset: page.next_offset,
        files_examined: idx(page.files_examined),
    }
}

/// The workspace listing from its index (or a walk), on the blocking pool.
async fn workspace_listing(
    auth: &Authorized<'_>,
) -> Result<(Arc<Listing>, Option<WalkReason>), ToolError> {
    let ws = auth.ws();
    crate::index::ensure_reaper(&ws.index);
    let index = Arc::clone(&ws.index);
    let versions = Arc::clone(&ws.versions);
    // A policy set that reads `resource.links` needs every file's count: read during the walk,
    // with each directory open, rather than by a second pass.
    let links = auth.signature_plan().uses_links();
    Ok(blocking(move || {
        index.want_links(links);
        index.listing(&versions)
    })
    .await??)
}

/// Groups the listing by decision signature and decides one `read` per group.
async fn read_decisions(
    auth: &Authorized<'_>,
    listing: &Arc<Listing>,
) -> Result<(Arc<Groups>, Decision), ToolError> {
    let (snap, ws, session) = (auth.snap(), auth.ws(), auth.session());
    let plan = auth.signature_plan();
    let index = Arc::clone(&ws.index);
    let facts = ws.facts.clone();
    let sha = snap.sha256.clone();
    let l = Arc::clone(listing);
    let groups = blocking(move || index.groups(&l, &sha, &plan, &facts)).await?;
    let reqs: Vec<SubRequest> = groups
        .reps
        .iter()
        .zip(&groups.rep_links)
        .filter_map(|(&i, &links)| listing.entries.get(i as usize).map(|e| (e, links)))
        .map(|(e, links)| {
            let mut r = path_request(Action::READ, &e.path, "", session);
            r.links = links;
            r
        })
        .collect();
    let decision = if reqs.len() <= INLINE_DECISIONS {
        auth.decide_quietly(Action::READ, &reqs)
    } else {
        // Paths the policy set tells apart one by one: evaluate them off the async workers.
        auth.decide_on_blocking_pool(Action::READ, reqs).await?
    };
    Ok((groups, decision))
}

/// Audit rows for withheld entries: action `read` (the question asked), tool = the calling
/// tool.
fn audit_withheld_entries(
    auth: &Authorized<'_>,
    decision: &Decision,
    listing: &Listing,
    withheld: &[(u32, u32)],
) {
    let session = auth.session();
    if withheld.is_empty() || auth.store.is_none() {
        return;
    }
    let mut decision = decision.clone();
    decision.tool = auth.action().to_string();
    let rows: Vec<(String, usize)> = withheld
        .iter()
        .filter_map(|&(e, g)| {
            listing
                .entries
                .get(e as usize)
                .map(|x| (x.path.to_string(), g as usize))
        })
        .collect();
    // The `read` request of each group (one withheld entry stands for its group): the
    // shadow set is asked the same questions.
    let groups = rows.iter().map(|(_, g)| *g + 1).max().unwrap_or(0);
    let mut reqs: Vec<SubRequest> = (0..groups)
        .map(|_| path_request(Action::READ, ".", "", session))
        .collect();
    for (path, g) in &rows {
        if let Some(r) = reqs.get_mut(*g) {
            *r = path_request(Action::READ, path, "", session);
        }
    }
    auth.audit_withheld(&decision, &reqs, &rows);
}

/// `find`: the index → type, depth, exclude, gitignore and glob filters → policy filter →
/// page (cached per listing generation and decisions, so paging reads a cached list).
pub(crate) async fn find(auth: &Authorized<'_>, p: &FindParams) -> Result<FindResult, ToolError> {
    let (snap, ws) = (auth.snap(), auth.ws());
    let limit = p.limit.unwrap_or(FIND_MAX_PATHS);
    if limit == 0 || limit > FIND_MAX_PATHS {
        return Err(ToolError::new(
            ErrorCode::OutputLimit,
            format!("limit must be between 1 and {FIND_MAX_PATHS}"),
        ));
    }
    let max_depth = p.max_depth.unwrap_or(MAX_DEPTH);
    if max_depth == 0 || max_depth > MAX_DEPTH {
        return Err(invalid(format!(
            "max_depth must be between 1 and {MAX_DEPTH}"
        )));
    }
    if p.exclude.len() > MAX_EXCLUDES {
        return Err(invalid(format!("exclude: at most {MAX_EXCLUDES} globs")));
    }
    let offset = p.offset.unwrap_or(0);
    let entry_type = p.entry_type.unwrap_or_default();
    let gitignore = p.respect_gitignore.unwrap_or(false);
    let glob = match p.glob.as_deref().filter(|g| !g.is_empty()) {
        Some(g) => Some(compile_glob("glob", g)?),
        None => None,
    };
    let excludes: Vec<GlobFilter> = p
        .exclude
        .iter()
        .filter(|g| !g.is_empty())
        .map(|g| compile_glob("exclude", g))
        .collect::<Result<_, _>>()?;
    let base = auth.target()?.clone();
    if !base.is_root() {
        // The listing's root must be a directory reachable without a symlink.
        let meta = path_meta(ws, &base).await?;
        let named = base.as_str();
        match meta {
            None => {
                return Err(ToolError::new(
                    ErrorCode::FileNotFound,
                    format!("`{named}` does not exist"),
                ));
            }
            Some(m) if m.kind == Kind::Symlink => {
                return Err(ToolError::new(
                    ErrorCode::SymlinkRejected,
                    format!("`{named}` is a symlink"),
                ));
            }
            Some(m) if m.kind != Kind::Dir => {
                return Err(ToolError::new(
                    ErrorCode::PathNotDirectory,
                    format!("`{named}` is not a directory"),
                ));
            }
            Some(_) => {}
        }
    }
    // Entries under the base, and their depth below it.
    let prefix = if base.is_root() {
        String::new()
    } else {
        format!("{}/", base.as_str())
    };
    let base_depth = if base.is_root() {
        0
    } else {
        depth_of(base.as_str())
    };
    let (listing, why) = workspace_listing(auth).await?;
    let (groups, decision) = read_decisions(auth, &listing).await?;
    let mut allowed_bits = Sha256::new();
    for s in &decision.subs {
        allowed_bits.update([u8::from(s.allowed)]);
    }
    let key = format!(
        "{}\0{}\0{}\0{:?}\0{max_depth}\0{}\0{:?}\0{gitignore}\0{prefix}",
        listing.generation,
        snap.sha256,
        hex::encode(allowed_bits.finalize()),
        entry_type,
        p.glob.as_deref().unwrap_or(""),
        p.exclude,
    );
    let derived = match ws.index.derived(&key) {
        Some(d) => d,
        None => {
            let allowed: Vec<bool> = decision.subs.iter().map(|s| s.allowed).collect();
            let index = Arc::clone(&ws.index);
            let l = Arc::clone(&listing);
            let d = blocking(move || {
                let rules = gitignore.then(|| index.ignore_rules(&l));
                let mut ignore = rules.as_ref().map(|r| {
                    let mut f = r.filter(IgnoreSelector {
                        hidden: true,
                        ignored: true,
                    });
                    if !prefix.is_empty() {
                        f.assume_kept(prefix.trim_end_matches('/'));
                    }
                    f
                });
                let mut ex = Excluder {
                    globs: &excludes,
                    dirs: HashMap::new(),
                };
                let mut visible = Vec::new();
                let mut withheld = Vec::new();
                for (i, e) in l.entries.iter().enumerate() {
                    if e.temp {
                        continue;
                    }
                    let wanted = match entry_type {
                        EntryType::File => matches!(e.kind, Kind::File | Kind::Symlink),
                        EntryType::Dir => e.kind == Kind::Dir,
                        EntryType::Any => true,
                    };
                    if !wanted
                        || !e.path.starts_with(prefix.as_str())
                        || depth_of(&e.path) - base_depth > max_depth
                        || glob.as_ref().is_some_and(|g| !g.is_match(&e.path))
                        || ex.excluded(&e.path)
                        || ignore
                            .as_mut()
                            .is_some_and(|f| f.is_skipped(&e.path, e.kind == Kind::Dir))
                    {
                        continue;
                    }
                    let i = u32::try_from(i).unwrap_or(u32::MAX);
                    let g = groups.of_entry.get(i as usize).copied().unwrap_or(u32::MAX);
                    if allowed.get(g as usize).copied().unwrap_or(false) {
                        visible.push(i);
                    } else {
                        withheld.push((i, g));
                    }
                }
                let version = listing_version(
                    visible
                        .iter()
                        .filter_map(|&i| l.entries.get(i as usize))
                        .map(|e| &*e.path),
                    l.incomplete,
                );
                Arc::new(Derived {
                    visible,
                    withheld,
                    listing_version: version,
                })
            })
            .await?;
            ws.index.put_derived(key, Arc::clone(&d));
            d
        }
    };
    audit_withheld_entries(auth, &decision, &listing, &derived.withheld);
    let total = derived.visible.len() as u64;
    let start = usize::try_from(offset.min(total)).unwrap_or(usize::MAX);
    let take = usize::try_from(limit).unwrap_or(usize::MAX);
    let page: Vec<String> = derived
        .visible
        .iter()
        .skip(start)
        .take(take)
        .filter_map(|&i| listing.entries.get(i as usize))
        .map(|e| e.path.to_string())
        .collect();
    let end = offset.min(total) + page.len() as u64;
    let more = end < total;
    let entries = if p.details.unwrap_or(false) {
        let paths = page.clone();
        let metas: Vec<Option<PathMeta>> = match &ws.root {
            Some(root) => {
                let root = Arc::clone(root);
                let paths = paths.clone();
                blocking(move || {
                    paths
                        .iter()
                        .map(|path| {
                            RelPath::parse(path)
                                .ok()
                                .and_then(|r| root.stat(&r).ok().flatten())
                                .map(|m| PathMeta {
                                    kind: m.kind,
                                    size: m.size,
                                    mtime_ms: m.mtime_ms,
                                })
                        })
                        .collect()
                })
                .await?
            }
            None => {
                let mut metas = Vec::with_capacity(paths.len());
                for path in &paths {
                    metas.push(match RelPath::parse(path) {
                        Ok(rel) => path_meta(ws, &rel).await.ok().flatten(),
                        Err(_) => None,
                    });
                }
                metas
            }
        };
        Some(
            paths
                .into_iter()
                .zip(metas)
                .map(|(path, meta)| FindEntry {
                    kind: meta.map_or("missing", |m| kind_name(m.kind)).to_string(),
                    size: meta.map(|m| m.size),
                    mtime: meta.map(|m| crate::wire::rfc3339_ms(m.mtime_ms)),
                    path,
                })
                .collect(),
        )
    } else {
        None
    };
    Ok(FindResult {
        paths: page,
        truncated: more || listing.incomplete,
        offset: (offset > 0).then_some(offset),
        next_offset: more.then_some(end),
        incomplete: listing.incomplete,
        listing_version: derived.listing_version.clone(),
        withheld: derived.withheld.len() as u64,
        entries,
        listing_source: Some(source(why)),
        walk_reason: why,
    })
}

/// `grep`: the index → files under `path` matching `glob`, minus ignored ones → policy filter
/// (withheld files are never opened) → a parallel, deterministic search → one page.
pub(crate) async fn grep(auth: &Authorized<'_>, p: &GrepParams) -> Result<GrepResult, ToolError> {
    let ws = auth.ws();
    let max_matches = p.max_matches.unwrap_or(GREP_DEFAULT_MATCHES);
    if max_matches == 0 || max_matches > GREP_MAX_MATCHES {
        return Err(ToolError::new(
            ErrorCode::OutputLimit,
            format!("max_matches must be between 1 and {GREP_MAX_MATCHES}"),
        ));
    }
    let context_lines = p.context_lines.unwrap_or(0);
    let offset = p.offset.unwrap_or(0);
    let opts = PatternOptions {
        regex: p.regex.unwrap_or(false),
        case_insensitive: p.case_insensitive.unwrap_or(false),
        context_lines: usize::try_from(context_lines).unwrap_or(usize::MAX),
    };
    let pattern_text = p.pattern.clone();
    let pattern = blocking(move || Pattern::new(&pattern_text, &opts))
        .await?
        .map_err(|e| invalid(format!("pattern: {e}")))?;
    let glob = match p.glob.as_deref().filter(|g| !g.is_empty()) {
        Some(g) => Some(compile_glob("glob", g)?),
        None => None,
    };
    let base = auth.target()?.clone();
    let gitignore = p.respect_gitignore.unwrap_or(true);
    if !base.is_root() {
        // The named directory (or file) must exist and be reachable without a symlink.
        let meta = path_meta(ws, &base).await?;
        match meta {
            None => {
                return Err(ToolError::new(
                    ErrorCode::FileNotFound,
                    format!("`{}` does not exist", base.as_str()),
                ));
            }
            Some(m) if m.kind == Kind::Symlink => {
                return Err(ToolError::new(
                    ErrorCode::SymlinkRejected,
                    format!("`{}` is a symlink", base.as_str()),
                ));
            }
            Some(_) => {}
        }
    }
    let (listing, why) = workspace_listing(auth).await?;
    let (groups, decision) = read_decisions(auth, &listing).await?;
    let allowed: Vec<bool> = decision.subs.iter().map(|s| s.allowed).collect();
    let index = Arc::clone(&ws.index);
    let root = ws.root.clone();
    let l = Arc::clone(&listing);
    let window = Window {
        offset,
        max_matches,
    };
    let limits = GrepLimits {
        max_file_bytes: GREP_MAX_FILE_BYTES,
        max_line_chars: GREP_MAX_LINE_CHARS,
        max_output_bytes: GREP_MAX_OUTPUT_BYTES,
        ..GrepLimits::default()
    };
    let (withheld, files, outcome, version) = blocking(move || {
        let rules = gitignore.then(|| index.ignore_rules(&l));
        let mut ignore = rules.as_ref().map(|r| {
            let mut f = r.filter(IgnoreSelector {
                hidden: true,
                ignored: true,
            });
            if !base.is_root() {
                f.assume_kept(base.as_str());
            }
            f
        });
        let prefix = format!("{}/", base.as_str());
        let mut files: Vec<u32> = Vec::new();
        let mut withheld: Vec<(u32, u32)> = Vec::new();
        for (i, e) in l.entries.iter().enumerate() {
            if e.kind != Kind::File || e.temp {
                continue;
            }
            let under = base.is_root() || *e.path == *base.as_str() || e.path.starts_with(&prefix);
            if !under
                || glob.as_ref().is_some_and(|g| !g.is_match(&e.path))
                || ignore
                    .as_mut()
                    .is_some_and(|f| *e.path != *base.as_str() && f.is_skipped(&e.path, false))
            {
                continue;
            }
            let i = u32::try_from(i).unwrap_or(u32::MAX);
            let g = groups.of_entry.get(i as usize).copied().unwrap_or(u32::MAX);
            if allowed.get(g as usize).copied().unwrap_or(false) {
                files.push(i);
            } else {
                withheld.push((i, g));
            }
        }
        let version = listing_version(
            files
                .iter()
                .filter_map(|&i| l.entries.get(i as usize))
                .map(|e| &*e.path),
            l.incomplete,
        );
        // A worker's workspace is searched by its runner (below), never opened here.
        let outcome = root.map(|root| {
            let open = |&i: &u32| {
                let e = l.entries.get(i as usize).ok_or(OpenError::Unreadable)?;
                let rel = RelPath::parse(&e.path).map_err(|_| OpenError::Unreadable)?;
                root.open_file(&rel)
                    .map(|(f, _)| f)
                    .map_err(|_| OpenError::Unreadable)
            };
            codespace_runner_search::grep::search(&pattern, &files, open, window, &limits)
        });
        (withheld, files, outcome, version)
    })
    .await?;
    let outcome = match outcome {
        Some(outcome) => outcome,
        None => {
            let paths: Vec<String> = files
                .iter()
                .filter_map(|&i| listing.entries.get(i as usize))
                .map(|e| e.path.to_string())
                .collect();
            let page = ws
                .runner
                .grep(codespace_runner_api::GrepRequest {
                    workspace: ws.facts.id.clone(),
                    files: paths,
                    pattern: p.pattern.clone(),
                    regex: p.regex.unwrap_or(false),
                    case_insensitive: p.case_insensitive.unwrap_or(false),
                    context_lines,
                    offset,
                    max_matches,
                    max_file_bytes: limits.max_file_bytes,
                    max_line_chars: limits.max_line_chars as u64,
                    max_output_bytes: limits.max_output_bytes as u64,
                })
                .await
                .map_err(crate::host_runner::to_tool_error)?;
            outcome_of(page)
        }
    };
    audit_withheld_entries(auth, &decision, &listing, &withheld);
    let path_of = |file: usize| -> String {
        files
            .get(file)
            .and_then(|&i| listing.entries.get(i as usize))
            .map(|e| e.path.to_string())
            .unwrap_or_default()
    };
    let matches = outcome
        .matches
        .into_iter()
        .map(|m| GrepMatch {
            path: path_of(m.file),
            line_number: m.line_number,
            line: m.line,
            before: m.before,
            after: m.after,
            line_truncated: m.line_truncated,
        })
        .collect();
    let file_counts = outcome
        .file_counts
        .into_iter()
        .map(|(f, count)| GrepFileCount {
            path: path_of(f),
            count,
        })
        .collect();
    Ok(GrepResult {
        matches,
        files: file_counts,
        skipped: GrepSkipped {
            binary: outcome.skipped.binary,
            too_large: outcome.skipped.too_large,
            unreadable: outcome.skipped.unreadable,
        },
        withheld: withheld.len() as u64,
        truncated: outcome.truncated,
        next_offset: outcome.next_offset,
        offset: (offset > 0).then_some(offset),
        incomplete: listing.incomplete,
        listing_version: version,
        listing_source: source(why),
        walk_reason: why,
    })
}

/// `find_files`: fuzzy-rank the readable files of the index.
pub(crate) async fn find_files(
    auth: &Authorized<'_>,
    p: &FindFilesParams,
) -> Result<FindFilesResult, ToolError> {
    let limit = p.limit.unwrap_or(FIND_FILES_DEFAULT_LIMIT);
    if limit == 0 || limit > FIND_FILES_MAX_LIMIT {
        return Err(ToolError::new(
            ErrorCode::OutputLimit,
            format!("limit must be between 1 and {FIND_FILES_MAX_LIMIT}"),
        ));
    }
    if p.query.trim().is_empty() {
        return Err(invalid("query must have at least one non-space character"));
    }
    if p.query.len() > 1024 {
        return Err(invalid("query: at most 1024 bytes"));
    }
    let (listing, why) = workspace_listing(auth).await?;
    let (groups, decision) = read_decisions(auth, &listing).await?;
    let allowed: Vec<bool> = decision.subs.iter().map(|s| s.allowed).collect();
    let query = p.query.clone();
    let l = Arc::clone(&listing);
    let (ranked, withheld) = blocking(move || {
        let q = FuzzyQuery::new(&query);
        let is_allowed = |i: usize| {
            groups
                .of_entry
                .get(i)
                .and_then(|&g| allowed.get(g as usize))
                .copied()
                .unwrap_or(false)
        };
        let files = l
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| !e.temp && matches!(e.kind, Kind::File | Kind::Symlink));
        // `withheld` counts every withheld file of the workspace whatever the query, so the
        // figure never tells whether a withheld name matches (it would be a name oracle);
        // the audit log keeps the ones the query matched.
        let mut scorer = Scorer::new();
        let mut withheld_files: u64 = 0;
        let mut matched: Vec<(u32, u32)> = Vec::new();
        for (i, e) in files.clone() {
            if is_allowed(i) {
                continue;
            }
            withheld_files += 1;
            if q.matches(&mut scorer, &e.path) {
                let g = groups.of_entry.get(i).copied().unwrap_or(u32::MAX);
                matched.push((u32::try_from(i).unwrap_or(u32::MAX), g));
            }
        }
        let ranked = q.rank(
            files
                .filter(|(i, _)| is_allowed(*i))
                .map(|(i, e)| (i, &*e.path)),
            usize::try_from(limit).unwrap_or(usize::MAX),
        );
        (ranked, (withheld_files, matched))
    })
    .await?;
    let (withheld, matched) = withheld;
    audit_withheld_entries(auth, &decision, &listing, &matched);
    let matches = ranked
        .into_iter()
        .filter_map(|r| {
            listing.entries.get(r.id).map(|e| FindFilesMatch {
                path: e.path.to_string(),
                score: u64::from(r.score),
                indices: r.indices,
            })
        })
        .collect();
    Ok(FindFilesResult {
        matches,
        withheld,
        incomplete: listing.incomplete,
        listing_source: source(why),
        walk_reason: why,
    })
}
