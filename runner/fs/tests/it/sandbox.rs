//! PathSandbox hostile corpus: every hostile spelling or filesystem trap maps to its exact error code,
//! for both resolvers (openat2 and the component-walk fallback).
// Helper functions of this test crate are test code too (clippy.toml only covers #[test] fns).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::common;

use std::os::unix::net::UnixListener;
use std::sync::mpsc;
use std::time::Duration;

use codespace_runner_fs::{FsError, Kind, RelPath, Root};
use common::{Fixture, MARKER, rel};
use rustix::fs::{FileType, Mode};

/// Expected outcome of reading a path.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// The read succeeds and returns these bytes.
    Ok(&'static [u8]),
    /// The read fails with this code.
    Code(&'static str),
}

/// Builds the hostile fixture. Returns whether a character device could be created.
fn build(fx: &Fixture) -> bool {
    fx.write("file.txt", b"hello");
    fx.write("sub/inner.txt", b"inner");
    fx.write(".hidden/h.txt", b"hidden");
    fx.write("...", b"three dots");
    fx.write("..a", b"dot dot a");
    fx.write("\u{2024}\u{2024}/x", b"one-dot leaders");
    fx.write("\u{FF0E}\u{FF0E}/x", b"fullwidth dots");
    fx.write("\u{2025}/x", b"two-dot leader");
    fx.symlink("link_in", "file.txt");
    fx.symlink("link_etc", "/etc/passwd");
    fx.symlink("link_etcdir", "/etc");
    fx.symlink("dirlink", "sub");
    fx.symlink("rootlink", "/");
    fx.symlink("up", "../outside");
    fx.symlink("abs_out", &fx.outside);
    fx.symlink("dangling", "does-not-exist");
    fx.symlink("selfloop", "selfloop");
    fx.symlink("devnull", "/dev/null");
    fx.symlink("proclink", "/proc");
    fx.symlink("sub/link_up", "../file.txt");
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        fx.abs("fifo"),
        Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    let listener = UnixListener::bind(fx.abs("sock")).unwrap();
    drop(listener); // the socket inode stays on disk
    rustix::fs::mknodat(
        rustix::fs::CWD,
        fx.abs("chardev"),
        FileType::CharacterDevice,
        Mode::from_bits_truncate(0o666),
        rustix::fs::makedev(1, 3),
    )
    .is_ok()
}

fn corpus(has_chardev: bool) -> Vec<(String, Expect)> {
    use Expect::{Code, Ok};
    const ESC: &str = "PATH_ESCAPE";
    const LINK: &str = "SYMLINK_REJECTED";
    const SPECIAL: &str = "SPECIAL_FILE_REJECTED";
    const NOTDIR: &str = "PATH_NOT_DIRECTORY";
    const MISSING: &str = "FILE_NOT_FOUND";
    let mut cases: Vec<(&str, Expect)> = vec![
        // `..` forms
        ("..", Code(ESC)),
        ("a/../..", Code(ESC)),
        ("a/..", Code(ESC)),
        ("../x", Code(ESC)),
        ("./../x", Code(ESC)),
        ("a/b/../../..", Code(ESC)),
        ("sub/../file.txt", Code(ESC)),
        ("../outside/secret", Code(ESC)),
        ("../root/file.txt", Code(ESC)),
        ("sub/..", Code(ESC)),
        // absolute
        ("/etc/passwd", Code(ESC)),
        ("//x", Code(ESC)),
        ("/", Code(ESC)),
        ("/proc/self/root/etc/passwd", Code(ESC)),
        // NUL and empty
        ("file.txt\0", Code(ESC)),
        ("a\0/../../etc/passwd", Code(ESC)),
        ("", Code(ESC)),
        // leaf symlinks
        ("link_in", Code(LINK)),
        ("link_in/", Code(LINK)),
        ("link_etc", Code(LINK)),
        ("dangling", Code(LINK)),
        ("selfloop", Code(LINK)),
        ("sub/link_up", Code(LINK)),
        ("devnull", Code(LINK)),
        // ancestor symlinks
        ("dirlink/inner.txt", Code(LINK)),
        ("dirlink/", Code(LINK)),
        ("rootlink/etc/passwd", Code(LINK)),
        ("link_etcdir/passwd", Code(LINK)),
        ("up/secret", Code(LINK)),
        ("abs_out/secret", Code(LINK)),
        ("proclink/self/root/etc/passwd", Code(LINK)),
        ("selfloop/x", Code(LINK)),
        // special files (must not hang)
        ("fifo", Code(SPECIAL)),
        ("sock", Code(SPECIAL)),
        ("sub", Code(SPECIAL)),
        (".", Code(SPECIAL)),
        // files used as directories
        ("file.txt/x", Code(NOTDIR)),
        ("sub/inner.txt/deeper/x", Code(NOTDIR)),
        ("fifo/x", Code(NOTDIR)),
        // missing
        ("missing.txt", Code(MISSING)),
        ("missing/dir/x", Code(MISSING)),
        ("%2e%2e/x", Code(MISSING)),
        ("..\\x", Code(MISSING)),
        // unicode look-alikes of `..` are plain names
        ("\u{2024}\u{2024}/x", Ok(b"one-dot leaders")),
        ("\u{FF0E}\u{FF0E}/x", Ok(b"fullwidth dots")),
        ("\u{2025}/x", Ok(b"two-dot leader")),
        ("\u{2024}\u{2024}/\u{2024}\u{2024}/x", Code(MISSING)),
        // successful spellings
        ("file.txt", Ok(b"hello")),
        ("./file.txt", Ok(b"hello")),
        ("sub//inner.txt", Ok(b"inner")),
        ("sub/./inner.txt/", Ok(b"inner")),
        (".hidden/h.txt", Ok(b"hidden")),
        ("...", Ok(b"three dots")),
        ("..a", Ok(b"dot dot a")),
    ];
    if has_chardev {
        cases.push(("chardev", Code(SPECIAL)));
    } else {
        codespace_test_skip::skip(
            &format!("{} (chardev case)", codespace_test_skip::this_test()),
            "mknod of a character device not permitted here",
        );
    }
    let mut owned: Vec<(String, Expect)> =
        cases.into_iter().map(|(p, e)| (p.to_owned(), e)).collect();
    owned.push(("c".repeat(256), Code(ESC)));
    owned.push((format!("sub/{}", "d".repeat(256)), Code(ESC)));
    owned.push((vec!["abcd"; 1000].join("/"), Code(ESC))); // 4999 bytes
    owned.push(("x".repeat(5000), Code(ESC)));
    owned
}

fn read_via(root: &Root, input: &str) -> Result<Vec<u8>, FsError> {
    let p = RelPath::parse(input)?;
    Ok(root.read(&p, 0, 1 << 20)?.data)
}

/// Runs the whole corpus against `root` on a worker thread so a hang (e.g. a FIFO open) fails the test.
fn run_corpus(fx: &Fixture, root: Root, has_chardev: bool) {
    let cases = corpus(has_chardev);
    assert!(cases.len() >= 40, "corpus has {} cases", cases.len());
    let root_abs = fx.root_path.display().to_string();
    let (tx, rx) = mpsc::channel();
    let worker = std::thread::spawn(move || {
        let mut failures = Vec::new();
        for (input, expect) in &cases {
            let got = read_via(&root, input);
            let fine = match (expect, &got) {
                (Expect::Ok(want), Ok(data)) => data.as_slice() == *want,
                (Expect::Code(code), Err(e)) => {
                    e.code() == *code && !e.to_string().contains(&root_abs)
                }
                _ => false,
            };
            if let Ok(data) = &got {
                assert!(
                    !data.windows(MARKER.len()).any(|w| w == MARKER),
                    "{input:?} leaked"
                );
            }
            if !fine {
                failures.push(format!("{input:?}: expected {expect:?}, got {got:?}"));
            }
        }
        tx.send(failures).unwrap();
    });
    let failures = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("corpus did not finish: a read hung");
    worker.join().unwrap();
    assert!(
        failures.is_empty(),
        "corpus failures:\n{}",
        failures.join("\n")
    );
}

#[test]
fn hostile_corpus_openat2() {
    let fx = Fixture::new();
    let has_chardev = build(&fx);
    run_corpus(&fx, fx.root(), has_chardev);
}

#[test]
fn hostile_corpus_component_walk_fallback() {
    let fx = Fixture::new();
    let has_chardev = build(&fx);
    let root = Root::open_with_component_walk(&fx.root_path).unwrap();
    run_corpus(&fx, root, has_chardev);
}

#[test]
fn stat_is_lstat_and_checks_ancestors() {
    let fx = Fixture::new();
    build(&fx);
    for root in [
        fx.root(),
        Root::open_with_component_walk(&fx.root_path).unwrap(),
    ] {
        assert_eq!(
            root.stat(&rel("link_in")).unwrap().unwrap().kind,
            Kind::Symlink
        );
        assert_eq!(
            root.stat(&rel("rootlink")).unwrap().unwrap().kind,
            Kind::Symlink
        );
        assert_eq!(root.stat(&rel("fifo")).unwrap().unwrap().kind, Kind::Other);
        assert_eq!(root.stat(&rel("sub")).unwrap().unwrap().kind, Kind::Dir);
        assert_eq!(root.stat(&rel(".")).unwrap().unwrap().kind, Kind::Dir);
        let meta = root.stat(&rel("file.txt")).unwrap().unwrap();
        assert_eq!((meta.kind, meta.size), (Kind::File, 5));
        assert_eq!(root.stat(&rel("missing")).unwrap(), None);
        assert_eq!(root.stat(&rel("missing/deeper/x")).unwrap(), None);
        let e = root.stat(&rel("dirlink/inner.txt")).unwrap_err();
        assert_eq!(e.code(), "SYMLINK_REJECTED");
        let e = root.stat(&rel("rootlink/etc/passwd")).unwrap_err();
        assert_eq!(e.code(), "SYMLINK_REJECTED");
        let e = root.stat(&rel("file.txt/x")).unwrap_err();
        assert_eq!(e.code(), "PATH_NOT_DIRECTORY");
    }
}

#[test]
fn version_absent_present_and_refused() {
    let fx = Fixture::new();
    build(&fx);
    let root = fx.root();
    assert_eq!(root.version(&rel("missing")).unwrap(), None);
    assert_eq!(
        root.version(&rel("file.txt")).unwrap().unwrap().as_str(),
        codespace_runner_fs::Version::from_bytes(b"hello").as_str()
    );
    assert_eq!(
        root.version(&rel("link_in")).unwrap_err().code(),
        "SYMLINK_REJECTED"
    );
    assert_eq!(
        root.version(&rel("fifo")).unwrap_err().code(),
        "SPECIAL_FILE_REJECTED"
    );
}

#[test]
fn open_root_errors_do_not_leak_absolute_paths() {
    let fx = Fixture::new();
    fx.write("plain", b"x");
    let missing = fx.tmp.path().join("nope");
    let e = Root::open(&missing).unwrap_err();
    assert_eq!(e.code(), "FILE_NOT_FOUND");
    assert!(!e.to_string().contains(&fx.tmp.path().display().to_string()));
    let e = Root::open(&fx.abs("plain")).unwrap_err();
    assert_eq!(e.code(), "PATH_NOT_DIRECTORY");
    assert!(!e.to_string().contains(&fx.tmp.path().display().to_string()));
}
