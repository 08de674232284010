//! Build script: embeds every file of the shipped `policies/` tree and `schema/` into the binary.
//! It writes `$OUT_DIR/embedded_files.rs` with `EMBEDDED_FILES` (every file, named relative to the
//! repository root, sorted) and `EMBEDDED_POLICIES` (the `.cedar` files the live set loads, named
//! relative to `policies/`, sorted). A file added under `policies/` is picked up by the next
//! build with no list to maintain (Cargo re-runs this script when either directory changes).

use std::error::Error;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Directories under `policies/` that hold no live policy (the live loader skips them too).
const NOT_LIVE: [&str; 3] = ["tests", "examples", "shadow"];

fn main() -> Result<(), Box<dyn Error>> {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let repo = manifest.parent().ok_or("policy/ has no parent")?;
    let mut files = Vec::new();
    for top in ["policies", "schema"] {
        let dir = repo.join(top);
        println!("cargo:rerun-if-changed={}", dir.display());
        walk(repo, &dir, &mut files)?;
    }
    files.sort();
    let mut out = String::from(
        "/// Every file of the shipped `policies/` and `schema/`, by path from the repository root.\n\
         pub const EMBEDDED_FILES: &[(&str, &str)] = &[\n",
    );
    for (name, path) in &files {
        writeln!(out, "    ({name:?}, include_str!({path:?})),")?;
    }
    out.push_str(
        "];\n/// The shipped policy files the live set loads, by path from `policies/`.\n\
         pub const EMBEDDED_POLICIES: &[(&str, &str)] = &[\n",
    );
    for (name, path) in &files {
        let Some(rel) = name.strip_prefix("policies/") else {
            continue;
        };
        let first = rel.split('/').next().unwrap_or_default();
        if rel.ends_with(".cedar") && !NOT_LIVE.contains(&first) {
            writeln!(out, "    ({rel:?}, include_str!({path:?})),")?;
        }
    }
    out.push_str("];\n");
    let dest = PathBuf::from(std::env::var("OUT_DIR")?).join("embedded_files.rs");
    std::fs::write(dest, out)?;
    Ok(())
}

/// Collects `(name from the repository root, absolute path)` of every regular file under `dir`
/// (hidden files, such as editor swap files, left out).
fn walk(repo: &Path, dir: &Path, out: &mut Vec<(String, String)>) -> Result<(), Box<dyn Error>> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let file_name = entry.file_name();
        let Some(file_name) = file_name.to_str() else {
            return Err(format!("{}: not a UTF-8 name", path.display()).into());
        };
        if file_name.starts_with('.') {
            continue;
        }
        let ft = entry.file_type()?;
        if ft.is_dir() {
            walk(repo, &path, out)?;
        } else if ft.is_file() {
            let rel = path.strip_prefix(repo)?;
            let name = rel
                .to_str()
                .ok_or_else(|| format!("{}: not a UTF-8 name", path.display()))?
                .replace('\\', "/");
            let abs = path
                .to_str()
                .ok_or_else(|| format!("{}: not a UTF-8 path", path.display()))?
                .to_string();
            out.push((name, abs));
        }
    }
    Ok(())
}
