//! Mount namespaces prepared ahead per sandbox shape: a command whose plan needs a mount
//! namespace (read-only binds of its write scope, `.git` in every git workspace, and/or secret
//! masks) enters a namespace the server built earlier for the same shape (`setns`) instead of
//! building its own (`unshare` + binds + masks) and tearing it down when it exits, which waits for
//! an RCU grace period on the command's exit path (measured on the 2-core development VM under
//! build load: 0.15-3.4 ms median and 3-16 ms at the 75th percentile from the exit to the
//! parent's `waitpid`, against 0.04-0.07 ms for a process with no namespace of its own; an exit
//! after `setns` into a namespace that outlives it costs the same 0.03 ms).
//!
//! The shape is everything in the plan the namespace depends on: the workspace root, the
//! read-only paths, the write paths, the mask paths and whether non-UTF-8 top-level entries are
//! masked. The mask paths come from the workspace's listing when the command was planned, so a
//! listing that changes which paths are withheld makes another shape: a namespace never serves a
//! plan whose masks differ from the ones it was built with.
//!
//! The server builds each namespace on a thread of its own that exits right after
//! (`unshare(CLONE_NEWNS)` un-shares only that thread's filesystem context), with the same code
//! as the helper's fresh path ([`crate::scope::attach_write_scope`], then
//! [`crate::mask::cover_all`], the tree made private first), keeps it by a descriptor, and hands
//! that descriptor to the helpers of plans of exactly that shape. Building is never waited for: a
//! plan whose namespace is not ready yet takes the fresh path. A namespace serves for at most
//! [`MAX_AGE`], so mounts the host adds later are seen within that time.
//!
//! The helper trusts nothing about a prepared namespace it has not checked after entering it:
//! the workspace root is the same directory as in the server's namespace, every read-only path
//! is the root of a read-only mount, every write path beneath one is the root of a writable
//! mount, and every mask holds as [`crate::mask::masks_hold`] checks it (each existing mask path
//! a read-only mount showing `/dev/null` or an empty directory, each ancestor pinned, every
//! non-UTF-8 top-level entry listed now masked). A `.git` the host removed and created again
//! (its bind detached), a secret created after the build, a plan of another shape, a symlink
//! swapped in: the check fails, the helper goes back to its own namespace and builds a fresh one
//! as before. The server can turn preparation off (`CODESPACE_PREPARED_MOUNTNS=0`): every
//! command then builds its own.

use std::collections::HashMap;
use std::os::fd::{AsFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use rustix::mount::MountPropagationFlags;
use rustix::thread::{LinkNameSpaceType, UnshareFlags};

use crate::error::SandboxError;
use crate::mount::{open_target, relative_beneath};
use crate::plan::SandboxPlan;

/// How long one prepared namespace serves: mounts the host adds or removes later (outside the
/// workspace's own binds) are seen by commands within this time.
pub const MAX_AGE: Duration = Duration::from_secs(10);

/// Most shapes kept at once (one descriptor each); the oldest goes first.
const MAX_SHAPES: usize = 32;

fn err(msg: String) -> SandboxError {
    SandboxError::Masking(msg)
}

/// What a prepared namespace is for: the plans it may serve have exactly these paths.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Shape {
    root: PathBuf,
    read_only: Vec<PathBuf>,
    write_paths: Vec<PathBuf>,
    masks: Vec<PathBuf>,
    non_utf8: bool,
}

impl Shape {
    /// The shape of `plan` when a prepared namespace can serve it (it needs a mount namespace).
    fn of(plan: &SandboxPlan) -> Option<Shape> {
        eligible(plan).then(|| Shape {
            root: plan.workspace_root.clone(),
            read_only: plan.read_only.clone(),
            write_paths: plan.write_paths.clone(),
            masks: plan.masks.clone(),
            non_utf8: plan.mask_non_utf8_top_level,
        })
    }
}

/// Whether a prepared namespace may serve `plan`: it needs a mount namespace at all (read-only
/// paths or masks), it stages no patch (a `before_patch` hook's overlay is its own), and
/// preparation is not turned off.
fn eligible(plan: &SandboxPlan) -> bool {
    (!plan.read_only.is_empty() || !plan.masks.is_empty() || plan.mask_non_utf8_top_level)
        && plan.stage_dir.is_none()
        && enabled()
}

/// The off switch: `CODESPACE_PREPARED_MOUNTNS=0` in the server's environment (read once).
pub const PREPARED_MOUNTNS_ENV: &str = "CODESPACE_PREPARED_MOUNTNS";

fn enabled() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| std::env::var_os(PREPARED_MOUNTNS_ENV).is_none_or(|v| v != "0"))
}

#[derive(Debug)]
enum Slot {
    /// A thread is building it.
    Building { since: Instant },
    /// Ready until `built + MAX_AGE`.
    Ready { ns: Arc<OwnedFd>, built: Instant },
    /// The last build failed; not tried again before `at + MAX_AGE`.
    Failed { at: Instant },
}

impl Slot {
    fn since(&self) -> Instant {
        match self {
            Slot::Building { since } => *since,
            Slot::Ready { built, .. } => *built,
            Slot::Failed { at } => *at,
        }
    }
}

/// What [`Prepared::lookup`] found.
#[derive(Debug)]
enum Lookup {
    /// Enter this one.
    Ready(Arc<OwnedFd>),
    /// Nothing to use now; build one (the slot is marked as building). Descriptors evicted to
    /// make room or out of date go with it, to be closed off the caller's thread (closing the
    /// last one tears the namespace down, which waits for an RCU grace period).
    Build(Vec<Arc<OwnedFd>>),
    /// Nothing to use now, nothing to do (being built, or failed recently).
    Wait,
}

/// The prepared namespaces of this process, by shape.
#[derive(Debug, Default)]
pub(crate) struct Prepared {
    slots: Mutex<HashMap<Shape, Slot>>,
    /// The kernel refused the server a mount namespace (no `CAP_SYS_ADMIN`): never try again.
    unavailable: AtomicBool,
}

impl Prepared {
    /// The process-wide set (namespaces are a process-wide kernel resource).
    pub(crate) fn global() -> &'static Prepared {
        static GLOBAL: OnceLock<Prepared> = OnceLock::new();
        GLOBAL.get_or_init(Prepared::default)
    }

    /// The prepared namespace for `plan`'s shape when one is ready; otherwise `None`, after
    /// starting its build in the background when none runs. Never blocks on a build.
    pub(crate) fn for_plan(&'static self, plan: &SandboxPlan) -> Option<Arc<OwnedFd>> {
        if self.unavailable.load(Ordering::Relaxed) {
            return None;
        }
        let shape = Shape::of(plan)?;
        match self.lookup(&shape, Instant::now()) {
            Lookup::Ready(ns) => Some(ns),
            Lookup::Wait => None,
            Lookup::Build(stale) => {
                let key = shape.clone();
                let spawned = std::thread::Builder::new()
                    .name("codespace-mountns".into())
                    .spawn(move || {
                        drop(stale);
                        // This thread stays in the namespace it builds; it ends right after.
                        let built = build_on_this_thread(&shape);
                        self.finish(&shape, built, Instant::now());
                    });
                if spawned.is_err() {
                    self.finish(
                        &key,
                        Err(err("cannot start a thread".into())),
                        Instant::now(),
                    );
                }
                None
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Shape, Slot>> {
        self.slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn lookup(&self, shape: &Shape, now: Instant) -> Lookup {
        let mut slots = self.lock();
        let mut stale = Vec::new();
        match slots.get(shape) {
            Some(Slot::Ready { ns, built }) if now.saturating_duration_since(*built) < MAX_AGE => {
                return Lookup::Ready(Arc::clone(ns));
            }
            Some(Slot::Building { since }) if now.saturating_duration_since(*since) < MAX_AGE => {
                return Lookup::Wait;
            }
            Some(Slot::Failed { at }) if now.saturating_duration_since(*at) < MAX_AGE => {
                return Lookup::Wait;
            }
            _ => {}
        }
        if let Some(Slot::Ready { ns, .. }) = slots.remove(shape) {
            stale.push(ns);
        }
        while slots.len() >= MAX_SHAPES {
            let Some(oldest) = slots
                .iter()
                .min_by_key(|(_, s)| s.since())
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some(Slot::Ready { ns, .. }) = slots.remove(&oldest) {
                stale.push(ns);
            }
        }
        slots.insert(shape.clone(), Slot::Building { since: now });
        Lookup::Build(stale)
    }

    /// Records the outcome of a build started by [`Prepared::lookup`].
    fn finish(&self, shape: &Shape, built: Result<OwnedFd, SandboxError>, now: Instant) {
        let slot = match built {
            Ok(ns) => Slot::Ready {
                ns: Arc::new(ns),
                built: now,
            },
            Err(SandboxError::Unavailable(_)) => {
                self.unavailable.store(true, Ordering::Relaxed);
                Slot::Failed { at: now }
            }
            Err(_) => Slot::Failed { at: now },
        };
        self.lock().insert(shape.clone(), slot);
    }
}

/// Builds a namespace for `plan`'s write scope and returns its descriptor, on a thread of its own
/// (blocking until it is built). For tests and tools; the server builds in the background
/// through [`SandboxCommand::launch`](crate::SandboxCommand::launch).
pub fn prepare_mount_namespace(plan: &SandboxPlan) -> Result<OwnedFd, SandboxError> {
    let shape = Shape {
        root: plan.workspace_root.clone(),
        read_only: plan.read_only.clone(),
        write_paths: plan.write_paths.clone(),
        masks: plan.masks.clone(),
        non_utf8: plan.mask_non_utf8_top_level,
    };
    std::thread::Builder::new()
        .name("codespace-mountns".into())
        .spawn(move || build_on_this_thread(&shape))
        .map_err(|e| err(format!("cannot start a thread: {e}")))?
        .join()
        .map_err(|_| err("the namespace thread failed".into()))?
}

/// Moves the calling thread into a new private mount namespace, puts the write scope and the
/// masks in place there and returns the namespace's descriptor. The thread must end right after:
/// it no longer sees the process's mounts.
fn build_on_this_thread(shape: &Shape) -> Result<OwnedFd, SandboxError> {
    let root = shape.root.as_path();
    // SAFETY: CLONE_NEWNS (with the CLONE_FS it implies) gives this thread alone a filesystem
    // context and mount namespace of its own; no descriptor table or memory is un-shared, and
    // the thread runs nothing else before it ends.
    unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWNS) }.map_err(|e| match e {
        Errno::PERM | Errno::NOSYS => {
            SandboxError::Unavailable(format!("no mount namespace for the server: {e}"))
        }
        e => err(format!("cannot create a mount namespace: {e}")),
    })?;
    rustix::mount::mount_change(
        "/",
        MountPropagationFlags::REC | MountPropagationFlags::PRIVATE,
    )
    .map_err(|e| err(format!("cannot make the mount tree private: {e}")))?;
    let root_fd = rustix::fs::open(
        root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| err(format!("cannot open the workspace root: {e}")))?;
    crate::scope::attach_write_scope(root_fd.as_fd(), root, &shape.read_only, &shape.write_paths)?;
    crate::mask::cover_all(root_fd.as_fd(), root, &shape.masks, shape.non_utf8)?;
    rustix::fs::open(
        "/proc/thread-self/ns/mnt",
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| err(format!("cannot open the namespace: {e}")))
}

/// Helper side: enters the prepared namespace `fd` names when it holds `plan`'s write scope
/// (checked after entering, see the module doc). `Ok(true)`: the process is in it, its working
/// directory entered again. `Ok(false)`: nothing changed (the descriptor is closed); build a
/// fresh namespace. An error only when the process can no longer get back to its own namespace.
pub(crate) fn enter(fd: RawFd, plan: &SandboxPlan) -> Result<bool, SandboxError> {
    // SAFETY: F_GETFD only reads the descriptor's flags; a closed number fails with EBADF.
    if fd <= 2 || unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
        return Ok(false);
    }
    // SAFETY: the descriptor is open (checked above) and nothing else in this process owns it:
    // the runner cleared its close-on-exec flag for this helper alone. Dropped (closed) before
    // the target is exec'd.
    let ns = unsafe { OwnedFd::from_raw_fd(fd) };
    if !eligible(plan) {
        return Ok(false);
    }
    let Ok(cwd) = std::env::current_dir() else {
        return Ok(false);
    };
    let Ok(host_root) = rustix::fs::stat(&plan.workspace_root) else {
        return Ok(false);
    };
    let Ok(own) = rustix::fs::open(
        "/proc/self/ns/mnt",
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return Ok(false);
    };
    if rustix::thread::move_into_link_name_space(ns.as_fd(), Some(LinkNameSpaceType::Mount))
        .is_err()
    {
        return Ok(false);
    }
    drop(ns);
    let fits = holds_scope(plan, (host_root.st_dev, host_root.st_ino));
    if !fits {
        rustix::thread::move_into_link_name_space(own.as_fd(), Some(LinkNameSpaceType::Mount))
            .map_err(|e| err(format!("cannot leave a prepared namespace: {e}")))?;
    }
    // Entering a mount namespace moves the working directory to its root: resolve it again.
    std::env::set_current_dir(&cwd)
        .map_err(|e| err(format!("cannot re-enter the working directory: {e}")))?;
    Ok(fits)
}

/// In the namespace just entered: the workspace root is the server's (same device and inode),
/// each read-only path is the root of a read-only mount, each write path beneath one the root of
/// a writable mount.
fn holds_scope(plan: &SandboxPlan, host_root: (u64, u64)) -> bool {
    let Ok(root) = rustix::fs::open(
        &plan.workspace_root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return false;
    };
    match rustix::fs::fstat(&root) {
        Ok(st) if (st.st_dev, st.st_ino) == host_root => {}
        _ => return false,
    }
    let mut ro = Vec::with_capacity(plan.read_only.len());
    for (index, path) in plan.read_only.iter().enumerate() {
        let Ok(rel) = relative_beneath(&plan.workspace_root, path, "read-only path", index) else {
            return false;
        };
        if mount_root_read_only(root.as_fd(), rel) != Some(true) {
            return false;
        }
        ro.push(rel);
    }
    for (index, path) in plan.write_paths.iter().enumerate() {
        let Ok(rel) = relative_beneath(&plan.workspace_root, path, "write path", index) else {
            return false;
        };
        let beneath = ro.iter().any(|r| rel != *r && rel.starts_with(r));
        if beneath && mount_root_read_only(root.as_fd(), rel) != Some(false) {
            return false;
        }
    }
    crate::mask::masks_hold(
        root.as_fd(),
        &plan.workspace_root,
        &plan.masks,
        plan.mask_non_utf8_top_level,
    )
}

/// `Some(read_only)` when `rel` (beneath `root`, no symlink followed) is the root of a mount,
/// `None` when it is not one or cannot be checked.
fn mount_root_read_only(root: rustix::fd::BorrowedFd<'_>, rel: &Path) -> Option<bool> {
    let fd = open_target(root, rel).ok()?;
    crate::mount::fd_mount_root_read_only(fd.as_fd())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    fn plan(read_only: &[&str]) -> SandboxPlan {
        let mut p = SandboxPlan::new("/srv/ws");
        p.write_workspace = true;
        p.read_only = read_only.iter().map(PathBuf::from).collect();
        p
    }

    fn some_fd() -> OwnedFd {
        rustix::fs::open("/", OFlags::PATH | OFlags::CLOEXEC, Mode::empty()).unwrap()
    }

    #[test]
    fn only_plans_that_need_a_mount_namespace_have_a_shape() {
        assert!(Shape::of(&plan(&[])).is_none());
        assert!(Shape::of(&plan(&["/srv/ws/.git"])).is_some());
        let mut masked = plan(&[]);
        masked.masks = vec!["/srv/ws/.env".into()];
        assert!(Shape::of(&masked).is_some());
        let mut non_utf8 = plan(&[]);
        non_utf8.mask_non_utf8_top_level = true;
        assert!(Shape::of(&non_utf8).is_some());
    }

    #[test]
    fn plans_that_differ_in_masks_or_scope_never_share_a_namespace() {
        let base = {
            let mut p = plan(&["/srv/ws/.git"]);
            p.masks = vec!["/srv/ws/.env".into()];
            p
        };
        let mut variants = Vec::new();
        let mut more_masks = base.clone();
        more_masks.masks.push("/srv/ws/secrets".into());
        variants.push(more_masks);
        let mut no_masks = base.clone();
        no_masks.masks.clear();
        variants.push(no_masks);
        let mut non_utf8 = base.clone();
        non_utf8.mask_non_utf8_top_level = true;
        variants.push(non_utf8);
        let mut writable = base.clone();
        writable.write_paths = vec!["/srv/ws/.git/hooks".into()];
        variants.push(writable);
        let mut other_root = base.clone();
        other_root.workspace_root = "/srv/other".into();
        other_root.read_only = vec!["/srv/other/.git".into()];
        other_root.masks = vec!["/srv/other/.env".into()];
        variants.push(other_root);
        let prepared = Prepared::default();
        let t0 = Instant::now();
        let shape = Shape::of(&base).unwrap();
        assert!(matches!(prepared.lookup(&shape, t0), Lookup::Build(_)));
        prepared.finish(&shape, Ok(some_fd()), t0);
        assert!(matches!(prepared.lookup(&shape, t0), Lookup::Ready(_)));
        for v in &variants {
            let other = Shape::of(v).unwrap();
            assert_ne!(other, shape, "{v:?}");
            assert!(
                !matches!(prepared.lookup(&other, t0), Lookup::Ready(_)),
                "a namespace built for another shape served {v:?}"
            );
        }
    }

    #[test]
    fn a_namespace_serves_only_its_own_shape_and_only_while_fresh() {
        let prepared = Prepared::default();
        let git = Shape::of(&plan(&["/srv/ws/.git"])).unwrap();
        let git_src = Shape::of(&plan(&["/srv/ws/.git", "/srv/ws/src"])).unwrap();
        let t0 = Instant::now();
        assert!(matches!(prepared.lookup(&git, t0), Lookup::Build(ref s) if s.is_empty()));
        // Being built: no second build, nothing to use.
        assert!(matches!(prepared.lookup(&git, t0), Lookup::Wait));
        prepared.finish(&git, Ok(some_fd()), t0);
        let Lookup::Ready(ns) = prepared.lookup(&git, t0 + Duration::from_secs(1)) else {
            panic!("not ready");
        };
        // Another shape never gets it.
        assert!(matches!(prepared.lookup(&git_src, t0), Lookup::Build(_)));
        // Out of date: rebuilt, the old descriptor handed over to be closed.
        match prepared.lookup(&git, t0 + MAX_AGE) {
            Lookup::Build(stale) => {
                assert_eq!(stale.len(), 1);
                assert_eq!(stale[0].as_raw_fd(), ns.as_raw_fd());
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_failed_build_waits_and_a_refused_namespace_stops_trying() {
        let prepared = Prepared::default();
        let git = Shape::of(&plan(&["/srv/ws/.git"])).unwrap();
        let t0 = Instant::now();
        assert!(matches!(prepared.lookup(&git, t0), Lookup::Build(_)));
        prepared.finish(&git, Err(err("boom".into())), t0);
        assert!(matches!(prepared.lookup(&git, t0), Lookup::Wait));
        assert!(matches!(
            prepared.lookup(&git, t0 + MAX_AGE),
            Lookup::Build(_)
        ));
        prepared.finish(&git, Err(SandboxError::Unavailable("no".into())), t0);
        assert!(prepared.unavailable.load(Ordering::Relaxed));
    }

    #[test]
    fn the_oldest_shape_makes_room() {
        let prepared = Prepared::default();
        let t0 = Instant::now();
        for i in 0..MAX_SHAPES {
            let s = Shape::of(&plan(&[&format!("/srv/ws/d{i}")])).unwrap();
            assert!(matches!(prepared.lookup(&s, t0), Lookup::Build(_)));
            prepared.finish(&s, Ok(some_fd()), t0 + Duration::from_millis(i as u64));
        }
        let extra = Shape::of(&plan(&["/srv/ws/extra"])).unwrap();
        match prepared.lookup(&extra, t0 + Duration::from_secs(1)) {
            Lookup::Build(stale) => assert_eq!(stale.len(), 1),
            other => panic!("{other:?}"),
        }
        assert_eq!(prepared.lock().len(), MAX_SHAPES);
        let first = Shape::of(&plan(&["/srv/ws/d0"])).unwrap();
        assert!(!prepared.lock().contains_key(&first));
    }
}
