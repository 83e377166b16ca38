//! Shopify: `X-Shopify-Hmac-Sha256: <base64>`, HMAC-SHA256 of the raw body with the app's client secret.
//! Shopify signs once, so a rotation means listing the old and new secret together (up to an hour).
//! Event id from `X-Shopify-Event-Id` (then `X-Shopify-Webhook-Id`), type from `X-Shopify-Topic`.

use super::{
    FieldSource, IdentityRule,
    family::{BodyHmac, body_hmac_provider},
};

const HEADER: &str = "X-Shopify-Hmac-Sha256";

body_hmac_provider! {
    Shopify = BodyHmac::base64("shopify", HEADER),
    identity = IdentityRule::new(
        vec![FieldSource::header("x-shopify-event-id"), FieldSource::header("x-shopify-webhook-id")],
        vec![FieldSource::header("x-shopify-topic")],
    ),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        VerifyError,
        tests::{PROVIDERS_MD_BODY as BODY, PROVIDERS_MD_SECRET as SECRET, check, headers},
    };

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
