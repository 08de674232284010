//! Coverage per alternative: a `when { A || B || C }` condition is covered only when some test
//! case reaches each of A, B and C. Each alternative becomes a variant of its policy (same scope,
//! the `when` replaced by that alternative alone, other conditions kept) that is evaluated alone
//! against every request the test cases build; an alternative is reached when its variant holds.

use cedar_policy::{Authorizer, Policy, PolicyId, PolicySet};
use codespace_policy::PolicySnapshot;
use codespace_policy::explain::BuiltRequest;
use serde_json::Value;

/// One alternative of a policy's `||` chain.
#[derive(Debug, Clone)]
pub struct Alternative {
    /// The policy it belongs to.
    pub policy_id: String,
    /// Its 1-based position in the chain.
    pub index: usize,
    /// The alternative as Cedar text.
    pub text: String,
    variant: Policy,
}

impl Alternative {
    /// `policy-id#index`, the key coverage uses.
    pub fn key(&self) -> String {
        format!("{}#{}", self.policy_id, self.index)
    }

    /// Does this alternative (with the policy's scope and other conditions) hold for `built`?
    pub fn reached(&self, built: &BuiltRequest) -> bool {
        let Ok(set) = PolicySet::from_policies([self.variant.clone()]) else {
            return false;
        };
        // Coverage evaluates one alternative alone to report it; nothing is enforced from it.
        #[allow(clippy::disallowed_methods)]
        let resp = Authorizer::new().is_authorized(&built.request, &set, &built.entities);
        resp.diagnostics().errors().next().is_none()
            && resp.diagnostics().reason().any(|r| r == self.variant.id())
    }
}

/// The operands of a (left-nested or right-nested) `||` chain, in source order.
fn disjuncts(e: &Value, out: &mut Vec<Value>) {
    match e.get("||") {
        Some(or) => {
            if let (Some(l), Some(r)) = (or.get("left"), or.get("right")) {
                disjuncts(l, out);
                disjuncts(r, out);
            }
        }
        None => out.push(e.clone()),
    }
}

/// The condition text of a variant policy: what follows its scope.
fn condition_text(p: &Policy) -> String {
    let s = p.to_string();
    let body = s
        .find("when")
        .and_then(|i| s.get(i..))
        .unwrap_or(s.as_str());
    let body = body.trim_start_matches("when").trim();
    let body = body
        .strip_prefix('{')
        .and_then(|b| {
            b.trim_end()
                .trim_end_matches(';')
                .trim_end()
                .strip_suffix('}')
        })
        .unwrap_or(body);
    body.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Every alternative of every `when` condition with at least two of them.
pub fn alternatives(snap: &PolicySnapshot) -> Vec<Alternative> {
    let mut out = Vec::new();
    for id in snap.meta.keys() {
        let Some(policy) = snap.set.policy(&PolicyId::new(id)) else {
            continue;
        };
        let Ok(est) = policy.to_json() else {
            continue;
        };
        let Some(conds) = est.get("conditions").and_then(Value::as_array) else {
            continue;
        };
        for (ci, cond) in conds.iter().enumerate() {
            if cond.get("kind").and_then(Value::as_str) != Some("when") {
                continue;
            }
            let mut alts = Vec::new();
            if let Some(body) = cond.get("body") {
                disjuncts(body, &mut alts);
            }
            if alts.len() < 2 {
                continue;
            }
            for (ai, alt) in alts.into_iter().enumerate() {
                let mut variant = est.clone();
                if let Some(Value::Object(c)) =
                    variant.get_mut("conditions").and_then(|c| c.get_mut(ci))
                {
                    c.insert("body".into(), alt);
                }
                let vid = PolicyId::new(format!("{id}#{}", ai + 1));
                let Ok(variant) = Policy::from_json(Some(vid), variant) else {
                    continue;
                };
                // The text of the alternative alone: a copy with only that condition.
                let text = {
                    let mut only = variant.to_json().unwrap_or(Value::Null);
                    if let Some(Value::Array(cs)) = only.get_mut("conditions") {
                        let keep = cs.get(ci).cloned();
                        cs.clear();
                        cs.extend(keep);
                    }
                    Policy::from_json(None, only)
                        .map(|p| condition_text(&p))
                        .unwrap_or_default()
                };
                out.push(Alternative {
                    policy_id: id.clone(),
                    index: ai + 1,
                    text,
                    variant,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use codespace_policy::{PolicySource, compile};

    #[test]
    fn the_secret_files_chain_splits_into_its_alternatives() {
        let snap = compile(PolicySource::Embedded.read().unwrap()).unwrap();
        let alts = alternatives(&snap);
        let secret: Vec<&Alternative> = alts
            .iter()
            .filter(|a| a.policy_id == "base.forbid.secret-files")
            .collect();
        assert!(secret.len() >= 8, "{secret:?}");
        assert_eq!(secret[0].text, "resource.basename == \".env\"");
        assert_eq!(secret[0].key(), "base.forbid.secret-files#1");
        assert!(alts.iter().all(|a| !a.text.is_empty()));
    }
}
