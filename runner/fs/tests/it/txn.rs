//! All-or-nothing commit: a failure injected at every step leaves the workspace byte-identical, the journal
//! is written before any change, and restore() undoes an interrupted commit.

// Helper functions of this test crate are test code too (clippy.toml only covers #[test] fns).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::common;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use codespace_runner_fs::FsError;
use codespace_runner_fs::txn::{Backup, Change, CommitError, Journal, commit, restore};
use common::{Fixture, rel};

/// Every path under `dir` with its kind, content and mode.
fn tree(dir: &Path) -> BTreeMap<String, (bool, Vec<u8>, u32)> {
    let mut out = BTreeMap::new();
    fn go(base: &Path, dir: &Path, out: &mut BTreeMap<String, (bool, Vec<u8>, u32)>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let meta = std::fs::symlink_metadata(e.path()).unwrap();
            let rel = e.path().strip_prefix(base).unwrap().display().to_string();
            let mode = meta.permissions().mode() & 0o7777;
            if meta.is_dir() {
                out.insert(rel, (true, Vec::new(), mode));
                go(base, &e.path(), out);
            } else {
                out.insert(rel, (false, std::fs::read(e.path()).unwrap(), mode));
            }
        }
    }
    go(dir, dir, &mut out);
    out
}

fn fixture() -> Fixture {
    let fx = Fixture::new();
    fx.write("a.txt", b"alpha\n");
    fx.write("c.txt", b"charlie\n");
    fx.write("keep/d.txt", b"delta\n");
    std::fs::set_permissions(fx.abs("a.txt"), std::fs::Permissions::from_mode(0o640)).unwrap();
    fx
}

/// update + add in a new dir + delete + move into a new dir: 7 steps.
fn changes() -> Vec<Change> {
    vec![
        Change::Write {
            path: rel("a.txt"),
            data: b"alpha v2\n".to_vec(),
            mode: 0o640,
        },
        Change::Write {
            path: rel("new/dir/b.txt"),
            data: b"bravo\n".to_vec(),
            mode: 0o644,
        },
        Change::Delete { path: rel("c.txt") },
        Change::Move {
            from: rel("keep/d.txt"),
            to: rel("moved/e.txt"),
            data: b"delta moved\n".to_vec(),
            mode: 0o600,
        },
    ]
}
const STEPS: usize = 7;

/// A journal that records what it was given and checks the tree was untouched at record time.
struct TestJournal {
    root_path: std::path::PathBuf,
    expected_tree: BTreeMap<String, (bool, Vec<u8>, u32)>,
    recorded: Option<Vec<Backup>>,
    finished: bool,
    fail_record: bool,
}

impl TestJournal {
    fn new(fx: &Fixture) -> TestJournal {
        TestJournal {
            root_path: fx.root_path.clone(),
            expected_tree: tree(&fx.root_path),
            recorded: None,
            finished: false,
            fail_record: false,
        }
    }
}

impl Journal for TestJournal {
    fn record(&mut self, backups: &[Backup]) -> Result<(), String> {
        assert_eq!(
            tree(&self.root_path),
            self.expected_tree,
            "written before journal.record"
        );
        if self.fail_record {
            return Err("disk full".into());
        }
        self.recorded = Some(backups.to_vec());
        Ok(())
    }
    fn finish(&mut self) -> Result<(), String> {
        self.finished = true;
        Ok(())
    }
}

#[test]
fn success_applies_everything_and_finishes_journal() {
    let fx = fixture();
    let root = fx.root();
    let mut journal = TestJournal::new(&fx);
    let mut steps_seen = Vec::new();
    let report = commit(&root, &changes(), &mut journal, &mut |i| {
        steps_seen.push(i);
        Ok(())
    })
    .unwrap();
    assert_eq!(report.steps, STEPS);
    assert_eq!(steps_seen, (0..STEPS).collect::<Vec<_>>());
    assert!(journal.finished);
    assert_eq!(std::fs::read(fx.abs("a.txt")).unwrap(), b"alpha v2\n");
    assert_eq!(std::fs::read(fx.abs("new/dir/b.txt")).unwrap(), b"bravo\n");
    assert!(!fx.abs("c.txt").exists());
    assert!(!fx.abs("keep/d.txt").exists());
    assert_eq!(
        std::fs::read(fx.abs("moved/e.txt")).unwrap(),
        b"delta moved\n"
    );
    let dirs: Vec<&str> = report.created_dirs.iter().map(|d| d.as_str()).collect();
    assert_eq!(dirs, vec!["new", "new/dir", "moved"]);
    let recorded = journal.recorded.unwrap();
    assert_eq!(recorded.len(), 5);
    let c = recorded
        .iter()
        .find(|b| b.path.as_str() == "c.txt")
        .unwrap();
    assert_eq!(c.before, Some((b"charlie\n".to_vec(), 0o644)));
    let b = recorded
        .iter()
        .find(|b| b.path.as_str() == "new/dir/b.txt")
        .unwrap();
    assert_eq!(b.before, None);
    let a = report
        .files
        .iter()
        .find(|f| f.path.as_str() == "a.txt")
        .unwrap();
    assert_eq!(
        a.after.as_ref().unwrap().as_str(),
        codespace_runner_fs::Version::from_bytes(b"alpha v2\n").as_str()
    );
    let c = report
        .files
        .iter()
        .find(|f| f.path.as_str() == "c.txt")
        .unwrap();
    assert!(c.before.is_some() && c.after.is_none());
}

#[test]
fn failure_at_every_step_rolls_back_byte_identical() {
    for fail_at in 0..STEPS {
        let fx = fixture();
        let before = tree(&fx.root_path);
        let root = fx.root();
        let mut journal = TestJournal::new(&fx);
        let err = commit(&root, &changes(), &mut journal, &mut |i| {
            if i == fail_at {
                Err(FsError::Io {
                    path: "injected".into(),
                    message: format!("fault at step {i}"),
                })
            } else {
                Ok(())
            }
        })
        .unwrap_err();
        match err {
            CommitError::RolledBack { cause } => assert_eq!(cause.path(), "injected"),
            other => panic!("step {fail_at}: expected RolledBack, got {other:?}"),
        }
        assert_eq!(
            tree(&fx.root_path),
            before,
            "step {fail_at}: workspace differs after rollback"
        );
        assert!(
            !fx.abs("new").exists() && !fx.abs("moved").exists(),
            "step {fail_at}: new dirs left"
        );
        assert!(
            journal.finished,
            "step {fail_at}: journal not finished after full rollback"
        );
    }
}

#[test]
fn real_step_failure_rolls_back() {
    // Just before the move's create_dirs step, a file appears where the `moved` directory must go: the
    // step itself fails (not the hook) and everything the commit did is undone.
    let fx = fixture();
    let before = tree(&fx.root_path);
    let root = fx.root();
    let mut journal = TestJournal::new(&fx);
    let blocker = fx.abs("moved");
    let err = commit(&root, &changes(), &mut journal, &mut |i| {
        if i == 4 {
            std::fs::write(&blocker, b"i am a file").unwrap();
        }
        Ok(())
    })
    .unwrap_err();
    match err {
        CommitError::RolledBack { cause } => assert_eq!(cause.code(), "PATH_NOT_DIRECTORY"),
        other => panic!("expected RolledBack, got {other:?}"),
    }
    let mut after = tree(&fx.root_path);
    assert_eq!(
        after.remove("moved").map(|(_, data, _)| data),
        Some(b"i am a file".to_vec())
    );
    assert_eq!(after, before);
}

#[test]
fn file_in_place_of_a_parent_is_refused_up_front() {
    let fx = fixture();
    fx.write("moved", b"i am a file");
    let before = tree(&fx.root_path);
    let root = fx.root();
    let mut journal = TestJournal::new(&fx);
    let err = commit(&root, &changes(), &mut journal, &mut |_| Ok(())).unwrap_err();
    match err {
        CommitError::Refused { cause } => assert_eq!(cause.code(), "PATH_NOT_DIRECTORY"),
        other => panic!("expected Refused, got {other:?}"),
    }
    assert_eq!(tree(&fx.root_path), before);
}

#[test]
fn journal_record_failure_writes_nothing() {
    let fx = fixture();
    let before = tree(&fx.root_path);
    let root = fx.root();
    let mut journal = TestJournal::new(&fx);
    journal.fail_record = true;
    let mut called = false;
    let err = commit(&root, &changes(), &mut journal, &mut |_| {
        called = true;
        Ok(())
    })
    .unwrap_err();
    assert!(matches!(err, CommitError::Journal { .. }));
    assert!(!called);
    assert_eq!(tree(&fx.root_path), before);
}

#[test]
fn preconditions_refuse_before_writing() {
    let fx = fixture();
    fx.write("moved/e.txt", b"already here");
    fx.symlink("link", "a.txt");
    let before = tree(&fx.root_path);
    let root = fx.root();
    let mut journal = TestJournal::new(&fx);
    let err = commit(&root, &changes(), &mut journal, &mut |_| Ok(())).unwrap_err();
    match err {
        CommitError::Refused { cause } => {
            assert!(matches!(cause, FsError::AlreadyExists { .. }), "{cause:?}")
        }
        other => panic!("expected Refused, got {other:?}"),
    }
    let missing = vec![Change::Delete {
        path: rel("nope.txt"),
    }];
    let err = commit(&root, &missing, &mut journal, &mut |_| Ok(())).unwrap_err();
    assert!(matches!(
        err,
        CommitError::Refused {
            cause: FsError::NotFound { .. }
        }
    ));
    let through_link = vec![Change::Write {
        path: rel("link"),
        data: b"x".to_vec(),
        mode: 0o644,
    }];
    let err = commit(&root, &through_link, &mut journal, &mut |_| Ok(())).unwrap_err();
    assert!(matches!(
        err,
        CommitError::Refused {
            cause: FsError::SymlinkRejected { .. }
        }
    ));
    assert!(journal.recorded.is_none());
    assert_eq!(tree(&fx.root_path), before);
}

#[test]
fn failed_restore_is_partial_and_names_the_file() {
    let fx = fixture();
    let root = fx.root();
    let mut journal = TestJournal::new(&fx);
    let a_path = fx.abs("a.txt");
    let err = commit(&root, &changes(), &mut journal, &mut |i| {
        if i == 3 {
            // Sabotage: a.txt becomes a directory, so it cannot be restored.
            std::fs::remove_file(&a_path).unwrap();
            std::fs::create_dir(&a_path).unwrap();
            std::fs::write(a_path.join("x"), b"x").unwrap();
            Err(FsError::Io {
                path: "injected".into(),
                message: "fault".into(),
            })
        } else {
            Ok(())
        }
    })
    .unwrap_err();
    match err {
        CommitError::Partial { files, .. } => assert_eq!(files, vec!["a.txt".to_owned()]),
        other => panic!("expected Partial, got {other:?}"),
    }
    assert!(
        !journal.finished,
        "journal must stay open when the rollback is partial"
    );
    // Everything else was restored.
    assert_eq!(std::fs::read(fx.abs("c.txt")).unwrap(), b"charlie\n");
    assert!(!fx.abs("new").exists());
}

#[test]
fn restore_from_journal_undoes_an_interrupted_commit() {
    let fx = fixture();
    let before = tree(&fx.root_path);
    let root = fx.root();
    let mut journal = TestJournal::new(&fx);
    commit(&root, &changes(), &mut journal, &mut |_| Ok(())).unwrap();
    // Pretend the process died before finish(): replay the recorded backups.
    let backups = journal.recorded.unwrap();
    restore(&root, &backups).unwrap();
    // Restore twice is harmless.
    restore(&root, &backups).unwrap();
    let mut after = tree(&fx.root_path);
    // restore() does not know which directories the commit created; they remain, empty.
    for dir in ["new", "new/dir", "moved"] {
        assert_eq!(
            after.remove(dir).map(|(is_dir, _, _)| is_dir),
            Some(true),
            "{dir}"
        );
    }
    assert_eq!(after, before);
}
