//! Plaid: each webhook carries `Plaid-Verification: <JWT>`, ES256, whose header's `kid` names the key. The key is
//! asked for by `POST /webhook_verification_key/get` with `client_id`, `secret` and `key_id` on Plaid's API host
//! (`production.plaid.com`; `sandbox.plaid.com` for the `plaid_sandbox` scheme), the only URL fetched, and the
//! answer's `key` (a JWK) is cached by key id like the other fetched keys. Checked as Plaid documents ("Webhook
//! verification"): `alg` ES256 and nothing else, the signature with the `kid`'s key (a key with an `expired_at`
//! is not used), `iat` no older than 5 minutes, and the `request_body_sha256` claim equal to the body's hex
//! SHA-256 (constant-time compare).
//!
//! The source's secrets are the API credentials, `client_id:secret` each (secret references like any other): the
//! first active one asks for the key, and a rotation lists both. The claims bind the body, but no event id is
//! signed: the event id is the body's SHA-256.

use sha2::{Digest, Sha256};

use super::{
    super::{
        FieldSource, IdentityRule, Scheme, Secret, SignatureMatch, UnverifiedRequest, VerifyError,
        support::{Tolerance, equal, required_header},
    },
    CheckedKey, FetchedKeyScheme, KeyFormat, KeyUrl,
    jwt::Jwt,
    pin::{HostPin, Pins},
};
use crate::SecretError;

/// How old `iat` may be (Plaid: 5 minutes), and how far ahead of our clock.
pub const DEFAULT_TOLERANCE_S: u64 = 300;

const HEADER: &str = "plaid-verification";
const DISPLAY: &str = "Plaid-Verification";
const KEY_PATH: &str = "/webhook_verification_key/get";
const PRODUCTION_HOST: &str = "production.plaid.com";
const SANDBOX_HOST: &str = "sandbox.plaid.com";
/// A key id is a short token (a UUID); anything longer is not Plaid's and is not sent to Plaid.
const MAX_KID_BYTES: usize = 128;

/// Which of Plaid's environments the source's credentials belong to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Environment {
    Production,
    Sandbox,
}

impl Environment {
    const fn host(self) -> &'static str {
        match self {
            Self::Production => PRODUCTION_HOST,
            Self::Sandbox => SANDBOX_HOST,
        }
    }
}

#[derive(Debug)]
pub struct Plaid {
    environment: Environment,
    tolerance: Tolerance,
}

impl Plaid {
    pub fn new(environment: Environment, tolerance: Tolerance) -> Self {
        Self { environment, tolerance }
    }

    /// The header's token with its key id; anything but ES256 with a plausible `kid` is malformed.
    fn token(request: &UnverifiedRequest<'_>) -> Result<(Jwt, String), VerifyError> {
        let value = required_header(request.headers, HEADER, DISPLAY)?;
        let token = Jwt::parse(value, DISPLAY)?;
        let kid = token
            .kid
            .clone()
            .filter(|kid| !kid.is_empty() && kid.len() <= MAX_KID_BYTES && kid.bytes().all(|b| b.is_ascii_graphic()))
            .ok_or(VerifyError::malformed(DISPLAY))?;
        if token.algorithm != "ES256" {
            return Err(VerifyError::malformed(DISPLAY));
        }
        Ok((token, kid))
    }

    fn check_issued(&self, token: &Jwt, now_ms: i64) -> Result<(), VerifyError> {
        let issued = token.time_claim_ms("iat").ok_or(VerifyError::MissingTimestamp("iat"))?;
        self.tolerance.check(issued, now_ms)
    }
}

/// `client_id:secret`, both non-empty.
fn credentials(raw: &[u8]) -> Option<(&str, &str)> {
    let text = std::str::from_utf8(raw).ok()?;
    text.split_once(':').filter(|(id, secret)| !id.is_empty() && !secret.is_empty() && !secret.contains(':'))
}

impl Scheme for Plaid {
    fn signs_timestamp(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        match self.environment {
            Environment::Production => "plaid",
            Environment::Sandbox => "plaid_sandbox",
        }
    }

    fn is_costly(&self) -> bool {
        true
    }

    /// The API credentials, `client_id:secret`.
    fn decode_secret(&self, raw: &[u8]) -> Result<Vec<u8>, SecretError> {
        let text = super::secret_text(raw, "the Plaid credentials")?;
        if credentials(text.as_bytes()).is_none() || text.contains(char::is_whitespace) {
            return Err("a plaid source's secrets are its API credentials, `client_id:secret`".into());
        }
        Ok(text.as_bytes().to_vec())
    }

    fn verify(&self, request: &UnverifiedRequest<'_>, secrets: &[&Secret]) -> Result<SignatureMatch, VerifyError> {
        super::verify_offline(self, request, secrets)
    }

    fn identity(&self) -> IdentityRule {
        IdentityRule::new(vec![FieldSource::BodySha256], vec![FieldSource::pointer("/webhook_code")])
    }

    fn fetched_key(&self) -> Option<&dyn FetchedKeyScheme> {
        Some(self)
    }
}

impl FetchedKeyScheme for Plaid {
    /// The token's shape and `iat` first (nothing is fetched for a stale or malformed one), then the key's
    /// request: a `POST` with the first active credential and the key id.
    fn locate(&self, request: &UnverifiedRequest<'_>, secrets: &[&Secret]) -> Result<KeyUrl, VerifyError> {
        let (token, kid) = Self::token(request)?;
        self.check_issued(&token, request.now_ms)?;
        let secret = secrets.first().ok_or(VerifyError::Mismatch)?;
        let (client_id, api_secret) = credentials(secret.key()).ok_or(VerifyError::Mismatch)?;
        let pins = Pins {
            hosts: &[HostPin::Exact(PRODUCTION_HOST), HostPin::Exact(SANDBOX_HOST)],
            path_prefix: KEY_PATH,
            path_suffix: "",
        };
        let url = KeyUrl::pinned(&format!("https://{}{KEY_PATH}", self.environment.host()), &pins, DISPLAY)?;
        let body = serde_json::json!({ "client_id": client_id, "secret": api_secret, "key_id": kid });
        Ok(url.posting(format!("{kid} by {}", secret.id), body.to_string().into_bytes()))
    }

    fn key_format(&self) -> KeyFormat {
        KeyFormat::JwkSet
    }

    fn verify_with(
        &self,
        request: &UnverifiedRequest<'_>,
        secrets: &[&Secret],
        key: &CheckedKey<'_>,
    ) -> Result<SignatureMatch, VerifyError> {
        let (token, _) = Self::token(request)?;
        if !token.verifies_with(key.jwk_set()?) {
            return Err(VerifyError::Mismatch);
        }
        self.check_issued(&token, request.now_ms)?;
        let digest = hex::encode(Sha256::digest(request.body));
        let claimed = token.claim("request_body_sha256").map(str::to_ascii_lowercase).unwrap_or_default();
        if !equal(claimed.as_bytes(), digest.as_bytes()) {
            return Err(VerifyError::Mismatch);
        }
        // The credential whose key verified it (the first active one asked for the key).
        secrets.first().map(|secret| SignatureMatch::by(secret)).ok_or(VerifyError::Mismatch)
    }
}

#[cfg(test)]
mod tests {
    use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
    use p256::ecdsa::{Signature, SigningKey, signature::Signer};

    use super::{super::FetchedKey, *};
    use crate::{tests::headers, verify_fetched};

    const NOW_S: i64 = 1_700_000_000;
    const BODY: &str = r#"{"webhook_type":"TRANSACTIONS","webhook_code":"SYNC_UPDATES_AVAILABLE","item_id":"i1"}"#;

    fn signing_key(seed: u8) -> SigningKey {
        SigningKey::from_slice(&[seed; 32]).expect("a scalar")
    }

    /// The answer of `/webhook_verification_key/get` for `key`.
    fn key_answer(key: &SigningKey, kid: &str, expired_at: Option<i64>) -> FetchedKey {
        let point = key.verifying_key().to_encoded_point(false);
        let jwk = serde_json::json!({
            "key": {
                "alg": "ES256", "crv": "P-256", "kid": kid, "kty": "EC", "use": "sig", "created_at": NOW_S - 86_400,
                "expired_at": expired_at,
                "x": URL_SAFE_NO_PAD.encode(point.x().expect("x")), "y": URL_SAFE_NO_PAD.encode(point.y().expect("y")),
            },
            "request_id": "r1",
        });
        FetchedKey::parse(KeyFormat::JwkSet, jwk.to_string().as_bytes(), &[]).expect("a key")
    }

    fn token(key: &SigningKey, alg: &str, kid: &str, iat: i64, body: &str) -> String {
        let header = serde_json::json!({ "alg": alg, "kid": kid, "typ": "JWT" });
        let claims = serde_json::json!({ "iat": iat, "request_body_sha256": hex::encode(Sha256::digest(body)) });
        let input =
            format!("{}.{}", URL_SAFE_NO_PAD.encode(header.to_string()), URL_SAFE_NO_PAD.encode(claims.to_string()));
        let signature: Signature = key.sign(input.as_bytes());
        format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature.to_bytes()))
    }

    fn credential() -> Secret {
        Secret::new("api", b"60e3ee4019a2a0001a2b3c4d:a1b2c3d4e5f60718293a4b5c6d7e8f".to_vec())
    }

    fn run(token: &str, body: &str, key: &FetchedKey, now_s: i64) -> Result<String, VerifyError> {
        let map = headers(&[("Plaid-Verification", token)]);
        let body = bytes::Bytes::copy_from_slice(body.as_bytes());
        let request = UnverifiedRequest::new(&map, &body, now_s * 1000);
        let plaid = Plaid::new(Environment::Production, Tolerance::seconds(DEFAULT_TOLERANCE_S));
        let roots = super::super::TrustRoots::mozilla();
        verify_fetched(&plaid, &request, &[credential()], key, &roots).map(|proof| proof.secret_id().to_owned())
    }

    #[test]
    fn the_key_is_asked_for_by_a_post_with_the_credentials_and_the_kid() {
        let plaid = Plaid::new(Environment::Production, Tolerance::seconds(DEFAULT_TOLERANCE_S));
        let good = token(&signing_key(7), "ES256", "k-1", NOW_S, BODY);
        let map = headers(&[("Plaid-Verification", &good)]);
        let body = bytes::Bytes::from_static(BODY.as_bytes());
        let request = UnverifiedRequest::new(&map, &body, NOW_S * 1000);
        let secret = credential();
        let url = plaid.locate(&request, &[&secret]).expect("located");
        assert_eq!((url.host(), url.path()), ("production.plaid.com", "/webhook_verification_key/get"));
        let sent: serde_json::Value = serde_json::from_slice(url.post_body().expect("a POST")).expect("json");
        assert_eq!(
            sent,
            serde_json::json!({ "client_id": "60e3ee4019a2a0001a2b3c4d", "secret": "a1b2c3d4e5f60718293a4b5c6d7e8f", "key_id": "k-1" })
        );
        assert!(!url.to_string().contains("a1b2c3d4e5f6"), "the secret is never shown");
        let sandbox = Plaid::new(Environment::Sandbox, Tolerance::seconds(DEFAULT_TOLERANCE_S));
        assert_eq!(sandbox.locate(&request, &[&secret]).expect("located").host(), "sandbox.plaid.com");

        // Refused before anything would be fetched: stale, another algorithm, no kid, no credential.
        let request = UnverifiedRequest::new(&map, &body, (NOW_S + 301) * 1000);
        assert!(matches!(plaid.locate(&request, &[&secret]), Err(VerifyError::TimestampStale { .. })));
        for (alg, kid) in [("HS256", "k-1"), ("none", "k-1"), ("RS256", "k-1"), ("ES256", "")] {
            let other = token(&signing_key(7), alg, kid, NOW_S, BODY);
            let map = headers(&[("Plaid-Verification", &other)]);
            let request = UnverifiedRequest::new(&map, &body, NOW_S * 1000);
            assert_eq!(plaid.locate(&request, &[&secret]), Err(VerifyError::malformed(DISPLAY)), "{alg} {kid:?}");
        }
        let request = UnverifiedRequest::new(&map, &body, NOW_S * 1000);
        assert_eq!(plaid.locate(&request, &[]), Err(VerifyError::Mismatch));
        assert_eq!(
            plaid.locate(&UnverifiedRequest::new(&headers(&[]), &body, NOW_S * 1000), &[&secret]),
            Err(VerifyError::missing(DISPLAY))
        );
    }

    #[test]
    fn the_token_verifies_with_the_kids_key_and_binds_the_body() {
        let key = key_answer(&signing_key(7), "k-1", None);
        let good = token(&signing_key(7), "ES256", "k-1", NOW_S, BODY);
        assert_eq!(run(&good, BODY, &key, NOW_S), Ok("api".to_owned()));
        assert_eq!(run(&good, &BODY.replace("i1", "i2"), &key, NOW_S), Err(VerifyError::Mismatch), "tampered");
        let forged = token(&signing_key(8), "ES256", "k-1", NOW_S, BODY);
        assert_eq!(run(&forged, BODY, &key, NOW_S), Err(VerifyError::Mismatch), "another key");
        let unknown = token(&signing_key(7), "ES256", "k-2", NOW_S, BODY);
        assert_eq!(run(&unknown, BODY, &key, NOW_S), Err(VerifyError::Mismatch), "the answer holds another kid");
        assert!(matches!(run(&good, BODY, &key, NOW_S + 301), Err(VerifyError::TimestampStale { .. })));
        let retired = key_answer(&signing_key(7), "k-1", Some(NOW_S - 60));
        assert_eq!(run(&good, BODY, &retired, NOW_S), Err(VerifyError::Mismatch), "an expired key is not used");
    }

    #[test]
    fn secrets_must_be_client_id_and_secret() {
        let plaid = Plaid::new(Environment::Production, Tolerance::seconds(DEFAULT_TOLERANCE_S));
        assert!(plaid.decode_secret(b"id:secret").is_ok());
        for bad in [&b"no-colon"[..], b":secret", b"id:", b"id:a:b", b"id:se cret"] {
            assert!(plaid.decode_secret(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
