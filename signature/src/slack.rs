//! Slack: `X-Slack-Signature: v0=<hex>` over `"v0:<X-Slack-Request-Timestamp>:" + body`, HMAC-SHA256 with the
//! app's signing secret; the timestamp must be within 5 minutes either way. Events API deliveries carry
//! `event_id`; slash commands and interactivity payloads do not, so the body's SHA-256 is the fallback id.
//!
//! Handshake: an Events API `url_verification` request is answered with its `challenge` after it verified.

use super::{
    FieldSource, Handshake, IdentityRule, Scheme, Secret, SignatureMatch, UnverifiedRequest, VerifyError,
    family::VersionedHmac, support::Tolerance,
};

/// Slack's documented window (seconds).
pub const DEFAULT_TOLERANCE_S: u64 = 300;
const SIGNATURE: &str = "X-Slack-Signature";
const TIMESTAMP: &str = "X-Slack-Request-Timestamp";

/// Slack's scheme, with the timestamp window it was configured with.
#[derive(Debug, Clone, Copy)]
pub struct Slack {
    tolerance: Option<Tolerance>,
}

impl Slack {
    pub fn new(tolerance: Option<Tolerance>) -> Self {
        Self { tolerance }
    }
}

impl Scheme for Slack {
    fn signs_timestamp(&self) -> bool {
        self.tolerance.is_some()
    }

    fn name(&self) -> &'static str {
        "slack"
    }

    fn verify(&self, request: &UnverifiedRequest<'_>, secrets: &[&Secret]) -> Result<SignatureMatch, VerifyError> {
        VersionedHmac { signature: SIGNATURE, timestamp: TIMESTAMP }.verify(request, secrets, self.tolerance)
    }

    fn identity(&self) -> IdentityRule {
        IdentityRule::new(
            vec![FieldSource::pointer("/event_id"), FieldSource::BodySha256],
            vec![FieldSource::pointer("/event/type"), FieldSource::pointer("/type")],
        )
    }

    fn handshake(&self, request: &UnverifiedRequest<'_>, _secret: &Secret) -> Option<Handshake> {
        let body: serde_json::Value = serde_json::from_slice(request.body).ok()?;
        if body.get("type")?.as_str()? != "url_verification" {
            return None;
        }
        let challenge = body.get("challenge")?.as_str()?;
        Some(Handshake::json(&serde_json::json!({ "challenge": challenge })))
    }
}

/// The `X-Slack-Signature` value for `body` at `timestamp`.
pub fn sign(key: &[u8], body: &[u8], timestamp: i64) -> String {
    VersionedHmac::sign(key, body, timestamp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{check, headers, secret};
    use bytes::Bytes;

    const SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
    const T: i64 = 1_531_420_618;
    const BODY: &[u8] = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
    const VECTOR: &str = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";

    fn slack() -> Slack {
        Slack::new(Some(Tolerance::seconds(DEFAULT_TOLERANCE_S)))
    }

    fn run(
        signature: &str,
        timestamp: &str,
        body: &[u8],
        secrets: &[(&str, &str)],
        now_s: i64,
    ) -> Result<String, VerifyError> {
        let headers = headers(&[(SIGNATURE, signature), (TIMESTAMP, timestamp)]);
        check(&slack(), &headers, body, secrets, now_s * 1000)
    }

    #[test]
    fn official_vector_verifies_and_sign_reproduces_it() {
        assert_eq!(run(VECTOR, "1531420618", BODY, &[("a", SECRET)], T), Ok("a".to_owned()));
        assert_eq!(sign(SECRET.as_bytes(), BODY, T), VECTOR);
    }

    #[test]
    fn tampered_body_wrong_secret_and_tampered_timestamp() {
        assert_eq!(run(VECTOR, "1531420618", b"token=x", &[("a", SECRET)], T), Err(VerifyError::Mismatch));
        assert_eq!(run(VECTOR, "1531420618", BODY, &[("a", "other")], T), Err(VerifyError::Mismatch));
        assert_eq!(run(VECTOR, "1531420619", BODY, &[("a", SECRET)], T), Err(VerifyError::Mismatch));
    }

    #[test]
    fn stale_and_future() {
        assert_eq!(
            run(VECTOR, "1531420618", BODY, &[("a", SECRET)], T + 301),
            Err(VerifyError::TimestampStale { skew_ms: -301_000 })
        );
        assert_eq!(
            run(VECTOR, "1531420618", BODY, &[("a", SECRET)], T - 301),
            Err(VerifyError::TimestampFuture { skew_ms: 301_000 })
        );
    }

    #[test]
    fn rotation_and_malformed() {
        assert_eq!(run(VECTOR, "1531420618", BODY, &[("n", "x"), ("o", SECRET)], T), Ok("o".to_owned()));
        assert_eq!(run("v1=00", "1531420618", BODY, &[("a", SECRET)], T), Err(VerifyError::malformed(SIGNATURE)));
        assert_eq!(run(VECTOR, "soon", BODY, &[("a", SECRET)], T), Err(VerifyError::malformed(TIMESTAMP)));
        let only_signature = headers(&[(SIGNATURE, VECTOR)]);
        assert_eq!(check(&slack(), &only_signature, BODY, &[("a", SECRET)], T), Err(VerifyError::missing(TIMESTAMP)));
    }

    #[test]
    fn url_verification_is_answered_with_the_challenge() {
        let body = br#"{"token":"t","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}"#;
        let headers = headers(&[]);
        let body = Bytes::from_static(body);
        let request = UnverifiedRequest::new(&headers, &body, 0);
        let reply = slack().handshake(&request, &secret("a", SECRET));
        assert_eq!(
            reply.map(|r| String::from_utf8_lossy(&r.body).into_owned()),
            Some(r#"{"challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}"#.to_owned())
        );
        let event = br#"{"type":"event_callback","event_id":"Ev1","event":{"type":"message"}}"#;
        assert_eq!(
            slack()
                .handshake(&UnverifiedRequest::new(&headers, &Bytes::copy_from_slice(event), 0), &secret("a", SECRET)),
            None
        );
        let identity = slack().identity().identify(&headers, event);
        assert_eq!((identity.event_id.as_deref(), identity.event_type.as_deref()), (Some("Ev1"), Some("message")));
    }
}
