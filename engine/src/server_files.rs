//! The server's own files (config, policies, schema, store with its `-wal`/`-shm`, the store's
//! journal key, client token files): none may lie inside a workspace, where a command or a patch
//! could read or rewrite them, and the tools treat each as `resource.server_owned`.

use crate::config::{Config, ConfigError};
use crate::policy::PolicySource;
use std::path::{Component, Path, PathBuf};

/// One server-owned file or directory and the config field that names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerFile {
    /// The field, as an operator would look for it (`store`, `clients.ci.token_file`, ...).
    pub field: String,
    /// The path as configured (absolute).
    pub path: PathBuf,
}

/// The SQLite companions of a store file that live next to it.
const STORE_SUFFIXES: [&str; 3] = ["-wal", "-shm", "-journal"];

fn with_suffix(p: &Path, suffix: &str) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// Every server-owned path of `config` (with `config.store` set to the store in use) and the
/// policy source in use.
pub fn server_files(config: &Config, source: &PolicySource) -> Vec<ServerFile> {
    let mut out = Vec::new();
    let mut add = |field: &str, path: PathBuf| {
        out.push(ServerFile {
            field: field.to_string(),
            path,
        });
    };
    if let Some(f) = &config.config_file {
        add("config file", f.clone());
    }
    if let PolicySource::Dir { policies, schema } = source {
        add("policies", policies.clone());
        add("schema", schema.clone());
    }
    if let Some(store) = &config.store {
        add("store", store.clone());
        for suffix in STORE_SUFFIXES {
            add(&format!("store ({suffix})"), with_suffix(store, suffix));
        }
        add(
            "store journal key",
            codespace_store::journal_key_path(store),
        );
        if let Some(dir) = store.parent().filter(|d| !d.as_os_str().is_empty()) {
            add("store directory", dir.to_path_buf());
        }
    }
    for (name, c) in &config.clients {
        if let Some(f) = &c.token_file {
            add(&format!("clients.{name}.token_file"), f.clone());
        }
    }
    out
}

/// `p` made absolute and canonical as far as it exists: the longest existing ancestor is
/// canonicalized (symlinks resolved) and the rest appended, so a file that does not exist yet
/// is placed where it would be created.
pub fn canonical_lenient(p: &Path) -> PathBuf {
    let abs = if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir().unwrap_or_default().join(p)
    };
    let mut rest: Vec<std::ffi::OsString> = Vec::new();
    let mut cur = abs.as_path();
    loop {
        if let Ok(c) = std::fs::canonicalize(cur) {
            let mut out = c;
            for part in rest.iter().rev() {
                out.push(part);
            }
            return out;
        }
        match (cur.parent(), cur.components().next_back()) {
            (Some(parent), Some(Component::Normal(name))) => {
                rest.push(name.to_os_string());
                cur = parent;
            }
            _ => return abs,
        }
    }
}

/// The workspace-relative form of `p` when it is `root` or lies beneath it (both canonical).
fn inside(root: &Path, p: &Path) -> Option<String> {
    p.strip_prefix(root)
        .ok()
        .map(|r| r.to_string_lossy().into_owned())
}

/// Refuses a configuration that places a server-owned file inside a workspace root: one line
/// naming the field, e.g. `store: /x/y.db lies inside workspace "default" (/x)`. Both the path as
/// given and its canonical form are checked (a symlink out of a workspace still sits in it).
pub fn check_outside_workspaces(config: &Config, source: &PolicySource) -> Result<(), ConfigError> {
    for f in server_files(config, source) {
        let lexical = f
            .path
            .parent()
            .map(|d| canonical_lenient(d).join(f.path.file_name().unwrap_or_default()))
            .unwrap_or_else(|| f.path.clone());
        let resolved = canonical_lenient(&f.path);
        for ws in config.workspaces.values() {
            if inside(&ws.root, &lexical).is_some() || inside(&ws.root, &resolved).is_some() {
                return Err(ConfigError(format!(
                    "{}: {} lies inside workspace \"{}\" ({}); server files must live outside every workspace",
                    f.field,
                    f.path.display(),
                    ws.id,
                    ws.root.display()
                )));
            }
            // A workspace inside the policies directory could add policy files to it.
            if f.field == "policies" && inside(&resolved, &ws.root).is_some() {
                return Err(ConfigError(format!(
                    "{}: {} contains workspace \"{}\" ({}); server files must live outside every workspace",
                    f.field,
                    f.path.display(),
                    ws.id,
                    ws.root.display()
                )));
            }
        }
    }
    Ok(())
}

/// Workspace-relative forms of the server-owned paths that lie inside `root` (for
/// `resource.server_owned`; `serve` refuses such a configuration, embedders may not).
pub fn server_owned_in(root: &Path, files: &[ServerFile]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for f in files {
        // The directory holding the store is only owned as a container, not as a path prefix
        // of the whole workspace.
        if f.field == "store directory" {
            continue;
        }
        for p in [canonical_lenient(&f.path), f.path.clone()] {
            if let Some(r) = inside(root, &p).filter(|r| !r.is_empty())
                && !out.contains(&r)
            {
                out.push(r);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(root: &Path, extra: &str) -> Config {
        let json = format!(
            r#"{{"workspaces": {{"default": {{"root": "{}"}}}}{extra}}}"#,
            root.display()
        );
        Config::from_json(&json, Path::new("/")).unwrap()
    }

    #[test]
    fn a_store_inside_a_workspace_is_refused_naming_the_field() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let mut cfg = config(&root, "");
        cfg.store = Some(root.join("sub/codespace.db"));
        let e = check_outside_workspaces(&cfg, &PolicySource::Embedded)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!(
                "invalid config: store: {}/sub/codespace.db lies inside workspace \"default\" ({})",
                root.display(),
                root.display()
            )),
            "{e}"
        );
        assert!(!e.contains('\n'));
    }

    #[test]
    fn every_server_file_is_checked() {
        let outside = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(ws.path()).unwrap();
        let store = outside.path().join("s.db");
        let ok = |cfg: &mut Config| {
            cfg.store = Some(store.clone());
        };
        // Policies dir and schema inside.
        let mut cfg = config(&root, "");
        ok(&mut cfg);
        let src = PolicySource::Dir {
            policies: root.join("policies"),
            schema: outside.path().join("schema.cedarschema"),
        };
        let e = check_outside_workspaces(&cfg, &src)
            .unwrap_err()
            .to_string();
        assert!(e.contains("policies: "), "{e}");
        let src = PolicySource::Dir {
            policies: outside.path().join("policies"),
            schema: root.join("s/codespace.cedarschema"),
        };
        let e = check_outside_workspaces(&cfg, &src)
            .unwrap_err()
            .to_string();
        assert!(e.contains("schema: "), "{e}");
        // A token file inside.
        std::fs::write(root.join("tok"), "0123456789abcdef0123").unwrap();
        let mut cfg = config(
            &root,
            &format!(
                r#", "clients": {{"ci": {{"token_file": "{}"}}}}"#,
                root.join("tok").display()
            ),
        );
        ok(&mut cfg);
        let e = check_outside_workspaces(&cfg, &PolicySource::Embedded)
            .unwrap_err()
            .to_string();
        assert!(e.contains("clients.ci.token_file: "), "{e}");
        // A store reached through a symlink that points into the workspace.
        let link = outside.path().join("link");
        std::os::unix::fs::symlink(&root, &link).unwrap();
        let mut cfg = config(&root, "");
        cfg.store = Some(link.join("s.db"));
        let e = check_outside_workspaces(&cfg, &PolicySource::Embedded)
            .unwrap_err()
            .to_string();
        assert!(e.contains("store: "), "{e}");
        // A store file that is a symlink out of a workspace still sits in it.
        let mut cfg = config(&root, "");
        std::os::unix::fs::symlink(&store, root.join("evil.db")).unwrap();
        cfg.store = Some(root.join("evil.db"));
        assert!(check_outside_workspaces(&cfg, &PolicySource::Embedded).is_err());
        // Everything outside: accepted.
        let mut cfg = config(&root, "");
        ok(&mut cfg);
        check_outside_workspaces(&cfg, &PolicySource::Embedded).unwrap();
        // A workspace inside the policies directory.
        let src = PolicySource::Dir {
            policies: root.parent().unwrap().to_path_buf(),
            schema: outside.path().join("schema.cedarschema"),
        };
        let e = check_outside_workspaces(&cfg, &src)
            .unwrap_err()
            .to_string();
        assert!(e.contains("contains workspace"), "{e}");
    }

    #[test]
    fn token_files_and_the_journal_key_are_server_owned() {
        let ws = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(ws.path()).unwrap();
        std::fs::write(root.join("tok"), "0123456789abcdef0123").unwrap();
        let mut cfg = config(
            &root,
            &format!(
                r#", "clients": {{"ci": {{"token_file": "{}"}}}}"#,
                root.join("tok").display()
            ),
        );
        cfg.store = Some(root.join("data/s.db"));
        let owned = server_owned_in(&root, &server_files(&cfg, &PolicySource::Embedded));
        for want in [
            "tok",
            "data/s.db",
            "data/s.db-wal",
            "data/s.db-shm",
            "data/s.db.key",
        ] {
            assert!(owned.contains(&want.to_string()), "{want} in {owned:?}");
        }
        assert!(!owned.contains(&"data".to_string()), "{owned:?}");
    }

    #[test]
    fn lenient_canonical_form_places_missing_files() {
        let dir = tempfile::tempdir().unwrap();
        let real = std::fs::canonicalize(dir.path()).unwrap();
        assert_eq!(
            canonical_lenient(&dir.path().join("a/b/c.db")),
            real.join("a/b/c.db")
        );
    }
}
