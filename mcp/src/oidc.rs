//! OIDC bearer tokens on the HTTP transport (`identity.oidc`): a JWT access token is checked
//! against the issuer's JWKS (signature with an allow-listed asymmetric algorithm, `iss`, `aud`
//! = this server's resource, `exp`/`nbf` with a small leeway) and its mapped claims become the
//! caller's [`UserFacts`]. The JWKS is fetched on the blocking pool (never on an async worker),
//! from `jwks_uri` or the issuer's discovery document, kept, and fetched again when a token
//! names an unknown `kid` (at most once per [`REFRESH_MIN_INTERVAL`]); no keys means no token
//! passes (fail closed). Why a token failed goes to the server log, never to the caller.

use codespace_engine::config::{OidcAlgorithm, OidcConfig};
use codespace_engine::policy::user::UserFacts;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, JwkSet, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tokio::sync::Mutex;

/// The least time between two JWKS fetches an unknown `kid` may cause.
pub const REFRESH_MIN_INTERVAL: Duration = Duration::from_secs(30);
/// How long one fetch of a discovery document or JWKS may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest discovery document or JWKS read.
const FETCH_MAX_BYTES: u64 = 256 * 1024;
/// The longest token looked at.
const TOKEN_MAX_BYTES: usize = 16 * 1024;

/// Who an accepted OIDC token names.
#[derive(Debug, Clone)]
pub struct OidcCaller {
    /// `context.session.client`: `oidc:<client_id or azp>` (`oidc:` alone when the token names
    /// no client), never a static client's name.
    pub client: String,
    /// The person (`context.session.user`).
    pub user: UserFacts,
}

/// Why a token was refused (logged, never sent).
#[derive(Debug, thiserror::Error)]
pub enum Rejection {
    /// Not a JWS compact token, or a header that does not parse (`alg: none` included).
    #[error("not a signed JWT: {0}")]
    Malformed(String),
    /// The header's algorithm is not in `identity.oidc.algorithms`.
    #[error("algorithm {0:?} is not allowed")]
    Algorithm(Algorithm),
    /// No key of the issuer has the token's `kid` (after a refresh, when one was allowed).
    #[error("no key of the issuer has kid {0:?}")]
    UnknownKey(Option<String>),
    /// The issuer's keys could not be had.
    #[error("the issuer's keys are unavailable: {0}")]
    NoKeys(String),
    /// Signature, `iss`, `aud`, `exp`, `nbf` or a required claim failed.
    #[error("token invalid: {0}")]
    Invalid(String),
    /// The mapped user claim is missing or not a string.
    #[error("claim `{0}` (the user) is missing or not a string")]
    NoUser(String),
}

/// One usable key of the JWKS.
#[derive(Clone)]
struct Key {
    kid: Option<String>,
    /// The JWK's own `alg`, when it names one: the token's must equal it.
    alg: Option<Algorithm>,
    key: DecodingKey,
    /// Which algorithms the key's type can verify.
    fits: fn(Algorithm) -> bool,
}

#[derive(Default)]
struct Cache {
    keys: Vec<Key>,
    /// The last fetch attempt (successful or not).
    attempted: Option<Instant>,
    /// Fetch attempts so far.
    fetches: u64,
}

/// Checks tokens of one issuer.
pub struct OidcVerifier {
    cfg: OidcConfig,
    algorithms: Vec<Algorithm>,
    cache: Mutex<Cache>,
    /// The least time between two fetches ([`REFRESH_MIN_INTERVAL`]; shorter in tests).
    refresh_min: Duration,
}

impl std::fmt::Debug for OidcVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OidcVerifier")
            .field("issuer", &self.cfg.issuer)
            .field("audience", &self.cfg.audience)
            .finish_non_exhaustive()
    }
}

fn algorithm(a: OidcAlgorithm) -> Algorithm {
    match a {
        OidcAlgorithm::RS256 => Algorithm::RS256,
        OidcAlgorithm::RS384 => Algorithm::RS384,
        OidcAlgorithm::RS512 => Algorithm::RS512,
        OidcAlgorithm::PS256 => Algorithm::PS256,
        OidcAlgorithm::PS384 => Algorithm::PS384,
        OidcAlgorithm::PS512 => Algorithm::PS512,
        OidcAlgorithm::ES256 => Algorithm::ES256,
        OidcAlgorithm::ES384 => Algorithm::ES384,
        OidcAlgorithm::EdDSA => Algorithm::EdDSA,
    }
}

fn rsa_alg(a: Algorithm) -> bool {
    matches!(
        a,
        Algorithm::RS256
            | Algorithm::RS384
            | Algorithm::RS512
            | Algorithm::PS256
            | Algorithm::PS384
            | Algorithm::PS512
    )
}
fn p256_alg(a: Algorithm) -> bool {
    a == Algorithm::ES256
}
fn p384_alg(a: Algorithm) -> bool {
    a == Algorithm::ES384
}
fn ed_alg(a: Algorithm) -> bool {
    a == Algorithm::EdDSA
}

/// The usable keys of a JWKS: signing keys of an asymmetric type (a symmetric `oct` key is
/// never a verification key here, so a token cannot be checked as HMAC with a public key).
fn usable_keys(set: &JwkSet) -> Vec<Key> {
    set.keys
        .iter()
        .filter(|j| !matches!(j.common.public_key_use, Some(PublicKeyUse::Encryption)))
        .filter_map(|j: &Jwk| {
            let fits: fn(Algorithm) -> bool = match &j.algorithm {
                AlgorithmParameters::RSA(_) => rsa_alg,
                AlgorithmParameters::EllipticCurve(p) => match p.curve {
                    EllipticCurve::P256 => p256_alg,
                    EllipticCurve::P384 => p384_alg,
                    _ => return None,
                },
                AlgorithmParameters::OctetKeyPair(_) => ed_alg,
                AlgorithmParameters::OctetKey(_) => return None,
            };
            let alg = match &j.common.key_algorithm {
                None => None,
                // A JWK `alg` this server cannot verify with (e.g. `RSA-OAEP`): not a signing key.
                Some(k) => Some(k.to_string().parse::<Algorithm>().ok()?),
            };
            let key = DecodingKey::from_jwk(j).ok()?;
            Some(Key {
                kid: j.common.key_id.clone(),
                alg,
                key,
                fits,
            })
        })
        .collect()
}

/// GETs `url` (JSON, bounded) on this (blocking) thread.
fn get_json(url: &str) -> Result<Value, String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(FETCH_TIMEOUT))
        .http_status_as_error(true)
        .max_redirects(3)
        .build()
        .into();
    let mut resp = agent
        .get(url)
        .call()
        .map_err(|e| format!("GET {url}: {e}"))?;
    let text = resp
        .body_mut()
        .with_config()
        .limit(FETCH_MAX_BYTES)
        .read_to_string()
        .map_err(|e| format!("GET {url}: {e}"))?;
    serde_json::from_str(&text).map_err(|e| format!("GET {url}: not JSON: {e}"))
}

/// The JWKS of `cfg` (through discovery when `jwks_uri` is not set), fetched on this thread.
fn fetch_keys(cfg: &OidcConfig) -> Result<Vec<Key>, String> {
    let jwks_uri = match &cfg.jwks_uri {
        Some(u) => u.clone(),
        None => {
            let url = format!("{}/.well-known/openid-configuration", cfg.issuer_base());
            let doc = get_json(&url)?;
            // OIDC Discovery: the document's issuer must be the one configured.
            let iss = doc.get("issuer").and_then(Value::as_str).unwrap_or("");
            if iss != cfg.issuer {
                return Err(format!(
                    "{url}: issuer `{iss}` is not the configured `{}`",
                    cfg.issuer
                ));
            }
            let u = doc
                .get("jwks_uri")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("{url}: no jwks_uri"))?
                .to_string();
            let probe = OidcConfig {
                jwks_uri: Some(u.clone()),
                ..cfg.clone()
            };
            probe.check()?;
            u
        }
    };
    let set: JwkSet = serde_json::from_value(get_json(&jwks_uri)?)
        .map_err(|e| format!("{jwks_uri}: not a JWKS: {e}"))?;
    let keys = usable_keys(&set);
    if keys.is_empty() {
        return Err(format!("{jwks_uri}: no usable signing key"));
    }
    Ok(keys)
}

impl OidcVerifier {
    /// A verifier for `cfg` (already checked by the config loader). Fetches nothing yet.
    pub fn new(cfg: OidcConfig) -> OidcVerifier {
        let algorithms = cfg.algorithms.iter().copied().map(algorithm).collect();
        OidcVerifier {
            cfg,
            algorithms,
            cache: Mutex::new(Cache::default()),
            refresh_min: REFRESH_MIN_INTERVAL,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &OidcConfig {
        &self.cfg
    }

    /// Fetches the JWKS now (at start-up, so the first caller does not wait); a failure is
    /// logged and retried when a token arrives.
    pub async fn prefetch(&self) {
        let mut cache = self.cache.lock().await;
        self.refresh(&mut cache).await;
    }

    /// Fetches the keys on the blocking pool; keeps the old ones when the fetch fails.
    async fn refresh(&self, cache: &mut Cache) {
        cache.attempted = Some(Instant::now());
        cache.fetches += 1;
        let cfg = self.cfg.clone();
        match tokio::task::spawn_blocking(move || fetch_keys(&cfg)).await {
            Ok(Ok(keys)) => {
                tracing::info!(issuer = %self.cfg.issuer, keys = keys.len(), "OIDC: fetched the issuer's JWKS");
                cache.keys = keys;
            }
            Ok(Err(e)) => {
                tracing::warn!(issuer = %self.cfg.issuer, error = %e, "OIDC: cannot fetch the issuer's JWKS");
            }
            Err(e) => {
                tracing::warn!(issuer = %self.cfg.issuer, error = %e, "OIDC: the JWKS fetch failed");
            }
        }
    }

    /// The key for a token's `kid` and `alg`, fetching the JWKS again (rate-limited) when no
    /// kept key fits.
    async fn key_for(&self, kid: Option<&str>, alg: Algorithm) -> Result<Key, Rejection> {
        let pick = |keys: &[Key]| -> Option<Key> {
            keys.iter()
                .filter(|k| (k.fits)(alg) && k.alg.is_none_or(|a| a == alg))
                .find(|k| match kid {
                    Some(id) => k.kid.as_deref() == Some(id),
                    None => true,
                })
                .cloned()
        };
        let mut cache = self.cache.lock().await;
        if let Some(k) = pick(&cache.keys) {
            return Ok(k);
        }
        let may_fetch = cache
            .attempted
            .is_none_or(|t| t.elapsed() >= self.refresh_min);
        if may_fetch {
            self.refresh(&mut cache).await;
            if let Some(k) = pick(&cache.keys) {
                return Ok(k);
            }
        }
        if cache.keys.is_empty() {
            return Err(Rejection::NoKeys(
                "no JWKS fetched yet (see the earlier warning)".into(),
            ));
        }
        Err(Rejection::UnknownKey(kid.map(str::to_string)))
    }

    /// Checks `token`; the caller it names, or why not.
    pub async fn verify(&self, token: &str) -> Result<OidcCaller, Rejection> {
        if token.len() > TOKEN_MAX_BYTES {
            return Err(Rejection::Malformed("token too long".into()));
        }
        let header =
            jsonwebtoken::decode_header(token).map_err(|e| Rejection::Malformed(e.to_string()))?;
        if !self.algorithms.contains(&header.alg) {
            return Err(Rejection::Algorithm(header.alg));
        }
        let key = self.key_for(header.kid.as_deref(), header.alg).await?;
        let mut v = Validation::new(header.alg);
        v.algorithms = vec![header.alg];
        v.set_issuer(&[&self.cfg.issuer]);
        v.set_audience(&[&self.cfg.audience]);
        v.leeway = self.cfg.leeway_secs;
        v.validate_exp = true;
        v.validate_nbf = true;
        v.set_required_spec_claims(&["exp", "iss", "aud"]);
        let data = jsonwebtoken::decode::<Map<String, Value>>(token, &key.key, &v)
            .map_err(|e| Rejection::Invalid(e.to_string()))?;
        self.caller(&data.claims)
    }

    /// The caller the (verified) claims name.
    fn caller(&self, claims: &Map<String, Value>) -> Result<OidcCaller, Rejection> {
        let map = &self.cfg.claims;
        let id = claims
            .get(&map.user)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| Rejection::NoUser(map.user.clone()))?
            .to_string();
        let email = claims
            .get(&map.email)
            .and_then(Value::as_str)
            .map(str::to_string);
        let groups = match claims.get(&map.groups) {
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect(),
            Some(Value::String(s)) => s.split_whitespace().map(str::to_string).collect(),
            _ => Vec::new(),
        };
        let tags: BTreeMap<String, String> = map
            .extra
            .iter()
            .filter_map(|(attr, claim)| {
                let v = match claims.get(claim)? {
                    Value::String(s) => s.clone(),
                    Value::Number(n) => n.to_string(),
                    Value::Bool(b) => b.to_string(),
                    _ => return None,
                };
                Some((attr.clone(), v))
            })
            .collect();
        let client_id = claims
            .get("client_id")
            .or_else(|| claims.get("azp"))
            .and_then(Value::as_str)
            .unwrap_or("");
        Ok(OidcCaller {
            client: format!("oidc:{client_id}"),
            user: UserFacts {
                id,
                email,
                groups,
                tags,
            },
        })
    }

    /// The protected resource metadata (RFC 9728) of this server.
    pub fn resource_metadata(&self) -> Value {
        serde_json::json!({
            "resource": self.cfg.audience,
            "authorization_servers": [self.cfg.issuer],
            "bearer_methods_supported": ["header"],
            "resource_signing_alg_values_supported":
                self.algorithms.iter().map(|a| format!("{a:?}")).collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn cfg() -> OidcConfig {
        serde_json::from_value(serde_json::json!({
            "issuer": "http://127.0.0.1:1",
            "audience": "http://127.0.0.1:2/mcp",
            "claims": {"department": "dept"}
        }))
        .unwrap()
    }

    #[test]
    fn claims_map_to_the_user() {
        let v = OidcVerifier::new(cfg());
        let claims: Map<String, Value> = serde_json::from_value(serde_json::json!({
            "sub": "alice", "email": "a@x", "groups": ["g1", 7, "g2"], "dept": 42,
            "client_id": "inspector"
        }))
        .unwrap();
        let c = v.caller(&claims).unwrap();
        assert_eq!(c.client, "oidc:inspector");
        assert_eq!(c.user.id, "alice");
        assert_eq!(c.user.groups, vec!["g1", "g2"]);
        assert_eq!(c.user.tags.get("department").unwrap(), "42");
        let none: Map<String, Value> =
            serde_json::from_value(serde_json::json!({"sub": 5})).unwrap();
        assert!(matches!(v.caller(&none), Err(Rejection::NoUser(_))));
    }

    #[test]
    fn symmetric_keys_are_never_usable() {
        let set: JwkSet = serde_json::from_value(serde_json::json!({"keys": [
            {"kty": "oct", "k": "c2VjcmV0", "kid": "h"},
            {"kty": "EC", "crv": "P-256", "kid": "e",
             "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
             "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}
        ]}))
        .unwrap();
        let keys = usable_keys(&set);
        assert_eq!(keys.len(), 1);
        assert_eq!(keys[0].kid.as_deref(), Some("e"));
        assert!((keys[0].fits)(Algorithm::ES256));
        assert!(!(keys[0].fits)(Algorithm::HS256));
    }

    /// An Ed25519 key from a random seed: its signing key (PKCS#8 v1 DER) and public JWK.
    fn ed_key(kid: &str) -> (jsonwebtoken::EncodingKey, Value) {
        let mut seed = [0_u8; 32];
        getrandom::fill(&mut seed).unwrap();
        let mut der = hex::decode("302e020100300506032b657004220420").unwrap();
        der.extend_from_slice(&seed);
        let key = jsonwebtoken::EncodingKey::from_ed_der(&der);
        let public = ed25519_dalek::SigningKey::from_bytes(&seed)
            .verifying_key()
            .to_bytes();
        let jwk = serde_json::json!({"kty": "OKP", "crv": "Ed25519", "kid": kid,
            "x": base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, public)});
        (key, jwk)
    }

    fn sign(kid: &str, key: &jsonwebtoken::EncodingKey, claims: &Value) -> String {
        let mut h = jsonwebtoken::Header::new(Algorithm::EdDSA);
        h.kid = Some(kid.into());
        jsonwebtoken::encode(&h, claims, key).unwrap()
    }

    /// A loopback server answering every GET with the current `jwks`.
    async fn jwks_server(jwks: Arc<std::sync::Mutex<Value>>) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/jwks", l.local_addr().unwrap());
        tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = l.accept().await else {
                    return;
                };
                let body = jwks.lock().unwrap().to_string();
                tokio::spawn(async move {
                    let mut buf = vec![0_u8; 4096];
                    let _ = s.read(&mut buf).await;
                    let resp = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = s.write_all(resp.as_bytes()).await;
                });
            }
        });
        url
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_rotated_key_is_fetched_on_its_unknown_kid_at_most_once_per_interval() {
        let (k1, j1) = ed_key("k1");
        let (k2, j2) = ed_key("k2");
        let (rogue, _) = ed_key("rogue");
        let jwks = Arc::new(std::sync::Mutex::new(serde_json::json!({"keys": [j1]})));
        let url = jwks_server(Arc::clone(&jwks)).await;
        let mut c = cfg();
        c.jwks_uri = Some(url);
        c.algorithms = vec![OidcAlgorithm::EdDSA];
        let mut v = OidcVerifier::new(c);
        v.refresh_min = Duration::ZERO;
        let claims = serde_json::json!({"iss": "http://127.0.0.1:1", "aud": "http://127.0.0.1:2/mcp",
            "sub": "alice", "exp": jsonwebtoken::get_current_timestamp() + 60});
        assert_eq!(
            v.verify(&sign("k1", &k1, &claims)).await.unwrap().user.id,
            "alice"
        );
        // The issuer rotates: k1 goes, k2 comes. A k2 token makes the verifier fetch again.
        *jwks.lock().unwrap() = serde_json::json!({"keys": [j2]});
        assert!(v.verify(&sign("k2", &k2, &claims)).await.is_ok());
        assert_eq!(v.cache.lock().await.fetches, 2);
        // Within the interval, unknown kids cause no fetch at all.
        v.refresh_min = Duration::from_secs(3600);
        for _ in 0..5 {
            assert!(matches!(
                v.verify(&sign("rogue", &rogue, &claims)).await,
                Err(Rejection::UnknownKey(_))
            ));
        }
        assert_eq!(v.cache.lock().await.fetches, 2);
        // The rotated-out key is gone with its JWKS entry.
        assert!(matches!(
            v.verify(&sign("k1", &k1, &claims)).await,
            Err(Rejection::UnknownKey(_))
        ));
    }

    #[tokio::test]
    async fn no_keys_fails_closed_and_none_is_malformed() {
        let v = OidcVerifier::new(cfg());
        // `{"alg":"none"}` . `{}` . ``
        let none = "eyJhbGciOiJub25lIn0.e30.";
        assert!(matches!(v.verify(none).await, Err(Rejection::Malformed(_))));
        // ES256 header with a kid; the issuer at 127.0.0.1:1 answers nothing.
        let es = "eyJhbGciOiJFUzI1NiIsImtpZCI6ImsifQ.e30.AAAA";
        assert!(matches!(v.verify(es).await, Err(Rejection::NoKeys(_))));
        // HS256 is never in the list.
        let hs = "eyJhbGciOiJIUzI1NiJ9.e30.AAAA";
        assert!(matches!(v.verify(hs).await, Err(Rejection::Algorithm(_))));
    }
}
