//! OpenID Connect login for the console: the authorization code flow with PKCE (S256), a `state` bound to the
//! browser by a cookie, a `nonce` checked in the ID token, and roles (viewer, operator, admin) mapped from a claim.
//!
//! The provider's endpoints come from its discovery document (`<issuer>/.well-known/openid-configuration`, read at
//! the first login and kept), the code is exchanged at its token endpoint with the client's secret (HTTP Basic),
//! and the ID token is checked here: its signature with the provider's keys (`jwks_uri`, RS256 or ES256, read again
//! when a key id is unknown), then `iss`, `aud`, `azp`, `exp` and `nonce`. No OIDC crate: the flow is three HTTP
//! calls and one JWS check, which the workspace's hyper client and `ring` (already in the build) do without a
//! second HTTP stack or crypto provider.
//!
//! Pending logins (state, PKCE verifier, nonce) are kept in this process's memory for [`PENDING_TTL`], like the
//! sessions: behind several replicas the console needs sticky sessions.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use base64::{Engine as _, engine::general_purpose::URL_SAFE_NO_PAD};
use bytes::Bytes;
use hookline_common::{http_client::HttpsClient, wire::now_ms};
use http::{Method, Request, header};
use http_body_util::{BodyExt, Full, Limited};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::{Principal, Scope};
use crate::config::OidcConfig;

/// How long a login may take at the provider.
pub const PENDING_TTL: Duration = Duration::from_secs(600);
/// Pending logins kept at most (the oldest go first): a login page hit in a loop costs bounded memory.
const MAX_PENDING: usize = 10_000;
/// The most a provider's answer may be.
const MAX_ANSWER_BYTES: usize = 1024 * 1024;
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Leeway for the ID token's `exp` and `iat` against this host's clock.
const CLOCK_LEEWAY_MS: i64 = 60_000;

#[derive(Debug, thiserror::Error)]
pub enum OidcError {
    #[error("the provider could not be reached or answered {0}")]
    Provider(String),
    #[error("the login is unknown or expired: start again")]
    UnknownState,
    #[error("the ID token is not valid: {0}")]
    IdToken(&'static str),
    #[error("`{subject}` has no role for this console (claim `{claim}`)")]
    NoRole { subject: String, claim: String },
}

/// The provider's endpoints, from its discovery document.
#[derive(Debug, Clone, Deserialize)]
struct Discovery {
    issuer: String,
    authorization_endpoint: String,
    token_endpoint: String,
    jwks_uri: String,
}

#[derive(Debug, Clone, Deserialize)]
struct Jwk {
    kty: String,
    kid: Option<String>,
    n: Option<String>,
    e: Option<String>,
    crv: Option<String>,
    x: Option<String>,
    y: Option<String>,
}

#[derive(Debug)]
struct Pending {
    verifier: String,
    nonce: String,
    at: Instant,
}

/// The console's OIDC client.
pub struct OidcClient {
    config: OidcConfig,
    secret: SecretString,
    http: HttpsClient,
    discovery: tokio::sync::Mutex<Option<(Discovery, Vec<Jwk>)>>,
    pending: Mutex<HashMap<String, Pending>>,
}

impl std::fmt::Debug for OidcClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OidcClient").field("issuer", &self.config.issuer).finish_non_exhaustive()
    }
}

fn random_url_safe() -> String {
    URL_SAFE_NO_PAD.encode(rand::random::<[u8; 32]>())
}

impl OidcClient {
    pub fn new(config: OidcConfig, secret: SecretString, http: HttpsClient) -> Self {
        Self { config, secret, http, discovery: tokio::sync::Mutex::new(None), pending: Mutex::default() }
    }

    /// Starts a login: the state to bind to the browser, and the provider's authorization URL to send it to.
    pub async fn begin(&self) -> Result<(String, String), OidcError> {
        let (discovery, _) = self.discovery(false).await?;
        let (state, nonce, verifier) = (random_url_safe(), random_url_safe(), random_url_safe());
        let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
        let query = form_urlencoded::Serializer::new(String::new())
            .append_pair("response_type", "code")
            .append_pair("client_id", &self.config.client_id)
            .append_pair("redirect_uri", &self.config.redirect_url)
            .append_pair("scope", &self.config.scopes.join(" "))
            .append_pair("state", &state)
            .append_pair("nonce", &nonce)
            .append_pair("code_challenge", &challenge)
            .append_pair("code_challenge_method", "S256")
            .finish();
        let separator = if discovery.authorization_endpoint.contains('?') { '&' } else { '?' };
        let url = format!("{}{separator}{query}", discovery.authorization_endpoint);
        let mut pending = self.pending.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        pending.retain(|_, login| login.at.elapsed() < PENDING_TTL);
        if pending.len() >= MAX_PENDING
            && let Some(oldest) = pending.iter().min_by_key(|(_, login)| login.at).map(|(state, _)| state.clone())
        {
            pending.remove(&oldest);
        }
        pending.insert(state.clone(), Pending { verifier, nonce, at: Instant::now() });
        Ok((state, url))
    }

    /// Finishes a login: `state` (the query's, already compared with the browser's cookie) and the `code`.
    pub async fn finish(&self, state: &str, code: &str) -> Result<Principal, OidcError> {
        let pending = self.pending.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).remove(state);
        let pending = pending.filter(|login| login.at.elapsed() < PENDING_TTL).ok_or(OidcError::UnknownState)?;
        let (discovery, _) = self.discovery(false).await?;
        let body = form_urlencoded::Serializer::new(String::new())
            .append_pair("grant_type", "authorization_code")
            .append_pair("code", code)
            .append_pair("redirect_uri", &self.config.redirect_url)
            .append_pair("code_verifier", &pending.verifier)
            .finish();
        let encode = |text: &str| form_urlencoded::byte_serialize(text.as_bytes()).collect::<String>();
        let basic = base64::engine::general_purpose::STANDARD.encode(format!(
            "{}:{}",
            encode(&self.config.client_id),
            encode(self.secret.expose_secret())
        ));
        let request = Request::builder()
            .method(Method::POST)
            .uri(&discovery.token_endpoint)
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(header::AUTHORIZATION, format!("Basic {basic}"))
            .header(header::ACCEPT, "application/json")
            .body(Full::new(Bytes::from(body)))
            .map_err(|error| OidcError::Provider(error.to_string()))?;
        #[derive(Deserialize)]
        struct TokenAnswer {
            id_token: String,
        }
        let answer: TokenAnswer = self.call(request).await?;
        let claims = self.verify_id_token(&answer.id_token, &pending.nonce).await?;
        self.principal_of(&claims)
    }

    /// The subject and scope the ID token's claims give.
    fn principal_of(&self, claims: &serde_json::Value) -> Result<Principal, OidcError> {
        let subject = claims
            .get(&self.config.subject_claim)
            .and_then(serde_json::Value::as_str)
            .filter(|subject| !subject.is_empty())
            .ok_or(OidcError::IdToken("no subject claim"))?;
        let roles: Vec<&str> = match claims.get(&self.config.roles_claim) {
            Some(serde_json::Value::String(role)) => vec![role.as_str()],
            Some(serde_json::Value::Array(roles)) => roles.iter().filter_map(serde_json::Value::as_str).collect(),
            _ => Vec::new(),
        };
        let has = |names: &[String]| roles.iter().any(|role| names.iter().any(|name| name == role));
        let scope = if has(&self.config.admin_roles) {
            Scope::Admin
        } else if has(&self.config.operator_roles) {
            Scope::Operate
        } else if has(&self.config.viewer_roles) {
            Scope::Read
        } else {
            return Err(OidcError::NoRole { subject: subject.to_owned(), claim: self.config.roles_claim.clone() });
        };
        Ok(Principal { subject: format!("oidc:{subject}"), scope })
    }

    async fn verify_id_token(&self, token: &str, nonce: &str) -> Result<serde_json::Value, OidcError> {
        let mut parts = token.split('.');
        let (Some(head), Some(body), Some(signature), None) = (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(OidcError::IdToken("not a JWS"));
        };
        let decode = |part: &str| URL_SAFE_NO_PAD.decode(part).map_err(|_| OidcError::IdToken("not base64url"));
        let header: serde_json::Value =
            serde_json::from_slice(&decode(head)?).map_err(|_| OidcError::IdToken("header not JSON"))?;
        let alg = header.get("alg").and_then(serde_json::Value::as_str).unwrap_or("");
        let kid = header.get("kid").and_then(serde_json::Value::as_str);
        let signed = format!("{head}.{body}");
        let signature = decode(signature)?;
        let mut verified = false;
        for refresh in [false, true] {
            let (_, keys) = self.discovery(refresh).await?;
            let candidates = keys.iter().filter(|key| kid.is_none() || key.kid.as_deref() == kid);
            if candidates.clone().any(|key| verify_with(key, alg, signed.as_bytes(), &signature)) {
                verified = true;
                break;
            }
        }
        if !verified {
            return Err(OidcError::IdToken("signature does not verify with the provider's keys (RS256, ES256)"));
        }
        let claims: serde_json::Value =
            serde_json::from_slice(&decode(body)?).map_err(|_| OidcError::IdToken("claims not JSON"))?;
        self.check_claims(&claims, nonce, now_ms())?;
        Ok(claims)
    }

    fn check_claims(&self, claims: &serde_json::Value, nonce: &str, now_ms: i64) -> Result<(), OidcError> {
        let text = |name: &str| claims.get(name).and_then(serde_json::Value::as_str);
        if text("iss") != Some(self.config.issuer.trim_end_matches('/')) && text("iss") != Some(&self.config.issuer) {
            return Err(OidcError::IdToken("wrong issuer"));
        }
        let audiences: Vec<&str> = match claims.get("aud") {
            Some(serde_json::Value::String(aud)) => vec![aud.as_str()],
            Some(serde_json::Value::Array(auds)) => auds.iter().filter_map(serde_json::Value::as_str).collect(),
            _ => Vec::new(),
        };
        if !audiences.contains(&self.config.client_id.as_str()) {
            return Err(OidcError::IdToken("not issued to this client"));
        }
        if audiences.len() > 1 && text("azp") != Some(self.config.client_id.as_str()) {
            return Err(OidcError::IdToken("azp is not this client"));
        }
        let exp_ms = claims.get("exp").and_then(serde_json::Value::as_i64).map(|exp| exp.saturating_mul(1000));
        if exp_ms.is_none_or(|exp| exp + CLOCK_LEEWAY_MS < now_ms) {
            return Err(OidcError::IdToken("expired"));
        }
        let nonce_matches = text("nonce")
            .is_some_and(|claimed| bool::from(subtle::ConstantTimeEq::ct_eq(claimed.as_bytes(), nonce.as_bytes())));
        if !nonce_matches {
            return Err(OidcError::IdToken("nonce does not match this login"));
        }
        Ok(())
    }

    /// The discovery document and the provider's keys: kept after the first read, read again when `refresh`.
    async fn discovery(&self, refresh: bool) -> Result<(Discovery, Vec<Jwk>), OidcError> {
        let mut held = self.discovery.lock().await;
        if let Some(held) = held.as_ref().filter(|_| !refresh) {
            return Ok(held.clone());
        }
        let url = format!("{}/.well-known/openid-configuration", self.config.issuer.trim_end_matches('/'));
        let discovery: Discovery = self.get(&url).await?;
        if discovery.issuer.trim_end_matches('/') != self.config.issuer.trim_end_matches('/') {
            return Err(OidcError::Provider(format!("a discovery document of another issuer ({})", discovery.issuer)));
        }
        #[derive(Deserialize)]
        struct Keys {
            keys: Vec<Jwk>,
        }
        let keys: Keys = self.get(&discovery.jwks_uri).await?;
        *held = Some((discovery, keys.keys));
        Ok(held.clone().unwrap_or_else(|| unreachable!("set just above")))
    }

    async fn get<T: serde::de::DeserializeOwned>(&self, url: &str) -> Result<T, OidcError> {
        let request = Request::builder()
            .uri(url)
            .header(header::ACCEPT, "application/json")
            .body(Full::new(Bytes::new()))
            .map_err(|error| OidcError::Provider(error.to_string()))?;
        self.call(request).await
    }

    async fn call<T: serde::de::DeserializeOwned>(&self, request: Request<Full<Bytes>>) -> Result<T, OidcError> {
        let uri = request.uri().clone();
        let exchange = async {
            let response = self.http.request(request).await.map_err(|error| OidcError::Provider(error.to_string()))?;
            let status = response.status();
            let body = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
                .collect()
                .await
                .map_err(|error| OidcError::Provider(error.to_string()))?
                .to_bytes();
            if !status.is_success() {
                return Err(OidcError::Provider(format!("{status} at {uri}")));
            }
            serde_json::from_slice(&body).map_err(|error| OidcError::Provider(format!("{error} at {uri}")))
        };
        tokio::time::timeout(CALL_TIMEOUT, exchange)
            .await
            .map_err(|_| OidcError::Provider(format!("nothing within {CALL_TIMEOUT:?} at {}", uri)))?
    }
}

/// Whether `signature` over `message` verifies with `key` for `alg` (RS256 or ES256 only).
fn verify_with(key: &Jwk, alg: &str, message: &[u8], signature: &[u8]) -> bool {
    use ring::signature::{
        ECDSA_P256_SHA256_FIXED, RSA_PKCS1_2048_8192_SHA256, RsaPublicKeyComponents, UnparsedPublicKey,
    };
    let decode = |part: &Option<String>| part.as_deref().and_then(|part| URL_SAFE_NO_PAD.decode(part).ok());
    match (alg, key.kty.as_str()) {
        ("RS256", "RSA") => match (decode(&key.n), decode(&key.e)) {
            (Some(n), Some(e)) => {
                RsaPublicKeyComponents { n: &n, e: &e }.verify(&RSA_PKCS1_2048_8192_SHA256, message, signature).is_ok()
            }
            _ => false,
        },
        ("ES256", "EC") if key.crv.as_deref() == Some("P-256") => match (decode(&key.x), decode(&key.y)) {
            (Some(x), Some(y)) => {
                let point = [&[4_u8][..], &x, &y].concat();
                UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, point).verify(message, signature).is_ok()
            }
            _ => false,
        },
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client() -> OidcClient {
        let config = OidcConfig {
            issuer: "https://id.example.com".to_owned(),
            client_id: "hookline-console".to_owned(),
            roles_claim: "groups".to_owned(),
            ..OidcConfig::default()
        };
        let http = hookline_common::http_client::client(None).expect("client");
        OidcClient::new(config, SecretString::from("s"), http)
    }

    #[test]
    fn roles_map_to_the_highest_scope_and_no_role_is_refused() {
        let client = client();
        let principal = client.principal_of(&serde_json::json!({"sub": "ann", "groups": ["viewer", "operator"]}));
        assert_eq!(principal.unwrap(), Principal { subject: "oidc:ann".to_owned(), scope: Scope::Operate });
        let principal = client.principal_of(&serde_json::json!({"sub": "bo", "groups": "admin"})).unwrap();
        assert_eq!(principal.scope, Scope::Admin);
        assert!(matches!(
            client.principal_of(&serde_json::json!({"sub": "cy", "groups": ["staff"]})),
            Err(OidcError::NoRole { .. })
        ));
        assert!(client.principal_of(&serde_json::json!({"groups": ["admin"]})).is_err(), "no subject");
    }

    #[test]
    fn the_id_tokens_issuer_audience_expiry_and_nonce_are_checked() {
        let client = client();
        let now = 1_780_000_000_000;
        let good = serde_json::json!({"iss": "https://id.example.com", "aud": "hookline-console", "exp": now / 1000 + 60, "nonce": "n1"});
        assert!(client.check_claims(&good, "n1", now).is_ok());
        assert!(client.check_claims(&good, "n2", now).is_err(), "another login's nonce");
        let mut bad = good.clone();
        bad["iss"] = "https://evil.example.com".into();
        assert!(client.check_claims(&bad, "n1", now).is_err());
        let mut bad = good.clone();
        bad["aud"] = serde_json::json!(["other", "hookline-console"]);
        assert!(client.check_claims(&bad, "n1", now).is_err(), "several audiences need azp");
        bad["azp"] = "hookline-console".into();
        assert!(client.check_claims(&bad, "n1", now).is_ok());
        let mut bad = good;
        bad["exp"] = (now / 1000 - 120).into();
        assert!(client.check_claims(&bad, "n1", now).is_err(), "expired");
    }
}
