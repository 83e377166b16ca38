//! Telnyx (API v2 webhooks): `telnyx-signature-ed25519: <base64>`, an Ed25519 signature over
//! `<telnyx-timestamp> + "|" + body`, checked against the account's public key (configured as the base64 the
//! Mission Control portal shows). Strict verification. The timestamp (Unix seconds) is judged before the signature,
//! within 300 s as Telnyx's SDKs do. Event id and type from the body (`/data/id`, `/data/event_type`).

use ed25519_dalek::VerifyingKey;

use super::{
    FieldSource, IdentityRule, Scheme, Secret, SignatureMatch, UnverifiedRequest, VerifyError,
    family::TimestampedPublicKey,
    support::{Tolerance, base64_of_len},
};
use crate::SecretError;

/// Telnyx's SDKs' window (seconds).
pub const DEFAULT_TOLERANCE_S: u64 = 300;

const SIGNATURE: &str = "telnyx-signature-ed25519";
const TIMESTAMP: &str = "telnyx-timestamp";

/// Telnyx's scheme: the timestamp window, and the public keys parsed so far.
#[derive(Debug)]
pub struct Telnyx {
    signed: TimestampedPublicKey<VerifyingKey>,
}

impl Telnyx {
    pub fn new(tolerance: Tolerance) -> Self {
        Self { signed: TimestampedPublicKey::new(SIGNATURE, TIMESTAMP, tolerance).separated_by(b"|") }
    }
}

impl Default for Telnyx {
    fn default() -> Self {
        Self::new(Tolerance::seconds(DEFAULT_TOLERANCE_S))
    }
}

impl Scheme for Telnyx {
    fn signs_timestamp(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "telnyx"
    }

    fn is_costly(&self) -> bool {
        true
    }

    /// The public key, base64 as the portal shows it.
    fn decode_secret(&self, raw: &[u8]) -> Result<Vec<u8>, SecretError> {
        self.signed.decode_ed25519_key(raw, base64_of_len, "the public key must be 32 bytes in base64")
    }

    fn verify(&self, request: &UnverifiedRequest<'_>, secrets: &[&Secret]) -> Result<SignatureMatch, VerifyError> {
        self.signed.verify_ed25519(request, secrets, base64_of_len)
    }

    fn identity(&self) -> IdentityRule {
        IdentityRule::new(vec![FieldSource::pointer("/data/id")], vec![FieldSource::pointer("/data/event_type")])
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine;
    use ed25519_dalek::{Signer, SigningKey};

    use super::*;
    use crate::{
        support::BASE64,
        tests::{check, headers},
    };

    const T: &str = "1700000000";
    const NOW_MS: i64 = 1_700_000_060_000;
    const BODY: &[u8] = br#"{"data":{"event_type":"call.initiated","id":"0ccc7b54-4df3-4bca-a65a-3da1ecc777f0"}}"#;

    fn key(seed: u8) -> SigningKey {
        SigningKey::from_bytes(&[seed; 32])
    }

    fn public(seed: u8) -> String {
        BASE64.encode(key(seed).verifying_key().to_bytes())
    }

    /// Signed as Telnyx documents it, with ed25519-dalek's signer directly: `timestamp|body`.
    fn signed(seed: u8, timestamp: &str, body: &[u8]) -> String {
        BASE64.encode(key(seed).sign(&[timestamp.as_bytes(), b"|", body].concat()).to_bytes())
    }

    fn run(
        signature: &str,
        timestamp: &str,
        body: &[u8],
        secrets: &[(&str, &str)],
        now: i64,
    ) -> Result<String, VerifyError> {
        check(&Telnyx::default(), &headers(&[(SIGNATURE, signature), (TIMESTAMP, timestamp)]), body, secrets, now)
    }

    #[test]
    fn a_request_signed_by_the_documented_rule_verifies_and_its_twins_do_not() {
        let account = public(7);
        let secrets = [("account", account.as_str())];
        let signature = signed(7, T, BODY);
        assert_eq!(run(&signature, T, BODY, &secrets, NOW_MS), Ok("account".into()));
        let mut tampered = BODY.to_vec();
        tampered[10] ^= 1;
        assert_eq!(run(&signature, T, &tampered, &secrets, NOW_MS), Err(VerifyError::Mismatch));
        let other = public(8);
        assert_eq!(run(&signature, T, BODY, &[("other", other.as_str())], NOW_MS), Err(VerifyError::Mismatch));
        assert_eq!(
            run(&signature, T, BODY, &secrets, NOW_MS + 241_000),
            Err(VerifyError::TimestampStale { skew_ms: -301_000 })
        );
        let unseparated = BASE64.encode(key(7).sign(&[T.as_bytes(), BODY].concat()).to_bytes());
        assert_eq!(run(&unseparated, T, BODY, &secrets, NOW_MS), Err(VerifyError::Mismatch), "Discord's message form");
        assert_eq!(
            check(&Telnyx::default(), &headers(&[(TIMESTAMP, T)]), BODY, &secrets, NOW_MS),
            Err(VerifyError::missing(SIGNATURE))
        );
    }

    #[test]
    fn keys_must_be_base64_points() {
        assert!(Telnyx::default().decode_secret(b"not base64").is_err());
        assert!(Telnyx::default().decode_secret(BASE64.encode([1u8; 31]).as_bytes()).is_err());
        assert!(Telnyx::default().decode_secret(public(1).as_bytes()).is_ok());
    }
}
