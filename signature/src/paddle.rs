//! Paddle Billing: `Paddle-Signature: ts=<unix s>;h1=<hex>[;h1=<hex>...]`, HMAC-SHA256 of `"<ts>:" + body` keyed
//! with the notification secret's UTF-8 bytes (`pdl_ntfset_...` prefix included). Several `h1` entries during a
//! secret rotation. Paddle's SDKs allow 5 seconds of skew by default; so do we (configurable per source).
//! Event id and type from the body (`event_id`, `event_type`).

use super::{
    FieldSource, IdentityRule, Scheme, Secret, SignatureMatch, UnverifiedRequest, VerifyError,
    family::TimestampedList,
    support::{Tolerance, required_header},
};

/// The Paddle SDKs' default (seconds).
pub const DEFAULT_TOLERANCE_S: u64 = 5;
const HEADER: &str = "Paddle-Signature";
const SIGNED: TimestampedList = TimestampedList {
    header: HEADER,
    entry_separator: ';',
    timestamp_key: "ts",
    signature_key: "h1",
    signed_separator: b":",
};

/// Paddle's scheme, with the timestamp window it was configured with.
#[derive(Debug, Clone, Copy)]
pub struct Paddle {
    tolerance: Option<Tolerance>,
}

impl Paddle {
    pub fn new(tolerance: Option<Tolerance>) -> Self {
        Self { tolerance }
    }
}

/// The timestamp and every decodable `h1` of a `Paddle-Signature` header; `None` without exactly one valid `ts`
/// or without any `h1`. Entries that do not decode (the SDK tests send `h1=dummy`) are skipped.
pub fn parse_header(value: &str) -> Option<(&str, Vec<Vec<u8>>)> {
    let parsed = SIGNED.parse(value)?;
    parsed.any_signature_entry.then_some((parsed.timestamp, parsed.signatures))
}

impl Scheme for Paddle {
    fn signs_timestamp(&self) -> bool {
        self.tolerance.is_some()
    }

    fn name(&self) -> &'static str {
        "paddle"
    }

    fn verify(&self, request: &UnverifiedRequest<'_>, secrets: &[&Secret]) -> Result<SignatureMatch, VerifyError> {
        let parsed = SIGNED.parse(required_header(request.headers, HEADER, HEADER)?);
        SIGNED.verify(request, secrets, parsed.filter(|parsed| parsed.any_signature_entry), self.tolerance)
    }

    fn identity(&self) -> IdentityRule {
        IdentityRule::new(vec![FieldSource::pointer("/event_id")], vec![FieldSource::pointer("/event_type")])
    }
}

/// The `Paddle-Signature` value for `body` at `timestamp`.
pub fn sign(key: &[u8], body: &[u8], timestamp: i64) -> String {
    SIGNED.sign(key, body, timestamp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{check, headers};

    const VECTOR: &str = "ts=1696195954;h1=dummy;h1=d96299976a6eb066f484d7fde011ac56fc32b38fc9940bc419d6e537fdc6ef02";
    const BODY: &[u8] = b"hello-world";
    const SECRET: &str = "pdl_ntf_01hbpjmytsa32fhr36nqgc3kgb_WvRO0eL4Bj9rgYYIBZY6wZhG4EHy9jzh";
    const WRONG: &str = "pdl_ntf_01hbpjmytsa32fhr36nqgc3kgb_TjIG2BXbm83HPXqNfziwe506sBEdqL/4";
    const T: i64 = 1_696_195_954;

    fn paddle() -> Paddle {
        Paddle::new(Some(Tolerance::seconds(DEFAULT_TOLERANCE_S)))
    }

    fn run(value: &str, body: &[u8], secrets: &[(&str, &str)], now_s: i64) -> Result<String, VerifyError> {
        check(&paddle(), &headers(&[(HEADER, value)]), body, secrets, now_s * 1000)
    }

    #[test]
    fn sdk_vector_verifies_with_its_secret_and_fails_with_the_other() {
        assert_eq!(run(VECTOR, BODY, &[("a", SECRET)], T), Ok("a".to_owned()));
        assert_eq!(run(VECTOR, BODY, &[("a", WRONG)], T), Err(VerifyError::Mismatch));
        assert_eq!(sign(SECRET.as_bytes(), BODY, T), VECTOR.replace("h1=dummy;", ""));
    }

    #[test]
    fn tampered_body_stale_future_rotation() {
        assert_eq!(run(VECTOR, b"hello-world!", &[("a", SECRET)], T), Err(VerifyError::Mismatch));
        assert_eq!(run(VECTOR, BODY, &[("a", SECRET)], T + 6), Err(VerifyError::TimestampStale { skew_ms: -6_000 }));
        assert_eq!(run(VECTOR, BODY, &[("a", SECRET)], T - 6), Err(VerifyError::TimestampFuture { skew_ms: 6_000 }));
        assert_eq!(run(VECTOR, BODY, &[("a", SECRET)], T + 5), Ok("a".to_owned()));
        assert_eq!(run(VECTOR, BODY, &[("new", WRONG), ("old", SECRET)], T), Ok("old".to_owned()));
    }

    #[test]
    fn malformed_headers() {
        for value in ["", "ts=1696195954", "h1=00", "ts=x;h1=00", "ts=1;ts=2;h1=00", "ts=1696195954,h1=00"] {
            assert_eq!(run(value, BODY, &[("a", SECRET)], T), Err(VerifyError::malformed(HEADER)), "{value:?}");
        }
        // Only undecodable `h1` entries: nothing can match.
        assert_eq!(run("ts=1696195954;h1=dummy", BODY, &[("a", SECRET)], T), Err(VerifyError::Mismatch));
    }
}
