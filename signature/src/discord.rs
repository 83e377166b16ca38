//! Discord interactions: `X-Signature-Ed25519: <hex>` over `X-Signature-Timestamp` + body, an Ed25519 signature
//! checked against the application's public key (configured as hex, like the developer portal shows it). Strict
//! verification (no malleable or small-order signatures). Discord deliberately sends bad signatures and delists
//! endpoints that accept them. Event id and type from the body (`id`, `type`).
//!
//! Replays: the timestamp is signed, and checked against a tolerance (default [`DEFAULT_TOLERANCE_S`]) before the
//! signature, so a stale, future or unparsable one costs no Ed25519 verification. Keys are parsed once, when the
//! source is built.
//!
//! Handshake: a PING (`"type": 1`) is answered `{"type": 1}` after it verified.
//!
//! Every other interaction must get an interaction response within 3 s, or Discord shows "interaction failed":
//! once the broker acknowledged it, it is answered 200 with a *deferred* response (the handler follows up through
//! the interaction webhook): commands and modal submits `{"type":5}` (DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE),
//! components `{"type":6}` (DEFERRED_UPDATE_MESSAGE), autocomplete `{"type":8,"data":{"choices":[]}}` (it cannot
//! be deferred: no suggestions).

use ed25519_dalek::VerifyingKey;

use super::{
    AcceptedReply, FieldSource, Handshake, IdentityRule, Scheme, Secret, SignatureMatch, UnverifiedRequest,
    VerifyError,
    family::TimestampedPublicKey,
    support::{Tolerance, hex_of_len},
};
use crate::SecretError;

/// Discord documents no window; ours, like Stripe's and Slack's.
pub const DEFAULT_TOLERANCE_S: u64 = 300;

const SIGNATURE: &str = "X-Signature-Ed25519";
const TIMESTAMP: &str = "X-Signature-Timestamp";

/// Discord's scheme: the timestamp window, and the application public keys parsed so far.
#[derive(Debug)]
pub struct Discord {
    signed: TimestampedPublicKey<VerifyingKey>,
}

impl Discord {
    pub fn new(tolerance: Tolerance) -> Self {
        Self { signed: TimestampedPublicKey::new(SIGNATURE, TIMESTAMP, tolerance) }
    }
}

impl Default for Discord {
    fn default() -> Self {
        Self::new(Tolerance::seconds(DEFAULT_TOLERANCE_S))
    }
}

impl Scheme for Discord {
    fn signs_timestamp(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "discord"
    }

    fn is_costly(&self) -> bool {
        true
    }

    /// The public key, hex as shown in the developer portal.
    fn decode_secret(&self, raw: &[u8]) -> Result<Vec<u8>, SecretError> {
        self.signed.decode_ed25519_key(raw, hex_of_len, "the public key must be 64 hex digits")
    }

    fn verify(&self, request: &UnverifiedRequest<'_>, secrets: &[&Secret]) -> Result<SignatureMatch, VerifyError> {
        self.signed.verify_ed25519(request, secrets, hex_of_len)
    }

    fn identity(&self) -> IdentityRule {
        IdentityRule::new(vec![FieldSource::pointer("/id")], vec![FieldSource::pointer("/type")])
    }

    fn accepted_reply(&self, request: &UnverifiedRequest<'_>) -> Option<AcceptedReply> {
        let body: serde_json::Value = serde_json::from_slice(request.body).ok()?;
        let reply: &[u8] = match body.get("type")?.as_u64()? {
            2 | 5 => br#"{"type":5}"#,
            3 => br#"{"type":6}"#,
            4 => br#"{"type":8,"data":{"choices":[]}}"#,
            _ => return None,
        };
        Some(AcceptedReply { status: 200, content_type: "application/json", body: reply.to_vec() })
    }

    fn handshake(&self, request: &UnverifiedRequest<'_>, _secret: &Secret) -> Option<Handshake> {
        let body: serde_json::Value = serde_json::from_slice(request.body).ok()?;
        (body.get("type")?.as_u64()? == 1).then(|| Handshake::json(&serde_json::json!({ "type": 1 })))
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use ed25519_dalek::{Signer, SigningKey};

    use super::*;
    use crate::tests::{check, headers, secret};

    const TIMESTAMP_VALUE: &str = "1700000000";
    /// A minute after the signing time.
    const NOW_MS: i64 = 1_700_000_060_000;
    const BODY: &[u8] = br#"{"id":"1187","type":2,"application_id":"42"}"#;

    fn signing_key(seed: u8) -> SigningKey {
        SigningKey::from_bytes(&[seed; 32])
    }

    fn public_hex(seed: u8) -> String {
        hex::encode(signing_key(seed).verifying_key().to_bytes())
    }

    fn sign(seed: u8, timestamp: &str, body: &[u8]) -> String {
        let message = [timestamp.as_bytes(), body].concat();
        hex::encode(signing_key(seed).sign(&message).to_bytes())
    }

    fn run(signature: &str, body: &[u8], secrets: &[(&str, &str)]) -> Result<String, VerifyError> {
        check(
            &Discord::default(),
            &headers(&[(SIGNATURE, signature), (TIMESTAMP, TIMESTAMP_VALUE)]),
            body,
            secrets,
            NOW_MS,
        )
    }

    #[test]
    fn rfc8032_test_vector_1_verifies() {
        // RFC 8032 section 7.1, TEST 1: the empty message (empty timestamp header and body).
        let public = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a";
        let signature = "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b";
        let bytes: [u8; 32] = Discord::default().decode_secret(public.as_bytes()).unwrap().try_into().unwrap();
        let key = VerifyingKey::from_bytes(&bytes).unwrap();
        let signature = ed25519_dalek::Signature::from_slice(&hex::decode(signature).unwrap()).unwrap();
        assert!(key.verify_strict(b"", &signature).is_ok());
        // Through the scheme, the empty timestamp header of that vector is not a time.
        let headers = headers(&[(SIGNATURE, "00".repeat(64).as_str()), (TIMESTAMP, "")]);
        assert_eq!(
            check(&Discord::default(), &headers, b"", &[("app", public)], NOW_MS),
            Err(VerifyError::malformed(TIMESTAMP))
        );
    }

    #[test]
    fn verifies_and_refuses_tampering_other_keys_and_timestamps() {
        let (public, other) = (public_hex(1), public_hex(2));
        let signature = sign(1, TIMESTAMP_VALUE, BODY);
        assert_eq!(run(&signature, BODY, &[("a", &public)]), Ok("a".to_owned()));
        assert_eq!(run(&signature, br#"{"id":"1188","type":2}"#, &[("a", &public)]), Err(VerifyError::Mismatch));
        assert_eq!(run(&signature, BODY, &[("a", &other)]), Err(VerifyError::Mismatch));
        assert_eq!(run(&signature, BODY, &[("new", &other), ("old", &public)]), Ok("old".to_owned()));
        let other_time = sign(1, "1700000001", BODY);
        assert_eq!(run(&other_time, BODY, &[("a", &public)]), Err(VerifyError::Mismatch));
    }

    #[test]
    fn stale_future_and_unparsable_timestamps_are_refused_before_the_signature() {
        let public = public_hex(1);
        let at = |timestamp: &str, now_ms| {
            let signature = sign(1, timestamp, BODY);
            let headers = headers(&[(SIGNATURE, signature.as_str()), (TIMESTAMP, timestamp)]);
            check(&Discord::default(), &headers, BODY, &[("a", &public)], now_ms)
        };
        assert_eq!(at("1700000000", NOW_MS), Ok("a".to_owned()));
        assert_eq!(
            at("1000000000", NOW_MS),
            Err(VerifyError::TimestampStale { skew_ms: 1_000_000_000_000 - NOW_MS }),
            "2001"
        );
        assert_eq!(
            at("2015000000", NOW_MS),
            Err(VerifyError::TimestampFuture { skew_ms: 2_015_000_000_000 - NOW_MS }),
            "ten years ahead"
        );
        assert_eq!(at("not-a-time", NOW_MS), Err(VerifyError::malformed(TIMESTAMP)));
        // Freshness is judged first: a stale request with a forged signature is stale, not a mismatch.
        let headers = headers(&[(SIGNATURE, "00".repeat(64).as_str()), (TIMESTAMP, "1000000000")]);
        assert_eq!(
            check(&Discord::default(), &headers, BODY, &[("a", &public)], NOW_MS),
            Err(VerifyError::TimestampStale { skew_ms: 1_000_000_000_000 - NOW_MS })
        );
    }

    #[test]
    fn malformed_signatures_and_bad_keys() {
        let public = public_hex(1);
        assert_eq!(run("00", BODY, &[("a", &public)]), Err(VerifyError::malformed(SIGNATURE)));
        assert!(Discord::default().decode_secret(b"not hex").is_err());
        assert!(Discord::default().decode_secret(public.as_bytes()).is_ok());
    }

    #[test]
    fn other_interactions_get_a_deferred_response() {
        let headers = headers(&[]);
        let reply = |body: &[u8]| {
            Discord::default().accepted_reply(&UnverifiedRequest::new(&headers, &Bytes::copy_from_slice(body), 0))
        };
        assert_eq!(reply(BODY).map(|r| (r.status, r.body)), Some((200, br#"{"type":5}"#.to_vec())));
        assert_eq!(reply(br#"{"id":"1","type":3}"#).map(|r| r.body), Some(br#"{"type":6}"#.to_vec()));
        assert_eq!(
            reply(br#"{"id":"1","type":4}"#).map(|r| r.body),
            Some(br#"{"type":8,"data":{"choices":[]}}"#.to_vec())
        );
        assert_eq!(reply(br#"{"id":"1","type":9}"#), None);
    }

    #[test]
    fn ping_is_answered_with_type_1() {
        let headers = headers(&[]);
        let ping = Bytes::from_static(br#"{"id":"1","type":1}"#);
        let ping = UnverifiedRequest::new(&headers, &ping, 0);
        let reply = Discord::default().handshake(&ping, &secret("a", "k"));
        assert_eq!(reply.map(|r| r.body), Some(br#"{"type":1}"#.to_vec()));
        assert_eq!(
            Discord::default()
                .handshake(&UnverifiedRequest::new(&headers, &Bytes::copy_from_slice(BODY), 0), &secret("a", "k")),
            None
        );
        assert_eq!(Discord::default().identity().identify(&headers, BODY).event_type.as_deref(), Some("2"));
    }
}
