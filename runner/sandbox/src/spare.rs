//! The warm spare: a sandbox helper the server started ahead of its command, so the helper's
//! own exec and load leave the command's start. Started as `helper __sandbox-spare <fd>
//! --parent-pid <pid>` (by the process table, `codespace_runner_process`'s spares), it arms its
//! parent-death signal, checks its parent is that server and that the peer of the control
//! descriptor `<fd>` (one end of an anonymous `socketpair`, never bound or named: only the server
//! holds the other end) is that process, then blocks reading one command from it. It knows
//! nothing of any command before that: the message carries everything a cold helper gets from
//! its `posix_spawn` (the helper arguments, the environment with the plan, the working directory
//! and the descriptors under the numbers the arguments name, `SCM_RIGHTS`). The spare puts those
//! in place, closes the control descriptor and runs exactly the cold helper's code
//! ([`crate::helper`]); it serves that one command and is then gone (the command's exec replaces
//! it). End of file on the control descriptor (the server closed it or exited) ends it.
//! While it waits it makes what no command decides: a private network namespace (a spare for
//! commands without the network), the seccomp filter and the Landlock ruleset (with the rules
//! every plan gets) of the network mode it most likely serves; the helper uses each only for a
//! plan it fits.
//!
//! Wire (the process table's `spare.rs` writes it): a little-endian `u32` byte count, then the
//! fields as `u32` length + bytes: the working directory; the number of arguments, then each;
//! the number of environment entries, then each `NAME=value`; the number of descriptors, then
//! each descriptor's number as decimal text, in the order of the `SCM_RIGHTS` array.

use std::ffi::OsString;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStringExt;

use crate::error::SandboxError;
use crate::fs_rules::RulesAhead;
use crate::plan::{HELPER_ARG, NetworkMode};
use crate::seccomp::Filters;

/// The first argument that makes a helper binary wait as a warm spare.
pub const SPARE_ARG: &str = "__sandbox-spare";

/// The spare's last argument when it is to serve only a command without the network (a plan
/// in `Restricted` or `Proxy` mode): it enters a fresh network namespace of its own while it
/// waits, so the command's start skips that step, and refuses a plan with the network.
pub const PRIVATE_NETWORK_ARG: &str = "--private-network";

/// Given before the shape's [`PRIVATE_NETWORK_ARG`] (`--network-fd <n>`): a network namespace
/// to enter instead of making one, used before by another command without the network whose
/// every process is gone (the process table's `spare.rs` says when it hands one out). The
/// spare enters it with `setns` (the kernel refuses a descriptor of anything but a network
/// namespace; a fresh one is made then) and closes it before it reads its command.
pub const NETWORK_FD_ARG: &str = "--network-fd";

/// The one byte a spare in a private network namespace sends on its control descriptor once
/// it is in it, with that namespace's descriptor (`SCM_RIGHTS`), so the server can hand the
/// namespace to a later spare once this spare's command and all its processes are gone.
pub const NETWORK_REPORT: u8 = b'N';

/// Most bytes of one command message (arguments, environment with the plan, working directory).
pub const MAX_SPARE_MESSAGE: usize = 4 * 1024 * 1024;

/// Most descriptors one command hands over (handshake, proxy control, mount namespace, two
/// cgroups, with room).
const MAX_SPARE_FDS: usize = 8;

/// One command as the spare received it.
#[derive(Debug)]
struct Received {
    cwd: OsString,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    fds: Vec<(OwnedFd, RawFd)>,
    /// The spare entered a fresh network namespace while it waited.
    netns_ahead: bool,
    /// The seccomp filter compiled while it waited, for the network mode it expects.
    filters_ahead: Option<(NetworkMode, Filters)>,
    /// The Landlock ruleset made while it waited, for the same mode.
    rules_ahead: Option<RulesAhead>,
}

/// Entry of a spare (`args` follow [`SPARE_ARG`]). Never returns: it execs the target, or exits
/// with the cold helper's exit code (126) when it cannot.
pub fn run_spare(args: &[OsString]) -> ! {
    let failed = |e: SandboxError| -> ! {
        let _ = writeln!(std::io::stderr(), "{}", e.stderr_line());
        std::process::exit(e.exit_code())
    };
    let received = match wait_for_command(args) {
        Ok(r) => r,
        // Nothing to refuse through: no command reached this spare (or its descriptors could
        // not be put in place; the server then sees the exit).
        Err(e) => failed(e),
    };
    let before = apply_env_and_cwd(&received.env, &received.cwd);
    match received.args.split_first() {
        Some((first, rest)) if first == HELPER_ARG => {
            let ahead = crate::helper::Ahead {
                netns: received
                    .netns_ahead
                    .then_some(crate::netns::NetnsOutcome::NetOnly),
                filters: received.filters_ahead,
                rules: received.rules_ahead,
            };
            let err = crate::helper::helper_main_after(rest, before, Some(&received.env), ahead);
            let _ = writeln!(std::io::stderr(), "{}", err.stderr_line());
            std::process::exit(err.exit_code())
        }
        _ => failed(SandboxError::Usage(format!(
            "a spare's command must start with {HELPER_ARG}"
        ))),
    }
}

/// Checks the start, blocks for one command, and puts its descriptors in place.
fn wait_for_command(args: &[OsString]) -> Result<Received, SandboxError> {
    let usage = |m: &str| SandboxError::Usage(format!("{SPARE_ARG}: {m}"));
    let (control, parent, private_network, network_fd) = match args {
        [fd, flag, pid] if flag == crate::helper::SELF_START_PARENT_ARG => (fd, pid, false, None),
        [fd, flag, pid, net]
            if flag == crate::helper::SELF_START_PARENT_ARG && net == PRIVATE_NETWORK_ARG =>
        {
            (fd, pid, true, None)
        }
        [fd, flag, pid, given, number, net]
            if flag == crate::helper::SELF_START_PARENT_ARG
                && given == NETWORK_FD_ARG
                && net == PRIVATE_NETWORK_ARG =>
        {
            (fd, pid, true, Some(number))
        }
        _ => {
            return Err(usage(&format!(
                "expected <fd> --parent-pid <pid> [[{NETWORK_FD_ARG} <n>] {PRIVATE_NETWORK_ARG}]"
            )));
        }
    };
    let parent: i32 = parent
        .to_str()
        .and_then(|s| s.parse().ok())
        .filter(|p| *p > 0)
        .ok_or_else(|| usage("not a pid"))?;
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
        .map_err(|e| SandboxError::Hardening(format!("prctl(PR_SET_PDEATHSIG): {e}")))?;
    if rustix::process::getppid().map(|p| p.as_raw_nonzero().get()) != Some(parent) {
        return Err(SandboxError::Hardening(
            "the server exited while the spare started".into(),
        ));
    }
    let control = control_fd(control)?;
    let peer = rustix::net::sockopt::socket_peercred(&control)
        .map_err(|e| usage(&format!("no peer credentials: {e}")))?;
    if peer.pid.as_raw_nonzero().get() != parent {
        return Err(SandboxError::Hardening(
            "the spare's control descriptor is not the server's".into(),
        ));
    }
    // Made while nothing waits on it: the one step of a command's start that needs nothing
    // of the command but whether it has the network, which the server chose this spare for.
    // A namespace the server hands over is entered instead (and closed here either way).
    let given = network_fd
        .map(|n| crate::handshake::take_inherited_fd(n, NETWORK_FD_ARG, None))
        .transpose()?;
    let netns_ahead = private_network
        && (given.is_some_and(|fd| crate::netns::enter_given(&fd))
            || crate::netns::enter_net_only_ahead());
    if netns_ahead {
        report_network(&control);
    }
    // After the namespace (which needs no bounding set but its own capability): what every
    // command's start drops first, dropped now.
    crate::caps::drop_bounding_set_ahead();
    // The filter of the mode this spare most likely serves (a spare for commands without the
    // network: `restricted`, else `enabled`); a plan in another mode compiles its own.
    let expected = if private_network {
        NetworkMode::Restricted
    } else {
        NetworkMode::Enabled
    };
    let filters_ahead = Filters::build(expected).ok().map(|f| (expected, f));
    // The Landlock ruleset of that mode, with the rules every plan gets (its one descriptor
    // stays open until the helper restricts itself with it).
    let mut rules_ahead =
        crate::probe::landlock_abi().and_then(|abi| RulesAhead::build(abi, expected).ok());
    let (bytes, fds) = receive(&control)?;
    let mut received = decode(&bytes, fds)?;
    received.netns_ahead = netns_ahead;
    received.filters_ahead = filters_ahead;
    // A descriptor number the command must get that the ruleset's descriptor holds: the ruleset
    // goes (the helper makes its own), so placing the descriptors replaces nothing of ours.
    if rules_ahead.is_some() && !wanted_numbers_free(&received.fds, &control) {
        rules_ahead = None;
    }
    received.rules_ahead = rules_ahead;
    place_fds(&mut received.fds, control)?;
    Ok(received)
}

/// Sends [`NETWORK_REPORT`] with this process's network namespace to the server. Best effort:
/// without it the server only makes the next spare's namespace afresh.
fn report_network(control: &OwnedFd) {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags, sendmsg};
    let Ok(ns) = rustix::fs::open(
        "/proc/self/ns/net",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    ) else {
        return;
    };
    let fds = [ns.as_fd()];
    let mut space = [std::mem::MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut ancillary = SendAncillaryBuffer::new(&mut space);
    if ancillary.push(SendAncillaryMessage::ScmRights(&fds)) {
        let _ = sendmsg(
            control,
            &[std::io::IoSlice::new(&[NETWORK_REPORT])],
            &mut ancillary,
            SendFlags::NOSIGNAL,
        );
    }
}

/// The control descriptor named by number: above 2, open, a socket; marked close-on-exec.
fn control_fd(number: &std::ffi::OsStr) -> Result<OwnedFd, SandboxError> {
    crate::handshake::take_inherited_fd(
        number,
        SPARE_ARG,
        Some((rustix::fs::FileType::Socket, "a socket")),
    )
}

/// Reads one whole message and every descriptor that came with it (close-on-exec).
fn receive(control: &OwnedFd) -> Result<(Vec<u8>, Vec<OwnedFd>), SandboxError> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, recvmsg};
    let io = |e: rustix::io::Errno| SandboxError::Usage(format!("{SPARE_ARG}: receive: {e}"));
    let mut bytes: Vec<u8> = Vec::new();
    let mut fds: Vec<OwnedFd> = Vec::new();
    let mut want: Option<usize> = None;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if let Some(total) = want
            && bytes.len() >= total.saturating_add(4)
        {
            break;
        }
        let mut space =
            [std::mem::MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_SPARE_FDS))];
        let mut ancillary = RecvAncillaryBuffer::new(&mut space);
        let got = loop {
            match recvmsg(
                control,
                &mut [std::io::IoSliceMut::new(&mut buf)],
                &mut ancillary,
                RecvFlags::CMSG_CLOEXEC,
            ) {
                Err(rustix::io::Errno::INTR) => continue,
                r => break r.map_err(io)?,
            }
        };
        for message in ancillary.drain() {
            if let RecvAncillaryMessage::ScmRights(rights) = message {
                fds.extend(rights);
            }
        }
        if got.bytes == 0 {
            return Err(SandboxError::Usage(format!(
                "{SPARE_ARG}: the server closed the control descriptor"
            )));
        }
        if fds.len() > MAX_SPARE_FDS || got.flags.contains(rustix::net::ReturnFlags::CTRUNC) {
            return Err(SandboxError::Usage(format!(
                "{SPARE_ARG}: too many descriptors"
            )));
        }
        bytes.extend_from_slice(buf.get(..got.bytes).unwrap_or_default());
        if want.is_none()
            && let Some(head) = bytes.get(..4)
        {
            let mut n = [0u8; 4];
            n.copy_from_slice(head);
            let total = usize::try_from(u32::from_le_bytes(n)).unwrap_or(usize::MAX);
            if total > MAX_SPARE_MESSAGE {
                return Err(SandboxError::Usage(format!(
                    "{SPARE_ARG}: the message is too long"
                )));
            }
            want = Some(total);
        }
    }
    let total = want.unwrap_or(0);
    if bytes.len() != total.saturating_add(4) {
        return Err(SandboxError::Usage(format!(
            "{SPARE_ARG}: more than one message"
        )));
    }
    Ok((bytes.split_off(4), fds))
}

/// Reads the fields of one message (see the module's wire description).
fn decode(bytes: &[u8], fds: Vec<OwnedFd>) -> Result<Received, SandboxError> {
    let bad = || SandboxError::Usage(format!("{SPARE_ARG}: a malformed message"));
    let mut at = 0usize;
    let take = |at: &mut usize| -> Result<Vec<u8>, SandboxError> {
        let head = bytes.get(*at..at.saturating_add(4)).ok_or_else(bad)?;
        let mut n = [0u8; 4];
        n.copy_from_slice(head);
        let len = usize::try_from(u32::from_le_bytes(n)).map_err(|_| bad())?;
        let start = at.saturating_add(4);
        let field = bytes
            .get(start..start.saturating_add(len))
            .ok_or_else(bad)?;
        *at = start.saturating_add(len);
        Ok(field.to_vec())
    };
    let count = |field: Vec<u8>| -> Result<usize, SandboxError> {
        std::str::from_utf8(&field)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(bad)
    };
    let cwd = OsString::from_vec(take(&mut at)?);
    let n = count(take(&mut at)?)?;
    let mut args = Vec::new();
    for _ in 0..n {
        args.push(OsString::from_vec(take(&mut at)?));
    }
    let n = count(take(&mut at)?)?;
    let mut env = Vec::new();
    for _ in 0..n {
        let entry = take(&mut at)?;
        let eq = entry.iter().position(|b| *b == b'=').ok_or_else(bad)?;
        let (name, value) = entry.split_at(eq);
        if name.is_empty() {
            return Err(bad());
        }
        env.push((
            OsString::from_vec(name.to_vec()),
            OsString::from_vec(value.get(1..).unwrap_or_default().to_vec()),
        ));
    }
    let n = count(take(&mut at)?)?;
    if n != fds.len() {
        return Err(bad());
    }
    let mut numbered = Vec::new();
    for fd in fds {
        let number: RawFd = count(take(&mut at)?)?.try_into().map_err(|_| bad())?;
        numbered.push((fd, number));
    }
    if at != bytes.len() {
        return Err(bad());
    }
    Ok(Received {
        cwd,
        args,
        env,
        fds: numbered,
        netns_ahead: false,
        filters_ahead: None,
        rules_ahead: None,
    })
}

/// Whether every number the server wants a descriptor under is free in this process, or held by
/// a received descriptor or the control descriptor (which [`place_fds`] moves or closes first).
/// False when something the spare made ahead holds one of them.
fn wanted_numbers_free(fds: &[(OwnedFd, RawFd)], control: &OwnedFd) -> bool {
    fds.iter().all(|(_, number)| {
        let ours =
            *number == control.as_raw_fd() || fds.iter().any(|(fd, _)| fd.as_raw_fd() == *number);
        // SAFETY: F_GETFD only reads the descriptor flags of `number` (EBADF when it is closed);
        // it touches no memory.
        ours || unsafe { libc::fcntl(*number, libc::F_GETFD) } == -1
    })
}

/// Puts every received descriptor under the number the server's arguments name (as the cold
/// start's `adddup2(fd, fd)` does: open across `exec` until the helper marks it), and closes the
/// control descriptor. Numbers must be above 2 and distinct.
fn place_fds(fds: &mut Vec<(OwnedFd, RawFd)>, control: OwnedFd) -> Result<(), SandboxError> {
    let bad = |m: &str| SandboxError::Usage(format!("{SPARE_ARG}: {m}"));
    let mut wanted: Vec<RawFd> = fds.iter().map(|(_, n)| *n).collect();
    wanted.sort_unstable();
    wanted.dedup();
    if wanted.len() != fds.len() || wanted.first().is_some_and(|n| *n <= 2) {
        return Err(bad("descriptor numbers must be distinct and above 2"));
    }
    let top = wanted.last().copied().unwrap_or(2);
    // Move every received descriptor above the highest wanted number first, so no dup2 below
    // replaces one not yet placed (or the control descriptor, closed last).
    let mut moved = Vec::new();
    for (fd, number) in fds.drain(..) {
        let high = rustix::io::fcntl_dupfd_cloexec(&fd, top.saturating_add(1))
            .map_err(|e| bad(&format!("cannot move a descriptor: {e}")))?;
        drop(fd);
        moved.push((high, number));
    }
    drop(control);
    for (high, number) in moved {
        dup_onto(high.as_fd(), number)
            .map_err(|e| bad(&format!("cannot place a descriptor: {e}")))?;
    }
    Ok(())
}

/// `dup2(from, number)`: the new descriptor is open across `exec` (until the helper marks it).
fn dup_onto(from: BorrowedFd<'_>, number: RawFd) -> std::io::Result<()> {
    // SAFETY: `from` is open; `number` is a free slot or one this process may replace (every
    // descriptor above 2 it holds was moved above the wanted numbers first).
    let rc = unsafe { libc::dup2(from.as_raw_fd(), number) };
    if rc == number {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The command's working directory (its environment goes to the helper as a list: the spare's
/// own stays empty). A failure, or a NUL byte in a variable, is refused through the handshake
/// by the helper's code.
fn apply_env_and_cwd(env: &[(OsString, OsString)], cwd: &OsString) -> Result<(), SandboxError> {
    if env
        .iter()
        .any(|(k, v)| k.as_encoded_bytes().contains(&0) || v.as_encoded_bytes().contains(&0))
    {
        return Err(SandboxError::Usage(format!(
            "{SPARE_ARG}: a NUL byte in the environment"
        )));
    }
    std::env::set_current_dir(cwd).map_err(|e| {
        SandboxError::Hardening(format!("cannot enter the command's working directory: {e}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::FromRawFd;

    fn field(out: &mut Vec<u8>, bytes: &[u8]) {
        out.extend_from_slice(&u32::try_from(bytes.len()).unwrap().to_le_bytes());
        out.extend_from_slice(bytes);
    }

    fn message(cwd: &str, args: &[&str], env: &[&str], numbers: &[i32]) -> Vec<u8> {
        let mut out = Vec::new();
        field(&mut out, cwd.as_bytes());
        field(&mut out, args.len().to_string().as_bytes());
        for a in args {
            field(&mut out, a.as_bytes());
        }
        field(&mut out, env.len().to_string().as_bytes());
        for e in env {
            field(&mut out, e.as_bytes());
        }
        field(&mut out, numbers.len().to_string().as_bytes());
        for n in numbers {
            field(&mut out, n.to_string().as_bytes());
        }
        out
    }

    #[test]
    fn a_message_decodes_field_by_field_and_its_descriptors_must_match() {
        let (a, _b) = std::io::pipe().unwrap();
        let bytes = message("/w", &[HELPER_ARG, "--", "true"], &["A=1=2", "B="], &[40]);
        let got = decode(&bytes, vec![OwnedFd::from(a)]).unwrap();
        assert_eq!(got.cwd, "/w");
        assert_eq!(got.args, vec![HELPER_ARG, "--", "true"]);
        assert_eq!(
            got.env,
            vec![("A".into(), "1=2".into()), ("B".into(), OsString::new())]
        );
        assert_eq!(got.fds.len(), 1);
        assert_eq!(got.fds[0].1, 40);
        // One descriptor named, none received; a trailing byte; a name-less variable.
        assert!(decode(&bytes, Vec::new()).is_err());
        let mut long = message("/w", &["x"], &[], &[]);
        long.push(0);
        assert!(decode(&long, Vec::new()).is_err());
        assert!(decode(&message("/w", &[], &["=x"], &[]), Vec::new()).is_err());
        assert!(decode(&bytes[..bytes.len() - 1], Vec::new()).is_err());
    }

    #[test]
    fn descriptors_land_on_their_numbers_even_over_each_other() {
        // `dup2` onto chosen numbers races with every other test thread of this binary that
        // opens a descriptor (EBUSY, or another test's descriptor replaced): the body runs alone,
        // in a child test process with one test thread (the helper itself is single-threaded).
        if !crate::test_alone::in_child_alone(
            "spare::tests::descriptors_land_on_their_numbers_even_over_each_other",
            "CODESPACE_TEST_SPARE_FDS_ALONE",
        ) {
            return;
        }
        let (r1, w1) = std::io::pipe().unwrap();
        let (r2, w2) = std::io::pipe().unwrap();
        let (c, _d) = std::io::pipe().unwrap();
        let (w1, w2) = (OwnedFd::from(w1), OwnedFd::from(w2));
        // Each wants the other's number: both must still arrive.
        let (n1, n2) = (w2.as_raw_fd(), w1.as_raw_fd());
        let mut fds = vec![(w1, n1), (w2, n2)];
        place_fds(&mut fds, OwnedFd::from(c)).unwrap();
        // SAFETY: test: the placed descriptors are owned here now.
        let (p1, p2) = unsafe { (OwnedFd::from_raw_fd(n1), OwnedFd::from_raw_fd(n2)) };
        std::fs::File::from(p1).write_all(b"one").unwrap();
        std::fs::File::from(p2).write_all(b"two").unwrap();
        let mut got = [0u8; 3];
        std::io::Read::read_exact(&mut { r1 }, &mut got).unwrap();
        assert_eq!(&got, b"one");
        std::io::Read::read_exact(&mut { r2 }, &mut got).unwrap();
        assert_eq!(&got, b"two");
        let (x, _y) = std::io::pipe().unwrap();
        let (z, _w) = std::io::pipe().unwrap();
        let mut low = vec![(OwnedFd::from(x), 2)];
        assert!(place_fds(&mut low, OwnedFd::from(z)).is_err());
    }

    #[test]
    fn a_wanted_number_held_by_something_made_ahead_is_not_free() {
        let (c, _d) = std::io::pipe().unwrap();
        let control = OwnedFd::from(c);
        // Stands for the Landlock ruleset's descriptor a spare holds while it waits.
        let held = rustix::io::dup(&control).unwrap();
        let received = || rustix::io::dup(&control).unwrap();
        let own = received();
        let own_number = own.as_raw_fd();
        assert!(wanted_numbers_free(&[(own, own_number)], &control));
        assert!(wanted_numbers_free(
            &[(received(), control.as_raw_fd())],
            &control
        ));
        // Far above any number this process hands out (the lowest free one comes first).
        assert!(wanted_numbers_free(&[(received(), 60_000)], &control));
        assert!(!wanted_numbers_free(
            &[(received(), held.as_raw_fd())],
            &control
        ));
        assert!(!wanted_numbers_free(
            &[(received(), 60_000), (received(), held.as_raw_fd())],
            &control
        ));
    }
}
