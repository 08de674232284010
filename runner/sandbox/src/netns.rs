//! Best-effort private network namespace for `NetworkMode::Restricted` (a second layer under seccomp).

use std::fs;
use std::os::fd::{AsFd, OwnedFd};

use rustix::thread::UnshareFlags;

use crate::error::SandboxError;

/// What [`enter_private_netns`] achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NetnsOutcome {
    /// A new network namespace (only a `lo` that is down).
    NetOnly,
    /// A new user namespace (same uid/gid mapped) holding a new network namespace.
    UserAndNet,
    /// The kernel refused; seccomp alone enforces the restriction.
    Unchanged,
}

/// A warm spare's network namespace made ahead ([`crate::spare`]): `unshare(CLONE_NEWNET)`
/// alone, which needs CAP_SYS_ADMIN. True when the caller is now in a fresh namespace; false
/// leaves it where it was (the helper then enters one at its command's start, as a cold helper
/// does, with a user namespace when it must: never ahead of the cgroup join).
pub(crate) fn enter_net_only_ahead() -> bool {
    // SAFETY: a spare calls this while single-threaded, and CLONE_FILES is not involved.
    unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWNET) }.is_ok()
}

/// A warm spare's network namespace handed over by the server ([`crate::spare`]): `setns` into
/// `fd`, which the kernel refuses unless it names a network namespace (CAP_SYS_ADMIN needed).
/// False leaves the caller where it was.
pub(crate) fn enter_given(fd: &OwnedFd) -> bool {
    rustix::thread::move_into_link_name_space(
        fd.as_fd(),
        Some(rustix::thread::LinkNameSpaceType::Network),
    )
    .is_ok()
}

/// Moves the calling (single-threaded) process into a fresh network namespace.
///
/// Tries `unshare(CLONE_NEWNET)` first (works with CAP_SYS_ADMIN), then
/// `unshare(CLONE_NEWUSER | CLONE_NEWNET)` with the caller's uid/gid mapped to themselves, so file
/// ownership looks unchanged. A refusal is not an error; a user namespace whose id maps cannot be
/// written is, because the process would then run as the overflow uid.
pub(crate) fn enter_private_netns() -> Result<NetnsOutcome, SandboxError> {
    let uid = rustix::process::getuid().as_raw();
    let gid = rustix::process::getgid().as_raw();
    // SAFETY: the helper is single-threaded when it calls this and CLONE_FILES is not involved,
    // so no thread can observe a file-descriptor table it does not share.
    if unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWNET) }.is_ok() {
        return Ok(NetnsOutcome::NetOnly);
    }
    // SAFETY: as above; CLONE_NEWUSER additionally requires a single-threaded caller, which holds.
    if unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWUSER | UnshareFlags::NEWNET) }
        .is_err()
    {
        return Ok(NetnsOutcome::Unchanged);
    }
    let write = |file: &str, text: String| {
        fs::write(file, text).map_err(|e| {
            SandboxError::Hardening(format!("cannot write the user namespace {file}: {e}"))
        })
    };
    write("/proc/self/setgroups", "deny".to_owned())?;
    write("/proc/self/gid_map", format!("{gid} {gid} 1\n"))?;
    write("/proc/self/uid_map", format!("{uid} {uid} 1\n"))?;
    Ok(NetnsOutcome::UserAndNet)
}
