//! The staged view of a `before_patch` hook seen from inside the sandbox: the patch's new
//! contents, added files and deletions are what the command sees, masks still cover the staged
//! view (a staged secret included), and no write reaches the real tree or the view.

use crate::common;

use codespace_runner_sandbox::{NetworkMode, StagedFile, probe, write_stage};
use common::{Fixture, sandbox_or_skip, sandboxed, stderr, stdout};

#[test]
fn a_staged_view_shows_the_patch_masks_secrets_and_takes_no_write() {
    let name = "a_staged_view_shows_the_patch_masks_secrets_and_takes_no_write";
    if !sandbox_or_skip(name) {
        return;
    }
    if !probe().masking_available() {
        codespace_test_skip::skip(name, "no mount namespaces for the staged view");
        return;
    }
    let fx = Fixture::new();
    std::fs::write(fx.ws.join("a.txt"), "old\n").unwrap();
    std::fs::write(fx.ws.join("gone.txt"), "bye\n").unwrap();
    std::fs::write(fx.ws.join(".env"), "SECRET=hunter2").unwrap();
    let stage = fx.outside("stage");
    std::fs::create_dir(&stage).unwrap();
    write_stage(
        &stage,
        &[
            StagedFile {
                path: "a.txt",
                content: Some((b"new\n", 0o644)),
            },
            StagedFile {
                path: "added/b.txt",
                content: Some((b"added\n", 0o644)),
            },
            StagedFile {
                path: "gone.txt",
                content: None,
            },
            StagedFile {
                path: ".env",
                content: Some((b"SECRET=staged", 0o600)),
            },
        ],
    )
    .unwrap();
    let mut plan = fx.plan(false, NetworkMode::Restricted);
    plan.masks = vec![fx.ws.join(".env")];
    plan.stage_dir = Some(stage.clone());
    let script = format!(
        "cat a.txt; cat added/b.txt; test -e gone.txt || echo no-gone; cat .env; \
         cat '{ws}/a.txt'; echo x > a.txt && echo wrote-a; echo y > fresh && echo wrote-fresh; \
         rm -f gone.txt added/b.txt; cat '{stage}/upper/a.txt'; echo end",
        ws = fx.ws.display(),
        stage = stage.display(),
    );
    let mut cmd = sandboxed(&plan, &["sh", "-c", &script]);
    let out = cmd.current_dir(&fx.ws).output().unwrap();
    let (o, e) = (stdout(&out), stderr(&out));
    assert!(o.contains("end"), "{o} {e}");
    assert_eq!(
        o.matches("new").count(),
        2,
        "the staged content, by both names: {o} {e}"
    );
    assert!(o.contains("added") && o.contains("no-gone"), "{o} {e}");
    assert!(
        !o.contains("hunter2") && !o.contains("staged"),
        "a secret leaked: {o}"
    );
    assert!(!o.contains("wrote"), "a write went through: {o} {e}");
    // The real tree is as it was; the stage too.
    assert_eq!(
        std::fs::read_to_string(fx.ws.join("a.txt")).unwrap(),
        "old\n"
    );
    assert_eq!(
        std::fs::read_to_string(fx.ws.join("gone.txt")).unwrap(),
        "bye\n"
    );
    assert!(!fx.ws.join("fresh").exists() && !fx.ws.join("added").exists());
    assert_eq!(
        std::fs::read_to_string(stage.join("upper/a.txt")).unwrap(),
        "new\n"
    );
}
