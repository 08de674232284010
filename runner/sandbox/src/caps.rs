//! Dropping every Linux capability before the target runs (bounding, permitted, effective,
//! inheritable and ambient sets), so a command started by a root server is not privileged.

use rustix::thread::{CapabilitySet, CapabilitySets};

use crate::error::SandboxError;

/// Highest capability number assumed when `/proc/sys/kernel/cap_last_cap` cannot be read.
const FALLBACK_LAST_CAP: u32 = 63;

/// The highest capability number the running kernel knows (read once per process).
fn last_cap() -> u32 {
    static LAST: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *LAST.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(FALLBACK_LAST_CAP)
    })
}

fn in_bounding_set(cap: u32) -> Result<bool, SandboxError> {
    // SAFETY: PR_CAPBSET_READ takes one integer argument and touches no user memory.
    let ret = unsafe { libc::prctl(libc::PR_CAPBSET_READ, libc::c_ulong::from(cap), 0, 0, 0) };
    match ret {
        1 => Ok(true),
        0 => Ok(false),
        // EINVAL: a number past what the kernel knows (only with the fallback bound).
        _ if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) => Ok(false),
        _ => Err(SandboxError::Hardening(format!(
            "prctl(PR_CAPBSET_READ, {cap}) failed: {}",
            std::io::Error::last_os_error()
        ))),
    }
}

fn drop_from_bounding_set(cap: u32) -> std::io::Result<()> {
    // SAFETY: PR_CAPBSET_DROP takes one integer argument and touches no user memory.
    let ret = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, libc::c_ulong::from(cap), 0, 0, 0) };
    if ret == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// A warm spare's first step while it waits ([`crate::spare`]): every capability leaves the
/// bounding set (when the spare holds `CAP_SETPCAP`). The bounding set only limits what an
/// `exec` may grant, and the spare execs nothing before its command's target, so what it does
/// meanwhile with its effective capabilities (joining the command's mount namespace) is
/// unchanged; [`drop_all_capabilities`] at the command's start then finds the set empty and
/// still checks it. Best effort: a capability left in the set is dropped then.
pub(crate) fn drop_bounding_set_ahead() {
    for cap in 0..=last_cap() {
        if in_bounding_set(cap).unwrap_or(false) {
            let _ = drop_from_bounding_set(cap);
        }
    }
}

/// Drops every capability of the calling (single-threaded) process and checks the result.
///
/// 1. Bounding set: `PR_CAPBSET_DROP` for every capability the kernel knows. This needs
///    `CAP_SETPCAP`; a process that does not hold it has no permitted capabilities to lose and,
///    under `no_new_privs`, can gain none through `exec`, so `EPERM` is then accepted.
/// 2. Permitted, effective and inheritable sets: `capset` to empty.
/// 3. Ambient set: `PR_CAP_AMBIENT_CLEAR_ALL`.
///
/// Fails closed when any set is not empty afterwards.
pub(crate) fn drop_all_capabilities() -> Result<(), SandboxError> {
    let before = rustix::thread::capabilities(None)
        .map_err(|e| SandboxError::Hardening(format!("capget failed: {e}")))?;
    let may_drop_bounding = before.effective.contains(CapabilitySet::SETPCAP);
    let last = last_cap();
    for cap in 0..=last {
        if !in_bounding_set(cap)? {
            continue;
        }
        match drop_from_bounding_set(cap) {
            Ok(()) => {}
            Err(e) if !may_drop_bounding && e.raw_os_error() == Some(libc::EPERM) => {}
            Err(e) => {
                return Err(SandboxError::Hardening(format!(
                    "prctl(PR_CAPBSET_DROP, {cap}) failed: {e}"
                )));
            }
        }
    }
    rustix::thread::clear_ambient_capability_set()
        .map_err(|e| SandboxError::Hardening(format!("cannot clear ambient capabilities: {e}")))?;
    rustix::thread::set_capabilities(
        None,
        CapabilitySets {
            effective: CapabilitySet::empty(),
            permitted: CapabilitySet::empty(),
            inheritable: CapabilitySet::empty(),
        },
    )
    .map_err(|e| SandboxError::Hardening(format!("capset to empty failed: {e}")))?;
    let after = rustix::thread::capabilities(None)
        .map_err(|e| SandboxError::Hardening(format!("capget failed: {e}")))?;
    if !(after.effective.is_empty() && after.permitted.is_empty() && after.inheritable.is_empty()) {
        return Err(SandboxError::Hardening(
            "capabilities are still held after capset".into(),
        ));
    }
    if may_drop_bounding {
        for cap in 0..=last {
            if in_bounding_set(cap)? {
                return Err(SandboxError::Hardening(format!(
                    "capability {cap} is still in the bounding set"
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_cap_is_a_plausible_number() {
        let n = last_cap();
        assert!((30..=FALLBACK_LAST_CAP).contains(&n), "{n}");
        // CAP_CHOWN (0) exists on every kernel, so reading it never errors.
        assert!(in_bounding_set(0).is_ok());
    }
}
