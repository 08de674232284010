//! `engine/`'s integration tests as one binary (one link instead of one per file).
//! Each former `tests/<name>.rs` is the module `<name>`: `cargo test --test it <name>::`.
// Test code: helpers outside #[test] fns fail loudly, as the tests themselves do (the shared
// helper modules were covered by each former crate root's allow).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod apply_patch;
mod approvals;
mod audit_write_ahead;
mod config_docs;
mod decide_errors;
mod decision_cache;
mod environments;
mod policy_audit_explain;
mod policy_reload;
mod policy_shadow;
mod process_remote;
mod remote_files;
mod temp_files;
