//! `runner/fs/`'s integration tests as one binary (one link instead of one per file).
//! Each former `tests/<name>.rs` is the module `<name>`: `cargo test --test it <name>::`.
mod common;
mod mutate;
mod nowait;
mod path_fuzz;
mod race;
mod sandbox;
mod stat_many;
mod temp_names;
mod txn;
mod walk;
