//! Loading the Cedar schema and policy files: parse, re-key by `@id`, lint, strictly validate,
//! hash. A [`PolicySnapshot`] is immutable; the [`PolicyStore`] swaps snapshots atomically.

use cedar_policy::{PolicyId, PolicySet, Schema, ValidationMode, Validator};
use miette::Diagnostic;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, RwLock};

/// The shipped schema, embedded for the no-config default.
pub const EMBEDDED_SCHEMA: &str = include_str!("../../../schema/codespace.cedarschema");
/// The shipped policy files, embedded for the no-config default.
pub const EMBEDDED_POLICIES: &[(&str, &str)] = &[
    (
        "base/guardrails.cedar",
        include_str!("../../../policies/base/guardrails.cedar"),
    ),
    (
        "profiles/read-only.cedar",
        include_str!("../../../policies/profiles/read-only.cedar"),
    ),
    (
        "profiles/workspace-write.cedar",
        include_str!("../../../policies/profiles/workspace-write.cedar"),
    ),
    (
        "base/approvals.cedar",
        include_str!("../../../policies/base/approvals.cedar"),
    ),
];

/// One source file of a policy bundle.
#[derive(Debug, Clone)]
pub struct SourceFile {
    /// Display name relative to the policies directory (`base/guardrails.cedar`).
    pub name: String,
    /// The text.
    pub text: String,
}

/// A schema and policy files, as read (not yet compiled).
#[derive(Debug, Clone)]
pub struct PolicyBundle {
    /// Display name of the schema.
    pub schema_name: String,
    /// Schema text.
    pub schema_text: String,
    /// Policy files, sorted by name.
    pub files: Vec<SourceFile>,
    /// Where it came from (None = embedded).
    pub dir: Option<PathBuf>,
}

/// Where the policies come from.
#[derive(Debug, Clone)]
pub enum PolicySource {
    /// The shipped set compiled into the binary.
    Embedded,
    /// A policies directory and a schema file on disk.
    Dir {
        /// `policies/` (with `base/` and `profiles/`).
        policies: PathBuf,
        /// `codespace.cedarschema`.
        schema: PathBuf,
    },
}

impl PolicySource {
    /// Reads the bundle.
    pub fn read(&self) -> Result<PolicyBundle, PolicyErrors> {
        match self {
            PolicySource::Embedded => Ok(PolicyBundle {
                schema_name: "schema/codespace.cedarschema".into(),
                schema_text: EMBEDDED_SCHEMA.into(),
                files: EMBEDDED_POLICIES
                    .iter()
                    .map(|(n, t)| SourceFile {
                        name: (*n).to_string(),
                        text: (*t).to_string(),
                    })
                    .collect(),
                dir: None,
            }),
            PolicySource::Dir { policies, schema } => {
                let schema_text = std::fs::read_to_string(schema).map_err(|e| {
                    PolicyErrors::one(format!("{}: cannot read schema: {e}", schema.display()))
                })?;
                let mut files = Vec::new();
                collect_cedar_files(policies, policies, &mut files)?;
                files.sort_by(|a, b| a.name.cmp(&b.name));
                if files.is_empty() {
                    return Err(PolicyErrors::one(format!(
                        "{}: no .cedar policy files found",
                        policies.display()
                    )));
                }
                Ok(PolicyBundle {
                    schema_name: schema.display().to_string(),
                    schema_text,
                    files,
                    dir: Some(policies.clone()),
                })
            }
        }
    }
}

/// The shadow directory under the policies directory: evaluated beside the live set on every
/// call and logged, never enforced.
pub const SHADOW_DIR: &str = "shadow";

impl PolicySource {
    /// The shadow bundle: the live files with the files of `<policies>/shadow/` added, a shadow
    /// file at the same relative path replacing its live one. `Ok(None)` when there is no
    /// shadow directory (or it holds no `.cedar` file).
    pub fn read_shadow(&self) -> Result<Option<PolicyBundle>, PolicyErrors> {
        let PolicySource::Dir { policies, .. } = self else {
            return Ok(None);
        };
        let dir = policies.join(SHADOW_DIR);
        if !dir.is_dir() {
            return Ok(None);
        }
        let mut shadow = Vec::new();
        collect_cedar_files(&dir, &dir, &mut shadow)?;
        if shadow.is_empty() {
            return Ok(None);
        }
        let mut bundle = self.read()?;
        for f in shadow {
            match bundle.files.iter_mut().find(|l| l.name == f.name) {
                Some(live) => live.text = f.text,
                None => bundle.files.push(f),
            }
        }
        bundle.files.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Some(bundle))
    }
}

fn collect_cedar_files(
    root: &Path,
    dir: &Path,
    out: &mut Vec<SourceFile>,
) -> Result<(), PolicyErrors> {
    let rd = std::fs::read_dir(dir)
        .map_err(|e| PolicyErrors::one(format!("{}: cannot list: {e}", dir.display())))?;
    for entry in rd {
        let entry =
            entry.map_err(|e| PolicyErrors::one(format!("{}: cannot list: {e}", dir.display())))?;
        let path = entry.path();
        let ft = entry
            .file_type()
            .map_err(|e| PolicyErrors::one(format!("{}: {e}", path.display())))?;
        let name = path
            .strip_prefix(root)
            .unwrap_or(&path)
            .to_string_lossy()
            .replace('\\', "/");
        if ft.is_dir() {
            // Test files and worked examples live beside the policies but are not loaded;
            // `shadow/` is evaluated beside the live set, never as part of it.
            if name == "tests" || name == "examples" || name == SHADOW_DIR {
                continue;
            }
            collect_cedar_files(root, &path, out)?;
        } else if path.extension().is_some_and(|e| e == "cedar") {
            let text = std::fs::read_to_string(&path)
                .map_err(|e| PolicyErrors::one(format!("{name}: cannot read: {e}")))?;
            out.push(SourceFile { name, text });
        }
    }
    Ok(())
}

/// Diagnostics of a bundle that cannot be used: every line names the file, the line and,
/// where known, the policy id.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}", .0.join("\n"))]
pub struct PolicyErrors(pub Vec<String>);

impl PolicyErrors {
    fn one(msg: String) -> PolicyErrors {
        PolicyErrors(vec![msg])
    }
}

/// What we keep about each policy for decisions, lint and explain.
#[derive(Debug, Clone)]
pub struct PolicyMeta {
    /// The `@id`.
    pub id: String,
    /// File it came from.
    pub file: String,
    /// 1-based line of its first token.
    pub line: usize,
    /// permit or forbid.
    pub forbid: bool,
    /// The `@reason`, if any.
    pub reason: Option<String>,
}

/// An immutable, validated policy set with its schema and hash.
#[derive(Debug)]
pub struct PolicySnapshot {
    /// The schema.
    pub schema: Schema,
    /// The policy set, keyed by `@id`.
    pub set: PolicySet,
    /// Metadata by policy id.
    pub meta: BTreeMap<String, PolicyMeta>,
    /// sha256 over the schema and every file (name and text), `sha256:<hex>`.
    pub sha256: String,
    /// Unix milliseconds when it was loaded.
    pub loaded_at_ms: i64,
    /// The bundle it was compiled from.
    pub bundle: PolicyBundle,
}

fn line_of(text: &str, offset: usize) -> usize {
    text.get(..offset.min(text.len()))
        .map(|s| s.matches('\n').count() + 1)
        .unwrap_or(1)
}

fn diag_line(d: &dyn Diagnostic, text: &str) -> Option<usize> {
    d.labels()
        .and_then(|mut l| l.next())
        .map(|l| line_of(text, l.offset()))
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or("").to_string()
}

/// Compiles a bundle: schema, per-file parse, `@id` re-keying, lint, strict validation.
pub fn compile(bundle: PolicyBundle) -> Result<PolicySnapshot, PolicyErrors> {
    let mut errs = Vec::new();
    let schema = match Schema::from_cedarschema_str(&bundle.schema_text) {
        Ok((s, _warnings)) => Some(s),
        Err(e) => {
            let line = diag_line(&e, &bundle.schema_text).unwrap_or(1);
            errs.push(format!(
                "{}:{line}: schema error: {}",
                bundle.schema_name,
                first_line(&e.to_string())
            ));
            None
        }
    };

    let mut set = PolicySet::new();
    let mut meta: BTreeMap<String, PolicyMeta> = BTreeMap::new();
    for file in &bundle.files {
        let parsed = match PolicySet::from_str(&file.text) {
            Ok(p) => p,
            Err(e) => {
                for d in e.iter() {
                    let line = diag_line(d, &file.text).unwrap_or(1);
                    errs.push(format!(
                        "{}:{line}: parse error: {}",
                        file.name,
                        first_line(&d.to_string())
                    ));
                }
                continue;
            }
        };
        if parsed.templates().next().is_some() {
            errs.push(format!(
                "{}: templates are not supported; write static policies",
                file.name
            ));
        }
        let mut policies: Vec<_> = parsed.policies().collect();
        // Keep file order stable (Cedar's ids are policy0, policy1, … in order).
        policies.sort_by_key(|p| {
            p.id()
                .to_string()
                .trim_start_matches("policy")
                .parse::<usize>()
                .unwrap_or(usize::MAX)
        });
        for (index, p) in policies.into_iter().enumerate() {
            let line = find_policy_line(&file.text, p.annotation("id"))
                .or_else(|| nth_policy_line(&file.text, index))
                .unwrap_or(1);
            let (id, lint_errors) = super::lint::lint_policy(&file.name, line, p);
            errs.extend(lint_errors);
            let Some(id) = id else { continue };
            let forbid = p.effect() == cedar_policy::Effect::Forbid;
            let reason = p.annotation("reason").map(str::to_string);
            if let Some(prev) = meta.get(&id) {
                errs.push(format!(
                    "{}:{line}: policy {id}: duplicate @id (first in {}:{})",
                    file.name, prev.file, prev.line
                ));
                continue;
            }
            if let Err(e) = set.add(p.new_id(PolicyId::new(&id))) {
                errs.push(format!("{}:{line}: policy {id}: {e}", file.name));
                continue;
            }
            meta.insert(
                id.clone(),
                PolicyMeta {
                    id,
                    file: file.name.clone(),
                    line,
                    forbid,
                    reason,
                },
            );
        }
    }

    if let Some(schema) = &schema {
        let vr = Validator::new(schema.clone()).validate(&set, ValidationMode::Strict);
        for e in vr.validation_errors() {
            let id = e.policy_id().to_string();
            let (file, line) = meta
                .get(&id)
                .map(|m| (m.file.clone(), m.line))
                .unwrap_or_else(|| ("?".into(), 1));
            errs.push(format!(
                "{file}:{line}: policy {id}: validation error: {}",
                first_line(&e.to_string())
            ));
        }
    }

    match schema {
        Some(schema) if errs.is_empty() => {
            let sha256 = bundle_hash(&bundle);
            Ok(PolicySnapshot {
                schema,
                set,
                meta,
                sha256,
                loaded_at_ms: now_ms(),
                bundle,
            })
        }
        _ => Err(PolicyErrors(errs)),
    }
}

/// Finds the line of the `@id("…")` annotation of a policy in its file.
fn find_policy_line(text: &str, id: Option<&str>) -> Option<usize> {
    let id = id?;
    let needle = format!("@id(\"{id}\")");
    text.find(&needle).map(|off| line_of(text, off))
}

/// The line of the `index`-th policy (0-based) of a file: the lines where a statement starts
/// with `permit` or `forbid`, comments skipped.
fn nth_policy_line(text: &str, index: usize) -> Option<usize> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| {
            let t = l.trim_start();
            (t.starts_with("permit") || t.starts_with("forbid")) && !t.starts_with("//")
        })
        .nth(index)
        .map(|(i, _)| i + 1)
}

/// The hash of a bundle: schema and every file, by name.
pub fn bundle_hash(bundle: &PolicyBundle) -> String {
    let mut h = Sha256::new();
    h.update(b"schema\0");
    h.update(bundle.schema_text.as_bytes());
    for f in &bundle.files {
        h.update(b"\0file\0");
        h.update(f.name.as_bytes());
        h.update(b"\0");
        h.update(f.text.as_bytes());
    }
    format!("sha256:{}", hex::encode(h.finalize()))
}

/// Unix milliseconds now.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// One line per policy that names a profile outside `known` (the config's profiles, the
/// built-ins and any a test file declares): such a permit never matches and such a forbid never
/// applies, so it is a validation error, with the closest known name.
pub fn unknown_profile_errors(snap: &PolicySnapshot, known: &BTreeSet<String>) -> Vec<String> {
    let mut errs = Vec::new();
    for (id, meta) in &snap.meta {
        let Some(policy) = snap.set.policy(&PolicyId::new(id)) else {
            continue;
        };
        for name in super::lint::profiles_named(policy) {
            if !known.contains(&name) {
                errs.push(format!(
                    "{}:{}: policy {id}: unknown profile `{name}`{}; profiles come from the config's `profiles`, the built-ins ({}) or a test file's `profiles:`",
                    meta.file,
                    meta.line,
                    crate::suggest::hint(&name, known.iter().map(String::as_str)),
                    crate::config::BUILTIN_PROFILES
                        .iter()
                        .map(|(b, _)| *b)
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
    }
    errs
}

/// The live policy set: readers take an `Arc` snapshot at the start of a call and finish under it.
#[derive(Debug)]
pub struct PolicyStore {
    current: RwLock<Arc<PolicySnapshot>>,
    source: PolicySource,
    last_error: RwLock<Option<RejectedReload>>,
    /// The profile ids policies may name (None: not checked).
    known_profiles: Option<BTreeSet<String>>,
    /// The shadow set in force (None: no `shadow/` directory).
    shadow: RwLock<Option<Arc<PolicySnapshot>>>,
    /// The last refused shadow set since the last accepted one.
    shadow_error: RwLock<Option<RejectedReload>>,
}

/// A reload that was refused (the last good set stayed in force).
#[derive(Debug, Clone)]
pub struct RejectedReload {
    /// When it was tried (unix ms).
    pub at_ms: i64,
    /// The diagnostics.
    pub errors: Vec<String>,
}

impl PolicyStore {
    /// Loads from `source`; fails when the set is invalid (the server refuses to start).
    pub fn load(source: PolicySource) -> Result<PolicyStore, PolicyErrors> {
        let snap = compile(source.read()?)?;
        let store = PolicyStore {
            current: RwLock::new(Arc::new(snap)),
            source,
            last_error: RwLock::new(None),
            known_profiles: None,
            shadow: RwLock::new(None),
            shadow_error: RwLock::new(None),
        };
        store.reload_shadow();
        Ok(store)
    }

    /// Loads from `source` and refuses a set that names a profile outside `profiles` (the
    /// config's tree, built-ins included); every reload is checked the same way.
    pub fn load_for_profiles(
        source: PolicySource,
        profiles: BTreeSet<String>,
    ) -> Result<PolicyStore, PolicyErrors> {
        let store = PolicyStore {
            current: RwLock::new(Arc::new(compile(source.read()?)?)),
            source,
            last_error: RwLock::new(None),
            known_profiles: Some(profiles),
            shadow: RwLock::new(None),
            shadow_error: RwLock::new(None),
        };
        let errs = unknown_profile_errors(
            &store.snapshot(),
            store
                .known_profiles
                .as_ref()
                .map_or(&BTreeSet::new(), |k| k),
        );
        if !errs.is_empty() {
            return Err(PolicyErrors(errs));
        }
        store.reload_shadow();
        Ok(store)
    }

    /// The shadow set in force, when there is one.
    pub fn shadow(&self) -> Option<Arc<PolicySnapshot>> {
        match self.shadow.read() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// The last refused shadow set since the last accepted one.
    pub fn shadow_rejected(&self) -> Option<RejectedReload> {
        self.shadow_error.read().ok().and_then(|g| g.clone())
    }

    /// Re-reads `<policies>/shadow/` over the live files and swaps the shadow set in when it
    /// changed and compiles; a set that does not compile leaves the last good one (the shadow
    /// set is never enforced, so it never blocks the live one). Returns what happened:
    /// `None` when nothing changed, `Some(Ok(hash))` for a new set (`""` when the shadow
    /// directory went away), `Some(Err(..))` for a refused one.
    pub fn reload_shadow(&self) -> Option<Result<String, PolicyErrors>> {
        let current = self.shadow().map(|s| s.sha256.clone());
        let bundle = match self.source.read_shadow() {
            Ok(Some(b)) => b,
            Ok(None) => {
                current.as_ref()?;
                self.set_shadow(None);
                return Some(Ok(String::new()));
            }
            Err(e) => return Some(Err(self.refuse_shadow(e))),
        };
        if current.as_deref() == Some(bundle_hash(&bundle).as_str()) {
            return None;
        }
        match self.compile_checked(bundle) {
            Ok(snap) => {
                let sha = snap.sha256.clone();
                self.set_shadow(Some(Arc::new(snap)));
                Some(Ok(sha))
            }
            Err(e) => Some(Err(self.refuse_shadow(e))),
        }
    }

    fn set_shadow(&self, snap: Option<Arc<PolicySnapshot>>) {
        match self.shadow.write() {
            Ok(mut g) => *g = snap,
            Err(poisoned) => *poisoned.into_inner() = snap,
        }
        if let Ok(mut e) = self.shadow_error.write() {
            *e = None;
        }
    }

    fn refuse_shadow(&self, e: PolicyErrors) -> PolicyErrors {
        tracing::warn!(
            diagnostics = %e.0.join(" | "),
            "shadow policy set refused; the last good shadow set stays"
        );
        if let Ok(mut le) = self.shadow_error.write() {
            *le = Some(RejectedReload {
                at_ms: now_ms(),
                errors: e.0.clone(),
            });
        }
        e
    }

    /// Compiles a bundle as this store would accept it: [`compile`] plus the profile check.
    pub fn compile_checked(&self, bundle: PolicyBundle) -> Result<PolicySnapshot, PolicyErrors> {
        let snap = compile(bundle)?;
        if let Some(known) = &self.known_profiles {
            let errs = unknown_profile_errors(&snap, known);
            if !errs.is_empty() {
                return Err(PolicyErrors(errs));
            }
        }
        Ok(snap)
    }

    /// The snapshot in force now.
    pub fn snapshot(&self) -> Arc<PolicySnapshot> {
        match self.current.read() {
            Ok(g) => Arc::clone(&g),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// Where the policies come from.
    pub fn source(&self) -> &PolicySource {
        &self.source
    }

    /// Re-reads and compiles the source; swaps atomically on success, keeps the last good set on
    /// failure. Returns (old hash, new hash) or the diagnostics.
    pub fn reload(&self) -> Result<(String, String), PolicyErrors> {
        let old = self.snapshot().sha256.clone();
        match self.source.read().and_then(|b| self.compile_checked(b)) {
            Ok(snap) => {
                let new = snap.sha256.clone();
                match self.current.write() {
                    Ok(mut g) => *g = Arc::new(snap),
                    Err(poisoned) => *poisoned.into_inner() = Arc::new(snap),
                }
                if let Ok(mut e) = self.last_error.write() {
                    *e = None;
                }
                Ok((old, new))
            }
            Err(e) => {
                if let Ok(mut le) = self.last_error.write() {
                    *le = Some(RejectedReload {
                        at_ms: now_ms(),
                        errors: e.0.clone(),
                    });
                }
                Err(e)
            }
        }
    }

    /// Swaps in an already compiled (and, where configured, tested) snapshot; calls in flight
    /// keep the one they started with. Clears the last rejection and returns the old hash.
    pub fn install(&self, snap: PolicySnapshot) -> String {
        let old = self.snapshot().sha256.clone();
        match self.current.write() {
            Ok(mut g) => *g = Arc::new(snap),
            Err(poisoned) => *poisoned.into_inner() = Arc::new(snap),
        }
        if let Ok(mut e) = self.last_error.write() {
            *e = None;
        }
        old
    }

    /// Records a refused reload (the set in force stays): shown by `workspace_info.policy`.
    pub fn record_rejection(&self, errors: Vec<String>) {
        if let Ok(mut le) = self.last_error.write() {
            *le = Some(RejectedReload {
                at_ms: now_ms(),
                errors,
            });
        }
    }

    /// The last rejected reload since the last accepted one.
    pub fn last_rejected(&self) -> Option<RejectedReload> {
        self.last_error.read().ok().and_then(|g| g.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bundle(files: &[(&str, &str)]) -> PolicyBundle {
        PolicyBundle {
            schema_name: "schema".into(),
            schema_text: EMBEDDED_SCHEMA.into(),
            files: files
                .iter()
                .map(|(n, t)| SourceFile {
                    name: (*n).into(),
                    text: (*t).into(),
                })
                .collect(),
            dir: None,
        }
    }

    #[test]
    fn shipped_policies_compile() {
        let snap = compile(PolicySource::Embedded.read().unwrap()).unwrap();
        assert!(snap.meta.contains_key("read-only.permit.fs-read"));
        assert!(snap.meta.contains_key("base.forbid.git-metadata-write"));
        assert!(snap.sha256.starts_with("sha256:"));
        assert!(snap.meta.values().all(|m| !m.forbid || m.reason.is_some()));
    }

    #[test]
    fn parse_error_names_file_and_line() {
        let err = compile(bundle(&[(
            "profiles/x.cedar",
            "// c\n@id(\"x.permit.a\")\npermit (principal, action, resource)\nwhen { ) };\n",
        )]))
        .unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("profiles/x.cedar:4"), "{msg}");
    }

    #[test]
    fn lint_rules() {
        let err = compile(bundle(&[
            ("profiles/x.cedar", "permit (principal, action, resource);"),
            (
                "profiles/y.cedar",
                "@id(\"y.forbid\")\n@reason(\"r\")\nforbid (principal, action, resource);",
            ),
            (
                "base/z.cedar",
                "@id(\"z.forbid\")\nforbid (principal, action, resource);",
            ),
            (
                "base/w.cedar",
                "@id(\"w.permit\")\npermit (principal, action, resource);",
            ),
        ]))
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("profiles/x.cedar:1: lint: policy has no @id"),
            "{err}"
        );
        assert!(
            err.contains("policy y.forbid: forbids belong in base/"),
            "{err}"
        );
        assert!(
            err.contains("policy z.forbid: forbid has no @reason"),
            "{err}"
        );
        assert!(
            err.contains("policy w.permit: permits belong in profiles/"),
            "{err}"
        );
    }

    #[test]
    fn policies_on_confirm_belong_in_base_with_either_effect() {
        let confirm = "permit (principal, action == CodeSpace::Action::\"confirm\", resource);";
        let ok = compile(bundle(&[(
            "base/c.cedar",
            &format!("@id(\"c.confirm\")\n{confirm}"),
        )]));
        assert!(ok.is_ok(), "{:?}", ok.err().map(|e| e.to_string()));
        let err = compile(bundle(&[(
            "profiles/c.cedar",
            &format!("@id(\"c.confirm\")\n{confirm}"),
        )]))
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("policy c.confirm: policies on confirm belong in base/"),
            "{err}"
        );
    }

    #[test]
    fn validation_error_names_policy() {
        let err = compile(bundle(&[(
            "profiles/x.cedar",
            "\n\n@id(\"x.permit.bad\")\npermit (principal, action, resource) when { resource.nosuch == 1 };",
        )]))
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("profiles/x.cedar:3: policy x.permit.bad: validation error"),
            "{err}"
        );
    }
}
