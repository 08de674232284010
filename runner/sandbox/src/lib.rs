//! The Linux command sandbox: Landlock, seccomp, hardening, probe.
//!
//! The server launches every sandboxed command as `codespace-sandbox-helper __sandbox-exec --
//! argv…` (the dedicated helper beside it, see [`choose_helper`]; else the `codespace` binary
//! itself, `codespace __sandbox-exec -- argv…`) with the
//! [`SandboxPlan`] as JSON in [`PLAN_ENV`] (see [`launcher_parts`]). Its `main` hands the
//! arguments after [`HELPER_ARG`] to [`run_helper`] (or [`helper_main`]), which restricts the
//! process and `execvp`s the target. The server builds that launch with [`SandboxCommand`] and
//! learns the outcome from the exec handshake ([`Handshake`]: a pipe the target's `execve`
//! closes, or the helper's refusal message). On failure the helper writes its message there,
//! prints one stderr line starting `codespace-sandbox:` and exits with code 126 (127 if the
//! program does not exist); the target never runs.
//!
//! What a sandboxed command gets:
//! - **Landlock** (every filesystem right of the kernel's ABI handled; the ruleset must be fully
//!   enforced or the helper fails closed): reads are an allow-list — read+execute beneath
//!   [`SYSTEM_READ_PATHS`], [`SYSTEM_READ_FILES`], the workspace and `extra_read`; full access
//!   beneath the workspace only when `write_workspace`, and beneath `tmp_dir` and `home_dir`;
//!   read/write/ioctl on [`DEVICE_PATHS`] and on its own terminal (PTY mode); read/write but no
//!   ioctl on [`TTY_ALIAS`]. No rule grants creating device nodes. With ABI ≥ 6 it cannot signal
//!   or reach abstract UNIX sockets outside its domain; with ABI ≥ 4 and `Restricted`, TCP
//!   bind/connect is denied too.
//! - **seccomp** ([`ALWAYS_DENIED`] → `EPERM` in both modes; `ioctl` with a request in
//!   [`DENIED_IOCTLS`] (`TIOCSTI`, `TIOCLINUX`) → `EPERM`; `clone` with namespace flags →
//!   `EPERM`; `clone3` → `ENOSYS` so libc falls back to `clone`; x32 syscalls → `EPERM`;
//!   `Restricted` adds `socket`/`socketpair` with a domain other than `AF_UNIX` → `EPERM`).
//! - **No capabilities**: bounding, permitted, effective, inheritable and ambient sets emptied.
//! - `PR_SET_NO_NEW_PRIVS`, its own session (no controlling terminal in pipe mode), and in
//!   `Restricted` mode a private network namespace (best-effort).
//! - **Secret masks** (`SandboxPlan::masks`): a private mount namespace in which each withheld
//!   path is covered by an empty read-only file or directory; the command cannot undo them
//!   (seccomp) nor hardlink them (`EXDEV`). Every directory between the workspace root and a
//!   mask is a mount point of its own, so a secret's parent cannot be renamed away (`EBUSY`).
//!   Masks that cannot be applied fail closed.
//! - **Write scope** (`SandboxPlan::write_workspace`, `write_paths`, `read_only`): Landlock
//!   write rules beneath the root and/or each writable directory, and in the same private mount
//!   namespace a read-only bind over each denied path beneath a writable one (`.git` by
//!   default), which cannot be renamed or removed either. Without masks, that namespace is one
//!   the server prepared for exactly this scope when the helper's check says it holds it
//!   ([`SandboxPlan::mount_ns_fd`], `mountns.rs`), so the command's exit tears nothing down.
//! - **Staged view** (`SandboxPlan::stage_dir`, `stage.rs`): a read-only overlay of a patch's
//!   new contents over the workspace root in that namespace, beneath the masks (a `before_patch`
//!   hook sees the patched tree and writes nothing).

mod caps;
mod error;
mod fs_rules;
mod handshake;
mod harden;
mod helper;
mod helper_exe;
mod launch;
mod mask;
mod mount;
mod mountns;
mod netns;
mod plan;
mod probe;
mod relay;
mod scope;
mod seccomp;
mod spare;
mod stage;
mod steps;
#[cfg(test)]
mod test_alone;

pub use error::{HELPER_FAILURE_EXIT, HELPER_NOT_FOUND_EXIT, HELPER_STDERR_PREFIX, SandboxError};
pub use fs_rules::{DEVICE_PATHS, SYSTEM_READ_FILES, SYSTEM_READ_PATHS, TTY_ALIAS};
pub use handshake::{HANDSHAKE_ARG, Handshake, HelperOutcome, MAX_REFUSAL_BYTES, handshake_pipe};
pub use harden::{
    SCRUBBED_ENV_NAMES, SCRUBBED_ENV_PREFIXES, harden_current_process, is_scrubbed_env_name,
    limit_heap_arenas, release_free_heap, scrub_env,
};
pub use helper::{SELF_START_CGROUP_ARG, SELF_START_PARENT_ARG, helper_main, run_helper};
pub use helper_exe::{
    HELPER_BIN_NAME, HELPER_STATIC_BIN_NAME, HELPER_VERSION_ARG, HelperChoice, HelperKind,
    choose_helper, dedicated_main, helper_version_line,
};
pub use launch::{
    SPARE_ENV, SPAWN_ENV, SandboxCommand, SandboxLaunch, self_start_enabled, warm_spare_enabled,
};
pub use mask::MAX_MASKS;
pub use mountns::{
    MAX_AGE as PREPARED_NAMESPACE_MAX_AGE, PREPARED_MOUNTNS_ENV, prepare_mount_namespace,
};
pub use plan::{
    ARGV_SEPARATOR, HELPER_ARG, LauncherParts, MAX_PLAN_BYTES, NetworkMode, PLAN_ENV, PROXY_PORT,
    SandboxPlan, launcher_parts,
};
pub use probe::{Probe, probe};
pub use scope::MAX_SCOPE_PATHS;
pub use seccomp::{ALWAYS_DENIED, DENIED_CLONE_FLAGS, DENIED_IOCTLS};
pub use spare::{
    MAX_SPARE_MESSAGE, NETWORK_FD_ARG, NETWORK_REPORT, PRIVATE_NETWORK_ARG, SPARE_ARG, run_spare,
};
pub use stage::{MAX_STAGED_FILES, StagedFile, write_stage};
pub use steps::{STEPS_ENV, STEPS_PREFIX, STEPS_SERVER_ENV, monotonic_ns};
