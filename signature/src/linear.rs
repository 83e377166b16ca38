//! Linear: `Linear-Signature: <hex>`, HMAC-SHA256 of the raw body. The timestamp Linear signs is inside the body
//! (`webhookTimestamp`, ms since the epoch), so it is read after the signature matched and must be within a minute
//! either way. Event id from `Linear-Delivery`, type from `Linear-Event` (then the body's `type`).

use super::{
    FieldSource, IdentityRule, Scheme, Secret, SignatureMatch, UnverifiedRequest, VerifyError,
    family::BodyHmac,
    support::{Tolerance, json_field},
};

/// Linear's documented window (seconds).
pub const DEFAULT_TOLERANCE_S: u64 = 60;
const HEADER: &str = "Linear-Signature";
const SIGNED: BodyHmac = BodyHmac::hex("linear", HEADER);

#[derive(Debug, Clone, Copy)]
pub struct Linear {
    tolerance: Option<Tolerance>,
}

impl Linear {
    pub fn new(tolerance: Option<Tolerance>) -> Self {
        Self { tolerance }
    }
}

impl Scheme for Linear {
    fn signs_timestamp(&self) -> bool {
        self.tolerance.is_some()
    }

    fn name(&self) -> &'static str {
        SIGNED.name()
    }

    fn verify(&self, request: &UnverifiedRequest<'_>, secrets: &[&Secret]) -> Result<SignatureMatch, VerifyError> {
        let matched = SIGNED.verify(request, secrets)?;
        if let Some(tolerance) = self.tolerance {
            let timestamp_ms = json_field(request.body, "/webhookTimestamp")
                .and_then(|value| value.as_i64())
                .ok_or(VerifyError::MissingTimestamp("webhookTimestamp"))?;
            tolerance.check(timestamp_ms, request.now_ms)?;
        }
        Ok(matched)
    }

    fn identity(&self) -> IdentityRule {
        IdentityRule::new(
            // `Linear-Delivery` is not signed; the body is, but a retry re-signs it with a new `webhookTimestamp`,
            // so the dedupe id is the body's SHA-256 without that field. (`/webhookId` names the webhook, not
            // the delivery: never an event id.)
            vec![FieldSource::header("linear-delivery"), FieldSource::BodySha256Without("/webhookTimestamp".into())],
            vec![FieldSource::pointer("/type"), FieldSource::header("linear-event")],
        )
    }
}

/// The `Linear-Signature` value for `body`.
pub fn sign(key: &[u8], body: &[u8]) -> String {
    SIGNED.sign(key, body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{check, headers};

    const SECRET: &str = "lin_wh_0123456789abcdef";
    const T_MS: i64 = 1_700_000_000_123;

    fn body() -> Vec<u8> {
        format!(r#"{{"action":"create","type":"Issue","webhookTimestamp":{T_MS},"data":{{"id":"x"}}}}"#).into_bytes()
    }

    fn linear() -> Linear {
        Linear::new(Some(Tolerance::seconds(DEFAULT_TOLERANCE_S)))
    }

    fn run(value: &str, body: &[u8], secrets: &[(&str, &str)], now_ms: i64) -> Result<String, VerifyError> {
        check(&linear(), &headers(&[(HEADER, value)]), body, secrets, now_ms)
    }

    #[test]
    fn providers_md_hmac_vector_verifies_without_a_timestamp_check() {
        let value = "674c6be44a9ff78b766f73b12c07ae90ce9eede59e40c8e7d741e543c4e455da";
        let body = br#"{"id":"evt_1","type":"test.event"}"#;
        let unchecked = Linear::new(None);
        assert_eq!(
            check(&unchecked, &headers(&[(HEADER, value)]), body, &[("a", "test_secret_0123456789")], 0),
            Ok("a".to_owned())
        );
        // With the check on, a signed body without `webhookTimestamp` is refused.
        assert_eq!(
            run(value, body, &[("a", "test_secret_0123456789")], 0),
            Err(VerifyError::MissingTimestamp("webhookTimestamp"))
        );
    }

    #[test]
    fn fresh_stale_future_from_the_signed_body() {
        let body = body();
        let value = sign(SECRET.as_bytes(), &body);
        assert_eq!(run(&value, &body, &[("a", SECRET)], T_MS + 60_000), Ok("a".to_owned()));
        assert_eq!(
            run(&value, &body, &[("a", SECRET)], T_MS + 60_001),
            Err(VerifyError::TimestampStale { skew_ms: -60_001 })
        );
        assert_eq!(
            run(&value, &body, &[("a", SECRET)], T_MS - 60_001),
            Err(VerifyError::TimestampFuture { skew_ms: 60_001 })
        );
    }

    #[test]
    fn tampered_wrong_secret_rotation_malformed() {
        let body = body();
        let value = sign(SECRET.as_bytes(), &body);
        assert_eq!(run(&value, b"{}", &[("a", SECRET)], T_MS), Err(VerifyError::Mismatch));
        assert_eq!(run(&value, &body, &[("a", "x")], T_MS), Err(VerifyError::Mismatch));
        assert_eq!(run(&value, &body, &[("n", "x"), ("o", SECRET)], T_MS), Ok("o".to_owned()));
        assert_eq!(run("sha256=00", &body, &[("a", SECRET)], T_MS), Err(VerifyError::malformed(HEADER)));
    }
}
