//! Intercom: `X-Hub-Signature: sha1=<hex>`, HMAC-SHA1 of the raw body with the app's client secret. (HMAC-SHA1 is
//! still a sound MAC; it is what Intercom sends.) Event id and type from the body (`id`, `topic`).

use super::{
    FieldSource, IdentityRule,
    family::{BodyHmac, body_hmac_provider},
    support::Algorithm,
};

const HEADER: &str = "X-Hub-Signature";

body_hmac_provider! {
    Intercom = BodyHmac::hex("intercom", HEADER).prefixed("sha1=").hashed_with(Algorithm::Sha1),
    identity = IdentityRule::new(vec![FieldSource::pointer("/id")], vec![FieldSource::pointer("/topic")]),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        VerifyError,
        tests::{GITHUB_DOCS_BODY as BODY, GITHUB_DOCS_SECRET as SECRET, check, headers},
    };

    fn run(value: &str, body: &[u8], secrets: &[(&str, &str)]) -> Result<String, VerifyError> {
        check(&Intercom, &headers(&[(HEADER, value)]), body, secrets, 0)
    }

    #[test]
    fn rfc2202_style_known_answer() {
        // HMAC-SHA1 known answer (RFC 2202 test case 2): key "Jefe", "what do ya want for nothing?".
        let value = "sha1=effcdf6ae5eb2fa2d27416d5f184df9c259a7c79";
        assert_eq!(run(value, b"what do ya want for nothing?", &[("a", "Jefe")]), Ok("a".to_owned()));
        assert_eq!(sign(b"Jefe", b"what do ya want for nothing?"), value);
    }

    #[test]
    fn tampered_wrong_secret_rotation_malformed() {
        let value = sign(SECRET.as_bytes(), BODY);
        assert_eq!(run(&value, b"Hello, World?", &[("a", SECRET)]), Err(VerifyError::Mismatch));
        assert_eq!(run(&value, BODY, &[("a", "x")]), Err(VerifyError::Mismatch));
        assert_eq!(run(&value, BODY, &[("n", "x"), ("o", SECRET)]), Ok("o".to_owned()));
        let sha256 = crate::github::sign(SECRET.as_bytes(), BODY);
        assert_eq!(run(&sha256, BODY, &[("a", SECRET)]), Err(VerifyError::malformed(HEADER)));
    }
}
