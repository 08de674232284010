//! Build identity of the sandbox crate: a hash of its sources, its manifest and the workspace's
//! `Cargo.lock`, which `helper_version_line` carries, so the server uses a dedicated helper
//! (either build: `cargo build`'s or `scripts/build-static-helper.sh`'s) only when it was built
//! from the very sources the server was, not merely the same version number.

use std::path::{Path, PathBuf};

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            files(&path, out);
        } else {
            out.push(path);
        }
    }
}

fn main() {
    let here = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let mut inputs = Vec::new();
    files(&here.join("src"), &mut inputs);
    inputs.sort();
    inputs.push(here.join("Cargo.toml"));
    inputs.push(here.join("build.rs"));
    inputs.push(here.join("../../Cargo.lock"));
    // FNV-1a over each input's path (relative to the crate) and bytes: stable across hosts,
    // targets and toolchains.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            hash ^= u64::from(*b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    };
    for input in &inputs {
        let name = input.strip_prefix(&here).unwrap_or(input);
        eat(name.to_string_lossy().as_bytes());
        eat(&[0]);
        eat(&std::fs::read(input).unwrap_or_default());
        eat(&[0]);
        println!("cargo:rerun-if-changed={}", input.display());
    }
    println!("cargo:rerun-if-changed={}", here.join("src").display());
    println!("cargo:rustc-env=CODESPACE_SANDBOX_BUILD={hash:016x}");
}
