//! Opt-in timing of the helper's steps, for `scripts/bench-exec-start.py`: with
//! [`STEPS_ENV`]`=1` in its environment the helper writes one line to stderr, just before it
//! execs the target, with the `CLOCK_MONOTONIC` time (nanoseconds) at which each step ended.
//! The line carries no path and no plan content, only step names and times; the variable is
//! removed from the target's environment.

use std::io::Write;

/// The environment variable that turns the step line on (value `1`).
pub const STEPS_ENV: &str = "CODESPACE_SANDBOX_STEPS";

/// The prefix of the step line on the helper's stderr.
pub const STEPS_PREFIX: &str = "codespace-sandbox-steps:";

/// The steps recorded so far (nothing when the variable is not set).
#[derive(Debug)]
pub(crate) struct Steps {
    marks: Option<Vec<(&'static str, u64)>>,
}

impl Steps {
    /// Starts recording (the first mark, `start`) when [`STEPS_ENV`] is `1`.
    pub(crate) fn from_env() -> Steps {
        let on = std::env::var_os(STEPS_ENV).is_some_and(|v| v == "1");
        let mut steps = Steps {
            marks: on.then(|| Vec::with_capacity(16)),
        };
        steps.mark("start");
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
    fn the_clock_moves_forward() {
        let a = monotonic_ns();
        let b = monotonic_ns();
        assert!(a > 0 && b >= a);
    }
}
