//! Square: `x-square-hmacsha256-signature: <base64>`, HMAC-SHA256 of the subscription's notification URL followed
//! by the raw body, keyed with the subscription's signature key. The URL is the source's `public_url` (plus the
//! request's query string): exactly what was registered with Square. Event id and type from the body.

use super::{
    FieldSource, IdentityRule, Scheme, Secret, SignatureMatch, UnverifiedRequest, VerifyError,
    support::{Algorithm, BASE64, base64_of_len, first_hmac_match, hmac, required_header},
};
use base64::Engine;

const HEADER: &str = "x-square-hmacsha256-signature";

#[derive(Debug, Clone, Copy, Default)]
pub struct Square;

impl Scheme for Square {
    fn name(&self) -> &'static str {
        "square"
    }

    fn verify(&self, request: &UnverifiedRequest<'_>, secrets: &[&Secret]) -> Result<SignatureMatch, VerifyError> {
        let value = required_header(request.headers, HEADER, HEADER)?;
        let signature = base64_of_len(value, 32).ok_or(VerifyError::malformed(HEADER))?;
        // Without a configured URL nothing can match (config validation requires one).
        let url = request.url.ok_or(VerifyError::Mismatch)?;
        first_hmac_match(Algorithm::Sha256, secrets, &[url.as_bytes(), request.body], &[signature])
    }

    fn identity(&self) -> IdentityRule {
        IdentityRule::new(vec![FieldSource::pointer("/event_id")], vec![FieldSource::pointer("/type")])
    }

    fn signs_url(&self) -> bool {
        true
    }
}

/// The `x-square-hmacsha256-signature` value for `body` sent to `url`.
pub fn sign(key: &[u8], url: &str, body: &[u8]) -> String {
    BASE64.encode(hmac(Algorithm::Sha256, key, &[url.as_bytes(), body]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{check_at, headers};

    const BODY_1: &[u8] = br#"{"merchant_id":"MLEFBHHSJGVHD","type":"webhooks.test_notification","event_id":"ac3ac95b-f97d-458c-a6e6-18981597e05f","created_at":"2022-07-13T20:30:59.037339943Z","data":{"type":"webhooks","id":"bc368e64-01aa-407e-b46e-3231809b1129"}}"#;
    const KEY_1: &str = "Ibxx_5AKakO-3qeNVR61Dw";
    const URL_1: &str = "https://webhook.site/679a4f3a-dcfa-49ee-bac5-9d0edad886b9";
    const SIG_1: &str = "GF4YkrJgGBDZ9NIYbNXBnMzqb2HoL4RW/S6vkZ9/2N4=";
    const BODY_2: &[u8] = br#"{"data":{"type":"webhooks","id":">id<"}}"#;
    const SIG_2: &str = "Cxt7+aTi4rKgcA0bC4g9EHdVtLSDWdqccmL5MvihU4U=";

    fn run(value: &str, url: &str, body: &[u8], secrets: &[(&str, &str)]) -> Result<String, VerifyError> {
        check_at(&Square, &http::Method::POST, Some(url), &headers(&[(HEADER, value)]), body, secrets, 0)
    }

    #[test]
    fn sdk_vectors_verify() {
        assert_eq!(run(SIG_1, URL_1, BODY_1, &[("a", KEY_1)]), Ok("a".to_owned()));
        assert_eq!(run(SIG_2, "https://webhook.site/webhooks", BODY_2, &[("a", "signature-key")]), Ok("a".to_owned()));
        assert_eq!(sign(KEY_1.as_bytes(), URL_1, BODY_1), SIG_1);
    }

    #[test]
    fn another_url_tampered_body_wrong_key_rotation() {
        assert_eq!(run(SIG_1, "https://webhook.site/other", BODY_1, &[("a", KEY_1)]), Err(VerifyError::Mismatch));
        assert_eq!(run(SIG_1, URL_1, BODY_2, &[("a", KEY_1)]), Err(VerifyError::Mismatch));
        assert_eq!(run(SIG_1, URL_1, BODY_1, &[("a", "signature-key")]), Err(VerifyError::Mismatch));
        assert_eq!(run(SIG_1, URL_1, BODY_1, &[("n", "signature-key"), ("o", KEY_1)]), Ok("o".to_owned()));
        assert_eq!(run("!!", URL_1, BODY_1, &[("a", KEY_1)]), Err(VerifyError::malformed(HEADER)));
    }
}
