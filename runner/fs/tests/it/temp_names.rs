//! The server's temporary names: `write_atomic` names its temp file after the root's instance, `walk`
//! never lists a known instance's temp files (a user's look-alike is listed), and the start-up sweep
//! removes only regular temp files of the instances it is given, never through a symlink.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::common;

use std::sync::{Arc, Mutex};

use codespace_runner_fs::{FsError, Root, TEMP_PREFIX, TempNames, WalkLimits, parse_temp_name};
use common::{Fixture, rel};

const OWN: &str = "00000000000000aa";
const DEAD: &str = "00000000000000bb";
const UNKNOWN: &str = "00000000000000cc";

fn names() -> Arc<TempNames> {
    let t = TempNames::new(OWN).unwrap();
    t.remember(DEAD);
    Arc::new(t)
}

fn root(fx: &Fixture, names: &Arc<TempNames>) -> Root {
    fx.root().with_temp_names(Arc::clone(names))
}

/// A tree with temp files of the own and a dead instance, and user files that only look like them.
fn planted() -> Fixture {
    let fx = Fixture::new();
    fx.write("a.txt", b"a");
    fx.write(&format!("{TEMP_PREFIX}{OWN}-1"), b"own");
    fx.write(&format!("sub/{TEMP_PREFIX}{DEAD}-7"), b"dead");
    fx.write(&format!("sub/deep/{TEMP_PREFIX}{DEAD}-8"), b"dead");
    fx.write("sub/z.txt", b"z");
    // A user's files with similar names: never hidden, never touched.
    fx.write(&format!("{TEMP_PREFIX}foo"), b"user");
    fx.write(&format!("{TEMP_PREFIX}{UNKNOWN}-1"), b"user");
    fx.write(&format!("{TEMP_PREFIX}{DEAD}"), b"user, the old scheme");
    // A directory named like a temp file is a directory, not a temp file.
    fx.write(&format!("{TEMP_PREFIX}{DEAD}-9/inner.txt"), b"user");
    fx
}

fn listed(root: &Root) -> Vec<String> {
    root.walk(&WalkLimits::default())
        .unwrap()
        .entries
        .into_iter()
        .map(|e| e.path)
        .collect()
}

#[test]
fn write_atomic_names_its_temp_file_after_the_instance_and_leaves_none() {
    let fx = Fixture::new();
    let names = names();
    let root = root(&fx, &names);
    root.write_atomic(&rel("f.txt"), b"data", 0o644).unwrap();
    assert_eq!(std::fs::read(fx.abs("f.txt")).unwrap(), b"data");
    assert_eq!(names.open_count(), 0, "the temp file was renamed away");
    let next = names.next_name();
    let (id, n) = parse_temp_name(&next).unwrap();
    assert_eq!(id, OWN);
    assert_eq!(n, 2, "the first write used counter 1");
    let leftovers: Vec<_> = std::fs::read_dir(&fx.root_path)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with(TEMP_PREFIX))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn sealed_names_refuse_every_write() {
    let fx = Fixture::new();
    let names = names();
    let root = root(&fx, &names);
    assert!(names.seal(), "nothing in flight");
    let err = root
        .write_atomic(&rel("f.txt"), b"data", 0o644)
        .unwrap_err();
    assert!(matches!(err, FsError::Io { .. }), "{err:?}");
    assert!(!fx.abs("f.txt").exists());
}

#[test]
fn walk_hides_known_instances_temp_files_and_lists_look_alikes() {
    let fx = planted();
    let names = names();
    let got = listed(&root(&fx, &names));
    let expected = vec![
        format!("{TEMP_PREFIX}{DEAD}"),
        format!("{TEMP_PREFIX}{DEAD}-9"),
        format!("{TEMP_PREFIX}{DEAD}-9/inner.txt"),
        format!("{TEMP_PREFIX}{UNKNOWN}-1"),
        format!("{TEMP_PREFIX}foo"),
        "a.txt".to_string(),
        "sub".to_string(),
        "sub/deep".to_string(),
        "sub/z.txt".to_string(),
    ];
    assert_eq!(got, expected);
    // A root with unrelated names lists the planted temp files like any file.
    let plain = fx.root().walk(&WalkLimits::default()).unwrap();
    assert_eq!(plain.entries.len(), expected.len() + 3);
}

#[test]
fn the_entry_cap_counts_listed_entries_only() {
    let fx = Fixture::new();
    let names = names();
    for i in 0..20 {
        fx.write(&format!("{TEMP_PREFIX}{OWN}-{i}"), b"t");
    }
    fx.write("x.txt", b"x");
    let limits = WalkLimits {
        max_entries: 1,
        ..WalkLimits::default()
    };
    let w = root(&fx, &names).walk(&limits).unwrap();
    let paths: Vec<_> = w.entries.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, vec!["x.txt"]);
}

#[test]
fn sweep_removes_only_regular_temp_files_of_the_given_instances() {
    let fx = planted();
    let names = names();
    let root = root(&fx, &names);
    let sweep = root
        .sweep_server_temps(&|id| id == DEAD, &WalkLimits::default())
        .unwrap();
    assert_eq!(sweep.removed, 2);
    assert_eq!(sweep.failed, 0);
    assert!(!sweep.incomplete);
    assert!(!fx.abs(&format!("sub/{TEMP_PREFIX}{DEAD}-7")).exists());
    assert!(!fx.abs(&format!("sub/deep/{TEMP_PREFIX}{DEAD}-8")).exists());
    // The own instance's file (a live writer's) and every look-alike stay.
    for kept in [
        format!("{TEMP_PREFIX}{OWN}-1"),
        format!("{TEMP_PREFIX}foo"),
        format!("{TEMP_PREFIX}{UNKNOWN}-1"),
        format!("{TEMP_PREFIX}{DEAD}"),
        format!("{TEMP_PREFIX}{DEAD}-9/inner.txt"),
        "a.txt".to_string(),
        "sub/z.txt".to_string(),
    ] {
        assert!(fx.abs(&kept).exists(), "{kept} was removed");
    }
}

#[test]
fn sweep_never_follows_a_symlink() {
    let fx = Fixture::new();
    let outside_temp = fx.outside.join(format!("{TEMP_PREFIX}{DEAD}-1"));
    std::fs::write(&outside_temp, b"outside").unwrap();
    fx.symlink("out", &fx.outside);
    // A symlink named like a temp file is not a regular file either.
    fx.symlink(&format!("{TEMP_PREFIX}{DEAD}-2"), &outside_temp);
    let names = names();
    let sweep = root(&fx, &names)
        .sweep_server_temps(&|id| id == DEAD, &WalkLimits::default())
        .unwrap();
    assert_eq!(sweep.removed, 0);
    assert!(outside_temp.exists(), "a file outside the root was removed");
    assert!(
        std::fs::symlink_metadata(fx.abs(&format!("{TEMP_PREFIX}{DEAD}-2")))
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

#[test]
fn sweep_is_bounded_by_the_walk_caps() {
    let fx = Fixture::new();
    for i in 0..5 {
        fx.write(&format!("d{i}/{TEMP_PREFIX}{DEAD}-{i}"), b"t");
    }
    let names = names();
    let limits = WalkLimits {
        max_entries: 2,
        ..WalkLimits::default()
    };
    let sweep = root(&fx, &names)
        .sweep_server_temps(&|id| id == DEAD, &limits)
        .unwrap();
    assert!(sweep.incomplete, "the cap must be reported");
    assert_eq!(sweep.removed, 2, "two entries at most");
}

#[test]
fn a_lookup_makes_a_newer_instance_temp_hidden() {
    let fx = Fixture::new();
    fx.write(&format!("{TEMP_PREFIX}{UNKNOWN}-4"), b"t");
    fx.write("a.txt", b"a");
    let asked: Arc<Mutex<Vec<String>>> = Arc::default();
    let a2 = Arc::clone(&asked);
    let names = Arc::new(
        TempNames::new(OWN)
            .unwrap()
            .with_lookup(Box::new(move |id| {
                a2.lock().unwrap().push(id.to_string());
                id == UNKNOWN
            })),
    );
    let root = root(&fx, &names);
    assert_eq!(listed(&root), vec!["a.txt"]);
    assert_eq!(*asked.lock().unwrap(), vec![UNKNOWN.to_string()]);
    assert_eq!(listed(&root), vec!["a.txt"]);
    assert_eq!(
        asked.lock().unwrap().len(),
        1,
        "a confirmed id is not asked again"
    );
}
