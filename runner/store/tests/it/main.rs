//! `runner/store/`'s integration tests as one binary (one link instead of one per file).
//! Each former `tests/<name>.rs` is the module `<name>`: `cargo test --test it <name>::`.
mod common;
mod approvals;
mod audit_queue;
mod concurrency;
mod instances;
mod locks;
mod migrations;
mod retention;
mod roundtrip;
