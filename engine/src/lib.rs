//! The gateway of CodeSpace: operator config, the Cedar policy store, the request builder,
//! decisions that deny on any doubt, and the tool implementations that call the runners.
//! Only this crate grants: the transport reaches the runners through [`Gateway`] alone.

#![forbid(unsafe_code)]

mod audit;
// The operation ledger (issue 31): a command's changed files.
mod command_ledger;
pub mod config;
mod dir_watch;
mod dispatch;
pub mod environments;
mod fence_dirs;
mod file_versions;
pub mod gateway;
pub mod heap;
pub mod host_runner;
mod index;
mod isolation;
pub mod lease;
pub mod links;
mod mask_cache;
mod masks;
mod processes;
pub mod redact;
pub mod retention;
pub mod scrape;
pub mod server_files;
pub mod shown;
pub mod skills;
pub mod telemetry;
pub mod toolchains;
pub mod tools;
pub mod versions;
pub mod worker_serve;
pub mod worker_wire;

// The request model, the parsed calls and the policy store live in `codespace-policy`; their
// old paths stay valid.
pub use codespace_policy as policy;
pub use codespace_policy::{error, facts, request, suggest, tool_table, wire};

pub use audit::{w3c_trace_parent, with_trace_parent};
pub use config::Config;
pub use error::{ErrorCode, ToolError};
pub use facts::SandboxFacts;
pub use gateway::Gateway;
pub use policy::{PolicySource, PolicyStore};
pub use request::Session;
pub use tool_table::{TOOLS, ToolName, ToolSpec, tool_names};
pub use wire::ToolCall;
pub use worker_serve::{WorkerService, worker_runner};
