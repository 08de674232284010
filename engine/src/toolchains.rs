//! The invoking user's toolchains, found at start for workspaces whose config names no command
//! `path`: `CARGO_HOME`, `RUSTUP_HOME` and the directories of `cargo`, `rustc`, `python3`,
//! `node` and `go` on the server's own `PATH` (plus `serve --toolchain DIR`). Each becomes a
//! read path (`toolchain-<name>`) and its `bin` directory joins the commands' `PATH`, through the
//! operator's `read_paths` + `path` machinery; a directory that is `/`, the home directory itself,
//! world-writable, under `/dev`, or holds a server-owned file is never added, and a `CARGO_HOME`
//! holding registry credentials shares only its `bin`.

use crate::config::Config;
use crate::server_files::{ServerFile, canonical_lenient};
use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Programs looked up (`command -v`-style) on the server's `PATH`.
pub const LOOKED_UP: &[&str] = &["cargo", "rustc", "python3", "node", "go"];

/// Prefix of the read-path name a toolchain gets (`toolchain-cargo`).
pub const READ_PATH_PREFIX: &str = "toolchain-";

/// Directories already readable by every sandboxed command (the sandbox's system read paths):
/// a program found there needs no read path.
const SYSTEM_DIRS: &[&str] = &["/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc"];

/// One toolchain directory a workspace's commands may read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Toolchain {
    /// Its name (`cargo`, `rustup`, `go`, or the `--toolchain` directory's name).
    pub name: String,
    /// The canonical directory made readable.
    pub dir: PathBuf,
    /// The directory put on the commands' `PATH`, when there is one.
    pub bin: Option<PathBuf>,
    /// The variable set to `dir` in the commands' environment (`CARGO_HOME`, `RUSTUP_HOME`).
    pub env: Option<&'static str>,
}

/// What discovery found and what it left out or narrowed (one line each, for the log and
/// `doctor`).
#[derive(Debug, Clone, Default)]
pub struct Found {
    /// Toolchains to add.
    pub toolchains: Vec<Toolchain>,
    /// Candidates refused or narrowed, with the reason (`go: … is world-writable`).
    pub refused: Vec<String>,
}

/// Where discovery looks: the server's environment and the operator's `--toolchain` dirs.
pub struct Sources<'a> {
    /// The server's environment (`HOME`, `PATH`, `CARGO_HOME`, `RUSTUP_HOME`).
    pub env: &'a dyn Fn(&str) -> Option<OsString>,
    /// Directories named with `serve --toolchain DIR`.
    pub extra: &'a [PathBuf],
    /// Whether to look on the server's own environment at all (`--no-toolchains` turns it off;
    /// the `--toolchain` dirs are added either way).
    pub discover: bool,
}

fn is_executable_file(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The first directory of `path` (absolute entries only) holding an executable `program`.
fn command_v(path: &OsString, program: &str) -> Option<PathBuf> {
    std::env::split_paths(path)
        .filter(|d| d.is_absolute())
        .find(|d| is_executable_file(&d.join(program)))
}

fn under_system_dir(p: &Path) -> bool {
    SYSTEM_DIRS.iter().any(|s| p.starts_with(s))
}

/// A name fit for a file name and a shell word: letters, digits, `.`, `_`, `-` (others become
/// `-`; an empty, `.` or `..` name becomes `dir`).
pub fn plain_name(s: &str) -> String {
    let n: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    if n.is_empty() || n == "." || n == ".." {
        "dir".into()
    } else {
        n
    }
}

/// Finds the toolchains of `src`: `CARGO_HOME` (default `~/.cargo`), `RUSTUP_HOME` (default
/// `~/.rustup`), the install prefix of each of [`LOOKED_UP`] on `PATH` (the directory above
/// its `bin`), then each `--toolchain` directory. Safety checks come later ([`apply`]).
pub fn discover(src: &Sources<'_>) -> Found {
    let mut found = Found::default();
    let home = (src.env)("HOME").map(PathBuf::from);
    let push = |found: &mut Found, t: Toolchain| {
        if !found.toolchains.iter().any(|k| k.name == t.name) {
            found.toolchains.push(t);
        }
    };
    if src.discover {
        for (var, name, default) in [
            ("CARGO_HOME", "cargo", ".cargo"),
            ("RUSTUP_HOME", "rustup", ".rustup"),
        ] {
            let dir = (src.env)(var)
                .map(PathBuf::from)
                .filter(|d| d.is_absolute())
                .or_else(|| home.as_ref().map(|h| h.join(default)));
            let Some(dir) = dir.and_then(|d| std::fs::canonicalize(d).ok()) else {
                continue;
            };
            if !dir.is_dir() {
                continue;
            }
            let bin = dir.join("bin");
            // Registry tokens live in CARGO_HOME: then only its `bin` is readable, and cargo
            // keeps the commands' own (writable, empty) `~/.cargo`.
            if name == "cargo"
                && ["credentials.toml", "credentials"]
                    .iter()
                    .any(|f| dir.join(f).exists())
            {
                found.refused.push(format!(
                    "cargo: \"{}\" holds registry credentials; only its bin directory is \
                     readable and CARGO_HOME is not set",
                    dir.display()
                ));
                if bin.is_dir() {
                    push(
                        &mut found,
                        Toolchain {
                            name: name.into(),
                            dir: bin.clone(),
                            bin: Some(bin),
                            env: None,
                        },
                    );
                }
                continue;
            }
            push(
                &mut found,
                Toolchain {
                    name: name.into(),
                    bin: (name == "cargo" && bin.is_dir()).then_some(bin),
                    dir,
                    env: Some(var),
                },
            );
        }
        if let Some(path) = (src.env)("PATH") {
            for program in LOOKED_UP {
                let Some(on_path) = command_v(&path, program) else {
                    continue;
                };
                let Ok(real) = std::fs::canonicalize(on_path.join(program)) else {
                    continue;
                };
                let Some(parent) = real.parent() else {
                    continue;
                };
                // The install prefix: the directory above `bin` (or `shims`), else the parent.
                let prefix = match parent.file_name().and_then(|n| n.to_str()) {
                    Some("bin" | "shims" | "sbin") => parent.parent().unwrap_or(parent),
                    _ => parent,
                };
                let bin_dir = std::fs::canonicalize(&on_path).unwrap_or(on_path);
                let readable = |p: &Path| {
                    under_system_dir(p) || found.toolchains.iter().any(|t| p.starts_with(&t.dir))
                };
                let on_child_path = crate::processes::CHILD_PATH
                    .split(':')
                    .any(|d| Path::new(d) == bin_dir);
                let bin_known = found
                    .toolchains
                    .iter()
                    .any(|t| t.bin.as_deref() == Some(bin_dir.as_path()));
                if readable(&real) && readable(&bin_dir) && (on_child_path || bin_known) {
                    continue;
                }
                push(
                    &mut found,
                    Toolchain {
                        name: (*program).into(),
                        dir: prefix.to_path_buf(),
                        bin: (!on_child_path && !bin_known).then_some(bin_dir),
                        env: None,
                    },
                );
            }
        }
    }
    for dir in src.extra {
        let Ok(canon) = std::fs::canonicalize(dir) else {
            found.refused.push(format!(
                "--toolchain \"{}\": cannot be opened",
                dir.display()
            ));
            continue;
        };
        if !canon.is_dir() {
            found.refused.push(format!(
                "--toolchain \"{}\": not a directory",
                dir.display()
            ));
            continue;
        }
        let base = plain_name(
            &canon
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        );
        let mut name = base.clone();
        let mut n = 2;
        while found.toolchains.iter().any(|t| t.name == name) {
            name = format!("{base}-{n}");
            n += 1;
        }
        let bin = canon.join("bin");
        found.toolchains.push(Toolchain {
            name,
            bin: Some(if bin.is_dir() { bin } else { canon.clone() }),
            dir: canon,
            env: None,
        });
    }
    found
}

/// Why `dir` must not be made readable, if it must not: `/`, the home directory itself, under
/// `/dev`, world-writable, or holding one of the server's own files.
fn refusal(dir: &Path, home: Option<&Path>, own: &[ServerFile]) -> Option<String> {
    if dir == Path::new("/") {
        return Some("is `/`".into());
    }
    if home.is_some_and(|h| h == dir) {
        return Some("is the home directory itself".into());
    }
    if dir.starts_with("/dev") || dir.starts_with("/proc") || dir.starts_with("/sys") {
        return Some("is a system pseudo file system".into());
    }
    match std::fs::metadata(dir) {
        Ok(m) if m.permissions().mode() & 0o002 != 0 => {
            return Some("is world-writable".into());
        }
        Ok(_) => {}
        Err(_) => return Some("cannot be opened".into()),
    }
    own.iter()
        .find(|f| canonical_lenient(&f.path).starts_with(dir))
        .map(|f| format!("holds the server's {}", f.field))
}

/// Adds `found` to every workspace of `config` whose command `path` is empty (the config did
/// not set one): a read path `toolchain-<name>` per toolchain, its `bin` on `PATH`, and its
/// variable (`CARGO_HOME`, `RUSTUP_HOME`) unless the config sets it. `own` are the server's
/// files; `home` the server user's home. Returns one line per toolchain refused.
pub fn apply(
    config: &mut Config,
    found: &Found,
    own: &[ServerFile],
    home: Option<&Path>,
) -> Vec<String> {
    let home = home.and_then(|h| std::fs::canonicalize(h).ok());
    let mut refused = found.refused.clone();
    let mut ok: Vec<&Toolchain> = Vec::new();
    for t in &found.toolchains {
        let why = refusal(&t.dir, home.as_deref(), own).or_else(|| {
            t.bin
                .as_deref()
                .and_then(|b| refusal(b, home.as_deref(), own))
                .map(|w| format!("its bin directory {w}"))
        });
        match why {
            Some(w) => refused.push(format!("{}: \"{}\" {w}", t.name, t.dir.display())),
            None => ok.push(t),
        }
    }
    for ws in config.workspaces.values_mut() {
        if !ws.path.is_empty() {
            continue;
        }
        for t in &ok {
            let name = format!("{READ_PATH_PREFIX}{}", t.name);
            if ws.read_paths.contains_key(&name) {
                continue;
            }
            ws.read_paths.insert(name.clone(), t.dir.clone());
            if let Some(b) = &t.bin
                && !ws.path.contains(b)
            {
                ws.path.push(b.clone());
            }
            if let Some(var) = t.env {
                ws.env
                    .entry(var.to_string())
                    .or_insert_with(|| t.dir.to_string_lossy().into_owned());
            }
            ws.toolchains.push((t.name.clone(), name));
        }
    }
    refused
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;
    use std::collections::BTreeMap;

    fn sources<'a>(
        vars: &'a BTreeMap<&'static str, OsString>,
    ) -> impl Fn(&str) -> Option<OsString> + 'a {
        move |k| vars.get(k).cloned()
    }

    fn exe(p: &Path) {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn finds_cargo_home_rustup_home_and_programs_on_path() {
        let d = tempfile::tempdir().unwrap();
        let home = std::fs::canonicalize(d.path()).unwrap();
        exe(&home.join(".cargo/bin/cargo"));
        std::fs::create_dir_all(home.join(".rustup/toolchains")).unwrap();
        exe(&home.join("opt/go/bin/go"));
        let vars: BTreeMap<&'static str, OsString> = [
            ("HOME", home.clone().into_os_string()),
            (
                "PATH",
                OsString::from(format!(
                    "{}:{}:/usr/bin",
                    home.join(".cargo/bin").display(),
                    home.join("opt/go/bin").display()
                )),
            ),
        ]
        .into_iter()
        .collect();
        let env = sources(&vars);
        let found = discover(&Sources {
            env: &env,
            extra: &[],
            discover: true,
        });
        let names: Vec<&str> = found.toolchains.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["cargo", "rustup", "go"], "{found:?}");
        assert_eq!(found.toolchains[0].bin, Some(home.join(".cargo/bin")));
        assert_eq!(found.toolchains[2].dir, home.join("opt/go"));
        let off = discover(&Sources {
            env: &env,
            extra: &[],
            discover: false,
        });
        assert!(off.toolchains.is_empty());
    }

    #[test]
    fn a_cargo_home_with_registry_credentials_shares_only_its_bin() {
        let d = tempfile::tempdir().unwrap();
        let home = std::fs::canonicalize(d.path()).unwrap();
        exe(&home.join(".cargo/bin/cargo"));
        exe(&home.join(".cargo/bin/rustc"));
        std::fs::write(home.join(".cargo/credentials.toml"), "token").unwrap();
        let vars: BTreeMap<&'static str, OsString> = [
            ("HOME", home.clone().into_os_string()),
            ("PATH", home.join(".cargo/bin").into_os_string()),
        ]
        .into_iter()
        .collect();
        let env = sources(&vars);
        let found = discover(&Sources {
            env: &env,
            extra: &[],
            discover: true,
        });
        assert_eq!(
            found.toolchains,
            vec![Toolchain {
                name: "cargo".into(),
                dir: home.join(".cargo/bin"),
                bin: Some(home.join(".cargo/bin")),
                env: None,
            }]
        );
        assert!(
            found.refused[0].contains("registry credentials"),
            "{found:?}"
        );
    }

    #[test]
    fn refuses_root_home_world_writable_and_server_files() {
        let d = tempfile::tempdir().unwrap();
        let home = std::fs::canonicalize(d.path()).unwrap();
        let ww = home.join("ww");
        std::fs::create_dir(&ww).unwrap();
        std::fs::set_permissions(&ww, std::fs::Permissions::from_mode(0o777)).unwrap();
        let holds = home.join("state");
        std::fs::create_dir(&holds).unwrap();
        let own = vec![ServerFile {
            field: "store".into(),
            path: holds.join("codespace.db"),
        }];
        for (dir, want) in [
            (PathBuf::from("/"), "is `/`"),
            (home.clone(), "home directory itself"),
            (ww, "world-writable"),
            (holds, "holds the server's store"),
        ] {
            let why = refusal(&dir, Some(&home), &own).unwrap();
            assert!(why.contains(want), "{dir:?}: {why}");
        }
        assert!(refusal(&home.join("missing"), Some(&home), &own).is_some());
    }

    #[test]
    fn applies_only_to_workspaces_without_a_path() {
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(d.path()).unwrap();
        let tc = root.join("tc");
        std::fs::create_dir_all(tc.join("bin")).unwrap();
        let mut cfg = Config::embedded_default(&root).unwrap();
        let found = Found {
            toolchains: vec![Toolchain {
                name: "cargo".into(),
                dir: tc.clone(),
                bin: Some(tc.join("bin")),
                env: Some("CARGO_HOME"),
            }],
            refused: Vec::new(),
        };
        assert!(apply(&mut cfg, &found, &[], None).is_empty());
        let w = &cfg.workspaces["default"];
        assert_eq!(w.read_paths["toolchain-cargo"], tc);
        assert_eq!(w.path, vec![tc.join("bin")]);
        assert_eq!(w.env["CARGO_HOME"], tc.to_string_lossy());
        assert_eq!(
            w.toolchains,
            vec![("cargo".to_string(), "toolchain-cargo".to_string())]
        );
        let mut set = Config::embedded_default(&root).unwrap();
        if let Some(w) = set.workspaces.get_mut("default") {
            w.path = vec![PathBuf::from("/opt/bin")];
        }
        apply(&mut set, &found, &[], None);
        assert!(set.workspaces["default"].toolchains.is_empty());
    }
}
