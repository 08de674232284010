//! The helper entry point: apply the plan to this process, then become the target command.

use std::ffi::OsString;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::process::Command;

use crate::caps;
use crate::error::SandboxError;
use crate::fs_rules;
use crate::handshake::{HANDSHAKE_ARG, HelperEnd, take_inherited_fd};
use crate::mask;
use crate::mountns;
use crate::netns;
use crate::plan::{ARGV_SEPARATOR, NetworkMode, PLAN_ENV, SandboxPlan};
use crate::probe;
use crate::relay;
use crate::seccomp::Filters;
use crate::steps::{STEPS_ENV, STEPS_SERVER_ENV, Steps};

/// Entry for the helper. `args` are what followed [`crate::HELPER_ARG`]: optionally
/// [`crate::HANDSHAKE_ARG`] and a descriptor number, then `--` and the target argv.
///
/// Steps: take the handshake descriptor (see [`crate::handshake`]) and mark it close-on-exec,
/// read the plan from [`PLAN_ENV`] (and drop it from the target's environment), build the
/// seccomp filters, set `PR_SET_NO_NEW_PRIVS`, leave the caller's session unless already a session
/// leader (so a pipe-mode command has no controlling terminal), in `Restricted` mode enter a
/// private network namespace (best-effort; in `Proxy` mode it is required and the relay is
/// started in it, see [`crate::relay`]), enter the mount namespace the server prepared for the
/// plan's write scope when it holds exactly that scope ([`crate::mountns`]), else cover the
/// plan's secret masks and write scope in a private mount namespace of its own (or fail
/// closed), drop every capability, apply Landlock (fully enforced or fail
/// closed), install seccomp, then `execvp(argv)` (which closes the handshake descriptor: the
/// server sees end of file).
///
/// Returns only on failure, after writing the error message to the handshake descriptor when
/// there is one; the caller prints [`SandboxError::stderr_line`] to stderr and exits with
/// [`SandboxError::exit_code`] (126, or 127 when the program does not exist), as
/// [`run_helper`] does. Call it while the process is still single-threaded.
pub fn helper_main(args: &[OsString]) -> SandboxError {
    helper_main_after(args, Ok(()), None, Ahead::default())
}

/// What a warm spare made while it waited for its command.
#[derive(Debug, Default)]
pub(crate) struct Ahead {
    /// The private network namespace it entered (it then serves only a plan without the
    /// network).
    pub(crate) netns: Option<netns::NetnsOutcome>,
    /// The seccomp filter it compiled, and for which network mode (used only for a plan in
    /// that mode).
    pub(crate) filters: Option<(NetworkMode, Filters)>,
    /// The Landlock ruleset it made, its plan-independent rules added (used only for a plan
    /// it serves: the same kernel ABI and handled rights).
    pub(crate) rules: Option<fs_rules::RulesAhead>,
}

/// The command's environment: the process's own, or the list a warm spare was handed.
type EnvList<'a> = Option<&'a [(OsString, OsString)]>;

fn lookup(env: EnvList<'_>, name: &str) -> Option<OsString> {
    match env {
        Some(list) => list.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()),
        None => std::env::var_os(name),
    }
}

/// [`helper_main`] for a warm spare ([`crate::spare`]): `before` is how putting the command's
/// environment and working directory in place went (a failure is refused through the
/// handshake like any other), and `env` is the command's environment it was handed (the target
/// gets exactly that; the first step mark is then `spare` instead of `start`). `ahead`: what
/// the spare made while it waited.
pub(crate) fn helper_main_after(
    args: &[OsString],
    before: Result<(), SandboxError>,
    env: EnvList<'_>,
    ahead: Ahead,
) -> SandboxError {
    let first = if env.is_some() { "spare" } else { "start" };
    let mut steps = Steps::from_env(first, |name| lookup(env, name));
    let (handshake, args) = match split_handshake(args) {
        Ok(split) => split,
        Err(e) => return e,
    };
    let prepared = before
        .and_then(|()| split_self_start(args))
        .and_then(|(start, args)| start.apply().map(|()| args))
        .and_then(|args| {
            prepare(args, handshake.as_ref(), &mut steps, env, ahead).map(|c| (args, c))
        });
    let err = match prepared {
        Ok((args, mut command)) => {
            steps.report();
            let program = args
                .get(1)
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default();
            let source = command.exec();
            SandboxError::Exec { program, source }
        }
        Err(e) => e,
    };
    if let Some(end) = handshake {
        end.refuse(&err);
    }
    err
}

/// Runs [`helper_main`], writes the `codespace-sandbox: …` line to stderr and exits with the
/// error's exit code (126 for every sandbox failure).
pub fn run_helper(args: &[OsString]) -> ! {
    let err = helper_main(args);
    let _ = writeln!(std::io::stderr(), "{}", err.stderr_line());
    std::process::exit(err.exit_code())
}

/// Takes the handshake descriptor when `args` start with [`HANDSHAKE_ARG`] and its number;
/// returns the rest (`--` and the target argv).
fn split_handshake(args: &[OsString]) -> Result<(Option<HelperEnd>, &[OsString]), SandboxError> {
    match args {
        [flag, number, rest @ ..] if flag == HANDSHAKE_ARG => {
            Ok((Some(HelperEnd::take(number)?), rest))
        }
        [flag, ..] if flag == HANDSHAKE_ARG => Err(SandboxError::Usage(format!(
            "{HANDSHAKE_ARG} needs a descriptor number"
        ))),
        _ => Ok((None, args)),
    }
}

/// What a helper started with `posix_spawn` does itself before anything else (see
/// [`SELF_START_CGROUP_ARG`]): arm its parent-death signal, check its parent is still the server
/// that started it, and join its cgroups.
#[derive(Debug, Default)]
struct SelfStart {
    cgroups: Vec<OwnedFd>,
    parent: Option<i32>,
}

/// The helper argument (after the handshake's) naming a `cgroup.procs`/`tasks` descriptor the
/// helper writes `0` to, to join that cgroup, before anything else (once per hierarchy). With
/// [`SELF_START_PARENT_ARG`], what the process table appends when it starts the helper with
/// `posix_spawn` instead of `fork` (`codespace_runner_process::Launcher::self_start`): the
/// steps a forked child does between `fork` and `exec` in the server happen here instead.
pub const SELF_START_CGROUP_ARG: &str = "--cgroup-fd";
/// The helper argument naming the server's pid: the helper arms `PR_SET_PDEATHSIG` (`SIGKILL`)
/// and refuses to go on when its parent is no longer that process.
pub const SELF_START_PARENT_ARG: &str = "--parent-pid";

/// Takes the self-start arguments at the front of `args`; returns the rest (`--` and the argv).
fn split_self_start(mut args: &[OsString]) -> Result<(SelfStart, &[OsString]), SandboxError> {
    let mut start = SelfStart::default();
    loop {
        match args {
            [flag, value, rest @ ..] if flag == SELF_START_CGROUP_ARG => {
                if start.cgroups.len() >= 2 {
                    return Err(SandboxError::Usage(format!(
                        "{SELF_START_CGROUP_ARG} given more than twice"
                    )));
                }
                start
                    .cgroups
                    .push(take_inherited_fd(value, SELF_START_CGROUP_ARG, None)?);
                args = rest;
            }
            [flag, value, rest @ ..] if flag == SELF_START_PARENT_ARG => {
                let pid = value
                    .to_str()
                    .and_then(|s| s.parse::<i32>().ok())
                    .filter(|p| *p > 0)
                    .ok_or_else(|| {
                        SandboxError::Usage(format!("{SELF_START_PARENT_ARG}: not a pid"))
                    })?;
                start.parent = Some(pid);
                args = rest;
            }
            [flag, ..] if flag == SELF_START_CGROUP_ARG || flag == SELF_START_PARENT_ARG => {
                return Err(SandboxError::Usage(format!(
                    "{} needs a value",
                    flag.to_string_lossy()
                )));
            }
            _ => return Ok((start, args)),
        }
    }
}

impl SelfStart {
    /// The parent-death signal first (then the parent check closes the race with the server's
    /// exit), then the cgroups: a v1 `tasks` write moves only this thread, the whole process
    /// while the helper is single-threaded (it is). Any failure refuses the command.
    fn apply(self) -> Result<(), SandboxError> {
        if let Some(parent) = self.parent {
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
                .map_err(|e| SandboxError::Hardening(format!("prctl(PR_SET_PDEATHSIG): {e}")))?;
            let now = rustix::process::getppid().map(|p| p.as_raw_nonzero().get());
            if now != Some(parent) {
                return Err(SandboxError::Hardening(
                    "the server exited while the command started".into(),
                ));
            }
        }
        for fd in self.cgroups {
            rustix::io::write(&fd, b"0").map_err(|e| {
                SandboxError::Hardening(format!("cannot join the process's cgroup: {e}"))
            })?;
        }
        Ok(())
    }
}

/// Everything up to (not including) the exec: returns the command to exec.
fn prepare(
    args: &[OsString],
    handshake: Option<&HelperEnd>,
    steps: &mut Steps,
    env: EnvList<'_>,
    ahead: Ahead,
) -> Result<Command, SandboxError> {
    let (program, rest) = split_argv(args)?;
    let plan = read_plan(lookup(env, PLAN_ENV))?;
    steps.mark("plan");
    let netns_ahead = ahead.netns;
    // Build everything that can fail for a non-security reason before restricting anything.
    let filters = Filters::for_plan(plan.network, ahead.filters)?;
    steps.mark("seccomp_build");
    let kernel_abi = if plan.force_landlock_unavailable {
        None
    } else {
        probe::landlock_abi()
    };
    let kernel_abi = kernel_abi.ok_or_else(|| {
        SandboxError::Unavailable("Landlock is not available in this kernel".into())
    })?;
    steps.mark("landlock_probe");

    rustix::thread::set_no_new_privs(true)
        .map_err(|e| SandboxError::Hardening(format!("prctl(PR_SET_NO_NEW_PRIVS) failed: {e}")))?;
    own_session()?;
    steps.mark("session");
    // A spare's namespace made ahead is fresh and this process's alone: it stands for the
    // one entered here.
    let enter = || match netns_ahead {
        Some(outcome) => Ok(outcome),
        None => netns::enter_private_netns(),
    };
    match plan.network {
        NetworkMode::Restricted => {
            enter()?;
        }
        NetworkMode::Proxy => {
            // Inet sockets are allowed in this mode: without a namespace of its own the command
            // would reach every network the host reaches, so the namespace is required here.
            if enter()? == netns::NetnsOutcome::Unchanged {
                return Err(SandboxError::Unavailable(
                    "proxy mode needs a private network namespace, and the kernel refused one"
                        .into(),
                ));
            }
            let fd = plan.proxy_control_fd.ok_or_else(|| {
                SandboxError::InvalidPlan("proxy mode without a control descriptor".into())
            })?;
            relay::start(fd, kernel_abi, &filters, handshake.map(HelperEnd::raw))?;
        }
        NetworkMode::Enabled if netns_ahead.is_some() => {
            return Err(SandboxError::InvalidPlan(
                "this helper waited in a private network namespace (a spare for commands \
                 without the network) and cannot run a command with the network"
                    .into(),
            ));
        }
        NetworkMode::Enabled => {}
    }
    steps.mark("netns");
    // The namespace the server prepared for this write scope, when it holds exactly that scope;
    // else one of our own.
    let entered = match plan.mount_ns_fd {
        Some(fd) => mountns::enter(fd, &plan)?,
        None => false,
    };
    if !entered {
        mask::apply_mounts(
            &plan.workspace_root,
            &plan.masks,
            plan.mask_non_utf8_top_level,
            &plan.read_only,
            &plan.write_paths,
            plan.stage_dir.as_deref(),
        )?;
    }
    steps.mark("mounts");
    caps::drop_all_capabilities()?;
    steps.mark("caps");
    fs_rules::restrict_self(&plan, kernel_abi, ahead.rules)?;
    steps.mark("landlock");
    filters.apply()?;
    steps.mark("seccomp_load");

    let mut command = Command::new(program);
    command.args(rest);
    if let Some(list) = env {
        command.env_clear().envs(
            list.iter()
                .filter(|(k, _)| k != PLAN_ENV && k != STEPS_ENV && k != STEPS_SERVER_ENV)
                .map(|(k, v)| (k, v)),
        );
    } else {
        command
            .env_remove(PLAN_ENV)
            .env_remove(STEPS_ENV)
            .env_remove(STEPS_SERVER_ENV);
    }
    Ok(command)
}

/// Makes the helper a session leader with no controlling terminal, unless it already leads its
/// session (the process runner starts every child with `setsid`; a PTY child leads the session of
/// its own terminal). Fails closed when `setsid` is refused (the caller leads a process group).
fn own_session() -> Result<(), SandboxError> {
    let me = rustix::process::getpid().as_raw_nonzero().get();
    if fs_rules::own_session_id() == Some(me) {
        return Ok(());
    }
    rustix::process::setsid()
        .map(|_| ())
        .map_err(|e| SandboxError::Hardening(format!("setsid failed: {e}")))
}

fn split_argv(args: &[OsString]) -> Result<(&OsString, &[OsString]), SandboxError> {
    match args.split_first() {
        Some((sep, argv)) if sep == ARGV_SEPARATOR => argv
            .split_first()
            .ok_or_else(|| SandboxError::Usage("no command after `--`".into())),
        _ => Err(SandboxError::Usage(
            "expected `--` followed by the command".into(),
        )),
    }
}

fn read_plan(raw: Option<OsString>) -> Result<SandboxPlan, SandboxError> {
    let raw = raw.ok_or_else(|| SandboxError::InvalidPlan(format!("{PLAN_ENV} is not set")))?;
    let json = raw
        .into_string()
        .map_err(|_| SandboxError::InvalidPlan(format!("{PLAN_ENV} is not UTF-8")))?;
    SandboxPlan::from_json(&json)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(items: &[&str]) -> Vec<OsString> {
        items.iter().map(OsString::from).collect()
    }

    #[test]
    fn a_helper_that_waited_in_a_private_network_refuses_a_plan_with_the_network() {
        // `prepare` sets no_new_privs and may call setsid on its process: the body runs in a
        // child test process of its own, with one test thread.
        if !crate::test_alone::in_child_alone(
            "helper::tests::a_helper_that_waited_in_a_private_network_refuses_a_plan_with_the_network",
            "CODESPACE_TEST_NETNS_AHEAD_ALONE",
        ) {
            return;
        }
        for (network, refused) in [
            (NetworkMode::Enabled, true),
            (NetworkMode::Restricted, false),
        ] {
            let mut plan = SandboxPlan::new("/nonexistent-workspace");
            plan.network = network;
            let (_, _, env) =
                crate::plan::launcher_parts(&plan, std::path::Path::new("/")).unwrap();
            let env: Vec<(OsString, OsString)> =
                env.into_iter().map(|(k, v)| (k.into(), v.into())).collect();
            let mut steps = Steps::from_env("spare", |_| None);
            let ahead = Ahead {
                netns: Some(netns::NetnsOutcome::NetOnly),
                filters: None,
                rules: None,
            };
            let got = prepare(&os(&["--", "true"]), None, &mut steps, Some(&env), ahead);
            match got {
                // No Landlock here: the helper refuses before the network step.
                Err(SandboxError::Unavailable(m)) if m.contains("Landlock") => {
                    codespace_test_skip::require(
                        false,
                        "a_helper_that_waited_in_a_private_network_refuses_a_plan_with_the_network",
                        &m,
                    );
                    return;
                }
                other => {
                    // The restricted plan gets past the network step and fails later, on its
                    // missing workspace.
                    let here = matches!(&other, Err(SandboxError::InvalidPlan(m))
                        if m.contains("waited in a private network namespace"));
                    assert_eq!(here, refused, "{network:?}: {other:?}");
                }
            }
        }
    }

    #[test]
    fn self_start_arguments_are_taken_before_the_argv_and_checked() {
        let me = rustix::process::getpid().as_raw_nonzero().get().to_string();
        let args = os(&["--parent-pid", &me, "--", "true"]);
        let (start, rest) = split_self_start(&args).unwrap();
        assert_eq!(start.parent, Some(me.parse().unwrap()));
        assert!(start.cgroups.is_empty());
        assert_eq!(rest, &os(&["--", "true"])[..]);
        // Nothing to take: the argv is untouched.
        let plain = os(&["--", "true"]);
        assert_eq!(split_self_start(&plain).unwrap().1, &plain[..]);
        for bad in [
            &["--parent-pid", "0", "--", "true"][..],
            &["--parent-pid", "x", "--", "true"],
            &["--parent-pid"],
            &["--cgroup-fd", "1", "--", "true"],
            &["--cgroup-fd", "987654", "--", "true"],
        ] {
            assert!(
                matches!(split_self_start(&os(bad)), Err(SandboxError::Usage(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_helper_whose_parent_is_not_the_server_named_refuses() {
        // A pid that is not our parent.
        let parent = rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get());
        let start = SelfStart {
            cgroups: Vec::new(),
            parent: Some(parent.wrapping_add(1).max(1)),
        };
        assert!(matches!(start.apply(), Err(SandboxError::Hardening(_))));
        // The test process must not keep the parent-death signal this armed.
        rustix::process::set_parent_process_death_signal(None).unwrap();
    }

    #[test]
    fn split_argv_requires_separator_and_command() {
        let args = os(&["--", "echo", "hi"]);
        let (program, rest) = split_argv(&args).unwrap();
        assert_eq!(program, "echo");
        assert_eq!(rest, &os(&["hi"])[..]);
        assert!(matches!(
            split_argv(&os(&["echo"])),
            Err(SandboxError::Usage(_))
        ));
        assert!(matches!(
            split_argv(&os(&["--"])),
            Err(SandboxError::Usage(_))
        ));
        assert!(matches!(split_argv(&[]), Err(SandboxError::Usage(_))));
    }
}
