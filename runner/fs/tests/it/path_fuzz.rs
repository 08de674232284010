//! Generated-path robustness: 20 000 deterministic path spellings (xorshift, fixed seed) run through
//! `RelPath::parse` and, when they parse, `Root::read`/`stat`/`version` on a hostile tree and
//! `Root::write_atomic`/`create_dirs` on a scratch copy of it. Nothing may read the outside marker, change
//! anything outside the roots, panic, block on the FIFO, or fail with a code outside the contract.
// Helper functions of this test crate are test code too (clippy.toml only covers #[test] fns).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, symlink};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use codespace_runner_fs::{FsError, Kind, RelPath, Root, Version, parse_temp_name};
use rustix::fs::Mode;

const SEED: u64 = 0x9E37_79B9_7F4A_7C15;
const ITERATIONS: usize = 20_000;
/// A stalled iteration (e.g. an open blocking on the FIFO) fails the test after this long.
const STALL: Duration = Duration::from_secs(20);

/// Content of the files planted outside the roots; must never come back from a read.
const MARKER: &[u8] = b"OUTSIDE-MARKER-path-fuzz-5d1c0b7e-never-read-me";
/// Payload prefix of every fuzzed write (followed by the iteration number).
const PAYLOAD: &str = "FUZZ-WRITE-PAYLOAD-";

const CONTRACT_CODES: [&str; 6] = [
    "PATH_ESCAPE",
    "FILE_NOT_FOUND",
    "PATH_NOT_DIRECTORY",
    "SYMLINK_REJECTED",
    "SPECIAL_FILE_REJECTED",
    "FILE_OPERATION_FAILED",
];

/// xorshift64*: tiny, deterministic, good enough to pick pieces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    fn pick<'a>(&mut self, items: &'a [String]) -> &'a str {
        &items[self.below(items.len())]
    }
}

fn pieces() -> Vec<String> {
    let mut p: Vec<String> = [
        "..",
        ".",
        "",
        "/",
        "//",
        "a",
        "b",
        "dir",
        "link",
        "link2",
        "loop",
        "loop2",
        "fifo",
        "outside",
        "marker",
        "etc",
        "passwd",
        "\0",
        "é",
        "\u{2024}\u{2024}",
        "%2e%2e",
        "\\",
        "..\\..",
        "...",
        ". .",
        "a b",
        "\n",
        "*",
        "~",
        ".codespace-tmp-x",
        "dir/link2",
        "link2/outside/marker",
        "link2/marker",
        "link/etc/passwd",
        "link2/root/fifo",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    p.push("x".repeat(256)); // one byte over NAME_MAX
    p.push("y".repeat(255)); // exactly NAME_MAX
    p.push("é".repeat(128)); // 256 bytes of two-byte characters
    p
}

/// One generated path spelling.
fn generate(rng: &mut Rng, pieces: &[String]) -> String {
    if rng.one_in(200) {
        // Over PATH_MAX (or just under it).
        let reps = 2040 + rng.below(20);
        return "a/".repeat(reps);
    }
    let separators: [&str; 6] = ["/", "/", "/", "//", "", "/./"];
    let mut s = String::new();
    if rng.one_in(8) {
        s.push('/');
    }
    let n = 1 + rng.below(7);
    for i in 0..n {
        if i > 0 {
            s.push_str(separators[rng.below(separators.len())]);
        }
        if rng.one_in(40) {
            // A random printable-or-not character, never a surrogate.
            let c = char::from_u32((rng.next() % 0x3_0000) as u32).unwrap_or('\u{FFFD}');
            s.push(c);
        } else {
            s.push_str(rng.pick(pieces));
        }
    }
    if rng.one_in(10) {
        s.push('/');
    }
    s
}

/// The hostile tree, built identically in the read root and the scratch (write) root.
fn build_tree(dir: &Path) {
    std::fs::create_dir(dir).unwrap();
    std::fs::write(dir.join("a"), b"inside a").unwrap();
    std::fs::create_dir_all(dir.join("b")).unwrap();
    std::fs::write(dir.join("b/a"), b"inside b/a").unwrap();
    std::fs::create_dir_all(dir.join("dir/dir")).unwrap();
    std::fs::write(dir.join("dir/a"), b"inside dir/a").unwrap();
    std::fs::write(dir.join("dir/dir/b"), b"inside dir/dir/b").unwrap();
    std::fs::write(dir.join("é"), b"inside e-acute").unwrap();
    std::fs::create_dir(dir.join("\u{2024}\u{2024}")).unwrap();
    std::fs::write(dir.join("\u{2024}\u{2024}/a"), b"inside one-dot leaders").unwrap();
    std::fs::write(dir.join("%2e%2e"), b"inside percent").unwrap();
    // On Linux a backslash is an ordinary file-name character.
    std::fs::write(dir.join(String::from('\\')), b"inside backslash").unwrap();
    symlink("/", dir.join("link")).unwrap();
    symlink("..", dir.join("link2")).unwrap();
    symlink("loop", dir.join("loop")).unwrap();
    symlink("loop2/x", dir.join("loop2")).unwrap();
    symlink("../link2", dir.join("dir/link")).unwrap();
    symlink("../../outside/marker", dir.join("dir/link2")).unwrap();
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        dir.join("fifo"),
        Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        dir.join("dir/fifo"),
        Mode::from_bits_truncate(0o600),
    )
    .unwrap();
}

/// One entry of a recursive lstat snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    mode: u32,
    size: u64,
    mtime_ns: i128,
    content: Option<Vec<u8>>,
    link: Option<PathBuf>,
}

fn entry(path: &Path) -> Entry {
    let md = std::fs::symlink_metadata(path).unwrap();
    let ft = md.file_type();
    Entry {
        mode: md.mode(),
        size: md.len(),
        mtime_ns: i128::from(md.mtime()) * 1_000_000_000 + i128::from(md.mtime_nsec()),
        content: ft.is_file().then(|| std::fs::read(path).unwrap()),
        link: ft.is_symlink().then(|| std::fs::read_link(path).unwrap()),
    }
}

/// Recursive snapshot of `dir` (never following symlinks, never opening FIFOs).
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Entry> {
    let mut out = BTreeMap::new();
    out.insert(PathBuf::from("."), entry(dir));
    snapshot_into(dir, Path::new(""), &mut out);
    out
}

fn snapshot_into(base: &Path, rel: &Path, out: &mut BTreeMap<PathBuf, Entry>) {
    for e in std::fs::read_dir(base.join(rel)).unwrap() {
        let e = e.unwrap();
        let r = rel.join(e.file_name());
        let abs = base.join(&r);
        out.insert(r.clone(), entry(&abs));
        if e.file_type().unwrap().is_dir() {
            snapshot_into(base, &r, out);
        }
    }
}

/// The parent of the roots: its own entry and the names (and lstat) of its direct children.
fn shallow(dir: &Path) -> BTreeMap<PathBuf, (u32, i128)> {
    let mut out = shallow_names(dir);
    let md = std::fs::symlink_metadata(dir).unwrap();
    out.insert(
        PathBuf::from("."),
        (
            md.mode(),
            i128::from(md.mtime()) * 1_000_000_000 + i128::from(md.mtime_nsec()),
        ),
    );
    out
}

/// The names (and lstat modes) of the direct children of `dir`.
fn shallow_names(dir: &Path) -> BTreeMap<PathBuf, (u32, i128)> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let md = e.metadata().unwrap();
        out.insert(PathBuf::from(e.file_name()), (md.mode(), 0));
    }
    out
}

/// Where a normalized path lands when walked lexically without following any symlink: `Ok(kind)` of the
/// leaf when every ancestor is a real directory, `Err(reason)` otherwise.
fn oracle(base: &Path, p: &RelPath) -> Result<Option<Kind>, &'static str> {
    let mut cur = base.to_path_buf();
    let comps: Vec<&str> = p.components().collect();
    for (i, c) in comps.iter().enumerate() {
        cur.push(c);
        let md = match std::fs::symlink_metadata(&cur) {
            Ok(md) => md,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(_) if i + 1 < comps.len() => return Err("ancestor not a directory"),
            Err(_) => return Err("leaf unreadable"),
        };
        let ft = md.file_type();
        let kind = if ft.is_symlink() {
            Kind::Symlink
        } else if ft.is_dir() {
            Kind::Dir
        } else if ft.is_file() {
            Kind::File
        } else {
            Kind::Other
        };
        if i + 1 == comps.len() {
            return Ok(Some(kind));
        }
        match kind {
            Kind::Dir => {}
            Kind::Symlink => return Err("ancestor is a symlink"),
            _ => return Err("ancestor not a directory"),
        }
    }
    Ok(Some(Kind::Dir)) // the root itself
}

#[derive(Default)]
struct Tally {
    parsed: usize,
    rejected_by_parse: usize,
    /// Parsed paths that, with symlinks followed, would resolve outside the read root.
    followed_outside: usize,
    /// ... and of those, the ones that would have returned the outside marker.
    followed_marker: usize,
    outcomes: BTreeMap<(&'static str, &'static str), usize>,
    io_messages: BTreeMap<String, usize>,
    violations: Vec<String>,
}

impl Tally {
    fn record(&mut self, op: &'static str, input: &str, r: Result<(), &FsError>, tmp: &str) {
        let code = match r {
            Ok(()) => "ok",
            Err(e) => {
                let code = e.code();
                if !CONTRACT_CODES.contains(&code) {
                    self.violations
                        .push(format!("{op} {input:?}: non-contract code {code}: {e}"));
                }
                let msg = e.to_string();
                if msg.contains(tmp) {
                    self.violations
                        .push(format!("{op} {input:?}: error names the host path: {msg}"));
                }
                if let FsError::Io { message, .. } = e {
                    *self
                        .io_messages
                        .entry(format!("{op}: {message}"))
                        .or_default() += 1;
                }
                code
            }
        };
        *self.outcomes.entry((op, code)).or_default() += 1;
    }
}

/// What one iteration works against.
struct Ctx<'a> {
    read_root: &'a Root,
    read_dir: &'a Path,
    write_root: &'a Root,
    write_dir: &'a Path,
    marker_version: &'a Version,
    /// The host path of the temp parent; no error message may contain it.
    tmp: &'a str,
}

fn check_one(i: usize, input: &str, cx: &Ctx<'_>, t: &mut Tally) {
    let Ctx {
        read_root,
        read_dir,
        write_root,
        write_dir,
        marker_version,
        tmp,
    } = *cx;
    let p = match RelPath::parse(input) {
        Ok(p) => p,
        Err(e) => {
            t.rejected_by_parse += 1;
            t.record("parse", input, Err(&e), tmp);
            if e.code() != "PATH_ESCAPE" {
                t.violations
                    .push(format!("parse {input:?}: expected PATH_ESCAPE, got {e}"));
            }
            return;
        }
    };
    t.parsed += 1;
    t.record("parse", input, Ok(()), tmp);
    // What a symlink-following open would have reached (metadata first: never open a FIFO here).
    let followed = read_dir.join(p.as_str());
    if std::fs::canonicalize(&followed).is_ok_and(|c| !c.starts_with(read_dir)) {
        t.followed_outside += 1;
        if std::fs::metadata(&followed).is_ok_and(|m| m.is_file())
            && std::fs::read(&followed).is_ok_and(|d| d == MARKER)
        {
            t.followed_marker += 1;
        }
    }
    let lexical = oracle(read_dir, &p);

    // read
    let read = read_root.read(&p, 0, 1 << 20);
    t.record("read", input, read.as_ref().map(|_| ()), tmp);
    match (&read, lexical) {
        (Ok(out), Ok(Some(Kind::File))) => {
            let direct = std::fs::read(read_dir.join(p.as_str())).unwrap();
            if out.data != direct {
                t.violations.push(format!(
                    "read {input:?}: bytes differ from the file inside the root"
                ));
            }
        }
        (Ok(_), other) => t.violations.push(format!(
            "read {input:?} succeeded but the path is not a plain file inside the root ({other:?})"
        )),
        (Err(e), Ok(Some(Kind::File))) => t.violations.push(format!(
            "read {input:?} of a plain file inside the root failed: {e}"
        )),
        (Err(_), _) => {}
    }
    if let Ok(out) = &read
        && (out.data.windows(MARKER.len()).any(|w| w == MARKER) || &out.version == marker_version)
    {
        t.violations
            .push(format!("read {input:?} returned the outside marker"));
    }

    // stat
    let stat = read_root.stat(&p);
    t.record("stat", input, stat.as_ref().map(|_| ()), tmp);
    match (&stat, lexical) {
        (Ok(got), Ok(want)) => {
            if got.map(|m| m.kind) != want {
                t.violations.push(format!(
                    "stat {input:?}: kind {:?}, lexical walk says {want:?}",
                    got.map(|m| m.kind)
                ));
            }
        }
        (Ok(got), Err(why)) => t
            .violations
            .push(format!("stat {input:?} succeeded ({got:?}) though {why}")),
        (Err(_), _) => {}
    }

    // version
    let version = read_root.version(&p);
    t.record("version", input, version.as_ref().map(|_| ()), tmp);
    match (&version, &read) {
        (Ok(Some(v)), Ok(out)) if *v == out.version => {}
        (Ok(Some(_)), _) => t
            .violations
            .push(format!("version {input:?} disagrees with read")),
        (Ok(None), Err(FsError::NotFound { .. })) | (Err(_), Err(_)) => {}
        (Ok(None), _) | (Err(_), Ok(_)) => t.violations.push(format!(
            "version {input:?} disagrees with read: {version:?}"
        )),
    }

    // write_atomic and create_dirs on the scratch copy
    let payload = format!("{PAYLOAD}{i}");
    let lexical_w = oracle(write_dir, &p);
    let written = write_root.write_atomic(&p, payload.as_bytes(), 0o644);
    t.record("write_atomic", input, written.as_ref().map(|_| ()), tmp);
    if written.is_ok() {
        let ok_target = matches!(lexical_w, Ok(None | Some(Kind::File)));
        let landed = std::fs::read(write_dir.join(p.as_str())).ok();
        if !ok_target || landed.as_deref() != Some(payload.as_bytes()) {
            t.violations.push(format!(
                "write_atomic {input:?} succeeded but did not land in the scratch root ({lexical_w:?})"
            ));
        }
    }
    let lexical_d = oracle(write_dir, &p);
    let created = write_root.create_dirs(&p);
    t.record("create_dirs", input, created.as_ref().map(|_| ()), tmp);
    if created.is_ok() {
        let is_dir = std::fs::symlink_metadata(write_dir.join(p.as_str()))
            .map(|m| m.is_dir())
            .unwrap_or(false);
        if !is_dir || !matches!(lexical_d, Ok(None | Some(Kind::Dir))) {
            t.violations.push(format!(
                "create_dirs {input:?} succeeded but no directory inside the scratch root ({lexical_d:?})"
            ));
        }
    }
}

#[test]
fn generated_paths_never_escape_panic_or_block() {
    let started = Instant::now();
    let tmp = tempfile::tempdir().unwrap();
    let parent = tmp.path().canonicalize().unwrap();
    let read_dir = parent.join("root");
    let write_dir = parent.join("scratch");
    let outside = parent.join("outside");
    build_tree(&read_dir);
    build_tree(&write_dir);
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("marker"), MARKER).unwrap();
    std::fs::write(outside.join("a"), MARKER).unwrap();
    std::fs::create_dir(outside.join("dir")).unwrap();
    std::fs::write(outside.join("dir/a"), MARKER).unwrap();
    std::fs::write(parent.join("marker"), MARKER).unwrap();
    std::fs::write(parent.join("a"), MARKER).unwrap();

    let before_outside = snapshot(&outside);
    let before_parent = shallow(&parent);
    let before_read_root = snapshot(&read_dir);
    let before_slash = shallow_names(Path::new("/"));

    let progress = Arc::new(AtomicUsize::new(0));
    let current = Arc::new(Mutex::new(String::new()));
    let (done_tx, done_rx) = mpsc::channel();
    let worker = {
        let progress = Arc::clone(&progress);
        let current = Arc::clone(&current);
        let (read_dir, write_dir) = (read_dir.clone(), write_dir.clone());
        let tmp_str = parent.display().to_string();
        std::thread::spawn(move || {
            let read_fast = Root::open(&read_dir).unwrap();
            let read_walk = Root::open_with_component_walk(&read_dir).unwrap();
            let write_fast = Root::open(&write_dir).unwrap();
            let write_walk = Root::open_with_component_walk(&write_dir).unwrap();
            let marker_version = Version::from_bytes(MARKER);
            let pieces = pieces();
            let mut rng = Rng(SEED);
            let mut tally = Tally::default();
            let mut panics = Vec::new();
            for i in 0..ITERATIONS {
                let input = generate(&mut rng, &pieces);
                *current.lock().unwrap() = input.clone();
                // Alternate the two resolvers (openat2 and the component-walk fallback).
                let (r, w) = if i % 2 == 0 {
                    (&read_fast, &write_fast)
                } else {
                    (&read_walk, &write_walk)
                };
                let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    let cx = Ctx {
                        read_root: r,
                        read_dir: &read_dir,
                        write_root: w,
                        write_dir: &write_dir,
                        marker_version: &marker_version,
                        tmp: &tmp_str,
                    };
                    check_one(i, &input, &cx, &mut tally);
                }));
                if res.is_err() {
                    panics.push(input);
                }
                progress.store(i + 1, Ordering::SeqCst);
            }
            let _ = done_tx.send(());
            (tally, panics)
        })
    };

    // Bounded polling: fail if one iteration stalls (a FIFO open that blocks, a hang in resolution).
    let mut last = (0, Instant::now());
    loop {
        match done_rx.recv_timeout(Duration::from_millis(100)) {
            Ok(()) => break,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        let now = progress.load(Ordering::SeqCst);
        if now != last.0 {
            last = (now, Instant::now());
        } else if last.1.elapsed() > STALL {
            panic!(
                "iteration {now} stalled for {STALL:?} on path {:?}",
                current.lock().unwrap()
            );
        }
    }
    let (tally, panics) = worker
        .join()
        .expect("worker thread panicked outside catch_unwind");
    let elapsed = started.elapsed();

    eprintln!(
        "path_fuzz: seed {SEED:#x}, {ITERATIONS} paths ({} parsed, {} rejected by parse) in {elapsed:?}",
        tally.parsed, tally.rejected_by_parse
    );
    eprintln!(
        "  {} parsed paths resolve outside the root when symlinks are followed ({} to the marker)",
        tally.followed_outside, tally.followed_marker
    );
    for ((op, code), n) in &tally.outcomes {
        eprintln!("  {op:<13} {code:<22} {n}");
    }
    for (msg, n) in &tally.io_messages {
        eprintln!("  FILE_OPERATION_FAILED message {msg:?}: {n}");
    }

    assert!(panics.is_empty(), "panics on inputs: {panics:?}");
    assert!(
        tally.violations.is_empty(),
        "{} violations, first ones: {:#?}",
        tally.violations.len(),
        tally.violations.iter().take(20).collect::<Vec<_>>()
    );
    assert!(
        tally.followed_marker > 0,
        "the generator never aimed at the outside marker"
    );
    // The generator must actually reach every operation's success and failure paths.
    for op in ["read", "stat", "version", "write_atomic", "create_dirs"] {
        assert!(
            tally.outcomes.get(&(op, "ok")).copied().unwrap_or(0) > 0,
            "{op} never succeeded"
        );
    }
    for code in [
        "PATH_ESCAPE",
        "SYMLINK_REJECTED",
        "SPECIAL_FILE_REJECTED",
        "PATH_NOT_DIRECTORY",
    ] {
        assert!(
            tally
                .outcomes
                .iter()
                .any(|((_, c), n)| *c == code && *n > 0),
            "{code} never produced"
        );
    }

    assert_eq!(snapshot(&outside), before_outside, "outside dir changed");
    assert_eq!(shallow(&parent), before_parent, "parent dir changed");
    assert_eq!(snapshot(&read_dir), before_read_root, "read root changed");
    assert_eq!(shallow_names(Path::new("/")), before_slash, "`/` changed");
    // No write left a temporary file behind anywhere in the scratch root.
    let leftovers: Vec<_> = snapshot(&write_dir)
        .into_keys()
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| parse_temp_name(n).is_some())
        })
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
}
