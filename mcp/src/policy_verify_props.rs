//! The properties `policy verify` proves besides its fixed ones: the built-in command-write and
//! profile-inclusion properties, and the operator's own from a TOML file (`--properties`), parsed
//! into typed [`Property`] values whose profile names are checked against the config's tree.

use anyhow::{Result, anyhow, bail};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The profiles a workspace can have (the config's, built-ins included) and their parents.
#[derive(Debug, Clone)]
pub struct ProfileTree {
    parents: BTreeMap<String, Option<String>>,
}

impl ProfileTree {
    /// The tree of `profiles` (id → the profile it extends).
    pub fn new(parents: BTreeMap<String, Option<String>>) -> Self {
        Self { parents }
    }

    /// Every profile id.
    pub fn ids(&self) -> impl Iterator<Item = &String> {
        self.parents.keys()
    }

    /// Whether `id` is one of the tree's profiles.
    pub fn contains(&self, id: &str) -> bool {
        self.parents.contains_key(id)
    }

    /// The parent of `id`, when it extends one.
    pub fn parent(&self, id: &str) -> Option<&str> {
        self.parents.get(id).and_then(|p| p.as_deref())
    }

    /// The proper ancestors of `id` (its parent, the parent's parent, …). A cycle stops the walk
    /// (the config loader refuses cycles; this only keeps the walk finite).
    pub fn ancestors(&self, id: &str) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        let mut at = self.parents.get(id).and_then(Clone::clone);
        while let Some(p) = at {
            if !out.insert(p.clone()) {
                break;
            }
            at = self.parents.get(&p).and_then(Clone::clone);
        }
        out
    }

    /// Whether `id` is `other` or below it.
    pub fn is_in(&self, id: &str, other: &str) -> bool {
        id == other || self.ancestors(id).contains(other)
    }
}

/// One property to prove.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Property {
    /// Every request allowed for profile `a` is allowed for profile `b` (`confirm` aside: a
    /// permit there holds a call, it grants nothing).
    Subset {
        /// The narrower profile.
        a: String,
        /// The wider profile.
        b: String,
    },
    /// No `process_write` of these profiles is allowed for a path matching one of the globs.
    NeverWrites {
        /// The profiles (every profile of the tree for `"*"`).
        profiles: Vec<String>,
        /// Workspace-relative globs.
        paths: Vec<String>,
    },
    /// Every allowed `process_write` of the profile has a path matching one of the globs.
    WritesOnly {
        /// The profile.
        profile: String,
        /// Workspace-relative globs.
        paths: Vec<String>,
    },
}

/// A property with the name it is reported under.
#[derive(Debug, Clone)]
pub struct Named {
    /// The line `policy verify` prints.
    pub name: String,
    /// What is proven.
    pub property: Property,
}

impl Property {
    /// The generated name (a file's `name` replaces it).
    pub fn describe(&self, tree: &ProfileTree) -> String {
        match self {
            Property::Subset { a, b } => {
                format!("{a} ⊆ {b} (every request {a} is allowed, {b} is allowed too)")
            }
            Property::NeverWrites { profiles, paths } => {
                let all = tree.ids().count() == profiles.len();
                format!(
                    "no command of {} writes {}",
                    if all {
                        "any profile".to_string()
                    } else {
                        profiles.join(", ")
                    },
                    paths.join(", ")
                )
            }
            Property::WritesOnly { profile, paths } => {
                format!("commands of {profile} write only {}", paths.join(", "))
            }
        }
    }
}

/// The built-in properties over commands and the profile tree.
pub fn builtin(tree: &ProfileTree) -> Vec<Named> {
    let mut out = vec![Property::NeverWrites {
        profiles: tree.ids().cloned().collect(),
        paths: vec![".git/**".into(), "**/.git/**".into()],
    }];
    if tree.is_in("workspace-write", "read-only") {
        out.push(Property::Subset {
            a: "read-only".into(),
            b: "workspace-write".into(),
        });
    }
    out.into_iter()
        .map(|property| Named {
            name: match &property {
                Property::NeverWrites { .. } => "no profile lets a command write .git/**".into(),
                p => p.describe(tree),
            },
            property,
        })
        .collect()
}

/// The TOML file: `[[property]]` tables, each with exactly one kind.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    property: Vec<RawProperty>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProperty {
    name: Option<String>,
    subset: Option<RawSubset>,
    never_writes: Option<RawNeverWrites>,
    writes_only: Option<RawWritesOnly>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSubset {
    a: String,
    b: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNeverWrites {
    profiles: Vec<String>,
    paths: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWritesOnly {
    profile: String,
    paths: Vec<String>,
}

/// Reads a properties file; every error names the file, the property and the field.
pub fn load(path: &Path, tree: &ProfileTree) -> Result<Vec<Named>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow!("--properties {}: {e}", path.display()))?;
    parse(&text, tree).map_err(|e| anyhow!("--properties {}: {e}", path.display()))
}

/// Parses the text of a properties file.
pub fn parse(text: &str, tree: &ProfileTree) -> Result<Vec<Named>> {
    let raw: RawFile = toml::from_str(text).map_err(|e| anyhow!("{}", e.to_string().trim()))?;
    if raw.property.is_empty() {
        bail!("no [[property]] table");
    }
    let mut out = Vec::new();
    for (i, p) in raw.property.into_iter().enumerate() {
        let at = format!("property {}", i + 1);
        let kinds = [
            p.subset.is_some(),
            p.never_writes.is_some(),
            p.writes_only.is_some(),
        ]
        .iter()
        .filter(|k| **k)
        .count();
        if kinds != 1 {
            bail!("{at}: needs exactly one of subset, never_writes, writes_only (found {kinds})");
        }
        let profile = |field: &str, id: &str| -> Result<String> {
            if tree.contains(id) {
                Ok(id.to_string())
            } else {
                Err(anyhow!(
                    "{at}: {field}: unknown profile `{id}` (the config's profiles: {})",
                    tree.ids().cloned().collect::<Vec<_>>().join(", ")
                ))
            }
        };
        let globs = |field: &str, paths: Vec<String>| -> Result<Vec<String>> {
            if paths.is_empty() {
                bail!("{at}: {field}: at least one path");
            }
            for g in &paths {
                glob_condition(g).map_err(|e| anyhow!("{at}: {field}: `{g}`: {e}"))?;
            }
            Ok(paths)
        };
        let property = if let Some(s) = p.subset {
            Property::Subset {
                a: profile("subset.a", &s.a)?,
                b: profile("subset.b", &s.b)?,
            }
        } else if let Some(n) = p.never_writes {
            let profiles = if n.profiles.iter().any(|x| x == "*") {
                tree.ids().cloned().collect()
            } else if n.profiles.is_empty() {
                bail!("{at}: never_writes.profiles: at least one profile, or \"*\"");
            } else {
                n.profiles
                    .iter()
                    .map(|x| profile("never_writes.profiles", x))
                    .collect::<Result<Vec<_>>>()?
            };
            Property::NeverWrites {
                profiles,
                paths: globs("never_writes.paths", n.paths)?,
            }
        } else if let Some(w) = p.writes_only {
            Property::WritesOnly {
                profile: profile("writes_only.profile", &w.profile)?,
                paths: globs("writes_only.paths", w.paths)?,
            }
        } else {
            bail!("{at}: needs one of subset, never_writes, writes_only");
        };
        out.push(Named {
            name: p.name.unwrap_or_else(|| property.describe(tree)),
            property,
        });
    }
    Ok(out)
}

/// A workspace-relative glob as a Cedar condition on `resource.path`:
/// `x/**` is `x` and everything beneath it; a leading `**/` also matches at any depth; any other
/// `*` is Cedar's `like` wildcard (it matches `/` too); a glob without `*` is one path.
pub fn glob_condition(glob: &str) -> Result<String> {
    if glob.is_empty() {
        bail!("empty path");
    }
    if glob.starts_with('/') {
        bail!("absolute; paths are workspace-relative");
    }
    if glob.contains('"') || glob.contains('\\') {
        bail!("quotes and backslashes are not supported");
    }
    if glob
        .split('/')
        .any(|c| c == ".." || c == "." || c.is_empty())
        && glob != "."
    {
        bail!("`.`, `..` and empty components are not allowed (paths are normalized)");
    }
    if glob == "**" || glob == "." {
        return Ok(if glob == "**" {
            "true".into()
        } else {
            "resource.path == \".\"".into()
        });
    }
    let (anywhere, rest) = match glob.strip_prefix("**/") {
        Some(r) => (true, r),
        None => (false, glob),
    };
    let (prefix, beneath) = match rest.strip_suffix("/**") {
        Some(p) => (p, true),
        None => (rest, false),
    };
    if prefix.is_empty() || prefix.contains("**") {
        bail!("`**` only as a whole first or last component (`**/x`, `x/**`)");
    }
    let one = |pattern: &str| {
        if pattern.contains('*') {
            format!("resource.path like \"{pattern}\"")
        } else {
            format!("resource.path == \"{pattern}\"")
        }
    };
    let mut alts = vec![one(prefix)];
    if beneath {
        alts.push(format!("resource.path like \"{prefix}/*\""));
    }
    if anywhere {
        alts.push(format!("resource.path like \"*/{prefix}\""));
        if beneath {
            alts.push(format!("resource.path like \"*/{prefix}/*\""));
        }
    }
    Ok(format!("({})", alts.join(" || ")))
}

/// The last literal component a glob's matches end with (`.git` for `**/.git/**`), when it has
/// one: the request model's basename of such a path is that name.
pub fn glob_basename(glob: &str) -> Option<String> {
    let rest = glob.strip_prefix("**/").unwrap_or(glob);
    let prefix = rest.strip_suffix("/**").unwrap_or(rest);
    let last = prefix.rsplit('/').next()?;
    (!last.is_empty() && !last.contains('*') && last != "." && last != "..")
        .then(|| last.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> ProfileTree {
        ProfileTree::new(
            [
                ("read-only".to_string(), None),
                ("workspace-write".to_string(), Some("read-only".to_string())),
                ("ci-runner".to_string(), Some("read-only".to_string())),
            ]
            .into_iter()
            .collect(),
        )
    }

    #[test]
    fn globs_become_path_conditions() {
        assert_eq!(
            glob_condition(".git/**").unwrap(),
            "(resource.path == \".git\" || resource.path like \".git/*\")"
        );
        assert_eq!(
            glob_condition("**/.git/**").unwrap(),
            "(resource.path == \".git\" || resource.path like \".git/*\" || resource.path like \"*/.git\" || resource.path like \"*/.git/*\")"
        );
        assert_eq!(
            glob_condition("Cargo.toml").unwrap(),
            "(resource.path == \"Cargo.toml\")"
        );
        assert_eq!(
            glob_condition("*.bak").unwrap(),
            "(resource.path like \"*.bak\")"
        );
        for bad in ["", "/etc/**", "a/../b", "a//b", "a/**/b", "x\"y", "./a"] {
            assert!(glob_condition(bad).is_err(), "{bad}");
        }
        assert_eq!(glob_basename("**/.git/**").as_deref(), Some(".git"));
        assert_eq!(glob_basename("target/**").as_deref(), Some("target"));
        assert_eq!(glob_basename("*.bak"), None);
    }

    #[test]
    fn a_file_parses_into_typed_properties_and_names_bad_fields() {
        let props = parse(
            r#"
[[property]]
subset = { a = "read-only", b = "workspace-write" }

[[property]]
name = "git stays read-only"
never_writes = { profiles = ["*"], paths = [".git/**"] }

[[property]]
writes_only = { profile = "ci-runner", paths = ["target/**", "src/**"] }
"#,
            &tree(),
        )
        .unwrap();
        assert_eq!(props.len(), 3);
        assert_eq!(props[1].name, "git stays read-only");
        assert!(
            matches!(&props[1].property, Property::NeverWrites { profiles, .. } if profiles.len() == 3)
        );
        assert_eq!(
            props[2].name,
            "commands of ci-runner write only target/**, src/**"
        );

        let e = parse(
            "[[property]]\nwrites_only = { profile = \"ci\", paths = [\"target/**\"] }\n",
            &tree(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("property 1: writes_only.profile: unknown profile `ci`"),
            "{e}"
        );
        let e = parse(
            "[[property]]\nsubset = { a = \"read-only\", b = \"workspace-write\" }\nwrites_only = { profile = \"ci-runner\", paths = [\"x\"] }\n",
            &tree(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("exactly one of"), "{e}");
        let e = parse(
            "[[property]]\nnever_writes = { profiles = [\"*\"], paths = [\"/abs\"] }\n",
            &tree(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("never_writes.paths: `/abs`: absolute"), "{e}");
        assert!(parse("[[property]]\nbogus = 1\n", &tree()).is_err());
    }

    #[test]
    fn ancestors_follow_the_tree() {
        let t = tree();
        assert!(t.is_in("ci-runner", "read-only"));
        assert!(!t.is_in("ci-runner", "workspace-write"));
        assert_eq!(t.parent("workspace-write"), Some("read-only"));
    }
}
