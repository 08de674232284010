//! How the server starts one command under the sandbox helper: the launcher (program, arguments,
//! environment, inherited descriptors) for the process runner, and the server's end of the exec
//! handshake.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;

use crate::error::SandboxError;
use crate::handshake::{HANDSHAKE_ARG, Handshake, handshake_pipe};
use crate::plan::{NetworkMode, SandboxPlan, launcher_parts};
use crate::spare::PRIVATE_NETWORK_ARG;

/// One sandboxed command to launch: what the caller fills, field by field.
#[derive(Debug)]
pub struct SandboxCommand {
    /// The sandbox helper executable (`codespace-sandbox-helper`, or the `codespace` binary).
    pub helper: PathBuf,
    /// What the command may do. Its `proxy_control_fd` is set here from `proxy_control`, and its
    /// `mount_ns_fd` from the namespace prepared for its write scope when one is ready; leave
    /// both `None`.
    pub plan: SandboxPlan,
    /// `network: proxy`: the helper's end of the egress proxy's control socket (close-on-exec
    /// in the server; only this command's helper inherits it).
    pub proxy_control: Option<Arc<OwnedFd>>,
}

/// What the process runner needs to start the helper (its `Launcher`, field for field), and
/// the server's end of the exec handshake to wait on once the process is spawned.
#[derive(Debug)]
pub struct SandboxLaunch {
    /// The helper executable.
    pub program: PathBuf,
    /// The helper's arguments before `--` and the target argv.
    pub args: Vec<String>,
    /// Environment added for the helper (the plan, in [`crate::PLAN_ENV`]).
    pub env: Vec<(String, String)>,
    /// Descriptors the helper inherits, under the same numbers: the handshake's write end, and
    /// the proxy control socket in proxy mode. Drop every other copy of them once the process
    /// is spawned, or the handshake never sees its end of file.
    pub inherit_fds: Vec<Arc<OwnedFd>>,
    /// Wait on it after the spawn ([`Handshake::outcome`]).
    pub handshake: Handshake,
    /// The helper may be started with `posix_spawn` and do the steps between `fork` and `exec`
    /// itself ([`crate::SELF_START_CGROUP_ARG`], [`crate::SELF_START_PARENT_ARG`]): the server's
    /// memory is then never copied for a command's start. `false` when
    /// [`SPAWN_ENV`]`=fork` was set at the server's start (the off switch).
    pub self_start: bool,
    /// The helper may be started ahead as a warm spare ([`crate::SPARE_ARG`]) that receives
    /// this launch only when it is used: `self_start` and not turned off by [`SPARE_ENV`]`=0`.
    pub warm_spare: bool,
    /// The arguments a spare for this launch is started with, after its parent pid: the
    /// spare's shape. [`PRIVATE_NETWORK_ARG`] for a plan without the network (the spare makes
    /// its network namespace while it waits); none for a plan with it. The process runner
    /// keeps spares per program and these arguments, so a spare serves only its own shape.
    pub spare_args: Vec<String>,
    /// The plan is `NetworkMode::Restricted`: its seccomp program refuses every socket but
    /// `AF_UNIX`, so the private network namespace its spare waited in holds nothing of it once
    /// its processes are gone, and the process runner may hand that namespace to a later spare
    /// then (never while any of them lives). A `Proxy` plan brings its namespace's loopback up
    /// and listens on it, so its namespace is never used again.
    pub recycle_network: bool,
}

/// The off switch of the helper's `posix_spawn` start: `CODESPACE_SANDBOX_SPAWN=fork` in the
/// server's environment forks the server for every sandboxed command as before.
pub const SPAWN_ENV: &str = "CODESPACE_SANDBOX_SPAWN";

/// Whether sandboxed commands start with `posix_spawn` (read once per process).
pub fn self_start_enabled() -> bool {
    static ENABLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ENABLED.get_or_init(|| std::env::var_os(SPAWN_ENV).is_none_or(|v| v != "fork"))
}

/// The off switch of warm spare helpers: `CODESPACE_SANDBOX_SPARE=0` in the server's
/// environment starts every sandboxed command's helper cold, at the command's start.
pub const SPARE_ENV: &str = "CODESPACE_SANDBOX_SPARE";

/// Whether sandboxed commands may be handed to a warm spare helper (read once per process).
pub fn warm_spare_enabled() -> bool {
    static ENABLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ENABLED.get_or_init(|| {
        self_start_enabled() && std::env::var_os(SPARE_ENV).is_none_or(|v| v != "0")
    })
}

impl SandboxCommand {
    /// Validates and encodes the plan, creates the handshake pipe, and assembles the launch.
    /// A plan whose write scope needs read-only binds (and no masks) gets the mount namespace
    /// prepared for exactly that scope when one is ready, else starts its preparation in the
    /// background and goes without (see [`crate::mountns`]); this never waits for it.
    pub fn launch(self) -> Result<SandboxLaunch, SandboxError> {
        let SandboxCommand {
            helper,
            mut plan,
            proxy_control,
        } = self;
        plan.proxy_control_fd = proxy_control.as_ref().map(|fd| fd.as_raw_fd());
        plan.mount_ns_fd = None;
        let mount_ns = crate::mountns::Prepared::global().for_plan(&plan);
        plan.mount_ns_fd = mount_ns.as_ref().map(|fd| fd.as_raw_fd());
        let spare_args = match plan.network {
            NetworkMode::Restricted | NetworkMode::Proxy => vec![PRIVATE_NETWORK_ARG.to_owned()],
            NetworkMode::Enabled => Vec::new(),
        };
        let recycle_network = plan.network == NetworkMode::Restricted;
        let (program, mut args, env) = launcher_parts(&plan, &helper)?;
        let (handshake, helper_end) = handshake_pipe()?;
        args.push(HANDSHAKE_ARG.to_owned());
        args.push(helper_end.as_raw_fd().to_string());
        let mut inherit_fds = vec![Arc::new(helper_end)];
        inherit_fds.extend(proxy_control);
        inherit_fds.extend(mount_ns);
        Ok(SandboxLaunch {
            program,
            args,
            env,
            inherit_fds,
            handshake,
            self_start: self_start_enabled(),
            warm_spare: warm_spare_enabled(),
            spare_args,
            recycle_network,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::HELPER_ARG;

    #[test]
    fn the_launch_names_the_handshake_descriptor_it_hands_over() {
        let launch = SandboxCommand {
            helper: "/usr/bin/codespace".into(),
            plan: SandboxPlan::new("/srv/ws"),
            proxy_control: None,
        }
        .launch()
        .unwrap();
        assert_eq!(launch.program, PathBuf::from("/usr/bin/codespace"));
        assert_eq!(launch.inherit_fds.len(), 1);
        let fd = launch.inherit_fds[0].as_raw_fd();
        assert_eq!(
            launch.args,
            vec![
                HELPER_ARG.to_owned(),
                HANDSHAKE_ARG.to_owned(),
                fd.to_string()
            ]
        );
        // Close-on-exec in the server: no other child inherits it.
        let flags = rustix::io::fcntl_getfd(&*launch.inherit_fds[0]).unwrap();
        assert!(flags.contains(rustix::io::FdFlags::CLOEXEC));
    }

    #[test]
    fn the_proxy_control_socket_is_named_in_the_plan_and_inherited() {
        let (a, _b) = std::io::pipe().unwrap();
        let control = Arc::new(OwnedFd::from(a));
        let mut plan = SandboxPlan::new("/srv/ws");
        plan.network = NetworkMode::Proxy;
        let launch = SandboxCommand {
            helper: "/usr/bin/codespace".into(),
            plan,
            proxy_control: Some(Arc::clone(&control)),
        }
        .launch()
        .unwrap();
        assert_eq!(launch.inherit_fds.len(), 2);
        assert_eq!(launch.inherit_fds[1].as_raw_fd(), control.as_raw_fd());
        let json = &launch.env[0].1;
        let decoded = SandboxPlan::from_json(json).unwrap();
        assert_eq!(decoded.proxy_control_fd, Some(control.as_raw_fd()));
    }
}
