//! `runner/sandbox/`'s integration tests as one binary (one link instead of one per file).
//! Each former `tests/<name>.rs` is the module `<name>`: `cargo test --test it <name>::`.
// Test code: helpers outside #[test] fns fail loudly, as the tests themselves do (the shared
// helper modules were covered by each former crate root's allow).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;
mod filesystem;
mod handshake;
mod helper;
mod masks;
mod network;
mod process;
mod proxy_relay;
mod stage;
mod terminal;
mod write_scope;
