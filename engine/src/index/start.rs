//! The listing a command's start reads once: shared by its secret masks and its write scope.

use super::{Listing, PathIndex, ensure_reaper};
use std::sync::Arc;

/// The workspace's listing as a command's start reads it: taken at most once, on first use
/// (one watcher fence, one trip to the blocking pool), and shared by the command's masks and its
/// write scope's nested `.git`. The fence makes every change made before the call part of it.
pub(crate) struct StartListing<'a> {
    index: &'a Arc<PathIndex>,
    versions: &'a Arc<crate::versions::Versions>,
    cell: tokio::sync::OnceCell<Result<Arc<Listing>, String>>,
}

impl<'a> StartListing<'a> {
    pub(crate) fn new(
        index: &'a Arc<PathIndex>,
        versions: &'a Arc<crate::versions::Versions>,
    ) -> StartListing<'a> {
        StartListing {
            index,
            versions,
            cell: tokio::sync::OnceCell::new(),
        }
    }

    /// The listing, or why the workspace could not be listed.
    pub(crate) async fn get(&self) -> &Result<Arc<Listing>, String> {
        self.cell
            .get_or_init(|| async {
                ensure_reaper(self.index);
                if let Some(listing) = self.index.current_if_quiet(self.versions) {
                    return Ok(listing);
                }
                let index = Arc::clone(self.index);
                let versions = Arc::clone(self.versions);
                match tokio::task::spawn_blocking(move || index.listing(&versions)).await {
                    Ok(Ok((listing, _))) => Ok(listing),
                    Ok(Err(e)) => Err(format!("the workspace could not be listed: {e}")),
                    Err(e) => Err(format!("listing task: {e}")),
                }
            })
            .await
    }
}
