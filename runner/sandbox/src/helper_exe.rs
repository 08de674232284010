//! Which executable the server runs as the sandbox helper: the dedicated
//! `codespace-sandbox-helper` installed beside the server binary (a small program that loads in a
//! fraction of the time the server binary takes), else the server binary itself
//! (`codespace __sandbox-exec`, the fallback). Both run the same [`crate::run_helper`] with the
//! same arguments (`mcp/src/bin/codespace-sandbox-helper.rs` is the dedicated one's `main`); only
//! the start-up cost differs.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The file name of the dedicated helper, beside the `codespace` binary.
pub const HELPER_BIN_NAME: &str = "codespace-sandbox-helper";

/// The dedicated helper's only other invocation: it prints [`helper_version_line`] and exits.
pub const HELPER_VERSION_ARG: &str = "--helper-version";

/// What the dedicated helper answers to [`HELPER_VERSION_ARG`]: its name and the version of the
/// sandbox it was built with. The server uses it only when this matches its own.
pub fn helper_version_line() -> String {
    format!("{HELPER_BIN_NAME} {}", env!("CARGO_PKG_VERSION"))
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

    /// The kind of the helper at `path` (by its file name).
    pub fn of(path: &Path) -> HelperKind {
        if path.file_name() == Some(std::ffi::OsStr::new(HELPER_BIN_NAME)) {
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

/// Picks the helper for the server binary `server_exe`: [`HELPER_BIN_NAME`] in the same
/// directory when it is a regular executable file that answers [`HELPER_VERSION_ARG`] with
/// this build's [`helper_version_line`] (one short process at start-up); otherwise
/// `server_exe` itself, with the reason. Blocks for that one process: call it at start-up.
pub fn choose_helper(server_exe: &Path) -> HelperChoice {
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
}
