//! Program lookup before spawning, so a missing program is a spawn failure rather than exit 127.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::error::SpawnError;

/// PATH used when the child environment has none.
const FALLBACK_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Name of a program safe to show in messages (no absolute path).
pub(crate) fn display_name(program: &str) -> String {
    let path = Path::new(program);
    if path.is_absolute() {
        path.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    } else {
        program.to_owned()
    }
}

fn is_executable_file(path: &Path) -> bool {
    std::fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// The last `PATH` entry of `env`, or a conventional default.
fn path_var(env: &[(String, String)]) -> &str {
    env.iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map_or(FALLBACK_PATH, |(_, v)| v.as_str())
}

/// Resolves `program` the way `execvp` in `cwd` with the child's `env` would: a name containing `/` is
/// taken relative to `cwd`; a bare name is searched in the child's PATH.
pub(crate) fn resolve_program(
    program: &str,
    cwd: &Path,
    env: &[(String, String)],
) -> Result<PathBuf, SpawnError> {
    let not_found =
        || SpawnError::SpawnFailed(format!("program not found: {}", display_name(program)));
    if program.contains('/') {
        let candidate = cwd.join(program);
        return if is_executable_file(&candidate) {
            Ok(candidate)
        } else {
            Err(not_found())
        };
    }
    path_var(env)
        .split(':')
        .map(|dir| if dir.is_empty() { "." } else { dir })
        .map(|dir| cwd.join(dir).join(program))
        .find(|candidate| is_executable_file(candidate))
        .ok_or_else(not_found)
}

/// Checks that `cwd` is an existing directory.
pub(crate) fn check_cwd(cwd: &Path) -> Result<(), SpawnError> {
    if cwd.is_dir() {
        Ok(())
    } else {
        Err(SpawnError::SpawnFailed(
            "the working directory does not exist".to_owned(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(path: &str) -> Vec<(String, String)> {
        vec![("PATH".to_owned(), path.to_owned())]
    }

    #[test]
    fn finds_programs_on_the_child_path() {
        let found =
            resolve_program("sh", Path::new("/"), &env("/nonexistent:/bin:/usr/bin")).unwrap();
        assert!(found.ends_with("sh"));
        assert!(found.is_absolute());
    }

    #[test]
    fn missing_program_is_spawn_failed_without_absolute_path() {
        let err = resolve_program("no-such-prog-xyz", Path::new("/"), &env("/bin")).unwrap_err();
        assert_eq!(
            err,
            SpawnError::SpawnFailed("program not found: no-such-prog-xyz".into())
        );
        let err = resolve_program("/opt/nope/tool", Path::new("/"), &[]).unwrap_err();
        assert!(!err.to_string().contains("/opt"), "{err}");
    }

    #[test]
    fn relative_names_with_slash_use_cwd() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("run.sh");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        assert!(resolve_program("./run.sh", dir.path(), &[]).is_err());
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(
            resolve_program("./run.sh", dir.path(), &[]).unwrap(),
            dir.path().join("./run.sh")
        );
        assert!(resolve_program("run.sh", dir.path(), &env("")).is_ok());
    }
}
