//! `identity.oidc`: the OpenID Connect issuer whose JWT access tokens the HTTP transport accepts
//! beside the static client tokens, and how their claims become the `User` entity.

use schemars::JsonSchema;
use serde::Deserialize;
use std::collections::BTreeMap;

/// `identity`: who callers are beyond the static client tokens.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Identity")]
pub struct Identity {
    /// OIDC bearer tokens on the HTTP transport (docs/config.md). Absent: only `clients`.
    #[serde(default)]
    pub oidc: Option<OidcConfig>,
}

/// `identity.oidc`: the issuer, this server's audience, and the claim mapping.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Oidc")]
pub struct OidcConfig {
    /// The issuer (`iss`), exactly as its tokens and discovery document spell it,
    /// e.g. `https://login.example.com/realms/dev`. `https://` unless the host is loopback.
    pub issuer: String,
    /// The `aud` a token must carry: this server's resource URL (RFC 8707), e.g.
    /// `https://codespace.example.com/mcp`. Also the `resource` of the protected resource
    /// metadata.
    pub audience: String,
    /// The issuer's JWKS. Absent: `jwks_uri` of `<issuer>/.well-known/openid-configuration`.
    #[serde(default)]
    pub jwks_uri: Option<String>,
    /// Which claim becomes which attribute of the caller's `User` entity.
    #[serde(default)]
    pub claims: ClaimMap,
    /// Signature algorithms accepted (default `["RS256", "ES256"]`). Only asymmetric ones:
    /// `none` and the HS* family cannot be named.
    #[serde(default = "default_algorithms")]
    pub algorithms: Vec<OidcAlgorithm>,
    /// Seconds of clock skew allowed on `exp` and `nbf` (default 30).
    #[serde(default = "default_leeway")]
    pub leeway_secs: u64,
}

/// `identity.oidc.claims`: claim names by attribute. `user` names the entity id, `email` and
/// `groups` its attributes; every other entry becomes a tag of the `User` entity
/// (`context.session.user.getTag("<name>")`).
// No `deny_unknown_fields`: every other key is a further claim (`extra`, flattened).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(rename = "OidcClaims")]
pub struct ClaimMap {
    /// The claim naming the user: `User::"<value>"` (default `sub`).
    #[serde(default = "default_user_claim")]
    pub user: String,
    /// The claim of the `email` attribute (default `email`).
    #[serde(default = "default_email_claim")]
    pub email: String,
    /// The claim listing the user's groups, each a parent `Group::"<name>"` (default `groups`).
    #[serde(default = "default_groups_claim")]
    pub groups: String,
    /// Any further claim, as `attribute: claim`: a string, number or boolean claim becomes the
    /// tag `attribute` (as a string).
    #[serde(flatten)]
    pub extra: BTreeMap<String, String>,
}

impl Default for ClaimMap {
    fn default() -> ClaimMap {
        ClaimMap {
            user: default_user_claim(),
            email: default_email_claim(),
            groups: default_groups_claim(),
            extra: BTreeMap::new(),
        }
    }
}

/// A JWS algorithm a token may be signed with (asymmetric only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
pub enum OidcAlgorithm {
    /// RSASSA-PKCS1-v1_5 with SHA-256.
    RS256,
    /// RSASSA-PKCS1-v1_5 with SHA-384.
    RS384,
    /// RSASSA-PKCS1-v1_5 with SHA-512.
    RS512,
    /// RSASSA-PSS with SHA-256.
    PS256,
    /// RSASSA-PSS with SHA-384.
    PS384,
    /// RSASSA-PSS with SHA-512.
    PS512,
    /// ECDSA P-256 with SHA-256.
    ES256,
    /// ECDSA P-384 with SHA-384.
    ES384,
    /// Ed25519.
    EdDSA,
}

fn default_algorithms() -> Vec<OidcAlgorithm> {
    vec![OidcAlgorithm::RS256, OidcAlgorithm::ES256]
}

fn default_leeway() -> u64 {
    30
}

fn default_user_claim() -> String {
    "sub".into()
}

fn default_email_claim() -> String {
    "email".into()
}

fn default_groups_claim() -> String {
    "groups".into()
}

/// True for `http://` URLs whose host is loopback (`127.0.0.1`, `[::1]`, `localhost`).
fn loopback_http(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("http://") else {
        return false;
    };
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = match host.rsplit_once(':') {
        Some((h, p)) if !h.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => host,
    };
    matches!(host, "127.0.0.1" | "[::1]" | "localhost")
}

fn check_url(field: &str, url: &str) -> Result<(), String> {
    if url.starts_with("https://") && url.len() > "https://".len() || loopback_http(url) {
        Ok(())
    } else {
        Err(format!(
            "identity.oidc.{field} must be an https:// URL (http:// only for a loopback host), not `{url}`"
        ))
    }
}

impl OidcConfig {
    /// The checks serde cannot make: URLs, a non-empty audience and algorithm list, claim names.
    pub fn check(&self) -> Result<(), String> {
        check_url("issuer", &self.issuer)?;
        if let Some(j) = &self.jwks_uri {
            check_url("jwks_uri", j)?;
        }
        if self.audience.trim().is_empty() {
            return Err("identity.oidc.audience must name this server's resource URL".into());
        }
        if self.algorithms.is_empty() {
            return Err("identity.oidc.algorithms must name at least one algorithm".into());
        }
        for (attr, claim) in [
            ("user", &self.claims.user),
            ("email", &self.claims.email),
            ("groups", &self.claims.groups),
        ]
        .into_iter()
        .chain(self.claims.extra.iter().map(|(k, v)| (k.as_str(), v)))
        {
            if claim.is_empty() {
                return Err(format!("identity.oidc.claims.{attr} must name a claim"));
            }
        }
        for attr in self.claims.extra.keys() {
            if attr.is_empty() || !attr.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                return Err(format!(
                    "identity.oidc.claims: `{attr}` is not an attribute name (letters, digits, _)"
                ));
            }
        }
        Ok(())
    }

    /// The issuer without a trailing `/` (discovery documents are at `<this>/.well-known/…`).
    pub fn issuer_base(&self) -> &str {
        self.issuer.strip_suffix('/').unwrap_or(&self.issuer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: serde_json::Value) -> Result<OidcConfig, String> {
        let c: OidcConfig = serde_json::from_value(v).map_err(|e| e.to_string())?;
        c.check().map(|()| c)
    }

    #[test]
    fn defaults_and_extra_claims() {
        let c = parse(serde_json::json!({
            "issuer": "https://idp.example.com",
            "audience": "https://cs.example.com/mcp",
            "claims": {"department": "dept"}
        }))
        .unwrap();
        assert_eq!(c.claims.user, "sub");
        assert_eq!(c.claims.groups, "groups");
        assert_eq!(c.claims.extra.get("department").unwrap(), "dept");
        assert_eq!(
            c.algorithms,
            vec![OidcAlgorithm::RS256, OidcAlgorithm::ES256]
        );
    }

    #[test]
    fn symmetric_and_none_algorithms_cannot_be_named() {
        for alg in ["HS256", "none", "HS512"] {
            let e = parse(serde_json::json!({
                "issuer": "https://idp.example.com",
                "audience": "x",
                "algorithms": [alg]
            }))
            .unwrap_err();
            assert!(e.contains("unknown variant"), "{alg}: {e}");
        }
    }

    #[test]
    fn plain_http_only_on_loopback() {
        for (iss, ok) in [
            ("http://127.0.0.1:8080/", true),
            ("http://localhost:9", true),
            ("http://idp.example.com", false),
            ("http://127.0.0.1.evil.com/", false),
            ("https://idp.example.com", true),
            ("ftp://x", false),
        ] {
            let r = parse(serde_json::json!({"issuer": iss, "audience": "a"}));
            assert_eq!(r.is_ok(), ok, "{iss}: {r:?}");
        }
    }
}
