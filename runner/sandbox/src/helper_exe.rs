//! Which executable the server runs as the sandbox helper: the dedicated
//! `codespace-sandbox-helper` installed beside the server binary (a small program that loads in a
//! fraction of the time the server binary takes), else the server binary itself
//! (`codespace __sandbox-exec`, the fallback). Both run the same [`crate::run_helper`] with the
//! same arguments; only the start-up cost differs. [`dedicated_main`] is the dedicated one's
//! whole `main`, for its two builds: `mcp/src/bin/codespace-sandbox-helper.rs`, which
//! `cargo build` puts beside the server, and this crate's `codespace-sandbox-helper-static`, a
//! static musl build that `scripts/build-static-helper.sh` installs beside it under that name
//! (no dynamic loading, none of glibc's CPU-feature probes at its start), which the server
//! prefers.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The file name of the dedicated helper, beside the `codespace` binary.
pub const HELPER_BIN_NAME: &str = "codespace-sandbox-helper";

/// The dedicated helper's static build (`scripts/build-static-helper.sh` installs it beside the
/// server under this name, which `cargo build` never writes there); preferred to
/// [`HELPER_BIN_NAME`] when it answers for this build.
pub const HELPER_STATIC_BIN_NAME: &str = "codespace-sandbox-helper-static";

/// The dedicated helper's only other invocation: it prints [`helper_version_line`] and exits.
pub const HELPER_VERSION_ARG: &str = "--helper-version";

/// What the dedicated helper answers to [`HELPER_VERSION_ARG`]: its name, the version of the
/// sandbox it was built with and that build's identity (a hash of this crate's sources and the
/// lock file: `build.rs`). The server uses it only when this matches its own.
pub fn helper_version_line() -> String {
    format!(
        "{HELPER_BIN_NAME} {} {}",
        env!("CARGO_PKG_VERSION"),
        env!("CODESPACE_SANDBOX_BUILD")
    )
}

/// The dedicated helper's `main`, but for printing: [`crate::HELPER_ARG`] runs a command's
/// helper and [`crate::SPARE_ARG`] waits as a warm spare (neither returns); anything else but
/// [`HELPER_VERSION_ARG`] is a usage error (exit 2). It returns only for that question, with
/// the line the binary prints ([`helper_version_line`]; stdout is the binaries' to write).
pub fn dedicated_main() -> String {
    use std::io::Write;
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    match args.split_first() {
        Some((first, rest)) if first == crate::HELPER_ARG => crate::run_helper(rest),
        Some((first, rest)) if first == crate::SPARE_ARG => crate::run_spare(rest),
        Some((first, [])) if first == HELPER_VERSION_ARG => helper_version_line(),
        _ => {
            let _ = writeln!(
                std::io::stderr(),
                "{HELPER_BIN_NAME} is the command sandbox of codespace, started by the server: \
                 usage: {HELPER_BIN_NAME} {} -- argv… | {HELPER_VERSION_ARG}",
                crate::HELPER_ARG
            );
            std::process::exit(2)
        }
    }
}

/// How commands reach the sandbox helper.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HelperKind {
    /// The dedicated `codespace-sandbox-helper` binary.
    Dedicated,
    /// The server binary exec'ing itself as `codespace __sandbox-exec` (slower start).
    SelfExec,
}

impl HelperKind {
    /// Wire name: `dedicated` or `self-exec`.
    pub fn as_str(self) -> &'static str {
        match self {
            HelperKind::Dedicated => "dedicated",
            HelperKind::SelfExec => "self-exec",
        }
    }

    /// The kind of the helper at `path` (by its file name: either build of the dedicated one).
    pub fn of(path: &Path) -> HelperKind {
        let name = path.file_name();
        if name == Some(std::ffi::OsStr::new(HELPER_BIN_NAME))
            || name == Some(std::ffi::OsStr::new(HELPER_STATIC_BIN_NAME))
        {
            HelperKind::Dedicated
        } else {
            HelperKind::SelfExec
        }
    }
}

/// The helper the server will run, and why it is not the dedicated one when it is not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelperChoice {
    /// The executable to launch commands through.
    pub path: PathBuf,
    /// Which of the two it is.
    pub kind: HelperKind,
    /// Why the dedicated helper is not used (`None` when it is).
    pub fallback_reason: Option<String>,
}

/// Picks the helper for the server binary `server_exe`: [`HELPER_STATIC_BIN_NAME`], else
/// [`HELPER_BIN_NAME`], in the same directory, the first that is a regular executable file that
/// answers [`HELPER_VERSION_ARG`] with this build's [`helper_version_line`] (one or two short
/// processes at start-up); otherwise `server_exe` itself, with the reason the plain one is not
/// used. Blocks for those processes: call it at start-up.
pub fn choose_helper(server_exe: &Path) -> HelperChoice {
    let static_build = server_exe.with_file_name(HELPER_STATIC_BIN_NAME);
    if static_build.exists() && check_dedicated(&static_build).is_ok() {
        return HelperChoice {
            path: static_build,
            kind: HelperKind::Dedicated,
            fallback_reason: None,
        };
    }
    let dedicated = server_exe.with_file_name(HELPER_BIN_NAME);
    match check_dedicated(&dedicated) {
        Ok(()) => HelperChoice {
            path: dedicated,
            kind: HelperKind::Dedicated,
            fallback_reason: None,
        },
        Err(why) => HelperChoice {
            path: server_exe.to_path_buf(),
            kind: HelperKind::SelfExec,
            fallback_reason: Some(why),
        },
    }
}

fn check_dedicated(path: &Path) -> Result<(), String> {
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(format!(
                "{HELPER_BIN_NAME} is not installed beside the server binary"
            ));
        }
        Err(e) => return Err(format!("{HELPER_BIN_NAME}: {}", e.kind())),
    };
    if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
        return Err(format!("{HELPER_BIN_NAME} is not an executable file"));
    }
    let out = Command::new(path)
        .arg(HELPER_VERSION_ARG)
        .env_clear()
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .map_err(|e| format!("{HELPER_BIN_NAME} does not run: {}", e.kind()))?;
    let answer = String::from_utf8_lossy(&out.stdout);
    if out.status.success() && answer.trim_end() == helper_version_line() {
        Ok(())
    } else {
        Err(format!(
            "{HELPER_BIN_NAME} is from another build (it answered {:?}, expected {:?})",
            answer.trim_end(),
            helper_version_line()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `choose_helper` once the fake script can be run: another test thread's fork may still
    /// hold the script's write descriptor (ETXTBSY) until its child execs, which it always does.
    fn choose_settled(exe: &Path) -> HelperChoice {
        for _ in 0..200 {
            let choice = choose_helper(exe);
            let busy = choice
                .fallback_reason
                .as_deref()
                .is_some_and(|r| r.contains("Text file busy") || r.contains("os error 26"));
            if !busy {
                return choice;
            }
            std::thread::yield_now();
        }
        choose_helper(exe)
    }

    #[test]
    fn the_kind_follows_the_file_name() {
        assert_eq!(
            HelperKind::of(Path::new("/usr/bin/codespace-sandbox-helper")),
            HelperKind::Dedicated
        );
        assert_eq!(
            HelperKind::of(Path::new("/usr/bin/codespace")),
            HelperKind::SelfExec
        );
    }

    #[test]
    fn a_missing_helper_falls_back_to_the_server_binary_and_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("codespace");
        let choice = choose_settled(&exe);
        assert_eq!(choice.path, exe);
        assert_eq!(choice.kind, HelperKind::SelfExec);
        assert!(
            choice.fallback_reason.unwrap().contains("not installed"),
            "reason"
        );
    }

    #[test]
    fn a_helper_from_another_build_is_not_used() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("codespace");
        let fake = dir.path().join(HELPER_BIN_NAME);
        std::fs::write(
            &fake,
            "#!/bin/sh\necho codespace-sandbox-helper 0.0.0-other\n",
        )
        .unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let choice = choose_settled(&exe);
        assert_eq!(choice.kind, HelperKind::SelfExec);
        assert!(
            choice
                .fallback_reason
                .as_deref()
                .is_some_and(|r| r.contains("another build")),
            "{:?}",
            choice.fallback_reason
        );
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o644)).unwrap();
        let choice = choose_settled(&exe);
        assert!(
            choice
                .fallback_reason
                .unwrap()
                .contains("not an executable")
        );
    }

    #[test]
    fn a_helper_that_answers_this_builds_version_is_used() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("codespace");
        let fake = dir.path().join(HELPER_BIN_NAME);
        std::fs::write(
            &fake,
            format!(
                "#!/bin/sh\n[ \"$1\" = {HELPER_VERSION_ARG} ] && echo '{}'\n",
                helper_version_line()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let choice = choose_settled(&exe);
        assert_eq!(choice.kind, HelperKind::Dedicated, "{choice:?}");
        assert_eq!(choice.path, fake);
        assert!(choice.fallback_reason.is_none());
    }

    /// A fake helper named `name` in `dir` that answers `line` to the version question.
    fn fake_helper(dir: &Path, name: &str, line: &str) -> PathBuf {
        let fake = dir.join(name);
        std::fs::write(
            &fake,
            format!("#!/bin/sh\n[ \"$1\" = {HELPER_VERSION_ARG} ] && echo '{line}'\n"),
        )
        .unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        fake
    }

    #[test]
    fn the_static_build_is_preferred_only_when_it_answers_for_this_build() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("codespace");
        let plain = fake_helper(dir.path(), HELPER_BIN_NAME, &helper_version_line());
        // A static build of other sources (same version number, another build identity).
        let stale = format!(
            "{HELPER_BIN_NAME} {} 0000000000000000",
            env!("CARGO_PKG_VERSION")
        );
        let static_build = fake_helper(dir.path(), HELPER_STATIC_BIN_NAME, &stale);
        let choice = choose_settled(&exe);
        assert_eq!((choice.kind, &choice.path), (HelperKind::Dedicated, &plain));
        fake_helper(dir.path(), HELPER_STATIC_BIN_NAME, &helper_version_line());
        let choice = choose_settled(&exe);
        assert_eq!(
            (choice.kind, &choice.path),
            (HelperKind::Dedicated, &static_build)
        );
        assert_eq!(HelperKind::of(&static_build), HelperKind::Dedicated);
        // Alone, a stale static build is not used either.
        std::fs::remove_file(&plain).unwrap();
        fake_helper(dir.path(), HELPER_STATIC_BIN_NAME, &stale);
        assert_eq!(choose_settled(&exe).kind, HelperKind::SelfExec);
    }
}
