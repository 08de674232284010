//! `Root::stat_many` answers exactly what `Root::stat` answers, path by path, with each parent
//! directory opened once per run of its entries.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use codespace_runner_fs::{RelPath, Root};

#[test]
fn stat_many_matches_stat_for_every_path() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    std::fs::create_dir_all(r.join("a/b")).unwrap();
    std::fs::write(r.join("top.txt"), "t").unwrap();
    std::fs::write(r.join("a/one"), "1").unwrap();
    std::fs::write(r.join("a/b/two"), "2").unwrap();
    std::fs::hard_link(r.join("a/one"), r.join("a/b/alias")).unwrap();
    std::os::unix::fs::symlink("/etc", r.join("a/link")).unwrap();
    let root = Root::open(r).unwrap();
    let names = [
        ".",
        "top.txt",
        "a",
        "a/one",
        "a/b",
        "a/b/alias",
        "a/b/two",
        "a/link",
        "a/missing",
        "nope/x",
        "a/link/passwd",
        "a/one",
    ];
    let paths: Vec<RelPath> = names.iter().map(|n| RelPath::parse(n).unwrap()).collect();
    let many = root.stat_many(paths.iter());
    assert_eq!(many.len(), paths.len());
    for (p, got) in paths.iter().zip(many) {
        let want = root.stat(p);
        match (&got, &want) {
            (Ok(g), Ok(w)) => assert_eq!(g, w, "{}", p.as_str()),
            (Err(_), Err(_)) => {}
            _ => panic!("{}: {got:?} vs {want:?}", p.as_str()),
        }
    }
    let alias = root
        .stat(&RelPath::parse("a/b/alias").unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(alias.links, 2);
}
