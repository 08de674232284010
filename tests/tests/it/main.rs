//! The end-to-end tests as one binary (one link of the server instead of one per file;
//! `tests/tidy.rs` keeps its own: it is run by name, `cargo test -p codespace-tests --test tidy`).
//! Each former `tests/<name>.rs` is the module `<name>`: `cargo test --test it <name>::`.
// Test code: helpers outside #[test] fns fail loudly, as the tests themselves do (the shared
// helper modules were covered by each former crate root's allow).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod inprocess;
mod read_many;
mod search;
