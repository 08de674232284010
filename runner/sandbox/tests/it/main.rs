//! `runner/sandbox/`'s integration tests as one binary (one link instead of one per file).
//! Each former `tests/<name>.rs` is the module `<name>`: `cargo test --test it <name>::`.
mod common;
mod filesystem;
mod handshake;
mod helper;
mod masks;
mod network;
mod process;
mod proxy_relay;
mod terminal;
mod write_scope;
