//! Operator skills (issue 31) through the real binary over stdio: `skills_dir` served as
//! resources (`skill://<name>/<path>`), prompts and SEP-2640 `skills/list`/`skills/get`, in the
//! initialize era and the stateless 2026-07-28 era; a policy forbidding one skill hides it from
//! every list and answers reads as for a missing skill; a symlink in `skills_dir` is never
//! followed; a malformed skill is skipped; a `skills_dir` inside a workspace is refused at load.

use crate::stdio_common::StdioServer;
use codespace_store::{DecisionQuery, Store};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

const SKILL_MD: &str = "---\nname: git-workflow\ndescription: Follow the team's Git conventions\nlicense: MIT\nmetadata:\n  owner: ops\n---\n\n# Git workflow\n\nBranch from main.\n";
const GUIDE: &str = "# Guide\nRebase before merging.\n";
const SECRET: &str = "TOP-SECRET-OUTSIDE-SKILLS";

fn sha(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// `<dir>/skills` with one good skill (`git-workflow`, a supporting file and a symlinked file),
/// a second good skill `secret-ops`, and the bad ones: no frontmatter, a name that differs from
/// its folder, a folder name breaking the rules, a symlinked folder and a symlinked `SKILL.md`
/// (both reaching `<dir>/outside`, which holds a secret).
fn skills_dir(dir: &Path) -> PathBuf {
    let outside = dir.join("outside");
    std::fs::create_dir_all(outside.join("leak")).unwrap();
    std::fs::write(outside.join("secret.md"), SECRET).unwrap();
    std::fs::write(
        outside.join("leak/SKILL.md"),
        format!("---\nname: leak\ndescription: x\n---\n{SECRET}\n"),
    )
    .unwrap();
    std::fs::write(
        outside.join("linked-md.md"),
        format!("---\nname: linked-md\ndescription: x\n---\n{SECRET}\n"),
    )
    .unwrap();
    let skills = dir.join("skills");
    let git = skills.join("git-workflow");
    std::fs::create_dir_all(git.join("references")).unwrap();
    std::fs::write(git.join("SKILL.md"), SKILL_MD).unwrap();
    std::fs::write(git.join("references/guide.md"), GUIDE).unwrap();
    std::os::unix::fs::symlink(outside.join("secret.md"), git.join("references/secret.md"))
        .unwrap();
    let ops = skills.join("secret-ops");
    std::fs::create_dir_all(&ops).unwrap();
    std::fs::write(
        ops.join("SKILL.md"),
        "---\nname: secret-ops\ndescription: Rotate the production keys\n---\nStep one.\n",
    )
    .unwrap();
    for (folder, text) in [
        ("no-frontmatter", "# just markdown\n".to_string()),
        (
            "mismatch",
            "---\nname: other-name\ndescription: x\n---\n".to_string(),
        ),
        (
            "Bad_Name",
            "---\nname: Bad_Name\ndescription: x\n---\n".to_string(),
        ),
    ] {
        std::fs::create_dir_all(skills.join(folder)).unwrap();
        std::fs::write(skills.join(folder).join("SKILL.md"), text).unwrap();
    }
    std::os::unix::fs::symlink(outside.join("leak"), skills.join("leak")).unwrap();
    std::fs::create_dir_all(skills.join("linked-md")).unwrap();
    std::os::unix::fs::symlink(
        outside.join("linked-md.md"),
        skills.join("linked-md/SKILL.md"),
    )
    .unwrap();
    skills
}

/// A config with workspaces `{id: profile}` under `<dir>/ws-<id>`, the store in `dir`, `extra`
/// merged in.
fn config(dir: &Path, workspaces: &[(&str, &str)], extra: Value) -> PathBuf {
    let mut ws = serde_json::Map::new();
    for (id, profile) in workspaces {
        let root = dir.join(format!("ws-{id}"));
        std::fs::create_dir_all(&root).unwrap();
        ws.insert((*id).to_string(), json!({"root": root, "profile": profile}));
    }
    let mut cfg = json!({"store": dir.join("store.db"), "workspaces": ws});
    if let (Value::Object(c), Value::Object(e)) = (&mut cfg, extra) {
        c.extend(e);
    }
    let path = dir.join("config.json");
    std::fs::write(&path, cfg.to_string()).unwrap();
    path
}

fn serve(dir: &Path, cfg: &Path) -> StdioServer {
    StdioServer::serve()
        .arg("--config")
        .arg(cfg)
        .stderr_file(dir.join("stderr.log"))
        .spawn()
}

/// The 2026-07-28 `_meta` of a stateless request.
fn modern() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "skills-2026", "version": "1"},
    })
}

/// `params` with the 2026 `_meta` when `era_2026`.
fn p(era_2026: bool, mut params: Value) -> Value {
    if era_2026 {
        params["_meta"] = modern();
    }
    params
}

fn uris(list: &Value, key: &str, field: &str) -> Vec<String> {
    list["result"][key]
        .as_array()
        .unwrap_or_else(|| panic!("{list}"))
        .iter()
        .map(|r| r[field].as_str().unwrap().to_string())
        .collect()
}

/// Everything a client of either era sees of the good skill, and nothing of the bad ones.
fn check_skills_served(s: &mut StdioServer, era_2026: bool) {
    let all = s.request("resources/list", p(era_2026, json!({})));
    assert!(!all.to_string().contains(SECRET), "{all}");
    assert_eq!(
        uris(&all, "resources", "uri"),
        [
            "skill://git-workflow/SKILL.md",
            "skill://git-workflow/references/guide.md",
            "skill://secret-ops/SKILL.md",
        ],
        "{all}"
    );
    let first = &all["result"]["resources"][0];
    assert_eq!(first["name"], "git-workflow", "{all}");
    assert_eq!(first["mimeType"], "text/markdown", "{all}");
    assert_eq!(
        first["description"], "Follow the team's Git conventions",
        "{all}"
    );
    let read = s.request(
        "resources/read",
        p(era_2026, json!({"uri": "skill://git-workflow/SKILL.md"})),
    );
    assert_eq!(read["result"]["contents"][0]["text"], SKILL_MD, "{read}");
    assert_eq!(
        read["result"]["contents"][0]["mimeType"], "text/markdown",
        "{read}"
    );
    let guide = s.request(
        "resources/read",
        p(
            era_2026,
            json!({"uri": "skill://git-workflow/references/guide.md"}),
        ),
    );
    assert_eq!(guide["result"]["contents"][0]["text"], GUIDE, "{guide}");
    // SEP-2640 entries: verbatim frontmatter, a manifest with digests and sizes.
    let list = s.request("skills/list", p(era_2026, json!({})));
    let skills = list["result"]["skills"]
        .as_array()
        .unwrap_or_else(|| panic!("{list}"));
    assert_eq!(skills.len(), 2, "{list}");
    let git = &skills[0];
    assert_eq!(git["uri"], "skill://git-workflow/SKILL.md", "{list}");
    assert_eq!(
        git["frontmatter"],
        json!({"name": "git-workflow", "description": "Follow the team's Git conventions",
               "license": "MIT", "metadata": {"owner": "ops"}}),
        "{list}"
    );
    assert_eq!(
        git["resources"],
        json!([
            {"uri": "skill://git-workflow/SKILL.md", "digest": sha(SKILL_MD.as_bytes()),
             "size": SKILL_MD.len()},
            {"uri": "skill://git-workflow/references/guide.md", "digest": sha(GUIDE.as_bytes()),
             "size": GUIDE.len()},
        ]),
        "{list}"
    );
    assert!(list["result"].get("nextCursor").is_none(), "{list}");
    let got = s.request(
        "skills/get",
        p(era_2026, json!({"uri": "skill://git-workflow/SKILL.md"})),
    );
    assert_eq!(got["result"]["skill"], *git, "{got}");
    // Prompts: one per skill; the body (after the frontmatter) as a user message.
    let prompts = s.request("prompts/list", p(era_2026, json!({})));
    assert_eq!(
        uris(&prompts, "prompts", "name"),
        ["git-workflow", "secret-ops"],
        "{prompts}"
    );
    let prompt = s.request("prompts/get", p(era_2026, json!({"name": "git-workflow"})));
    let msg = &prompt["result"]["messages"][0];
    assert_eq!(msg["role"], "user", "{prompt}");
    assert_eq!(
        msg["content"]["text"], "# Git workflow\n\nBranch from main.\n",
        "{prompt}"
    );
    // Symlinks and malformed skills are never served, whatever the route.
    for uri in [
        "skill://git-workflow/references/secret.md",
        "skill://leak/SKILL.md",
        "skill://linked-md/SKILL.md",
        "skill://mismatch/SKILL.md",
        "skill://no-frontmatter/SKILL.md",
        "skill://git-workflow/../outside/secret.md",
    ] {
        let r = s.request("resources/read", p(era_2026, json!({"uri": uri})));
        // Resource-not-found is -32002, -32602 from 2026-07-28 on (SEP-2164).
        let code = if era_2026 { -32602 } else { -32002 };
        assert_eq!(r["error"]["code"], code, "{uri}: {r}");
        assert!(!r.to_string().contains(SECRET), "{r}");
    }
    for name in ["leak", "linked-md", "mismatch"] {
        let g = s.request(
            "skills/get",
            p(era_2026, json!({"uri": format!("skill://{name}/SKILL.md")})),
        );
        assert_eq!(g["error"]["code"], -32602, "{name}: {g}");
        let pr = s.request("prompts/get", p(era_2026, json!({"name": name})));
        assert_eq!(pr["error"]["code"], -32602, "{name}: {pr}");
    }
}

#[test]
fn skills_are_resources_prompts_and_sep2640_entries_in_both_eras() {
    let t = tempfile::tempdir().unwrap();
    let skills = skills_dir(t.path());
    let cfg = config(
        t.path(),
        &[("w", "read-only")],
        json!({"skills_dir": skills}),
    );
    let mut s = serve(t.path(), &cfg);
    let init = s.initialize("skills-test");
    let caps = &init["result"]["capabilities"];
    assert!(caps["prompts"].is_object(), "{init}");
    assert!(
        caps["extensions"]["io.modelcontextprotocol/skills"].is_object(),
        "{init}"
    );
    check_skills_served(&mut s, false);
    s.close_and_wait(std::time::Duration::from_secs(20));
    let log = std::fs::read_to_string(t.path().join("stderr.log")).unwrap();
    for skipped in [
        "no-frontmatter",
        "mismatch",
        "Bad_Name",
        "leak",
        "linked-md",
    ] {
        assert!(log.contains(skipped), "{skipped} not reported: {log}");
    }
    // Each entry shown and each read is a decision in the audit log.
    let store = Store::open(&t.path().join("store.db")).unwrap();
    let rows = store
        .query_decisions(&DecisionQuery {
            tool: Some("read_skill".into()),
            ..DecisionQuery::default()
        })
        .unwrap();
    assert!(
        rows.iter()
            .any(|r| r.subject == "skill git-workflow" && r.decision == "allow"),
        "{rows:?}"
    );

    // The same over the stateless 2026-07-28 revision: no initialize.
    let mut s = serve(t.path(), &cfg);
    check_skills_served(&mut s, true);
}

/// The shipped policies and schema plus `base/skills.cedar` forbidding skill `secret-ops` to
/// the `workspace-write` profile only.
fn policies_forbidding_one_skill(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let policies = dir.join("policies");
    for sub in ["base", "profiles"] {
        std::fs::create_dir_all(policies.join(sub)).unwrap();
        for f in std::fs::read_dir(src.join("policies").join(sub)).unwrap() {
            let p = f.unwrap().path();
            std::fs::copy(&p, policies.join(sub).join(p.file_name().unwrap())).unwrap();
        }
    }
    std::fs::write(
        policies.join("base/skills.cedar"),
        "@id(\"operator.forbid.secret-ops-skill\")\n@reason(\"not for agents that write\")\n\
         forbid (\n  principal == CodeSpace::PermissionProfile::\"workspace-write\",\n  \
         action == CodeSpace::Action::\"read_skill\",\n  resource\n)\n\
         when { context has skill && context.skill.name == \"secret-ops\" };\n",
    )
    .unwrap();
    std::fs::create_dir_all(dir.join("schema")).unwrap();
    std::fs::copy(
        src.join("schema/codespace.cedarschema"),
        dir.join("schema/codespace.cedarschema"),
    )
    .unwrap();
    policies
}

#[test]
fn a_skill_forbidden_under_one_workspace_is_hidden_everywhere_and_reads_as_missing() {
    let t = tempfile::tempdir().unwrap();
    let skills = skills_dir(t.path());
    let policies = policies_forbidding_one_skill(t.path());
    // `docs` (read-only) would allow it; `app` (workspace-write) forbids it: the most restrictive
    // answer wins.
    let cfg = config(
        t.path(),
        &[("docs", "read-only"), ("app", "workspace-write")],
        json!({"skills_dir": skills, "policies": policies}),
    );
    let mut s = serve(t.path(), &cfg);
    s.initialize("skills-policy-test");
    let all = s.request("resources/list", json!({}));
    assert_eq!(
        uris(&all, "resources", "uri"),
        [
            "skill://git-workflow/SKILL.md",
            "skill://git-workflow/references/guide.md"
        ],
        "{all}"
    );
    let list = s.request("skills/list", json!({}));
    assert_eq!(
        uris(&list, "skills", "uri"),
        ["skill://git-workflow/SKILL.md"],
        "{list}"
    );
    let prompts = s.request("prompts/list", json!({}));
    assert_eq!(
        uris(&prompts, "prompts", "name"),
        ["git-workflow"],
        "{prompts}"
    );
    // A denied skill answers exactly as a missing one (the URI aside).
    let denied = s.request(
        "resources/read",
        json!({"uri": "skill://secret-ops/SKILL.md"}),
    );
    let missing = s.request("resources/read", json!({"uri": "skill://nope/SKILL.md"}));
    assert_eq!(
        denied["error"]["code"], missing["error"]["code"],
        "{denied}"
    );
    assert_eq!(
        denied["error"]["message"]
            .as_str()
            .unwrap()
            .replace("secret-ops", "nope"),
        missing["error"]["message"].as_str().unwrap(),
        "{denied} {missing}"
    );
    assert!(!denied.to_string().contains("Rotate"), "{denied}");
    let get = s.request("skills/get", json!({"uri": "skill://secret-ops/SKILL.md"}));
    let get_missing = s.request("skills/get", json!({"uri": "skill://nope/SKILL.md"}));
    assert_eq!(get["error"]["code"], -32602, "{get}");
    assert_eq!(
        get["error"]["message"]
            .as_str()
            .unwrap()
            .replace("secret-ops", "nope"),
        get_missing["error"]["message"].as_str().unwrap()
    );
    let prompt = s.request("prompts/get", json!({"name": "secret-ops"}));
    let prompt_missing = s.request("prompts/get", json!({"name": "nope"}));
    assert_eq!(prompt["error"]["code"], -32602, "{prompt}");
    assert_eq!(
        prompt["error"]["message"]
            .as_str()
            .unwrap()
            .replace("secret-ops", "nope"),
        prompt_missing["error"]["message"].as_str().unwrap()
    );
    s.close_and_wait(std::time::Duration::from_secs(20));
    // The refusal is audited under the forbidding workspace, naming the operator's policy.
    let store = Store::open(&t.path().join("store.db")).unwrap();
    let rows = store
        .query_decisions(&DecisionQuery {
            tool: Some("read_skill".into()),
            ..DecisionQuery::default()
        })
        .unwrap();
    assert!(
        rows.iter().any(|r| r.subject == "skill secret-ops"
            && r.workspace == "app"
            && r.decision == "deny"
            && r.policy_ids
                .iter()
                .any(|id| id == "operator.forbid.secret-ops-skill")),
        "{rows:?}"
    );
    assert!(
        rows.iter().any(|r| r.subject == "skill secret-ops"
            && r.workspace == "docs"
            && r.decision == "allow"),
        "{rows:?}"
    );
}

#[test]
fn a_skills_dir_overlapping_a_workspace_is_refused_at_load() {
    let t = tempfile::tempdir().unwrap();
    let inside = t.path().join("ws-w/skills");
    std::fs::create_dir_all(&inside).unwrap();
    let holding = t.path().to_path_buf();
    for dir in [inside, holding] {
        let cfg = config(
            t.path(),
            &[("w", "workspace-write")],
            json!({"skills_dir": dir}),
        );
        let out = std::process::Command::new(crate::stdio_common::BIN)
            .args(["serve", "--config"])
            .arg(&cfg)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("skills_dir") && err.contains("the root of workspace `w`"),
            "{err}"
        );
    }
    // Without skills_dir, no prompts and no skills extension are declared.
    let cfg = config(t.path(), &[("w", "workspace-write")], json!({}));
    let mut s = serve(t.path(), &cfg);
    let init = s.initialize("no-skills");
    assert!(
        init["result"]["capabilities"].get("prompts").is_none(),
        "{init}"
    );
    assert!(
        init["result"]["capabilities"]["extensions"]
            .get("io.modelcontextprotocol/skills")
            .is_none(),
        "{init}"
    );
    let list = s.request("prompts/list", json!({}));
    assert_eq!(list["error"]["code"], -32601, "{list}");
}

#[test]
fn skills_resources_and_prompts_are_paged() {
    let t = tempfile::tempdir().unwrap();
    let skills = t.path().join("skills");
    for i in 0..120 {
        let name = format!("skill-{i:03}");
        std::fs::create_dir_all(skills.join(&name)).unwrap();
        std::fs::write(
            skills.join(&name).join("SKILL.md"),
            format!("---\nname: {name}\ndescription: number {i}\n---\nbody {i}\n"),
        )
        .unwrap();
    }
    let cfg = config(
        t.path(),
        &[("w", "read-only")],
        json!({"skills_dir": skills}),
    );
    let mut s = serve(t.path(), &cfg);
    s.initialize("skills-pages");
    for (method, key, field, page) in [
        ("resources/list", "resources", "uri", 100),
        ("skills/list", "skills", "uri", 50),
        ("prompts/list", "prompts", "name", 50),
    ] {
        let mut seen = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let params = match &cursor {
                Some(c) => json!({"cursor": c}),
                None => json!({}),
            };
            let r = s.request(method, params);
            let got = uris(&r, key, field);
            assert!(got.len() <= page, "{method}: {r}");
            seen.extend(got);
            match r["result"]["nextCursor"].as_str() {
                Some(c) => cursor = Some(c.to_string()),
                None => break,
            }
        }
        assert_eq!(seen.len(), 120, "{method}");
        let mut sorted = seen.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), 120, "{method}: {seen:?}");
    }
}
