//! The sandbox plan (what a sandboxed command may do) and how it travels to the helper.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::SandboxError;

/// Environment variable that carries the plan, as JSON, from the runner to the helper.
/// The helper removes it from the target's environment before `execvp`.
pub const PLAN_ENV: &str = "CODESPACE_SANDBOX_PLAN";

/// Largest encoded plan: Linux refuses an environment string longer than 128 KiB
/// (`MAX_ARG_STRLEN`), the variable's name and `=` included; keep a margin.
pub const MAX_PLAN_BYTES: usize = 120 * 1024;

/// The first argument (`argv[1]`) that makes the `codespace` binary act as the sandbox helper.
pub const HELPER_ARG: &str = "__sandbox-exec";

/// Separator between the helper arguments and the target argv.
pub const ARGV_SEPARATOR: &str = "--";

/// Network access of a sandboxed command (from the `process_network` decision).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NetworkMode {
    /// Only `AF_UNIX` sockets may be created (seccomp), TCP bind/connect is also denied by
    /// Landlock where the ABI has it, and a private network namespace is added best-effort.
    Restricted,
    /// No network restriction.
    Enabled,
    /// A private network namespace (required, not best-effort) whose only reachable port is
    /// the relay on `127.0.0.1:`[`PROXY_PORT`], which hands every connection to the server's
    /// egress proxy over [`SandboxPlan::proxy_control_fd`]. Inet sockets are allowed (the
    /// namespace has only loopback); Landlock (ABI ≥ 4) allows TCP connect to the relay's port
    /// only and no bind.
    Proxy,
}

/// The port of the relay inside a `Proxy` command's network namespace
/// (`HTTP_PROXY=http://127.0.0.1:3128`).
pub const PROXY_PORT: u16 = 3128;

/// What one sandboxed command may do.
///
/// Reads are narrowed to an allow-list: the workspace, the system trees in
/// [`crate::SYSTEM_READ_PATHS`], the device nodes in [`crate::DEVICE_PATHS`], the temp dir, the
/// home dir and `extra_read` (the operator's `read_paths`). Everything else is unreadable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxPlan {
    /// Absolute path of the workspace root.
    pub workspace_root: PathBuf,
    /// Whether the whole workspace may be written (the `process_write` decision of its root).
    pub write_workspace: bool,
    /// Directories strictly beneath `workspace_root` (absolute) the command may write besides
    /// the root: the allowed candidates of its write scope (`process_write` decided per
    /// candidate). Each becomes a Landlock write rule on the directory opened beneath the root
    /// with no symlink on the way; a missing one is skipped.
    #[serde(default)]
    pub write_paths: Vec<PathBuf>,
    /// Paths strictly beneath `workspace_root` (absolute) that a read-only bind mount covers in
    /// the command's own mount namespace: the denied candidates of its write scope that lie
    /// beneath a writable one (`.git` by default). A write there fails with `EROFS`, and the
    /// mount point cannot be renamed or removed (`EBUSY`). A writable candidate beneath one of
    /// them gets a writable bind of its own on top. When they cannot be mounted, the command
    /// does not run.
    #[serde(default)]
    pub read_only: Vec<PathBuf>,
    /// Network access.
    pub network: NetworkMode,
    /// Private writable temp dir (absolute, created by the caller), if any.
    pub tmp_dir: Option<PathBuf>,
    /// Extra absolute paths to grant read+execute on (missing ones are skipped).
    #[serde(default)]
    pub extra_read: Vec<PathBuf>,
    /// The command's home directory (absolute, created by the caller): full access, like the
    /// temp dir. `None`: no home rule.
    #[serde(default)]
    pub home_dir: Option<PathBuf>,
    /// Test hook: behave as if the kernel had no Landlock, so the helper fails closed.
    #[serde(default)]
    pub force_landlock_unavailable: bool,
    /// Secret masks: absolute paths strictly beneath `workspace_root` that the command must not
    /// see. The helper gives the command its own mount namespace and covers each with an empty
    /// read-only file or directory (see [`crate::MAX_MASKS`]); when it cannot, the command does
    /// not run.
    #[serde(default)]
    pub masks: Vec<PathBuf>,
    /// Also mask, the same way, every entry of the workspace root whose name is not valid UTF-8
    /// (the plan cannot carry such a name, and policy cannot decide it): the helper reads the
    /// root itself in the command's mount namespace, so one created after the plan was made is
    /// masked too. Symlinks are skipped, as for `masks`; more than [`crate::MAX_MASKS`] such
    /// entries, or any that cannot be masked, and the command does not run.
    #[serde(default)]
    pub mask_non_utf8_top_level: bool,
    /// `Proxy` mode: the number of the descriptor (inherited across `exec`) of the Unix
    /// `SOCK_SEQPACKET` socket whose other end is the server's proxy for this process. The
    /// relay passes each accepted connection over it; the command never holds it.
    #[serde(default)]
    pub proxy_control_fd: Option<i32>,
    /// The number of an inherited descriptor of a mount namespace the server prepared for this
    /// plan's write scope (see [`crate::mountns`]): the helper enters it when it holds exactly
    /// that scope, and otherwise builds its own as without it. Set by
    /// [`crate::SandboxCommand::launch`]; leave it `None`.
    #[serde(default)]
    pub mount_ns_fd: Option<i32>,
    /// A staged view of the workspace (absolute, outside it; written by
    /// [`crate::write_stage`]): the helper mounts it read-only over the workspace root in the
    /// command's own mount namespace before the masks (see `stage.rs`), or the command does not
    /// run. The command then sees the workspace as a patch would leave it and can write none of
    /// it (a `before_patch` hook).
    #[serde(default)]
    pub stage_dir: Option<PathBuf>,
}

impl SandboxPlan {
    /// The most restrictive plan for `workspace_root`: read-only workspace, restricted network,
    /// no temp dir, no extra reads.
    pub fn new(workspace_root: impl Into<PathBuf>) -> Self {
        Self {
            workspace_root: workspace_root.into(),
            write_workspace: false,
            write_paths: Vec::new(),
            read_only: Vec::new(),
            network: NetworkMode::Restricted,
            tmp_dir: None,
            extra_read: Vec::new(),
            home_dir: None,
            force_landlock_unavailable: false,
            masks: Vec::new(),
            mask_non_utf8_top_level: false,
            proxy_control_fd: None,
            mount_ns_fd: None,
            stage_dir: None,
        }
    }

    /// Checks that every path in the plan is absolute.
    pub fn validate(&self) -> Result<(), SandboxError> {
        require_absolute(&self.workspace_root, "workspace root")?;
        if let Some(tmp) = &self.tmp_dir {
            require_absolute(tmp, "temp dir")?;
        }
        if let Some(home) = &self.home_dir {
            require_absolute(home, "home dir")?;
        }
        for (index, path) in self.extra_read.iter().enumerate() {
            require_absolute(path, &format!("extra read path #{index}"))?;
        }
        if let Some(stage) = &self.stage_dir {
            require_absolute(stage, "stage dir")?;
            if stage.starts_with(&self.workspace_root) {
                return Err(SandboxError::InvalidPlan(
                    "the stage dir must lie outside the workspace".into(),
                ));
            }
            if self.write_workspace || !self.write_paths.is_empty() {
                return Err(SandboxError::InvalidPlan(
                    "a staged view is read-only: no write scope may come with it".into(),
                ));
            }
        }
        if self.masks.len() > crate::mask::MAX_MASKS {
            return Err(SandboxError::InvalidPlan(format!(
                "{} masks exceed the limit of {}",
                self.masks.len(),
                crate::mask::MAX_MASKS
            )));
        }
        for (index, path) in self.masks.iter().enumerate() {
            crate::mask::relative_mask(&self.workspace_root, path, index)?;
        }
        for (role, paths) in [
            ("write path", &self.write_paths),
            ("read-only path", &self.read_only),
        ] {
            if paths.len() > crate::scope::MAX_SCOPE_PATHS {
                return Err(SandboxError::InvalidPlan(format!(
                    "{} {role}s exceed the limit of {}",
                    paths.len(),
                    crate::scope::MAX_SCOPE_PATHS
                )));
            }
            for (index, path) in paths.iter().enumerate() {
                crate::mount::relative_beneath(&self.workspace_root, path, role, index)?;
            }
        }
        if self.mount_ns_fd.is_some_and(|fd| fd <= 2) {
            return Err(SandboxError::InvalidPlan(
                "a mount namespace descriptor must be above 2".into(),
            ));
        }
        match (self.network, self.proxy_control_fd) {
            (NetworkMode::Proxy, Some(fd)) if fd > 2 => Ok(()),
            (NetworkMode::Proxy, _) => Err(SandboxError::InvalidPlan(
                "proxy mode needs the proxy control descriptor (above 2)".into(),
            )),
            (_, Some(_)) => Err(SandboxError::InvalidPlan(
                "a proxy control descriptor is only valid in proxy mode".into(),
            )),
            (_, None) => Ok(()),
        }
    }

    /// Serializes the plan to the JSON carried in [`PLAN_ENV`] (validating it first). A plan
    /// that would not fit in one environment string ([`MAX_PLAN_BYTES`]) is refused.
    pub fn to_json(&self) -> Result<String, SandboxError> {
        self.validate()?;
        let json = serde_json::to_string(self)
            .map_err(|e| SandboxError::InvalidPlan(format!("cannot encode plan: {e}")))?;
        if json.len() > MAX_PLAN_BYTES {
            return Err(SandboxError::InvalidPlan(format!(
                "the plan is {} bytes, more than the {MAX_PLAN_BYTES} one environment string can carry",
                json.len()
            )));
        }
        Ok(json)
    }

    /// Parses and validates a plan from the JSON carried in [`PLAN_ENV`].
    pub fn from_json(json: &str) -> Result<Self, SandboxError> {
        let plan: Self = serde_json::from_str(json)
            .map_err(|e| SandboxError::InvalidPlan(format!("cannot decode plan: {e}")))?;
        plan.validate()?;
        Ok(plan)
    }
}

fn require_absolute(path: &Path, role: &str) -> Result<(), SandboxError> {
    if path.is_absolute() {
        Ok(())
    } else {
        Err(SandboxError::InvalidPlan(format!(
            "the {role} must be an absolute path"
        )))
    }
}

/// The pieces the process runner needs to launch a command under the sandbox.
pub type LauncherParts = (PathBuf, Vec<String>, Vec<(String, String)>);

/// Builds the launcher pieces: program = `exe` (normally `std::env::current_exe()`),
/// args = `[HELPER_ARG]`, env = `[(PLAN_ENV, json)]`. The process runner then runs
/// `program args… -- argv…` with that env added.
pub fn launcher_parts(plan: &SandboxPlan, exe: &Path) -> Result<LauncherParts, SandboxError> {
    let json = plan.to_json()?;
    Ok((
        exe.to_path_buf(),
        vec![HELPER_ARG.to_owned()],
        vec![(PLAN_ENV.to_owned(), json)],
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> SandboxPlan {
        SandboxPlan {
            workspace_root: "/srv/ws".into(),
            write_workspace: true,
            write_paths: vec!["/srv/ws/target".into()],
            read_only: vec!["/srv/ws/.git".into()],
            network: NetworkMode::Enabled,
            tmp_dir: Some("/tmp/cs-1".into()),
            extra_read: vec!["/opt/tools".into()],
            home_dir: Some("/srv/homes/w".into()),
            force_landlock_unavailable: false,
            masks: vec!["/srv/ws/.env".into(), "/srv/ws/sub/secrets".into()],
            mask_non_utf8_top_level: true,
            proxy_control_fd: None,
            mount_ns_fd: Some(7),
            stage_dir: None,
        }
    }

    #[test]
    fn json_round_trip_keeps_every_field() {
        let plan = sample();
        let json = plan.to_json().unwrap();
        assert!(json.contains("\"network\":\"enabled\""), "{json}");
        assert_eq!(SandboxPlan::from_json(&json).unwrap(), plan);
    }

    #[test]
    fn proxy_mode_and_its_control_descriptor_go_together() {
        let mut plan = sample();
        plan.network = NetworkMode::Proxy;
        assert!(plan.validate().is_err());
        plan.proxy_control_fd = Some(2);
        assert!(plan.validate().is_err());
        plan.proxy_control_fd = Some(9);
        let json = plan.to_json().unwrap();
        assert!(json.contains("\"network\":\"proxy\""), "{json}");
        assert_eq!(SandboxPlan::from_json(&json).unwrap(), plan);
        plan.network = NetworkMode::Enabled;
        assert!(plan.validate().is_err());
    }

    #[test]
    fn a_mount_namespace_descriptor_is_above_2() {
        let mut plan = sample();
        plan.mount_ns_fd = Some(2);
        assert!(matches!(plan.validate(), Err(SandboxError::InvalidPlan(_))));
        plan.mount_ns_fd = Some(3);
        assert!(plan.validate().is_ok());
    }

    #[test]
    fn relative_paths_are_rejected_without_echoing_them() {
        let mut plan = sample();
        plan.tmp_dir = Some("rel/tmp".into());
        let err = plan.to_json().unwrap_err().to_string();
        assert!(err.contains("temp dir"), "{err}");
        assert!(!err.contains("rel/tmp"), "{err}");
        let mut plan = sample();
        plan.home_dir = Some("home".into());
        let err = plan.to_json().unwrap_err().to_string();
        assert!(err.contains("home dir"), "{err}");
        let mut plan = sample();
        plan.workspace_root = "ws".into();
        assert!(matches!(plan.validate(), Err(SandboxError::InvalidPlan(_))));
    }

    #[test]
    fn masks_outside_the_workspace_are_rejected() {
        let mut plan = sample();
        plan.masks = vec!["/srv/other/.env".into()];
        let err = plan.to_json().unwrap_err().to_string();
        assert!(err.contains("mask #0"), "{err}");
        assert!(!err.contains("/srv"), "{err}");
        plan.masks = vec!["/srv/ws/../etc/passwd".into()];
        assert!(matches!(plan.validate(), Err(SandboxError::InvalidPlan(_))));
        plan.masks = vec!["/srv/ws".into()];
        assert!(matches!(plan.validate(), Err(SandboxError::InvalidPlan(_))));
        plan.masks = Vec::new();
        plan.read_only = vec!["/srv/other/.git".into()];
        let err = plan.to_json().unwrap_err().to_string();
        assert!(err.contains("read-only path #0"), "{err}");
        assert!(!err.contains("/srv"), "{err}");
        plan.read_only = Vec::new();
        plan.write_paths = vec!["/srv/ws/../x".into()];
        let err = plan.to_json().unwrap_err().to_string();
        assert!(err.contains("write path #0"), "{err}");
        // A plan without the field (an older runner) decodes with no masks.
        let json = r#"{"workspace_root":"/x","write_workspace":false,"network":"restricted","tmp_dir":null}"#;
        let old = SandboxPlan::from_json(json).unwrap();
        assert!(old.masks.is_empty());
        assert!(!old.mask_non_utf8_top_level);
    }

    #[test]
    fn unknown_fields_and_bad_json_are_rejected() {
        let err = SandboxPlan::from_json("{\"workspace_root\":\"/x\",\"bogus\":1}").unwrap_err();
        assert!(matches!(err, SandboxError::InvalidPlan(_)));
        assert!(SandboxPlan::from_json("not json").is_err());
    }

    #[test]
    fn launcher_parts_put_plan_in_env_not_argv() {
        let plan = sample();
        let (program, args, env) = launcher_parts(&plan, Path::new("/usr/bin/codespace")).unwrap();
        assert_eq!(program, PathBuf::from("/usr/bin/codespace"));
        assert_eq!(args, vec![HELPER_ARG.to_owned()]);
        assert_eq!(env.len(), 1);
        assert_eq!(env[0].0, PLAN_ENV);
        assert_eq!(SandboxPlan::from_json(&env[0].1).unwrap(), plan);
    }

    #[test]
    fn new_plan_is_most_restrictive() {
        let plan = SandboxPlan::new("/w");
        assert!(!plan.write_workspace);
        assert_eq!(plan.network, NetworkMode::Restricted);
        assert!(plan.tmp_dir.is_none() && plan.extra_read.is_empty() && plan.home_dir.is_none());
        assert!(plan.masks.is_empty());
        assert!(plan.write_paths.is_empty() && plan.read_only.is_empty());
        assert!(plan.mount_ns_fd.is_none());
        assert!(!plan.force_landlock_unavailable);
    }
}
