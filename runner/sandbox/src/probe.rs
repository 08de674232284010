//! Cheap detection of the kernel features the sandbox relies on (Landlock, seccomp, namespaces,
//! and the mount namespaces of secret masks).

use std::fs;
use std::path::Path;

/// `LANDLOCK_CREATE_RULESET_VERSION`: ask `landlock_create_ruleset` for the ABI version.
const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;

/// What the running kernel offers to the sandbox. Serialized (field name → value) by
/// `codespace doctor`, so a new fact shows up there without further code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Probe {
    /// Landlock ABI version reported by the kernel, `None` when Landlock is absent or disabled.
    pub landlock_abi: Option<u32>,
    /// seccomp filter mode is available (with the `errno` action).
    pub seccomp: bool,
    /// This process could create a user namespace.
    pub user_namespaces: bool,
    /// This process could create a network namespace (directly, or inside a user namespace).
    pub net_namespaces: bool,
    /// This process could create a mount namespace (directly, or inside a user namespace): what
    /// secret masks need.
    pub mount_namespaces: bool,
}

impl Probe {
    /// Whether the helper can run at all: it needs Landlock and seccomp, and fails closed otherwise.
    pub fn sandbox_available(&self) -> bool {
        self.landlock_abi.is_some_and(|abi| abi >= 1) && self.seccomp
    }

    /// Whether `NetworkMode::Restricted` is enforced: the seccomp socket filter is the
    /// enforcement (the network namespace is only a best-effort second layer).
    pub fn network_enforceable(&self) -> bool {
        self.sandbox_available()
    }

    /// Whether secret masks can be enforced: they are applied by the helper (so the sandbox must
    /// be available) in a private mount namespace. The helper still fails closed if the kernel
    /// refuses at exec time.
    pub fn masking_available(&self) -> bool {
        self.sandbox_available() && self.mount_namespaces
    }
}

/// Probes the kernel. Reads a few `/proc` files and makes one syscall; no process is forked.
pub fn probe() -> Probe {
    let user_namespaces = user_namespaces_allowed();
    Probe {
        landlock_abi: landlock_abi(),
        seccomp: seccomp_filter_available(),
        user_namespaces,
        net_namespaces: net_namespaces_allowed(user_namespaces),
        mount_namespaces: mount_namespaces_allowed(user_namespaces),
    }
}

/// The Landlock ABI version, via the raw `landlock_create_ruleset(NULL, 0, VERSION)` syscall.
pub(crate) fn landlock_abi() -> Option<u32> {
    // SAFETY: with a NULL attribute pointer, size 0 and only the VERSION flag, the kernel reads
    // no user memory and creates no file descriptor; it returns the ABI version or -1.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0_usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(ret).ok().filter(|abi| *abi >= 1)
}

fn seccomp_filter_available() -> bool {
    let status_has_field = fs::read_to_string("/proc/self/status")
        .map(|s| s.lines().any(|l| l.starts_with("Seccomp:")))
        .unwrap_or(false);
    if !status_has_field {
        return false;
    }
    // Kernels ≥ 4.14 list the filter actions; require the one the sandbox returns.
    match fs::read_to_string("/proc/sys/kernel/seccomp/actions_avail") {
        Ok(actions) => actions.split_whitespace().any(|a| a == "errno"),
        Err(_) => true,
    }
}

fn read_number(path: &str) -> Option<i64> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

fn user_namespaces_allowed() -> bool {
    if !Path::new("/proc/self/ns/user").exists() {
        return false;
    }
    if read_number("/proc/sys/user/max_user_namespaces").is_some_and(|n| n <= 0) {
        return false;
    }
    if is_root() {
        return true;
    }
    // Distribution knobs that restrict unprivileged user namespaces.
    let debian_knob = read_number("/proc/sys/kernel/unprivileged_userns_clone");
    let apparmor_knob = read_number("/proc/sys/kernel/apparmor_restrict_unprivileged_userns");
    debian_knob != Some(0) && apparmor_knob.is_none_or(|n| n == 0)
}

fn net_namespaces_allowed(user_namespaces: bool) -> bool {
    if !Path::new("/proc/self/ns/net").exists() {
        return false;
    }
    if read_number("/proc/sys/user/max_net_namespaces").is_some_and(|n| n <= 0) {
        return false;
    }
    is_root() || user_namespaces
}

fn mount_namespaces_allowed(user_namespaces: bool) -> bool {
    if !Path::new("/proc/self/ns/mnt").exists() {
        return false;
    }
    if read_number("/proc/sys/user/max_mnt_namespaces").is_some_and(|n| n <= 0) {
        return false;
    }
    is_root() || user_namespaces
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn availability_needs_both_landlock_and_seccomp() {
        let full = Probe {
            landlock_abi: Some(7),
            seccomp: true,
            user_namespaces: true,
            net_namespaces: true,
            mount_namespaces: true,
        };
        assert!(full.sandbox_available());
        assert!(full.masking_available());
        let no_mount_ns = Probe {
            mount_namespaces: false,
            ..full
        };
        assert!(no_mount_ns.sandbox_available() && !no_mount_ns.masking_available());
        assert!(full.network_enforceable());
        let no_landlock = Probe {
            landlock_abi: None,
            ..full
        };
        assert!(!no_landlock.sandbox_available());
        assert!(
            !no_landlock.masking_available(),
            "masks are applied by the helper"
        );
        let no_seccomp = Probe {
            seccomp: false,
            ..full
        };
        assert!(!no_seccomp.sandbox_available());
        assert!(!no_seccomp.network_enforceable());
    }

    #[test]
    fn probe_is_cheap() {
        let start = std::time::Instant::now();
        for _ in 0..10 {
            let _ = probe();
        }
        let per_call = start.elapsed() / 10;
        println!("probe() takes {per_call:?} per call");
        assert!(
            per_call < std::time::Duration::from_millis(5),
            "{per_call:?}"
        );
    }
}
