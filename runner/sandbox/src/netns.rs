//! Best-effort private network namespace for `NetworkMode::Restricted` (a second layer under
//! seccomp): the server's shared empty one where Landlock scopes abstract sockets, else the
//! command's own.

use std::ffi::OsStr;
use std::fs;
use std::os::fd::{AsFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use rustix::fs::{Mode, OFlags};
use rustix::thread::{LinkNameSpaceType, UnshareFlags};

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

/// The helper argument (after the handshake's, before `--`) whose value is the number of an
/// inherited descriptor of the server's shared network namespace (see [`shared_for_launch`]).
pub const NETNS_ARG: &str = "--netns-fd";

/// The shared namespace once its build ended (`None`: the kernel refused the server one).
static SHARED: OnceLock<Option<Arc<OwnedFd>>> = OnceLock::new();
/// Whether the build was started.
static STARTED: AtomicBool = AtomicBool::new(false);

/// Server side: the descriptor of the one empty network namespace (only a `lo` that is down,
/// which no command can bring up: no capabilities, seccomp) that `Restricted` commands of this
/// server enter with `setns` instead of creating one each (`unshare(CLONE_NEWNET)` costs
/// 0.35-0.45 ms per command on the development VM, and its teardown runs a network-namespace
/// cleanup on a kernel worker after every exit). `None` until it is built: the first call starts
/// the build on a thread of its own and never waits for it (that command creates its own
/// namespace, as does every command when the kernel refuses the server one: no
/// `CAP_SYS_ADMIN`).
///
/// What sharing gives up, and why the helper only enters it with Landlock ABI ≥ 6: commands in
/// one network namespace share its abstract UNIX socket names; from ABI 6 on, Landlock scopes
/// them to the command's own domain, so no command reaches another's. Inet traffic between
/// commands is impossible as before (seccomp allows only `AF_UNIX` sockets in `Restricted`, and
/// the loopback stays down).
pub(crate) fn shared_for_launch() -> Option<Arc<OwnedFd>> {
    if let Some(ns) = SHARED.get() {
        return ns.clone();
    }
    if !STARTED.swap(true, Ordering::AcqRel) {
        let spawned = std::thread::Builder::new()
            .name("codespace-netns".into())
            .spawn(|| {
                let _ = SHARED.set(build_on_this_thread().ok().map(Arc::new));
            });
        if spawned.is_err() {
            let _ = SHARED.set(None);
        }
    }
    None
}

/// Builds the shared namespace now when it is not built yet (blocking, on a thread of its own)
/// and says whether the server has one: for start-up and tests; launches never wait for it.
pub fn prepare_shared_network_namespace() -> bool {
    if let Some(ns) = SHARED.get() {
        return ns.is_some();
    }
    STARTED.store(true, Ordering::Release);
    let built = std::thread::Builder::new()
        .name("codespace-netns".into())
        .spawn(build_on_this_thread)
        .ok()
        .and_then(|t| t.join().ok())
        .and_then(Result::ok);
    // A concurrent build may have won the race: either namespace is as good.
    let _ = SHARED.set(built.map(Arc::new));
    SHARED.get().is_some_and(Option::is_some)
}

/// Moves the calling thread into a new network namespace and returns its descriptor. The thread
/// must end right after (only that thread's network namespace changed).
fn build_on_this_thread() -> Result<OwnedFd, rustix::io::Errno> {
    // SAFETY: CLONE_NEWNET changes only this thread's network namespace; no descriptor table,
    // filesystem context or memory is un-shared, and the thread runs nothing else before it ends.
    unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWNET) }?;
    rustix::fs::open(
        "/proc/thread-self/ns/net",
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// Helper side: takes the descriptor named after [`NETNS_ARG`] and marks it close-on-exec at once,
/// so the target never holds it, whatever the helper does with it.
pub(crate) fn take_shared(number: &OsStr) -> Result<OwnedFd, SandboxError> {
    let bad = |what: &str| SandboxError::Usage(format!("{NETNS_ARG}: {what}"));
    let fd: RawFd = number
        .to_str()
        .and_then(|s| s.parse().ok())
        .filter(|fd| *fd > 2)
        .ok_or_else(|| bad("not a descriptor number above 2"))?;
    // SAFETY: F_GETFD only reads the descriptor's flags; a closed number fails with EBADF.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
        return Err(bad("the descriptor is not open"));
    }
    // SAFETY: the descriptor is open (checked above) and nothing else in this process owns it:
    // the runner cleared its close-on-exec flag for this helper alone.
    let ns = unsafe { OwnedFd::from_raw_fd(fd) };
    rustix::io::fcntl_setfd(&ns, rustix::io::FdFlags::CLOEXEC)
        .map_err(|_| bad("cannot mark it close-on-exec"))?;
    Ok(ns)
}

/// Helper side, `Restricted`: enters the server's shared namespace `ns` when Landlock will scope
/// abstract UNIX sockets (ABI ≥ 6, see [`shared_for_launch`]) and the namespace is not the one
/// the helper is already in; returns whether it did (else the caller creates its own). The
/// descriptor is closed either way.
pub(crate) fn enter_shared(ns: OwnedFd, kernel_abi: u32) -> bool {
    if kernel_abi < 6 {
        return false;
    }
    let Ok(own) = rustix::fs::stat("/proc/self/ns/net") else {
        return false;
    };
    let Ok(theirs) = rustix::fs::fstat(&ns) else {
        return false;
    };
    if (own.st_dev, own.st_ino) == (theirs.st_dev, theirs.st_ino) {
        return false;
    }
    rustix::thread::move_into_link_name_space(ns.as_fd(), Some(LinkNameSpaceType::Network)).is_ok()
}
