//! Start-up sweep of the temporary files a crashed server instance left beneath a [`Root`].

use rustix::fs::AtFlags;

use crate::error::FsError;
use crate::meta::Kind;
use crate::path::RelPath;
use crate::root::Root;
use crate::walk::{Select, WalkLimits};
use crate::write::leaf_kind;

/// What [`Root::sweep_server_temps`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sweep {
    /// Temporary files removed.
    pub removed: usize,
    /// Temporary files found but not removed (vanished, replaced, or the unlink failed).
    pub failed: usize,
    /// A walk cap cut the sweep short, or a subdirectory could not be read: files may remain.
    pub incomplete: bool,
}

impl Root {
    /// Removes every regular file named `.codespace-tmp-<instance>-<n>` whose instance id `dead` accepts,
    /// anywhere beneath the root. The walk is the bounded no-follow walk of [`Root::walk`] under `limits`
    /// (`max_entries` counts the files found); each file is re-checked to be a regular file, relative to
    /// its parent directory opened without following symlinks, just before the unlink. Anything else (a
    /// user's file with a similar name, a directory, a symlink) is never touched.
    pub fn sweep_server_temps(
        &self,
        dead: &dyn Fn(&str) -> bool,
        limits: &WalkLimits,
    ) -> Result<Sweep, FsError> {
        let found = self.walk_selected(limits, &Select::ServerTemps(dead))?;
        let mut sweep = Sweep {
            incomplete: found.incomplete,
            ..Sweep::default()
        };
        for entry in &found.entries {
            match self.remove_temp(&entry.path) {
                Ok(()) => sweep.removed += 1,
                Err(_) => sweep.failed += 1,
            }
        }
        Ok(sweep)
    }

    fn remove_temp(&self, path: &str) -> Result<(), FsError> {
        let rel = RelPath::parse(path)?;
        let (dir, leaf) = self.open_parent(&rel)?;
        match leaf_kind(&dir, leaf, &rel)? {
            Some(Kind::File) => rustix::fs::unlinkat(&dir, leaf, AtFlags::empty())
                .map_err(|e| FsError::from_errno(rel.as_str(), e)),
            _ => Err(FsError::NotRegularFile {
                path: rel.as_str().to_owned(),
            }),
        }
    }
}
