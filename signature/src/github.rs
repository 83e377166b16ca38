//! GitHub: `X-Hub-Signature-256: sha256=<hex>`, HMAC-SHA256 of the raw body with the secret's UTF-8 bytes.
//! Event id from `X-GitHub-Delivery` (stable across redeliveries), type from `X-GitHub-Event`.

use super::{
    FieldSource, IdentityRule,
    family::{BodyHmac, body_hmac_provider},
};

body_hmac_provider! {
    GitHub = BodyHmac::hex("github", "X-Hub-Signature-256").prefixed("sha256="),
    identity = IdentityRule::new(
        vec![FieldSource::header("x-github-delivery")],
        vec![FieldSource::header("x-github-event")],
    ),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        VerifyError,
        tests::{GITHUB_DOCS_BODY as VECTOR_BODY, GITHUB_DOCS_SECRET as VECTOR_SECRET, check, headers},
    };

    const VECTOR_SIGNATURE: &str = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";

    fn signed(signature: &str) -> http::HeaderMap {
        headers(&[("X-Hub-Signature-256", signature)])
    }

    #[test]
    fn official_vector_verifies() {
        let result = check(&GitHub, &signed(VECTOR_SIGNATURE), VECTOR_BODY, &[("primary", VECTOR_SECRET)], 0);
        assert_eq!(result, Ok("primary".to_owned()));
    }

    #[test]
    fn sign_reproduces_official_vector() {
        assert_eq!(sign(VECTOR_SECRET.as_bytes(), VECTOR_BODY), VECTOR_SIGNATURE);
    }

    #[test]
    fn providers_md_cross_vector_verifies() {
        let headers = signed("sha256=674c6be44a9ff78b766f73b12c07ae90ce9eede59e40c8e7d741e543c4e455da");
        let body = br#"{"id":"evt_1","type":"test.event"}"#;
        assert!(check(&GitHub, &headers, body, &[("s", "test_secret_0123456789")], 0).is_ok());
    }

    #[test]
    fn tampered_body_is_a_mismatch() {
        let result = check(&GitHub, &signed(VECTOR_SIGNATURE), b"Hello, World?", &[("primary", VECTOR_SECRET)], 0);
        assert_eq!(result, Err(VerifyError::Mismatch));
    }

    #[test]
    fn wrong_secret_is_a_mismatch() {
        let result = check(&GitHub, &signed(VECTOR_SIGNATURE), VECTOR_BODY, &[("primary", "not the secret")], 0);
        assert_eq!(result, Err(VerifyError::Mismatch));
    }

    #[test]
    fn rotation_reports_the_secret_that_matched() {
        let secrets = [("new", "the new secret"), ("old", VECTOR_SECRET)];
        assert_eq!(check(&GitHub, &signed(VECTOR_SIGNATURE), VECTOR_BODY, &secrets, 0), Ok("old".to_owned()));
    }

    #[test]
    fn missing_and_malformed_headers_are_told_apart() {
        let secrets = [("primary", VECTOR_SECRET)];
        assert_eq!(
            check(&GitHub, &http::HeaderMap::new(), VECTOR_BODY, &secrets, 0),
            Err(VerifyError::missing("X-Hub-Signature-256"))
        );
        for malformed in ["757107ea", "sha1=757107ea", "sha256=zz", "sha256=757107ea"] {
            assert_eq!(
                check(&GitHub, &signed(malformed), VECTOR_BODY, &secrets, 0),
                Err(VerifyError::malformed("X-Hub-Signature-256")),
                "{malformed}"
            );
        }
    }

    #[test]
    fn no_secrets_never_verifies() {
        assert_eq!(check(&GitHub, &signed(VECTOR_SIGNATURE), VECTOR_BODY, &[], 0), Err(VerifyError::Mismatch));
    }
}
