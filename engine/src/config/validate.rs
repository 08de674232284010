//! Checks of single config fields: workspace roots, read paths, command `path` and `env`, the
//! command write paths; each error names the field in the operator's words.

use codespace_policy::config::is_env_name;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::error::ConfigError;

/// Most candidates of a command's write scope one workspace may list.
pub const MAX_COMMAND_WRITE_PATHS: usize = 64;

/// `["."]`: the whole workspace is the one candidate (the behaviour before write scopes).
pub fn default_command_write_paths() -> Vec<String> {
    vec![".".to_string()]
}

/// Checks a `command_write_paths` list: each entry workspace-relative (not absolute, no `..`),
/// at most [`MAX_COMMAND_WRITE_PATHS`]; with the workspace `root`, no symlink anywhere on the
/// way and a directory where it exists (a candidate that does not exist yet is kept: it is
/// decided at every command start, and created for a command whose policy allows it). Returns
/// the normalized paths, each once, in the given order.
pub(super) fn command_write_paths(
    field: &str,
    list: &[String],
    root: Option<&Path>,
) -> Result<Vec<String>, ConfigError> {
    if list.len() > MAX_COMMAND_WRITE_PATHS {
        return Err(ConfigError(format!(
            "{field}: {} entries, more than the {MAX_COMMAND_WRITE_PATHS} allowed",
            list.len()
        )));
    }
    let mut out: Vec<String> = Vec::new();
    for (i, entry) in list.iter().enumerate() {
        let at = format!("{field}[{i}]");
        let rel = codespace_runner_fs::RelPath::parse(entry).map_err(|e| {
            ConfigError(format!(
                "{at}: `{entry}` must be a workspace-relative directory ({e})"
            ))
        })?;
        if let Some(root) = root {
            let mut cur = root.to_path_buf();
            for comp in rel.as_str().split('/').filter(|c| *c != ".") {
                cur.push(comp);
                match std::fs::symlink_metadata(&cur) {
                    Ok(m) if m.file_type().is_symlink() => {
                        return Err(ConfigError(format!(
                            "{at}: `{entry}` goes through a symlink; name the real directory"
                        )));
                    }
                    Ok(m) if !m.is_dir() => {
                        return Err(ConfigError(format!("{at}: `{entry}` is not a directory")));
                    }
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                    Err(e) => {
                        return Err(ConfigError(format!("{at}: `{entry}` cannot be read: {e}")));
                    }
                }
            }
        }
        let rel = rel.as_str().to_string();
        if !out.contains(&rel) {
            out.push(rel);
        }
    }
    Ok(out)
}

/// An I/O failure in an operator's words: "does not exist", "is not readable (permission
/// denied)", … (no Rust error wording, no OS error number).
pub fn io_reason(e: &std::io::Error) -> String {
    use std::io::ErrorKind as K;
    match e.kind() {
        K::NotFound => "does not exist".into(),
        K::PermissionDenied => "is not accessible (permission denied)".into(),
        K::NotADirectory => "is not reachable (a parent is not a directory)".into(),
        K::IsADirectory => "is a directory, not a file".into(),
        _ => {
            let text = e.to_string();
            let text = text
                .split(" (os error")
                .next()
                .unwrap_or(&text)
                .to_lowercase();
            format!("cannot be opened ({text})")
        }
    }
}

/// The root of a worker's workspace: a path where the worker runs, never looked up on this host.
/// It must be absolute and plain (no `.` or `..` component), since nothing here can resolve it.
pub(super) fn worker_root(field: &str, root: &Path) -> Result<PathBuf, ConfigError> {
    use std::path::Component;
    if !root.is_absolute() {
        return Err(ConfigError(format!("{field}: must be an absolute path")));
    }
    if root
        .components()
        .any(|c| matches!(c, Component::CurDir | Component::ParentDir))
    {
        return Err(ConfigError(format!(
            "{field}: \"{}\" must not hold `.` or `..` (a worker's root is not resolved on this host)",
            root.display()
        )));
    }
    Ok(root.components().collect())
}

pub(super) fn canonical_root(field: &str, root: &Path) -> Result<PathBuf, ConfigError> {
    if !root.is_absolute() {
        return Err(ConfigError(format!("{field}: must be an absolute path")));
    }
    let canon = std::fs::canonicalize(root).map_err(|e| {
        ConfigError(format!(
            "{field}: directory \"{}\" {}",
            root.display(),
            io_reason(&e)
        ))
    })?;
    if !canon.is_dir() {
        return Err(ConfigError(format!(
            "{field}: \"{}\" is not a directory",
            root.display()
        )));
    }
    Ok(canon)
}

/// Validates operator read paths: names of letters, digits, `.`, `_`, `-`; absolute paths that
/// exist (canonicalized); never `/` (it would undo the read allow-list) nor anything under `/dev`
/// (a readable device node can be a whole disk).
pub(super) fn read_paths(
    field: &str,
    raw: BTreeMap<String, PathBuf>,
) -> Result<BTreeMap<String, PathBuf>, ConfigError> {
    let mut out = BTreeMap::new();
    for (name, path) in raw {
        let valid_name = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        if !valid_name {
            return Err(ConfigError(format!(
                "{field}.{name}: a name may use only letters, digits, `.`, `_` and `-`"
            )));
        }
        if !path.is_absolute() {
            return Err(ConfigError(format!(
                "{field}.{name}: must be an absolute path"
            )));
        }
        let canon = std::fs::canonicalize(&path)
            .map_err(|e| ConfigError(format!("{field}.{name}: cannot be opened ({})", e.kind())))?;
        if canon == Path::new("/") {
            return Err(ConfigError(format!(
                "{field}.{name}: `/` would make every file readable; declare narrower paths"
            )));
        }
        if canon.starts_with("/dev") {
            return Err(ConfigError(format!(
                "{field}.{name}: device paths cannot be declared readable"
            )));
        }
        out.insert(name, canon);
    }
    Ok(out)
}

/// Validates operator `path` entries: absolute, no `:` (the `PATH` separator), no NUL.
pub(super) fn command_path(field: &str, raw: Vec<PathBuf>) -> Result<Vec<PathBuf>, ConfigError> {
    for (i, p) in raw.iter().enumerate() {
        let text = p.to_string_lossy();
        if !p.is_absolute() {
            return Err(ConfigError(format!(
                "{field}[{i}]: must be an absolute path"
            )));
        }
        if text.contains(':') || text.contains('\0') {
            return Err(ConfigError(format!(
                "{field}[{i}]: must not contain `:` or NUL"
            )));
        }
    }
    Ok(raw)
}

/// Validates operator `env` entries: names per [`is_env_name`], values without NUL.
pub(super) fn command_env(
    field: &str,
    raw: BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, ConfigError> {
    for (name, value) in &raw {
        if !is_env_name(name) {
            return Err(ConfigError(format!(
                "{field}.{name}: a variable name is a letter or `_` followed by letters, digits and `_`"
            )));
        }
        if value.contains('\0') {
            return Err(ConfigError(format!(
                "{field}.{name}: the value must not contain NUL"
            )));
        }
    }
    Ok(raw)
}

/// Validates `skills_dir`: an absolute existing directory (canonicalized) that neither lies in
/// nor holds any of `apart_from` (what the field is, and the path: every workspace root, command
/// home and read path). A skill is text the host may hand its model as instructions: a directory
/// a command can write (a workspace, a home) would let a command rewrite the operator's skills
/// (prompt injection), and one a command can read is no longer the operator's alone to publish.
pub(super) fn skills_dir(
    raw: &Path,
    apart_from: &[(String, &Path)],
) -> Result<PathBuf, ConfigError> {
    let dir = canonical_root("skills_dir", raw)?;
    for (what, other) in apart_from {
        if dir.starts_with(other) || other.starts_with(&dir) {
            return Err(ConfigError(format!(
                "skills_dir: \"{}\" overlaps {what} \"{}\": commands could change or read the \
                 operator's skills; keep skills_dir apart from every workspace, home and read path",
                raw.display(),
                other.display()
            )));
        }
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::super::*;
    use std::path::Path;

    fn load(json: &str) -> Result<Config, ConfigError> {
        Config::from_json(json, Path::new("/"))
    }

    #[test]
    fn bad_read_paths_home_and_sandbox_name_the_field() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display();
        let ws = |extra: &str| format!(r#"{{"workspaces": {{"w": {{"root": "{d}"{extra}}}}}}}"#);
        let cases = [
            (
                ws(r#", "read_paths": {"x": "rel"}"#),
                "workspaces.w.read_paths.x: must be an absolute path",
            ),
            (
                ws(r#", "read_paths": {"x": "/no/such/dir"}"#),
                "workspaces.w.read_paths.x: cannot be opened",
            ),
            (
                ws(r#", "read_paths": {"x": "/"}"#),
                "workspaces.w.read_paths.x: `/`",
            ),
            (
                ws(r#", "read_paths": {"x": "/dev"}"#),
                "workspaces.w.read_paths.x: device",
            ),
            (
                ws(r#", "read_paths": {"a b": "/usr"}"#),
                "workspaces.w.read_paths.a b: a name",
            ),
            (
                ws(r#", "home": "homes/w""#),
                "workspaces.w.home: must be an absolute path",
            ),
            (ws(r#", "sandbox": "maybe""#), "workspaces.w.sandbox"),
            (
                format!(
                    r#"{{"environments": {{"local": {{"kind": "host", "read_paths": {{"u": "/usr"}}}}}}, "workspaces": {{"w": {{"root": "{d}", "read_paths": {{"u": "/usr"}}}}}}}}"#
                ),
                "workspaces.w.read_paths.u: already declared by environment `local`",
            ),
            (
                format!(
                    r#"{{"workspaces": {{"w": {{"root": "{d}"}}}}, "limits": {{"max_pids_per_process": 0}}}}"#
                ),
                "limits.max_pids_per_process: must be at least 1",
            ),
        ];
        for (json, want) in cases {
            let err = load(&json).unwrap_err().to_string();
            assert!(
                err.contains(want),
                "config {json}: got `{err}`, want `{want}`"
            );
            assert!(!err.contains('\n'), "one line: {err}");
        }
    }

    #[test]
    fn bad_path_and_env_name_the_field() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display();
        let ws = |extra: &str| format!(r#"{{"workspaces": {{"w": {{"root": "{d}"{extra}}}}}}}"#);
        let cases = [
            (
                ws(r#", "path": ["bin"]"#),
                "workspaces.w.path[0]: must be an absolute path",
            ),
            (
                ws(r#", "path": ["/a:/b"]"#),
                "workspaces.w.path[0]: must not contain",
            ),
            (
                ws(r#", "env": {"1X": "v"}"#),
                "workspaces.w.env.1X: a variable name",
            ),
            (
                ws(r#", "env": {"A=B": "v"}"#),
                "workspaces.w.env.A=B: a variable name",
            ),
            (
                ws(r#", "env": {"X": "a\u0000b"}"#),
                "workspaces.w.env.X: the value must not contain NUL",
            ),
            (
                format!(
                    r#"{{"environments": {{"e": {{"kind": "host", "path": ["rel"]}}}}, "workspaces": {{"w": {{"root": "{d}"}}}}}}"#
                ),
                "environments.e.path[0]: must be an absolute path",
            ),
        ];
        for (json, want) in cases {
            let err = load(&json).unwrap_err().to_string();
            assert!(
                err.contains(want),
                "config {json}: got `{err}`, want `{want}`"
            );
        }
        assert!(is_env_name("CARGO_HOME") && is_env_name("_x1"));
        assert!(!is_env_name("") && !is_env_name("A-B") && !is_env_name("Ä"));
    }
}
