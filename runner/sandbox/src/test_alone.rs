//! For unit tests whose body changes its own process (descriptors, no_new_privs, a session): the
//! body runs alone, in a child test process with one test thread.

/// True in the child (run the body); in the parent, runs test `name` of this binary alone in a
/// child process (marked by the variable `alone`), asserts it ran and passed, and returns false.
#[allow(clippy::unwrap_used, clippy::panic)]
pub(crate) fn in_child_alone(name: &str, alone: &str) -> bool {
    if std::env::var_os(alone).is_some() {
        return true;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--test-threads=1"])
        .env(alone, "1")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("1 passed"), "the body did not run: {text}");
    false
}
