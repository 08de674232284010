//! A workspace's `hooks` (issue 31): the operator's deterministic commands around `apply_patch`,
//! `before_patch` (must exit 0 on the staged patched tree) and `after_patch` (e.g. a
//! formatter, after the commit). Parsed as written, then checked at load: a non-empty argv, no
//! NUL, globs that compile, and, on this host, a program that exists.

use codespace_runner_fs::GlobFilter;
use schemars::JsonSchema;
use serde::Deserialize;
use std::path::{Path, PathBuf};

use super::error::ConfigError;

/// The system directories of every command's `PATH` (after the operator's `path`).
pub const SYSTEM_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Most hooks one stage of a workspace may list.
pub const MAX_HOOKS_PER_STAGE: usize = 16;

/// `hooks` as written.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Hooks")]
pub(super) struct RawHooks {
    /// Commands that must exit 0 on the patched tree before a patch is written (run on a
    /// read-only staged view; a failure refuses the patch with `HOOK_FAILED`).
    #[serde(default)]
    pub(super) before_patch: Vec<RawHook>,
    /// Commands run after a patch is committed, allowed to write the patched files'
    /// directories (a failure is reported in the result; the patch stays).
    #[serde(default)]
    pub(super) after_patch: Vec<RawHook>,
}

/// One hook as written.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Hook")]
pub(super) struct RawHook {
    /// The argv (no shell); run in the workspace root, sandboxed like a command.
    pub(super) command: Vec<String>,
    /// Globs over workspace-relative paths (`*.rs`, `src/**`): the hook runs only for a
    /// patch touching a matching path. Absent: every patch.
    #[serde(default)]
    pub(super) paths: Option<Vec<String>>,
}

/// A workspace's hooks, checked.
#[derive(Debug, Clone, Default)]
pub struct Hooks {
    /// Run on the staged patched tree before the commit.
    pub before_patch: Vec<Hook>,
    /// Run after the commit.
    pub after_patch: Vec<Hook>,
}

/// One checked hook.
#[derive(Debug, Clone)]
pub struct Hook {
    /// The argv.
    pub command: Vec<String>,
    /// The `paths` globs as written (empty: every patch).
    pub paths: Vec<String>,
    matchers: Vec<GlobFilter>,
}

impl Hook {
    /// Whether the hook runs for a patch touching `touched` (workspace-relative paths).
    pub fn applies_to<'a>(&self, mut touched: impl Iterator<Item = &'a str>) -> bool {
        self.matchers.is_empty() || touched.any(|p| self.matchers.iter().any(|m| m.is_match(p)))
    }
}

/// Checks `raw` (the `hooks` of the workspace at `field`). `host_root` is the workspace root
/// when it is on this host: then a program must exist (a bare name on the commands' `PATH`:
/// the operator's `path`, [`SYSTEM_PATH`] or the server's own `PATH`, where start-up finds
/// toolchains; a path with a `/` absolute or beneath the root).
pub(super) fn hooks(
    field: &str,
    raw: Option<RawHooks>,
    host_root: Option<&Path>,
    path: &[PathBuf],
) -> Result<Hooks, ConfigError> {
    let Some(raw) = raw else {
        return Ok(Hooks::default());
    };
    let stage = |name: &str, list: Vec<RawHook>| -> Result<Vec<Hook>, ConfigError> {
        if list.len() > MAX_HOOKS_PER_STAGE {
            return Err(ConfigError(format!(
                "{field}.{name}: {} hooks, more than the {MAX_HOOKS_PER_STAGE} allowed",
                list.len()
            )));
        }
        list.into_iter()
            .enumerate()
            .map(|(i, h)| hook(&format!("{field}.{name}[{i}]"), h, host_root, path))
            .collect()
    };
    Ok(Hooks {
        before_patch: stage("before_patch", raw.before_patch)?,
        after_patch: stage("after_patch", raw.after_patch)?,
    })
}

fn hook(
    at: &str,
    raw: RawHook,
    host_root: Option<&Path>,
    path: &[PathBuf],
) -> Result<Hook, ConfigError> {
    let Some(program) = raw.command.first().filter(|p| !p.is_empty()) else {
        return Err(ConfigError(format!(
            "{at}.command: must be a non-empty argv whose first word is not empty"
        )));
    };
    if raw.command.iter().any(|a| a.contains('\0')) {
        return Err(ConfigError(format!(
            "{at}.command: words must not contain NUL bytes"
        )));
    }
    if let Some(root) = host_root {
        check_program(at, program, root, path)?;
    }
    let globs = raw.paths.unwrap_or_default();
    let mut matchers = Vec::with_capacity(globs.len());
    for (i, g) in globs.iter().enumerate() {
        matchers.push(
            GlobFilter::new(g).map_err(|e| ConfigError(format!("{at}.paths[{i}]: `{g}`: {e}")))?,
        );
    }
    Ok(Hook {
        command: raw.command,
        paths: globs,
        matchers,
    })
}

/// The program of a hook must exist here: see [`hooks`].
fn check_program(
    at: &str,
    program: &str,
    root: &Path,
    path: &[PathBuf],
) -> Result<(), ConfigError> {
    let is_file = |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.is_file());
    if program.contains('/') {
        let p = Path::new(program);
        let full = if p.is_absolute() {
            p.to_path_buf()
        } else {
            root.join(p)
        };
        if is_file(&full) {
            return Ok(());
        }
        return Err(ConfigError(format!(
            "{at}.command: program `{program}` does not exist{}",
            if p.is_absolute() {
                ""
            } else {
                " beneath the workspace root"
            }
        )));
    }
    let server_path = std::env::var_os("PATH").unwrap_or_default();
    let found = path
        .iter()
        .cloned()
        .chain(SYSTEM_PATH.split(':').map(PathBuf::from))
        .chain(std::env::split_paths(&server_path))
        .any(|dir| dir.is_absolute() && is_file(&dir.join(program)));
    if found {
        Ok(())
    } else {
        Err(ConfigError(format!(
            "{at}.command: program `{program}` not found on the commands' PATH (the workspace's \
             `path`, then {SYSTEM_PATH}); give its absolute path"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(command: &[&str], paths: Option<&[&str]>) -> RawHook {
        RawHook {
            command: command.iter().map(|s| (*s).to_string()).collect(),
            paths: paths.map(|p| p.iter().map(|s| (*s).to_string()).collect()),
        }
    }

    #[test]
    fn paths_select_the_patches_a_hook_runs_for() {
        let h = hook("h", raw(&["true"], Some(&["*.rs"])), None, &[]).unwrap();
        assert!(h.applies_to(["README.md", "src/lib.rs"].into_iter()));
        assert!(!h.applies_to(["README.md"].into_iter()));
        let every = hook("h", raw(&["true"], None), None, &[]).unwrap();
        assert!(every.applies_to(std::iter::empty()));
    }

    #[test]
    fn bad_hooks_name_their_field() {
        let root = tempfile::tempdir().unwrap();
        for (h, want) in [
            (raw(&[], None), "h.command: must be a non-empty argv"),
            (raw(&[""], None), "h.command: must be a non-empty argv"),
            (
                raw(&["no-such-program-codespace"], None),
                "program `no-such-program-codespace` not found",
            ),
            (raw(&["./check.sh"], None), "beneath the workspace root"),
            (raw(&["true"], Some(&["a{"])), "h.paths[0]"),
        ] {
            let err = hook("h", h, Some(root.path()), &[]).unwrap_err().0;
            assert!(err.contains(want), "{err}");
        }
        assert!(
            hook(
                "h",
                raw(&["sh", "-c", "true"], None),
                Some(root.path()),
                &[]
            )
            .is_ok()
        );
    }
}
