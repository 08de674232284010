//! The end-to-end tests as one binary (one link of the server instead of one per file;
//! `tests/tidy.rs` keeps its own: it is run by name, `cargo test -p codespace-tests --test tidy`).
//! Each former `tests/<name>.rs` is the module `<name>`: `cargo test --test it <name>::`.
mod inprocess;
mod read_many;
mod search;
