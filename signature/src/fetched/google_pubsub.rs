//! Google Cloud Pub/Sub push (and what rides on it: Gmail and Google Play notifications): with authentication on,
//! each push carries `Authorization: Bearer <OIDC token>`, a JWT Google signs with RS256 with a key of its
//! published set (`https://www.googleapis.com/oauth2/v3/certs`, the only URL fetched). Checked as Google
//! documents ("Authenticate push subscriptions"): the signature with the `kid`'s key, `iss` `accounts.google.com`
//! (with or without `https://`), `aud` equal to the source's `public_url` (Pub/Sub's default audience is the push
//! endpoint's URL), `email` one of the source's secrets (the subscription's service account) with
//! `email_verified`, and `exp` / `iat` within the clock-skew window.
//!
//! The token covers no byte of the body: it proves Google sent the request for that service account to that
//! audience, as a token does, so the source must say `allow_token = true`, and a captured request's token could
//! carry another body until it expires (at most an hour). Event id from the body's `/message/messageId`.

use super::{
    super::{
        FieldSource, IdentityRule, Scheme, Secret, SignatureMatch, UnverifiedRequest, VerifyError,
        support::{Tolerance, required_header},
    },
    CheckedKey, FetchedKeyScheme, KeyFormat, KeyUrl,
    jwt::Jwt,
    pin::{HostPin, Pins},
};
use crate::SecretError;

/// Clock skew allowed around the token's `iat` and `exp` (seconds).
pub const DEFAULT_TOLERANCE_S: u64 = 60;

const AUTHORIZATION: &str = "authorization";
const DISPLAY: &str = "Authorization";
const CERTS_URL: &str = "https://www.googleapis.com/oauth2/v3/certs";
const CERTS_PINS: Pins =
    Pins { hosts: &[HostPin::Exact("www.googleapis.com")], path_prefix: "/oauth2/v3/certs", path_suffix: "" };
const ISSUERS: &[&str] = &["accounts.google.com", "https://accounts.google.com"];

#[derive(Debug)]
pub struct GooglePubSub {
    tolerance: Tolerance,
}

impl GooglePubSub {
    pub fn new(tolerance: Tolerance) -> Self {
        Self { tolerance }
    }

    fn token(request: &UnverifiedRequest<'_>) -> Result<Jwt, VerifyError> {
        let value = required_header(request.headers, AUTHORIZATION, DISPLAY)?;
        let token = value.strip_prefix("Bearer ").ok_or(VerifyError::malformed(DISPLAY))?;
        Jwt::parse(token, DISPLAY)
    }

    /// `iat` not in the future and `exp` not past, each give or take the tolerance.
    fn check_times(&self, token: &Jwt, now_ms: i64) -> Result<(), VerifyError> {
        let issued = token.time_claim_ms("iat").ok_or(VerifyError::MissingTimestamp("iat"))?;
        let expires = token.time_claim_ms("exp").ok_or(VerifyError::MissingTimestamp("exp"))?;
        if issued > now_ms {
            self.tolerance.check(issued, now_ms)?;
        }
        if expires < now_ms {
            self.tolerance.check(expires, now_ms)?;
        }
        Ok(())
    }
}

impl Default for GooglePubSub {
    fn default() -> Self {
        Self::new(Tolerance::seconds(DEFAULT_TOLERANCE_S))
    }
}

impl Scheme for GooglePubSub {
    fn signs_timestamp(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "google_pubsub"
    }

    fn is_costly(&self) -> bool {
        true
    }

    fn is_token(&self) -> bool {
        true
    }

    /// The audience is the URL the push was sent to.
    fn signs_url(&self) -> bool {
        true
    }

    /// A service account's email address.
    fn decode_secret(&self, raw: &[u8]) -> Result<Vec<u8>, SecretError> {
        let text = super::secret_text(raw, "the service account")?;
        if !text.contains('@') || text.contains(char::is_whitespace) {
            return Err("a google_pubsub source's secrets are service account emails".into());
        }
        Ok(text.as_bytes().to_vec())
    }

    fn verify(&self, request: &UnverifiedRequest<'_>, secrets: &[&Secret]) -> Result<SignatureMatch, VerifyError> {
        super::verify_offline(self, request, secrets)
    }

    fn identity(&self) -> IdentityRule {
        IdentityRule::new(vec![FieldSource::pointer("/message/messageId")], Vec::new())
    }

    fn fetched_key(&self) -> Option<&dyn FetchedKeyScheme> {
        Some(self)
    }
}

impl FetchedKeyScheme for GooglePubSub {
    fn locate(&self, request: &UnverifiedRequest<'_>, _secrets: &[&Secret]) -> Result<KeyUrl, VerifyError> {
        let token = Self::token(request)?;
        if token.algorithm != "RS256" {
            return Err(VerifyError::malformed(DISPLAY));
        }
        self.check_times(&token, request.now_ms)?;
        KeyUrl::pinned(CERTS_URL, &CERTS_PINS, DISPLAY)
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
        let token = Self::token(request)?;
        if !token.verifies_with(key.jwk_set()?) {
            return Err(VerifyError::Mismatch);
        }
        self.check_times(&token, request.now_ms)?;
        let issuer_ok = token.claim("iss").is_some_and(|issuer| ISSUERS.contains(&issuer));
        let audience_ok = request.url.is_some_and(|url| token.claim("aud") == Some(url));
        let verified = token.claims.get("email_verified").and_then(serde_json::Value::as_bool) == Some(true);
        if !(issuer_ok && audience_ok && verified) {
            return Err(VerifyError::Mismatch);
        }
        let email = token.claim("email").unwrap_or_default();
        secrets
            .iter()
            .find(|secret| secret.key() == email.as_bytes())
            .map(|secret| SignatureMatch::by(secret).by_token())
            .ok_or(VerifyError::Mismatch)
    }
}
