//! Hot reload of the config's `redaction` patterns for `serve`: SIGHUP (which also reloads the
//! policies) or an edit of the config file re-reads it; a valid file puts its patterns in force
//! at once, an invalid one keeps the patterns in force. Nothing else of the config reloads (a
//! restart applies it). Every attempt is a `config_reload` event.

use codespace_engine::Config;
use codespace_store::Store;
use notify::{EventKind, RecursiveMode, Watcher};
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

fn watch(
    file: PathBuf,
    tx: mpsc::UnboundedSender<Trigger>,
) -> Result<notify::RecommendedWatcher, notify::Error> {
    let name = file.file_name().map(|n| n.to_os_string());
    let dir = file.parent().map(PathBuf::from).unwrap_or_default();
    let mut w = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        let relevant = match res {
            // A watcher error (e.g. queue overflow): reload to be safe.
            Err(_) => true,
            Ok(ev) => {
                !matches!(ev.kind, EventKind::Access(_))
                    && (ev.paths.is_empty()
                        || ev
                            .paths
                            .iter()
                            .any(|p| name.is_some() && p.file_name() == name.as_deref()))
            }
        };
        if relevant {
            let _ = tx.send(Trigger::Watch);
        }
    })?;
    // The directory, not the file: editors and `mv` replace the file (a new inode).
    w.watch(&dir, RecursiveMode::NonRecursive)?;
    Ok(w)
}

async fn run(
    config: Config,
    store: Arc<Store>,
    mut rx: mpsc::UnboundedReceiver<Trigger>,
    _watcher: Option<notify::RecommendedWatcher>,
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
