//! Managed child processes: pipes, PTYs, output rings, process groups.
//!
//! [`ProcessTable`] starts argv (optionally through a sandbox [`Launcher`]) with piped stdio or on a
//! pseudo-terminal, each child in its own session and (where the host allows) its own cgroup,
//! collects stdout+stderr into one bounded ring read by byte cursors, enforces a timeout and a
//! task limit, and kills whole process trees (group, session and cgroup, so `setsid` escapees
//! too). It is the one registry of processes: beside each handle it keeps its starter's
//! metadata (the table's type parameter), evicted with the handle. Nothing here knows about
//! policy or MCP.

mod ahead;
mod cgroup;
mod error;
mod output;
mod pipe;
mod proc;
mod pty;
mod resolve;
mod ring;
mod signals;
mod spare;
mod steps;
mod supervisor;
mod table;
mod types;
mod utf8;

pub use ahead::MadeAhead;
pub use cgroup::{PidsIsolation, PidsMechanism};
pub use error::{ProcError, SpawnError};
pub use spare::SPARE_ARG;
pub use steps::STEPS_SERVER_ENV;
pub use supervisor::EXIT_WATCH_ENV;
pub use table::ProcessTable;
pub use types::{
    ExitHook, InheritedFd, Launcher, ProcState, ProcessInfo, ReadChunk, ReadWindow, Registration,
    SELF_START_CGROUP_ARG, SELF_START_PARENT_ARG, SpawnOptions, SpawnSpec, Spawned, Stream,
    TableLimits, Termination,
};
