//! Typeform: `Typeform-Signature: sha256=<base64>`, HMAC-SHA256 of the raw body. Event id and type from the body
//! (`event_id`, `event_type`).

use super::{
    FieldSource, IdentityRule,
    family::{BodyHmac, body_hmac_provider},
};

const HEADER: &str = "Typeform-Signature";

body_hmac_provider! {
    Typeform = BodyHmac::base64("typeform", HEADER).prefixed("sha256="),
    identity = IdentityRule::new(vec![FieldSource::pointer("/event_id")], vec![FieldSource::pointer("/event_type")]),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        VerifyError,
        tests::{PROVIDERS_MD_BODY as BODY, PROVIDERS_MD_SECRET as SECRET, check, headers},
    };

    fn run(value: &str, body: &[u8], secrets: &[(&str, &str)]) -> Result<String, VerifyError> {
        check(&Typeform, &headers(&[(HEADER, value)]), body, secrets, 0)
    }

    #[test]
    fn shares_the_providers_md_hmac_vector_with_a_prefix() {
        // Same key and body as the Shopify vector: the same HMAC-SHA256, written `sha256=<base64>`.
        let value = "sha256=Z0xr5Eqf94t2b3OxLAeukM6e7eWeQMjn10HlQ8TkVdo=";
        assert_eq!(run(value, BODY, &[("a", SECRET)]), Ok("a".to_owned()));
        assert_eq!(sign(SECRET.as_bytes(), BODY), value);
    }

    #[test]
    fn tampered_wrong_secret_rotation_malformed() {
        let value = sign(SECRET.as_bytes(), BODY);
        assert_eq!(run(&value, b"{ }", &[("a", SECRET)]), Err(VerifyError::Mismatch));
        assert_eq!(run(&value, BODY, &[("a", "x")]), Err(VerifyError::Mismatch));
        assert_eq!(run(&value, BODY, &[("n", "x"), ("o", SECRET)]), Ok("o".to_owned()));
        let bare = value.trim_start_matches("sha256=");
        assert_eq!(run(bare, BODY, &[("a", SECRET)]), Err(VerifyError::malformed(HEADER)));
    }
}
