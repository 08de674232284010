//! The lint rules every policy file passes before validation: each policy has an `@id`, each
//! forbid a `@reason`, forbids and `confirm` policies live in `base/`, permits in `profiles/`;
//! and the check that policies name only known profiles.

use std::collections::BTreeSet;

/// True when a policy's action scope is the `confirm` action alone (`action ==
/// Action::"confirm"` or `action in [Action::"confirm"]`).
fn on_confirm_only(action: cedar_policy::ActionConstraint) -> bool {
    let is_confirm = |a: &cedar_policy::EntityUid| a.id().unescaped() == "confirm";
    match action {
        cedar_policy::ActionConstraint::Eq(a) => is_confirm(&a),
        cedar_policy::ActionConstraint::In(list) => !list.is_empty() && list.iter().all(is_confirm),
        cedar_policy::ActionConstraint::Any => false,
    }
}

/// Lints one policy of the file `file` (a name relative to the policy root) at `line`: its `@id`
/// (None when it has none) and every lint error, one line each.
pub fn lint_policy(
    file: &str,
    line: usize,
    p: &cedar_policy::Policy,
) -> (Option<String>, Vec<String>) {
    lint_parts(
        file,
        line,
        p.annotation("id"),
        p.effect() == cedar_policy::Effect::Forbid,
        p.annotation("reason").is_some(),
        on_confirm_only(p.action_constraint()),
    )
}

/// Lints one template (`?principal`/`?resource`) by the rules of [`lint_policy`]: its linked
/// policies sit where the template does.
pub fn lint_template(
    file: &str,
    line: usize,
    t: &cedar_policy::Template,
) -> (Option<String>, Vec<String>) {
    lint_parts(
        file,
        line,
        t.annotation("id"),
        t.effect() == cedar_policy::Effect::Forbid,
        t.annotation("reason").is_some(),
        on_confirm_only(t.action_constraint()),
    )
}

fn lint_parts(
    file: &str,
    line: usize,
    id: Option<&str>,
    forbid: bool,
    has_reason: bool,
    on_confirm: bool,
) -> (Option<String>, Vec<String>) {
    let mut errs = Vec::new();
    let Some(id) = id.map(str::to_string) else {
        errs.push(format!(
            "{file}:{line}: lint: policy has no @id(\"…\") annotation"
        ));
        return (None, errs);
    };
    let in_base = file.starts_with("base/");
    let in_profiles = file.starts_with("profiles/");
    if forbid && !has_reason {
        errs.push(format!(
            "{file}:{line}: lint: policy {id}: forbid has no @reason(\"…\")"
        ));
    }
    // Policies on `confirm` (either effect: a permit there holds a call for a human) are base
    // guardrails.
    if on_confirm && !in_base {
        errs.push(format!(
            "{file}:{line}: lint: policy {id}: policies on confirm belong in base/"
        ));
    }
    if forbid && !in_base && !on_confirm {
        errs.push(format!(
            "{file}:{line}: lint: policy {id}: forbids belong in base/"
        ));
    }
    if !forbid && !in_profiles && !on_confirm {
        errs.push(format!(
            "{file}:{line}: lint: policy {id}: permits belong in profiles/"
        ));
    }
    (Some(id), errs)
}

/// The profile ids a policy names (`PermissionProfile::"…"` in its scope or conditions).
pub fn profiles_named(policy: &cedar_policy::Policy) -> BTreeSet<String> {
    fn walk(v: &serde_json::Value, out: &mut BTreeSet<String>) {
        match v {
            serde_json::Value::Object(m) => {
                if let (Some(serde_json::Value::String(ty)), Some(serde_json::Value::String(id))) =
                    (m.get("type"), m.get("id"))
                    && (ty == "CodeSpace::PermissionProfile" || ty == "PermissionProfile")
                {
                    out.insert(id.clone());
                }
                for x in m.values() {
                    walk(x, out);
                }
            }
            serde_json::Value::Array(items) => {
                for x in items {
                    walk(x, out);
                }
            }
            _ => {}
        }
    }
    let mut out = BTreeSet::new();
    if let Ok(est) = policy.to_json() {
        walk(&est, &mut out);
    }
    out
}
