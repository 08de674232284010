//! No-follow file I/O beneath a workspace root: path sandbox, read, write, walk, versions.
//!
//! Every path is a [`RelPath`] (validated spelling) resolved beneath an open [`Root`] directory fd with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`, so neither `..` nor a symlink
//! (leaf or ancestor, planted before or during the call) can lead outside the root. Linux only.

#![forbid(unsafe_code)]

mod error;
mod glob;
mod meta;
mod opened;
mod path;
mod read;
mod resolve;
mod root;
mod sweep;
mod temp;
pub mod txn;
mod version;
mod walk;
mod write;

pub use error::FsError;
pub use glob::{GlobError, GlobFilter};
pub use meta::{Kind, Meta};
pub use opened::{FileId, HashedWindow, NOWAIT_MAX_BYTES, OpenedFile};
pub use path::{MAX_COMPONENT_BYTES, MAX_PATH_BYTES, RelPath};
pub use read::{FileContent, ReadOutcome};
pub use root::Root;
pub use sweep::Sweep;
pub use temp::{
    INSTANCE_ID_LEN, InstanceIdError, InstanceLookup, TEMP_PREFIX, TempNames, is_instance_id,
    parse_temp_name,
};
pub use version::{Version, VersionParseError};
pub use walk::{Unlisted, UnlistedWhy, Walk, WalkEntry, WalkLimits};
