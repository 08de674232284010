//! Tidy checks over the source tree: the crate dependency rule, the code map, file headers,
//! `unsafe` hygiene and where stdout may be written. They keep docs/architecture.md true.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// One workspace member: its folder (relative to the repo root, `/`-separated) and the
/// CodeSpace crates it depends on for normal (non-dev) builds.
#[derive(Debug)]
struct Member {
    name: String,
    dir: String,
    deps: BTreeSet<String>,
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn members() -> Vec<Member> {
    let root = repo_root();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(&root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut members = Vec::new();
    for pkg in meta["packages"].as_array().unwrap() {
        let manifest = Path::new(pkg["manifest_path"].as_str().unwrap());
        let dir = manifest
            .parent()
            .unwrap()
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let deps = pkg["dependencies"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["kind"].is_null() || d["kind"] == "build")
            .filter_map(|d| d["name"].as_str())
            .filter(|n| n.starts_with("codespace-"))
            .map(str::to_owned)
            .collect();
        members.push(Member {
            name: pkg["name"].as_str().unwrap().to_owned(),
            dir,
            deps,
        });
    }
    members.sort_by(|a, b| a.dir.cmp(&b.dir));
    members
}

/// Every `.rs` file under `dir/src`, as paths relative to `src` (`/`-separated).
fn source_files(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, at: &Path, out: &mut Vec<String>) {
        let mut entries: Vec<_> = std::fs::read_dir(at)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(base, &path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(base).unwrap().to_string_lossy();
                out.push(rel.replace('\\', "/"));
            }
        }
    }
    let src = dir.join("src");
    let mut out = Vec::new();
    if src.is_dir() {
        walk(&src, &src, &mut out);
    }
    out
}

/// Every `.rs` file of the workspace's crates (src, tests, benches), as repo-relative paths.
fn all_rust_files() -> Vec<PathBuf> {
    fn walk(at: &Path, out: &mut Vec<PathBuf>) {
        let Ok(rd) = std::fs::read_dir(at) else {
            return;
        };
        for e in rd {
            let path = e.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if name != "target" && name != "fixtures" && !name.starts_with('.') {
                    walk(&path, out);
                }
            } else if name.ends_with(".rs") {
                out.push(path);
            }
        }
    }
    let root = repo_root();
    let mut out = Vec::new();
    for m in members() {
        walk(&root.join(&m.dir), &mut out);
    }
    out.sort();
    out
}

#[test]
fn crate_dependencies_run_mcp_to_engine_to_runner() {
    let members = members();
    let by_name: BTreeMap<&str, &Member> = members.iter().map(|m| (m.name.as_str(), m)).collect();
    let dir_of = |name: &str| by_name.get(name).map(|m| m.dir.as_str()).unwrap_or("?");
    let mut problems = Vec::new();
    for m in &members {
        for dep in &m.deps {
            let to = dir_of(dep);
            let allowed = if m.dir.starts_with("runner/") {
                false
            } else if m.dir == "engine" {
                to.starts_with("runner/") || to == "policy"
            } else if m.dir == "policy" || m.dir == "policy-tools" {
                // Decisions below the engine: Cedar and the runner crates' types, never the
                // engine; the policy tooling sits on the decider.
                to.starts_with("runner/") || (m.dir == "policy-tools" && to == "policy")
            } else if m.dir == "mcp" {
                // The binary: the engine, the sandbox helper entry and probe, the store (serve,
                // doctor, audit, policy tooling) and the fs error type (the test fault hook).
                matches!(
                    to,
                    "engine" | "policy-tools" | "runner/sandbox" | "runner/store" | "runner/fs"
                )
            } else if m.dir == "tests" {
                matches!(to, "mcp" | "engine" | "runner/store")
            } else {
                false
            };
            if !allowed {
                problems.push(format!("{} ({}) depends on {dep} ({to})", m.name, m.dir));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "the dependency rule of docs/architecture.md is broken:\n{}",
        problems.join("\n")
    );
    // The rule must have something to check.
    assert!(
        members
            .iter()
            .any(|m| m.dir == "engine" && !m.deps.is_empty())
    );
}

#[test]
fn every_source_file_is_named_in_the_code_map() {
    let root = repo_root();
    let doc = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let mut missing = Vec::new();
    let mut checked = 0;
    for m in members() {
        let prefix = format!("| `{}/`", m.dir);
        let Some(row) = doc.lines().find(|l| l.starts_with(&prefix)) else {
            missing.push(format!("no code-map row starts with {prefix}"));
            continue;
        };
        for file in source_files(&root.join(&m.dir)) {
            checked += 1;
            // A file in a folder of `src/` is named in that folder's own row when there is one
            // (`| \`engine/src/tools/\``, naming `fs.rs`), else in the crate's row.
            let folder_row = file.rsplit_once('/').and_then(|(dir, name)| {
                let prefix = format!("| `{}/src/{dir}/`", m.dir);
                doc.lines()
                    .find(|l| l.starts_with(&prefix))
                    .map(|r| (r, name))
            });
            let ok = match folder_row {
                Some((r, name)) => r.contains(&format!("`{name}`")),
                None => {
                    row.contains(&format!("`{file}`")) || row.contains(&format!("`src/{file}`"))
                }
            };
            if !ok {
                missing.push(format!("{}/src/{file} is not named in its row", m.dir));
            }
        }
    }
    assert!(checked > 50, "only {checked} files found");
    assert!(
        missing.is_empty(),
        "docs/architecture.md code map is out of date:\n{}",
        missing.join("\n")
    );
}

#[test]
fn every_rust_file_opens_with_a_module_doc_line() {
    let root = repo_root();
    let mut bad = Vec::new();
    let files = all_rust_files();
    assert!(files.len() > 50);
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        if !text.starts_with("//!") {
            bad.push(path.strip_prefix(&root).unwrap().display().to_string());
        }
    }
    assert!(
        bad.is_empty(),
        "these files do not open with a `//!` line:\n{}",
        bad.join("\n")
    );
}

/// Each `unsafe` block, fn or impl has a `SAFETY:` comment just above it (within the comment block
/// that precedes it, or on the lines right before a multi-line statement).
#[test]
fn every_unsafe_has_a_safety_comment() {
    let root = repo_root();
    let mut bad = Vec::new();
    let mut seen = 0;
    for path in all_rust_files() {
        // This file names the patterns it looks for.
        if path.ends_with("tests/tests/tidy.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            let is_unsafe = code.contains("unsafe {")
                || code.contains("unsafe fn ")
                || code.contains("unsafe impl ")
                || code.contains("unsafe extern");
            if !is_unsafe || code.contains("unsafe_code") {
                continue;
            }
            seen += 1;
            let from = i.saturating_sub(6);
            if !lines[from..=i].iter().any(|l| l.contains("SAFETY:")) {
                bad.push(format!(
                    "{}:{}",
                    path.strip_prefix(&root).unwrap().display(),
                    i + 1
                ));
            }
        }
    }
    assert!(seen > 0, "the scan found no unsafe at all: it is broken");
    assert!(
        bad.is_empty(),
        "unsafe without a SAFETY: comment:\n{}",
        bad.join("\n")
    );
}

/// Crates that need no `unsafe` forbid it in their crate root, so a new block cannot slip in.
#[test]
fn crates_without_unsafe_forbid_it() {
    let root = repo_root();
    let mut bad = Vec::new();
    for m in members() {
        let dir = root.join(&m.dir);
        let files = source_files(&dir);
        let uses_unsafe = files.iter().any(|f| {
            let text = std::fs::read_to_string(dir.join("src").join(f)).unwrap();
            text.lines().any(|l| {
                let code = l.split("//").next().unwrap_or("");
                code.contains("unsafe {") || code.contains("unsafe fn ")
            })
        });
        if uses_unsafe {
            continue;
        }
        for crate_root in ["lib.rs", "main.rs"] {
            let path = dir.join("src").join(crate_root);
            if let Ok(text) = std::fs::read_to_string(&path)
                && !text.contains("#![forbid(unsafe_code)]")
            {
                bad.push(format!("{}/src/{crate_root}", m.dir));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "these crate roots need #![forbid(unsafe_code)]:\n{}",
        bad.join("\n")
    );
}

/// Standard output belongs to the CLI commands; on `serve --stdio` it is the MCP transport, so a
/// stray `print!` in the engine, a runner or the transports would corrupt the protocol.
#[test]
fn only_cli_modules_print_to_stdout() {
    let root = repo_root();
    let cli = [
        "mcp/src/cli.rs",
        "mcp/src/doctor.rs",
        "mcp/src/help.rs",
        "mcp/src/audit_view.rs",
        "mcp/src/audit_scrub.rs",
        "mcp/src/policy_cli.rs",
        "mcp/src/policy_admin.rs",
        "mcp/src/policy_diff.rs",
        "mcp/src/policy_verify.rs",
    ];
    let mut bad = Vec::new();
    for m in members() {
        if m.dir == "tests" {
            continue;
        }
        let dir = root.join(&m.dir);
        for file in source_files(&dir) {
            let rel = format!("{}/src/{file}", m.dir);
            if cli.contains(&rel.as_str()) || file.starts_with("bin/") {
                continue;
            }
            let text = std::fs::read_to_string(dir.join("src").join(&file)).unwrap();
            // Unit-test modules may print (the test harness captures it).
            let product = text.split("#[cfg(test)]").next().unwrap_or("");
            for (i, line) in product.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                let code = code.replace("eprintln!", "").replace("eprint!", "");
                if code.contains("println!") || code.contains("print!(") {
                    bad.push(format!("{rel}:{}", i + 1));
                }
            }
        }
    }
    assert!(
        bad.is_empty(),
        "stdout is written outside the CLI modules:\n{}",
        bad.join("\n")
    );
}

/// The Cedar actions the schema declares.
fn schema_actions() -> BTreeSet<String> {
    let text = std::fs::read_to_string(repo_root().join("schema/codespace.cedarschema")).unwrap();
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let Some(rest) = line.trim().strip_prefix("action ") else {
            continue;
        };
        let end = [" in [", " appliesTo", ";"]
            .iter()
            .filter_map(|m| rest.find(m))
            .min()
            .unwrap_or(rest.len());
        for name in rest[..end].split(',') {
            out.insert(name.trim().trim_matches('"').to_owned());
        }
    }
    out
}

/// Every tool of the engine's table is a schema action, has a policy test case and a row in the
/// README's tool table.
#[test]
fn every_tool_has_a_schema_action_a_policy_test_and_a_docs_row() {
    let root = repo_root();
    let actions = schema_actions();
    assert!(
        actions.contains("process_write"),
        "schema parse: {actions:?}"
    );
    let mut tests = String::new();
    for e in std::fs::read_dir(root.join("policies/tests")).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "yaml") {
            tests.push_str(&std::fs::read_to_string(path).unwrap());
        }
    }
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let tools_section = readme
        .split("\n## Tools\n")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("README has a ## Tools section");
    let mut bad = Vec::new();
    for spec in codespace_engine::TOOLS {
        let name = spec.name.as_str();
        if !actions.contains(name) {
            bad.push(format!(
                "{name}: no `action {name}` in schema/codespace.cedarschema"
            ));
        }
        // A case calls a tool as `call: { name: X, … }` or `call:` followed by `name: X`.
        let inline = format!("call: {{ name: {name},");
        let block = tests.lines().collect::<Vec<_>>();
        let called = tests.contains(&inline)
            || block
                .windows(2)
                .any(|w| w[0].trim() == "call:" && w[1].trim() == format!("name: {name}"));
        if !called {
            bad.push(format!(
                "{name}: no policy test case calls it (policies/tests/*.yaml)"
            ));
        }
        let row = tools_section.lines().any(|l| {
            l.starts_with('|')
                && l.split('|')
                    .nth(1)
                    .is_some_and(|c| c.contains(&format!("`{name}`")))
        });
        if !row {
            bad.push(format!("{name}: no row in the README's tool table"));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// The choke point by construction: a tool handler (every file under `engine/src/tools/`) is a
/// method of `Authorized`, which only the gateway builds; so no handler may name the gateway,
/// decide, authorize or take a lease on its own. Further decisions go through `Authorized`, whose methods
/// live in `engine/src/gateway/` and audit like the first.
#[test]
fn tool_handlers_never_see_the_gateway_nor_decide() {
    let root = repo_root();
    let tools = root.join("engine/src/tools");
    let mut offences = Vec::new();
    let mut checked = 0;
    for file in source_files(&root.join("engine")) {
        if !file.starts_with("tools/") {
            continue;
        }
        checked += 1;
        let text = std::fs::read_to_string(tools.join(file.trim_start_matches("tools/"))).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for needle in [
                "Gateway",
                "decide(",
                "decide_reqs(",
                "decide_cached(",
                ".authorize(",
                "policy::decide::decide",
                "Authorized::new",
                "Authorized {",
                "acquire_as(",
            ] {
                if code.contains(needle) {
                    offences.push(format!("engine/src/{file}:{}: `{needle}`", n + 1));
                }
            }
        }
    }
    assert!(checked >= 5, "only {checked} handler files found");
    assert!(
        offences.is_empty(),
        "tool handlers must reach policy only through Authorized:\n{}",
        offences.join("\n")
    );
}

/// The modules of a crate's `src/` (`a::b` for `src/a/b.rs` or `src/a/b/mod.rs`), with their
/// text (test modules cut off).
fn crate_modules(src: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for file in source_files(src.parent().unwrap()) {
        let Some(stem) = file.strip_suffix(".rs") else {
            continue;
        };
        if stem == "lib" || stem == "main" || stem.starts_with("bin/") {
            continue;
        }
        let module = stem.strip_suffix("/mod").unwrap_or(stem).replace('/', "::");
        let mut text = std::fs::read_to_string(src.join(&file)).unwrap();
        if let Some(i) = text.find("#[cfg(test)]\nmod tests") {
            text.truncate(i);
        }
        let code: String = text
            .lines()
            .map(|l| l.split("//").next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n");
        out.insert(module, code);
    }
    out
}

/// The modules `code` (of module `at`) names through `crate::…`, `crate::{…}` and `super::…`
/// paths: the longest known module of each path, ancestors of `at` left out (a child using its
/// parent is containment, not a circle).
fn named_modules(at: &str, code: &str, known: &BTreeSet<String>) -> BTreeSet<String> {
    let ident = |c: char| c.is_alphanumeric() || c == '_' || c == ':';
    let mut paths: Vec<String> = Vec::new();
    for (prefix, base) in [
        ("crate::", String::new()),
        ("super::", {
            let mut parts: Vec<&str> = at.split("::").collect();
            parts.pop();
            parts.join("::")
        }),
    ] {
        let mut rest = code;
        while let Some(i) = rest.find(prefix) {
            let before = rest[..i].chars().last();
            rest = &rest[i + prefix.len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let join = |p: &str| {
                if base.is_empty() {
                    p.to_string()
                } else {
                    format!("{base}::{p}")
                }
            };
            if let Some(group) = rest.strip_prefix('{') {
                let end = group.find("};").unwrap_or(group.len());
                for item in group[..end].split(',') {
                    let item: String = item.trim().chars().take_while(|c| ident(*c)).collect();
                    paths.push(join(&item));
                }
            } else {
                let item: String = rest.chars().take_while(|c| ident(*c)).collect();
                paths.push(join(&item));
            }
        }
    }
    let mut out = BTreeSet::new();
    for p in paths {
        let parts: Vec<&str> = p.split("::").filter(|s| !s.is_empty()).collect();
        let best = (1..=parts.len())
            .rev()
            .map(|k| parts[..k].join("::"))
            .find(|c| known.contains(c));
        if let Some(best) = best
            && best != at
            && !at.starts_with(&format!("{best}::"))
        {
            out.insert(best);
        }
    }
    out
}

/// No import circles among the modules of `engine/` and `mcp/`: imports run one way (in the
/// engine: tool handlers → gateway → services and facts; the gateway never names a handler).
#[test]
fn no_import_circles_among_the_modules_of_engine_and_mcp() {
    let root = repo_root();
    let mut circles = Vec::new();
    for dir in ["engine", "mcp"] {
        let modules = crate_modules(&root.join(dir).join("src"));
        let known: BTreeSet<String> = modules.keys().cloned().collect();
        let edges: BTreeMap<String, BTreeSet<String>> = modules
            .iter()
            .map(|(m, code)| (m.clone(), named_modules(m, code, &known)))
            .collect();
        assert!(
            edges.get("gateway").is_some_and(|e| !e.is_empty()) || dir == "mcp",
            "the import scan found nothing in {dir}/src/gateway"
        );
        // Depth-first search for a back edge, reporting the circle it closes.
        fn visit(
            m: &str,
            edges: &BTreeMap<String, BTreeSet<String>>,
            state: &mut BTreeMap<String, u8>,
            stack: &mut Vec<String>,
            found: &mut Vec<String>,
        ) {
            state.insert(m.to_string(), 1);
            stack.push(m.to_string());
            for n in edges.get(m).into_iter().flatten() {
                match state.get(n.as_str()) {
                    Some(1) => {
                        let from = stack.iter().position(|s| s == n).unwrap_or(0);
                        let mut circle = stack[from..].to_vec();
                        circle.push(n.clone());
                        found.push(circle.join(" → "));
                    }
                    Some(_) => {}
                    None => visit(n, edges, state, stack, found),
                }
            }
            stack.pop();
            state.insert(m.to_string(), 2);
        }
        let mut state = BTreeMap::new();
        for m in edges.keys() {
            if !state.contains_key(m.as_str()) {
                let mut found = Vec::new();
                visit(m, &edges, &mut state, &mut Vec::new(), &mut found);
                circles.extend(found.into_iter().map(|c| format!("{dir}: {c}")));
            }
        }
    }
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
}

/// The scanner itself: a circle made of `crate::` paths, grouped imports and `super::` is found.
#[test]
fn the_import_scan_sees_paths_groups_and_super() {
    let known: BTreeSet<String> = ["a", "b", "c", "c::d"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(
        named_modules("a", "use crate::{b::X, c::d::Y};", &known),
        ["b", "c::d"].iter().map(|s| s.to_string()).collect()
    );
    assert_eq!(
        named_modules("c::d", "use super::super::a::Z; use crate::c::W;", &known),
        BTreeSet::new(),
        "super::super is not followed, and a parent is containment"
    );
    assert_eq!(
        named_modules("c::d", "fn f() { crate::a::g() }", &known),
        ["a"].iter().map(|s| s.to_string()).collect()
    );
}
