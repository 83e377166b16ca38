//! WooCommerce: `X-WC-Webhook-Signature: <base64>`, HMAC-SHA256 of the raw body. WooCommerce sends no delivery id
//! that is stable across its retries, so the event id defaults to the body's SHA-256 (identical retries share it);
//! type from `X-WC-Webhook-Topic`.

use super::{
    FieldSource, IdentityRule,
    family::{BodyHmac, body_hmac_provider},
};

const HEADER: &str = "X-WC-Webhook-Signature";

body_hmac_provider! {
    WooCommerce = BodyHmac::base64("woocommerce", HEADER),
    identity = IdentityRule::new(vec![FieldSource::BodySha256], vec![FieldSource::header("x-wc-webhook-topic")]),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        VerifyError,
        tests::{PROVIDERS_MD_BODY as BODY, PROVIDERS_MD_SECRET as SECRET, check, headers},
    };

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
