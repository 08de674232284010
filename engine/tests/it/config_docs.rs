//! The config schema against the docs: every field of the generated JSON Schema has a row in
//! docs/config.md (and every row is a field, with the schema's default); every JSON config
//! example in README.md and docs/*.md is valid under the schema and loads through the real
//! loader; the schema rejects what the loader rejects; operator-facing config errors.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use codespace_engine::Config;
use codespace_engine::config::json_schema;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn resolve<'a>(schema: &'a Value, node: &'a Value) -> &'a Value {
    match node.get("$ref").and_then(Value::as_str) {
        Some(r) => {
            let name = r.trim_start_matches("#/$defs/");
            resolve(schema, &schema["$defs"][name])
        }
        None => node,
    }
}

/// Every field path of the schema (`limits.max_waiters`, `workspaces.<id>.root`) with its
/// schema node; map keys are `<id>`.
fn schema_fields(schema: &Value) -> BTreeMap<String, Value> {
    fn walk(schema: &Value, node: &Value, prefix: &str, out: &mut BTreeMap<String, Value>) {
        let node = resolve(schema, node);
        if let Some(props) = node.get("properties").and_then(Value::as_object) {
            for (name, sub) in props {
                let path = if prefix.is_empty() {
                    name.clone()
                } else {
                    format!("{prefix}.{name}")
                };
                out.insert(path.clone(), sub.clone());
                walk(schema, sub, &path, out);
            }
        }
        if let Some(map) = node.get("additionalProperties").filter(|v| v.is_object()) {
            walk(schema, map, &format!("{prefix}.<id>"), out);
        }
        // An optional block (`environments.<id>.ssh`) is `anyOf: [{$ref}, null]`.
        for variant in node
            .get("anyOf")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            walk(schema, variant, prefix, out);
        }
    }
    let mut out = BTreeMap::new();
    walk(schema, schema, "", &mut out);
    out
}

/// The reference rows of docs/config.md: tables whose header starts `| Field |`; first cell
/// `` `path` ``, placeholders like `<name>` normalized to `<id>`; value: the Default cell.
fn doc_rows(md: &str) -> BTreeMap<String, String> {
    let mut rows = BTreeMap::new();
    let mut in_table = false;
    for line in md.lines() {
        let line = line.trim();
        if line.starts_with("| Field |") {
            in_table = true;
            continue;
        }
        if !line.starts_with('|') {
            in_table = false;
            continue;
        }
        if !in_table || line.starts_with("|---") {
            continue;
        }
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
        let field = cells[0].trim_matches('`');
        let mut norm = String::new();
        let mut in_placeholder = false;
        for c in field.chars() {
            match c {
                '<' => {
                    in_placeholder = true;
                    norm.push_str("<id>");
                }
                '>' => in_placeholder = false,
                _ if in_placeholder => {}
                _ => norm.push(c),
            }
        }
        let prev = rows.insert(norm.clone(), cells.get(2).unwrap_or(&"").to_string());
        assert!(prev.is_none(), "docs/config.md: `{norm}` has two rows");
    }
    rows
}

#[test]
fn every_schema_field_has_a_row_in_docs_config_md_and_every_row_is_a_field() {
    let schema = json_schema();
    let fields = schema_fields(&schema);
    let md = std::fs::read_to_string(repo().join("docs/config.md")).unwrap();
    let rows = doc_rows(&md);
    let schema_paths: BTreeSet<&String> = fields.keys().collect();
    let doc_paths: BTreeSet<&String> = rows.keys().collect();
    let undocumented: Vec<_> = schema_paths.difference(&doc_paths).collect();
    let unknown: Vec<_> = doc_paths.difference(&schema_paths).collect();
    assert!(
        undocumented.is_empty(),
        "config fields without a row in docs/config.md (add one to its Reference tables): \
         {undocumented:?}"
    );
    assert!(
        unknown.is_empty(),
        "docs/config.md rows that are not config fields: {unknown:?}"
    );
    // Defaults: the schema's default (from the code) appears in the row's Default cell.
    for (path, node) in &fields {
        let Some(default) = node.get("default") else {
            continue;
        };
        let cell = &rows[path];
        let want = match default {
            Value::Null => "null".to_string(),
            Value::String(s) => s.clone(),
            Value::Bool(_) | Value::Number(_) => default.to_string(),
            // Object defaults (`limits`) are documented field by field.
            Value::Object(_) | Value::Array(_) => continue,
        };
        assert!(
            cell.contains(&format!("`{want}`")) || (want == "null" && cell.contains("null")),
            "docs/config.md `{path}`: Default cell `{cell}` does not show the default `{want}`"
        );
    }
}

/// ```json blocks of a markdown file.
fn json_blocks(md: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut cur: Option<(usize, String)> = None;
    for (i, line) in md.lines().enumerate() {
        let t = line.trim_start();
        match &mut cur {
            None if t.starts_with("```json") => cur = Some((i + 1, String::new())),
            Some(_) if t.starts_with("```") => out.push(cur.take().unwrap()),
            Some((_, buf)) => {
                buf.push_str(line);
                buf.push('\n');
            }
            None => {}
        }
    }
    out
}

fn markdown_files() -> Vec<PathBuf> {
    let mut files = vec![repo().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// Rewrites the machine-specific parts of an example so the real loader can check the rest:
/// each workspace root becomes an existing temp directory, each token file an existing file,
/// each read path an existing directory.
fn localize(example: &Value, tmp: &Path) -> Value {
    let mut v = example.clone();
    for section in ["environments", "workspaces"] {
        if let Some(items) = v.get_mut(section).and_then(Value::as_object_mut) {
            for (id, item) in items.iter_mut() {
                if let Some(paths) = item.get_mut("read_paths").and_then(Value::as_object_mut) {
                    for (name, path) in paths.iter_mut() {
                        let dir = tmp.join("read").join(format!("{section}-{id}-{name}"));
                        std::fs::create_dir_all(&dir).unwrap();
                        *path = json!(dir);
                    }
                }
                if let Some(home) = item.get_mut("home") {
                    *home = json!(tmp.join("homes").join(id));
                }
            }
        }
    }
    if let Some(ws) = v.get_mut("workspaces").and_then(Value::as_object_mut) {
        for (id, w) in ws.iter_mut() {
            let dir = tmp.join("roots").join(id);
            std::fs::create_dir_all(&dir).unwrap();
            if let Some(w) = w.as_object_mut()
                && w.contains_key("root")
            {
                w.insert("root".into(), json!(dir));
            }
        }
    }
    if let Some(cs) = v.get_mut("clients").and_then(Value::as_object_mut) {
        for (name, c) in cs.iter_mut() {
            if let Some(c) = c.as_object_mut()
                && c.contains_key("token_file")
            {
                let f = tmp.join(format!("{name}.token"));
                std::fs::write(&f, "0123456789abcdef0123456789abcdef\n").unwrap();
                c.insert("token_file".into(), json!(f));
            }
        }
    }
    v
}

#[test]
fn every_json_config_example_in_the_docs_is_valid_under_the_schema_and_loads() {
    let schema = json_schema();
    let validator = jsonschema::validator_for(&schema).expect("the schema compiles");
    let top: BTreeSet<String> = schema["properties"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    let tmp = tempfile::tempdir().unwrap();
    let mut checked = 0;
    for file in markdown_files() {
        let md = std::fs::read_to_string(&file).unwrap();
        let name = file.strip_prefix(repo()).unwrap().display().to_string();
        for (line, block) in json_blocks(&md) {
            let parsed: Result<Value, _> = serde_json::from_str(&block);
            let looks_like_config = |v: &Value| {
                v.as_object()
                    .is_some_and(|m| m.keys().any(|k| top.contains(k) && k != "$schema"))
            };
            let v = match parsed {
                Ok(v) if looks_like_config(&v) => v,
                Ok(_) => continue,
                Err(e) => {
                    assert!(
                        !top.iter().any(|k| block.contains(&format!("\"{k}\""))),
                        "{name}:{line}: a ```json block that mentions config fields is not \
                         JSON ({e}); fix it, or fence it as ```text"
                    );
                    continue;
                }
            };
            let errors: Vec<String> = validator
                .iter_errors(&v)
                .map(|e| format!("{} at {}", e, e.instance_path()))
                .collect();
            assert!(
                errors.is_empty(),
                "{name}:{line}: the example config is not valid under `codespace config \
                 schema`: {errors:?}"
            );
            let local = localize(&v, tmp.path());
            if let Err(e) = Config::from_json(&local.to_string(), tmp.path()) {
                panic!("{name}:{line}: the example config does not load: {e}");
            }
            checked += 1;
        }
    }
    assert!(
        checked >= 3,
        "expected the README and docs to hold config examples; checked {checked}"
    );
}

#[test]
fn the_schema_rejects_what_the_loader_rejects() {
    let schema = json_schema();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().display().to_string();
    let good = json!({"workspaces": {"w": {"root": root}}});
    assert!(validator.is_valid(&good));
    Config::from_json(&good.to_string(), tmp.path()).unwrap();
    let bad = [
        json!({}),
        json!({"workspaces": {}}),
        json!({"workspaces": {"w": {}}}),
        json!({"workspaces": {"w": {"root": root, "netwrk": "enabled"}}}),
        json!({"workspaces": {"w": {"root": root, "network": "open"}}}),
        json!({"workspaces": {"w": {"root": root, "approvals": "yes"}}}),
        json!({"workspaces": {"w": {"root": root}}, "colour": "red"}),
        json!({"workspaces": {"w": {"root": root}}, "limits": {"max_live_processes": 0}}),
        json!({"workspaces": {"w": {"root": root}}, "limits": {"output_ring_bytes": 10}}),
        json!({"workspaces": {"w": {"root": root}}, "limits": {"max_waitres": 1}}),
        json!({"workspaces": {"w": {"root": root}}, "environments": {"e": {"kind": "vm"}}}),
        json!({"workspaces": {"w": {"root": root}}, "clients": {"c": {"tokn": "x"}}}),
        json!({"workspaces": {"w": {"root": root}}, "policy_tests_on_reload": "yes"}),
    ];
    for b in bad {
        assert!(!validator.is_valid(&b), "the schema accepts {b}");
        assert!(
            Config::from_json(&b.to_string(), tmp.path()).is_err(),
            "the loader accepts {b}"
        );
    }
}

#[test]
fn a_missing_root_names_the_path_without_rust_wording() {
    let err = Config::from_json(
        r#"{"workspaces": {"app": {"root": "/nonexistent/codespace-app"}}}"#,
        Path::new("/"),
    )
    .unwrap_err()
    .to_string();
    assert_eq!(
        err,
        "invalid config: workspaces.app.root: directory \"/nonexistent/codespace-app\" does not exist"
    );
    let missing = Config::load(Path::new("/nonexistent/codespace.json"))
        .unwrap_err()
        .to_string();
    assert_eq!(
        missing,
        "invalid config: config file \"/nonexistent/codespace.json\" does not exist"
    );
}

#[test]
fn unknown_profile_and_environment_names_list_the_valid_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().display().to_string();
    let profile = Config::from_json(
        &json!({"workspaces": {"w": {"root": root, "profile": "workspace-wrte"}}}).to_string(),
        tmp.path(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        profile.contains("did you mean `workspace-write`?")
            && profile.contains("valid: read-only, workspace-write"),
        "{profile}"
    );
    let env = Config::from_json(
        &json!({
            "environments": {"builder": {"kind": "host"}},
            "workspaces": {"w": {"root": root, "environment": "bulder"}}
        })
        .to_string(),
        tmp.path(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        env.contains("did you mean `builder`?") && env.contains("valid: builder, local"),
        "{env}"
    );
    let parent = Config::from_json(
        &json!({
            "profiles": {"ci": {"extends": "readonly"}},
            "workspaces": {"w": {"root": root}}
        })
        .to_string(),
        tmp.path(),
    )
    .unwrap_err()
    .to_string();
    assert!(parent.contains("did you mean `read-only`?"), "{parent}");
}
