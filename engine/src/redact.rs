//! Redaction of secrets in what the audit log stores and what error texts echo: command lines,
//! environment values and any other string of a recorded Cedar request. Patterns are regular
//! expressions; a named group `secret` marks the part to replace (else the whole match). The
//! defaults cover `Authorization:`, `X-Api-Key:` and `*-Token:` headers, `Bearer` tokens,
//! `token=` / `password=` style assignments, `--password`, `curl -u user:PASS`, the password of a
//! URL's user-info, PEM private key blocks, JWTs, and AWS, GitHub, GitLab, Slack, OpenAI and
//! Stripe key shapes. Redaction only changes what is shown and stored: Cedar decides on the real
//! request. The server holds a [`LiveRedactor`]: the operator's patterns are swapped in place
//! when the config is reloaded (SIGHUP or an edit of the config file).

use regex::{Regex, RegexSet};
use serde_json::Value;
use std::borrow::Cow;
use std::sync::{Arc, LazyLock, PoisonError, RwLock};

/// What a redacted secret is replaced with.
pub const REDACTED: &str = "[REDACTED]";

/// The default patterns (always on unless the config turns them off).
pub const DEFAULT_PATTERNS: &[&str] = &[
    // `Authorization: Bearer x`, `Authorization: Basic x`, `authorization: x`
    r"(?i)\bauthorization:\s*(?:(?:bearer|basic|token|digest)\s+)?(?P<secret>[^\s'\x22]+)",
    r"(?i)\bbearer\s+(?P<secret>[A-Za-z0-9._~+/=-]{6,})",
    // token=…, password=…, api_key=…, secret=… (URL queries, flags, env assignments)
    r"(?i)\b[A-Za-z0-9_]*(?:token|password|passwd|pwd|secret|api[_-]?key)=(?P<secret>[^\s&'\x22]+)",
    // --password x, --password=x, --token x
    r"(?i)--(?:password|passwd|token|api-key|secret)(?:=|\s+)(?P<secret>[^\s'\x22]+)",
    // AWS access key ids
    r"\b(?P<secret>(?:AKIA|ASIA)[0-9A-Z]{16})\b",
    // GitHub tokens
    r"\b(?P<secret>gh[pousr]_[A-Za-z0-9]{20,})\b",
    r"\b(?P<secret>github_pat_[A-Za-z0-9_]{20,})\b",
    // Slack tokens
    r"\b(?P<secret>xox[abposr]-[A-Za-z0-9-]{10,})\b",
    // The password of a URL's user-info (`https://user:PASS@host`, `postgres://admin:PASS@db`);
    // the user stays.
    r"(?i)\b[a-z][a-z0-9+.-]*://[^\s/?#@:'\x22]*:(?P<secret>[^\s/?#@'\x22]+)@",
    // curl -u user:PASS, --user user:PASS, --user=user:PASS, --proxy-user, -U
    r"(?:^|\s)(?:-[uU]\s*|--(?:proxy-)?user(?:=|\s+))['\x22]?[^\s:'\x22]*:(?P<secret>[^\s'\x22]+)",
    // `X-Api-Key: x`, `Api-Key: x`, `Private-Token: x`, `X-Vault-Token: x`, any `*-Token:` header
    r"(?i)\b(?:x-api-key|api-key|[a-z0-9-]*-token):\s*(?P<secret>[^\s'\x22]+)",
    // GitLab personal, project and group access tokens
    r"\b(?P<secret>glpat-[A-Za-z0-9_-]{20,})",
    // OpenAI project, service-account and admin keys
    r"\b(?P<secret>sk-(?:proj|svcacct|admin)-[A-Za-z0-9_-]{20,})",
    // Stripe secret and restricted keys
    r"\b(?P<secret>(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{10,})",
    // JSON Web Tokens: three base64url segments, the first a JSON object (`eyJ`)
    r"\b(?P<secret>eyJ[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]*)",
    // PEM private keys, from BEGIN through END (or the end of the text when END was cut off)
    r"(?s)-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----(?P<secret>.*?)(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\z)",
];

/// The default rules, compiled once per process.
static DEFAULTS: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    // The defaults are tested to compile; a failure would drop that one rule only.
    DEFAULT_PATTERNS
        .iter()
        .filter_map(|p| Regex::new(p).ok())
        .collect()
});

/// A compiled set of redaction patterns.
#[derive(Debug, Clone)]
pub struct Redactor {
    rules: Vec<Regex>,
    /// All rules at once: one scan tells which rules need a replacement pass.
    any: RegexSet,
}

/// A pattern that does not compile.
#[derive(Debug, Clone, thiserror::Error)]
#[error("redaction pattern {index} `{pattern}`: {message}")]
pub struct PatternError {
    /// Its position in the operator's list.
    pub index: usize,
    /// The pattern.
    pub pattern: String,
    /// Why it does not compile.
    pub message: String,
}

impl Default for Redactor {
    fn default() -> Redactor {
        Redactor::of(DEFAULTS.clone())
    }
}

impl Redactor {
    /// The defaults (when `defaults`) plus the operator's `extra` patterns.
    pub fn new(extra: &[String], defaults: bool) -> Result<Redactor, PatternError> {
        let mut rules = if defaults {
            DEFAULTS.clone()
        } else {
            Vec::new()
        };
        for (index, p) in extra.iter().enumerate() {
            rules.push(Regex::new(p).map_err(|e| PatternError {
                index,
                pattern: p.clone(),
                message: e.to_string(),
            })?);
        }
        Ok(Redactor::of(rules))
    }

    /// How many rules the set has (defaults included).
    pub fn rule_count(&self) -> usize {
        self.rules.len()
    }

    fn of(rules: Vec<Regex>) -> Redactor {
        // Every rule compiled alone, so the set compiles too; an empty set matches nothing.
        let any =
            RegexSet::new(rules.iter().map(Regex::as_str)).unwrap_or_else(|_| RegexSet::empty());
        Redactor { rules, any }
    }

    /// `s` with every secret replaced by [`REDACTED`].
    pub fn text<'a>(&self, s: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(s);
        let hits = self.any.matches(s);
        if !hits.matched_any() {
            return out;
        }
        for (i, rule) in self.rules.iter().enumerate() {
            // Replacing a secret only removes text, so a rule that did not match the original
            // cannot match now.
            if !hits.matched(i) {
                continue;
            }
            let replaced = rule
                .replace_all(&out, |caps: &regex::Captures<'_>| {
                    let whole = caps.get(0).map_or("", |m| m.as_str());
                    match (caps.get(0), caps.name("secret")) {
                        (Some(m), Some(sec)) => {
                            let start = sec.start().saturating_sub(m.start());
                            let end = sec.end().saturating_sub(m.start());
                            format!(
                                "{}{REDACTED}{}",
                                whole.get(..start).unwrap_or(""),
                                whole.get(end..).unwrap_or("")
                            )
                        }
                        _ => REDACTED.to_string(),
                    }
                })
                .into_owned();
            out = Cow::Owned(replaced);
        }
        out
    }

    /// Redacts every string of a JSON value in place; the values of an `env` object are
    /// replaced whole (only the names stay).
    pub fn json(&self, v: &mut Value) {
        match v {
            Value::String(s) => {
                if let Cow::Owned(r) = self.text(s) {
                    *s = r;
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|i| self.json(i)),
            Value::Object(map) => {
                for (k, item) in map.iter_mut() {
                    if k == "env"
                        && let Value::Object(env) = item
                    {
                        for value in env.values_mut() {
                            *value = Value::String(REDACTED.into());
                        }
                        continue;
                    }
                    self.json(item);
                }
            }
            _ => {}
        }
    }
}

/// The redactor the server runs with: shared by every clone, swapped whole when the config is
/// reloaded, so a reload reaches the gateway, the egress proxy and the approvals at once. A text
/// is redacted by the set in force when it is redacted.
#[derive(Debug, Clone, Default)]
pub struct LiveRedactor(Arc<RwLock<Arc<Redactor>>>);

impl LiveRedactor {
    /// A live redactor starting with `r`.
    pub fn new(r: Redactor) -> LiveRedactor {
        LiveRedactor(Arc::new(RwLock::new(Arc::new(r))))
    }

    /// The set in force now.
    pub fn current(&self) -> Arc<Redactor> {
        Arc::clone(&self.0.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Puts `r` in force for every clone of this handle.
    pub fn replace(&self, r: Redactor) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(r);
    }

    /// `s` with every secret replaced by [`REDACTED`] (the set in force now).
    pub fn text<'a>(&self, s: &'a str) -> Cow<'a, str> {
        self.current().text(s)
    }

    /// Redacts every string of a JSON value in place (see [`Redactor::json`]).
    pub fn json(&self, v: &mut Value) {
        self.current().json(v);
    }
}

impl From<Redactor> for LiveRedactor {
    fn from(r: Redactor) -> LiveRedactor {
        LiveRedactor::new(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_compile() {
        assert_eq!(Redactor::default().rules.len(), DEFAULT_PATTERNS.len());
    }

    #[test]
    fn default_shapes_are_redacted_and_context_is_kept() {
        let r = Redactor::default();
        let cases = [
            (
                "curl -H 'Authorization: Bearer ghp_abcdefghijklmnopqrstuvwxyz0123' https://x",
                "curl -H 'Authorization: Bearer [REDACTED]' https://x",
            ),
            (
                "curl -H 'authorization: s3cr3t'",
                "curl -H 'authorization: [REDACTED]'",
            ),
            (
                "wget 'https://h/p?token=abc123&x=1'",
                "wget 'https://h/p?token=[REDACTED]&x=1'",
            ),
            (
                "mysql --password hunter2 db",
                "mysql --password [REDACTED] db",
            ),
            (
                "mysql --password=hunter2 db",
                "mysql --password=[REDACTED] db",
            ),
            ("DB_PASSWORD=hunter2 make", "DB_PASSWORD=[REDACTED] make"),
            ("aws AKIAIOSFODNN7EXAMPLE", "aws [REDACTED]"),
            (
                "git clone https://github_pat_11ABCDEFG0123456789_abcdefghijklmnop@github.com/x",
                "git clone https://[REDACTED]@github.com/x",
            ),
            ("echo gho_0123456789abcdefghijABCDEFGHIJ", "echo [REDACTED]"),
            ("post xoxb-1234567890-abcdefghij", "post [REDACTED]"),
            ("cargo test -p engine", "cargo test -p engine"),
        ];
        for (input, want) in cases {
            assert_eq!(r.text(input), want, "{input}");
        }
    }

    #[test]
    fn round_three_shapes_are_redacted_and_context_is_kept() {
        let r = Redactor::default();
        let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlX2J5dGVz";
        let cases = [
            (
                "git clone https://alice:hunter2pass@git.example.com/r.git".to_string(),
                "git clone https://alice:[REDACTED]@git.example.com/r.git".to_string(),
            ),
            (
                "psql postgres://admin:S3cr3t%21@db.internal:5432/app".into(),
                "psql postgres://admin:[REDACTED]@db.internal:5432/app".into(),
            ),
            (
                "curl -u bob:pa55word https://x".into(),
                "curl -u bob:[REDACTED] https://x".into(),
            ),
            (
                "curl --user bob:pa55word https://x".into(),
                "curl --user bob:[REDACTED] https://x".into(),
            ),
            (
                "curl --user=bob:pa55word https://x".into(),
                "curl --user=bob:[REDACTED] https://x".into(),
            ),
            (
                "curl -H 'X-Api-Key: k3yk3yk3y' https://x".into(),
                "curl -H 'X-Api-Key: [REDACTED]' https://x".into(),
            ),
            (
                "curl -H 'PRIVATE-TOKEN: abcdef' -H 'X-Vault-Token: s.abc'".into(),
                "curl -H 'PRIVATE-TOKEN: [REDACTED]' -H 'X-Vault-Token: [REDACTED]'".into(),
            ),
            (
                "echo glpat-ABCDEFghijkl0123456789".into(),
                "echo [REDACTED]".into(),
            ),
            (
                "export K=sk-proj-abcdefghijklmnopqrstuvwxyz012345".into(),
                "export K=[REDACTED]".into(),
            ),
            (
                "stripe sk_live_51Habcdefghijklmnop".into(),
                "stripe [REDACTED]".into(),
            ),
            (format!("auth {jwt} done"), "auth [REDACTED] done".into()),
            (
                "printf '-----BEGIN RSA PRIVATE KEY-----\nMIIEabc\ndef==\n-----END RSA PRIVATE KEY-----\n'"
                    .into(),
                "printf '-----BEGIN RSA PRIVATE KEY-----[REDACTED]-----END RSA PRIVATE KEY-----\n'"
                    .into(),
            ),
            (
                "key -----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk".into(),
                "key -----BEGIN OPENSSH PRIVATE KEY-----[REDACTED]".into(),
            ),
            // Not secrets: kept.
            (
                "git clone https://github.com/o/r.git".into(),
                "git clone https://github.com/o/r.git".into(),
            ),
            ("sort -u a.txt".into(), "sort -u a.txt".into()),
            (
                "ssh-keygen -----BEGIN PUBLIC KEY-----".into(),
                "ssh-keygen -----BEGIN PUBLIC KEY-----".into(),
            ),
        ];
        for (input, want) in cases {
            assert_eq!(r.text(&input), want, "{input}");
        }
    }

    #[test]
    fn a_live_redactor_swaps_for_every_clone() {
        let live = LiveRedactor::new(Redactor::default());
        let other = live.clone();
        assert_eq!(live.text("id internal-123456"), "id internal-123456");
        other.replace(Redactor::new(&[r"internal-(?P<secret>\d+)".into()], true).unwrap());
        assert_eq!(live.text("id internal-123456"), "id internal-[REDACTED]");
    }

    #[test]
    fn json_redacts_strings_and_env_values() {
        let r = Redactor::default();
        let mut v = json!({
            "command": {"line": "curl -H 'Authorization: Bearer abcdef123456'", "prefixes": ["curl"]},
            "env": {"API_URL": "https://x", "HOME": "/h"},
            "n": 3
        });
        r.json(&mut v);
        assert_eq!(
            v,
            json!({
                "command": {"line": "curl -H 'Authorization: Bearer [REDACTED]'", "prefixes": ["curl"]},
                "env": {"API_URL": "[REDACTED]", "HOME": "[REDACTED]"},
                "n": 3
            })
        );
    }

    #[test]
    fn operator_patterns_add_to_or_replace_the_defaults() {
        let r = Redactor::new(&[r"internal-(?P<secret>\d{6})".into()], true).unwrap();
        assert_eq!(
            r.text("id internal-123456 ghp_abcdefghijklmnopqrstu0"),
            "id internal-[REDACTED] [REDACTED]"
        );
        let only = Redactor::new(&[r"internal-\d+".into()], false).unwrap();
        assert_eq!(
            only.text("internal-1 ghp_abcdefghijklmnopqrstu0"),
            "[REDACTED] ghp_abcdefghijklmnopqrstu0"
        );
        let bad = Redactor::new(&["(".into()], true).unwrap_err();
        assert_eq!(bad.index, 0);
    }
}
