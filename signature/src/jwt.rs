//! The JWT family: the provider sends a JSON Web Token in a header, signed with HMAC under the shared secret
//! (HS256, or HS512), whose claims say who sent it, when, and which body (Netlify's `sha256`, Vonage's
//! `payload_hash`: the hex SHA-256 of the raw body). Netlify, Vonage and monday.com are presets of it.
//!
//! ```toml
//! [sources.jwt]
//! header = "Authorization"            # default "Authorization"
//! prefix = "Bearer "                  # stripped before parsing; must be present when set; default none
//! algorithm = "HS256"                 # or "HS512": the only `alg` accepted (never `none`, never another)
//! issuer = "Vonage"                   # `iss` must equal it; optional
//! audience = "https://hooks.example.com/vonage"   # `aud` (or one of its values) must equal it; optional
//! # audience_is_public_url = true     # instead: `aud` is the source's public_url (plus the query)
//! body_sha256_claim = "payload_hash"  # the claim holding the body's hex SHA-256; without it: a token
//! require_iat = true                  # `iat` present and within tolerance_s (default 300) of the clock
//! require_exp = false                 # `exp` present (when present it is always checked)
//! secret_encoding = "utf8"            # or "base64", "hex"
//! ```
//!
//! Order: the header's `alg` must be the configured one, then the signature (every active secret, constant time),
//! then the claims: `iss`, `aud`, the body digest, then freshness (`iat` within the tolerance either way, `exp`
//! not passed and `nbf` reached, each give or take [`EXP_LEEWAY_S`]). As for the HMAC families, signature first:
//! a stale or mismatching claim is only reported for a token the secret signed. Without `require_iat` or
//! `require_exp` a token that carries neither claim never expires ([`Scheme::signs_timestamp`] is then false, and
//! the gateway warns at load).
//!
//! A token whose claims bind no body proves who sent the request, not what it holds (monday.com): such a
//! configuration is a token scheme ([`Scheme::is_token`]) and needs `allow_token = true`.

use std::borrow::Cow;

use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::{
    FieldSource, IdentityRule, Scheme, Secret, SignatureMatch, UnverifiedRequest, VerifyError,
    fetched::jwt::Jwt,
    generic::{SecretEncoding, decode_with},
    support::{Algorithm, Tolerance, equal, first_hmac_match, hmac},
};
use crate::{BuildError, SecretError};

/// Default window for `iat` (seconds, both directions).
pub const DEFAULT_TOLERANCE_S: u64 = 300;

/// How long past its `exp` (and before its `nbf`) a token is still accepted (clock skew between the provider and
/// us).
pub const EXP_LEEWAY_S: i64 = 60;

/// The HMAC algorithms a token may be signed with; the configured one is the only one accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
pub enum JwtAlgorithm {
    #[default]
    HS256,
    HS512,
}

impl JwtAlgorithm {
    /// The `alg` header value.
    pub const fn name(self) -> &'static str {
        match self {
            Self::HS256 => "HS256",
            Self::HS512 => "HS512",
        }
    }

    const fn hash(self) -> Algorithm {
        match self {
            Self::HS256 => Algorithm::Sha256,
            Self::HS512 => Algorithm::Sha512,
        }
    }
}

/// `[sources.jwt]`.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct JwtOptions {
    #[serde(default = "default_header")]
    pub header: String,
    #[serde(default)]
    pub prefix: String,
    #[serde(default)]
    pub algorithm: JwtAlgorithm,
    pub issuer: Option<String>,
    pub audience: Option<String>,
    #[serde(default)]
    pub audience_is_public_url: bool,
    pub body_sha256_claim: Option<String>,
    #[serde(default)]
    pub require_iat: bool,
    #[serde(default)]
    pub require_exp: bool,
    #[serde(default)]
    pub secret_encoding: SecretEncoding,
}

fn default_header() -> String {
    "Authorization".to_owned()
}

impl Default for JwtOptions {
    fn default() -> Self {
        Self {
            header: default_header(),
            prefix: String::new(),
            algorithm: JwtAlgorithm::HS256,
            issuer: None,
            audience: None,
            audience_is_public_url: false,
            body_sha256_claim: None,
            require_iat: false,
            require_exp: false,
            secret_encoding: SecretEncoding::Utf8,
        }
    }
}

/// Whom the token must be addressed to.
#[derive(Debug, Clone)]
enum Audience {
    Any,
    Exactly(String),
    /// The URL the request was sent to, as the provider saw it (`public_url` plus the query).
    PublicUrl,
}

/// A configured JWT scheme.
#[derive(Debug, Clone)]
pub struct JwtScheme {
    header: http::HeaderName,
    /// The header as configured, for errors.
    display: Cow<'static, str>,
    prefix: String,
    algorithm: JwtAlgorithm,
    issuer: Option<String>,
    audience: Audience,
    body_claim: Option<String>,
    iat: Option<Tolerance>,
    require_exp: bool,
    secret_encoding: SecretEncoding,
}

impl JwtScheme {
    /// `tolerance` is the `iat` window, which needs `require_iat` (else it is refused, not ignored).
    pub fn new(options: &JwtOptions, tolerance: Option<Tolerance>) -> Result<Self, BuildError> {
        let header = http::HeaderName::from_bytes(options.header.as_bytes())
            .map_err(|_| format!("jwt.header `{}` is not a valid header name", options.header))?;
        if tolerance.is_some() && !options.require_iat {
            return Err("tolerance_s applies to `iat`: set jwt.require_iat = true, or remove tolerance_s".into());
        }
        let audience = match (&options.audience, options.audience_is_public_url) {
            (Some(_), true) => return Err("jwt: set audience or audience_is_public_url, not both".into()),
            (Some(audience), false) if audience.is_empty() => return Err("jwt.audience is empty".into()),
            (Some(audience), false) => Audience::Exactly(audience.clone()),
            (None, true) => Audience::PublicUrl,
            (None, false) => Audience::Any,
        };
        if options.issuer.as_deref() == Some("") || options.body_sha256_claim.as_deref() == Some("") {
            return Err("jwt.issuer and jwt.body_sha256_claim may not be empty".into());
        }
        Ok(Self {
            display: Cow::Owned(options.header.clone()),
            header,
            prefix: options.prefix.clone(),
            algorithm: options.algorithm,
            issuer: options.issuer.clone(),
            audience,
            body_claim: options.body_sha256_claim.clone(),
            iat: options.require_iat.then(|| tolerance.unwrap_or(Tolerance::seconds(DEFAULT_TOLERANCE_S))),
            require_exp: options.require_exp,
            secret_encoding: options.secret_encoding,
        })
    }

    /// The header's token, parsed; nothing checked yet.
    fn token(&self, request: &UnverifiedRequest<'_>) -> Result<Jwt, VerifyError> {
        let missing = || VerifyError::MissingSignature(self.display.clone());
        let malformed = || VerifyError::MalformedSignature(self.display.clone());
        let value = request.headers.get(&self.header).ok_or_else(missing)?.to_str().map_err(|_| malformed())?;
        let token = value.strip_prefix(self.prefix.as_str()).ok_or_else(malformed)?;
        Jwt::parse(token, "jwt").map_err(|_| malformed())
    }

    /// The claims after the signature matched: issuer, audience, body digest, then freshness.
    fn check_claims(&self, token: &Jwt, request: &UnverifiedRequest<'_>) -> Result<(), VerifyError> {
        if self.issuer.as_deref().is_some_and(|issuer| token.claim("iss") != Some(issuer)) {
            return Err(VerifyError::Mismatch);
        }
        let expected_audience = match &self.audience {
            Audience::Any => None,
            Audience::Exactly(audience) => Some(audience.as_str()),
            Audience::PublicUrl => Some(request.url.ok_or(VerifyError::Mismatch)?),
        };
        if let Some(expected) = expected_audience {
            let addressed = match token.claims.get("aud") {
                Some(serde_json::Value::String(audience)) => audience == expected,
                Some(serde_json::Value::Array(audiences)) => audiences.iter().any(|audience| audience == expected),
                _ => false,
            };
            if !addressed {
                return Err(VerifyError::Mismatch);
            }
        }
        if let Some(claim) = &self.body_claim {
            let digest = hex::encode(Sha256::digest(request.body));
            let claimed = token.claim(claim).map(str::to_ascii_lowercase).ok_or(VerifyError::Mismatch)?;
            if !equal(claimed.as_bytes(), digest.as_bytes()) {
                return Err(VerifyError::Mismatch);
            }
        }
        let time = |name: &'static str| match token.claims.get(name) {
            None => Ok(None),
            Some(_) => token.time_claim_ms(name).map(Some).ok_or(VerifyError::MissingTimestamp(name)),
        };
        let issued = time("iat")?;
        if let Some(tolerance) = self.iat {
            tolerance.check(issued.ok_or(VerifyError::MissingTimestamp("iat"))?, request.now_ms)?;
        }
        match time("exp")? {
            Some(expires) => {
                let leeway_ms = EXP_LEEWAY_S * 1000;
                if request.now_ms > expires.saturating_add(leeway_ms) {
                    return Err(VerifyError::TimestampStale { skew_ms: expires.saturating_sub(request.now_ms) });
                }
            }
            None if self.require_exp => return Err(VerifyError::MissingTimestamp("exp")),
            None => {}
        }
        // A token not valid yet (RFC 7519, 4.1.5), with the same leeway for clock skew as `exp`.
        if let Some(not_before) = time("nbf")? {
            if request.now_ms.saturating_add(EXP_LEEWAY_S * 1000) < not_before {
                return Err(VerifyError::TimestampFuture { skew_ms: not_before.saturating_sub(request.now_ms) });
            }
        }
        Ok(())
    }

    /// A token as the provider would send it (the header's value, prefix included): `claims` signed with `key`.
    /// For tests and demos.
    pub fn sign(&self, key: &[u8], claims: &serde_json::Value) -> String {
        use base64::Engine;
        let url = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let header = serde_json::json!({ "alg": self.algorithm.name(), "typ": "JWT" });
        let input = format!("{}.{}", url.encode(header.to_string()), url.encode(claims.to_string()));
        let signature = hmac(self.algorithm.hash(), key, &[input.as_bytes()]);
        format!("{}{input}.{}", self.prefix, url.encode(signature))
    }
}

impl Scheme for JwtScheme {
    fn signs_timestamp(&self) -> bool {
        self.iat.is_some() || self.require_exp
    }

    fn name(&self) -> &'static str {
        "jwt"
    }

    fn decode_secret(&self, raw: &[u8]) -> Result<Vec<u8>, SecretError> {
        decode_with(self.secret_encoding, raw)
    }

    fn verify(&self, request: &UnverifiedRequest<'_>, secrets: &[&Secret]) -> Result<SignatureMatch, VerifyError> {
        let token = self.token(request)?;
        // The configured algorithm only: `none`, a public-key `alg` or another HMAC is refused before any key is used.
        if token.algorithm != self.algorithm.name() {
            return Err(VerifyError::MalformedSignature(self.display.clone()));
        }
        let signature = token.signature().to_vec();
        let matched = first_hmac_match(self.algorithm.hash(), secrets, &[token.signing_input()], &[signature])?;
        self.check_claims(&token, request)?;
        Ok(if self.body_claim.is_some() { matched } else { matched.by_token() })
    }

    fn identity(&self) -> IdentityRule {
        IdentityRule::new(vec![FieldSource::BodySha256], vec![])
    }

    fn is_token(&self) -> bool {
        self.body_claim.is_none()
    }

    fn signs_url(&self) -> bool {
        matches!(self.audience, Audience::PublicUrl)
    }

    /// One HMAC of a short string: cheap even when the audience is the URL.
    fn is_costly(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine;
    use serde_json::json;

    use super::*;
    use crate::{
        Coverage,
        tests::{check, check_at, headers},
        verify,
    };

    const NOW_S: i64 = 1_700_000_000;
    const NOW_MS: i64 = NOW_S * 1000;
    const BODY: &[u8] = br#"{"id":"evt_1","type":"test.event"}"#;
    const SECRET: &str = "jwt-secret-0123456789abcdef";

    fn vonage_like() -> JwtScheme {
        let options = JwtOptions {
            prefix: "Bearer ".to_owned(),
            issuer: Some("Vonage".to_owned()),
            body_sha256_claim: Some("payload_hash".to_owned()),
            require_iat: true,
            ..JwtOptions::default()
        };
        JwtScheme::new(&options, None).expect("options")
    }

    fn claims(body: &[u8], iat: i64) -> serde_json::Value {
        json!({ "iss": "Vonage", "iat": iat, "jti": "j1", "payload_hash": hex::encode(Sha256::digest(body)) })
    }

    /// A token with any header, signed with HMAC-SHA256 under `key` (or unsigned: an empty signature).
    fn token_with(header: &serde_json::Value, claims: &serde_json::Value, key: Option<&[u8]>) -> String {
        let url = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let input = format!("{}.{}", url.encode(header.to_string()), url.encode(claims.to_string()));
        let signature = key.map(|key| url.encode(hmac(Algorithm::Sha256, key, &[input.as_bytes()])));
        format!("{input}.{}", signature.unwrap_or_default())
    }

    fn run(scheme: &JwtScheme, value: &str, body: &[u8], secrets: &[(&str, &str)]) -> Result<String, VerifyError> {
        check(scheme, &headers(&[("Authorization", value)]), body, secrets, NOW_MS)
    }

    #[test]
    fn a_signed_token_binding_the_body_verifies_with_any_active_secret() {
        let scheme = vonage_like();
        let value = scheme.sign(SECRET.as_bytes(), &claims(BODY, NOW_S));
        assert_eq!(
            run(&scheme, &value, BODY, &[("new", "another-secret-0123456789"), ("old", SECRET)]),
            Ok("old".into())
        );
        let body = bytes::Bytes::from_static(BODY);
        let map = headers(&[("Authorization", &value)]);
        let proof = verify(&scheme, &UnverifiedRequest::new(&map, &body, NOW_MS), &[Secret::new("s", SECRET)])
            .expect("verifies");
        assert_eq!(proof.coverage(), &Coverage::WholeBody);
        assert!(!scheme.is_token());
    }

    #[test]
    fn tampered_body_wrong_secret_and_wrong_claims_are_refused() {
        let scheme = vonage_like();
        let value = scheme.sign(SECRET.as_bytes(), &claims(BODY, NOW_S));
        assert_eq!(run(&scheme, &value, b"{\"id\":\"evt_2\"}", &[("a", SECRET)]), Err(VerifyError::Mismatch));
        assert_eq!(run(&scheme, &value, BODY, &[("a", "not-the-secret-0123456789")]), Err(VerifyError::Mismatch));
        let mut other_issuer = claims(BODY, NOW_S);
        other_issuer["iss"] = json!("Nexmo");
        let value = scheme.sign(SECRET.as_bytes(), &other_issuer);
        assert_eq!(run(&scheme, &value, BODY, &[("a", SECRET)]), Err(VerifyError::Mismatch));
        let mut no_hash = claims(BODY, NOW_S);
        no_hash.as_object_mut().expect("object").remove("payload_hash");
        let value = scheme.sign(SECRET.as_bytes(), &no_hash);
        assert_eq!(run(&scheme, &value, BODY, &[("a", SECRET)]), Err(VerifyError::Mismatch));
    }

    #[test]
    fn iat_and_exp_are_judged_after_the_signature() {
        let scheme = vonage_like();
        let stale = scheme.sign(SECRET.as_bytes(), &claims(BODY, NOW_S - 301));
        assert_eq!(
            run(&scheme, &stale, BODY, &[("a", SECRET)]),
            Err(VerifyError::TimestampStale { skew_ms: -301_000 })
        );
        assert_eq!(run(&scheme, &stale, BODY, &[("a", "not-the-secret-0123456789")]), Err(VerifyError::Mismatch));
        let future = scheme.sign(SECRET.as_bytes(), &claims(BODY, NOW_S + 301));
        assert!(matches!(run(&scheme, &future, BODY, &[("a", SECRET)]), Err(VerifyError::TimestampFuture { .. })));
        let mut no_iat = claims(BODY, NOW_S);
        no_iat.as_object_mut().expect("object").remove("iat");
        let value = scheme.sign(SECRET.as_bytes(), &no_iat);
        assert_eq!(run(&scheme, &value, BODY, &[("a", SECRET)]), Err(VerifyError::MissingTimestamp("iat")));

        let mut expired = claims(BODY, NOW_S);
        expired["exp"] = json!(NOW_S - EXP_LEEWAY_S - 1);
        let value = scheme.sign(SECRET.as_bytes(), &expired);
        assert!(matches!(run(&scheme, &value, BODY, &[("a", SECRET)]), Err(VerifyError::TimestampStale { .. })));
        expired["exp"] = json!(NOW_S - EXP_LEEWAY_S);
        let value = scheme.sign(SECRET.as_bytes(), &expired);
        assert_eq!(run(&scheme, &value, BODY, &[("a", SECRET)]), Ok("a".into()), "within the leeway");
        expired["exp"] = json!("tomorrow");
        let value = scheme.sign(SECRET.as_bytes(), &expired);
        assert_eq!(run(&scheme, &value, BODY, &[("a", SECRET)]), Err(VerifyError::MissingTimestamp("exp")));
    }

    #[test]
    fn a_token_is_refused_before_its_nbf() {
        let scheme = vonage_like();
        let mut early = claims(BODY, NOW_S);
        early["nbf"] = json!(NOW_S + EXP_LEEWAY_S + 1);
        let value = scheme.sign(SECRET.as_bytes(), &early);
        assert_eq!(
            run(&scheme, &value, BODY, &[("a", SECRET)]),
            Err(VerifyError::TimestampFuture { skew_ms: (EXP_LEEWAY_S + 1) * 1000 })
        );
        early["nbf"] = json!(NOW_S + EXP_LEEWAY_S);
        let value = scheme.sign(SECRET.as_bytes(), &early);
        assert_eq!(run(&scheme, &value, BODY, &[("a", SECRET)]), Ok("a".into()), "within the leeway");
        early["nbf"] = json!("soon");
        let value = scheme.sign(SECRET.as_bytes(), &early);
        assert_eq!(run(&scheme, &value, BODY, &[("a", SECRET)]), Err(VerifyError::MissingTimestamp("nbf")));
    }

    #[test]
    fn only_the_configured_algorithm_is_accepted() {
        let scheme = vonage_like();
        let claims = claims(BODY, NOW_S);
        let malformed = Err(VerifyError::MalformedSignature("Authorization".into()));
        let none = token_with(&json!({ "alg": "none", "typ": "JWT" }), &claims, None);
        assert_eq!(run(&scheme, &format!("Bearer {none}"), BODY, &[("a", SECRET)]), malformed);
        // Signed with the right key, but claiming another algorithm: still refused.
        for alg in ["HS512", "RS256", "ES256", "hs256"] {
            let value = token_with(&json!({ "alg": alg }), &claims, Some(SECRET.as_bytes()));
            assert_eq!(run(&scheme, &format!("Bearer {value}"), BODY, &[("a", SECRET)]), malformed, "{alg}");
        }
        let critical =
            token_with(&json!({ "alg": "HS256", "crit": ["b64"], "b64": false }), &claims, Some(SECRET.as_bytes()));
        assert_eq!(run(&scheme, &format!("Bearer {critical}"), BODY, &[("a", SECRET)]), malformed);
        let plain = token_with(&json!({ "alg": "HS256" }), &claims, Some(SECRET.as_bytes()));
        assert_eq!(run(&scheme, &format!("Bearer {plain}"), BODY, &[("a", SECRET)]), Ok("a".into()));
        assert_eq!(run(&scheme, &plain, BODY, &[("a", SECRET)]), malformed, "the prefix is required");
        assert_eq!(
            check(&scheme, &headers(&[]), BODY, &[("a", SECRET)], NOW_MS),
            Err(VerifyError::MissingSignature("Authorization".into()))
        );

        let hs512 = JwtScheme::new(&JwtOptions { algorithm: JwtAlgorithm::HS512, ..JwtOptions::default() }, None)
            .expect("options");
        let value = hs512.sign(SECRET.as_bytes(), &json!({}));
        assert_eq!(run(&hs512, &value, BODY, &[("a", SECRET)]), Ok("a".into()));
        assert_eq!(run(&hs512, &plain, BODY, &[("a", SECRET)]), malformed);
    }

    #[test]
    fn without_a_body_claim_it_is_a_token_addressed_to_the_url() {
        let options = JwtOptions { audience_is_public_url: true, require_exp: true, ..JwtOptions::default() };
        let scheme = JwtScheme::new(&options, None).expect("options");
        assert!(scheme.is_token() && scheme.signs_url());
        let url = "https://hooks.example.com/monday";
        let value = scheme.sign(SECRET.as_bytes(), &json!({ "aud": url, "exp": NOW_S + 60, "accountId": 1 }));
        let map = headers(&[("Authorization", &value)]);
        let run = |url: Option<&str>| check_at(&scheme, &http::Method::POST, url, &map, BODY, &[("a", SECRET)], NOW_MS);
        assert_eq!(run(Some(url)), Ok("a".into()));
        assert_eq!(run(Some("https://hooks.example.com/other")), Err(VerifyError::Mismatch));
        assert_eq!(run(None), Err(VerifyError::Mismatch));
        let body = bytes::Bytes::from_static(b"any body at all");
        let request = UnverifiedRequest::new(&map, &body, NOW_MS).with_url(url);
        let proof = verify(&scheme, &request, &[Secret::new("s", SECRET)]).expect("a token covers no body");
        assert_eq!(proof.coverage(), &Coverage::Token);
        let no_exp = scheme.sign(SECRET.as_bytes(), &json!({ "aud": [url, "other"] }));
        let map = headers(&[("Authorization", &no_exp)]);
        assert_eq!(
            check_at(&scheme, &http::Method::POST, Some(url), &map, BODY, &[("a", SECRET)], NOW_MS),
            Err(VerifyError::MissingTimestamp("exp"))
        );
    }

    #[test]
    fn options_are_validated() {
        let bad = |text: &str, tolerance: Option<Tolerance>| {
            toml::from_str::<JwtOptions>(text)
                .map_err(|error| error.to_string())
                .and_then(|options| JwtScheme::new(&options, tolerance).map_err(|error| error.to_string()))
                .is_err()
        };
        assert!(!bad("", None));
        assert!(bad("header = \"bad header\"\n", None));
        assert!(bad("audience = \"a\"\naudience_is_public_url = true\n", None));
        assert!(bad("issuer = \"\"\n", None));
        assert!(bad("algorithm = \"none\"\n", None));
        assert!(bad("algorithm = \"RS256\"\n", None));
        assert!(bad("", Some(Tolerance::seconds(30))), "tolerance_s without require_iat");
        assert!(!bad("require_iat = true\n", Some(Tolerance::seconds(30))));
        assert!(bad("unknown = 1\n", None));
    }
}
