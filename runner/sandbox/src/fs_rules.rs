//! The Landlock part of the sandbox: which paths may be read, written, or used as devices.

use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, NetPort, PathBeneath,
    Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetStatus, Scope, make_bitflags,
};
use rustix::fs::{FileType, Mode, OFlags};

use crate::error::SandboxError;
use crate::plan::{NetworkMode, SandboxPlan};

/// System trees every sandboxed command may read and execute (missing ones are skipped). `/etc`
/// is granted whole: Landlock cannot subtract a file from a granted tree.
pub const SYSTEM_READ_PATHS: &[&str] = &[
    "/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc", "/proc", "/sys",
];

/// Single files outside [`SYSTEM_READ_PATHS`] that are read through a well-known `/etc` symlink
/// (`/etc/resolv.conf` often points into `/run`). The rule follows the link, so only the target
/// file becomes readable, not its directory.
pub const SYSTEM_READ_FILES: &[&str] = &["/etc/resolv.conf"];

/// The only device nodes a sandboxed command may open for writing (and read, and use ioctls on):
/// pseudo devices with no state behind them. Its own terminal (PTY mode) is added at run time.
pub const DEVICE_PATHS: &[&str] = &["/dev/null", "/dev/zero", "/dev/random", "/dev/urandom"];

/// The controlling-terminal alias: read and write, never ioctls (no `TIOCSTI`-style requests
/// through it). In pipe mode the command has no controlling terminal, so opening it fails.
pub const TTY_ALIAS: &str = "/dev/tty";

/// Rights no rule ever grants: creating character or block device nodes.
const NEVER_GRANTED: BitFlags<AccessFs> = make_bitflags!(AccessFs::{MakeChar | MakeBlock});

/// Rights the kernel accepts on a rule whose path is not a directory.
const FILE_RIGHTS: BitFlags<AccessFs> = make_bitflags!(AccessFs::{
    Execute | ReadFile | WriteFile | Truncate | IoctlDev | ResolveUnix
});

/// Whether a missing path is an error (fail closed) or is skipped.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Missing {
    Fail,
    Skip,
}

/// One rule before its path is opened.
struct RuleSpec<'a> {
    role: String,
    path: &'a Path,
    access: BitFlags<AccessFs>,
    missing: Missing,
}

/// A ruleset a warm spare made while it waited ([`crate::spare`]): created for one kernel ABI
/// and one answer to "is TCP handled" (a plan whose network mode is not `enabled`), with the
/// rules every plan gets already added (the system trees and files, the pseudo devices, the
/// terminal alias). It serves only a plan on the same ABI with the same handled rights
/// ([`restrict_self`] checks); the plan's own rules are added after the hand-over.
#[derive(Debug)]
pub(crate) struct RulesAhead {
    kernel_abi: u32,
    net_handled: bool,
    ruleset: RulesetCreated,
}

impl RulesAhead {
    /// The ruleset a plan in `network` mode would start from on a kernel of `kernel_abi`, its
    /// plan-independent rules added.
    pub(crate) fn build(kernel_abi: u32, network: NetworkMode) -> Result<RulesAhead, SandboxError> {
        let abi = abi_of(kernel_abi)?;
        let net_handled = handles_net(network, abi);
        Ok(RulesAhead {
            kernel_abi,
            net_handled,
            ruleset: with_common_rules(create(abi, net_handled)?, abi)?,
        })
    }

    /// Whether this ruleset is the one a plan in `network` mode starts from on `kernel_abi`.
    fn serves(&self, kernel_abi: u32, network: NetworkMode) -> bool {
        self.kernel_abi == kernel_abi
            && abi_of(kernel_abi).is_ok_and(|abi| self.net_handled == handles_net(network, abi))
    }
}

/// The best ABI both this crate and the kernel know (the crate clamps unknown versions down).
fn abi_of(kernel_abi: u32) -> Result<ABI, SandboxError> {
    let abi = ABI::from(i32::try_from(kernel_abi).unwrap_or(i32::MAX));
    if abi == ABI::Unsupported {
        return Err(SandboxError::Unavailable(
            "the kernel does not support Landlock".into(),
        ));
    }
    Ok(abi)
}

/// Whether a plan in `network` mode handles TCP bind/connect (ABI ≥ 4).
fn handles_net(network: NetworkMode, abi: ABI) -> bool {
    network != NetworkMode::Enabled && abi >= ABI::V4
}

/// A new ruleset handling every filesystem right of `abi`, TCP when `net_handled`, and the
/// scopes (ABI ≥ 6).
fn create(abi: ABI, net_handled: bool) -> Result<RulesetCreated, SandboxError> {
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(abi))
        .map_err(landlock_err)?;
    if net_handled {
        // Restricted: no NetPort rule follows, so every TCP bind/connect is denied (a second
        // layer under seccomp). Proxy: the one rule `restrict_self` adds allows connecting to
        // the relay's port.
        ruleset = ruleset
            .handle_access(AccessNet::from_all(abi))
            .map_err(landlock_err)?;
    }
    if abi >= ABI::V6 {
        ruleset = ruleset.scope(Scope::from_all(abi)).map_err(landlock_err)?;
    }
    ruleset.create().map_err(landlock_err)
}

/// `created` with the rules every plan gets ([`common_specs`]).
fn with_common_rules(
    mut created: RulesetCreated,
    abi: ABI,
) -> Result<RulesetCreated, SandboxError> {
    let handled = AccessFs::from_all(abi);
    for spec in common_specs(abi) {
        if let Some(rule) = open_rule(&spec, handled)? {
            created = created.add_rule(rule).map_err(landlock_err)?;
        }
    }
    Ok(created)
}

/// Builds the Landlock ruleset for `plan` against the kernel's `kernel_abi` and restricts the
/// calling thread with it. Fails closed unless the kernel reports the ruleset fully enforced.
/// `ahead`: a ruleset a warm spare made, used only when it [serves](RulesAhead::serves) this
/// plan (else it is dropped and a fresh one is made, as without a spare).
pub(crate) fn restrict_self(
    plan: &SandboxPlan,
    kernel_abi: u32,
    ahead: Option<RulesAhead>,
) -> Result<(), SandboxError> {
    let abi = abi_of(kernel_abi)?;
    let handled = AccessFs::from_all(abi);
    let net_handled = handles_net(plan.network, abi);
    let mut created = match ahead.filter(|a| a.serves(kernel_abi, plan.network)) {
        Some(ahead) => ahead.ruleset,
        None => with_common_rules(create(abi, net_handled)?, abi)?,
    };
    let own_tty = own_terminal();
    for spec in plan_specs(plan, abi, own_tty.as_deref()) {
        if let Some(rule) = open_rule(&spec, handled)? {
            created = created.add_rule(rule).map_err(landlock_err)?;
        }
    }
    for rule in write_path_rules(plan, abi, handled)? {
        created = created.add_rule(rule).map_err(landlock_err)?;
    }
    if net_handled && plan.network == NetworkMode::Proxy {
        created = created
            .add_rule(NetPort::new(crate::plan::PROXY_PORT, AccessNet::ConnectTcp))
            .map_err(landlock_err)?;
    }
    let status = created.restrict_self().map_err(landlock_err)?;
    if status.ruleset == RulesetStatus::FullyEnforced {
        Ok(())
    } else {
        Err(SandboxError::Unavailable(format!(
            "landlock ruleset was {:?}, not fully enforced (kernel ABI {kernel_abi})",
            status.ruleset
        )))
    }
}

/// The proxy relay's ruleset: every filesystem right, TCP bind/connect (ABI ≥ 4) and the scopes
/// (ABI ≥ 6) handled, and no rule: the relay opens no file and makes no connection after it
/// starts (its listener and control socket are already open). Fails closed unless fully enforced.
pub(crate) fn restrict_relay(kernel_abi: u32) -> Result<(), SandboxError> {
    let abi = abi_of(kernel_abi)?;
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(abi))
        .map_err(landlock_err)?;
    if abi >= ABI::V4 {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(abi))
            .map_err(landlock_err)?;
    }
    if abi >= ABI::V6 {
        ruleset = ruleset.scope(Scope::from_all(abi)).map_err(landlock_err)?;
    }
    let status = ruleset
        .create()
        .map_err(landlock_err)?
        .restrict_self()
        .map_err(landlock_err)?;
    if status.ruleset == RulesetStatus::FullyEnforced {
        Ok(())
    } else {
        Err(SandboxError::Unavailable(format!(
            "the relay's landlock ruleset was {:?}, not fully enforced",
            status.ruleset
        )))
    }
}

fn landlock_err(e: landlock::RulesetError) -> SandboxError {
    SandboxError::Landlock(e.to_string())
}

/// Every rule spec of `plan` (tests: the rules a command gets, in one list).
#[cfg(test)]
fn rule_specs<'a>(plan: &'a SandboxPlan, abi: ABI, own_tty: Option<&'a Path>) -> Vec<RuleSpec<'a>> {
    let mut specs = common_specs(abi);
    specs.extend(plan_specs(plan, abi, own_tty));
    specs
}

/// The rules every plan gets: the system trees and files (read), the pseudo devices, the
/// terminal alias. A missing one is skipped.
fn common_specs(abi: ABI) -> Vec<RuleSpec<'static>> {
    let read = AccessFs::from_read(abi);
    let device = read | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev;
    let tty_alias = read | AccessFs::WriteFile | AccessFs::Truncate;
    let mut specs: Vec<RuleSpec<'static>> = SYSTEM_READ_PATHS
        .iter()
        .chain(SYSTEM_READ_FILES)
        .map(|path| RuleSpec {
            role: (*path).to_owned(),
            path: Path::new(path),
            access: read,
            missing: Missing::Skip,
        })
        .collect();
    for dev in DEVICE_PATHS {
        specs.push(RuleSpec {
            role: (*dev).to_owned(),
            path: Path::new(dev),
            access: device,
            missing: Missing::Skip,
        });
    }
    specs.push(RuleSpec {
        role: TTY_ALIAS.to_owned(),
        path: Path::new(TTY_ALIAS),
        access: tty_alias,
        missing: Missing::Skip,
    });
    specs
}

/// The rules of this plan alone: its extra read paths, the workspace root, its temp and home
/// dirs, and the command's own terminal (PTY mode). The write paths' rules are
/// [`write_path_rules`].
fn plan_specs<'a>(plan: &'a SandboxPlan, abi: ABI, own_tty: Option<&'a Path>) -> Vec<RuleSpec<'a>> {
    let read = AccessFs::from_read(abi);
    let all = AccessFs::from_all(abi) & !NEVER_GRANTED;
    let device = read | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev;
    let mut specs = Vec::new();
    for (index, path) in plan.extra_read.iter().enumerate() {
        specs.push(RuleSpec {
            role: format!("extra read path #{index}"),
            path,
            access: read,
            missing: Missing::Skip,
        });
    }
    specs.push(RuleSpec {
        role: "workspace root".into(),
        path: &plan.workspace_root,
        access: if plan.write_workspace { all } else { read },
        missing: Missing::Fail,
    });
    for (role, dir) in [("temp dir", &plan.tmp_dir), ("home dir", &plan.home_dir)] {
        if let Some(dir) = dir {
            specs.push(RuleSpec {
                role: role.into(),
                path: dir,
                access: all,
                missing: Missing::Fail,
            });
        }
    }
    if let Some(tty) = own_tty {
        specs.push(RuleSpec {
            role: "own terminal".into(),
            path: tty,
            access: device,
            missing: Missing::Fail,
        });
    }
    specs
}

/// The path of the caller's own terminal: stdin is a terminal whose session is the caller's
/// (a PTY-mode command). `None` in pipe mode, or when stdin is someone else's terminal.
pub(crate) fn own_terminal() -> Option<PathBuf> {
    let stdin = std::io::stdin();
    if !rustix::termios::isatty(&stdin) {
        return None;
    }
    // SAFETY: tcgetsid only queries the terminal on fd 0; it touches no memory of ours.
    let tty_session = unsafe { libc::tcgetsid(libc::STDIN_FILENO) };
    if tty_session <= 0 || own_session_id()? != tty_session {
        return None;
    }
    let name = rustix::termios::ttyname(&stdin, Vec::new()).ok()?;
    Some(PathBuf::from(std::ffi::OsStr::from_bytes(name.as_bytes())))
}

/// Opens the rule's path (`O_PATH`) and trims the rights to what the handled set and the file
/// type allow, so the ruleset never degrades to partial enforcement.
fn open_rule(
    spec: &RuleSpec<'_>,
    handled: BitFlags<AccessFs>,
) -> Result<Option<PathBeneath<OwnedFd>>, SandboxError> {
    let fd = match rustix::fs::open(spec.path, OFlags::PATH | OFlags::CLOEXEC, Mode::empty()) {
        Ok(fd) => fd,
        Err(e) if spec.missing == Missing::Skip && e == rustix::io::Errno::NOENT => {
            return Ok(None);
        }
        Err(e) => {
            return Err(SandboxError::InvalidPlan(format!(
                "cannot open the {}: {e}",
                spec.role
            )));
        }
    };
    let stat = rustix::fs::fstat(&fd)
        .map_err(|e| SandboxError::Landlock(format!("cannot stat the {}: {e}", spec.role)))?;
    let is_dir = FileType::from_raw_mode(stat.st_mode) == FileType::Directory;
    let access = effective_access(spec.access, handled, is_dir);
    if access.is_empty() {
        return Ok(None);
    }
    Ok(Some(PathBeneath::new(fd, access)))
}

/// The Landlock write rules of the plan's `write_paths`: each directory opened beneath the
/// workspace root with no symlink anywhere on the way (a command may have swapped one in since
/// the gateway looked), so a rule can never land outside the workspace. A missing path, a
/// symlink or a non-directory gets no rule (it stays read-only).
fn write_path_rules(
    plan: &SandboxPlan,
    abi: ABI,
    handled: BitFlags<AccessFs>,
) -> Result<Vec<PathBeneath<OwnedFd>>, SandboxError> {
    if plan.write_paths.is_empty() {
        return Ok(Vec::new());
    }
    let all = AccessFs::from_all(abi) & !NEVER_GRANTED;
    let root = rustix::fs::open(
        &plan.workspace_root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| SandboxError::InvalidPlan(format!("cannot open the workspace root: {e}")))?;
    let mut rules = Vec::new();
    for (index, path) in plan.write_paths.iter().enumerate() {
        let rel = crate::mount::relative_beneath(&plan.workspace_root, path, "write path", index)?;
        let fd = match rustix::fs::openat2(
            &root,
            rel,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
            rustix::fs::ResolveFlags::BENEATH
                | rustix::fs::ResolveFlags::NO_SYMLINKS
                | rustix::fs::ResolveFlags::NO_MAGICLINKS,
        ) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT | rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR) => {
                continue;
            }
            Err(e) => {
                return Err(SandboxError::InvalidPlan(format!(
                    "cannot open write path #{index}: {e}"
                )));
            }
        };
        let access = effective_access(all, handled, true);
        rules.push(PathBeneath::new(fd, access));
    }
    Ok(rules)
}

/// The rights a rule really gets: only handled rights, and only file rights on a non-directory
/// (the kernel rejects directory rights there, which the crate reports as partial enforcement).
fn effective_access(
    wanted: BitFlags<AccessFs>,
    handled: BitFlags<AccessFs>,
    is_dir: bool,
) -> BitFlags<AccessFs> {
    let access = wanted & handled;
    if is_dir { access } else { access & FILE_RIGHTS }
}

/// The caller's session id, `None` when the session leader lives outside our PID namespace
/// (the kernel reports 0 then: a CI container started under someone else's session does this).
/// Read through libc because rustix's `getsid` asserts a positive id.
pub(crate) fn own_session_id() -> Option<i32> {
    // SAFETY: getsid(0) only reads the caller's session id; it touches no memory of ours.
    let sid = unsafe { libc::getsid(0) };
    (sid > 0).then_some(sid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_grant_workspace_write_only_when_asked() {
        let mut plan = SandboxPlan::new("/w");
        let ws = |plan: &SandboxPlan| {
            rule_specs(plan, ABI::V7, None)
                .into_iter()
                .find(|s| s.role == "workspace root")
                .map(|s| s.access)
                .unwrap()
        };
        assert!(!ws(&plan).contains(AccessFs::WriteFile));
        plan.write_workspace = true;
        assert!(ws(&plan).contains(AccessFs::WriteFile | AccessFs::MakeReg));
    }

    #[test]
    fn reads_are_an_allow_list_and_only_pseudo_devices_are_writable() {
        let mut plan = SandboxPlan::new("/w");
        plan.write_workspace = true;
        plan.tmp_dir = Some("/t".into());
        plan.home_dir = Some("/h".into());
        let tty = Path::new("/dev/pts/7");
        let specs = rule_specs(&plan, ABI::V7, Some(tty));
        let find = |p: &str| specs.iter().find(|s| s.path == Path::new(p));
        assert!(find("/").is_none(), "the root must not be granted");
        assert!(
            find("/dev").is_none() && find("/dev/pts").is_none() && find("/dev/ptmx").is_none()
        );
        for path in SYSTEM_READ_PATHS {
            assert_eq!(
                find(path).unwrap().access,
                AccessFs::from_read(ABI::V7),
                "{path}"
            );
        }
        let null = find("/dev/null").unwrap();
        assert!(
            null.access
                .contains(AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev)
        );
        let alias = find(TTY_ALIAS).unwrap();
        assert!(alias.access.contains(AccessFs::WriteFile));
        assert!(!alias.access.contains(AccessFs::IoctlDev));
        assert!(
            find("/dev/pts/7")
                .unwrap()
                .access
                .contains(AccessFs::IoctlDev)
        );
        for role in ["workspace root", "temp dir", "home dir"] {
            let spec = specs.iter().find(|s| s.role == role).unwrap();
            assert!(
                spec.access
                    .contains(AccessFs::MakeReg | AccessFs::WriteFile),
                "{role}"
            );
        }
        for spec in &specs {
            assert!(
                !spec.access.intersects(NEVER_GRANTED),
                "{} grants device creation",
                spec.role
            );
        }
    }

    #[test]
    fn file_rules_are_trimmed_to_file_rights() {
        let all7 = AccessFs::from_all(ABI::V7);
        let on_file = effective_access(all7, all7, false);
        assert!(!on_file.contains(AccessFs::ReadDir));
        assert!(!on_file.contains(AccessFs::MakeReg));
        assert!(on_file.contains(AccessFs::WriteFile | AccessFs::IoctlDev));
        assert_eq!(effective_access(all7, all7, true), all7);
        // Rights the kernel ABI does not handle are never put in a rule.
        let v3 = AccessFs::from_all(ABI::V3);
        assert!(!effective_access(all7, v3, true).contains(AccessFs::IoctlDev));
    }

    #[test]
    fn open_rule_skips_or_fails_on_missing_paths() {
        let spec = RuleSpec {
            role: "/dev/null".into(),
            path: Path::new("/dev/null"),
            access: AccessFs::from_all(ABI::V7),
            missing: Missing::Skip,
        };
        let handled = AccessFs::from_all(ABI::V7);
        assert!(open_rule(&spec, handled).unwrap().is_some());
        let missing = RuleSpec {
            role: "missing".into(),
            path: Path::new("/definitely/not/here"),
            access: handled,
            missing: Missing::Skip,
        };
        assert!(open_rule(&missing, handled).unwrap().is_none());
        let required = RuleSpec {
            missing: Missing::Fail,
            ..missing
        };
        let err = open_rule(&required, handled).err().unwrap().to_string();
        assert!(!err.contains("/definitely"), "{err}");
    }

    /// What a thread restricted with `plan` (and `ahead`) may do: list a system tree, read and
    /// write a workspace file, read a file outside every rule, connect to a local TCP port.
    fn probe_restricted(
        plan: &SandboxPlan,
        abi: u32,
        ahead: Option<RulesAhead>,
        outside: &Path,
        port: u16,
    ) -> [bool; 5] {
        let plan = plan.clone();
        let outside = outside.to_path_buf();
        std::thread::spawn(move || {
            restrict_self(&plan, abi, ahead).unwrap();
            let file = plan.workspace_root.join("f.txt");
            [
                std::fs::read_dir("/usr").is_ok(),
                std::fs::read(&file).is_ok(),
                std::fs::OpenOptions::new().append(true).open(&file).is_ok(),
                std::fs::read(&outside).is_ok(),
                std::net::TcpStream::connect(("127.0.0.1", port)).is_ok(),
            ]
        })
        .join()
        .unwrap()
    }

    #[test]
    fn a_ruleset_made_ahead_serves_only_a_plan_it_fits_and_grants_what_a_fresh_one_does() {
        let name =
            "a_ruleset_made_ahead_serves_only_a_plan_it_fits_and_grants_what_a_fresh_one_does";
        let Some(abi) = crate::probe::landlock_abi() else {
            codespace_test_skip::require(false, name, "Landlock is not available here");
            return;
        };
        let ws = tempfile::tempdir().unwrap();
        std::fs::write(ws.path().join("f.txt"), "x").unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let outside = elsewhere.path().join("secret.txt");
        std::fs::write(&outside, "s").unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let modes = [
            NetworkMode::Enabled,
            NetworkMode::Restricted,
            NetworkMode::Proxy,
        ];
        let net_handled = abi >= 4;
        // A ruleset made ahead plus a rule only it holds (the outside file is readable when it
        // is used).
        let with_mark = |mut ahead: RulesAhead| {
            let fd =
                rustix::fs::open(&outside, OFlags::PATH | OFlags::CLOEXEC, Mode::empty()).unwrap();
            ahead.ruleset = ahead
                .ruleset
                .add_rule(PathBeneath::new(fd, AccessFs::ReadFile))
                .unwrap();
            ahead
        };
        for write in [false, true] {
            for plan_mode in modes {
                let mut plan = SandboxPlan::new(ws.path());
                plan.write_workspace = write;
                plan.network = plan_mode;
                let fresh = probe_restricted(&plan, abi, None, &outside, port);
                let connects = !(net_handled && plan_mode != NetworkMode::Enabled);
                assert_eq!(fresh, [true, true, write, false, connects], "{plan_mode:?}");
                for ahead_mode in modes {
                    // The same grants as a fresh ruleset, whichever mode it was made for.
                    let ahead = RulesAhead::build(abi, ahead_mode).unwrap();
                    let got = probe_restricted(&plan, abi, Some(ahead), &outside, port);
                    assert_eq!(got, fresh, "made for {ahead_mode:?}, plan {plan_mode:?}");
                    // Used exactly when it fits: a rule only the ruleset made ahead holds (the
                    // outside file) is granted then, and never otherwise.
                    let marked = with_mark(RulesAhead::build(abi, ahead_mode).unwrap());
                    let fits = !net_handled
                        || (ahead_mode == NetworkMode::Enabled)
                            == (plan_mode == NetworkMode::Enabled);
                    let got = probe_restricted(&plan, abi, Some(marked), &outside, port);
                    assert_eq!(got[3], fits, "made for {ahead_mode:?}, plan {plan_mode:?}");
                    // Another kernel ABI: never used.
                    let mut other = with_mark(RulesAhead::build(abi, plan_mode).unwrap());
                    other.kernel_abi = abi + 1;
                    let got = probe_restricted(&plan, abi, Some(other), &outside, port);
                    assert!(!got[3], "a ruleset made for another ABI was used");
                }
            }
        }
        drop(listener);
    }
}
