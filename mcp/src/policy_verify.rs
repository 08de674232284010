//! `codespace policy verify`: properties of a policy set proven with Cedar's symbolic compiler
//! (`cedar-policy-symcc`) and an SMT solver (cvc5), for every request the schema allows, not
//! only the ones tests or logs happen to hold. A property that does not hold comes with a
//! counterexample (a request and entities) that is replayed through the real authorizer before
//! it is shown. Principals are the config's profiles with their real parents (the operator's
//! `extends` tree), so no property needs hand-written assumptions about them. Besides the fixed
//! properties, the command-write ones (`policy_verify_props`) and an operator's own
//! (`--properties FILE`). Exit 0: every property holds; 1: one does not (or a check failed);
//! 4: no solver.

use crate::policy_verify_props::{self as props, Named, ProfileTree, Property};
use anyhow::{Result, anyhow};
use cedar_policy::{
    Authorizer, Decision, Entities, EntityUid, Policy, PolicySet, Request, RequestEnv, Schema,
};
use cedar_policy_symcc::solver::LocalSolver;
use cedar_policy_symcc::{CedarSymCompiler, CompiledPolicy, CompiledPolicySet};
use codespace_engine::Config;
use codespace_engine::policy::{PolicySnapshot, PolicySource, compile, profiles_named};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::str::FromStr;

/// Exit status when no solver can be found.
pub const NO_SOLVER: u8 = 4;

/// Flags of `policy verify`.
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// Also prove the set is no more permissive than the set in directory OLD (every request
    /// it allows, OLD allows too).
    #[arg(long, value_name = "OLD")]
    pub implies: Option<PathBuf>,
    /// OLD's schema (default: <OLD>/../schema/codespace.cedarschema when it exists, else the
    /// set's own schema).
    #[arg(long, value_name = "FILE")]
    pub implies_schema: Option<PathBuf>,
    /// Also prove the properties in this TOML file (`[[property]]` tables with one of
    /// `subset`, `never_writes`, `writes_only`; see docs/policy.md, "Symbolic checks").
    #[arg(long, value_name = "FILE")]
    pub properties: Option<PathBuf>,
}

/// The cvc5 executable: `$CVC5`, else `cvc5` on `PATH`.
pub fn find_solver() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CVC5").map(PathBuf::from) {
        return p.is_file().then_some(p);
    }
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join("cvc5"))
            .find(|p| p.is_file())
    })
}

/// What one property came to.
struct Outcome {
    name: String,
    checks: usize,
    failures: Vec<String>,
}

fn group_members(schema: &Schema, group: &str) -> BTreeSet<String> {
    let Ok(actions) = schema.action_entities() else {
        return BTreeSet::new();
    };
    let Ok(group_uid) = EntityUid::from_str(&format!("CodeSpace::Action::\"{group}\"")) else {
        return BTreeSet::new();
    };
    actions
        .iter()
        .filter(|e| {
            actions
                .ancestors(&e.uid())
                .is_some_and(|mut a| a.any(|x| *x == group_uid))
        })
        .map(|e| e.uid().id().unescaped().to_string())
        .collect()
}

fn action_id(env: &RequestEnv) -> String {
    env.action().id().unescaped().to_string()
}

fn with_extra(set: &PolicySet, extra: &str) -> Result<PolicySet> {
    let mut out = set.clone();
    let parsed = PolicySet::from_str(extra).map_err(|e| anyhow!("verify: {e}"))?;
    for (i, p) in parsed.policies().enumerate() {
        out.add(p.new_id(cedar_policy::PolicyId::new(format!(
            "verify.assumption.{i}"
        ))))
        .map_err(|e| anyhow!("verify: {e}"))?;
    }
    Ok(out)
}

/// A Cedar string literal's body (profile ids never hold quotes or backslashes; escaped anyway).
fn lit(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

fn profile_text(id: &str) -> String {
    format!("CodeSpace::PermissionProfile::\"{}\"", lit(id))
}

/// Assumptions that make the symbolic principal one of `among`, and every profile of the tree
/// sit exactly where the config puts it: `P in Q` holds iff Q is P or one of its ancestors, for
/// every profile P of the tree and every profile Q the tree or the policies name.
fn tree_assumptions(tree: &ProfileTree, names: &BTreeSet<String>, among: &[String]) -> String {
    let mut out = String::new();
    let alts: Vec<String> = among
        .iter()
        .map(|p| format!("principal == {}", profile_text(p)))
        .collect();
    out.push_str(&format!(
        "forbid (principal, action, resource) unless {{ {} }};\n",
        if alts.is_empty() {
            "false".to_string()
        } else {
            alts.join(" || ")
        }
    ));
    for p in tree.ids() {
        for q in names.iter().filter(|q| *q != p) {
            let fact = format!("{} in {}", profile_text(p), profile_text(q));
            if tree.is_in(p, q) {
                out.push_str(&format!(
                    "forbid (principal, action, resource) unless {{ {fact} }};\n"
                ));
            } else {
                out.push_str(&format!(
                    "forbid (principal, action, resource) when {{ {fact} }};\n"
                ));
            }
        }
    }
    out
}

/// Facts of the request model: `path` is workspace-relative and normalized (never empty or
/// absolute, no `.`/`..`/empty component; `.` is the root), `basename` is its last component
/// (for the names a property's globs end with) and never holds a `/`.
fn model_facts(names: &BTreeSet<String>) -> String {
    let mut out = String::from(
        "forbid (principal, action, resource) when { resource.basename like \"*/*\" };\n\
         forbid (principal, action, resource) when { resource.path == \"\" || \
         resource.path like \"/*\" || resource.path like \"*/\" || resource.path like \"*//*\" || \
         resource.path == \"..\" || resource.path like \"../*\" || resource.path like \"*/../*\" || \
         resource.path like \"*/..\" || resource.path like \"./*\" || resource.path like \"*/./*\" || \
         resource.path like \"*/.\" };\n",
    );
    for b in names {
        let b = lit(b);
        let ends = format!("(resource.path == \"{b}\" || resource.path like \"*/{b}\")");
        out.push_str(&format!(
            "forbid (principal, action, resource) when {{ {ends} && resource.basename != \"{b}\" }};\n"
        ));
        out.push_str(&format!(
            "forbid (principal, action, resource) when {{ resource.basename == \"{b}\" && !{ends} }};\n"
        ));
    }
    out
}

/// The entities of a counterexample with the profiles replaced by the config's tree (the
/// solver only fixed what the assumptions pinned).
fn with_tree(entities: &Entities, tree: &ProfileTree) -> Entities {
    let mut ents: Vec<cedar_policy::Entity> = entities
        .iter()
        .filter(|e| !is_profile(&e.uid()))
        .cloned()
        .collect();
    for id in tree.ids() {
        let (Ok(uid), parent) = (
            EntityUid::from_str(&profile_text(id)),
            tree.parent(id)
                .map(|p| EntityUid::from_str(&profile_text(p))),
        ) else {
            continue;
        };
        let parents: HashSet<EntityUid> = parent.and_then(Result::ok).into_iter().collect();
        ents.push(cedar_policy::Entity::new_no_attrs(uid, parents));
    }
    Entities::from_entities(ents, None).unwrap_or_else(|_| entities.clone())
}

fn is_profile(uid: &EntityUid) -> bool {
    let ty = uid.type_name().to_string();
    ty == "CodeSpace::PermissionProfile" || ty == "PermissionProfile"
}

/// An entity's attributes as JSON, without `skip` (the parent reference shown separately).
fn attrs(entities: &Entities, uid: &EntityUid, skip: &str) -> Option<serde_json::Value> {
    let mut v = entities
        .get(uid)?
        .to_json_value()
        .ok()?
        .get("attrs")?
        .clone();
    if let Some(m) = v.as_object_mut() {
        m.remove(skip);
    }
    Some(v)
}

/// The request in words: principal, action, the resource path and its facts, the command, the
/// workspace and environment switches, the context.
fn describe_request(request: &Request, entities: &Entities) -> String {
    let mut parts = vec![
        format!(
            "principal {}",
            request
                .principal()
                .map_or_else(|| "?".into(), ToString::to_string)
        ),
        format!(
            "action {}",
            request
                .action()
                .map_or_else(|| "?".into(), ToString::to_string)
        ),
    ];
    let resource = request.resource().and_then(|r| entities.get(r));
    if let Some(r) = resource {
        if let Some(Ok(cedar_policy::EvalResult::String(p))) = r.attr("path") {
            parts.push(format!("path {p:?}"));
        }
        if let Some(a) = attrs(entities, &r.uid(), "workspace") {
            parts.push(format!("resource attributes {a}"));
        }
        let ws = r
            .attr("workspace")
            .and_then(Result::ok)
            .and_then(|w| match w {
                cedar_policy::EvalResult::EntityUid(u) => Some(u),
                _ => None,
            });
        if let Some(ws) = ws {
            if let Some(a) = attrs(entities, &ws, "environment") {
                parts.push(format!("workspace {a}"));
            }
            let env = entities
                .get(&ws)
                .and_then(|w| w.attr("environment"))
                .and_then(Result::ok)
                .and_then(|e| match e {
                    cedar_policy::EvalResult::EntityUid(u) => Some(u),
                    _ => None,
                });
            if let Some(a) = env.and_then(|e| attrs(entities, &e, "")) {
                parts.push(format!("environment {a}"));
            }
        }
    }
    if let Some(c) = request.context() {
        if let Some(cmd) = command_words(c) {
            parts.push(cmd);
        }
        parts.push(format!("context {}", render_context(c)));
    }
    parts.join(", ")
}

/// `command program "make", line "make test"` when the context has a command.
fn command_words(c: &cedar_policy::Context) -> Option<String> {
    let cedar_policy::EvalResult::Record(r) = c.get("command")? else {
        return None;
    };
    let s = |k: &str| match r.get(k) {
        Some(cedar_policy::EvalResult::String(v)) => Some(v.clone()),
        _ => None,
    };
    Some(format!(
        "command program {:?}, line {:?}",
        s("program").unwrap_or_default(),
        s("line").unwrap_or_default()
    ))
}

/// What the real authorizer says about `request` under `set`: `allow` / `deny`, then
/// ` (by ids)` and ` errors: …` when there are some.
fn decide(set: &PolicySet, request: &Request, entities: &Entities) -> (&'static str, String) {
    // `policy verify` replays a solver's counterexample to report it; nothing is enforced.
    #[allow(clippy::disallowed_methods)]
    let resp = Authorizer::new().is_authorized(request, set, entities);
    let ids: Vec<String> = resp
        .diagnostics()
        .reason()
        .map(ToString::to_string)
        .collect();
    let errs: Vec<String> = resp.diagnostics().errors().map(|e| e.to_string()).collect();
    (
        if resp.decision() == Decision::Allow {
            "allow"
        } else {
            "deny"
        },
        format!(
            "{}{}",
            if ids.is_empty() {
                String::new()
            } else {
                format!(" (by {})", ids.join(", "))
            },
            if errs.is_empty() {
                String::new()
            } else {
                format!(" errors: {}", errs.join("; "))
            },
        ),
    )
}

/// A counterexample, replayed through the real authorizer under `set`.
fn replay(what: &str, set: &PolicySet, request: &Request, entities: &Entities) -> String {
    let (decision, why) = decide(set, request, entities);
    format!(
        "counterexample: {}; the authorizer says {decision} under {what}{why}",
        describe_request(request, entities),
    )
}

/// A context as Cedar text: `{command: {…}, session: {…}}`.
fn render_context(c: &cedar_policy::Context) -> String {
    let mut keys: Vec<String> = c.clone().into_iter().map(|(k, _)| k).collect();
    keys.sort();
    let parts: Vec<String> = keys
        .iter()
        .map(|k| match c.get(k) {
            Some(v) => format!("{k}: {v}"),
            None => format!("{k}: ?"),
        })
        .collect();
    format!("{{{}}}", parts.join(", "))
}

/// The set as profile `b` sees it: each policy's principal scope decided for `b` on the tree
/// (a policy whose scope cannot match `b` is dropped), and `principal` in conditions replaced by
/// `b`'s entity, so the set can be compared with itself under another principal.
fn as_profile(set: &PolicySet, b: &str, tree: &ProfileTree) -> Result<PolicySet> {
    fn replace_principal(v: &mut serde_json::Value, with: &serde_json::Value) {
        match v {
            serde_json::Value::Object(m) => {
                if m.len() == 1 && m.get("Var").and_then(|x| x.as_str()) == Some("principal") {
                    *v = with.clone();
                    return;
                }
                for x in m.values_mut() {
                    replace_principal(x, with);
                }
            }
            serde_json::Value::Array(items) => {
                for x in items {
                    replace_principal(x, with);
                }
            }
            _ => {}
        }
    }
    let profile_ty = |t: Option<&serde_json::Value>| {
        matches!(
            t.and_then(|t| t.as_str()),
            Some("CodeSpace::PermissionProfile" | "PermissionProfile")
        )
    };
    // Whether `b` is `in` / `==` the entity of a scope.
    let matches = |op: &str, e: &serde_json::Value| -> Result<bool> {
        // A linked policy's slot value is `{"__entity": {type, id}}`.
        let e = e.get("__entity").unwrap_or(e);
        let id = e
            .get("id")
            .and_then(|i| i.as_str())
            .ok_or_else(|| anyhow!("a template slot in a principal scope"))?;
        if !profile_ty(e.get("type")) {
            return Ok(false);
        }
        Ok(if op == "==" {
            id == b
        } else {
            tree.is_in(b, id)
        })
    };
    let entity = serde_json::json!({"Value": {"__entity": {"type": "CodeSpace::PermissionProfile", "id": b}}});
    let mut out = PolicySet::new();
    for p in set.policies() {
        let mut est = p.to_json().map_err(|e| anyhow!("{}: {e}", p.id()))?;
        let scope = est
            .get("principal")
            .cloned()
            .unwrap_or(serde_json::json!({"op": "All"}));
        let keep = match scope.get("op").and_then(|o| o.as_str()) {
            Some("All") => true,
            Some(op @ ("==" | "in")) => match scope.get("entity") {
                Some(e) => matches(op, e)?,
                None => return Err(anyhow!("{}: a template slot in a principal scope", p.id())),
            },
            Some("is") => {
                profile_ty(scope.get("entity_type"))
                    && match scope.get("in").and_then(|i| i.get("entity")) {
                        Some(e) => matches("in", e)?,
                        None => true,
                    }
            }
            _ => {
                return Err(anyhow!(
                    "{}: principal scope {scope} not understood",
                    p.id()
                ));
            }
        };
        if !keep {
            continue;
        }
        if let Some(m) = est.as_object_mut() {
            m.insert("principal".into(), serde_json::json!({"op": "All"}));
            if let Some(c) = m.get_mut("conditions") {
                replace_principal(c, &entity);
            }
        }
        let policy =
            Policy::from_json(Some(p.id().clone()), est).map_err(|e| anyhow!("{}: {e}", p.id()))?;
        out.add(policy).map_err(|e| anyhow!("{}: {e}", p.id()))?;
    }
    Ok(out)
}

async fn always_denies(
    cc: &mut CedarSymCompiler<LocalSolver>,
    live: &PolicySet,
    augmented: &PolicySet,
    ctx: &Ctx<'_>,
    env: &RequestEnv,
) -> Result<Option<String>> {
    let compiled = CompiledPolicySet::compile(augmented, env, ctx.schema)
        .map_err(|e| anyhow!("{}: cannot compile: {e}", action_id(env)))?;
    let cex = cc
        .check_always_denies_with_counterexample_opt(&compiled)
        .await
        .map_err(|e| anyhow!("{}: solver: {e}", action_id(env)))?;
    Ok(cex.map(|c| {
        replay(
            "the set",
            live,
            &c.request,
            &with_tree(&c.entities, ctx.tree),
        )
    }))
}

/// What every check shares: the schema, the config's profile tree, and every profile name the
/// tree or the policies use.
struct Ctx<'a> {
    schema: &'a Schema,
    tree: &'a ProfileTree,
    names: BTreeSet<String>,
}

/// The profile tree of `config` (the built-in profiles without one).
fn tree_of(config: Option<&Config>) -> ProfileTree {
    let profiles = config.map_or_else(codespace_engine::config::builtin_profiles, |c| {
        c.profiles.clone()
    });
    ProfileTree::new(
        profiles
            .into_iter()
            .map(|(id, p)| (id, p.extends))
            .collect::<BTreeMap<_, _>>(),
    )
}

/// `codespace policy verify`.
pub fn verify(
    args: &VerifyArgs,
    source: &PolicySource,
    config: Option<&Config>,
) -> Result<ExitCode> {
    let Some(solver_path) = find_solver() else {
        eprintln!(
            "policy verify: no SMT solver found; nothing was proven. Install cvc5 (Debian: `apt-get install cvc5`) or set CVC5=/path/to/cvc5"
        );
        return Ok(ExitCode::from(NO_SOLVER));
    };
    let links = crate::policy_cli::config_links(config);
    let snap = source
        .read()
        .map(|b| b.with_links(&links))
        .and_then(compile)
        .map_err(|e| {
            for line in &e.0 {
                eprintln!("{line}");
            }
            anyhow!("policies rejected")
        })
        .and_then(statically)?;
    let old = match &args.implies {
        Some(dir) => Some(load_old(
            dir,
            args.implies_schema.as_deref(),
            source,
            &links,
        )?),
        None => None,
    };
    let tree = tree_of(config);
    let builtin = props::builtin(&tree);
    let custom = match &args.properties {
        Some(file) => props::load(file, &tree)?,
        None => Vec::new(),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let outcomes = rt.block_on(run(
        &snap,
        old.as_ref(),
        &tree,
        &builtin,
        &custom,
        &solver_path,
    ))?;
    let mut out = std::io::stdout().lock();
    let mut failed = false;
    for o in &outcomes {
        if o.failures.is_empty() {
            writeln!(out, "proven  {} ({} check(s))", o.name, o.checks)?;
        } else {
            failed = true;
            writeln!(out, "FAILED  {} ({} check(s))", o.name, o.checks)?;
            for f in &o.failures {
                writeln!(out, "        {f}")?;
            }
        }
    }
    writeln!(
        out,
        "{} of {} properties proven for set {} with {}",
        outcomes.iter().filter(|o| o.failures.is_empty()).count(),
        outcomes.len(),
        snap.sha256,
        solver_path.display()
    )?;
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// The snapshot with its template-linked policies as the static policies they are (the
/// symbolic compiler takes static policies; templates alone never apply).
fn statically(mut snap: PolicySnapshot) -> Result<PolicySnapshot> {
    let set = codespace_engine::policy::templates::static_view(&snap.set)
        .map_err(|e| anyhow!("template links: {e}"))?;
    snap.replace_set(set);
    Ok(snap)
}

fn load_old(
    dir: &Path,
    schema: Option<&Path>,
    live: &PolicySource,
    links: &[codespace_engine::config::TemplateLink],
) -> Result<PolicySnapshot> {
    let schema = schema.map(Path::to_path_buf).unwrap_or_else(|| {
        let guess = dir
            .parent()
            .unwrap_or(Path::new("."))
            .join("schema/codespace.cedarschema");
        match live {
            PolicySource::Dir { schema, .. } if !guess.is_file() => schema.clone(),
            _ => guess,
        }
    });
    PolicySource::Dir {
        policies: dir.to_path_buf(),
        schema,
    }
    .read()
    .map(|b| b.with_links(links))
    .and_then(compile)
    .map_err(|e| anyhow!("--implies {}: {e}", dir.display()))
    .and_then(statically)
}

async fn run(
    snap: &PolicySnapshot,
    old: Option<&PolicySnapshot>,
    tree: &ProfileTree,
    builtin: &[Named],
    custom: &[Named],
    solver: &Path,
) -> Result<Vec<Outcome>> {
    let solver = LocalSolver::from_command(tokio::process::Command::new(solver).args([
        "--lang",
        "smt",
        "--tlimit-per=60000",
        "--strings-exp",
    ]))
    .map_err(|e| anyhow!("cannot start the solver: {e}"))?;
    let mut cc = CedarSymCompiler::new(solver).map_err(|e| anyhow!("solver: {e}"))?;
    let schema = &snap.schema;
    let envs: Vec<RequestEnv> = schema.request_envs().collect();
    let mut outcomes = Vec::new();

    let mut names: BTreeSet<String> = tree.ids().cloned().collect();
    for p in snap.set.policies() {
        names.extend(profiles_named(p));
    }
    let ctx = Ctx {
        schema,
        tree,
        names,
    };
    let all: Vec<String> = tree.ids().cloned().collect();

    // 1. read-only never permits a mutating action nor a sandbox capability. Assumptions: the
    // principal is read-only, placed where the config's tree puts it.
    let ro = with_extra(
        &snap.set,
        &tree_assumptions(tree, &ctx.names, &["read-only".to_string()]),
    )?;
    let mutating: BTreeSet<String> = ["fs_write", "proc_spawn", "proc_io", "sandbox", "net"]
        .iter()
        .flat_map(|g| group_members(schema, g))
        .collect();
    let mut o = Outcome {
        name: "read-only never permits fs_write, proc_spawn, proc_io, sandbox or net".into(),
        checks: 0,
        failures: Vec::new(),
    };
    for env in envs.iter().filter(|e| mutating.contains(&action_id(e))) {
        o.checks += 1;
        match always_denies(&mut cc, &snap.set, &ro, &ctx, env).await {
            Ok(None) => {}
            Ok(Some(cex)) => o.failures.push(format!("{}: {cex}", action_id(env))),
            Err(e) => o.failures.push(e.to_string()),
        }
    }
    outcomes.push(o);

    // 2. no profile writes the paths git runs code from, or the server's own files.
    let protected = format!(
        "{}forbid (principal, action, resource) unless {{ \
        resource.path == \".git/hooks\" || resource.path like \".git/hooks/*\" || \
        resource.path like \"*/.git/hooks/*\" || resource.path == \".git/config\" || \
        resource.path like \"*/.git/config\" || resource.server_owned }};\n",
        tree_assumptions(tree, &ctx.names, &all)
    );
    let guarded = with_extra(&snap.set, &protected)?;
    let writes = group_members(schema, "fs_write");
    let mut o = Outcome {
        name: "no profile writes .git/hooks/**, .git/config or server-owned files".into(),
        checks: 0,
        failures: Vec::new(),
    };
    for env in envs.iter().filter(|e| writes.contains(&action_id(e))) {
        o.checks += 1;
        match always_denies(&mut cc, &snap.set, &guarded, &ctx, env).await {
            Ok(None) => {}
            Ok(Some(cex)) => o.failures.push(format!("{}: {cex}", action_id(env))),
            Err(e) => o.failures.push(e.to_string()),
        }
    }
    outcomes.push(o);

    // The built-in command-write and profile-inclusion properties.
    for n in builtin {
        outcomes.push(prove(&mut cc, snap, &ctx, &envs, n).await);
    }

    // 3. every policy never errors (an erroring forbid is skipped by Cedar).
    let mut o = Outcome {
        name: "every policy never errors".into(),
        checks: 0,
        failures: Vec::new(),
    };
    let policies: Vec<&Policy> = snap.set.policies().collect();
    for env in &envs {
        for p in &policies {
            o.checks += 1;
            let compiled = match CompiledPolicy::compile(p, env, schema) {
                Ok(c) => c,
                Err(e) => {
                    o.failures.push(format!(
                        "{} on {}: cannot compile: {e}",
                        p.id(),
                        action_id(env)
                    ));
                    continue;
                }
            };
            match cc
                .check_never_errors_with_counterexample_opt(&compiled)
                .await
            {
                Ok(None) => {}
                Ok(Some(c)) => {
                    let one = PolicySet::from_policies([(*p).clone()]).unwrap_or_default();
                    o.failures.push(format!(
                        "{} on {}: {}",
                        p.id(),
                        action_id(env),
                        replay("the policy alone", &one, &c.request, &c.entities)
                    ));
                }
                Err(e) => o
                    .failures
                    .push(format!("{} on {}: solver: {e}", p.id(), action_id(env))),
            }
        }
    }
    outcomes.push(o);

    // 4. --implies OLD: everything the set allows, OLD allows.
    if let Some(old) = old {
        let mut o = Outcome {
            name: format!("no more permissive than {}", old.sha256),
            checks: 0,
            failures: Vec::new(),
        };
        // The antecedent holds the tree assumptions: only the config's profiles, where the
        // config puts them.
        let assume = tree_assumptions(tree, &ctx.names, &all);
        let augmented = with_extra(&snap.set, &assume)
            .and_then(|a| with_extra(&old.set, &assume).map(|b| (a, b)));
        let (set_assumed, old_assumed) = augmented?;
        for env in &envs {
            o.checks += 1;
            // On `confirm` a permit means hold: the set is no more permissive when it holds at
            // least everything OLD held (reversed polarity).
            let reversed = action_id(env) == "confirm";
            let pair = if reversed {
                CompiledPolicySet::compile(&old_assumed, env, &old.schema).and_then(|a| {
                    CompiledPolicySet::compile(&snap.set, env, schema).map(|b| (a, b))
                })
            } else {
                CompiledPolicySet::compile(&set_assumed, env, schema).and_then(|a| {
                    CompiledPolicySet::compile(&old.set, env, &old.schema).map(|b| (a, b))
                })
            };
            let (first, second) = match pair {
                Ok(x) => x,
                Err(e) => {
                    o.failures
                        .push(format!("{}: cannot compile: {e}", action_id(env)));
                    continue;
                }
            };
            let (first, second) = (&first, &second);
            let (first_name, first_set, second_name, second_set) = if reversed {
                ("OLD (holds)", &old.set, "the set", &snap.set)
            } else {
                ("the set", &snap.set, "OLD", &old.set)
            };
            match cc
                .check_implies_with_counterexample_opt(first, second)
                .await
            {
                Ok(None) => {}
                Ok(Some(c)) => {
                    let entities = with_tree(&c.entities, tree);
                    o.failures.push(format!(
                        "{}: {}; {}{}",
                        action_id(env),
                        replay(first_name, first_set, &c.request, &entities),
                        if reversed {
                            "the set no longer holds it: "
                        } else {
                            ""
                        },
                        replay(second_name, second_set, &c.request, &entities)
                            .split("; the authorizer says ")
                            .nth(1)
                            .map(|s| format!("the authorizer says {s}"))
                            .unwrap_or_default()
                    ));
                }
                Err(e) => o.failures.push(format!("{}: solver: {e}", action_id(env))),
            }
        }
        outcomes.push(o);
    }

    // The operator's own properties (--properties).
    for n in custom {
        outcomes.push(prove(&mut cc, snap, &ctx, &envs, n).await);
    }
    Ok(outcomes)
}

/// Proves one command-write or inclusion property.
async fn prove(
    cc: &mut CedarSymCompiler<LocalSolver>,
    snap: &PolicySnapshot,
    ctx: &Ctx<'_>,
    envs: &[RequestEnv],
    n: &Named,
) -> Outcome {
    let mut o = Outcome {
        name: n.name.clone(),
        checks: 0,
        failures: Vec::new(),
    };
    let writes: Vec<&RequestEnv> = envs
        .iter()
        .filter(|e| action_id(e) == "process_write")
        .collect();
    // never_writes: the set, restricted to the profiles and to paths under the globs, denies.
    // writes_only: the set, restricted to the profile and to paths outside the globs, denies.
    let restricted = |profiles: &[String], paths: &[String], inside: bool| -> Result<PolicySet> {
        let conds = paths
            .iter()
            .map(|g| props::glob_condition(g))
            .collect::<Result<Vec<_>>>()?;
        let bases: BTreeSet<String> = paths
            .iter()
            .filter_map(|g| props::glob_basename(g))
            .collect();
        let text = format!(
            "{}{}forbid (principal, action, resource) {} {{ {} }};\n",
            tree_assumptions(ctx.tree, &ctx.names, profiles),
            model_facts(&bases),
            if inside { "unless" } else { "when" },
            conds.join(" || ")
        );
        with_extra(&snap.set, &text)
    };
    match &n.property {
        Property::NeverWrites { profiles, paths } => {
            let set = match restricted(profiles, paths, true) {
                Ok(s) => s,
                Err(e) => {
                    o.failures.push(e.to_string());
                    return o;
                }
            };
            for env in &writes {
                o.checks += 1;
                match always_denies(cc, &snap.set, &set, ctx, env).await {
                    Ok(None) => {}
                    Ok(Some(cex)) => o.failures.push(format!("{}: {cex}", action_id(env))),
                    Err(e) => o.failures.push(e.to_string()),
                }
            }
        }
        Property::WritesOnly { profile, paths } => {
            let set = match restricted(std::slice::from_ref(profile), paths, false) {
                Ok(s) => s,
                Err(e) => {
                    o.failures.push(e.to_string());
                    return o;
                }
            };
            for env in &writes {
                o.checks += 1;
                match always_denies(cc, &snap.set, &set, ctx, env).await {
                    Ok(None) => {}
                    Ok(Some(cex)) => o.failures.push(format!("{}: {cex}", action_id(env))),
                    Err(e) => o.failures.push(e.to_string()),
                }
            }
        }
        Property::Subset { a, b } => {
            let pair = with_extra(
                &snap.set,
                &tree_assumptions(ctx.tree, &ctx.names, std::slice::from_ref(a)),
            )
            .and_then(|sa| as_profile(&snap.set, b, ctx.tree).map(|sb| (sa, sb)));
            let (sa, sb) = match pair {
                Ok(x) => x,
                Err(e) => {
                    o.failures.push(e.to_string());
                    return o;
                }
            };
            // `confirm`: a permit holds a call for a human; it grants nothing.
            for env in envs.iter().filter(|e| action_id(e) != "confirm") {
                o.checks += 1;
                let compiled = CompiledPolicySet::compile(&sa, env, ctx.schema)
                    .and_then(|x| CompiledPolicySet::compile(&sb, env, ctx.schema).map(|y| (x, y)));
                let (x, y) = match compiled {
                    Ok(c) => c,
                    Err(e) => {
                        o.failures
                            .push(format!("{}: cannot compile: {e}", action_id(env)));
                        continue;
                    }
                };
                match cc.check_implies_with_counterexample_opt(&x, &y).await {
                    Ok(None) => {}
                    Ok(Some(c)) => {
                        let entities = with_tree(&c.entities, ctx.tree);
                        o.failures.push(format!(
                            "{}: {}; {}",
                            action_id(env),
                            replay("the set", &snap.set, &c.request, &entities),
                            as_principal(&c.request, b).map_or_else(
                                |e| e.to_string(),
                                |r| {
                                    let (decision, why) = decide(&snap.set, &r, &entities);
                                    format!("as {b} the authorizer says {decision}{why}")
                                }
                            )
                        ));
                    }
                    Err(e) => o.failures.push(format!("{}: solver: {e}", action_id(env))),
                }
            }
        }
    }
    o
}

/// `request` with the principal replaced by profile `b`.
fn as_principal(request: &Request, b: &str) -> Result<Request> {
    let principal = EntityUid::from_str(&profile_text(b)).map_err(|e| anyhow!("{e}"))?;
    let (Some(action), Some(resource), Some(context)) =
        (request.action(), request.resource(), request.context())
    else {
        return Err(anyhow!("a partial request"));
    };
    Request::new(
        principal,
        action.clone(),
        resource.clone(),
        context.clone(),
        None,
    )
    .map_err(|e| anyhow!("{e}"))
}
