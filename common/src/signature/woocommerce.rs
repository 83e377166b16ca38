//! WooCommerce: `X-WC-Webhook-Signature: <base64>`, HMAC-SHA256 of the raw body. WooCommerce sends no delivery id
//! that is stable across its retries, so the event id defaults to the body's SHA-256 (identical retries share it);
//! type from `X-WC-Webhook-Topic`.

use base64::Engine;

use super::{
    FieldSource, IdentityRule, Scheme, Secret, UnverifiedRequest, Verified, VerifyError,
    support::{Algorithm, BASE64, base64_of_len, first_hmac_match, hmac, required_header},
};

const HEADER: &str = "X-WC-Webhook-Signature";

#[derive(Debug, Clone, Copy, Default)]
pub struct WooCommerce;

impl Scheme for WooCommerce {
    fn name(&self) -> &'static str {
        "woocommerce"
    }

    fn verify(&self, request: &UnverifiedRequest<'_>, secrets: &[&Secret]) -> Result<Verified, VerifyError> {
        let value = required_header(request.headers, "x-wc-webhook-signature", HEADER)?;
        let signature = base64_of_len(value, 32).ok_or(VerifyError::malformed(HEADER))?;
        first_hmac_match(Algorithm::Sha256, secrets, &[request.body], &[signature])
    }

    fn identity(&self) -> IdentityRule {
        IdentityRule::new(vec![FieldSource::BodySha256], vec![FieldSource::header("x-wc-webhook-topic")])
    }
}

/// The `X-WC-Webhook-Signature` value for `body`.
pub fn sign(key: &[u8], body: &[u8]) -> String {
    BASE64.encode(hmac(Algorithm::Sha256, key, &[body]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signature::tests::{check, headers};

    const SECRET: &str = "test_secret_0123456789";
    const BODY: &[u8] = br#"{"id":"evt_1","type":"test.event"}"#;

    fn run(value: &str, body: &[u8], secrets: &[(&str, &str)]) -> Result<String, VerifyError> {
        check(&WooCommerce, &headers(&[(HEADER, value)]), body, secrets, 0)
    }

    #[test]
    fn providers_md_hmac_vector_verifies() {
        assert_eq!(run("Z0xr5Eqf94t2b3OxLAeukM6e7eWeQMjn10HlQ8TkVdo=", BODY, &[("a", SECRET)]), Ok("a".to_owned()));
    }

    #[test]
    fn tampered_wrong_secret_rotation_malformed() {
        let value = sign(SECRET.as_bytes(), BODY);
        assert_eq!(run(&value, b"{}", &[("a", SECRET)]), Err(VerifyError::Mismatch));
        assert_eq!(run(&value, BODY, &[("a", "x")]), Err(VerifyError::Mismatch));
        assert_eq!(run(&value, BODY, &[("n", "x"), ("o", SECRET)]), Ok("o".to_owned()));
        assert_eq!(run("%%%", BODY, &[("a", SECRET)]), Err(VerifyError::malformed(HEADER)));
    }
}
