//! Shopify: `X-Shopify-Hmac-Sha256: <base64>`, HMAC-SHA256 of the raw body with the app's client secret.
//! Shopify signs once, so a rotation means listing the old and new secret together (up to an hour).
//! Event id from `X-Shopify-Event-Id` (then `X-Shopify-Webhook-Id`), type from `X-Shopify-Topic`.

use super::{
    FieldSource, IdentityRule, Scheme, Secret, UnverifiedRequest, Verified, VerifyError,
    support::{Algorithm, BASE64, base64_of_len, first_hmac_match, hmac, required_header},
};
use base64::Engine;

const HEADER: &str = "X-Shopify-Hmac-Sha256";

#[derive(Debug, Clone, Copy, Default)]
pub struct Shopify;

impl Scheme for Shopify {
    fn name(&self) -> &'static str {
        "shopify"
    }

    fn verify(&self, request: &UnverifiedRequest<'_>, secrets: &[&Secret]) -> Result<Verified, VerifyError> {
        let value = required_header(request.headers, "x-shopify-hmac-sha256", HEADER)?;
        let signature = base64_of_len(value, 32).ok_or(VerifyError::malformed(HEADER))?;
        first_hmac_match(Algorithm::Sha256, secrets, &[request.body], &[signature])
    }

    fn identity(&self) -> IdentityRule {
        IdentityRule::new(
            vec![FieldSource::header("x-shopify-event-id"), FieldSource::header("x-shopify-webhook-id")],
            vec![FieldSource::header("x-shopify-topic")],
        )
    }
}

/// The `X-Shopify-Hmac-Sha256` value for `body`.
pub fn sign(key: &[u8], body: &[u8]) -> String {
    BASE64.encode(hmac(Algorithm::Sha256, key, &[body]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signature::tests::{check, headers};

    const SECRET: &str = "test_secret_0123456789";
    const BODY: &[u8] = br#"{"id":"evt_1","type":"test.event"}"#;
    const VECTOR: &str = "Z0xr5Eqf94t2b3OxLAeukM6e7eWeQMjn10HlQ8TkVdo=";

    fn run(value: &str, body: &[u8], secrets: &[(&str, &str)]) -> Result<String, VerifyError> {
        check(&Shopify, &headers(&[(HEADER, value)]), body, secrets, 0)
    }

    #[test]
    fn providers_md_vector_verifies_and_sign_reproduces_it() {
        assert_eq!(run(VECTOR, BODY, &[("a", SECRET)]), Ok("a".to_owned()));
        assert_eq!(sign(SECRET.as_bytes(), BODY), VECTOR);
    }

    #[test]
    fn tampered_body_wrong_secret_and_rotation() {
        assert_eq!(run(VECTOR, b"{}", &[("a", SECRET)]), Err(VerifyError::Mismatch));
        assert_eq!(run(VECTOR, BODY, &[("a", "other")]), Err(VerifyError::Mismatch));
        assert_eq!(run(VECTOR, BODY, &[("new", "other"), ("old", SECRET)]), Ok("old".to_owned()));
    }

    #[test]
    fn malformed_and_missing() {
        for value in ["", "not base64!", "c2hvcnQ="] {
            assert_eq!(run(value, BODY, &[("a", SECRET)]), Err(VerifyError::malformed(HEADER)), "{value:?}");
        }
        assert_eq!(check(&Shopify, &headers(&[]), BODY, &[("a", SECRET)], 0), Err(VerifyError::missing(HEADER)));
    }
}
