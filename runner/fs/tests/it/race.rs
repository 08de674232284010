//! Swap race: a directory inside the root is atomically exchanged with a symlink pointing outside while
//! reads and writes go through it. No byte from outside may ever be returned, nothing may be created outside.
// Helper functions of this test crate are test code too (clippy.toml only covers #[test] fns).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use codespace_runner_fs::{FsError, Root};
use common::{Fixture, MARKER, rel};
use rustix::fs::RenameFlags;

const READS: usize = 10_000;

/// A race must show both outcomes (a read inside and a refusal) before it ends: on a loaded
/// machine the swapper may sleep through all of `READS`, so the loop goes on until it has seen
/// both, up to this many rounds (a swapper that never runs fails the test, never hangs it).
const MAX_ROUNDS: usize = 50 * READS;

/// Root with `d/` (real dir, inside content) and `swap -> <outside>` (absolute symlink).
fn setup() -> Fixture {
    let fx = Fixture::new();
    let target = fx.outside.clone();
    setup_with_target(fx, &target)
}

/// Like [`setup`] but the symlink points at `target`.
fn setup_with_target(fx: Fixture, target: &std::path::Path) -> Fixture {
    fx.write("d/etc/passwd", b"inside passwd");
    fx.write("d/file", b"inside file");
    fx.symlink("swap", target);
    fx
}

/// Starts a thread exchanging `d` and `swap` (renameat2 RENAME_EXCHANGE) until `stop` is set.
fn start_swapper(
    fx: &Fixture,
    stop: Arc<AtomicBool>,
    swaps: Arc<AtomicU64>,
) -> std::thread::JoinHandle<()> {
    let dir = std::fs::File::open(&fx.root_path).unwrap();
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            rustix::fs::renameat_with(&dir, "d", &dir, "swap", RenameFlags::EXCHANGE).unwrap();
            swaps.fetch_add(1, Ordering::Relaxed);
        }
    })
}

#[test]
fn swap_race_reads_never_leave_root_openat2() {
    race_with(|path| Root::open(path).unwrap());
}

#[test]
fn swap_race_reads_never_leave_root_component_walk() {
    race_with(|path| Root::open_with_component_walk(path).unwrap());
}

#[test]
fn swap_race_with_link_to_filesystem_root() {
    // `d -> /`: a leak would return the host's real /etc/passwd, which never starts with "inside".
    let fx = setup_with_target(Fixture::new(), std::path::Path::new("/"));
    let root = fx.root();
    race_reads_on(&fx, root);
}

fn race_with(open: impl Fn(&std::path::Path) -> Root) {
    let fx = setup();
    let root = open(&fx.root_path);
    race_reads_on(&fx, root);
}

fn race_reads_on(fx: &Fixture, root: Root) {
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicU64::new(0));
    let swapper = start_swapper(fx, stop.clone(), swaps.clone());
    let paths = [rel("d/etc/passwd"), rel("d/file")];
    let (mut ok, mut refused) = (0usize, 0usize);
    let mut i = 0;
    while i < READS || ((ok == 0 || refused == 0) && i < MAX_ROUNDS) {
        i += 1;
        if i > READS {
            // Past the planned rounds: let the swapper run.
            std::thread::yield_now();
        }
        for p in &paths {
            match root.read(p, 0, 1 << 16) {
                Ok(out) => {
                    assert!(
                        !out.data.windows(MARKER.len()).any(|w| w == MARKER),
                        "read {i} of {p} returned bytes from outside the root"
                    );
                    assert!(out.data.starts_with(b"inside"), "unexpected content");
                    ok += 1;
                }
                Err(FsError::SymlinkRejected { .. } | FsError::NotFound { .. }) => refused += 1,
                Err(e) => panic!("unexpected error on {p}: {e}"),
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    println!(
        "swap race: {ok} reads inside, {refused} refused, {} swaps",
        swaps.load(Ordering::Relaxed)
    );
    assert!(swaps.load(Ordering::Relaxed) > 0, "the swapper never ran");
    assert_eq!(ok + refused, i * paths.len());
    assert!(ok > 0, "no read ever succeeded");
    assert!(
        refused > 0,
        "no read ever observed the symlink; race not exercised"
    );
}

#[test]
fn swap_race_writes_never_land_outside() {
    let fx = setup();
    let before = fx.outside_listing();
    let root = fx.root();
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicU64::new(0));
    let swapper = start_swapper(&fx, stop.clone(), swaps.clone());
    let (mut ok, mut refused) = (0usize, 0usize);
    let mut i = 0;
    // Until a write has landed inside (the swapper may sleep through the planned rounds on a
    // loaded machine), bounded as the reads are.
    while i < 2_000 || (ok == 0 && i < MAX_ROUNDS) {
        i += 1;
        if i > 2_000 {
            std::thread::yield_now();
        }
        let name = format!("d/new-{}", i % 7);
        match root.write_atomic(&rel(&name), b"written", 0o644) {
            Ok(()) => ok += 1,
            Err(FsError::SymlinkRejected { .. } | FsError::NotFound { .. }) => refused += 1,
            Err(e) => panic!("unexpected error: {e}"),
        }
        match root.create_dirs(&rel("d/etc/made/deeper")) {
            Ok(made) => {
                for dir in made.iter().rev() {
                    let _ = root.remove_empty_dir(dir);
                }
            }
            Err(FsError::SymlinkRejected { .. } | FsError::NotFound { .. }) => {}
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    println!("write race: {ok} written, {refused} refused");
    assert_eq!(
        fx.outside_listing(),
        before,
        "something was created outside the root"
    );
    assert_eq!(std::fs::read(fx.outside.join("file")).unwrap(), MARKER);
    assert!(ok > 0);
}
