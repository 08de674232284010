//! The `codespace` binary.
fn main() {}
