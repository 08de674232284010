//! Decision signatures for batched per-path requests (`find` filtering). The policy set is
//! analysed once: if every use of a path-dependent resource attribute (`path`, `basename`,
//! `ext`) is a comparison with a literal (`==`, `!=`, `like`), two paths that agree on every such
//! comparison (and on `server_owned`) get the same decision, so one Cedar evaluation serves them
//! all. Any other use makes the attribute opaque and its raw value becomes part of the key; a
//! resource compared as an entity makes the set uncacheable (one evaluation per path).

use cedar_policy::PolicySet;
use serde_json::Value;
use std::collections::BTreeMap;

/// The path-dependent attributes of an Operation.
const VARYING: &[&str] = &["path", "basename", "ext"];

#[derive(Debug, Clone, PartialEq)]
enum Pred {
    Eq(String),
    Like(Vec<LikeTok>),
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
            self.add_pred(attr, Pred::Like(compile_like(pattern)));
            return;
        }
        if let Some(attr) = resource_attr(node) {
            if VARYING.contains(&attr) {
                self.mark_opaque(attr);
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

    /// The key of a request for `path` (None when the set is uncacheable).
    pub fn key(&self, path: &str, server_owned: bool) -> Option<String> {
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
                    Pred::Like(pattern) => like_compiled(v.as_bytes(), pattern),
                };
                key.push(if hit { '1' } else { '0' });
            }
        }
        for attr in &self.opaque {
            key.push('\0');
            key.push_str(value(attr));
        }
        Some(key)
    }
}

/// One token of a compiled Cedar `like` pattern: a wildcard, or a run of literal characters.
#[derive(Debug, Clone, PartialEq)]
enum LikeTok {
    Star,
    Lit(String),
}

/// Compiles Cedar's JSON `like` pattern (`"Wildcard"` or `{"Literal": c}` per element), merging
/// consecutive literals.
fn compile_like(pattern: &[Value]) -> Vec<LikeTok> {
    let mut out: Vec<LikeTok> = Vec::new();
    for e in pattern {
        match e.get("Literal").and_then(Value::as_str) {
            Some(l) => match out.last_mut() {
                Some(LikeTok::Lit(run)) => run.push_str(l),
                _ => out.push(LikeTok::Lit(l.to_string())),
            },
            None => {
                if out.last() != Some(&LikeTok::Star) {
                    out.push(LikeTok::Star);
                }
            }
        }
    }
    out
}

/// Cedar `like` over a compiled pattern: `Star` matches any run of characters. Matching works on
/// bytes, which is exact for UTF-8: a literal starts with a leading byte, so it can only match at
/// a character boundary.
fn like_compiled(s: &[u8], pat: &[LikeTok]) -> bool {
    let (mut si, mut pi) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    loop {
        match pat.get(pi) {
            Some(LikeTok::Star) => {
                star = Some((pi, si));
                pi += 1;
                continue;
            }
            Some(LikeTok::Lit(l))
                if s.get(si..)
                    .is_some_and(|rest| rest.starts_with(l.as_bytes())) =>
            {
                si += l.len();
                pi += 1;
                continue;
            }
            Some(LikeTok::Lit(_)) => {}
            None if si == s.len() => return true,
            None => {}
        }
        // Mismatch: let the last wildcard take one more byte.
        match star {
            Some((sp, ss)) if ss < s.len() => {
                star = Some((sp, ss + 1));
                pi = sp + 1;
                si = ss + 1;
            }
            _ => return false,
        }
    }
}

/// Cedar `like` over the JSON pattern (see [`compile_like`]).
#[cfg(test)]
fn like(s: &str, pattern: &[Value]) -> bool {
    like_compiled(s.as_bytes(), &compile_like(pattern))
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
        assert_eq!(p.key("src/a.rs", false), p.key("lib/b.rs", false));
        assert_ne!(p.key("a/.env", false), p.key("a/b.rs", false));
        assert_ne!(p.key(".git/hooks/x", false), p.key(".git/config", false));
        assert_ne!(p.key("a", true), p.key("a", false));
    }

    #[test]
    fn other_uses_are_opaque_or_uncacheable() {
        let p = plan(r#"permit (principal, action, resource) when { resource.path.isEmpty() };"#);
        assert_ne!(p.key("a", false), p.key("b", false));
        let p = plan(
            r#"permit (principal, action, resource) when { resource == CodeSpace::Operation::"x" };"#,
        );
        assert_eq!(p.key("a", false), None);
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
        assert!(like("héllo/wörld", &pat("h*/w*d")));
        assert!(!like("héllo", &pat("h*x")));
        assert!(like("a**b", &pat("a*b")));
        assert!(like(".git/hooks/x", &pat(".git/hooks/*")));
        assert!(!like("x/.git/config2", &pat("*/.git/config")));
    }
}
