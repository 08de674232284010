//! `engine/`'s integration tests as one binary (one link instead of one per file).
//! Each former `tests/<name>.rs` is the module `<name>`: `cargo test --test it <name>::`.
mod apply_patch;
mod approvals;
mod audit_write_ahead;
mod config_docs;
mod decide_errors;
mod decision_cache;
mod policy_audit_explain;
mod policy_reload;
mod policy_shadow;
mod temp_files;
