//! The server's half of the sandbox helper's opt-in step timing (`scripts/bench-exec-start.py`):
//! when a spawn's environment has `CODESPACE_SANDBOX_STEPS=1`, the table adds
//! [`STEPS_SERVER_ENV`] with the `CLOCK_MONOTONIC` times (nanoseconds) just before it created
//! the process's cgroup and just before the fork, and the helper puts them at the front of its
//! step line (and removes the variable). Without that variable nothing is added.

/// The variable that turns step timing on (the sandbox crate's `STEPS_ENV`).
const STEPS_ENV: &str = "CODESPACE_SANDBOX_STEPS";

/// The variable carrying the server's marks: `server=<ns>,cgroup=<ns>`.
pub const STEPS_SERVER_ENV: &str = "CODESPACE_SANDBOX_STEPS_SERVER";

/// Whether this spawn asked for step timing.
pub(crate) fn wanted(env: &[(String, String)]) -> bool {
    env.iter().any(|(k, v)| k == STEPS_ENV && v == "1")
}

/// Adds the marks: `before_cgroup` and now (the cgroup made, the fork next).
pub(crate) fn add_server_marks(env: &mut Vec<(String, String)>, before_cgroup: u64) {
    let value = format!("server={before_cgroup},cgroup={}", monotonic_ns());
    env.retain(|(k, _)| k != STEPS_SERVER_ENV);
    env.push((STEPS_SERVER_ENV.to_owned(), value));
}

/// `CLOCK_MONOTONIC` in nanoseconds, 0 on error.
pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) } != 0 {
        return 0;
    }
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_are_added_only_when_asked_and_replace_a_callers_copy() {
        let mut env = vec![("PATH".to_owned(), "/bin".to_owned())];
        assert!(!wanted(&env));
        env.push((STEPS_ENV.to_owned(), "1".to_owned()));
        env.push((STEPS_SERVER_ENV.to_owned(), "server=1,cgroup=2".to_owned()));
        assert!(wanted(&env));
        add_server_marks(&mut env, 5);
        let marks: Vec<_> = env.iter().filter(|(k, _)| k == STEPS_SERVER_ENV).collect();
        assert_eq!(marks.len(), 1);
        assert!(marks[0].1.starts_with("server=5,cgroup="), "{marks:?}");
    }
}
