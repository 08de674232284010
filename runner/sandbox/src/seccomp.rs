//! The seccomp part of the sandbox: the syscalls and `ioctl` requests a command may never make.
//!
//! One classic-BPF program, written here rather than compiled by `seccompiler` (which still
//! installs it): the kernel runs a new filter once for every syscall number when it is loaded
//! (to cache the numbers it always allows), and a linear chain of some 40 comparisons made
//! that load the largest step of a command's start after the exec itself. The numbers are
//! searched as a balanced tree instead (a handful of comparisons each), and the guard that
//! used to be a second program (`clone3`, the x32 ABI) is part of the same one. The test
//! module keeps the `seccompiler` filters this replaced as the oracle: both give the same
//! verdict for every syscall number, architecture and the arguments that are checked.

use seccompiler::{BpfProgram, sock_filter};

use crate::error::SandboxError;
use crate::plan::NetworkMode;

/// The `AUDIT_ARCH_*` value of the one architecture a command may use (`seccomp_data.arch`);
/// `None` where no filter is defined (the arguments are read as little-endian words).
#[cfg(all(target_arch = "x86_64", target_endian = "little"))]
const AUDIT_ARCH: Option<u32> = Some(0xC000_003E);
#[cfg(all(target_arch = "aarch64", target_endian = "little"))]
const AUDIT_ARCH: Option<u32> = Some(0xC000_00B7);
#[cfg(not(any(
    all(target_arch = "x86_64", target_endian = "little"),
    all(target_arch = "aarch64", target_endian = "little")
)))]
const AUDIT_ARCH: Option<u32> = None;

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

// Classic BPF opcodes (`BPF_LD|BPF_W|BPF_ABS`, `BPF_JMP|…|BPF_K`, `BPF_RET|BPF_K`).
const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JMP_JA: u16 = 0x05;
const BPF_JMP_JEQ_K: u16 = 0x15;
const BPF_JMP_JGE_K: u16 = 0x35;
const BPF_JMP_JSET_K: u16 = 0x45;
const BPF_RET_K: u16 = 0x06;
const SECCOMP_RET_ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
const SECCOMP_RET_ERRNO: u32 = libc::SECCOMP_RET_ERRNO;
const SECCOMP_RET_KILL_PROCESS: u32 = libc::SECCOMP_RET_KILL_PROCESS;
/// Bit that marks the x32 syscall ABI on x86_64 (same audit arch, numbers offset by this).
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: u32 = 0x4000_0000;
// Offsets in `struct seccomp_data`: the number, the architecture, then six 64-bit arguments
// (their low 32 bits first on a little-endian machine).
const DATA_NR: u32 = 0;
const DATA_ARCH: u32 = 4;
const fn data_arg_low(index: u32) -> u32 {
    16 + 8 * index
}
/// Numbers a leaf of the search tree compares one by one.
const LEAF: usize = 3;

/// The compiled filter for one network mode, built before anything is restricted.
#[derive(Debug)]
pub(crate) struct Filters {
    program: BpfProgram,
}

impl Filters {
    /// Compiles the filter for `network`.
    pub(crate) fn build(network: NetworkMode) -> Result<Self, SandboxError> {
        let arch = AUDIT_ARCH.ok_or_else(|| {
            SandboxError::Unavailable(
                "seccomp filters exist only for x86_64 and aarch64 (little-endian)".into(),
            )
        })?;
        Ok(Self {
            program: program(arch, network)?,
        })
    }

    /// The filter for a plan in `network`: the one compiled `ahead` (by a warm spare while it
    /// waited) when it was compiled for exactly that mode, else one compiled now.
    pub(crate) fn for_plan(
        network: NetworkMode,
        ahead: Option<(NetworkMode, Filters)>,
    ) -> Result<Self, SandboxError> {
        match ahead {
            Some((mode, filters)) if mode == network => Ok(filters),
            _ => Self::build(network),
        }
    }

    /// Installs the filter on the calling process's threads (needs `no_new_privs` or
    /// CAP_SYS_ADMIN).
    pub(crate) fn apply(&self) -> Result<(), SandboxError> {
        seccompiler::apply_filter(&self.program)
            .map_err(|e| SandboxError::Seccomp(format!("cannot install filter: {e}")))
    }
}

/// Where a syscall number leads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// Refused with `EPERM` whatever its arguments.
    Deny,
    /// `clone`: refused when its flags ask for a namespace.
    Clone,
    /// `ioctl`: refused for a request in [`DENIED_IOCTLS`].
    Ioctl,
    /// `socket`/`socketpair` without the network: refused for any domain but `AF_UNIX`.
    Socket,
    /// `clone3`: `ENOSYS`, because its flags live in memory seccomp cannot inspect (libc then
    /// falls back to `clone`, whose flags are checked).
    NoSys,
}

/// The numbers the filter looks at, sorted, each once.
fn decided_numbers(network: NetworkMode) -> Result<Vec<(u32, Verdict)>, SandboxError> {
    let mut out: Vec<(libc::c_long, Verdict)> = ALWAYS_DENIED
        .iter()
        .map(|(_, nr)| (*nr, Verdict::Deny))
        .collect();
    out.push((libc::SYS_clone, Verdict::Clone));
    out.push((libc::SYS_ioctl, Verdict::Ioctl));
    out.push((libc::SYS_clone3, Verdict::NoSys));
    if network == NetworkMode::Restricted {
        out.push((libc::SYS_socket, Verdict::Socket));
        out.push((libc::SYS_socketpair, Verdict::Socket));
    }
    let mut numbers = out
        .into_iter()
        .map(|(nr, v)| {
            u32::try_from(nr)
                .map(|nr| (nr, v))
                .map_err(|_| SandboxError::Seccomp(format!("syscall number {nr} out of range")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    numbers.sort_unstable_by_key(|(nr, _)| *nr);
    if numbers
        .windows(2)
        .any(|w| matches!(w, [a, b] if a.0 == b.0))
    {
        return Err(SandboxError::Seccomp(
            "a syscall number is listed twice".into(),
        ));
    }
    Ok(numbers)
}

/// The filter: foreign architectures are killed; on x86_64 every x32-ABI syscall gets `EPERM`
/// (x32 numbers would otherwise slip past the number checks); the decided numbers are found by
/// a binary search; everything else is allowed.
fn program(arch: u32, network: NetworkMode) -> Result<BpfProgram, SandboxError> {
    let numbers = decided_numbers(network)?;
    let mut asm = Asm::default();
    let [allow, eperm, enosys, kill, clone, ioctl, socket] = std::array::from_fn(|_| asm.label());
    asm.stmt(BPF_LD_W_ABS, DATA_ARCH);
    asm.jump(BPF_JMP_JEQ_K, arch, To::Next, To::Label(kill));
    asm.stmt(BPF_LD_W_ABS, DATA_NR);
    #[cfg(target_arch = "x86_64")]
    asm.jump(BPF_JMP_JGE_K, X32_SYSCALL_BIT, To::Label(eperm), To::Next);
    let target = |v: Verdict| match v {
        Verdict::Deny => eperm,
        Verdict::Clone => clone,
        Verdict::Ioctl => ioctl,
        Verdict::Socket => socket,
        Verdict::NoSys => enosys,
    };
    search(&mut asm, &numbers, &target, allow);
    // The argument checks, then the returns (classic BPF jumps only forward).
    asm.bind(clone);
    asm.stmt(BPF_LD_W_ABS, data_arg_low(0));
    asm.jump(
        BPF_JMP_JSET_K,
        namespace_flags(),
        To::Label(eperm),
        To::Label(allow),
    );
    asm.bind(ioctl);
    asm.stmt(BPF_LD_W_ABS, data_arg_low(1));
    for (_, request) in DENIED_IOCTLS {
        let request = u32::try_from(*request)
            .map_err(|_| SandboxError::Seccomp(format!("ioctl request {request:#x} too wide")))?;
        asm.jump(BPF_JMP_JEQ_K, request, To::Label(eperm), To::Next);
    }
    asm.jump(BPF_JMP_JA, 0, To::Label(allow), To::Label(allow));
    if network == NetworkMode::Restricted {
        asm.bind(socket);
        asm.stmt(BPF_LD_W_ABS, data_arg_low(0));
        asm.jump(
            BPF_JMP_JEQ_K,
            libc::AF_UNIX.cast_unsigned(),
            To::Label(allow),
            To::Label(eperm),
        );
    }
    asm.bind(allow);
    asm.stmt(BPF_RET_K, SECCOMP_RET_ALLOW);
    asm.bind(eperm);
    asm.stmt(BPF_RET_K, SECCOMP_RET_ERRNO | errno(libc::EPERM));
    asm.bind(enosys);
    asm.stmt(BPF_RET_K, SECCOMP_RET_ERRNO | errno(libc::ENOSYS));
    asm.bind(kill);
    asm.stmt(BPF_RET_K, SECCOMP_RET_KILL_PROCESS);
    asm.finish()
}

/// Emits the search of `numbers` (sorted) in the loaded syscall number: a split on the middle
/// number down to leaves of at most [`LEAF`] equality tests; a number not found is allowed.
fn search(
    asm: &mut Asm,
    numbers: &[(u32, Verdict)],
    target: &impl Fn(Verdict) -> Label,
    allow: Label,
) {
    if numbers.len() <= LEAF {
        let last = numbers.len().saturating_sub(1);
        for (i, (nr, v)) in numbers.iter().enumerate() {
            let miss = if i == last {
                To::Label(allow)
            } else {
                To::Next
            };
            asm.jump(BPF_JMP_JEQ_K, *nr, To::Label(target(*v)), miss);
        }
        if numbers.is_empty() {
            asm.jump(BPF_JMP_JA, 0, To::Label(allow), To::Label(allow));
        }
        return;
    }
    let (low, high) = numbers.split_at(numbers.len() / 2);
    let upper = asm.label();
    let first_high = high.first().map_or(u32::MAX, |(nr, _)| *nr);
    asm.jump(BPF_JMP_JGE_K, first_high, To::Label(upper), To::Next);
    search(asm, low, target, allow);
    asm.bind(upper);
    search(asm, high, target, allow);
}

/// The `clone` flags of [`DENIED_CLONE_FLAGS`] together: each is one bit, so a flags word with
/// any of them set is one `JSET` away.
fn namespace_flags() -> u32 {
    DENIED_CLONE_FLAGS
        .iter()
        .fold(0, |all, flag| all | flag.cast_unsigned())
}

fn errno(value: libc::c_int) -> u32 {
    u32::try_from(value).unwrap_or(1)
}

/// A jump's destination while the program is written.
#[derive(Debug, Clone, Copy)]
enum To {
    Next,
    Label(Label),
}

type Label = usize;

/// A classic-BPF assembler with forward labels: jumps are placed when the program is done
/// (a destination behind its jump, or farther than a jump can reach, is an error).
#[derive(Default)]
struct Asm {
    code: Vec<(u16, u32, To, To)>,
    labels: Vec<Option<usize>>,
}

impl Asm {
    fn label(&mut self) -> Label {
        self.labels.push(None);
        self.labels.len() - 1
    }

    fn bind(&mut self, label: Label) {
        if let Some(slot) = self.labels.get_mut(label) {
            *slot = Some(self.code.len());
        }
    }

    fn stmt(&mut self, code: u16, k: u32) {
        self.code.push((code, k, To::Next, To::Next));
    }

    /// A conditional jump (`BPF_JA` takes `jt` as its destination, in `k`).
    fn jump(&mut self, code: u16, k: u32, jt: To, jf: To) {
        self.code.push((code, k, jt, jf));
    }

    fn finish(self) -> Result<BpfProgram, SandboxError> {
        let offset = |at: usize, to: To| -> Result<u32, SandboxError> {
            let dest = match to {
                To::Next => return Ok(0),
                To::Label(l) => self.labels.get(l).copied().flatten().ok_or_else(|| {
                    SandboxError::Seccomp(format!("filter label {l} never placed"))
                })?,
            };
            dest.checked_sub(at + 1)
                .and_then(|d| u32::try_from(d).ok())
                .ok_or_else(|| SandboxError::Seccomp("filter jump goes backwards".into()))
        };
        let short = |d: u32| {
            u8::try_from(d).map_err(|_| SandboxError::Seccomp("filter jump out of reach".into()))
        };
        let mut program = Vec::with_capacity(self.code.len());
        for (at, &(code, k, jt, jf)) in self.code.iter().enumerate() {
            program.push(if code == BPF_JMP_JA {
                sock_filter {
                    code,
                    jt: 0,
                    jf: 0,
                    k: offset(at, jt)?,
                }
            } else {
                sock_filter {
                    code,
                    jt: short(offset(at, jt)?)?,
                    jf: short(offset(at, jf)?)?,
                    k,
                }
            });
        }
        Ok(program)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use seccompiler::{
        SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule, TargetArch,
    };
    use std::collections::BTreeMap;

    #[cfg(target_arch = "x86_64")]
    const ORACLE_ARCH: TargetArch = TargetArch::x86_64;
    #[cfg(target_arch = "aarch64")]
    const ORACLE_ARCH: TargetArch = TargetArch::aarch64;
    const AUDIT_ARCH_I386: u32 = 0x4000_0003;

    /// The filters this module shipped before its own program, as the oracle: `seccompiler`'s
    /// compile of the same lists, then the hand-written guard (`clone3`, x32).
    fn oracle(network: NetworkMode) -> Vec<BpfProgram> {
        let cond = |arg: u8, op: SeccompCmpOp, value: u64| {
            SeccompRule::new(vec![
                SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value).unwrap(),
            ])
            .unwrap()
        };
        let mut rules: BTreeMap<i64, Vec<SeccompRule>> = ALWAYS_DENIED
            .iter()
            .map(|(_, nr)| (*nr, Vec::new()))
            .collect();
        let flag = |f: libc::c_int| u64::from(f.cast_unsigned());
        rules.insert(
            libc::SYS_clone,
            DENIED_CLONE_FLAGS
                .iter()
                .map(|f| cond(0, SeccompCmpOp::MaskedEq(flag(*f)), flag(*f)))
                .collect(),
        );
        rules.insert(
            libc::SYS_ioctl,
            DENIED_IOCTLS
                .iter()
                .map(|(_, r)| cond(1, SeccompCmpOp::Eq, *r))
                .collect(),
        );
        if network == NetworkMode::Restricted {
            let unix = u64::from(libc::AF_UNIX.cast_unsigned());
            for nr in [libc::SYS_socket, libc::SYS_socketpair] {
                rules.insert(nr, vec![cond(0, SeccompCmpOp::Ne, unix)]);
            }
        }
        let main: BpfProgram = SeccompFilter::new(
            rules,
            SeccompAction::Allow,
            SeccompAction::Errno(1),
            ORACLE_ARCH,
        )
        .and_then(BpfProgram::try_from)
        .unwrap();
        let st = |code, k| sock_filter {
            code,
            jt: 0,
            jf: 0,
            k,
        };
        let mut guard = vec![
            st(BPF_LD_W_ABS, 0),
            sock_filter {
                code: BPF_JMP_JEQ_K,
                jt: 0,
                jf: 1,
                k: libc::SYS_clone3 as u32,
            },
            st(BPF_RET_K, SECCOMP_RET_ERRNO | 38),
        ];
        #[cfg(target_arch = "x86_64")]
        guard.extend([
            sock_filter {
                code: BPF_JMP_JGE_K,
                jt: 0,
                jf: 1,
                k: X32_SYSCALL_BIT,
            },
            st(BPF_RET_K, SECCOMP_RET_ERRNO | 1),
        ]);
        guard.push(st(BPF_RET_K, SECCOMP_RET_ALLOW));
        vec![main, guard]
    }

    /// `struct seccomp_data` as the kernel lays it out.
    fn data(nr: u32, arch: u32, args: [u64; 6]) -> Vec<u8> {
        let mut d = Vec::with_capacity(64);
        d.extend(nr.to_le_bytes());
        d.extend(arch.to_le_bytes());
        d.extend(0u64.to_le_bytes());
        for a in args {
            d.extend(a.to_le_bytes());
        }
        d
    }

    /// Runs one classic-BPF program (the opcodes either filter uses) on `data`.
    fn run(program: &[sock_filter], data: &[u8]) -> u32 {
        let (mut acc, mut pc) = (0u32, 0usize);
        loop {
            let ins = &program[pc];
            pc += 1;
            let (code, k) = (ins.code, ins.k);
            let taken = |cond: bool| {
                if cond {
                    usize::from(ins.jt)
                } else {
                    usize::from(ins.jf)
                }
            };
            match code {
                BPF_LD_W_ABS => {
                    let at = k as usize;
                    acc = u32::from_le_bytes(data[at..at + 4].try_into().unwrap());
                }
                0x54 => acc &= k, // BPF_ALU|BPF_AND|BPF_K
                BPF_JMP_JA => pc += k as usize,
                BPF_JMP_JEQ_K => pc += taken(acc == k),
                BPF_JMP_JGE_K => pc += taken(acc >= k),
                0x25 => pc += taken(acc > k), // BPF_JMP|BPF_JGT|BPF_K
                BPF_JMP_JSET_K => pc += taken(acc & k != 0),
                BPF_RET_K => return k,
                other => panic!("opcode {other:#x} not modelled"),
            }
        }
    }

    /// The kernel's verdict over a stack of filters: the most restrictive action wins (a tie
    /// keeps the newest filter's), as `seccomp_run_filters` does.
    fn verdict(programs: &[BpfProgram], data: &[u8]) -> u32 {
        let action = |r: u32| (r & 0xffff_0000).cast_signed();
        programs
            .iter()
            .rev()
            .map(|p| run(p, data))
            .reduce(|kept, next| {
                if action(next) < action(kept) {
                    next
                } else {
                    kept
                }
            })
            .unwrap()
    }

    #[test]
    // libc's `Ioctl` type is `c_ulong` with glibc and `c_int` with musl: the casts are needed there.
    #[allow(clippy::unnecessary_cast)]
    fn the_one_program_decides_as_the_seccompiler_filters_it_replaced() {
        let arch = AUDIT_ARCH.unwrap();
        let mut flags: Vec<u64> = vec![0, u64::from(libc::SIGCHLD.cast_unsigned())];
        flags.extend(
            DENIED_CLONE_FLAGS
                .iter()
                .map(|f| u64::from(f.cast_unsigned())),
        );
        let all_thread = (libc::CLONE_VM | libc::CLONE_FS | libc::CLONE_FILES | libc::CLONE_THREAD)
            .cast_unsigned();
        flags.push(u64::from(all_thread));
        flags.push(u64::from(all_thread) | (1 << 40));
        let mut requests: Vec<u64> = DENIED_IOCTLS.iter().map(|(_, r)| *r).collect();
        requests.extend([0, libc::TIOCGWINSZ as u64, libc::FIONREAD as u64]);
        requests.extend(DENIED_IOCTLS.iter().map(|(_, r)| *r | (1 << 33)));
        let domains = [
            libc::AF_UNIX,
            libc::AF_INET,
            libc::AF_INET6,
            libc::AF_NETLINK,
            libc::AF_PACKET,
        ]
        .map(|d| u64::from(d.cast_unsigned()));
        let mut values = flags.clone();
        values.extend(&requests);
        values.extend(domains);
        values.extend(domains.map(|d| d | (1 << 32)));
        let mut numbers: Vec<u32> = (0..1024).collect();
        #[cfg(target_arch = "x86_64")]
        numbers.extend([0, 1, 56, 16, 41, 101, 435, 512, 1023].map(|n| X32_SYSCALL_BIT | n));
        numbers.extend([u32::MAX, 0x8000_0000]);
        let mut checked = 0;
        for network in [NetworkMode::Restricted, NetworkMode::Enabled] {
            let new = vec![Filters::build(network).unwrap().program];
            let old = oracle(network);
            for a in [arch, AUDIT_ARCH_I386] {
                for &nr in &numbers {
                    for &v in &values {
                        for slot in [0, 1] {
                            let mut args = [0u64; 6];
                            args[slot] = v;
                            let d = data(nr, a, args);
                            assert_eq!(
                                verdict(&new, &d),
                                verdict(&old, &d),
                                "{network:?} arch {a:#x} nr {nr} arg{slot} {v:#x}"
                            );
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert!(checked > 100_000, "{checked}");
        // The oracle itself tells the cases apart (the comparison could fail).
        let old = oracle(NetworkMode::Restricted);
        let at = |nr: libc::c_long, args: [u64; 6]| verdict(&old, &data(nr as u32, arch, args));
        assert_eq!(at(libc::SYS_ptrace, [0; 6]), SECCOMP_RET_ERRNO | 1);
        assert_eq!(at(libc::SYS_clone3, [0; 6]), SECCOMP_RET_ERRNO | 38);
        assert_eq!(at(libc::SYS_read, [0; 6]), SECCOMP_RET_ALLOW);
        let inet = u64::from(libc::AF_INET.cast_unsigned());
        assert_eq!(
            at(libc::SYS_socket, [inet, 0, 0, 0, 0, 0]),
            SECCOMP_RET_ERRNO | 1
        );
    }

    #[test]
    fn the_program_is_short_and_searches_in_a_few_steps() {
        for network in [NetworkMode::Restricted, NetworkMode::Enabled] {
            let program = Filters::build(network).unwrap().program;
            // seccompiler's compile of the same lists took 220 instructions.
            assert!(program.len() < 100, "{network:?}: {}", program.len());
            // Steps an allowed number takes (the kernel runs the filter once per number when
            // it is loaded): counted with an interpreter that stops at the return.
            let arch = AUDIT_ARCH.unwrap();
            for nr in 0..512u32 {
                let d = data(nr, arch, [0; 6]);
                let (mut pc, mut steps, mut acc) = (0usize, 0, 0u32);
                loop {
                    let ins = &program[pc];
                    pc += 1;
                    steps += 1;
                    let taken = |c: bool| usize::from(if c { ins.jt } else { ins.jf });
                    match ins.code {
                        BPF_LD_W_ABS => {
                            let at = ins.k as usize;
                            acc = u32::from_le_bytes(d[at..at + 4].try_into().unwrap());
                        }
                        BPF_JMP_JA => pc += ins.k as usize,
                        BPF_JMP_JEQ_K => pc += taken(acc == ins.k),
                        BPF_JMP_JGE_K => pc += taken(acc >= ins.k),
                        BPF_JMP_JSET_K => pc += taken(acc & ins.k != 0),
                        _ => break,
                    }
                }
                assert!(steps <= 14, "{network:?} nr {nr}: {steps} steps");
            }
        }
    }

    #[test]
    fn socket_checks_only_without_the_network() {
        let restricted = decided_numbers(NetworkMode::Restricted).unwrap();
        let enabled = decided_numbers(NetworkMode::Enabled).unwrap();
        let has = |list: &[(u32, Verdict)], nr: libc::c_long| {
            list.iter().any(|(n, _)| i64::from(*n) == nr)
        };
        assert!(has(&restricted, libc::SYS_socket) && has(&restricted, libc::SYS_socketpair));
        assert!(!has(&enabled, libc::SYS_socket) && !has(&enabled, libc::SYS_socketpair));
        for (_, nr) in ALWAYS_DENIED {
            assert!(has(&enabled, *nr) && has(&restricted, *nr));
        }
        // Each namespace flag is one bit: the single `JSET` stands for one test per flag.
        assert!(DENIED_CLONE_FLAGS.iter().all(|f| f.count_ones() == 1));
    }

    #[test]
    fn a_jump_backwards_or_out_of_reach_is_refused() {
        let mut asm = Asm::default();
        let back = asm.label();
        asm.bind(back);
        asm.stmt(BPF_LD_W_ABS, 0);
        asm.jump(BPF_JMP_JEQ_K, 1, To::Label(back), To::Next);
        assert!(matches!(asm.finish(), Err(SandboxError::Seccomp(_))));
        let mut asm = Asm::default();
        let far = asm.label();
        asm.jump(BPF_JMP_JEQ_K, 1, To::Label(far), To::Next);
        for _ in 0..300 {
            asm.stmt(BPF_LD_W_ABS, 0);
        }
        asm.bind(far);
        asm.stmt(BPF_RET_K, SECCOMP_RET_ALLOW);
        assert!(matches!(asm.finish(), Err(SandboxError::Seccomp(_))));
        let mut asm = Asm::default();
        let never = asm.label();
        asm.jump(BPF_JMP_JEQ_K, 1, To::Label(never), To::Next);
        assert!(matches!(asm.finish(), Err(SandboxError::Seccomp(_))));
    }
    fn words(f: &Filters) -> Vec<(u16, u8, u8, u32)> {
        f.program
            .iter()
            .map(|i| (i.code, i.jt, i.jf, i.k))
            .collect()
    }

    #[test]
    fn a_filter_compiled_ahead_serves_only_a_plan_of_its_own_mode() {
        use NetworkMode::{Enabled, Proxy, Restricted};
        // The modes' filters differ, so a filter of the wrong mode would be told apart below.
        assert_ne!(
            words(&Filters::build(Restricted).unwrap()),
            words(&Filters::build(Enabled).unwrap())
        );
        for ahead in [Restricted, Proxy, Enabled] {
            for plan in [Restricted, Proxy, Enabled] {
                let got =
                    Filters::for_plan(plan, Some((ahead, Filters::build(ahead).unwrap()))).unwrap();
                assert_eq!(
                    words(&got),
                    words(&Filters::build(plan).unwrap()),
                    "compiled ahead for {ahead:?}, plan in {plan:?}"
                );
            }
            // Nothing compiled ahead: compiled now.
            assert_eq!(
                words(&Filters::for_plan(ahead, None).unwrap()),
                words(&Filters::build(ahead).unwrap())
            );
        }
        // The one compiled ahead is used as it is when the modes match.
        let ahead = Filters::build(Restricted).unwrap();
        let at = ahead.program.as_ptr();
        let got = Filters::for_plan(Restricted, Some((Restricted, ahead))).unwrap();
        assert_eq!(got.program.as_ptr(), at);
    }
}
