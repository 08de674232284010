//! codespace-mcp's integration tests as one binary: the server is linked once, not once per file.
//! Each former `tests/<name>.rs` is the module `<name>`: `cargo test --test it <name>::`.
// Test code: helpers outside #[test] fns fail loudly, as the tests themselves do (the shared
// helper modules were covered by each former crate root's allow).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod approvals_human;
mod audit_visibility;
mod cli_common;
mod cli_startup;
mod console;
mod dev_loop;
mod dev_loop_stdio;
mod docs_http_session;
mod egress_proxy;
mod env_common;
mod env_files;
mod env_kill;
mod env_matrix;
mod env_worker_processes;
mod env_workers;
mod environments;
mod fence_dirs;
mod file_limits;
mod filekit;
mod first_hour;
mod hooks;
mod http_common;
mod http_keepalive;
mod http_preauth;
mod http_process;
mod http_sessions;
mod http_sessions_cap;
mod http_state;
// The operation ledger (issue 31).
mod index_restart;
mod ledger;
mod long_policies;
mod masks_bench;
mod mcp_2026;
mod mrtr_tasks;
mod oidc;
mod ops_journals;
mod patch_crash;
mod policy_cli;
mod policy_honest;
mod policy_operator_profile;
mod policy_ops;
mod policy_review;
mod policy_rollout;
mod policy_signed;
mod policy_templates;
mod policy_verify;
mod process_bench;
mod process_common;
mod process_stdio;
mod process_tools;
mod redaction;
mod sandbox_exec;
mod sandbox_helper;
mod sandbox_isolation;
mod sandbox_shapes;
mod secret_masks;
mod server_state;
// Operator skills as resources, prompts and SEP-2640 skills (issue 31).
mod skills;
mod stdio_common;
mod stdio_fuzz;
mod stdio_jsonrpc;
mod stdio_limits;
mod store_files;
mod telemetry;
mod warm_spare;
mod worked_examples;
mod worker;
mod write_file;
mod write_scope;
