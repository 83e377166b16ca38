//! Zoom: `x-zm-signature: v0=<hex>` over `"v0:<x-zm-request-timestamp>:" + body`, HMAC-SHA256 with the app's
//! secret token. Zoom documents no timestamp window, so none is applied unless the source sets `tolerance_s`.
//! Zoom sends no delivery id either: the event id defaults to the body's SHA-256; type from the body's `event`.
//!
//! Handshake: `endpoint.url_validation` is answered with `{"plainToken", "encryptedToken"}`, the latter the hex
//! HMAC-SHA256 of the plain token under the secret that verified the request.

use super::{
    AcceptedReply, FieldSource, Handshake, IdentityRule, Scheme, Secret, SignatureMatch, UnverifiedRequest,
    VerifyError,
    family::VersionedHmac,
    support::{Algorithm, Tolerance, hmac},
};

const SIGNATURE: &str = "x-zm-signature";
const TIMESTAMP: &str = "x-zm-request-timestamp";

/// Zoom's scheme; a timestamp window only when the source configures one.
#[derive(Debug, Clone, Copy)]
pub struct Zoom {
    tolerance: Option<Tolerance>,
}

impl Zoom {
    pub fn new(tolerance: Option<Tolerance>) -> Self {
        Self { tolerance }
    }
}

impl Scheme for Zoom {
    fn signs_timestamp(&self) -> bool {
        self.tolerance.is_some()
    }

    fn name(&self) -> &'static str {
        "zoom"
    }

    fn verify(&self, request: &UnverifiedRequest<'_>, secrets: &[&Secret]) -> Result<SignatureMatch, VerifyError> {
        let construction = VersionedHmac { signature: SIGNATURE, timestamp: TIMESTAMP };
        construction.verify(request, secrets, self.tolerance)
    }

    /// Zoom expects 200 or 204 for a delivered event; a 202 is not in its list.
    fn accepted_reply(&self, _request: &UnverifiedRequest<'_>) -> Option<AcceptedReply> {
        Some(AcceptedReply { status: 204, content_type: "text/plain", body: Vec::new() })
    }

    fn identity(&self) -> IdentityRule {
        IdentityRule::new(vec![FieldSource::BodySha256], vec![FieldSource::pointer("/event")])
    }

    fn handshake(&self, request: &UnverifiedRequest<'_>, secret: &Secret) -> Option<Handshake> {
        let body: serde_json::Value = serde_json::from_slice(request.body).ok()?;
        if body.get("event")?.as_str()? != "endpoint.url_validation" {
            return None;
        }
        let plain_token = body.pointer("/payload/plainToken")?.as_str()?;
        let encrypted = hex::encode(hmac(Algorithm::Sha256, secret.key(), &[plain_token.as_bytes()]));
        Some(Handshake::json(&serde_json::json!({ "plainToken": plain_token, "encryptedToken": encrypted })))
    }
}

/// The `x-zm-signature` value for `body` at `timestamp`.
pub fn sign(key: &[u8], body: &[u8], timestamp: i64) -> String {
    VersionedHmac::sign(key, body, timestamp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{check, headers, secret};
    use bytes::Bytes;

    const SECRET: &str = "zoom_secret_token";
    const T: i64 = 1_700_000_000;

    #[test]
    fn a_delivered_event_is_answered_204() {
        let headers = headers(&[]);
        let reply = Zoom::new(None).accepted_reply(&UnverifiedRequest::new(
            &headers,
            &Bytes::copy_from_slice(br#"{"event":"meeting.started"}"#),
            0,
        ));
        assert_eq!(reply.map(|r| (r.status, r.body.is_empty())), Some((204, true)));
    }
    const BODY: &[u8] = br#"{"event":"meeting.started","event_ts":1700000000000,"payload":{}}"#;

    fn run(
        zoom: &Zoom,
        signature: &str,
        body: &[u8],
        secrets: &[(&str, &str)],
        now_s: i64,
    ) -> Result<String, VerifyError> {
        let t = T.to_string();
        check(zoom, &headers(&[(SIGNATURE, signature), (TIMESTAMP, &t)]), body, secrets, now_s * 1000)
    }

    #[test]
    fn slacks_official_vector_is_a_zoom_vector() {
        // Zoom's `v0=hex(HMAC("v0:<ts>:" + body))` is Slack's construction byte for byte, so Slack's official
        // vector checks ours.
        let body = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
        let headers = headers(&[
            (SIGNATURE, "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"),
            (TIMESTAMP, "1531420618"),
        ]);
        let secrets = [("a", "8f742231b10e8888abcd99yyyzzz85a5")];
        assert_eq!(check(&Zoom::new(None), &headers, body, &secrets, 0), Ok("a".to_owned()));
    }

    #[test]
    fn verifies_and_tampered_wrong_secret_rotation() {
        let value = sign(SECRET.as_bytes(), BODY, T);
        let zoom = Zoom::new(None);
        assert_eq!(run(&zoom, &value, BODY, &[("a", SECRET)], T + 100_000), Ok("a".to_owned()), "no window by default");
        assert_eq!(run(&zoom, &value, b"{}", &[("a", SECRET)], T), Err(VerifyError::Mismatch));
        assert_eq!(run(&zoom, &value, BODY, &[("a", "x")], T), Err(VerifyError::Mismatch));
        assert_eq!(run(&zoom, &value, BODY, &[("n", "x"), ("o", SECRET)], T), Ok("o".to_owned()));
    }

    #[test]
    fn configured_tolerance_refuses_stale_and_future() {
        let value = sign(SECRET.as_bytes(), BODY, T);
        let zoom = Zoom::new(Some(Tolerance::seconds(300)));
        assert_eq!(
            run(&zoom, &value, BODY, &[("a", SECRET)], T + 301),
            Err(VerifyError::TimestampStale { skew_ms: -301_000 })
        );
        assert_eq!(
            run(&zoom, &value, BODY, &[("a", SECRET)], T - 301),
            Err(VerifyError::TimestampFuture { skew_ms: 301_000 })
        );
    }

    #[test]
    fn url_validation_is_answered_with_the_hmac_of_the_plain_token() {
        let body = br#"{"payload":{"plainToken":"qgg8vlvZRS6UYooatFL8Aw"},"event_ts":1654503849680,"event":"endpoint.url_validation"}"#;
        let headers = headers(&[]);
        let body = Bytes::from_static(body);
        let request = UnverifiedRequest::new(&headers, &body, 0);
        let reply = Zoom::new(None).handshake(&request, &secret("a", SECRET)).expect("a handshake");
        let reply: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
        let expected = hex::encode(hmac(Algorithm::Sha256, SECRET.as_bytes(), &[b"qgg8vlvZRS6UYooatFL8Aw"]));
        assert_eq!(reply["plainToken"], "qgg8vlvZRS6UYooatFL8Aw");
        assert_eq!(reply["encryptedToken"], expected.as_str());
        assert_eq!(
            Zoom::new(None)
                .handshake(&UnverifiedRequest::new(&headers, &Bytes::copy_from_slice(BODY), 0), &secret("a", SECRET)),
            None
        );
    }
}
