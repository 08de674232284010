//! Computes `CODESPACE_BUILD_ID`, the build id the worker handshake compares: the packager's
//! `CODESPACE_BUILD_ID` when set, else the crate version and the git commit of the source tree
//! (`0.1.0+1a2b3c4d5e6f`), else the version alone (`0.1.0+nogit`, a tree without git).

use std::path::Path;
use std::process::Command;

fn git(dir: &str, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?;
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

fn main() {
    println!("cargo:rerun-if-env-changed=CODESPACE_BUILD_ID");
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    let id = match std::env::var("CODESPACE_BUILD_ID") {
        Ok(id) if !id.trim().is_empty() => id.trim().to_string(),
        _ => {
            let commit = git(&dir, &["rev-parse", "--short=12", "HEAD"]);
            // Re-run when HEAD moves: the worktree's HEAD and the ref it names.
            for (arg, file) in [("--git-path", "HEAD"), ("--git-path", "packed-refs")] {
                if let Some(p) = git(&dir, &["rev-parse", arg, file]) {
                    let p = Path::new(&dir).join(p);
                    // A missing path would make the script re-run on every build.
                    if !p.exists() {
                        continue;
                    }
                    println!("cargo:rerun-if-changed={}", p.display());
                }
            }
            if let Some(head_ref) = git(&dir, &["symbolic-ref", "-q", "HEAD"])
                && let Some(p) = git(&dir, &["rev-parse", "--git-path", &head_ref])
            {
                println!(
                    "cargo:rerun-if-changed={}",
                    Path::new(&dir).join(p).display()
                );
            }
            format!("{version}+{}", commit.as_deref().unwrap_or("nogit"))
        }
    };
    println!("cargo:rustc-env=CODESPACE_BUILD_ID={id}");
}
