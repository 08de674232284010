//! Opt-in timing of the helper's steps, for `scripts/bench-exec-start.py`: with
//! [`STEPS_ENV`]`=1` in its environment the helper writes one line to stderr, just before it
//! execs the target, with the `CLOCK_MONOTONIC` time (nanoseconds) at which each step ended.
//! The line carries no path and no plan content, only step names and times; the variable is
//! removed from the target's environment. The process table adds [`STEPS_SERVER_ENV`] with its
//! own marks (before the cgroup, before the fork; `runner/process/src/steps.rs`): they open the
//! line.

use std::io::Write;

/// The environment variable that turns the step line on (value `1`).
pub const STEPS_ENV: &str = "CODESPACE_SANDBOX_STEPS";

/// The server's marks (`server=<ns>,cgroup=<ns>`), from the process table.
pub const STEPS_SERVER_ENV: &str = "CODESPACE_SANDBOX_STEPS_SERVER";

/// The prefix of the step line on the helper's stderr.
pub const STEPS_PREFIX: &str = "codespace-sandbox-steps:";

/// The steps recorded so far (nothing when the variable is not set).
#[derive(Debug)]
pub(crate) struct Steps {
    marks: Option<Vec<(&'static str, u64)>>,
}

impl Steps {
    /// Starts recording (the first mark, `first`: `start`, or `spare` for a warm spare's
    /// hand-over) when [`STEPS_ENV`] is `1`.
    /// `var` looks a variable up in the command's environment.
    pub(crate) fn from_env(
        first: &'static str,
        var: impl Fn(&str) -> Option<std::ffi::OsString>,
    ) -> Steps {
        let on = var(STEPS_ENV).is_some_and(|v| v == "1");
        let mut steps = Steps {
            marks: on.then(|| server_marks(var(STEPS_SERVER_ENV))),
        };
        steps.mark(first);
        steps
    }

    /// Records that the step `name` ended now.
    pub(crate) fn mark(&mut self, name: &'static str) {
        if let Some(marks) = &mut self.marks {
            marks.push((name, monotonic_ns()));
        }
    }

    /// Writes the step line to stderr (when recording).
    pub(crate) fn report(&self) {
        let Some(marks) = &self.marks else {
            return;
        };
        let mut line = String::from(STEPS_PREFIX);
        for (name, ns) in marks {
            line.push_str(&format!(" {name}={ns}"));
        }
        line.push('\n');
        let _ = std::io::stderr().write_all(line.as_bytes());
    }
}

/// The server's marks from [`STEPS_SERVER_ENV`] (unknown names and bad numbers are skipped).
fn server_marks(value: Option<std::ffi::OsString>) -> Vec<(&'static str, u64)> {
    let mut marks = Vec::with_capacity(16);
    let value = value.and_then(|v| v.into_string().ok()).unwrap_or_default();
    for item in value.split(',') {
        let Some((name, ns)) = item.split_once('=') else {
            continue;
        };
        let name = match name {
            "server" => "server",
            "cgroup" => "cgroup",
            _ => continue,
        };
        if let Ok(ns) = ns.parse() {
            marks.push((name, ns));
        }
    }
    marks
}

/// `CLOCK_MONOTONIC` in nanoseconds (the clock Python's `time.monotonic_ns` reads), 0 on error.
pub fn monotonic_ns() -> u64 {
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
    fn the_servers_marks_open_the_line() {
        let marks = server_marks(Some("server=5,cgroup=7,bogus=1,x".into()));
        assert_eq!(marks, vec![("server", 5), ("cgroup", 7)]);
        assert!(server_marks(None).is_empty());
    }

    #[test]
    fn the_clock_moves_forward() {
        let a = monotonic_ns();
        let b = monotonic_ns();
        assert!(a > 0 && b >= a);
    }
}
