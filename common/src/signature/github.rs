//! GitHub: `X-Hub-Signature-256: sha256=<hex>`, HMAC-SHA256 of the raw body with the secret's UTF-8 bytes.
//! Event id from `X-GitHub-Delivery` (stable across redeliveries), type from `X-GitHub-Event`.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::{Identity, Scheme, Secret, UnverifiedRequest, Verified, VerifyError, header_value};

const SIGNATURE_HEADER: &str = "x-hub-signature-256";
const DELIVERY_HEADER: &str = "x-github-delivery";
const EVENT_HEADER: &str = "x-github-event";

#[derive(Debug, Clone, Copy, Default)]
pub struct GitHub;

impl Scheme for GitHub {
    fn name(&self) -> &'static str {
        "github"
    }

    fn verify(&self, request: &UnverifiedRequest<'_>, secrets: &[Secret]) -> Result<Verified, VerifyError> {
        let value = header_value(request.headers, SIGNATURE_HEADER)
            .ok_or(VerifyError::MissingSignature("X-Hub-Signature-256"))?;
        let signature = value
            .strip_prefix("sha256=")
            .and_then(|hex_digest| hex::decode(hex_digest).ok())
            .filter(|digest| digest.len() == 32)
            .ok_or(VerifyError::MalformedSignature("X-Hub-Signature-256"))?;
        secrets
            .iter()
            .find(|secret| hmac_sha256_matches(secret.key(), request.body, &signature))
            .map(Verified::by)
            .ok_or(VerifyError::Mismatch)
    }

    fn identify(&self, request: &UnverifiedRequest<'_>) -> Identity {
        Identity {
            event_id: header_value(request.headers, DELIVERY_HEADER).map(str::to_owned),
            event_type: header_value(request.headers, EVENT_HEADER).map(str::to_owned),
        }
    }
}

fn hmac_sha256_matches(key: &[u8], message: &[u8], expected: &[u8]) -> bool {
    #[allow(clippy::expect_used)] // HMAC accepts keys of any length; this cannot fail.
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(message);
    // `verify_slice` compares in constant time.
    mac.verify_slice(expected).is_ok()
}

/// `sha256=<hex>` for `body` under `key`: what GitHub would send. For tests, demos and the load generator.
pub fn sign(key: &[u8], body: &[u8]) -> String {
    #[allow(clippy::expect_used)] // HMAC accepts keys of any length; this cannot fail.
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

#[cfg(test)]
mod tests {
    use http::{HeaderMap, HeaderValue};

    use super::*;

    fn request_with<'a>(headers: &'a HeaderMap, body: &'a [u8]) -> UnverifiedRequest<'a> {
        UnverifiedRequest { headers, body }
    }

    fn headers(signature: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("X-Hub-Signature-256", HeaderValue::from_str(signature).unwrap_or_else(|_| unreachable!()));
        headers
    }

    const VECTOR_SECRET: &str = "It's a Secret to Everybody";
    const VECTOR_BODY: &[u8] = b"Hello, World!";
    const VECTOR_SIGNATURE: &str = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";

    #[test]
    fn official_vector_verifies() {
        let headers = headers(VECTOR_SIGNATURE);
        let secrets = [Secret::new("primary", VECTOR_SECRET)];
        let verified = GitHub.verify(&request_with(&headers, VECTOR_BODY), &secrets);
        assert_eq!(verified.map(|v| v.secret_id().to_owned()), Ok("primary".to_owned()));
    }

    #[test]
    fn sign_reproduces_official_vector() {
        assert_eq!(sign(VECTOR_SECRET.as_bytes(), VECTOR_BODY), VECTOR_SIGNATURE);
    }

    #[test]
    fn providers_md_cross_vector_verifies() {
        let headers = headers("sha256=674c6be44a9ff78b766f73b12c07ae90ce9eede59e40c8e7d741e543c4e455da");
        let secrets = [Secret::new("s", "test_secret_0123456789")];
        let body = br#"{"id":"evt_1","type":"test.event"}"#;
        assert!(GitHub.verify(&request_with(&headers, body), &secrets).is_ok());
    }

    #[test]
    fn tampered_body_is_a_mismatch() {
        let headers = headers(VECTOR_SIGNATURE);
        let secrets = [Secret::new("primary", VECTOR_SECRET)];
        let verified = GitHub.verify(&request_with(&headers, b"Hello, World?"), &secrets);
        assert_eq!(verified, Err(VerifyError::Mismatch));
    }

    #[test]
    fn wrong_secret_is_a_mismatch() {
        let headers = headers(VECTOR_SIGNATURE);
        let secrets = [Secret::new("primary", "not the secret")];
        assert_eq!(GitHub.verify(&request_with(&headers, VECTOR_BODY), &secrets), Err(VerifyError::Mismatch));
    }

    #[test]
    fn rotation_reports_the_secret_that_matched() {
        let headers = headers(VECTOR_SIGNATURE);
        let secrets = [Secret::new("new", "the new secret"), Secret::new("old", VECTOR_SECRET)];
        let verified = GitHub.verify(&request_with(&headers, VECTOR_BODY), &secrets);
        assert_eq!(verified.map(|v| v.secret_id().to_owned()), Ok("old".to_owned()));
    }

    #[test]
    fn missing_and_malformed_headers_are_told_apart() {
        let empty = HeaderMap::new();
        let secrets = [Secret::new("primary", VECTOR_SECRET)];
        assert_eq!(
            GitHub.verify(&request_with(&empty, VECTOR_BODY), &secrets),
            Err(VerifyError::MissingSignature("X-Hub-Signature-256"))
        );
        for malformed in ["757107ea", "sha1=757107ea", "sha256=zz", "sha256=757107ea"] {
            let headers = headers(malformed);
            assert_eq!(
                GitHub.verify(&request_with(&headers, VECTOR_BODY), &secrets),
                Err(VerifyError::MalformedSignature("X-Hub-Signature-256")),
                "{malformed}"
            );
        }
    }

    #[test]
    fn no_secrets_never_verifies() {
        let headers = headers(VECTOR_SIGNATURE);
        assert_eq!(GitHub.verify(&request_with(&headers, VECTOR_BODY), &[]), Err(VerifyError::Mismatch));
    }
}
