//! Hardening of the server process itself (non-dumpable, no core files) and environment scrubbing.

use rustix::process::{DumpableBehavior, Resource, Rlimit};

use crate::error::SandboxError;
use crate::plan::PLAN_ENV;

/// Exact variable names [`scrub_env`] drops (on top of every `LD_*` and `DYLD_*` name): the
/// loader and libc knobs glibc itself ignores for privileged programs, plus the plan variable so
/// that a caller-supplied environment can never smuggle its own sandbox plan.
pub const SCRUBBED_ENV_NAMES: &[&str] = &[
    "GCONV_PATH",
    "GETCONF_DIR",
    "HOSTALIASES",
    "LOCALDOMAIN",
    "MALLOC_TRACE",
    "NIS_PATH",
    "NLSPATH",
    "RESOLV_HOST_CONF",
    "RES_OPTIONS",
    PLAN_ENV,
];

/// Prefixes of variable names [`scrub_env`] drops (dynamic-loader controls).
pub const SCRUBBED_ENV_PREFIXES: &[&str] = &["LD_", "DYLD_"];

/// Makes the current process non-dumpable (which also blocks same-uid `ptrace` attach and
/// `/proc/<pid>/mem` reads) and disables core files (`RLIMIT_CORE` = 0/0).
pub fn harden_current_process() -> Result<(), SandboxError> {
    rustix::process::set_dumpable_behavior(DumpableBehavior::NotDumpable)
        .map_err(|e| SandboxError::Hardening(format!("prctl(PR_SET_DUMPABLE, 0) failed: {e}")))?;
    let zero = Rlimit {
        current: Some(0),
        maximum: Some(0),
    };
    rustix::process::setrlimit(Resource::Core, zero)
        .map_err(|e| SandboxError::Hardening(format!("setrlimit(RLIMIT_CORE, 0) failed: {e}")))?;
    Ok(())
}

/// Asks the allocator to give its free memory back to the kernel (glibc `malloc_trim(0)`, which
/// also releases free pages in the middle of its heaps, not only at their tops). Without it a
/// long-running server's RSS creeps up with allocation churn it no longer holds. A no-op where
/// the C library is not glibc.
pub fn release_free_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` takes no pointer and only walks the allocator's own free lists
    // under the allocator's locks; it is safe to call from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Caps the allocator's arenas at `n` (glibc `mallopt(M_ARENA_MAX, n)`; call it before threads
/// start). glibc gives threads arenas of their own, up to 8 per core, and each keeps the pages
/// freed in it resident; a small process with a few threads holds less with fewer. A no-op
/// where the C library is not glibc, or for `n` < 1.
pub fn limit_heap_arenas(n: i32) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if n >= 1 {
        // SAFETY: `mallopt` takes two integers and only sets the allocator's own parameter
        // under its lock; M_ARENA_MAX may be set at any time (it bounds arenas made later).
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, n);
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = n;
}

/// Whether [`scrub_env`] drops a variable with this name.
pub fn is_scrubbed_env_name(name: &str) -> bool {
    SCRUBBED_ENV_PREFIXES.iter().any(|p| name.starts_with(p)) || SCRUBBED_ENV_NAMES.contains(&name)
}

/// Removes dynamic-loader and similar variables (`LD_PRELOAD`, `LD_LIBRARY_PATH`, every other
/// `LD_*`, `DYLD_*`, [`SCRUBBED_ENV_NAMES`]) from an environment about to be given to a child.
pub fn scrub_env(env: &mut Vec<(String, String)>) {
    env.retain(|(name, _)| !is_scrubbed_env_name(name));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(k: &str, v: &str) -> (String, String) {
        (k.to_owned(), v.to_owned())
    }

    #[test]
    fn scrub_env_removes_loader_variables_and_keeps_the_rest() {
        let mut env = vec![
            pair("PATH", "/usr/bin"),
            pair("LD_PRELOAD", "/tmp/evil.so"),
            pair("LD_LIBRARY_PATH", "/tmp"),
            pair("LD_AUDIT", "x"),
            pair("DYLD_INSERT_LIBRARIES", "x"),
            pair("GCONV_PATH", "/tmp"),
            pair(PLAN_ENV, "{}"),
            pair("HOME", "/root"),
            pair("OLD_PWD", "/"),
            pair("TMPDIR", "/tmp/x"),
        ];
        scrub_env(&mut env);
        let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, vec!["PATH", "HOME", "OLD_PWD", "TMPDIR"]);
    }

    #[test]
    fn name_check_is_exact_for_listed_names() {
        assert!(is_scrubbed_env_name("LD_PRELOAD"));
        assert!(!is_scrubbed_env_name("GCONV_PATHX"));
        assert!(!is_scrubbed_env_name("XLD_PRELOAD"));
    }
}
