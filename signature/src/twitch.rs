//! Twitch EventSub: `Twitch-Eventsub-Message-Signature: sha256=<hex>`, HMAC-SHA256 of message id + timestamp +
//! body, concatenated without separators. The timestamp is RFC 3339; Twitch asks receivers to refuse messages older
//! than 10 minutes. Event id from the message id, type from `Twitch-Eventsub-Subscription-Type`.
//!
//! Handshake: a verification message (`webhook_callback_verification`) is answered 200 `text/plain` with the raw
//! `challenge`; it is recognised by the `challenge` in its signed body, never by the unsigned message type header.

use super::{
    FieldSource, Handshake, IdentityRule, Scheme, Secret, SignatureMatch, UnverifiedRequest, VerifyError,
    support::{Algorithm, Tolerance, first_hmac_match, hex_of_len, hmac, required_header},
};

/// Twitch's documented window (seconds).
pub const DEFAULT_TOLERANCE_S: u64 = 600;
const SIGNATURE: &str = "Twitch-Eventsub-Message-Signature";
const ID: &str = "Twitch-Eventsub-Message-Id";
const TIMESTAMP: &str = "Twitch-Eventsub-Message-Timestamp";

#[derive(Debug, Clone, Copy)]
pub struct Twitch {
    tolerance: Option<Tolerance>,
}

impl Twitch {
    pub fn new(tolerance: Option<Tolerance>) -> Self {
        Self { tolerance }
    }
}

/// An RFC 3339 UTC timestamp (`2019-11-16T10:11:12.634234626Z`) as ms since the epoch.
pub fn parse_rfc3339_ms(text: &str) -> Option<i64> {
    super::support::parse_rfc3339_ms(text)
}

impl Scheme for Twitch {
    fn signs_timestamp(&self) -> bool {
        self.tolerance.is_some()
    }

    fn name(&self) -> &'static str {
        "twitch"
    }

    fn verify(&self, request: &UnverifiedRequest<'_>, secrets: &[&Secret]) -> Result<SignatureMatch, VerifyError> {
        let value = required_header(request.headers, "twitch-eventsub-message-signature", SIGNATURE)?;
        let id = required_header(request.headers, "twitch-eventsub-message-id", ID)?;
        let timestamp_text = required_header(request.headers, "twitch-eventsub-message-timestamp", TIMESTAMP)?;
        let signature = value
            .strip_prefix("sha256=")
            .and_then(|digest| hex_of_len(digest, 32))
            .ok_or(VerifyError::malformed(SIGNATURE))?;
        let timestamp_ms = parse_rfc3339_ms(timestamp_text).ok_or(VerifyError::malformed(TIMESTAMP))?;
        let parts: [&[u8]; 3] = [id.as_bytes(), timestamp_text.as_bytes(), request.body];
        let verified =
            first_hmac_match(Algorithm::Sha256, secrets, &parts, &[signature])?.covering(self.signable_headers());
        if let Some(tolerance) = self.tolerance {
            tolerance.check(timestamp_ms, request.now_ms)?;
        }
        Ok(verified)
    }

    fn identity(&self) -> IdentityRule {
        IdentityRule::new(
            vec![FieldSource::header("twitch-eventsub-message-id")],
            vec![FieldSource::pointer("/subscription/type"), FieldSource::header("twitch-eventsub-subscription-type")],
        )
    }

    fn signable_headers(&self) -> Vec<std::borrow::Cow<'static, str>> {
        vec![
            std::borrow::Cow::Borrowed("twitch-eventsub-message-id"),
            std::borrow::Cow::Borrowed("twitch-eventsub-message-timestamp"),
        ]
    }

    /// Decided on the signed body, never on the unsigned `Twitch-Eventsub-Message-Type` header: a body carrying a
    /// top-level `challenge` is a verification message whatever the header says (so a captured one re-sent as a
    /// `notification` is answered, never produced), and a body without one is never a handshake.
    fn handshake(&self, request: &UnverifiedRequest<'_>, _secret: &Secret) -> Option<Handshake> {
        let body: serde_json::Value = serde_json::from_slice(request.body).ok()?;
        Some(Handshake::text(body.get("challenge")?.as_str()?.as_bytes().to_vec()))
    }
}

/// The `Twitch-Eventsub-Message-Signature` value for a message.
pub fn sign(key: &[u8], id: &str, timestamp: &str, body: &[u8]) -> String {
    let mac = hmac(Algorithm::Sha256, key, &[id.as_bytes(), timestamp.as_bytes(), body]);
    format!("sha256={}", hex::encode(mac))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{check, headers, secret};
    use bytes::Bytes;

    const SECRET: &str = "s3cre7 for twitch";
    const ID_VALUE: &str = "e76c6bd4-55c9-4987-8304-da1588d8988b";
    const T: &str = "2019-11-16T10:11:12.634234626Z";
    const BODY: &[u8] = br#"{"subscription":{"type":"channel.follow"},"event":{"user_id":"1"}}"#;

    fn now_ms() -> i64 {
        parse_rfc3339_ms(T).unwrap()
    }

    fn run(signature: &str, body: &[u8], secrets: &[(&str, &str)], now_ms: i64) -> Result<String, VerifyError> {
        let headers = headers(&[(SIGNATURE, signature), (ID, ID_VALUE), (TIMESTAMP, T)]);
        check(&Twitch::new(Some(Tolerance::seconds(DEFAULT_TOLERANCE_S))), &headers, body, secrets, now_ms)
    }

    #[test]
    fn rfc3339_parses_with_nanoseconds() {
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:01.5Z"), Some(1500));
        assert_eq!(now_ms(), 1_573_899_072_634);
        assert_eq!(parse_rfc3339_ms("2019-11-16 10:11:12"), None);
    }

    #[test]
    fn known_answer_from_the_documented_construction() {
        // id + timestamp + body, no separators: the same bytes as one concatenated message.
        let concatenated = format!("{ID_VALUE}{T}{}", String::from_utf8_lossy(BODY));
        let expected =
            format!("sha256={}", hex::encode(hmac(Algorithm::Sha256, SECRET.as_bytes(), &[concatenated.as_bytes()])));
        assert_eq!(sign(SECRET.as_bytes(), ID_VALUE, T, BODY), expected);
        assert_eq!(run(&expected, BODY, &[("a", SECRET)], now_ms()), Ok("a".to_owned()));
    }

    #[test]
    fn tampered_wrong_secret_rotation_stale_future() {
        let value = sign(SECRET.as_bytes(), ID_VALUE, T, BODY);
        assert_eq!(run(&value, b"{}", &[("a", SECRET)], now_ms()), Err(VerifyError::Mismatch));
        assert_eq!(run(&value, BODY, &[("a", "x")], now_ms()), Err(VerifyError::Mismatch));
        assert_eq!(run(&value, BODY, &[("n", "x"), ("o", SECRET)], now_ms()), Ok("o".to_owned()));
        assert_eq!(
            run(&value, BODY, &[("a", SECRET)], now_ms() + 600_001),
            Err(VerifyError::TimestampStale { skew_ms: -600_001 })
        );
        assert_eq!(
            run(&value, BODY, &[("a", SECRET)], now_ms() - 600_001),
            Err(VerifyError::TimestampFuture { skew_ms: 600_001 })
        );
    }

    #[test]
    fn malformed_and_missing() {
        assert_eq!(run("sha1=00", BODY, &[("a", SECRET)], now_ms()), Err(VerifyError::malformed(SIGNATURE)));
        let no_id = headers(&[(SIGNATURE, "sha256=00"), (TIMESTAMP, T)]);
        let twitch = Twitch::new(None);
        assert_eq!(check(&twitch, &no_id, BODY, &[("a", SECRET)], 0), Err(VerifyError::missing(ID)));
    }

    #[test]
    fn callback_verification_is_answered_with_the_raw_challenge() {
        let body = br#"{"challenge":"pogchamp-kappa-360noscope-vohiyo","subscription":{"type":"channel.follow"}}"#;
        let headers = headers(&[("Twitch-Eventsub-Message-Type", "webhook_callback_verification")]);
        let reply = Twitch::new(None)
            .handshake(&UnverifiedRequest::new(&headers, &Bytes::copy_from_slice(body), 0), &secret("a", SECRET));
        assert_eq!(
            reply.map(|r| (r.content_type, r.body)),
            Some(("text/plain; charset=utf-8", b"pogchamp-kappa-360noscope-vohiyo".to_vec()))
        );
        // The unsigned message type header decides nothing: a captured verification re-sent as a `notification` is
        // still answered (and so never produced), and a notification's body is never taken for a handshake.
        let handshake_of = |message_type: &str, body: &[u8]| {
            Twitch::new(None)
                .handshake(
                    &UnverifiedRequest::new(&headers_for(message_type), &Bytes::copy_from_slice(body), 0),
                    &secret("a", SECRET),
                )
                .map(|reply| reply.body)
        };
        assert_eq!(handshake_of("notification", body), Some(b"pogchamp-kappa-360noscope-vohiyo".to_vec()));
        assert_eq!(handshake_of("webhook_callback_verification", BODY), None);
    }

    fn headers_for(message_type: &str) -> http::HeaderMap {
        headers(&[("Twitch-Eventsub-Message-Type", message_type)])
    }
}
