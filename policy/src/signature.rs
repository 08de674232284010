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
    Like(LikePattern),
}

/// One piece of a compiled Cedar `like` pattern.
#[derive(Debug, Clone, PartialEq)]
enum LikeTok {
    /// `*`: any run of characters.
    Star,
    /// A run of literal characters.
    Lit(String),
}

/// A Cedar `like` pattern compiled once per policy set (keys are computed per walked entry).
#[derive(Debug, Clone, PartialEq)]
struct LikePattern(Vec<LikeTok>);

impl LikePattern {
    /// From the policy JSON: `"Wildcard"` or `{"Literal": c}` per element.
    fn compile(pattern: &[Value]) -> LikePattern {
        let mut toks: Vec<LikeTok> = Vec::new();
        for e in pattern {
            match (e.get("Literal").and_then(Value::as_str), toks.last_mut()) {
                (Some(l), Some(LikeTok::Lit(run))) => run.push_str(l),
                (Some(l), _) => toks.push(LikeTok::Lit(l.to_string())),
                (None, Some(LikeTok::Star)) => {}
                (None, _) => toks.push(LikeTok::Star),
            }
        }
        LikePattern(toks)
    }
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
            self.add_pred(attr, Pred::Like(LikePattern::compile(pattern)));
            return;
        }
        if let Some(inner) = map.get("has")
            && inner
                .get("left")
                .and_then(|l| l.get("Var"))
                .and_then(Value::as_str)
                == Some("resource")
        {
            // `resource has X` does not vary between paths: every path request carries every
            // attribute but the network ones (`host`, `port`, `scheme`, `ip_class`), which only
            // `network_connect` requests carry, and those are never cached (their context names
            // the process).
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
        let mut key = String::with_capacity(32);
        self.key_into(&mut key, path, server_owned, links)
            .then_some(key)
    }

    /// [`SignaturePlan::key`] written into `key` (cleared first), so a caller keying many paths
    /// reuses one buffer. Returns false (and leaves `key` empty) when the set is uncacheable.
    pub fn key_into(&self, key: &mut String, path: &str, server_owned: bool, links: i64) -> bool {
        key.clear();
        if self.uncacheable {
            return false;
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
            use std::fmt::Write;
            let _ = write!(key, "\0#{links}");
        }
        true
    }
}

/// Cedar `like`: `*` matches any run of characters, literals match themselves. Matching bytes
/// is the same as matching characters: a literal run starts with a UTF-8 lead byte, so it can
/// only match at a character boundary. Backtracks to the last star; allocates nothing.
fn like(s: &str, pattern: &LikePattern) -> bool {
    // The shapes policies use (a prefix, a suffix, a fixed middle, an exact name) in one
    // comparison each; only other shapes walk the general loop below.
    match pattern.0.as_slice() {
        [] => return s.is_empty(),
        [LikeTok::Star] => return true,
        [LikeTok::Lit(l)] => return s == l,
        [LikeTok::Lit(l), LikeTok::Star] => return s.starts_with(l.as_str()),
        [LikeTok::Star, LikeTok::Lit(l)] => return s.ends_with(l.as_str()),
        [LikeTok::Star, LikeTok::Lit(l), LikeTok::Star] => return s.contains(l.as_str()),
        [LikeTok::Lit(a), LikeTok::Star, LikeTok::Lit(z)] => {
            return s.len() >= a.len() + z.len()
                && s.starts_with(a.as_str())
                && s.ends_with(z.as_str());
        }
        _ => {}
    }
    let s = s.as_bytes();
    let toks = &pattern.0;
    let (mut si, mut ti) = (0usize, 0usize);
    // (token after the last star, where that star's match currently ends)
    let mut star: Option<(usize, usize)> = None;
    loop {
        match toks.get(ti) {
            Some(LikeTok::Star) => {
                ti += 1;
                star = Some((ti, si));
                continue;
            }
            Some(LikeTok::Lit(l))
                if s.get(si..)
                    .is_some_and(|rest| rest.starts_with(l.as_bytes())) =>
            {
                si += l.len();
                ti += 1;
                continue;
            }
            None if si == s.len() => return true,
            _ => {}
        }
        match star {
            Some((after, end)) if end < s.len() => {
                // Let the star take one more byte, and then skip to where the literal after it
                // can start (its first byte): no comparison at a position that cannot match.
                let mut next = end + 1;
                if let Some(LikeTok::Lit(l)) = toks.get(after)
                    && let Some(&first) = l.as_bytes().first()
                {
                    match s
                        .get(next..)
                        .and_then(|r| r.iter().position(|&b| b == first))
                    {
                        Some(skip) => next += skip,
                        None => return false,
                    }
                }
                star = Some((after, next));
                ti = after;
                si = next;
            }
            _ => return false,
        }
    }
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
    fn network_attribute_tests_keep_path_requests_cacheable() {
        let p = plan(
            r#"forbid (principal, action, resource) when { resource has ip_class && resource.ip_class == "link_local" && resource.port == 80 };
permit (principal, action, resource) when { resource.basename == "a" };"#,
        );
        assert!(p.key("x/a", false, 1).is_some());
        assert_eq!(p.key("x/b", false, 1), p.key("y/c", false, 1));
        assert_ne!(p.key("x/a", false, 1), p.key("x/b", false, 1));
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
        let pat = |s: &str| -> LikePattern {
            let v: Vec<Value> = s
                .chars()
                .map(|c| {
                    if c == '*' {
                        Value::String("Wildcard".into())
                    } else {
                        serde_json::json!({"Literal": c.to_string()})
                    }
                })
                .collect();
            LikePattern::compile(&v)
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
        assert!(!like("aXbXcX", &pat("*b*c")));
        assert!(like("x/.git/hooks/pre", &pat("*/.git/hooks/*")));
        assert!(!like(".git/hooks/pre", &pat("*/.git/hooks/*")));
        assert!(like("ééa.pem", &pat("é*.pem")));
        assert!(!like("é", &pat("é?")), "no `?` in Cedar: a literal");
        assert!(like("a**b", &pat("a**b")) && like("ab", &pat("a**b")));
        assert!(like("aaa", &pat("*a")) && !like("aab", &pat("*a")));
        assert!(like("mississippi", &pat("m*iss*ppi")));
        assert!(!like("mississipp", &pat("m*iss*ppi")));
    }

    /// The byte matcher agrees with a plain character-level reference on generated inputs.
    #[test]
    fn like_agrees_with_a_character_reference() {
        fn reference(s: &[char], p: &[char]) -> bool {
            match p.split_first() {
                None => s.is_empty(),
                Some(('*', rest)) => (0..=s.len()).any(|i| reference(&s[i..], rest)),
                Some((c, rest)) => s.first() == Some(c) && reference(&s[1..], rest),
            }
        }
        let alphabet = ['a', 'b', '/', '.', 'é'];
        // Every shape with a comparison of its own (see `like`) and some that walk the loop.
        let pats = [
            "*", "a*", "*a", "a*b", "*/*", "*.*", "a*a*a", "*é*", "**", "ab", "*b*a*", "", "é",
            "ab*", "*ab", "*ab*", "a/*.b", "*/a.b", "a*a", "é*é", "*a*b",
        ];
        let mut seed = 7u64;
        for _ in 0..4000 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let len = (seed >> 60) as usize;
            let s: Vec<char> = (0..len)
                .map(|i| alphabet[((seed >> (i * 3 + 8)) % 5) as usize])
                .collect();
            let text: String = s.iter().collect();
            for p in pats {
                let pc: Vec<char> = p.chars().collect();
                let compiled = LikePattern::compile(
                    &pc.iter()
                        .map(|c| {
                            if *c == '*' {
                                Value::String("Wildcard".into())
                            } else {
                                serde_json::json!({"Literal": c.to_string()})
                            }
                        })
                        .collect::<Vec<_>>(),
                );
                assert_eq!(
                    like(&text, &compiled),
                    reference(&s, &pc),
                    "{text:?} like {p:?}"
                );
            }
        }
    }
}
