//! HubSpot v3: `X-HubSpot-Signature-v3: <base64>`, HMAC-SHA256 of method + URI + body + timestamp, keyed with the
//! app's client secret; `X-HubSpot-Request-Timestamp` is in ms and must be within 5 minutes (HubSpot's SDK checks
//! the past only; we check both ways, see [`super::support::Tolerance::seconds`]). The URI is the full URL
//! (`public_url` plus the query string) with the percent-escapes HubSpot decodes before signing decoded.
//!
//! HubSpot batches up to 100 events in one array with no delivery id of its own, so the event id defaults to the
//! body's SHA-256 (identical retries share it) and each event's `eventId` stays in the body for the handler.

use super::{
    FieldSource, IdentityRule, Scheme, Secret, SignatureMatch, UnverifiedRequest, VerifyError,
    support::{Algorithm, BASE64, Tolerance, base64_of_len, first_hmac_match, hmac, parse_unix, required_header},
};
use base64::Engine;

/// HubSpot's documented window (seconds).
pub const DEFAULT_TOLERANCE_S: u64 = 300;
const SIGNATURE: &str = "X-HubSpot-Signature-v3";
const TIMESTAMP: &str = "X-HubSpot-Request-Timestamp";

#[derive(Debug, Clone, Copy)]
pub struct HubSpot {
    tolerance: Option<Tolerance>,
}

impl HubSpot {
    pub fn new(tolerance: Option<Tolerance>) -> Self {
        Self { tolerance }
    }
}

/// The percent-escapes HubSpot decodes in the URI before signing; every other escape stays as sent.
const DECODED_ESCAPES: &[(&str, char)] = &[
    ("%3A", ':'),
    ("%2F", '/'),
    ("%3F", '?'),
    ("%40", '@'),
    ("%21", '!'),
    ("%24", '$'),
    ("%27", '\''),
    ("%28", '('),
    ("%29", ')'),
    ("%2A", '*'),
    ("%2C", ','),
    ("%3B", ';'),
];

/// The URI as HubSpot signs it.
pub fn signed_uri(url: &str) -> String {
    let mut out = String::with_capacity(url.len());
    let mut rest = url;
    while let Some(index) = rest.find('%') {
        out.push_str(&rest[..index]);
        let candidate = &rest[index..];
        match DECODED_ESCAPES
            .iter()
            .find(|(escape, _)| candidate.get(..3).is_some_and(|head| head.eq_ignore_ascii_case(escape)))
        {
            Some((_, decoded)) => {
                out.push(*decoded);
                rest = &candidate[3..];
            }
            None => {
                out.push('%');
                rest = &candidate[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

impl Scheme for HubSpot {
    fn signs_timestamp(&self) -> bool {
        self.tolerance.is_some()
    }

    fn name(&self) -> &'static str {
        "hubspot"
    }

    fn verify(&self, request: &UnverifiedRequest<'_>, secrets: &[&Secret]) -> Result<SignatureMatch, VerifyError> {
        let value = required_header(request.headers, "x-hubspot-signature-v3", SIGNATURE)?;
        let timestamp_text = required_header(request.headers, "x-hubspot-request-timestamp", TIMESTAMP)?;
        let signature = base64_of_len(value, 32).ok_or(VerifyError::malformed(SIGNATURE))?;
        let timestamp_ms = parse_unix(timestamp_text).ok_or(VerifyError::malformed(TIMESTAMP))?;
        let url = request.url.ok_or(VerifyError::Mismatch)?;
        let uri = signed_uri(url);
        let parts: [&[u8]; 4] =
            [request.method.as_str().as_bytes(), uri.as_bytes(), request.body, timestamp_text.as_bytes()];
        let verified = first_hmac_match(Algorithm::Sha256, secrets, &parts, &[signature])?;
        if let Some(tolerance) = self.tolerance {
            tolerance.check(timestamp_ms, request.now_ms)?;
        }
        Ok(verified)
    }

    fn identity(&self) -> IdentityRule {
        IdentityRule::new(vec![FieldSource::BodySha256], vec![FieldSource::pointer("/0/subscriptionType")])
    }

    fn signs_url(&self) -> bool {
        true
    }
}

/// The `X-HubSpot-Signature-v3` value for a request.
pub fn sign(key: &[u8], method: &str, url: &str, body: &[u8], timestamp_ms: i64) -> String {
    let uri = signed_uri(url);
    let t = timestamp_ms.to_string();
    BASE64.encode(hmac(Algorithm::Sha256, key, &[method.as_bytes(), uri.as_bytes(), body, t.as_bytes()]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{check_at, headers};

    const SECRET: &str = "yyyyyyyy-yyyy-yyyy-yyyy-yyyyyyyyyyyy";
    const URI: &str = "https://www.example.com/webhook_uri";
    const BODY: &[u8] = b"{'example_field':'example_value'}";
    const T_MS: i64 = 15_000_000;
    const VECTOR: &str = "HPW73RUtKmcYoEDADG0s6MmGFWUzWJKAW07r8RDgcQw=";

    fn run(
        method: &http::Method,
        url: &str,
        value: &str,
        body: &[u8],
        secrets: &[(&str, &str)],
        now_ms: i64,
    ) -> Result<String, VerifyError> {
        let headers = headers(&[(SIGNATURE, value), (TIMESTAMP, "15000000")]);
        check_at(
            &HubSpot::new(Some(Tolerance::seconds(DEFAULT_TOLERANCE_S))),
            method,
            Some(url),
            &headers,
            body,
            secrets,
            now_ms,
        )
    }

    #[test]
    fn sdk_vector_verifies_and_sign_reproduces_it() {
        assert_eq!(run(&http::Method::POST, URI, VECTOR, BODY, &[("a", SECRET)], T_MS), Ok("a".to_owned()));
        assert_eq!(sign(SECRET.as_bytes(), "POST", URI, BODY, T_MS), VECTOR);
    }

    #[test]
    fn method_url_body_and_secret_are_all_signed() {
        assert_eq!(run(&http::Method::PUT, URI, VECTOR, BODY, &[("a", SECRET)], T_MS), Err(VerifyError::Mismatch));
        assert_eq!(
            run(&http::Method::POST, "https://www.example.com/other", VECTOR, BODY, &[("a", SECRET)], T_MS),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(run(&http::Method::POST, URI, VECTOR, b"{}", &[("a", SECRET)], T_MS), Err(VerifyError::Mismatch));
        assert_eq!(run(&http::Method::POST, URI, VECTOR, BODY, &[("a", "x")], T_MS), Err(VerifyError::Mismatch));
        assert_eq!(run(&http::Method::POST, URI, VECTOR, BODY, &[("n", "x"), ("o", SECRET)], T_MS), Ok("o".to_owned()));
    }

    #[test]
    fn stale_and_future() {
        assert_eq!(
            run(&http::Method::POST, URI, VECTOR, BODY, &[("a", SECRET)], T_MS + 300_001),
            Err(VerifyError::TimestampStale { skew_ms: -300_001 })
        );
        assert_eq!(
            run(&http::Method::POST, URI, VECTOR, BODY, &[("a", SECRET)], T_MS - 300_001),
            Err(VerifyError::TimestampFuture { skew_ms: 300_001 })
        );
    }

    #[test]
    fn uri_decodes_only_the_documented_escapes() {
        assert_eq!(signed_uri("https://x.test/a%3Ab%2fc?q=%40%20%"), "https://x.test/a:b/c?q=@%20%");
    }
}
