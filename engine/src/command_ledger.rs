//! A command's entry in the operation ledger (issue 31): the workspace paths the file watcher
//! saw change while the process ran, recorded with its process id when it exits. Best effort:
//! a change by anything else in that window (another command, an editor) is counted too, and a
//! watcher that lost events records nothing; no content is ever stored.

use crate::index::PathIndex;
use crate::versions::Versions;
use codespace_store::{LedgerFile, Store};
use std::sync::Arc;

/// What the exit watch needs to record a command's changed files.
pub(crate) struct CommandLedger {
    /// The workspace's version table (its watcher's change sequence).
    pub(crate) versions: Arc<Versions>,
    /// The workspace's index (its fence proves the watcher delivered every earlier event).
    pub(crate) index: Arc<PathIndex>,
    /// The change sequence when the command started.
    pub(crate) since: u64,
    /// The command's operation.
    pub(crate) operation_id: String,
}

impl CommandLedger {
    /// Starts the workspace's watcher and notes where its change sequence stands.
    pub(crate) fn start(
        versions: &Arc<Versions>,
        index: &Arc<PathIndex>,
        operation_id: &str,
    ) -> CommandLedger {
        versions.ensure_watching();
        CommandLedger {
            versions: Arc::clone(versions),
            index: Arc::clone(index),
            since: versions.seq(),
            operation_id: operation_id.to_string(),
        }
    }

    /// Records the paths changed since the start as the command's (`process_id`), off the
    /// async workers. Logs, never fails: the ledger is a record, not a gate.
    pub(crate) async fn record(self, store: Arc<Store>, process_id: String) {
        let op = self.operation_id.clone();
        let done = tokio::task::spawn_blocking(move || {
            // Every event queued before the exit is delivered before the sequence is read.
            self.index.flush_watch(&self.versions);
            let Some(paths) = self.versions.touched_since(self.since) else {
                tracing::info!(operation_id = %self.operation_id, "file watcher degraded; the command's changed files are not recorded");
                return Ok(());
            };
            let rows: Vec<LedgerFile> = paths
                .into_iter()
                .map(|path| LedgerFile {
                    path,
                    kind: "changed".into(),
                    process_id: Some(process_id.clone()),
                    best_effort: true,
                    ..LedgerFile::default()
                })
                .collect();
            if rows.is_empty() {
                return Ok(());
            }
            store.ledger_record(&self.operation_id, &rows, &[])
        })
        .await;
        match done {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::error!(operation_id = %op, error = %e, "cannot record a command's changed files")
            }
            Err(e) => {
                tracing::error!(operation_id = %op, error = %e, "cannot record a command's changed files")
            }
        }
    }
}
