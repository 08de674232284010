//! `codespace policy verify`: properties of a policy set proven with Cedar's symbolic compiler
//! (`cedar-policy-symcc`) and an SMT solver (cvc5), for every request the schema allows, not
//! only the ones tests or logs happen to hold. A property that does not hold comes with a
//! counterexample (a request and entities) that is replayed through the real authorizer before
//! it is shown. Exit 0: every property holds; 1: one does not (or a check failed); 4: no solver.

use anyhow::{Result, anyhow};
use cedar_policy::{
    Authorizer, Decision, Entities, EntityUid, Policy, PolicySet, Request, RequestEnv, Schema,
};
use cedar_policy_symcc::solver::LocalSolver;
use cedar_policy_symcc::{CedarSymCompiler, CompiledPolicy, CompiledPolicySet};
use codespace_engine::Config;
use codespace_engine::policy::{PolicySnapshot, PolicySource, compile, profiles_named};
use std::collections::BTreeSet;
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

/// A counterexample, replayed through the real authorizer under `set`.
fn replay(what: &str, set: &PolicySet, request: &Request, entities: &Entities) -> String {
    let resp = Authorizer::new().is_authorized(request, set, entities);
    let ids: Vec<String> = resp
        .diagnostics()
        .reason()
        .map(ToString::to_string)
        .collect();
    let errs: Vec<String> = resp.diagnostics().errors().map(|e| e.to_string()).collect();
    let resource_attrs = request
        .resource()
        .and_then(|r| entities.get(r))
        .and_then(|e| e.to_json_value().ok())
        .and_then(|v| v.get("attrs").cloned())
        .unwrap_or(serde_json::Value::Null);
    format!(
        "counterexample: principal {}, action {}, resource attributes {}, context {}; the authorizer says {} under {what}{}{}",
        request
            .principal()
            .map_or_else(|| "?".into(), ToString::to_string),
        request
            .action()
            .map_or_else(|| "?".into(), ToString::to_string),
        resource_attrs,
        request
            .context()
            .map_or_else(|| "{}".into(), render_context),
        if resp.decision() == Decision::Allow {
            "allow"
        } else {
            "deny"
        },
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

async fn always_denies(
    cc: &mut CedarSymCompiler<LocalSolver>,
    live: &PolicySet,
    augmented: &PolicySet,
    schema: &Schema,
    env: &RequestEnv,
) -> Result<Option<String>> {
    let compiled = CompiledPolicySet::compile(augmented, env, schema)
        .map_err(|e| anyhow!("{}: cannot compile: {e}", action_id(env)))?;
    let cex = cc
        .check_always_denies_with_counterexample_opt(&compiled)
        .await
        .map_err(|e| anyhow!("{}: solver: {e}", action_id(env)))?;
    Ok(cex.map(|c| replay("the set", live, &c.request, &c.entities)))
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
    let snap = source.read().and_then(compile).map_err(|e| {
        for line in &e.0 {
            eprintln!("{line}");
        }
        anyhow!("policies rejected")
    })?;
    let old = match &args.implies {
        Some(dir) => Some(load_old(dir, args.implies_schema.as_deref(), source)?),
        None => None,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let outcomes = rt.block_on(run(&snap, old.as_ref(), config, &solver_path))?;
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

fn load_old(dir: &Path, schema: Option<&Path>, live: &PolicySource) -> Result<PolicySnapshot> {
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
    .and_then(compile)
    .map_err(|e| anyhow!("--implies {}: {e}", dir.display()))
}

async fn run(
    snap: &PolicySnapshot,
    old: Option<&PolicySnapshot>,
    config: Option<&Config>,
    solver: &Path,
) -> Result<Vec<Outcome>> {
    let solver = LocalSolver::from_command(tokio::process::Command::new(solver).args([
        "--lang",
        "smt",
        "--tlimit=60000",
        "--strings-exp",
    ]))
    .map_err(|e| anyhow!("cannot start the solver: {e}"))?;
    let mut cc = CedarSymCompiler::new(solver).map_err(|e| anyhow!("solver: {e}"))?;
    let schema = &snap.schema;
    let envs: Vec<RequestEnv> = schema.request_envs().collect();
    let mut outcomes = Vec::new();

    // 1. read-only never permits fs_write, proc_spawn or proc_io. Assumptions: the principal is
    // read-only itself, and read-only is not below any other profile (it has no parent).
    let mut profiles: BTreeSet<String> = codespace_engine::config::BUILTIN_PROFILES
        .iter()
        .map(|(p, _)| (*p).to_string())
        .collect();
    if let Some(c) = config {
        profiles.extend(c.profiles.keys().cloned());
    }
    for p in snap.set.policies() {
        profiles.extend(profiles_named(p));
    }
    let mut assumptions = String::from(
        "forbid (principal, action, resource) unless { principal == CodeSpace::PermissionProfile::\"read-only\" };\n",
    );
    for p in profiles.iter().filter(|p| *p != "read-only") {
        assumptions.push_str(&format!(
            "forbid (principal in CodeSpace::PermissionProfile::\"{p}\", action, resource);\n"
        ));
    }
    let ro = with_extra(&snap.set, &assumptions)?;
    let mutating: BTreeSet<String> = ["fs_write", "proc_spawn", "proc_io"]
        .iter()
        .flat_map(|g| group_members(schema, g))
        .collect();
    let mut o = Outcome {
        name: "read-only never permits fs_write, proc_spawn or proc_io".into(),
        checks: 0,
        failures: Vec::new(),
    };
    for env in envs.iter().filter(|e| mutating.contains(&action_id(e))) {
        o.checks += 1;
        match always_denies(&mut cc, &snap.set, &ro, schema, env).await {
            Ok(None) => {}
            Ok(Some(cex)) => o.failures.push(format!("{}: {cex}", action_id(env))),
            Err(e) => o.failures.push(e.to_string()),
        }
    }
    outcomes.push(o);

    // 2. no profile writes the paths git runs code from, or the server's own files.
    let protected = "forbid (principal, action, resource) unless { \
        resource.path == \".git/hooks\" || resource.path like \".git/hooks/*\" || \
        resource.path like \"*/.git/hooks/*\" || resource.path == \".git/config\" || \
        resource.path like \"*/.git/config\" || resource.server_owned };\n";
    let guarded = with_extra(&snap.set, protected)?;
    let writes = group_members(schema, "fs_write");
    let mut o = Outcome {
        name: "no profile writes .git/hooks/**, .git/config or server-owned files".into(),
        checks: 0,
        failures: Vec::new(),
    };
    for env in envs.iter().filter(|e| writes.contains(&action_id(e))) {
        o.checks += 1;
        match always_denies(&mut cc, &snap.set, &guarded, schema, env).await {
            Ok(None) => {}
            Ok(Some(cex)) => o.failures.push(format!("{}: {cex}", action_id(env))),
            Err(e) => o.failures.push(e.to_string()),
        }
    }
    outcomes.push(o);

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
        for env in &envs {
            o.checks += 1;
            let pair = CompiledPolicySet::compile(&snap.set, env, schema).and_then(|a| {
                CompiledPolicySet::compile(&old.set, env, &old.schema).map(|b| (a, b))
            });
            let (a, b) = match pair {
                Ok(x) => x,
                Err(e) => {
                    o.failures
                        .push(format!("{}: cannot compile: {e}", action_id(env)));
                    continue;
                }
            };
            // On `confirm` a permit means hold: the set is no more permissive when it holds at
            // least everything OLD held (reversed polarity).
            let reversed = action_id(env) == "confirm";
            let (first, second) = if reversed { (&b, &a) } else { (&a, &b) };
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
                Ok(Some(c)) => o.failures.push(format!(
                    "{}: {}; {}{}",
                    action_id(env),
                    replay(first_name, first_set, &c.request, &c.entities),
                    if reversed {
                        "the set no longer holds it: "
                    } else {
                        ""
                    },
                    replay(second_name, second_set, &c.request, &c.entities)
                        .split("; the authorizer says ")
                        .nth(1)
                        .map(|s| format!("the authorizer says {s}"))
                        .unwrap_or_default()
                )),
                Err(e) => o.failures.push(format!("{}: solver: {e}", action_id(env))),
            }
        }
        outcomes.push(o);
    }
    Ok(outcomes)
}
