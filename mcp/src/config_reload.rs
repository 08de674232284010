//! Hot reload of the config's `redaction` patterns for `serve`: SIGHUP (which also reloads the
//! policies) or an edit of the config file re-reads it; a valid file puts its patterns in force
//! at once, an invalid one keeps the patterns in force. Nothing else of the config reloads (a
//! restart applies it). Every attempt is a `config_reload` event.

use codespace_engine::Config;
use codespace_store::Store;
use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::inotify::{self, ReadFlags, WatchFlags};
use rustix::io::Errno;
use std::ffi::{OsStr, OsString};
use std::mem::MaybeUninit;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// The config file must be quiet this long before it is read.
const QUIET: Duration = Duration::from_millis(200);

/// What asked for a reload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// The config file changed.
    Watch,
    /// SIGHUP.
    Signal,
}

impl Trigger {
    fn as_str(self) -> &'static str {
        match self {
            Trigger::Watch => "watch",
            Trigger::Signal => "signal",
        }
    }
}

/// Asks the reload task for a reload.
#[derive(Debug, Clone)]
pub struct ConfigReloader {
    tx: mpsc::UnboundedSender<Trigger>,
}

impl ConfigReloader {
    /// Asks for a reload (debounced like a file change).
    pub fn trigger(&self, why: Trigger) {
        let _ = self.tx.send(why);
    }
}

/// Starts the reload task on the current runtime: it watches the config file (when there is
/// one) and reloads on every trigger. The watcher lives as long as the task.
pub fn start(config: Config, store: Arc<Store>) -> ConfigReloader {
    let (tx, rx) = mpsc::unbounded_channel();
    let watcher = config
        .config_file
        .clone()
        .and_then(|file| match watch(file, tx.clone()) {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch the config file; SIGHUP still reloads its redaction patterns");
                None
            }
        });
    tokio::spawn(run(config, store, rx, watcher));
    ConfigReloader { tx }
}

/// The config file's watcher: its thread ends when this is dropped (the wake pipe closes).
struct ConfigWatch {
    _wake: OwnedFd,
}

/// What the directory is watched for: a name created, moved in or out, deleted, or closed after
/// a write (editors write a new file and rename it over the old one; `>` and `>>` close it), and
/// the directory itself going away. Not `IN_MODIFY`: a store or log kept beside the config
/// writes all the time, and every write would wake this thread (an edit still ends in a close
/// or a rename).
fn watch_flags() -> WatchFlags {
    WatchFlags::CLOSE_WRITE
        | WatchFlags::MOVED_TO
        | WatchFlags::MOVED_FROM
        | WatchFlags::CREATE
        | WatchFlags::DELETE
        | WatchFlags::DELETE_SELF
        | WatchFlags::MOVE_SELF
        | WatchFlags::ONLYDIR
}

/// Whether an event of the watched directory asks for a reload of the file named `want`: one
/// about that name, or one that says events were lost or the directory itself changed.
fn relevant(mask: ReadFlags, name: Option<&OsStr>, want: &OsStr) -> bool {
    if mask.intersects(
        ReadFlags::QUEUE_OVERFLOW
            | ReadFlags::DELETE_SELF
            | ReadFlags::MOVE_SELF
            | ReadFlags::IGNORED,
    ) {
        return true;
    }
    name == Some(want)
}

fn watch(file: PathBuf, tx: mpsc::UnboundedSender<Trigger>) -> std::io::Result<ConfigWatch> {
    let want: OsString = file
        .file_name()
        .map(OsStr::to_os_string)
        .ok_or_else(|| std::io::Error::other("the config path names no file"))?;
    let dir = file.parent().map(PathBuf::from).unwrap_or_default();
    let dir = if dir.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        dir
    };
    // The directory, not the file: editors and `mv` replace the file (a new inode).
    watch_dir(&dir, move |mask, name| {
        if relevant(mask, name, &want) {
            let _ = tx.send(Trigger::Watch);
        }
    })
}

/// Watches `dir` ([`watch_flags`]) on a thread of its own that hands each event to `on_event`,
/// in the kernel's order, until the returned value is dropped.
fn watch_dir(
    dir: &std::path::Path,
    on_event: impl Fn(ReadFlags, Option<&OsStr>) + Send + 'static,
) -> std::io::Result<ConfigWatch> {
    let fd = inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK)?;
    inotify::add_watch(&fd, dir, watch_flags())?;
    let (wake_r, wake_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    std::thread::Builder::new()
        .name("config-watch".into())
        .spawn(move || {
            let mut buf = vec![MaybeUninit::<u8>::uninit(); 16 * 1024];
            let mut reader = inotify::Reader::new(&fd, &mut buf);
            loop {
                match reader.next() {
                    Ok(e) => {
                        let name = e.file_name().map(|n| OsStr::from_bytes(n.to_bytes()));
                        on_event(e.events(), name);
                    }
                    Err(Errno::AGAIN) => {
                        let mut fds = [
                            rustix::event::PollFd::new(&fd, rustix::event::PollFlags::IN),
                            rustix::event::PollFd::from_borrowed_fd(
                                wake_r.as_fd(),
                                rustix::event::PollFlags::IN,
                            ),
                        ];
                        match rustix::event::poll(&mut fds, None) {
                            Ok(_) | Err(Errno::INTR) => {}
                            Err(_) => return,
                        }
                        // The wake pipe's other end closed: the watch was dropped.
                        if fds.get(1).is_some_and(|f| !f.revents().is_empty()) {
                            return;
                        }
                    }
                    Err(Errno::INTR) => {}
                    // A broken instance: one reload to be safe, then no more watching.
                    Err(_) => {
                        on_event(ReadFlags::QUEUE_OVERFLOW, None);
                        return;
                    }
                }
            }
        })?;
    Ok(ConfigWatch { _wake: wake_w })
}

async fn run(
    config: Config,
    store: Arc<Store>,
    mut rx: mpsc::UnboundedReceiver<Trigger>,
    _watcher: Option<ConfigWatch>,
) {
    let config = Arc::new(config);
    while let Some(first) = rx.recv().await {
        let mut trigger = first;
        // Debounce: read only once the file has been quiet for a while.
        loop {
            match tokio::time::timeout(QUIET, rx.recv()).await {
                Ok(Some(t)) => {
                    if t == Trigger::Signal {
                        trigger = t;
                    }
                }
                Ok(None) => return,
                Err(_) => break,
            }
        }
        let cfg = Arc::clone(&config);
        let outcome = tokio::task::spawn_blocking(move || cfg.reload_redaction())
            .await
            .map_err(|e| e.to_string())
            .and_then(|r| r.map_err(|e| e.to_string()));
        let detail = match &outcome {
            Ok(rules) => {
                tracing::info!(
                    rules,
                    trigger = trigger.as_str(),
                    "redaction patterns reloaded"
                );
                serde_json::json!({
                    "accepted": true,
                    "trigger": trigger.as_str(),
                    "reloaded": ["redaction"],
                    "redaction_rules": rules,
                })
            }
            Err(e) => {
                // The message quotes the file, not the patterns' matches; still, redact it.
                let e = config.redaction.text(e).into_owned();
                tracing::warn!(error = %e, "config reload refused; the redaction patterns in force stay");
                serde_json::json!({
                    "accepted": false,
                    "trigger": trigger.as_str(),
                    "reloaded": [],
                    "diagnostics": [e],
                })
            }
        };
        let store = Arc::clone(&store);
        let logged =
            tokio::task::spawn_blocking(move || store.insert_event("config_reload", &detail)).await;
        if !matches!(logged, Ok(Ok(_))) {
            tracing::error!("cannot log the config reload event");
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use std::io::Write;
    use std::sync::Mutex;
    use std::sync::mpsc as std_mpsc;

    #[test]
    fn only_the_config_name_and_lost_events_ask_for_a_reload() {
        let want = OsStr::new("config.json");
        assert!(relevant(ReadFlags::CLOSE_WRITE, Some(want), want));
        assert!(relevant(ReadFlags::MOVED_TO, Some(want), want));
        assert!(!relevant(
            ReadFlags::CLOSE_WRITE,
            Some(OsStr::new("store.db-wal")),
            want
        ));
        assert!(!relevant(
            ReadFlags::CREATE,
            Some(OsStr::new("config.json.tmp")),
            want
        ));
        assert!(relevant(ReadFlags::QUEUE_OVERFLOW, None, want));
        assert!(relevant(ReadFlags::DELETE_SELF, None, want));
    }

    #[test]
    fn writes_to_a_file_kept_open_beside_the_config_wake_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (tx, rx) = std_mpsc::channel::<(ReadFlags, Option<OsString>)>();
        let tx = Mutex::new(tx);
        let _w = watch_dir(dir.path(), move |mask, name| {
            let _ = tx
                .lock()
                .unwrap()
                .send((mask, name.map(OsStr::to_os_string)));
        })
        .unwrap();
        // A store's log: opened once, written many times, still open.
        let mut wal = std::fs::File::create(dir.path().join("store.db-wal")).unwrap();
        for _ in 0..200 {
            wal.write_all(&[0u8; 64]).unwrap();
        }
        // Then the config is written: its event comes after every event of the writes above.
        std::fs::write(dir.path().join("config.json"), "{}").unwrap();
        let mut seen = Vec::new();
        loop {
            let (mask, name) = rx
                .recv_timeout(Duration::from_secs(30))
                .expect("no event for the config");
            let done = name.as_deref() == Some(OsStr::new("config.json"))
                && mask.contains(ReadFlags::CLOSE_WRITE);
            seen.push((mask, name));
            if done {
                break;
            }
        }
        // The log's creation is seen; none of its 200 writes is.
        let wal_events: Vec<_> = seen
            .iter()
            .filter(|(_, n)| n.as_deref() == Some(OsStr::new("store.db-wal")))
            .collect();
        assert_eq!(wal_events.len(), 1, "{seen:?}");
        assert!(wal_events[0].0.contains(ReadFlags::CREATE), "{seen:?}");
        drop(wal);
    }
}
