//! Mutations and reads: write_atomic, create_dirs, rename_noreplace, removals (happy paths and refusal
//! through symlinks), and windowed reads with whole-file versions.
// Helper functions of this test crate are test code too (clippy.toml only covers #[test] fns).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::common;

use std::os::unix::fs::PermissionsExt;

use codespace_runner_fs::{Kind, TEMP_PREFIX, Version};
use common::{Fixture, MARKER, rel};
use sha2::{Digest, Sha256};

fn mode_of(fx: &Fixture, p: &str) -> u32 {
    std::fs::symlink_metadata(fx.abs(p))
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

fn no_temp_files(fx: &Fixture, dir: &str) -> bool {
    std::fs::read_dir(fx.abs(dir)).unwrap().all(|e| {
        !e.unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with(TEMP_PREFIX)
    })
}

#[test]
fn write_atomic_creates_and_replaces_with_mode() {
    let fx = Fixture::new();
    fx.mkdir("src");
    let root = fx.root();
    root.write_atomic(&rel("src/a.txt"), b"one", 0o600).unwrap();
    assert_eq!(std::fs::read(fx.abs("src/a.txt")).unwrap(), b"one");
    assert_eq!(mode_of(&fx, "src/a.txt"), 0o600);
    root.write_atomic(&rel("src/a.txt"), b"two!", 0o755)
        .unwrap();
    assert_eq!(std::fs::read(fx.abs("src/a.txt")).unwrap(), b"two!");
    assert_eq!(mode_of(&fx, "src/a.txt"), 0o755);
    assert!(no_temp_files(&fx, "src"));
}

#[test]
fn write_atomic_refuses_symlinks_specials_and_missing_parent() {
    let fx = Fixture::new();
    fx.mkdir("sub");
    fx.symlink("dirlink", "sub");
    fx.symlink("out", &fx.outside);
    fx.symlink("leaf", fx.outside.join("secret"));
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        fx.abs("fifo"),
        rustix::fs::Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    let before = fx.outside_listing();
    let root = fx.root();
    let cases = [
        ("dirlink/new.txt", "SYMLINK_REJECTED"),
        ("out/new.txt", "SYMLINK_REJECTED"),
        ("out/secret", "SYMLINK_REJECTED"),
        ("leaf", "SYMLINK_REJECTED"),
        ("fifo", "SPECIAL_FILE_REJECTED"),
        ("sub", "SPECIAL_FILE_REJECTED"),
        ("missing/new.txt", "FILE_NOT_FOUND"),
    ];
    for (p, code) in cases {
        let err = root.write_atomic(&rel(p), b"evil", 0o644).unwrap_err();
        assert_eq!(err.code(), code, "{p}");
    }
    assert_eq!(fx.outside_listing(), before);
    assert_eq!(std::fs::read(fx.outside.join("secret")).unwrap(), MARKER);
    assert!(
        std::fs::symlink_metadata(fx.abs("leaf"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert!(!fx.abs("sub/new.txt").exists());
    assert!(no_temp_files(&fx, "."));
    let root_err = root.write_atomic(&rel("."), b"x", 0o644).unwrap_err();
    assert_eq!(root_err.code(), "FILE_OPERATION_FAILED");
}

#[test]
fn create_dirs_reports_created_outermost_first() {
    let fx = Fixture::new();
    fx.mkdir("a");
    let root = fx.root();
    let made = root.create_dirs(&rel("a/b/c/d")).unwrap();
    let made: Vec<&str> = made.iter().map(|p| p.as_str()).collect();
    assert_eq!(made, vec!["a/b", "a/b/c", "a/b/c/d"]);
    assert!(fx.abs("a/b/c/d").is_dir());
    assert!(root.create_dirs(&rel("a/b/c/d")).unwrap().is_empty());
    assert!(root.create_dirs(&rel(".")).unwrap().is_empty());
}

#[test]
fn create_dirs_refuses_symlinks_and_files() {
    let fx = Fixture::new();
    fx.mkdir("sub");
    fx.mkdir("x/y");
    fx.symlink("dirlink", "sub");
    fx.symlink("out", &fx.outside);
    fx.symlink("x/y/link", &fx.outside);
    fx.write("file", b"f");
    let before = fx.outside_listing();
    let root = fx.root();
    let cases = [
        ("dirlink/a/b", "SYMLINK_REJECTED"),
        ("out/evil", "SYMLINK_REJECTED"),
        ("x/y/link/z", "SYMLINK_REJECTED"),
        ("file/x", "PATH_NOT_DIRECTORY"),
        ("file", "PATH_NOT_DIRECTORY"),
    ];
    for (p, code) in cases {
        assert_eq!(root.create_dirs(&rel(p)).unwrap_err().code(), code, "{p}");
    }
    assert_eq!(fx.outside_listing(), before);
    assert!(!fx.abs("sub/a").exists());
    assert_eq!(std::fs::read_dir(fx.abs("x/y")).unwrap().count(), 1);
}

#[test]
fn rename_noreplace_moves_and_refuses() {
    let fx = Fixture::new();
    fx.write("a.txt", b"a");
    fx.write("b.txt", b"b");
    fx.mkdir("sub");
    fx.symlink("dirlink", "sub");
    fx.symlink("link", "a.txt");
    let root = fx.root();
    root.rename_noreplace(&rel("a.txt"), &rel("sub/moved.txt"))
        .unwrap();
    assert!(!fx.abs("a.txt").exists());
    assert_eq!(std::fs::read(fx.abs("sub/moved.txt")).unwrap(), b"a");
    let err = root
        .rename_noreplace(&rel("b.txt"), &rel("sub/moved.txt"))
        .unwrap_err();
    assert!(matches!(
        err,
        codespace_runner_fs::FsError::AlreadyExists { .. }
    ));
    assert_eq!(std::fs::read(fx.abs("b.txt")).unwrap(), b"b");
    assert_eq!(
        root.rename_noreplace(&rel("b.txt"), &rel("dirlink/x"))
            .unwrap_err()
            .code(),
        "SYMLINK_REJECTED"
    );
    assert_eq!(
        root.rename_noreplace(&rel("dirlink/moved.txt"), &rel("c.txt"))
            .unwrap_err()
            .code(),
        "SYMLINK_REJECTED"
    );
    assert_eq!(
        root.rename_noreplace(&rel("link"), &rel("c.txt"))
            .unwrap_err()
            .code(),
        "SYMLINK_REJECTED"
    );
    assert_eq!(
        root.rename_noreplace(&rel("nope"), &rel("c.txt"))
            .unwrap_err()
            .code(),
        "FILE_NOT_FOUND"
    );
    assert!(fx.abs("b.txt").exists());
    assert!(!fx.abs("c.txt").exists());
}

#[test]
fn remove_file_and_empty_dir() {
    let fx = Fixture::new();
    fx.write("f.txt", b"f");
    fx.write("full/x", b"x");
    fx.mkdir("empty");
    fx.mkdir("sub");
    fx.write("sub/keep.txt", b"k");
    fx.symlink("dirlink", "sub");
    fx.symlink("leaf", fx.outside.join("secret"));
    let root = fx.root();

    root.remove_file(&rel("f.txt")).unwrap();
    assert!(!fx.abs("f.txt").exists());
    assert_eq!(
        root.remove_file(&rel("f.txt")).unwrap_err().code(),
        "FILE_NOT_FOUND"
    );
    assert_eq!(
        root.remove_file(&rel("dirlink/keep.txt"))
            .unwrap_err()
            .code(),
        "SYMLINK_REJECTED"
    );
    assert!(fx.abs("sub/keep.txt").exists());
    assert_eq!(
        root.remove_file(&rel("empty")).unwrap_err().code(),
        "FILE_OPERATION_FAILED"
    );
    // a symlink leaf is removed itself, never its target
    root.remove_file(&rel("leaf")).unwrap();
    assert!(std::fs::symlink_metadata(fx.abs("leaf")).is_err());
    assert_eq!(std::fs::read(fx.outside.join("secret")).unwrap(), MARKER);

    root.remove_empty_dir(&rel("empty")).unwrap();
    assert!(!fx.abs("empty").exists());
    assert_eq!(
        root.remove_empty_dir(&rel("full")).unwrap_err().code(),
        "FILE_OPERATION_FAILED"
    );
    assert_eq!(
        root.remove_empty_dir(&rel("dirlink")).unwrap_err().code(),
        "SYMLINK_REJECTED"
    );
    assert_eq!(
        root.remove_empty_dir(&rel("full/x")).unwrap_err().code(),
        "PATH_NOT_DIRECTORY"
    );
    assert!(fx.abs("sub").is_dir());
}

#[test]
fn read_window_and_whole_file_version() {
    let fx = Fixture::new();
    let content: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    fx.write("big.bin", &content);
    let root = fx.root();
    let want = format!("sha256:{}", hex::encode(Sha256::digest(&content)));

    let out = root.read(&rel("big.bin"), 65_530, 20).unwrap();
    assert_eq!(out.data, &content[65_530..65_550]); // window crossing a 64 KiB chunk boundary
    assert_eq!(out.size, 200_000);
    assert_eq!(out.version.as_str(), want);

    let tail = root.read(&rel("big.bin"), 199_990, 1_000).unwrap();
    assert_eq!(tail.data, &content[199_990..]);
    assert_eq!(tail.version.as_str(), want);

    let past = root.read(&rel("big.bin"), 300_000, 10).unwrap();
    assert!(past.data.is_empty());
    assert_eq!(past.size, 200_000);

    let whole = root.read(&rel("big.bin"), 0, u64::MAX).unwrap();
    assert_eq!(whole.data, content);

    let all = root.read_all(&rel("big.bin")).unwrap();
    assert_eq!(all.data, content);
    assert_eq!(all.version, Version::from_bytes(&content));
    assert_eq!(all.mode, mode_of(&fx, "big.bin"));
    assert_eq!(
        root.version(&rel("big.bin")).unwrap().unwrap().as_str(),
        want
    );
    assert_eq!(
        root.stat(&rel("big.bin")).unwrap().unwrap().kind,
        Kind::File
    );
}
