//! The worker's side of an environment: [`WorkerService`], what `codespace worker --stdio |
//! --socket` serves. It answers the worker protocol's requests ([`Call`]) with a standalone
//! [`HostRunner`] (its own version cache, its own process table), registers the workspaces the
//! gateway names (`open_workspace`: the root an absolute path on this side, opened without
//! following a link), and watches each root with its own inotify watcher (the engine's
//! [`DirWatcher`]: changes only, so the worker's own reads wake no watcher thread), reporting
//! [`Event::FileChanged`] / [`Event::WatchLost`] to the connected gateway. It never sees policy
//! and never decides: the gateway decided every call before sending it.

use crate::dir_watch::DirWatcher;
use crate::file_versions::FileVersions;
use crate::host_runner::HostRunner;
use codespace_runner_api::{Call, Event, EventSink, OpenWorkspace, Reply, Runner, RunnerError};
use codespace_runner_fs::Root;
use codespace_runner_worker::{BoxFuture, EventSender, Handler};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Events queued between the watchers (their threads) and the connection's writer; when it is
/// full the workspace's next event is a [`Event::WatchLost`] instead (nothing is dropped silently).
const EVENT_QUEUE: usize = 4096;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Where the watchers' and the runner's events go: a bounded queue drained into the current
/// connection's [`EventSender`]; workspaces whose events overflowed it are owed a `WatchLost`.
struct EventPipe {
    tx: tokio::sync::mpsc::Sender<Event>,
    lost: Mutex<HashSet<String>>,
}

impl EventPipe {
    fn push(&self, ev: Event) {
        let workspace = match &ev {
            Event::FileChanged { workspace, .. } | Event::WatchLost { workspace } => {
                Some(workspace.clone())
            }
            Event::ProcessExited { .. } => None,
        };
        if self.tx.try_send(ev).is_err()
            && let Some(ws) = workspace
        {
            lock(&self.lost).insert(ws);
        }
    }
}

/// What `codespace worker` serves: see the module docs.
pub struct WorkerService {
    runner: Arc<HostRunner>,
    watchers: Arc<Mutex<HashMap<String, DirWatcher>>>,
    pipe: Arc<EventPipe>,
    rx: Mutex<Option<tokio::sync::mpsc::Receiver<Event>>>,
    /// The current connection's sender (a socket worker serves one gateway at a time; the latest
    /// connection gets the events).
    current: Arc<Mutex<Option<EventSender<Event>>>>,
}

impl std::fmt::Debug for WorkerService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerService").finish_non_exhaustive()
    }
}

/// A standalone runner for `codespace worker`: a [`HostRunner`] with its own version cache and
/// process table (default limits), sandboxed through `helper_exe` (the worker's own binary;
/// `None`: a spawn with a sandbox plan fails closed).
pub fn worker_runner(helper_exe: Option<PathBuf>) -> Arc<WorkerService> {
    let runner = Arc::new(HostRunner::new(
        Arc::new(FileVersions::new()),
        codespace_runner_process::TableLimits::default(),
        helper_exe,
    ));
    let (tx, rx) = tokio::sync::mpsc::channel(EVENT_QUEUE);
    let pipe = Arc::new(EventPipe {
        tx,
        lost: Mutex::new(HashSet::new()),
    });
    let p = Arc::clone(&pipe);
    let sink: EventSink = Arc::new(move |ev| p.push(ev));
    runner.subscribe(sink);
    Arc::new(WorkerService {
        runner,
        watchers: Arc::new(Mutex::new(HashMap::new())),
        pipe,
        rx: Mutex::new(Some(rx)),
        current: Arc::new(Mutex::new(None)),
    })
}

/// Opens `root` as a workspace root on this side: absolute, a directory, reached without any
/// symlink on the way (the canonical path must be the path itself).
fn open_root(root: &str) -> Result<(Root, PathBuf), RunnerError> {
    let refuse = |why: String| RunnerError::FileOperation {
        message: format!("workspace root {root}: {why}"),
    };
    let path = Path::new(root);
    if !path.is_absolute() {
        return Err(refuse("not an absolute path".into()));
    }
    let meta = std::fs::symlink_metadata(path).map_err(|e| refuse(format!("cannot open: {e}")))?;
    if !meta.is_dir() {
        return Err(refuse("not a directory".into()));
    }
    let canonical = std::fs::canonicalize(path).map_err(|e| refuse(format!("cannot open: {e}")))?;
    if canonical != path {
        return Err(refuse(format!(
            "a symlink on the way (it resolves to {}); name the real directory",
            canonical.display()
        )));
    }
    let opened = Root::open(path).map_err(|e| refuse(format!("cannot open: {e}")))?;
    Ok((opened, canonical))
}

/// Serves `req.workspace` from `req.root` and starts watching it (a watcher that cannot start
/// is reported as `watch_lost` right away: the gateway then trusts nothing cached). Blocking.
fn open_workspace(
    runner: &HostRunner,
    watchers: &Mutex<HashMap<String, DirWatcher>>,
    pipe: &Arc<EventPipe>,
    req: &OpenWorkspace,
) -> Result<(), RunnerError> {
    let (root, canonical) = open_root(&req.root)?;
    runner.add_workspace(&req.workspace, Arc::new(root), canonical.clone());
    let mut watchers = lock(watchers);
    if watchers.contains_key(&req.workspace) {
        return Ok(());
    }
    match watch(pipe, &req.workspace, &canonical) {
        Ok(w) => {
            watchers.insert(req.workspace.clone(), w);
        }
        Err(e) => {
            tracing::warn!(workspace = %req.workspace, error = %e, "worker: no file watcher");
            pipe.push(Event::WatchLost {
                workspace: req.workspace.clone(),
            });
        }
    }
    Ok(())
}

/// A watcher of `root` and every directory beneath it (never following a link; directories
/// made later are registered by the watcher itself) reporting into `pipe`. It watches changes
/// only, not opens: a `read` served here wakes nothing.
fn watch(pipe: &Arc<EventPipe>, workspace: &str, root: &Path) -> std::io::Result<DirWatcher> {
    {
        let pipe = Arc::clone(pipe);
        let ws = workspace.to_string();
        let base = root.to_path_buf();
        let handler = move |res: notify::Result<notify::Event>| match res {
            Ok(ev) if ev.need_rescan() => pipe.push(Event::WatchLost {
                workspace: ws.clone(),
            }),
            Ok(ev) => {
                if matches!(
                    ev.kind,
                    notify::EventKind::Access(notify::event::AccessKind::Open(_))
                ) {
                    return;
                }
                let paths: Vec<String> = ev
                    .paths
                    .iter()
                    .filter_map(|p| p.strip_prefix(&base).ok())
                    .map(|r| {
                        let s = r.to_string_lossy().to_string();
                        if s.is_empty() { ".".to_string() } else { s }
                    })
                    .collect();
                if !paths.is_empty() {
                    pipe.push(Event::FileChanged {
                        workspace: ws.clone(),
                        paths,
                    });
                }
            }
            Err(_) => pipe.push(Event::WatchLost {
                workspace: ws.clone(),
            }),
        };
        let w = DirWatcher::start(root, Box::new(handler))?;
        w.watch_tree();
        if w.failed() {
            // Some directory is not watched: the gateway trusts nothing it knew of the tree.
            return Err(std::io::Error::other(
                "a directory of the workspace could not be watched",
            ));
        }
        Ok(w)
    }
}

impl WorkerService {
    /// Starts the task that drains the event queue into the current connection (once; needs
    /// a tokio runtime).
    fn start_forwarder(&self) {
        let Some(mut rx) = lock(&self.rx).take() else {
            return;
        };
        let current = Arc::clone(&self.current);
        let pipe = Arc::clone(&self.pipe);
        tokio::spawn(async move {
            while let Some(ev) = rx.recv().await {
                let sender = lock(&current).clone();
                let Some(sender) = sender else { continue };
                let _ = sender.send(&ev).await;
                let owed: Vec<String> = lock(&pipe.lost).drain().collect();
                for workspace in owed {
                    let _ = sender.send(&Event::WatchLost { workspace }).await;
                }
            }
        });
    }
}

impl Handler for WorkerService {
    type Req = Call;
    type Resp = Reply;
    type Ev = Event;

    fn handle(&self, req: Call) -> BoxFuture<'_, Reply> {
        Box::pin(async move {
            match req {
                // Transport set-up, not a Runner method (see `Call::OpenWorkspace`): answered
                // here, before `serve_call`. Opening a root may wait on the disk.
                Call::OpenWorkspace(o) => {
                    let (runner, watchers, pipe) = (
                        Arc::clone(&self.runner),
                        Arc::clone(&self.watchers),
                        Arc::clone(&self.pipe),
                    );
                    let r = tokio::task::spawn_blocking(move || {
                        open_workspace(&runner, &watchers, &pipe, &o)
                    })
                    .await
                    .unwrap_or_else(|e| Err(RunnerError::internal(format!("open task: {e}"))));
                    match r {
                        Ok(()) => Reply::Done,
                        Err(e) => Reply::Error(e),
                    }
                }
                call => codespace_runner_api::serve_call(self.runner.as_ref(), call).await,
            }
        })
    }

    fn attach(&self, events: EventSender<Event>) {
        *lock(&self.current) = Some(events);
        self.start_forwarder();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// `IN_OPEN` in an inotify mask.
    const IN_OPEN: u64 = 0x20;

    /// The inotify masks this process registered on the directory with inode `ino`.
    fn masks_of(ino: u64) -> Vec<u64> {
        let mut out = Vec::new();
        for fd in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
            let link = std::fs::read_link(fd.path()).unwrap_or_default();
            if link.to_string_lossy() != "anon_inode:inotify" {
                continue;
            }
            let info = std::fs::read_to_string(format!(
                "/proc/self/fdinfo/{}",
                fd.file_name().to_string_lossy()
            ))
            .unwrap_or_default();
            for line in info.lines().filter(|l| l.starts_with("inotify ")) {
                let field = |k: &str| {
                    line.split_whitespace()
                        .find_map(|w| w.strip_prefix(k))
                        .and_then(|v| u64::from_str_radix(v, 16).ok())
                };
                if field("ino:") == Some(ino)
                    && let Some(m) = field("mask:")
                {
                    out.push(m);
                }
            }
        }
        out
    }

    #[test]
    fn the_workers_watcher_reports_changes_and_never_wakes_on_an_open() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        let runner = HostRunner::new(
            Arc::new(FileVersions::new()),
            codespace_runner_process::TableLimits::default(),
            None,
        );
        let (tx, mut rx) = tokio::sync::mpsc::channel(64);
        let pipe = Arc::new(EventPipe {
            tx,
            lost: Mutex::new(HashSet::new()),
        });
        let watchers = Mutex::new(HashMap::new());
        let req = OpenWorkspace {
            workspace: "w".into(),
            root: root.display().to_string(),
        };
        open_workspace(&runner, &watchers, &pipe, &req).unwrap();
        // Every directory is watched, none for opens: a `read` served here wakes no thread.
        for d in [root.clone(), root.join("sub")] {
            let masks = masks_of(std::fs::metadata(&d).unwrap().ino());
            assert!(!masks.is_empty(), "{} is not watched", d.display());
            assert!(
                masks.iter().all(|m| m & IN_OPEN == 0),
                "{} is watched for opens: {masks:x?}",
                d.display()
            );
        }
        std::fs::write(root.join("sub/a.txt"), "x").unwrap();
        let ev = rx.blocking_recv().unwrap();
        assert!(
            matches!(&ev, Event::FileChanged { workspace, paths }
                if workspace == "w" && paths.iter().any(|p| p == "sub/a.txt")),
            "{ev:?}"
        );
    }
}
