//! Helpers of the tests that run the `codespace` binary's CLI from the repository root.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The built binary.
pub const BIN: &str = env!("CARGO_BIN_EXE_codespace");

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Runs the binary with `args` from the repository root, without an operator config.
pub fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .current_dir(repo())
        .env_remove("CODESPACE_CONFIG")
        .output()
        .unwrap()
}

/// A run's stdout, then its stderr.
pub fn both(o: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
