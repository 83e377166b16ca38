//! Handshakes a source may answer besides its scheme's own (Slack's, Zoom's, Twitch's and Discord's live in their
//! modules): the subscription checks some providers make before they deliver anything. A preset turns on its
//! provider's; a source can list others (`handshakes = ["meta_hub"]`).
//!
//! - `meta_hub` (Meta: WhatsApp, Messenger, Instagram): `GET ?hub.mode=subscribe&hub.verify_token=..&
//!   hub.challenge=..`; the verify token is compared in constant time with the source's `verify_tokens`, then the
//!   challenge is echoed as text.
//! - `okta`: `GET` with `X-Okta-Verification-Challenge`, authenticated by the source's scheme (the token Okta
//!   sends with every request), answered `{"verification": <challenge>}`.
//! - `x_crc` (X Account Activity): `GET ?crc_token=..` answered `{"response_token": "sha256=<base64 HMAC-SHA256
//!   (secret, crc_token)>"}` with the source's first active secret.
//! - `challenge_echo` (Dropbox, Nylas): `GET ?challenge=..` echoed as text.
//! - `graph_validation` (Microsoft Graph): `POST ?validationToken=..` echoed as text, before any verification
//!   (Graph sends no credential with it).
//! - `event_grid` (Azure Event Grid): a `SubscriptionValidation` event, once the request verified, answered
//!   `{"validationResponse": <validationCode>}`.
//!
//! The unauthenticated ones (`challenge_echo`, `graph_validation`, `x_crc`) echo only short strings of a
//! restricted alphabet, answered as `text/plain` or JSON, never HTML: they cannot be turned into a reflected page.
//! `x_crc` signs what the caller sends with the secret POST requests are checked with, so the CRC token alphabet
//! excludes `{` and `[`: a signature obtained this way can never be one of a JSON body (the `x` preset accepts
//! only JSON object bodies).

use base64::Engine;
use serde::{Deserialize, Serialize};

use super::{
    Handshake, Scheme, Secret, UnverifiedRequest, VerifyError,
    support::{Algorithm, BASE64, digest_equal, header, hmac},
};

/// A subscription handshake a source answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Challenge {
    MetaHub,
    Okta,
    XCrc,
    ChallengeEcho,
    GraphValidation,
    EventGrid,
}

/// Every handshake, for docs and validation messages.
pub const CHALLENGES: &[Challenge] = &[
    Challenge::MetaHub,
    Challenge::Okta,
    Challenge::XCrc,
    Challenge::ChallengeEcho,
    Challenge::GraphValidation,
    Challenge::EventGrid,
];

/// Longest challenge echoed (bytes).
const MAX_ECHO_BYTES: usize = 1024;

/// What a handshake may check a request against.
#[derive(Debug, Clone, Copy)]
pub struct HandshakeKeys<'a> {
    /// The source's scheme and secrets (all of them; [`super::verify`] picks the active ones).
    pub scheme: &'a dyn Scheme,
    pub secrets: &'a [Secret],
    /// The source's `verify_tokens` (Meta's verify token), likewise.
    pub verify_tokens: &'a [Secret],
}

impl Challenge {
    /// The config name.
    pub fn name(self) -> &'static str {
        match self {
            Self::MetaHub => "meta_hub",
            Self::Okta => "okta",
            Self::XCrc => "x_crc",
            Self::ChallengeEcho => "challenge_echo",
            Self::GraphValidation => "graph_validation",
            Self::EventGrid => "event_grid",
        }
    }

    /// Whether this handshake arrives as a `GET` (a source with one answers `GET`; others answer it 405).
    pub fn is_get(self) -> bool {
        matches!(self, Self::MetaHub | Self::Okta | Self::XCrc | Self::ChallengeEcho)
    }

    /// Whether the handshake needs the source's `verify_tokens`.
    pub fn needs_verify_tokens(self) -> bool {
        self == Self::MetaHub
    }

    /// The answer to `request` if it is this handshake, judged before (and instead of) the scheme's verification
    /// of a delivery: `None` when it is not this handshake, an error when it is one that fails its own check.
    pub fn answer_unverified(
        self,
        request: &UnverifiedRequest<'_>,
        keys: HandshakeKeys<'_>,
    ) -> Option<Result<Handshake, VerifyError>> {
        let get = request.method == http::Method::GET;
        match self {
            Self::MetaHub if get => {
                let challenge = request.query_parameter("hub.challenge")?;
                Some(meta_hub(request, &challenge, keys.verify_tokens))
            }
            Self::Okta if get => {
                let challenge = header(request.headers, "x-okta-verification-challenge")?;
                Some(okta(request, challenge, keys))
            }
            Self::XCrc if get => {
                let token = request.query_parameter("crc_token")?;
                Some(x_crc(request, &token, keys.secrets))
            }
            Self::ChallengeEcho if get => {
                let challenge = request.query_parameter("challenge")?;
                Some(echo(&challenge, "challenge", is_token_char))
            }
            Self::GraphValidation if request.method == http::Method::POST => {
                let token = request.query_parameter("validationToken")?;
                Some(echo(&token, "validationToken", is_sentence_char))
            }
            _ => None,
        }
    }

    /// The answer to a request that verified, if it is this handshake.
    pub fn answer_verified(self, request: &UnverifiedRequest<'_>) -> Option<Handshake> {
        match self {
            Self::EventGrid => event_grid(request),
            _ => None,
        }
    }
}

fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "-_.~".contains(c)
}

/// Graph's validation tokens are sentences (`Validation: Testing client application reachability ...`).
fn is_sentence_char(c: char) -> bool {
    (c.is_ascii_graphic() || c == ' ') && !"<>&\"'{}[]\\".contains(c)
}

fn echo(value: &str, name: &'static str, allowed: fn(char) -> bool) -> Result<Handshake, VerifyError> {
    if value.is_empty() || value.len() > MAX_ECHO_BYTES || !value.chars().all(allowed) {
        return Err(VerifyError::malformed(name));
    }
    Ok(Handshake::text(value.to_owned()))
}

fn meta_hub(
    request: &UnverifiedRequest<'_>,
    challenge: &str,
    verify_tokens: &[Secret],
) -> Result<Handshake, VerifyError> {
    if request.query_parameter("hub.mode").as_deref() != Some("subscribe") {
        return Err(VerifyError::malformed("hub.mode"));
    }
    let presented = request.query_parameter("hub.verify_token").ok_or(VerifyError::missing("hub.verify_token"))?;
    let active = super::active_secrets(verify_tokens, request.now_ms);
    let mut matched = false;
    // Every active token is compared, so the time taken does not say which one (or whether any) matched.
    for token in active {
        matched |= digest_equal(presented.as_bytes(), token.key());
    }
    if !matched {
        return Err(VerifyError::Mismatch);
    }
    echo(challenge, "hub.challenge", is_token_char)
}

fn okta(request: &UnverifiedRequest<'_>, challenge: &str, keys: HandshakeKeys<'_>) -> Result<Handshake, VerifyError> {
    super::verify(keys.scheme, request, keys.secrets)?;
    echo(challenge, "x-okta-verification-challenge", is_token_char)?;
    Ok(Handshake::json(&serde_json::json!({ "verification": challenge })))
}

fn x_crc(request: &UnverifiedRequest<'_>, token: &str, secrets: &[Secret]) -> Result<Handshake, VerifyError> {
    let allowed = |c: char| is_token_char(c) || "+/=".contains(c);
    if token.is_empty() || token.len() > 256 || !token.chars().all(allowed) {
        return Err(VerifyError::malformed("crc_token"));
    }
    let secret = super::active_secrets(secrets, request.now_ms).next().ok_or(VerifyError::Mismatch)?;
    let mac = hmac(Algorithm::Sha256, secret.key(), &[token.as_bytes()]);
    Ok(Handshake::json(&serde_json::json!({ "response_token": format!("sha256={}", BASE64.encode(mac)) })))
}

fn event_grid(request: &UnverifiedRequest<'_>) -> Option<Handshake> {
    if header(request.headers, "aeg-event-type")? != "SubscriptionValidation" {
        return None;
    }
    let events: serde_json::Value = serde_json::from_slice(request.body).ok()?;
    let event = events.as_array()?.first()?;
    if event.get("eventType")?.as_str()? != "Microsoft.EventGrid.SubscriptionValidationEvent" {
        return None;
    }
    let code = event.pointer("/data/validationCode")?.as_str()?;
    Some(Handshake::json(&serde_json::json!({ "validationResponse": code })))
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use http::Method;

    use super::*;
    use crate::{
        github::GitHub,
        tests::headers,
        token::{Token, TokenOptions},
    };

    fn get<'a>(headers: &'a http::HeaderMap, body: &'a Bytes, query: &'a str) -> UnverifiedRequest<'a> {
        UnverifiedRequest::new(headers, body, 0).with_method(&Method::GET).with_query(Some(query))
    }

    fn keys<'a>(scheme: &'a dyn Scheme, secrets: &'a [Secret], verify_tokens: &'a [Secret]) -> HandshakeKeys<'a> {
        HandshakeKeys { scheme, secrets, verify_tokens }
    }

    #[test]
    fn meta_echoes_the_challenge_only_for_the_verify_token() {
        let (empty, body) = (headers(&[]), Bytes::new());
        let tokens = [Secret::new("vt", b"my-token".to_vec())];
        let keys = keys(&GitHub, &[], &tokens);
        let answer = |query: &str| Challenge::MetaHub.answer_unverified(&get(&empty, &body, query), keys);
        let ok = answer("hub.mode=subscribe&hub.verify_token=my-token&hub.challenge=1158201444");
        assert_eq!(ok, Some(Ok(Handshake::text("1158201444"))));
        assert_eq!(
            answer("hub.mode=subscribe&hub.verify_token=my-tokem&hub.challenge=1158201444"),
            Some(Err(VerifyError::Mismatch))
        );
        assert_eq!(answer("hub.mode=subscribe&hub.challenge=1"), Some(Err(VerifyError::missing("hub.verify_token"))));
        assert_eq!(
            answer("hub.mode=subscribe&hub.verify_token=my-token&hub.challenge=%3Cscript%3E"),
            Some(Err(VerifyError::malformed("hub.challenge")))
        );
        assert_eq!(answer("other=1"), None, "not a handshake: the caller answers it 405");
        let post = UnverifiedRequest::new(&empty, &body, 0).with_query(Some("hub.challenge=1"));
        assert_eq!(Challenge::MetaHub.answer_unverified(&post, keys), None);
    }

    #[test]
    fn okta_is_answered_only_with_the_token() {
        let scheme =
            Token::new(&TokenOptions { header: Some("Authorization".into()), ..TokenOptions::default() }).unwrap();
        let secrets = [Secret::new("a", b"okta-secret".to_vec())];
        let body = Bytes::new();
        let good = headers(&[("authorization", "okta-secret"), ("x-okta-verification-challenge", "abc123")]);
        assert_eq!(
            Challenge::Okta.answer_unverified(&get(&good, &body, ""), keys(&scheme, &secrets, &[])),
            Some(Ok(Handshake::json(&serde_json::json!({ "verification": "abc123" }))))
        );
        let bad = headers(&[("authorization", "guess"), ("x-okta-verification-challenge", "abc123")]);
        assert_eq!(
            Challenge::Okta.answer_unverified(&get(&bad, &body, ""), keys(&scheme, &secrets, &[])),
            Some(Err(VerifyError::Mismatch))
        );
    }

    #[test]
    fn x_crc_signs_the_token_with_the_consumer_secret() {
        let (empty, body) = (headers(&[]), Bytes::new());
        let secrets = [Secret::new("a", b"consumer-secret".to_vec())];
        let answer =
            Challenge::XCrc.answer_unverified(&get(&empty, &body, "crc_token=abc"), keys(&GitHub, &secrets, &[]));
        // Independently: base64(HMAC-SHA256("consumer-secret", "abc")), computed with the hmac crate directly.
        use hmac::Mac;
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(b"consumer-secret").unwrap();
        mac.update(b"abc");
        let expected = format!("sha256={}", BASE64.encode(mac.finalize().into_bytes()));
        assert_eq!(answer, Some(Ok(Handshake::json(&serde_json::json!({ "response_token": expected })))));
        let json_like = get(&empty, &body, "crc_token=%7B%22a%22%3A1%7D");
        assert_eq!(
            Challenge::XCrc.answer_unverified(&json_like, keys(&GitHub, &secrets, &[])),
            Some(Err(VerifyError::malformed("crc_token")))
        );
    }

    #[test]
    fn graph_echoes_its_sentence_and_event_grid_its_code() {
        let (empty, body) = (headers(&[]), Bytes::new());
        let query =
            "validationToken=Validation%3A+Testing+client+application+reachability+for+subscription+Request-Id%3A+1f4";
        let post = UnverifiedRequest::new(&empty, &body, 0).with_query(Some(query));
        assert_eq!(
            Challenge::GraphValidation.answer_unverified(&post, keys(&GitHub, &[], &[])),
            Some(Ok(Handshake::text(
                "Validation: Testing client application reachability for subscription Request-Id: 1f4"
            )))
        );
        let grid = headers(&[("aeg-event-type", "SubscriptionValidation")]);
        let event = Bytes::from_static(
            br#"[{"id":"2d1781af","eventType":"Microsoft.EventGrid.SubscriptionValidationEvent","data":{"validationCode":"512d38b6-c7b8-40c8-89fe-f46f9e9622b6","validationUrl":"https://x"}}]"#,
        );
        let request = UnverifiedRequest::new(&grid, &event, 0);
        assert_eq!(
            Challenge::EventGrid.answer_verified(&request),
            Some(Handshake::json(&serde_json::json!({ "validationResponse": "512d38b6-c7b8-40c8-89fe-f46f9e9622b6" })))
        );
        let notification = headers(&[("aeg-event-type", "Notification")]);
        assert_eq!(Challenge::EventGrid.answer_verified(&UnverifiedRequest::new(&notification, &event, 0)), None);
    }
}
