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

/// More parent directories than `stat_many` keeps open, visited in an order that returns to
/// evicted ones and to the one used just before: every answer is still `stat`'s.
#[test]
fn stat_many_survives_eviction_and_revisits() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    let mut names = Vec::new();
    for d in 0..80 {
        std::fs::create_dir_all(r.join(format!("d{d}"))).unwrap();
        std::fs::write(r.join(format!("d{d}/f")), format!("{d}")).unwrap();
        std::fs::write(r.join(format!("d{d}/g{d}")), "").unwrap();
    }
    for d in 0..80 {
        names.push(format!("d{d}/f"));
        names.push(format!("d{}/g{}", d / 2, d / 2));
        names.push(format!("d{d}/missing"));
        names.push("top".to_string());
    }
    let paths: Vec<RelPath> = names.iter().map(|n| RelPath::parse(n).unwrap()).collect();
    let many = root_stat_many(r, &paths);
    let root = Root::open(r).unwrap();
    for (p, got) in paths.iter().zip(many) {
        assert_eq!(got, root.stat(p).unwrap(), "{}", p.as_str());
    }
}

fn root_stat_many(
    r: &std::path::Path,
    paths: &[RelPath],
) -> Vec<Option<codespace_runner_fs::Meta>> {
    let root = Root::open(r).unwrap();
    root.stat_many(paths.iter())
        .into_iter()
        .map(|m| m.unwrap())
        .collect()
}
