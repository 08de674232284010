//! Per-process control groups: every managed process (and everything it starts, including
//! `setsid` escapees) lives in its own cgroup under one cgroup of this table, so the table can
//! kill all of it at once and cap its number of tasks (`pids.max`).
//!
//! Where the host offers them (a writable cgroup v2 hierarchy, and/or a writable cgroup v1
//! `pids` hierarchy), the table creates `codespace-<pid>-<random>` beneath its own cgroup in
//! each, and one `p<n>` child per process. The child joins before `exec` (it writes `0` to the
//! `cgroup.procs` files the table opened for it). The pids limit is enforced by the v2 `pids`
//! controller when the table can enable it, else by the v1 `pids` hierarchy; otherwise there is
//! no limit (`RLIMIT_NPROC` binds neither root nor a single command, so it is not used). Killing
//! uses v2 `cgroup.kill` where it exists, else signals every member until none is left.
//! Nothing here is fatal: a host without writable cgroups gets [`PidsMechanism::None`].
//!
//! The per-process directories are made ahead ([`POOLED`] at a time, on the blocking pool,
//! after each spawn takes one: [`crate::MadeAhead`]), so a spawn neither waits for `mkdir` in cgroupfs nor for the
//! `pids.max` write: it takes an empty directory nothing ever joined and opens its join file.
//! A directory is never used twice: once its process is gone it is removed
//! ([`ProcCgroup::remove_when_empty`]), and that removal stays the proof that no process of it
//! is left.

use std::fs;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::ahead::MadeAhead;
use rustix::fs::{Mode, OFlags};
use rustix::process::{Pid, Signal, kill_process};

/// How the per-process task limit is enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PidsMechanism {
    /// The cgroup v2 `pids` controller.
    CgroupV2,
    /// A cgroup v1 `pids` hierarchy.
    CgroupV1,
    /// Not enforced: no writable cgroup offers `pids` here.
    None,
}

impl PidsMechanism {
    /// Wire name: `cgroup-v2`, `cgroup-v1` or `none`.
    pub fn as_str(self) -> &'static str {
        match self {
            PidsMechanism::CgroupV2 => "cgroup-v2",
            PidsMechanism::CgroupV1 => "cgroup-v1",
            PidsMechanism::None => "none",
        }
    }
}

/// The task limit of every process a table starts, and how it is enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PidsIsolation {
    /// Most tasks (processes and threads) one managed process and its descendants may have.
    pub limit: u32,
    /// How the limit is enforced (`None`: it is not).
    pub mechanism: PidsMechanism,
    /// Whether every descendant (including `setsid` escapees) is tracked in a cgroup, so
    /// terminate, timeout and shutdown reach all of them.
    pub tracked: bool,
}

/// Longest time [`ProcCgroup::remove_when_empty`] waits for killed members to disappear.
const EMPTY_WAIT: Duration = Duration::from_secs(2);
/// Poll step while waiting for a cgroup to empty.
const EMPTY_POLL: Duration = Duration::from_millis(5);
/// Rounds of "list the members, SIGKILL them" before giving up (v1, or v2 without cgroup.kill).
const KILL_ROUNDS: usize = 64;
/// Per-process cgroups kept made ahead of the spawns that take them.
pub(crate) const POOLED: usize = 2;

/// One hierarchy this table uses: the directory of its own `codespace-…` cgroup.
#[derive(Debug)]
struct Hierarchy {
    dir: PathBuf,
    /// The file a child writes `0` to, to join: v1 `tasks` moves only the writing thread (the
    /// whole process, for a freshly forked single-threaded child) without the kernel's global
    /// thread-group lock, whose write side waits for an RCU grace period (milliseconds) when
    /// spawns are spaced out; v2 has only `cgroup.procs`.
    join_file: &'static str,
    /// `cgroup.kill` exists (cgroup v2, kernel ≥ 5.14).
    has_kill: bool,
    /// The per-process children get `pids.max`.
    pids: bool,
    /// The table directory, open and `flock`ed for as long as this server lives: the lock says
    /// "alive" to a sweeper that cannot see our pid (another PID namespace).
    _lock: Option<OwnedFd>,
}

/// The cgroups of one process table.
#[derive(Debug)]
pub(crate) struct Cgroups {
    v2: Option<Hierarchy>,
    v1_pids: Option<Hierarchy>,
    limit: u32,
    next: AtomicU64,
    /// Per-process directories made ahead (their `pids.max` written; nothing joined them and
    /// no descriptor of them is open), one per hierarchy each.
    ready: Arc<MadeAhead<Vec<(PathBuf, bool)>>>,
}

/// The cgroup(s) of one process, and the `cgroup.procs` files its child writes to join them.
#[derive(Debug)]
pub(crate) struct ProcCgroup {
    dirs: Vec<(PathBuf, bool)>,
    join: Vec<OwnedFd>,
}

/// The raw descriptors a child writes `0` to before `exec` (at most one per hierarchy). The
/// child must still be single-threaded (it is, between fork and exec): a v1 `tasks` write moves
/// only the calling thread.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct JoinFds {
    fds: [Option<RawFd>; 2],
}

impl JoinFds {
    /// The descriptors' numbers (for a launcher that joins by itself).
    pub(crate) fn raw(&self) -> impl Iterator<Item = RawFd> + '_ {
        self.fds.iter().flatten().copied()
    }

    /// Moves the calling process into every cgroup. Only async-signal-safe calls: for `pre_exec`.
    pub(crate) fn join(&self) -> io::Result<()> {
        for fd in self.fds.iter().flatten() {
            // SAFETY: the descriptor was opened by the parent before fork and stays open until
            // spawn returns; the child only borrows it for this one write.
            let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(*fd) };
            rustix::io::write(borrowed, b"0")?;
        }
        Ok(())
    }
}

/// A `mountinfo` line: mount point, root within the filesystem, fs type, super options.
struct Mount {
    point: PathBuf,
    root: String,
    fstype: String,
    options: String,
}

/// Decodes the `\ooo` escapes of a mountinfo field.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        let code = bytes
            .get(i + 1..i + 4)
            .filter(|_| b == b'\\')
            .and_then(|d| std::str::from_utf8(d).ok())
            .and_then(|d| u8::from_str_radix(d, 8).ok());
        match code {
            Some(c) => {
                out.push(c);
                i += 4;
            }
            None => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let mut l = left.split_whitespace();
            let root = unescape(l.nth(3)?);
            let point = PathBuf::from(unescape(l.next()?));
            let mut r = right.split_whitespace();
            let fstype = r.next()?.to_owned();
            let _source = r.next();
            let options = r.next().unwrap_or("").to_owned();
            Some(Mount {
                point,
                root,
                fstype,
                options,
            })
        })
        .collect()
}

/// `(hierarchy controllers, path)` pairs of `/proc/self/cgroup`.
fn parse_self_cgroup(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let _id = parts.next()?;
            let controllers = parts.next()?.to_owned();
            let path = parts.next()?.to_owned();
            Some((controllers, path))
        })
        .collect()
}

/// `mount point + own path`, when the mount shows the whole hierarchy (root `/`).
fn own_dir(mount: &Mount, own_path: &str) -> Option<PathBuf> {
    if mount.root != "/" {
        return None;
    }
    Some(mount.point.join(own_path.trim_start_matches('/')))
}

fn write_file(path: &Path, text: &str) -> io::Result<()> {
    let mut f = fs::OpenOptions::new().write(true).open(path)?;
    f.write_all(text.as_bytes())
}

fn random_suffix() -> String {
    let mut bytes = [0u8; 4];
    if fs::File::open("/dev/urandom")
        .and_then(|mut f| io::Read::read_exact(&mut f, &mut bytes))
        .is_err()
    {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        bytes = nanos.to_le_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Name prefix of every table cgroup; `<prefix><server pid>-<random>`.
const TABLE_PREFIX: &str = "codespace-";

/// Removes `codespace-<pid>-*` cgroups beside ours whose server is gone (left by a crash).
fn sweep_stale(parent: &Path) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(TABLE_PREFIX)) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let dir = entry.path();
        // A server in another PID namespace has a pid we cannot see: its lock on the directory
        // is what shows it alive (the kernel drops the lock when that server dies).
        if held_by_a_live_server(&dir) {
            continue;
        }
        if let Ok(children) = fs::read_dir(&dir) {
            for child in children.flatten().filter(|c| c.path().is_dir()) {
                kill_members(&child.path(), child.path().join("cgroup.kill").exists());
                let _ = fs::remove_dir(child.path());
            }
        }
        let _ = fs::remove_dir(&dir);
    }
}

/// Opens `dir` and takes its exclusive `flock` without waiting; `None` when either fails.
fn lock_dir(dir: &Path) -> Option<OwnedFd> {
    let fd = rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    rustix::fs::flock(&fd, rustix::fs::FlockOperation::NonBlockingLockExclusive).ok()?;
    Some(fd)
}

/// True when another process holds the table directory's lock (its server is alive).
fn held_by_a_live_server(dir: &Path) -> bool {
    let Ok(fd) = rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return false;
    };
    matches!(
        rustix::fs::flock(&fd, rustix::fs::FlockOperation::NonBlockingLockExclusive),
        Err(rustix::io::Errno::WOULDBLOCK)
    )
}

/// Creates this table's cgroup beneath `base`, locked for the life of this server.
fn make_table_dir(base: &Path) -> io::Result<(PathBuf, Option<OwnedFd>)> {
    sweep_stale(base);
    let dir = base.join(format!(
        "{TABLE_PREFIX}{}-{}",
        std::process::id(),
        random_suffix()
    ));
    fs::create_dir(&dir)?;
    let lock = lock_dir(&dir);
    Ok((dir, lock))
}

/// cgroup v2: a table cgroup beneath our own; `pids` enabled for its children when possible.
fn setup_v2(mounts: &[Mount], own: &[(String, String)]) -> Option<Hierarchy> {
    let mount = mounts.iter().find(|m| m.fstype == "cgroup2")?;
    let (_, path) = own.iter().find(|(c, _)| c.is_empty())?;
    let base = own_dir(mount, path)?;
    let (dir, lock) = make_table_dir(&base).ok()?;
    let has_kill = dir.join("cgroup.kill").exists();
    let offered = fs::read_to_string(base.join("cgroup.controllers"))
        .map(|c| c.split_whitespace().any(|x| x == "pids"))
        .unwrap_or(false);
    // Enabling needs the base to have no processes of its own unless it is the root cgroup, and
    // the server itself is in it: outside the root the limit falls back to v1 or none. The table
    // never moves the server.
    let pids = offered
        && write_file(&base.join("cgroup.subtree_control"), "+pids").is_ok()
        && write_file(&dir.join("cgroup.subtree_control"), "+pids").is_ok();
    Some(Hierarchy {
        dir,
        join_file: "cgroup.procs",
        has_kill,
        pids,
        _lock: lock,
    })
}

/// cgroup v1: a table cgroup in the `pids` hierarchy.
fn setup_v1_pids(mounts: &[Mount], own: &[(String, String)]) -> Option<Hierarchy> {
    let mount = mounts
        .iter()
        .find(|m| m.fstype == "cgroup" && m.options.split(',').any(|o| o == "pids"))?;
    let (_, path) = own
        .iter()
        .find(|(c, _)| c.split(',').any(|x| x == "pids"))?;
    let base = own_dir(mount, path)?;
    let (dir, lock) = make_table_dir(&base).ok()?;
    Some(Hierarchy {
        dir,
        join_file: "tasks",
        has_kill: false,
        pids: true,
        _lock: lock,
    })
}

/// Pids listed in `<dir>/cgroup.procs`.
fn members(dir: &Path) -> Vec<i32> {
    fs::read_to_string(dir.join("cgroup.procs"))
        .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

/// SIGKILLs every process of the cgroup at `dir` (and, with `cgroup.kill`, of its descendants).
fn kill_members(dir: &Path, has_kill: bool) {
    if has_kill && write_file(&dir.join("cgroup.kill"), "1").is_ok() {
        return;
    }
    let me = i32::try_from(std::process::id()).unwrap_or(0);
    for _ in 0..KILL_ROUNDS {
        let pids = members(dir);
        if pids.is_empty() {
            return;
        }
        for pid in pids.into_iter().filter(|p| *p != me) {
            if let Some(p) = Pid::from_raw(pid) {
                let _ = kill_process(p, Signal::KILL);
            }
        }
    }
}

impl Cgroups {
    /// Sets up the table's cgroups (or none). `use_cgroups: false` skips everything.
    pub(crate) fn setup(limit: u32, use_cgroups: bool) -> Cgroups {
        let mut cg = Cgroups {
            v2: None,
            v1_pids: None,
            limit,
            next: AtomicU64::new(0),
            ready: Arc::new(MadeAhead::new(POOLED)),
        };
        if !use_cgroups {
            return cg;
        }
        let mounts = fs::read_to_string("/proc/self/mountinfo")
            .map(|t| parse_mountinfo(&t))
            .unwrap_or_default();
        let own = fs::read_to_string("/proc/self/cgroup")
            .map(|t| parse_self_cgroup(&t))
            .unwrap_or_default();
        // One hierarchy per process: every join is a cgroup migration, which waits for an RCU
        // grace period (milliseconds). v2 with `pids` does everything; else a v1 `pids`
        // hierarchy gives the limit and (by signalling its members) the kill; else v2 alone
        // still tracks escapees.
        let v2 = setup_v2(&mounts, &own);
        if v2.as_ref().is_some_and(|h| h.pids) {
            cg.v2 = v2;
        } else if let Some(v1) = setup_v1_pids(&mounts, &own) {
            if let Some(h) = v2 {
                let _ = fs::remove_dir(&h.dir);
            }
            cg.v1_pids = Some(v1);
        } else {
            cg.v2 = v2;
        }
        tracing::debug!(
            v2 = ?cg.v2.as_ref().map(|h| (h.has_kill, h.pids)),
            v1_pids = cg.v1_pids.is_some(),
            "process cgroups"
        );
        cg
    }

    /// The limit and how it is enforced.
    pub(crate) fn isolation(&self) -> PidsIsolation {
        let mechanism = if self.v2.as_ref().is_some_and(|h| h.pids) {
            PidsMechanism::CgroupV2
        } else if self.v1_pids.is_some() {
            PidsMechanism::CgroupV1
        } else {
            PidsMechanism::None
        };
        PidsIsolation {
            limit: self.limit,
            mechanism,
            tracked: self.v2.is_some() || self.v1_pids.is_some(),
        }
    }

    /// The hierarchies in use, in a fixed order (the order of a process's directories).
    fn hierarchies(&self) -> impl Iterator<Item = &Hierarchy> {
        self.v2.iter().chain(self.v1_pids.iter())
    }

    /// The cgroup(s) of the next process: directories made ahead when there are (a refill then
    /// starts on the blocking pool), else made now. `Ok(None)` when the table has no cgroups.
    /// An error means a cgroup the table relies on could not be made: the spawn must fail.
    pub(crate) fn for_process(self: &Arc<Self>) -> io::Result<Option<ProcCgroup>> {
        if self.hierarchies().next().is_none() {
            return Ok(None);
        }
        let me = Arc::clone(self);
        let made = self.ready.take(move || me.make_dirs());
        let dirs = match made {
            Some(dirs) => dirs,
            None => self.make_dirs()?,
        };
        let mut cgroup = ProcCgroup {
            dirs,
            join: Vec::new(),
        };
        for (h, (dir, _)) in self.hierarchies().zip(&cgroup.dirs) {
            let procs = rustix::fs::open(
                dir.join(h.join_file),
                OFlags::WRONLY | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            cgroup.join.push(procs);
        }
        Ok(Some(cgroup))
    }

    /// Makes one process's directories (one per hierarchy) with their limit written. On error
    /// what was made is removed.
    fn make_dirs(&self) -> io::Result<Vec<(PathBuf, bool)>> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let mut dirs: Vec<(PathBuf, bool)> = Vec::new();
        let mut made = || -> io::Result<()> {
            for h in self.hierarchies() {
                let dir = h.dir.join(format!("p{n}"));
                fs::create_dir(&dir)?;
                dirs.push((dir.clone(), h.has_kill));
                if h.pids {
                    write_file(&dir.join("pids.max"), &self.limit.to_string())?;
                }
            }
            Ok(())
        };
        match made() {
            Ok(()) => Ok(dirs),
            Err(err) => {
                for (dir, _) in &dirs {
                    let _ = fs::remove_dir(dir);
                }
                Err(err)
            }
        }
    }

    /// Kills whatever is left in the table's cgroups and removes them (best effort).
    pub(crate) fn remove_all(&self) {
        self.ready.close();
        for h in self.hierarchies() {
            if let Ok(children) = fs::read_dir(&h.dir) {
                for child in children.flatten().filter(|c| c.path().is_dir()) {
                    kill_members(&child.path(), h.has_kill);
                    let _ = fs::remove_dir(child.path());
                }
            }
            let _ = fs::remove_dir(&h.dir);
        }
    }
}

impl Drop for Cgroups {
    fn drop(&mut self) {
        self.remove_all();
    }
}

impl ProcCgroup {
    /// The descriptors the child writes to before `exec`.
    pub(crate) fn join_fds(&self) -> JoinFds {
        let mut fds = JoinFds::default();
        for (slot, fd) in fds.fds.iter_mut().zip(&self.join) {
            *slot = Some(fd.as_raw_fd());
        }
        fds
    }

    /// Closes the join descriptors (once the child has exec'd).
    pub(crate) fn spawned(&mut self) {
        self.join.clear();
    }

    /// SIGKILLs every process in the cgroup, escapees included.
    pub(crate) fn kill(&self) {
        for (dir, has_kill) in &self.dirs {
            kill_members(dir, *has_kill);
        }
    }

    /// Whether any process is still in the cgroup.
    pub(crate) fn is_empty(&self) -> bool {
        self.dirs.iter().all(|(dir, _)| members(dir).is_empty())
    }

    /// Waits (bounded) until the killed members are gone, then removes the cgroup directories
    /// (on the blocking pool: removing a cgroup can wait for the kernel). A cgroup that does not
    /// empty in time stays until the table removes everything. True when this call removed
    /// every directory: the kernel removes one only when no process is left in it.
    pub(crate) async fn remove_when_empty(&self) -> bool {
        let deadline = tokio::time::Instant::now() + EMPTY_WAIT;
        while !self.is_empty() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(EMPTY_POLL).await;
        }
        let dirs: Vec<PathBuf> = self.dirs.iter().map(|(d, _)| d.clone()).collect();
        let removed = tokio::task::spawn_blocking(move || {
            let mut all = true;
            for dir in dirs {
                if let Err(err) = fs::remove_dir(&dir) {
                    all = false;
                    if err.kind() != io::ErrorKind::NotFound {
                        tracing::debug!(%err, "cannot remove a process cgroup yet");
                    }
                }
            }
            all
        })
        .await;
        removed.unwrap_or_else(|err| {
            tracing::debug!(%err, "cgroup removal task failed");
            false
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_are_parsed_with_escapes() {
        let text = "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n\
                    39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n\
                    50 1 0:40 /sub /mnt/with\\040space rw - ext4 /dev/x rw\n\
                    garbage";
        let m = parse_mountinfo(text);
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].fstype, "cgroup2");
        assert_eq!(m[0].point, PathBuf::from("/sys/fs/cgroup/unified"));
        assert!(m[1].options.split(',').any(|o| o == "pids"));
        assert_eq!(m[2].point, PathBuf::from("/mnt/with space"));
        assert_eq!(m[2].root, "/sub");
        assert!(own_dir(&m[2], "/x").is_none());
        assert_eq!(
            own_dir(&m[0], "/a/b"),
            Some(PathBuf::from("/sys/fs/cgroup/unified/a/b"))
        );
    }

    #[test]
    fn self_cgroup_lines_are_parsed() {
        let own = parse_self_cgroup("8:pids:/\n4:memory:/a:b\n0::/user.slice\n");
        assert_eq!(own[0], ("pids".to_owned(), "/".to_owned()));
        assert_eq!(own[1], ("memory".to_owned(), "/a:b".to_owned()));
        assert_eq!(own[2], (String::new(), "/user.slice".to_owned()));
    }

    #[test]
    fn disabled_cgroups_report_none() {
        let cg = Arc::new(Cgroups::setup(32, false));
        let iso = cg.isolation();
        assert_eq!(iso.mechanism, PidsMechanism::None);
        assert!(!iso.tracked);
        assert_eq!(iso.limit, 32);
        assert!(cg.for_process().unwrap().is_none());
        assert_eq!(PidsMechanism::CgroupV1.as_str(), "cgroup-v1");
    }

    /// A table whose server pid is invisible here (another PID namespace) but whose lock is held
    /// is alive: the sweep leaves it. Once the lock is gone, the sweep removes it.
    #[test]
    fn the_sweep_spares_a_locked_table_whose_pid_it_cannot_see() {
        let mounts = fs::read_to_string("/proc/self/mountinfo")
            .map(|t| parse_mountinfo(&t))
            .unwrap_or_default();
        let own = fs::read_to_string("/proc/self/cgroup")
            .map(|t| parse_self_cgroup(&t))
            .unwrap_or_default();
        let base = mounts
            .iter()
            .find(|m| m.fstype == "cgroup2")
            .zip(own.iter().find(|(c, _)| c.is_empty()))
            .and_then(|(m, (_, path))| own_dir(m, path));
        // A pid above the kernel's maximum (2^22) can exist in no namespace we can see.
        let name = format!("{TABLE_PREFIX}4194399-{}", random_suffix());
        let Some(dir) = base
            .map(|b| b.join(&name))
            .filter(|d| fs::create_dir(d).is_ok())
        else {
            codespace_test_skip::skip(
                "the_sweep_spares_a_locked_table_whose_pid_it_cannot_see",
                "no writable cgroup v2 here",
            );
            return;
        };
        let parent = dir.parent().unwrap().to_path_buf();
        let lock = lock_dir(&dir).expect("flock on a cgroup directory");
        sweep_stale(&parent);
        let spared = dir.exists();
        drop(lock);
        sweep_stale(&parent);
        let swept = !dir.exists();
        let _ = fs::remove_dir(&dir);
        assert!(spared, "a locked table was swept");
        assert!(swept, "an unlocked table of a dead pid was left");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_spawn_takes_an_empty_cgroup_made_ahead_and_never_one_used_before() {
        let name = "a_spawn_takes_an_empty_cgroup_made_ahead_and_never_one_used_before";
        let cg = Arc::new(Cgroups::setup(77, true));
        if cg.hierarchies().next().is_none() {
            codespace_test_skip::skip(name, "no writable cgroup here");
            return;
        }
        let mut seen: Vec<PathBuf> = Vec::new();
        let mut taken = Vec::new();
        for _ in 0..(POOLED * 3) {
            let p = cg.for_process().unwrap().unwrap();
            cg.ready.settle();
            // The refill after this take brought the directories made ahead back to POOLED.
            assert_eq!(cg.ready.ready(), POOLED);
            for (dir, _) in &p.dirs {
                assert!(
                    !seen.contains(dir),
                    "{} was handed out twice",
                    dir.display()
                );
                seen.push(dir.clone());
                assert!(members(dir).is_empty(), "{} has members", dir.display());
            }
            for (h, (dir, _)) in cg.hierarchies().zip(&p.dirs) {
                if h.pids {
                    let max = fs::read_to_string(dir.join("pids.max")).unwrap();
                    assert_eq!(max.trim(), "77", "{}", dir.display());
                }
            }
            assert_eq!(p.join.len(), p.dirs.len());
            taken.push(p);
        }
        // A taken directory goes once its process is gone (it never had one here) ...
        let first = taken.remove(0);
        assert!(first.remove_when_empty().await);
        assert!(first.dirs.iter().all(|(d, _)| !d.exists()));
        // ... and the table's end removes every directory, those made ahead included.
        let ahead: Vec<PathBuf> = cg
            .ready
            .with_ready(|ready| ready.iter().flatten().map(|(d, _)| d.clone()).collect());
        assert_eq!(ahead.len(), POOLED * cg.hierarchies().count());
        drop(taken);
        // The last refill's task lets go of the table just after it said it was done.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let mut cg = cg;
        let cg = loop {
            match Arc::try_unwrap(cg) {
                Ok(cg) => break cg,
                Err(again) => {
                    assert!(
                        std::time::Instant::now() < deadline,
                        "a refill still holds the table's cgroups"
                    );
                    cg = again;
                    std::thread::yield_now();
                }
            }
        };
        drop(cg);
        for d in seen.iter().chain(&ahead) {
            assert!(!d.exists(), "{} outlived its table", d.display());
        }
    }
}
