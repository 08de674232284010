//! `Root::open_for_read_nowait` and `OpenedFile::read_all_nowait`: the read an async worker may do
//! itself. It returns exactly what the blocking read returns, refuses what the blocking open
//! refuses (symlinks, paths out of the root, special files), never waits (a FIFO without a writer
//! is not waited on) and says `None` whenever it cannot tell without waiting.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use codespace_runner_fs::{FsError, NOWAIT_MAX_BYTES, RelPath, Root, Version};

fn rel(p: &str) -> RelPath {
    RelPath::parse(p).unwrap()
}

/// True when the root's file system takes the no-wait path at all (the test temp dir is on a
/// local file system on CI; elsewhere the tests say so and check the fallback only).
fn nowait_available(root: &Root, probe: &str) -> bool {
    let ok = matches!(root.open_for_read_nowait(&rel(probe)), Some(Ok(_)));
    if !ok {
        codespace_test_skip::skip(
            &codespace_test_skip::this_test(),
            "the temp dir's file system or kernel does not allow cached opens",
        );
    }
    ok
}

#[test]
fn a_cached_small_file_reads_the_same_bytes_and_version_as_the_blocking_read() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("d/e")).unwrap();
    let body: Vec<u8> = (0..10_240u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(dir.path().join("top.bin"), &body).unwrap();
    std::fs::write(dir.path().join("d/e/deep.txt"), "deep\n").unwrap();
    std::fs::write(dir.path().join("empty"), "").unwrap();
    let root = Root::open(dir.path()).unwrap();
    // Opened once the slow way: every component is in the lookup cache afterwards.
    for p in ["top.bin", "d/e/deep.txt", "empty"] {
        root.open_for_read(&rel(p)).unwrap();
    }
    if !nowait_available(&root, "top.bin") {
        return;
    }
    for p in ["top.bin", "d/e/deep.txt", "empty"] {
        let fast = root.open_for_read_nowait(&rel(p)).unwrap().unwrap();
        let slow = root.open_for_read(&rel(p)).unwrap();
        assert_eq!(fast.id, slow.id, "{p}");
        assert_eq!(fast.links, slow.links, "{p}");
        let data = fast
            .read_all_nowait()
            .expect("a file just written is cached");
        let hashed = slow.hash_window(0, u64::MAX, u64::MAX).unwrap();
        assert_eq!(data, hashed.data, "{p}");
        assert_eq!(Version::from_bytes(&data), hashed.version, "{p}");
        assert!(fast.unchanged());
    }
}

#[test]
fn refusals_are_the_blocking_opens_refusals_or_none() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    std::fs::write(r.join("file"), "x").unwrap();
    std::fs::create_dir(r.join("dir")).unwrap();
    std::os::unix::fs::symlink("file", r.join("link")).unwrap();
    std::os::unix::fs::symlink("/etc", r.join("etc")).unwrap();
    std::os::unix::fs::symlink(".", r.join("loop")).unwrap();
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        r.join("fifo"),
        rustix::fs::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    let root = Root::open(r).unwrap();
    root.open_for_read(&rel("file")).unwrap();
    if !nowait_available(&root, "file") {
        return;
    }
    // Symlinks (leaf or on the way) are never followed: no file comes back.
    for p in ["link", "etc/passwd", "loop/file", "missing", "dir/missing"] {
        assert!(
            !matches!(root.open_for_read_nowait(&rel(p)), Some(Ok(_))),
            "{p} must not be opened"
        );
        assert!(root.open_for_read(&rel(p)).is_err(), "{p}");
    }
    // A FIFO with no writer: answered at once, as the special file it is.
    assert!(matches!(
        root.open_for_read_nowait(&rel("fifo")),
        Some(Err(FsError::NotRegularFile { .. }))
    ));
    // A directory is not a regular file either.
    assert!(matches!(
        root.open_for_read_nowait(&rel("dir")),
        Some(Err(FsError::NotRegularFile { .. }))
    ));
    // The root itself is never a file to read.
    assert!(root.open_for_read_nowait(&RelPath::root()).is_none());
}

#[test]
fn a_large_file_or_a_component_walk_root_takes_the_blocking_path() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big");
    std::fs::write(
        &big,
        vec![b'a'; usize::try_from(NOWAIT_MAX_BYTES).unwrap() + 1],
    )
    .unwrap();
    std::fs::write(dir.path().join("small"), "s").unwrap();
    let root = Root::open(dir.path()).unwrap();
    root.open_for_read(&rel("big")).unwrap();
    if nowait_available(&root, "big") {
        let f = root.open_for_read_nowait(&rel("big")).unwrap().unwrap();
        assert!(f.read_all_nowait().is_none(), "above NOWAIT_MAX_BYTES");
    }
    // The component walk stands for a kernel without openat2: never a cached open.
    let walk = Root::open_with_component_walk(dir.path()).unwrap();
    walk.open_for_read(&rel("small")).unwrap();
    assert!(walk.open_for_read_nowait(&rel("small")).is_none());
}

#[test]
fn a_file_that_changed_since_it_was_opened_is_not_read_as_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    std::fs::write(&path, "0123456789").unwrap();
    let root = Root::open(dir.path()).unwrap();
    root.open_for_read(&rel("f")).unwrap();
    if !nowait_available(&root, "f") {
        return;
    }
    let f = root.open_for_read_nowait(&rel("f")).unwrap().unwrap();
    std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .and_then(|mut w| std::io::Write::write_all(&mut w, b"more"))
        .unwrap();
    // Grown past the size it was opened with: the read sees the extra byte and declines.
    assert!(f.read_all_nowait().is_none());
    assert!(!f.unchanged());
}
