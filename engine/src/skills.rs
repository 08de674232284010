//! Operator skills (issue 31): the folders of `skills_dir`, each with a `SKILL.md` whose YAML
//! frontmatter names it, read with the runner's no-follow file access (a symlink is never
//! followed, a symlinked skill folder or file is skipped with a warning), size-capped and UTF-8
//! checked where text is needed. A malformed skill is skipped and reported, never fatal.
//! Everything here is blocking disk work: callers run it on the blocking pool. Who may see a
//! skill is decided by the gateway ([`crate::gateway::skills_allowed`]), never here.

use codespace_runner_fs::{Kind, RelPath, Root, WalkLimits};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::Path;

/// The file of a skill folder that defines it.
pub const SKILL_MD: &str = "SKILL.md";
/// Largest file of a skill served (bytes).
pub const MAX_SKILL_FILE_BYTES: u64 = 1024 * 1024;
/// Most files of one skill, `SKILL.md` included (SEP-2640's per-skill limit).
pub const MAX_SKILL_FILES: usize = 512;
/// Largest total size of one skill's files (SEP-2640's per-skill limit, 16 MiB).
pub const MAX_SKILL_BYTES: u64 = 16 * 1024 * 1024;
/// Most skills served from one directory (the rest are skipped with a warning).
pub const MAX_SKILLS: usize = 1024;
/// Deepest file path below `skills_dir` (the skill folder is depth 1).
const MAX_DEPTH: usize = 8;

/// The entries of one skill folder: path inside it and kind.
type Entries<'a> = Vec<(&'a str, Kind)>;

/// One file of a skill: its path inside the skill folder, size and `sha256:<hex>` digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillFile {
    /// `/`-separated path relative to the skill folder (`SKILL.md`, `references/a.md`).
    pub path: String,
    /// Bytes.
    pub size: u64,
    /// `sha256:<64 lowercase hex>` of the bytes.
    pub digest: String,
}

/// One skill that passed the checks.
#[derive(Debug, Clone, PartialEq)]
pub struct Skill {
    /// The folder name, equal to the frontmatter `name`.
    pub name: String,
    /// The frontmatter `description`.
    pub description: String,
    /// The whole frontmatter, as JSON (SEP-2640 `frontmatter`, verbatim).
    pub frontmatter: serde_json::Map<String, serde_json::Value>,
    /// `SKILL.md` after its frontmatter (the prompt body).
    pub body: String,
    /// Every served file of the folder, `SKILL.md` first, then by path.
    pub files: Vec<SkillFile>,
}

/// The skills of `skills_dir` at one moment, and what was skipped (one line each, for the log).
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    /// Served skills, by name.
    pub skills: Vec<Skill>,
    /// Why each skipped folder or file was skipped.
    pub skipped: Vec<String>,
}

impl Catalog {
    /// The skill named `name`.
    pub fn get(&self, name: &str) -> Option<&Skill> {
        self.skills.iter().find(|s| s.name == name)
    }
}

/// Whether `name` follows the Agent Skills naming rules (ASCII form): 1–64 lowercase letters,
/// digits and single inner hyphens.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--")
}

fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// Splits `SKILL.md` text into its YAML frontmatter (as a JSON object) and its body.
fn split_frontmatter(
    text: &str,
) -> Result<(serde_json::Map<String, serde_json::Value>, String), String> {
    let rest = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
        .ok_or("SKILL.md does not begin with YAML frontmatter (`---`)")?;
    let mut yaml_end = None;
    let mut offset = 0usize;
    for line in rest.split_inclusive('\n') {
        if line.trim_end_matches(['\r', '\n']) == "---" {
            yaml_end = Some((offset, offset + line.len()));
            break;
        }
        offset += line.len();
    }
    let (end, body_start) = yaml_end.ok_or("SKILL.md frontmatter is not closed by `---`")?;
    let yaml = rest.get(..end).unwrap_or_default();
    let body = rest.get(body_start..).unwrap_or_default();
    let value: serde_json::Value =
        serde_yaml_ng::from_str(yaml).map_err(|e| format!("frontmatter is not YAML: {e}"))?;
    match value {
        serde_json::Value::Object(m) => Ok((m, body.trim_start_matches(['\r', '\n']).to_string())),
        _ => Err("frontmatter is not a YAML mapping".into()),
    }
}

/// Reads one file beneath `root`, refusing symlinks on the way, non-regular files and files over
/// [`MAX_SKILL_FILE_BYTES`].
fn read_beneath(root: &Root, path: &str) -> Result<Vec<u8>, String> {
    let rel = RelPath::parse(path).map_err(|e| e.to_string())?;
    let f = root.open_for_read(&rel).map_err(|e| e.to_string())?;
    f.read_all_bounded(MAX_SKILL_FILE_BYTES)
        .map_err(|e| e.to_string())
}

/// Loads the catalog of `dir` (blocking). A directory that cannot be opened yields no skills and
/// one skipped line saying why.
pub fn load(dir: &Path) -> Catalog {
    let mut out = Catalog::default();
    let root = match Root::open(dir) {
        Ok(r) => r,
        Err(e) => {
            out.skipped
                .push(format!("skills_dir cannot be opened: {e}"));
            return out;
        }
    };
    let limits = WalkLimits {
        max_depth: MAX_DEPTH,
        max_entries: MAX_SKILLS.saturating_mul(MAX_SKILL_FILES).min(200_000),
        stat_links: false,
    };
    let walk = match root.walk(&limits) {
        Ok(w) => w,
        Err(e) => {
            out.skipped
                .push(format!("skills_dir cannot be listed: {e}"));
            return out;
        }
    };
    if walk.capped {
        out.skipped
            .push("skills_dir holds too many entries: the listing was cut short".into());
    }
    // Group by the first component: the skill folders.
    let mut folders: BTreeMap<&str, (Kind, Entries<'_>)> = BTreeMap::new();
    for e in &walk.entries {
        match e.path.split_once('/') {
            None => {
                folders.entry(&e.path).or_insert((e.kind, Vec::new())).0 = e.kind;
            }
            Some((top, rest)) => {
                folders
                    .entry(top)
                    .or_insert((Kind::Dir, Vec::new()))
                    .1
                    .push((rest, e.kind));
            }
        }
    }
    for (folder, (kind, entries)) in folders {
        if folder.starts_with('.') {
            continue;
        }
        if out.skills.len() >= MAX_SKILLS {
            out.skipped.push(format!(
                "{folder}: more than {MAX_SKILLS} skills; the rest are not served"
            ));
            break;
        }
        match kind {
            Kind::Dir => {}
            Kind::Symlink => {
                out.skipped
                    .push(format!("{folder}: a symlink, never followed; skipped"));
                continue;
            }
            _ => continue,
        }
        match load_skill(&root, folder, &entries, &mut out.skipped) {
            Ok(s) => out.skills.push(s),
            Err(why) => out.skipped.push(format!("{folder}: {why}; skipped")),
        }
    }
    for line in &out.skipped {
        tracing::warn!(skill = %line, "skills_dir: skill or file not served");
    }
    out
}

/// Loads the one skill `name` of `dir` (blocking): what [`load`] would list for it, without
/// reading the other skills. `Err` when it is missing, a symlink or malformed.
pub fn load_one(dir: &Path, name: &str) -> Result<Skill, String> {
    if !valid_name(name) {
        return Err("not a skill name".into());
    }
    let root = Root::open(dir).map_err(|e| e.to_string())?;
    let rel = RelPath::parse(name).map_err(|e| e.to_string())?;
    let limits = WalkLimits {
        max_depth: MAX_DEPTH,
        max_entries: MAX_SKILL_FILES.saturating_mul(4),
        stat_links: false,
    };
    // A missing folder, a symlink or a file in its place is an error of the walk.
    let walk = root.walk_under(&rel, &limits).map_err(|e| e.to_string())?;
    let entries: Vec<(&str, Kind)> = walk
        .entries
        .iter()
        .filter_map(|e| {
            let rest = e.path.strip_prefix(name)?.strip_prefix('/')?;
            Some((rest, e.kind))
        })
        .collect();
    let mut skipped = Vec::new();
    let skill = load_skill(&root, name, &entries, &mut skipped);
    for line in &skipped {
        tracing::warn!(skill = %line, "skills_dir: file not served");
    }
    skill
}

fn load_skill(
    root: &Root,
    folder: &str,
    entries: &[(&str, Kind)],
    skipped: &mut Vec<String>,
) -> Result<Skill, String> {
    if !valid_name(folder) {
        return Err(
            "the folder name breaks the skill naming rules (1-64 lowercase letters, digits and single inner hyphens)"
                .into(),
        );
    }
    match entries.iter().find(|(p, _)| *p == SKILL_MD) {
        None => return Err("no SKILL.md".into()),
        Some((_, Kind::File)) => {}
        Some((_, Kind::Symlink)) => return Err("SKILL.md is a symlink, never followed".into()),
        Some(_) => return Err("SKILL.md is not a regular file".into()),
    }
    let skill_md = read_beneath(root, &format!("{folder}/{SKILL_MD}"))?;
    let text = std::str::from_utf8(&skill_md).map_err(|_| "SKILL.md is not UTF-8".to_string())?;
    let (frontmatter, body) = split_frontmatter(text)?;
    let name = frontmatter
        .get("name")
        .and_then(serde_json::Value::as_str)
        .ok_or("the frontmatter has no string `name`")?;
    if name != folder {
        return Err(format!(
            "the frontmatter name `{name}` differs from the folder name"
        ));
    }
    let description = frontmatter
        .get("description")
        .and_then(serde_json::Value::as_str)
        .filter(|d| !d.trim().is_empty())
        .ok_or("the frontmatter has no `description`")?
        .to_string();
    let mut files = vec![SkillFile {
        path: SKILL_MD.into(),
        size: skill_md.len() as u64,
        digest: digest(&skill_md),
    }];
    let mut total = skill_md.len() as u64;
    for (path, kind) in entries {
        if *path == SKILL_MD || path.split('/').any(|c| c.starts_with('.')) {
            continue;
        }
        match kind {
            Kind::File => {}
            Kind::Symlink => {
                skipped.push(format!(
                    "{folder}/{path}: a symlink, never followed; not served"
                ));
                continue;
            }
            _ => continue,
        }
        if files.len() >= MAX_SKILL_FILES {
            return Err(format!("more than {MAX_SKILL_FILES} files"));
        }
        match read_beneath(root, &format!("{folder}/{path}")) {
            Ok(bytes) => {
                total = total.saturating_add(bytes.len() as u64);
                if total > MAX_SKILL_BYTES {
                    return Err(format!("its files pass {MAX_SKILL_BYTES} bytes"));
                }
                files.push(SkillFile {
                    path: (*path).to_string(),
                    size: bytes.len() as u64,
                    digest: digest(&bytes),
                });
            }
            Err(e) => skipped.push(format!("{folder}/{path}: {e}; not served")),
        }
    }
    Ok(Skill {
        name: folder.to_string(),
        description,
        frontmatter,
        body,
        files,
    })
}

/// The bytes of file `path` of skill `name` (blocking), when the catalog lists it and it still
/// reads with the digest listed (a file changed since the listing is reloaded by the caller).
pub fn read_file(dir: &Path, skill: &Skill, path: &str) -> Result<Vec<u8>, String> {
    if !skill.files.iter().any(|f| f.path == path) {
        return Err("not a file of this skill".into());
    }
    let root = Root::open(dir).map_err(|e| e.to_string())?;
    read_beneath(&root, &format!("{}/{path}", skill.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_agent_skills_rules() {
        for ok in ["a", "git-workflow", "pdf2", "a-b-c"] {
            assert!(valid_name(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "a--b", "A", "a_b", "a.b", &"x".repeat(65)] {
            assert!(!valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn frontmatter_is_split_from_the_body() {
        let (fm, body) =
            split_frontmatter("---\nname: x\ndescription: d\nlicense: MIT\n---\n\n# Body\n")
                .unwrap();
        assert_eq!(fm["name"], "x");
        assert_eq!(fm["license"], "MIT");
        assert_eq!(body, "# Body\n");
        assert!(split_frontmatter("# no frontmatter\n").is_err());
        assert!(split_frontmatter("---\nname: x\n").is_err());
        assert!(split_frontmatter("---\n- a\n---\n").is_err());
    }

    #[test]
    fn a_symlinked_skill_and_file_are_skipped_and_a_bad_one_reported() {
        let d = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "TOP SECRET").unwrap();
        let good = d.path().join("good");
        std::fs::create_dir(&good).unwrap();
        std::fs::write(
            good.join("SKILL.md"),
            "---\nname: good\ndescription: ok\n---\nbody\n",
        )
        .unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), good.join("leak.md")).unwrap();
        std::os::unix::fs::symlink(outside.path(), d.path().join("linked")).unwrap();
        let bad = d.path().join("bad");
        std::fs::create_dir(&bad).unwrap();
        std::fs::write(
            bad.join("SKILL.md"),
            "---\nname: other\ndescription: x\n---\n",
        )
        .unwrap();
        let c = load(d.path());
        assert_eq!(c.skills.len(), 1);
        let s = c.get("good").unwrap();
        assert_eq!(s.files.len(), 1);
        assert_eq!(s.body, "body\n");
        assert!(c.skipped.iter().any(|l| l.starts_with("linked:")));
        assert!(c.skipped.iter().any(|l| l.starts_with("good/leak.md:")));
        assert!(c.skipped.iter().any(|l| l.starts_with("bad:")));
        assert!(read_file(d.path(), s, "leak.md").is_err());
    }
}
