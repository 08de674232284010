//! What a workspace's commands may reach besides the workspace itself: the operator's read
//! paths, the command's home directory, and the start-up check that none of the paths a command
//! may read or write reaches the store (its file, `-wal`/`-shm` and its directory).

use crate::config::{Config, Workspace};
use codespace_runner_sandbox::SYSTEM_READ_PATHS;
use std::path::{Path, PathBuf};

/// Directory (beside the store) that holds the default homes, one per workspace.
pub const HOMES_DIR: &str = "homes";

/// A workspace id as one safe path component: the id itself when it is plain, else a digest.
fn path_component(id: &str) -> String {
    let plain = !id.is_empty()
        && id != "."
        && id != ".."
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if plain {
        id.to_string()
    } else {
        use sha2::Digest;
        let digest = sha2::Sha256::digest(id.as_bytes());
        format!("ws-{}", hex::encode(digest.get(..8).unwrap_or_default()))
    }
}

/// The home directory of `ws`'s commands: the operator's `home`, else
/// `<store dir>/homes/<workspace id>`; `None` when neither is known (no store location).
pub(crate) fn home_dir(config: &Config, ws: &Workspace) -> Option<PathBuf> {
    ws.home.clone().or_else(|| {
        let store = config.store.as_ref()?;
        let dir = store.parent()?;
        Some(dir.join(HOMES_DIR).join(path_component(&ws.id)))
    })
}

/// Creates `home` (and missing parents) with mode 0700 when it does not exist yet.
pub(crate) fn ensure_home(home: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if home.is_dir() {
        return Ok(());
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(home)
}

/// The canonical form of `p` when it exists, else `p` itself.
fn canonical(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

/// Refuses a configuration in which a command could read or write the store: the store's
/// directory (which holds the store, its `-wal` and `-shm`) must not lie beneath a system read
/// path, an operator read path or a home directory of any workspace. Returns one line naming
/// the workspace and the path's role.
pub(crate) fn check_store_unreachable(config: &Config) -> Result<(), String> {
    let Some(store) = &config.store else {
        return Ok(());
    };
    let store_dir = canonical(store.parent().unwrap_or(Path::new("/")));
    for ws in config.workspaces.values() {
        let mut reachable: Vec<(String, PathBuf)> = SYSTEM_READ_PATHS
            .iter()
            .map(|p| (format!("the system path {p}"), canonical(Path::new(p))))
            .collect();
        for (name, path) in &ws.read_paths {
            reachable.push((format!("read path `{name}`"), path.clone()));
        }
        if let Some(home) = home_dir(config, ws) {
            reachable.push(("home".to_string(), canonical(&home)));
        }
        if let Some((role, _)) = reachable.iter().find(|(_, p)| store_dir.starts_with(p)) {
            return Err(format!(
                "workspace {}: the store's directory lies beneath {role}, so commands could read \
                 or write the store; move the store (--store) or change the path",
                ws.id
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(store: &Path, extra: &str) -> Config {
        let dir = store.parent().unwrap();
        let root = dir.join("ws");
        std::fs::create_dir_all(&root).unwrap();
        let json = format!(
            r#"{{"store": "{}", "workspaces": {{"w": {{"root": "{}"{extra}}}}}}}"#,
            store.display(),
            root.display()
        );
        Config::from_json(&json, Path::new("/")).unwrap()
    }

    #[test]
    fn default_home_is_beside_the_store_and_never_contains_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("state/codespace.db");
        std::fs::create_dir_all(store.parent().unwrap()).unwrap();
        let cfg = config(&store, "");
        let home = home_dir(&cfg, &cfg.workspaces["w"]).unwrap();
        assert_eq!(home, dir.path().join("state/homes/w"));
        assert!(check_store_unreachable(&cfg).is_ok());
        ensure_home(&home).unwrap();
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&home).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        assert!(ensure_home(&home).is_ok(), "idempotent");
    }

    #[test]
    fn a_read_path_or_home_over_the_store_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("state/codespace.db");
        std::fs::create_dir_all(store.parent().unwrap()).unwrap();
        let cfg = config(
            &store,
            &format!(r#", "read_paths": {{"all": "{}"}}"#, dir.path().display()),
        );
        let err = check_store_unreachable(&cfg).unwrap_err();
        assert!(
            err.contains("workspace w") && err.contains("read path `all`"),
            "{err}"
        );
        let cfg = config(
            &store,
            &format!(r#", "home": "{}""#, store.parent().unwrap().display()),
        );
        let err = check_store_unreachable(&cfg).unwrap_err();
        assert!(err.contains("home"), "{err}");
    }

    #[test]
    fn a_store_under_a_system_read_path_is_refused() {
        let mut cfg = Config::embedded_default(Path::new("/tmp")).unwrap();
        cfg.store = Some(PathBuf::from("/etc/codespace/codespace.db"));
        let err = check_store_unreachable(&cfg).unwrap_err();
        assert!(err.contains("system path /etc"), "{err}");
    }

    #[test]
    fn odd_workspace_ids_become_safe_components() {
        assert_eq!(path_component("web-1.x_y"), "web-1.x_y");
        for id in ["..", ".", "a/b", "", "sp ace"] {
            let c = path_component(id);
            assert!(c.starts_with("ws-") && !c.contains('/'), "{id} -> {c}");
        }
    }
}
