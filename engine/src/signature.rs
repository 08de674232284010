//! Decision signatures for batched per-path requests (`find` filtering). The policy set is
//! analysed once: if every use of a path-dependent resource attribute (`path`, `basename`,
//! `ext`) is a comparison with a literal (`==`, `!=`, `like`), two paths that agree on every such
//! comparison (and on `server_owned`) get the same decision, so one Cedar evaluation serves them
//! all. Any other use makes the attribute opaque and its raw value becomes part of the key; a
//! resource compared as an entity makes the set uncacheable (one evaluation per path).
//! `links` (the file's hard-link count) varies per path too: when any policy reads it, its
//! value is part of the key.

use cedar_policy::PolicySet;
use serde_json::Value;
use std::collections::BTreeMap;

/// The path-dependent attributes of an Operation.
const VARYING: &[&str] = &["path", "basename", "ext"];

/// The per-path numeric attribute whose raw value is part of the key when a policy reads it.
const LINKS: &str = "links";

#[derive(Debug, Clone, PartialEq)]
enum Pred {
    Eq(String),
    Like(Vec<Value>),
}

/// How to key decisions of one policy set.
#[derive(Debug, Clone, Default)]
pub struct SignaturePlan {
    /// Predicates per attribute (attributes used only through literal comparisons).
    preds: BTreeMap<String, Vec<Pred>>,
    /// Attributes used some other way: their raw value is part of the key.
    opaque: Vec<String>,
    /// The resource is used as an entity: no sharing at all.
    uncacheable: bool,
    /// Some policy reads `resource.links`.
    links: bool,
}

fn resource_attr(node: &Value) -> Option<&str> {
    let dot = node.get(".")?;
    if dot.get("left")?.get("Var")?.as_str()? == "resource" {
        dot.get("attr")?.as_str()
    } else {
        None
    }
}

impl SignaturePlan {
    /// Analyses every policy of `set`.
    pub fn analyse(set: &PolicySet) -> SignaturePlan {
        let mut plan = SignaturePlan::default();
        for p in set.policies() {
            match p.to_json() {
                Ok(json) => {
                    if json
                        .get("resource")
                        .and_then(|r| r.get("op"))
                        .and_then(Value::as_str)
                        == Some("==")
                    {
                        plan.uncacheable = true;
                    }
                    if let Some(conds) = json.get("conditions").and_then(Value::as_array) {
                        for c in conds {
                            if let Some(body) = c.get("body") {
                                plan.visit(body);
                            }
                        }
                    }
                }
                Err(_) => plan.uncacheable = true,
            }
        }
        for a in &plan.opaque {
            plan.preds.remove(a);
        }
        plan
    }

    fn mark_opaque(&mut self, attr: &str) {
        if !self.opaque.iter().any(|a| a == attr) {
            self.opaque.push(attr.to_string());
        }
    }

    fn add_pred(&mut self, attr: &str, pred: Pred) {
        let list = self.preds.entry(attr.to_string()).or_default();
        if !list.contains(&pred) {
            list.push(pred);
        }
    }

    fn visit(&mut self, node: &Value) {
        let Value::Object(map) = node else {
            if let Value::Array(items) = node {
                for i in items {
                    self.visit(i);
                }
            }
            return;
        };
        // A literal comparison on a varying attribute.
        for op in ["==", "!="] {
            if let Some(inner) = map.get(op) {
                let (l, r) = (inner.get("left"), inner.get("right"));
                for (a, b) in [(l, r), (r, l)] {
                    if let (Some(a), Some(b)) = (a, b)
                        && let (Some(attr), Some(lit)) =
                            (resource_attr(a), b.get("Value").and_then(Value::as_str))
                        && VARYING.contains(&attr)
                    {
                        self.add_pred(attr, Pred::Eq(lit.to_string()));
                        // The other side is a literal; nothing else to visit.
                        return;
                    }
                }
            }
        }
        if let Some(inner) = map.get("like")
            && let (Some(left), Some(Value::Array(pattern))) =
                (inner.get("left"), inner.get("pattern"))
            && let Some(attr) = resource_attr(left)
            && VARYING.contains(&attr)
        {
            self.add_pred(attr, Pred::Like(pattern.clone()));
            return;
        }
        if let Some(attr) = resource_attr(node) {
            if VARYING.contains(&attr) {
                self.mark_opaque(attr);
            } else if attr == LINKS {
                self.links = true;
            }
            return;
        }
        if map.get("Var").and_then(Value::as_str) == Some("resource") {
            // `resource` used as a value (`resource == …`, `resource in …`).
            self.uncacheable = true;
            return;
        }
        if let Some(dot) = map.get(".") {
            // e.g. resource.workspace.network: the inner access is constant within a workspace.
            if let Some(left) = dot.get("left") {
                if resource_attr(left).is_some() {
                    return;
                }
                self.visit(left);
            }
            return;
        }
        for v in map.values() {
            self.visit(v);
        }
    }

    /// Whether some policy reads `resource.links` (so callers must know each path's count).
    pub fn uses_links(&self) -> bool {
        self.links
    }

    /// The key of a request for `path` whose file has `links` names (None when the set is
    /// uncacheable).
    pub fn key(&self, path: &str, server_owned: bool, links: i64) -> Option<String> {
        if self.uncacheable {
            return None;
        }
        let basename = if path == "." {
            ""
        } else {
            path.rsplit('/').next().unwrap_or("")
        };
        let ext = match basename.rsplit_once('.') {
            Some((stem, ext)) if !stem.is_empty() => ext,
            _ => "",
        };
        let value = |attr: &str| match attr {
            "path" => path,
            "basename" => basename,
            _ => ext,
        };
        let mut key = String::with_capacity(32);
        key.push(if server_owned { 'S' } else { 's' });
        for (attr, preds) in &self.preds {
            let v = value(attr);
            key.push('|');
            for p in preds {
                let hit = match p {
                    Pred::Eq(lit) => v == lit,
                    Pred::Like(pattern) => like(v, pattern),
                };
                key.push(if hit { '1' } else { '0' });
            }
        }
        for attr in &self.opaque {
            key.push('\0');
            key.push_str(value(attr));
        }
        if self.links {
            key.push_str("\0#");
            key.push_str(&links.to_string());
        }
        Some(key)
    }
}

/// Cedar `like`: `Wildcard` matches any run of characters, `{"Literal": c}` one literal.
fn like(s: &str, pattern: &[Value]) -> bool {
    enum P<'a> {
        Star,
        Lit(&'a str),
    }
    let pat: Vec<P<'_>> = pattern
        .iter()
        .map(|e| match e.get("Literal").and_then(Value::as_str) {
            Some(l) => P::Lit(l),
            None => P::Star,
        })
        .collect();
    // Iterative wildcard matching with backtracking to the last star.
    let chars: Vec<char> = s.chars().collect();
    let (mut si, mut pi) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while si < chars.len() {
        match pat.get(pi) {
            Some(P::Lit(l))
                if l.chars().eq(chars
                    .get(si..si + l.chars().count())
                    .unwrap_or(&[])
                    .iter()
                    .copied()) =>
            {
                si += l.chars().count();
                pi += 1;
            }
            Some(P::Star) => {
                star = Some((pi, si));
                pi += 1;
            }
            _ => match star {
                Some((sp, ss)) => {
                    pi = sp + 1;
                    si = ss + 1;
                    star = Some((sp, ss + 1));
                }
                None => return false,
            },
        }
    }
    pat.get(pi..)
        .unwrap_or(&[])
        .iter()
        .all(|p| matches!(p, P::Star))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn plan(src: &str) -> SignaturePlan {
        SignaturePlan::analyse(&PolicySet::from_str(src).unwrap())
    }

    #[test]
    fn literal_comparisons_share_decisions() {
        let p = plan(
            r#"forbid (principal, action, resource) when { resource.basename == ".env" || resource.path like ".git/hooks/*" || resource.workspace.network == "r" };"#,
        );
        assert_eq!(p.key("src/a.rs", false, 1), p.key("lib/b.rs", false, 1));
        assert_ne!(p.key("a/.env", false, 1), p.key("a/b.rs", false, 1));
        assert_ne!(
            p.key(".git/hooks/x", false, 1),
            p.key(".git/config", false, 1)
        );
        assert_ne!(p.key("a", true, 1), p.key("a", false, 1));
    }

    #[test]
    fn other_uses_are_opaque_or_uncacheable() {
        let p = plan(r#"permit (principal, action, resource) when { resource.path.isEmpty() };"#);
        assert_ne!(p.key("a", false, 1), p.key("b", false, 1));
        let p = plan(
            r#"permit (principal, action, resource) when { resource == CodeSpace::Operation::"x" };"#,
        );
        assert_eq!(p.key("a", false, 1), None);
    }

    #[test]
    fn link_counts_are_part_of_the_key_only_when_a_policy_reads_them() {
        let p =
            plan(r#"forbid (principal, action, resource) when { resource.basename == ".env" };"#);
        assert!(!p.uses_links());
        assert_eq!(p.key("a.txt", false, 1), p.key("a.txt", false, 2));
        let p = plan(
            r#"forbid (principal, action, resource) when { resource.links > 1 && resource.workspace.network == "r" };"#,
        );
        assert!(p.uses_links());
        assert_ne!(p.key("a.txt", false, 1), p.key("a.txt", false, 2));
        assert_eq!(p.key("a.txt", false, 2), p.key("b.txt", false, 2));
        assert_ne!(p.key("a.txt", false, 0), p.key("a.txt", false, 1));
    }

    #[test]
    fn like_matches_cedar_semantics() {
        let pat = |s: &str| -> Vec<Value> {
            s.chars()
                .map(|c| {
                    if c == '*' {
                        Value::String("Wildcard".into())
                    } else {
                        serde_json::json!({"Literal": c.to_string()})
                    }
                })
                .collect()
        };
        assert!(like("src/a/b.rs", &pat("src/*")));
        assert!(like("a/b/c.env", &pat("*.env")));
        assert!(!like("SRC/x", &pat("src/*")));
        assert!(like(".env.local", &pat(".env.*")));
        assert!(!like(".env", &pat(".env.*")));
        assert!(like("abc", &pat("a*c")));
        assert!(like("ac", &pat("a*c")));
        assert!(!like("ab", &pat("a*c")));
        assert!(like("", &pat("*")));
        assert!(like("aXbXc", &pat("*b*c")));
    }
}
