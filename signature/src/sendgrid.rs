//! SendGrid Event Webhook: `X-Twilio-Email-Event-Webhook-Signature: <base64 DER>` over
//! `X-Twilio-Email-Event-Webhook-Timestamp` + body, an ECDSA P-256 / SHA-256 signature checked against the
//! verification key SendGrid shows (base64 SubjectPublicKeyInfo DER). Events arrive in batches with a
//! `sg_event_id` each and no delivery id, so the event id defaults to the body's SHA-256.
//!
//! Replays: the timestamp is signed, and checked against a tolerance (default [`DEFAULT_TOLERANCE_S`]) before the
//! signature, so a stale, future or unparsable one costs no ECDSA verification. Keys are parsed once, when the
//! source is built.

use base64::Engine;
use p256::{
    ecdsa::{Signature, VerifyingKey, signature::Verifier},
    pkcs8::DecodePublicKey,
};

use super::{
    FieldSource, IdentityRule, Scheme, Secret, SignatureMatch, UnverifiedRequest, VerifyError,
    family::TimestampedPublicKey,
    support::{BASE64_LENIENT, Tolerance},
};
use crate::SecretError;

/// SendGrid documents no window; ours, like Stripe's and Slack's.
pub const DEFAULT_TOLERANCE_S: u64 = 300;

const SIGNATURE: &str = "X-Twilio-Email-Event-Webhook-Signature";
const TIMESTAMP: &str = "X-Twilio-Email-Event-Webhook-Timestamp";

/// SendGrid's scheme: the timestamp window, and the verification keys parsed so far.
#[derive(Debug)]
pub struct SendGrid {
    signed: TimestampedPublicKey<VerifyingKey>,
}

impl SendGrid {
    pub fn new(tolerance: Tolerance) -> Self {
        Self { signed: TimestampedPublicKey::new(SIGNATURE, TIMESTAMP, tolerance) }
    }
}

impl Default for SendGrid {
    fn default() -> Self {
        Self::new(Tolerance::seconds(DEFAULT_TOLERANCE_S))
    }
}

impl Scheme for SendGrid {
    fn signs_timestamp(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "sendgrid"
    }

    fn is_costly(&self) -> bool {
        true
    }

    /// The verification key: base64 of the DER SubjectPublicKeyInfo.
    fn decode_secret(&self, raw: &[u8]) -> Result<Vec<u8>, SecretError> {
        let what = "the public key";
        let text = std::str::from_utf8(raw).map_err(|_| SecretError::NotUtf8 { what })?;
        let der =
            BASE64_LENIENT.decode(text.trim()).map_err(|_| SecretError::NotEncoded { what, encoding: "base64" })?;
        let key = VerifyingKey::from_public_key_der(&der)
            .map_err(|_| SecretError::Invalid("the public key is not a P-256 SPKI DER key".into()))?;
        self.signed.keys.remember(&der, key);
        Ok(der)
    }

    fn verify(&self, request: &UnverifiedRequest<'_>, secrets: &[&Secret]) -> Result<SignatureMatch, VerifyError> {
        self.signed.verify(
            request,
            secrets,
            |der| VerifyingKey::from_public_key_der(der).ok(),
            |value| Signature::from_der(&BASE64_LENIENT.decode(value.trim()).ok()?).ok(),
            |key, message, signature| key.verify(message, signature).is_ok(),
        )
    }

    fn identity(&self) -> IdentityRule {
        IdentityRule::new(vec![FieldSource::BodySha256], vec![])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{check, headers};

    const PUBLIC_KEY: &str = "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE83T4O/n84iotIvIW4mdBgQ/7dAfSmpqIM8kF9mN1flpVKS3GRqe62gw+2fNNRaINXvVpiglSI8eNEc6wEA3F+g==";
    const T: &str = "1600112502";
    const SIG: &str =
        "MEUCIGHQVtGj+Y3LkG9fLcxf3qfI10QysgDWmMOVmxG0u6ZUAiEAyBiXDWzM+uOe5W0JuG+luQAbPIqHh89M15TluLtEZtM=";
    const BODY: &[u8] = b"[{\"email\":\"hello@world.com\",\"event\":\"dropped\",\"reason\":\"Bounced Address\",\"sg_event_id\":\"ZHJvcC0xMDk5NDkxOS1MUnpYbF9OSFN0T0doUTRrb2ZTbV9BLTA\",\"sg_message_id\":\"LRzXl_NHStOGhQ4kofSm_A.filterdrecv-p3mdw1-756b745b58-kmzbl-18-5F5FC76C-9.0\",\"smtp-id\":\"<LRzXl_NHStOGhQ4kofSm_A@ismtpd0039p1iad1.sendgrid.net>\",\"timestamp\":1600112492}]\r\n";

    fn run(signature: &str, timestamp: &str, body: &[u8], secrets: &[(&str, &str)]) -> Result<String, VerifyError> {
        check(&SendGrid::default(), &headers(&[(SIGNATURE, signature), (TIMESTAMP, timestamp)]), body, secrets, NOW_MS)
    }

    /// The vector's signing time, 100 s later.
    const NOW_MS: i64 = 1_600_112_602_000;

    #[test]
    fn stale_sendgrid_request_is_refused() {
        let headers = headers(&[(SIGNATURE, SIG), (TIMESTAMP, T)]);
        let at = |now_ms| check(&SendGrid::default(), &headers, BODY, &[("a", PUBLIC_KEY)], now_ms);
        assert_eq!(at(NOW_MS), Ok("a".to_owned()));
        // A captured request replayed ten minutes (or ten years) later, or sent ten years ahead.
        assert_eq!(at(1_600_112_502_000 + 301_000), Err(VerifyError::TimestampStale { skew_ms: -301_000 }));
        assert_eq!(
            at(1_915_000_000_000),
            Err(VerifyError::TimestampStale { skew_ms: 1_600_112_502_000 - 1_915_000_000_000 })
        );
        assert_eq!(
            at(1_285_000_000_000),
            Err(VerifyError::TimestampFuture { skew_ms: 1_600_112_502_000 - 1_285_000_000_000 })
        );
        let narrow = SendGrid::new(Tolerance::seconds(60));
        assert_eq!(
            check(&narrow, &headers, BODY, &[("a", PUBLIC_KEY)], NOW_MS),
            Err(VerifyError::TimestampStale { skew_ms: -100_000 })
        );
        for bad in ["not-a-time", "", "-1600112502", "1600112502.5"] {
            assert_eq!(run(SIG, bad, BODY, &[("a", PUBLIC_KEY)]), Err(VerifyError::malformed(TIMESTAMP)), "{bad:?}");
        }
    }

    #[test]
    fn sdk_vector_verifies() {
        assert_eq!(run(SIG, T, BODY, &[("a", PUBLIC_KEY)]), Ok("a".to_owned()));
    }

    #[test]
    fn tampered_body_timestamp_and_other_key() {
        assert_eq!(run(SIG, T, &BODY[..BODY.len() - 2], &[("a", PUBLIC_KEY)]), Err(VerifyError::Mismatch));
        assert_eq!(run(SIG, "1600112503", BODY, &[("a", PUBLIC_KEY)]), Err(VerifyError::Mismatch));
        let other = {
            // Another valid key: SendGrid's SPKI header (26 bytes) in front of a fresh uncompressed point.
            let key = p256::ecdsa::SigningKey::from_slice(&[7u8; 32]).unwrap();
            let point = VerifyingKey::from(&key).to_encoded_point(false);
            let mut der = BASE64_LENIENT.decode(PUBLIC_KEY).unwrap()[..26].to_vec();
            der.extend_from_slice(point.as_bytes());
            crate::support::BASE64.encode(der)
        };
        assert_eq!(run(SIG, T, BODY, &[("a", &other)]), Err(VerifyError::Mismatch));
        assert_eq!(run(SIG, T, BODY, &[("new", &other), ("old", PUBLIC_KEY)]), Ok("old".to_owned()));
    }

    #[test]
    fn malformed_signature_and_bad_key() {
        assert_eq!(run("bm90IGRlcg==", T, BODY, &[("a", PUBLIC_KEY)]), Err(VerifyError::malformed(SIGNATURE)));
        assert!(SendGrid::default().decode_secret(b"bm90IGEga2V5").is_err());
        assert!(SendGrid::default().decode_secret(PUBLIC_KEY.as_bytes()).is_ok());
    }
}
