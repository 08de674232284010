//! Walk: sorted output, hidden entries, symlinks listed but never followed, loops, the caps, and walks of a subtree.
// Helper functions of this test crate are test code too (clippy.toml only covers #[test] fns).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::common;

use std::sync::mpsc;
use std::time::Duration;

use codespace_runner_fs::{Kind, RelPath, Walk, WalkLimits};
use common::Fixture;

fn fixture() -> Fixture {
    let fx = Fixture::new();
    fx.write("b.txt", b"b");
    fx.write("a/z.txt", b"z");
    fx.write("a/b/c.txt", b"c");
    fx.write("a-b", b"dash");
    fx.write(".git/HEAD", b"ref");
    fx.write(".hidden/deep/x", b"x");
    fx.symlink("loop", ".");
    fx.symlink("a/up", "..");
    fx.symlink("out", &fx.outside);
    fx.symlink("rootlink", "/");
    fx
}

fn paths(w: &Walk) -> Vec<&str> {
    w.entries.iter().map(|e| e.path.as_str()).collect()
}

fn kind_of(w: &Walk, p: &str) -> Option<Kind> {
    w.entries.iter().find(|e| e.path == p).map(|e| e.kind)
}

#[test]
fn lists_everything_sorted_hidden_included_symlinks_not_followed() {
    let fx = fixture();
    let root = fx.root();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || tx.send(root.walk(&WalkLimits::default())).unwrap());
    let w = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("walk hung (symlink loop followed?)")
        .unwrap();
    assert!(!w.incomplete);
    let expected = vec![
        ".git",
        ".git/HEAD",
        ".hidden",
        ".hidden/deep",
        ".hidden/deep/x",
        "a",
        "a-b",
        "a/b",
        "a/b/c.txt",
        "a/up",
        "a/z.txt",
        "b.txt",
        "loop",
        "out",
        "rootlink",
    ];
    assert_eq!(paths(&w), expected);
    let mut sorted = paths(&w);
    sorted.sort_by(|x, y| x.as_bytes().cmp(y.as_bytes()));
    assert_eq!(paths(&w), sorted, "not in byte order");
    assert_eq!(kind_of(&w, "loop"), Some(Kind::Symlink));
    assert_eq!(kind_of(&w, "out"), Some(Kind::Symlink));
    assert_eq!(kind_of(&w, "a/up"), Some(Kind::Symlink));
    assert_eq!(kind_of(&w, "a"), Some(Kind::Dir));
    assert_eq!(kind_of(&w, "b.txt"), Some(Kind::File));
    assert!(
        !paths(&w)
            .iter()
            .any(|p| p.starts_with("out/") || p.starts_with("loop/"))
    );
}

#[test]
fn entry_cap_sets_incomplete() {
    let fx = fixture();
    let limits = WalkLimits {
        max_entries: 4,
        ..WalkLimits::default()
    };
    let w = fx.root().walk(&limits).unwrap();
    assert!(w.incomplete);
    assert_eq!(w.entries.len(), 4);
}

#[test]
fn depth_cap_sets_incomplete() {
    let fx = fixture();
    let limits = WalkLimits {
        max_depth: 1,
        ..WalkLimits::default()
    };
    let w = fx.root().walk(&limits).unwrap();
    assert!(w.incomplete);
    assert!(
        paths(&w).iter().all(|p| !p.contains('/')),
        "{:?}",
        paths(&w)
    );
    assert!(paths(&w).contains(&"a"));

    let limits = WalkLimits {
        max_depth: 2,
        ..WalkLimits::default()
    };
    let w = fx.root().walk(&limits).unwrap();
    assert!(w.incomplete);
    assert!(paths(&w).contains(&"a/b"));
    assert!(!paths(&w).contains(&"a/b/c.txt"));
}

#[test]
fn a_walk_names_the_directories_it_does_not_hold_whole() {
    use codespace_runner_fs::UnlistedWhy;
    use std::os::unix::ffi::OsStrExt;
    let fx = fixture();
    fx.mkdir("odd");
    std::fs::write(
        fx.abs("odd").join(std::ffi::OsStr::from_bytes(b"caf\xe9")),
        b"x",
    )
    .unwrap();
    let limits = WalkLimits {
        max_depth: 2,
        ..WalkLimits::default()
    };
    let w = fx.root().walk(&limits).unwrap();
    let mut got: Vec<(&str, UnlistedWhy, Option<&str>)> = w
        .unlisted
        .iter()
        .map(|u| (u.path.as_str(), u.why, u.name.as_deref()))
        .collect();
    got.sort_by(|a, b| a.0.cmp(b.0));
    assert_eq!(
        got,
        vec![
            (".hidden/deep", UnlistedWhy::Depth, None),
            ("a/b", UnlistedWhy::Depth, None),
            ("odd", UnlistedWhy::NonUtf8Name, Some("caf\\xe9")),
        ]
    );
    assert!(!w.capped);
    let capped = fx
        .root()
        .walk(&WalkLimits {
            max_entries: 2,
            ..WalkLimits::default()
        })
        .unwrap();
    assert!(capped.capped && capped.incomplete);
}

#[test]
fn walk_under_all_keeps_the_servers_temp_files() {
    let fx = fixture();
    let root = fx.root();
    let name = root.temp_names().next_name();
    fx.write(&format!("a/{name}"), b"t");
    assert!(
        !paths(&root.walk(&WalkLimits::default()).unwrap()).contains(&format!("a/{name}").as_str())
    );
    let all = root
        .walk_under_all(&RelPath::root(), &WalkLimits::default())
        .unwrap();
    assert!(paths(&all).contains(&format!("a/{name}").as_str()));
}

#[test]
fn default_limits_have_no_directory_cap() {
    // 12 000 directories (more than the old 10 000-directory cap) all get listed. On tmpfs when
    // there is one: creating and removing 12 000 directories on a busy disk takes tens of seconds.
    let shm = std::path::Path::new("/dev/shm");
    let tmp = if shm.is_dir() {
        tempfile::tempdir_in(shm).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };
    for i in 0..12_000 {
        std::fs::create_dir(tmp.path().join(format!("d{i:05}"))).unwrap();
    }
    std::fs::write(tmp.path().join("d11999/last.txt"), b"x").unwrap();
    let root = codespace_runner_fs::Root::open(tmp.path()).unwrap();
    let w = root.walk(&WalkLimits::default()).unwrap();
    assert!(!w.incomplete);
    assert_eq!(w.entries.len(), 12_001);
    assert!(paths(&w).contains(&"d11999/last.txt"));
    assert_eq!(WalkLimits::default().max_entries, 1_000_000);
}

#[test]
fn walk_under_lists_one_subtree_with_workspace_paths() {
    let fx = fixture();
    let sub = RelPath::parse("a").unwrap();
    let w = fx.root().walk_under(&sub, &WalkLimits::default()).unwrap();
    assert!(!paths(&w).is_empty());
    assert!(
        paths(&w).iter().all(|p| p.starts_with("a/")),
        "{:?}",
        paths(&w)
    );
    assert_eq!(
        paths(&w),
        paths(&fx.root().walk(&WalkLimits::default()).unwrap())
            .into_iter()
            .filter(|p| p.starts_with("a/"))
            .collect::<Vec<_>>()
    );
    // Depth still counts from the root.
    let shallow = WalkLimits {
        max_depth: 2,
        ..WalkLimits::default()
    };
    let w = fx.root().walk_under(&sub, &shallow).unwrap();
    assert!(
        paths(&w).iter().all(|p| p.matches('/').count() == 1),
        "{:?}",
        paths(&w)
    );
    // A symlink is not a directory to walk.
    assert!(
        fx.root()
            .walk_under(&RelPath::parse("loop").unwrap(), &WalkLimits::default())
            .is_err()
    );
}

#[test]
fn exact_limits_are_not_incomplete() {
    let fx = Fixture::new();
    fx.write("x/y", b"1");
    let limits = WalkLimits {
        max_depth: 2,
        max_entries: 2,
        stat_links: false,
    };
    let w = fx.root().walk(&limits).unwrap();
    assert_eq!(paths(&w), vec!["x", "x/y"]);
    assert!(!w.incomplete);
}

#[test]
fn symlinked_root_subdir_swap_is_not_followed() {
    // A directory replaced by a symlink before the walk reaches it is listed as a symlink only.
    let fx = Fixture::new();
    fx.symlink("d", &fx.outside);
    let w = fx.root().walk(&WalkLimits::default()).unwrap();
    assert_eq!(paths(&w), vec!["d"]);
    assert_eq!(kind_of(&w, "d"), Some(Kind::Symlink));
}

#[test]
fn link_counts_and_inode_numbers_are_reported_on_request() {
    let fx = Fixture::new();
    fx.write("a.txt", b"1");
    fx.write("d/b.txt", b"2");
    std::fs::hard_link(fx.abs("a.txt"), fx.abs("d/alias")).unwrap();
    let w = fx.root().walk(&WalkLimits::default()).unwrap();
    assert!(w.entries.iter().all(|e| e.links.is_none()), "{w:?}");
    let ino = |w: &Walk, p: &str| w.entries.iter().find(|e| e.path == p).unwrap().ino;
    assert_eq!(ino(&w, "a.txt"), ino(&w, "d/alias"));
    assert_ne!(ino(&w, "a.txt"), ino(&w, "d/b.txt"));
    let limits = WalkLimits {
        stat_links: true,
        ..WalkLimits::default()
    };
    let w = fx.root().walk(&limits).unwrap();
    let links = |p: &str| w.entries.iter().find(|e| e.path == p).unwrap().links;
    assert_eq!(links("a.txt"), Some(2));
    assert_eq!(links("d/alias"), Some(2));
    assert_eq!(links("d/b.txt"), Some(1));
    assert_eq!(links("d"), None, "directories carry no link count");
}

#[test]
fn stat_and_read_report_the_link_count() {
    let fx = Fixture::new();
    fx.write("one.txt", b"1");
    fx.write("two.txt", b"2");
    std::fs::hard_link(fx.abs("two.txt"), fx.abs("alias")).unwrap();
    let root = fx.root();
    let rel = |s: &str| codespace_runner_fs::RelPath::parse(s).unwrap();
    assert_eq!(root.stat(&rel("one.txt")).unwrap().unwrap().links, 1);
    assert_eq!(root.stat(&rel("alias")).unwrap().unwrap().links, 2);
    assert_eq!(root.read(&rel("one.txt"), 0, 10).unwrap().links, 1);
    assert_eq!(root.read(&rel("alias"), 0, 10).unwrap().links, 2);
}
