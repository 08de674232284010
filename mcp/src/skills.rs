//! Operator skills over MCP (issue 31), in the shape of the skills extension (SEP-2640,
//! `io.modelcontextprotocol/skills`): every file of a skill folder of `skills_dir` is a resource
//! `skill://<name>/<path>` (read with `resources/read`, listed after the process resources),
//! `skills/list` and `skills/get` return SEP-2640 entries (verbatim frontmatter and a manifest of
//! sha256 digests), and each skill is also a prompt named after it whose message is the
//! `SKILL.md` body. Every entry shown and every read is a `read_skill` decision of the gateway;
//! a skill the caller may not read is absent from every list and answers exactly as a missing
//! one does. Disk work runs on the blocking pool ([`codespace_engine::skills`]).

use base64::Engine as _;
use codespace_engine::skills::{self as catalog, Skill};
use codespace_engine::{Gateway, Session};
use rmcp::ErrorData as McpError;
use rmcp::model::{
    GetPromptResult, GetSkillResult, ListPromptsResult, ListSkillsResult, Prompt, PromptMessage,
    ReadResourceResult, Resource, ResourceContents, Role, SkillFrontmatter, SkillResource,
    SkillResources,
};

/// The URI scheme of skill files (SEP-2640).
pub const SKILL_SCHEME: &str = "skill://";
/// Skills per `skills/list` page and prompts per `prompts/list` page.
pub const SKILLS_PAGE: usize = 50;

/// Whether the operator configured `skills_dir` (prompts and the skills extension are declared
/// only then).
pub fn configured(gw: &Gateway) -> bool {
    gw.config().skills_dir.is_some()
}

/// The URI of file `path` of skill `name`.
pub fn file_uri(name: &str, path: &str) -> String {
    format!("{SKILL_SCHEME}{name}/{path}")
}

/// The skills the caller may see: the catalog loaded on the blocking pool, then one `read_skill`
/// decision per skill (under every workspace); a denied skill is left out.
pub async fn visible(gw: &Gateway, session: &Session) -> Vec<Skill> {
    let Some(dir) = gw.config().skills_dir.clone() else {
        return Vec::new();
    };
    let cat = tokio::task::spawn_blocking(move || catalog::load(&dir))
        .await
        .unwrap_or_default();
    let names: Vec<String> = cat.skills.iter().map(|s| s.name.clone()).collect();
    let allowed = codespace_engine::gateway::skills_allowed(gw, session, &names);
    cat.skills
        .into_iter()
        .zip(allowed)
        .filter_map(|(s, ok)| ok.then_some(s))
        .collect()
}

/// Skill `name`, when it exists and the caller may read it. `None` otherwise: a denied skill and
/// a missing one answer alike. The decision comes first, so it does not depend on the disk.
async fn one(gw: &Gateway, session: &Session, name: &str) -> Option<Skill> {
    let dir = gw.config().skills_dir.clone()?;
    if !catalog::valid_name(name) {
        return None;
    }
    let allowed = codespace_engine::gateway::skills_allowed(gw, session, &[name.to_string()]);
    if !allowed.first().copied().unwrap_or(false) {
        return None;
    }
    let name = name.to_string();
    tokio::task::spawn_blocking(move || catalog::load_one(&dir, &name))
        .await
        .ok()?
        .ok()
}

fn mime_of(path: &str) -> &'static str {
    match path.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase()) {
        Some(e) if e == "md" || e == "markdown" => "text/markdown",
        Some(e) if e == "txt" => "text/plain",
        Some(e) if e == "json" => "application/json",
        Some(e) if e == "yaml" || e == "yml" => "application/yaml",
        Some(e) if e == "py" => "text/x-python",
        Some(e) if e == "sh" => "text/x-shellscript",
        _ => "application/octet-stream",
    }
}

/// The SEP-2640 entry of a skill: `SKILL.md`'s URI, the verbatim frontmatter, every file with
/// its digest and size.
pub fn entry(s: &Skill) -> Result<rmcp::model::Skill, McpError> {
    let frontmatter: SkillFrontmatter =
        serde_json::from_value(serde_json::Value::Object(s.frontmatter.clone()))
            .map_err(|e| McpError::internal_error(format!("skill {}: {e}", s.name), None))?;
    let files = s
        .files
        .iter()
        .map(|f| SkillResource::new(file_uri(&s.name, &f.path), f.digest.clone(), f.size))
        .collect();
    Ok(rmcp::model::Skill::new(
        file_uri(&s.name, catalog::SKILL_MD),
        frontmatter,
        SkillResources::Files(files),
    ))
}

/// The resources of `skills`: each skill's `SKILL.md` (named and described by its frontmatter),
/// then its other files.
pub fn resources(skills: &[Skill]) -> Vec<Resource> {
    let mut out = Vec::new();
    for s in skills {
        for f in &s.files {
            let r = if f.path == catalog::SKILL_MD {
                Resource::new(file_uri(&s.name, &f.path), s.name.clone())
                    .with_title(format!("skill {}", s.name))
                    .with_description(s.description.clone())
            } else {
                Resource::new(file_uri(&s.name, &f.path), format!("{}/{}", s.name, f.path))
                    .with_description(format!("A file of skill `{}`.", s.name))
            };
            out.push(r.with_mime_type(mime_of(&f.path)).with_size(f.size));
        }
    }
    out
}

fn not_found(uri: &str) -> McpError {
    McpError::resource_not_found(format!("unknown resource {uri}"), None)
}

/// `resources/read` of a `skill://<name>/<path>` URI: the file's text (or base64 for bytes that
/// are not UTF-8), when the skill is one the caller may read and lists that file.
pub async fn read(
    gw: &Gateway,
    session: &Session,
    uri: &str,
) -> Result<ReadResourceResult, McpError> {
    let rest = uri
        .strip_prefix(SKILL_SCHEME)
        .ok_or_else(|| not_found(uri))?;
    let (name, path) = rest.split_once('/').ok_or_else(|| not_found(uri))?;
    let skill = one(gw, session, name).await.ok_or_else(|| not_found(uri))?;
    let Some(dir) = gw.config().skills_dir.clone() else {
        return Err(not_found(uri));
    };
    let path = path.to_string();
    let mime = mime_of(&path);
    let bytes = tokio::task::spawn_blocking(move || catalog::read_file(&dir, &skill, &path))
        .await
        .map_err(|e| McpError::internal_error(e.to_string(), None))?
        .map_err(|_| not_found(uri))?;
    let contents = match String::from_utf8(bytes) {
        Ok(text) => ResourceContents::text(text, uri),
        Err(e) => ResourceContents::blob(
            base64::engine::general_purpose::STANDARD.encode(e.into_bytes()),
            uri,
        ),
    }
    .with_mime_type(mime);
    Ok(ReadResourceResult::new(vec![contents]))
}

fn page_start(cursor: Option<&str>) -> Result<usize, McpError> {
    match cursor {
        None => Ok(0),
        Some(c) => c
            .parse::<usize>()
            .map_err(|_| McpError::invalid_params("unknown cursor", None)),
    }
}

/// One page of the skills the caller may read ([`SKILLS_PAGE`] of them from the cursor's offset)
/// and the next page's cursor.
async fn visible_page(
    gw: &Gateway,
    session: &Session,
    cursor: Option<&str>,
) -> Result<(Vec<Skill>, Option<String>), McpError> {
    let start = page_start(cursor)?;
    let skills = visible(gw, session).await;
    let next = start.saturating_add(SKILLS_PAGE);
    let next = (next < skills.len()).then(|| next.to_string());
    Ok((
        skills.into_iter().skip(start).take(SKILLS_PAGE).collect(),
        next,
    ))
}

/// `skills/list`: the entries of the skills the caller may read, [`SKILLS_PAGE`] at a time; the
/// cursor is the offset of the next page.
pub async fn list_skills(
    gw: &Gateway,
    session: &Session,
    cursor: Option<&str>,
) -> Result<ListSkillsResult, McpError> {
    let (skills, next) = visible_page(gw, session, cursor).await?;
    let page = skills.iter().map(entry).collect::<Result<Vec<_>, _>>()?;
    let mut out = ListSkillsResult::with_all_items(page);
    out.next_cursor = next;
    Ok(out)
}

/// `skills/get` of a `SKILL.md` URI: its entry, or `-32602` (SEP-2640) for a skill that is
/// missing or that the caller may not read.
pub async fn get_skill(
    gw: &Gateway,
    session: &Session,
    uri: &str,
) -> Result<GetSkillResult, McpError> {
    let unknown = || McpError::invalid_params(format!("unknown skill {uri}"), None);
    let name = uri
        .strip_prefix(SKILL_SCHEME)
        .and_then(|r| r.strip_suffix(catalog::SKILL_MD))
        .and_then(|r| r.strip_suffix('/'))
        .ok_or_else(unknown)?;
    let skill = one(gw, session, name).await.ok_or_else(unknown)?;
    Ok(GetSkillResult::new(entry(&skill)?))
}

/// `prompts/list`: one prompt per skill the caller may read, named after it.
pub async fn list_prompts(
    gw: &Gateway,
    session: &Session,
    cursor: Option<&str>,
) -> Result<ListPromptsResult, McpError> {
    let (skills, next) = visible_page(gw, session, cursor).await?;
    let page = skills
        .iter()
        .map(|s| {
            let mut p = Prompt::new(s.name.clone(), Some(s.description.clone()), None);
            p.title = Some(format!("skill {}", s.name));
            p
        })
        .collect();
    let mut out = ListPromptsResult::with_all_items(page);
    out.next_cursor = next;
    Ok(out)
}

/// `prompts/get` of a skill: its `SKILL.md` body (after the frontmatter) as one user message;
/// `-32602` for a prompt that is missing or that the caller may not read.
pub async fn get_prompt(
    gw: &Gateway,
    session: &Session,
    name: &str,
) -> Result<GetPromptResult, McpError> {
    let skill = one(gw, session, name)
        .await
        .ok_or_else(|| McpError::invalid_params(format!("unknown prompt {name}"), None))?;
    Ok(
        GetPromptResult::new(vec![PromptMessage::new_text(Role::User, skill.body)])
            .with_description(skill.description),
    )
}
