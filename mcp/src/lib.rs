//! The CodeSpace MCP server as a library: the CLI, the rmcp server handler and the transports.
//! The `codespace` binary is a thin `main` over [`cli::main`]; tests drive [`server`] in-process.

#![forbid(unsafe_code)]

pub mod approvals_cli;
pub mod audit_scrub;
pub mod audit_view;
pub mod cli;
pub mod config_reload;
pub mod console;
pub mod console_cli;
pub mod doctor;
pub mod elicit;
pub mod help;
pub mod http;
pub mod http_conn;
pub mod install_cli;
pub mod long_call;
pub mod mask_diff;
pub mod mrtr;
pub mod oidc;
pub mod ops_cli;
pub mod policy_admin;
pub mod policy_cli;
pub mod policy_diff;
pub mod policy_verify;
pub mod policy_verify_props;
pub mod resources;
pub mod server;
pub mod setup;
pub mod skills;
pub mod stdio;
mod stdio_pipes;
pub mod tasks;
pub mod worker_cli;
