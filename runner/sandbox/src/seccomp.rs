//! The seccomp part of the sandbox: the syscalls and `ioctl` requests a command may never make.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch, sock_filter,
};

use crate::error::SandboxError;
use crate::plan::NetworkMode;

#[cfg(target_arch = "x86_64")]
const ARCH: Option<TargetArch> = Some(TargetArch::x86_64);
#[cfg(target_arch = "aarch64")]
const ARCH: Option<TargetArch> = Some(TargetArch::aarch64);
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const ARCH: Option<TargetArch> = None;

/// Syscalls denied with `EPERM` in every network mode: debugging other processes, kernel
/// attack surface (io_uring, bpf, perf, modules, keyrings, kexec) and namespace/mount changes.
pub const ALWAYS_DENIED: &[(&str, libc::c_long)] = &[
    ("ptrace", libc::SYS_ptrace),
    ("process_vm_readv", libc::SYS_process_vm_readv),
    ("process_vm_writev", libc::SYS_process_vm_writev),
    ("io_uring_setup", libc::SYS_io_uring_setup),
    ("io_uring_enter", libc::SYS_io_uring_enter),
    ("io_uring_register", libc::SYS_io_uring_register),
    ("bpf", libc::SYS_bpf),
    ("mount", libc::SYS_mount),
    ("umount2", libc::SYS_umount2),
    ("pivot_root", libc::SYS_pivot_root),
    ("unshare", libc::SYS_unshare),
    ("setns", libc::SYS_setns),
    ("kexec_load", libc::SYS_kexec_load),
    ("kexec_file_load", libc::SYS_kexec_file_load),
    ("perf_event_open", libc::SYS_perf_event_open),
    ("init_module", libc::SYS_init_module),
    ("finit_module", libc::SYS_finit_module),
    ("delete_module", libc::SYS_delete_module),
    ("keyctl", libc::SYS_keyctl),
    ("add_key", libc::SYS_add_key),
    ("request_key", libc::SYS_request_key),
    // The new mount API and handle-based opens: either could move, reconfigure or bypass the
    // secret masks (see mask.rs).
    ("open_tree", libc::SYS_open_tree),
    ("move_mount", libc::SYS_move_mount),
    ("fsopen", libc::SYS_fsopen),
    ("fsconfig", libc::SYS_fsconfig),
    ("fsmount", libc::SYS_fsmount),
    ("fspick", libc::SYS_fspick),
    ("mount_setattr", libc::SYS_mount_setattr),
    ("open_by_handle_at", libc::SYS_open_by_handle_at),
];

/// `clone` flags that create namespaces; `clone` with any of them is denied with `EPERM`.
pub const DENIED_CLONE_FLAGS: &[libc::c_int] = &[
    libc::CLONE_NEWNS,
    libc::CLONE_NEWCGROUP,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWNET,
];

/// `ioctl` requests denied with `EPERM` in every mode: pushing bytes into a terminal's input queue
/// (`TIOCSTI`, keystroke injection) and the virtual-console multiplexer (`TIOCLINUX`, which can
/// also paste into a console).
// libc's `Ioctl` type is `c_ulong` with glibc and `c_int` with musl: the cast is needed there.
#[allow(clippy::unnecessary_cast)]
pub const DENIED_IOCTLS: &[(&str, u64)] = &[
    ("TIOCSTI", libc::TIOCSTI as u64),
    ("TIOCLINUX", libc::TIOCLINUX as u64),
];

// Classic BPF opcodes and seccomp return values used by the hand-written guard program.
const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JMP_JEQ_K: u16 = 0x15;
const BPF_JMP_JGE_K: u16 = 0x35;
const BPF_RET_K: u16 = 0x06;
const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
/// Bit that marks the x32 syscall ABI on x86_64 (same audit arch, numbers offset by this).
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// The compiled filters for one network mode, built before anything is restricted.
#[derive(Debug)]
pub(crate) struct Filters {
    programs: Vec<BpfProgram>,
}

impl Filters {
    /// Compiles the filters for `network`.
    pub(crate) fn build(network: NetworkMode) -> Result<Self, SandboxError> {
        let arch = ARCH.ok_or_else(|| {
            SandboxError::Unavailable("seccomp filters exist only for x86_64 and aarch64".into())
        })?;
        let main: BpfProgram = SeccompFilter::new(
            deny_rules(network)?,
            SeccompAction::Allow,
            SeccompAction::Errno(errno(libc::EPERM)),
            arch,
        )
        .and_then(BpfProgram::try_from)
        .map_err(|e| SandboxError::Seccomp(format!("cannot build filter: {e}")))?;
        Ok(Self {
            programs: vec![main, guard_program()],
        })
    }

    /// Installs every filter on the calling thread (needs `no_new_privs` or CAP_SYS_ADMIN).
    pub(crate) fn apply(&self) -> Result<(), SandboxError> {
        for program in &self.programs {
            seccompiler::apply_filter(program)
                .map_err(|e| SandboxError::Seccomp(format!("cannot install filter: {e}")))?;
        }
        Ok(())
    }
}

fn errno(value: libc::c_int) -> u32 {
    u32::try_from(value).unwrap_or(1)
}

fn condition(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompRule, SandboxError> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value)
        .and_then(|c| SeccompRule::new(vec![c]))
        .map_err(|e| SandboxError::Seccomp(format!("cannot build rule: {e}")))
}

fn flag_value(flag: libc::c_int) -> u64 {
    u64::from(flag.cast_unsigned())
}

/// Syscall → rules whose match means `EPERM` (an empty rule list matches unconditionally).
fn deny_rules(network: NetworkMode) -> Result<BTreeMap<i64, Vec<SeccompRule>>, SandboxError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = ALWAYS_DENIED
        .iter()
        .map(|(_, nr)| (*nr, Vec::new()))
        .collect();
    let clone_rules = DENIED_CLONE_FLAGS
        .iter()
        .map(|flag| {
            let v = flag_value(*flag);
            condition(0, SeccompCmpOp::MaskedEq(v), v)
        })
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_clone, clone_rules);
    let ioctl_rules = DENIED_IOCTLS
        .iter()
        .map(|(_, request)| condition(1, SeccompCmpOp::Eq, *request))
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_ioctl, ioctl_rules);
    if network == NetworkMode::Restricted {
        let not_unix = u64::from(libc::AF_UNIX.cast_unsigned());
        for nr in [libc::SYS_socket, libc::SYS_socketpair] {
            rules.insert(nr, vec![condition(0, SeccompCmpOp::Ne, not_unix)?]);
        }
    }
    Ok(rules)
}

fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// A second, hand-written program (the main one already kills foreign architectures):
/// `clone3` gets `ENOSYS`, because its flags live in memory seccomp cannot inspect (libc then
/// falls back to `clone`, whose flags are checked); on x86_64 every x32-ABI syscall gets `EPERM`,
/// because x32 numbers would otherwise slip past the main filter's number checks.
fn guard_program() -> BpfProgram {
    let clone3 = u32::try_from(libc::SYS_clone3).unwrap_or(u32::MAX);
    let mut program = vec![
        stmt(BPF_LD_W_ABS, 0), // seccomp_data.nr
        jump(BPF_JMP_JEQ_K, clone3, 0, 1),
        stmt(BPF_RET_K, SECCOMP_RET_ERRNO | errno(libc::ENOSYS)),
    ];
    #[cfg(target_arch = "x86_64")]
    program.extend([
        jump(BPF_JMP_JGE_K, X32_SYSCALL_BIT, 0, 1),
        stmt(BPF_RET_K, SECCOMP_RET_ERRNO | errno(libc::EPERM)),
    ]);
    program.push(stmt(BPF_RET_K, SECCOMP_RET_ALLOW));
    program
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_build_for_both_modes() {
        let restricted = Filters::build(NetworkMode::Restricted).unwrap();
        let enabled = Filters::build(NetworkMode::Enabled).unwrap();
        assert_eq!(restricted.programs.len(), 2);
        // The socket rules make the restricted main program longer.
        assert!(restricted.programs[0].len() > enabled.programs[0].len());
    }

    #[test]
    fn socket_rules_only_in_restricted_mode() {
        let restricted = deny_rules(NetworkMode::Restricted).unwrap();
        let enabled = deny_rules(NetworkMode::Enabled).unwrap();
        assert!(restricted.contains_key(&libc::SYS_socket));
        assert!(restricted.contains_key(&libc::SYS_socketpair));
        assert!(!enabled.contains_key(&libc::SYS_socket));
        for (_, nr) in ALWAYS_DENIED {
            assert!(enabled.contains_key(nr) && restricted.contains_key(nr));
        }
        assert_eq!(enabled[&libc::SYS_clone].len(), DENIED_CLONE_FLAGS.len());
        assert_eq!(enabled[&libc::SYS_ioctl].len(), DENIED_IOCTLS.len());
        assert_eq!(restricted[&libc::SYS_ioctl].len(), DENIED_IOCTLS.len());
    }

    #[test]
    fn guard_program_ends_in_allow_and_denies_clone3() {
        let program = guard_program();
        assert_eq!(program.last().unwrap().k, SECCOMP_RET_ALLOW);
        assert_eq!(program[1].k, 435);
        assert_eq!(program[2].k, SECCOMP_RET_ERRNO | 38);
    }
}
