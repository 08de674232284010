//! `runner/patch/`'s integration tests as one binary (one link instead of one per file).
//! Each former `tests/<name>.rs` is the module `<name>`: `cargo test --test it <name>::`.
mod common;
mod conformance;
mod corpus;
mod fixtures;
