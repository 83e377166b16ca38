//! PayPal (REST webhooks): `PAYPAL-TRANSMISSION-SIG` (base64) is SHA256withRSA over
//! `<PAYPAL-TRANSMISSION-ID>|<PAYPAL-TRANSMISSION-TIME>|<webhook id>|<CRC32 of the body, decimal>`, made with the
//! key of the certificate at `PAYPAL-CERT-URL`, which must be https on `api.paypal.com`, `api-m.paypal.com` or
//! their sandbox twins, under `/v1/notifications/certs/`. This is PayPal's documented offline verification
//! ("Verify webhook signature", and its SDKs' `WebhookEvent.verify`). The certificate must chain to a trusted root
//! and be issued to PayPal's signing name ([`SIGNING_NAMES`]).
//!
//! The source's secrets are its webhook ids (the signed string names the webhook, so a message for another
//! PayPal webhook does not verify here). The body is bound only by its CRC32, which is not a cryptographic digest:
//! anyone holding one delivery can make another body, with another `/id` and amount, of the same CRC. A match is
//! therefore [`Coverage::BodyChecksum`](super::super::Coverage::BodyChecksum), and the gateway makes an event of
//! it only in one of two ways (docs/security.md, "PayPal"): by default it asks PayPal's own API for the event the
//! body names (`GET /v1/notifications/webhooks-events/{id}` with the operator's REST credentials) and
//! [`confirmed`] accepts the body only when every member of it is what PayPal holds; or, where the source opted
//! in (`allow_crc_only`), it takes the checksum-bound body as it is. The timestamp window is kept short (300 s
//! by default). Event id and type from the body (`/id`, `/event_type`).

use base64::Engine;

use super::{
    super::{
        Coverage, FieldSource, IdentityRule, Scheme, Secret, SignatureMatch, UnverifiedRequest, Verified, VerifyError,
        support::{BASE64, Tolerance, header, parse_rfc3339_ms, required_header},
    },
    CheckedKey, FetchedKeyScheme, KeyUrl,
    pin::{HostPin, Pins},
    x509::RsaDigest,
};

pub const DEFAULT_TOLERANCE_S: u64 = 300;

const TRANSMISSION_ID: &str = "paypal-transmission-id";
const TRANSMISSION_TIME: &str = "paypal-transmission-time";
const TRANSMISSION_SIG: &str = "paypal-transmission-sig";
const CERT_URL: &str = "paypal-cert-url";
const AUTH_ALGO: &str = "paypal-auth-algo";

const CERTIFICATE_PINS: Pins = Pins {
    hosts: &[
        HostPin::Exact("api.paypal.com"),
        HostPin::Exact("api-m.paypal.com"),
        HostPin::Exact("api.sandbox.paypal.com"),
        HostPin::Exact("api-m.sandbox.paypal.com"),
    ],
    path_prefix: "/v1/notifications/certs/",
    path_suffix: "",
};

/// The names PayPal's message-signing certificate is issued to, live and sandbox (the names PayPal's own SDKs
/// check): a certificate a public CA issued to anyone else is refused, whatever host served it.
pub const SIGNING_NAMES: [&str; 2] =
    ["messageverificationcerts.paypal.com", "messageverificationcerts.sandbox.paypal.com"];

#[derive(Debug)]
pub struct PayPal {
    tolerance: Tolerance,
}

impl PayPal {
    pub fn new(tolerance: Tolerance) -> Self {
        Self { tolerance }
    }
}

impl Default for PayPal {
    fn default() -> Self {
        Self::new(Tolerance::seconds(DEFAULT_TOLERANCE_S))
    }
}

/// CRC-32 (IEEE 802.3, reflected, as zlib's `crc32`), bit by bit: bodies are small and this runs once per
/// verified request.
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in bytes {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

impl Scheme for PayPal {
    fn signs_timestamp(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "paypal"
    }

    fn is_costly(&self) -> bool {
        true
    }

    fn verify(&self, request: &UnverifiedRequest<'_>, secrets: &[&Secret]) -> Result<SignatureMatch, VerifyError> {
        super::verify_offline(self, request, secrets)
    }

    fn identity(&self) -> IdentityRule {
        IdentityRule::new(vec![FieldSource::pointer("/id")], vec![FieldSource::pointer("/event_type")])
    }

    fn signable_headers(&self) -> Vec<std::borrow::Cow<'static, str>> {
        vec![TRANSMISSION_ID.into(), TRANSMISSION_TIME.into()]
    }

    fn fetched_key(&self) -> Option<&dyn FetchedKeyScheme> {
        Some(self)
    }
}

impl FetchedKeyScheme for PayPal {
    fn locate(&self, request: &UnverifiedRequest<'_>, _secrets: &[&Secret]) -> Result<KeyUrl, VerifyError> {
        required_header(request.headers, TRANSMISSION_SIG, TRANSMISSION_SIG)?;
        required_header(request.headers, TRANSMISSION_ID, TRANSMISSION_ID)?;
        if header(request.headers, AUTH_ALGO).is_some_and(|algorithm| algorithm != "SHA256withRSA") {
            return Err(VerifyError::malformed(AUTH_ALGO));
        }
        let time = required_header(request.headers, TRANSMISSION_TIME, TRANSMISSION_TIME)?;
        let time_ms = parse_rfc3339_ms(time).ok_or(VerifyError::malformed(TRANSMISSION_TIME))?;
        self.tolerance.check(time_ms, request.now_ms)?;
        KeyUrl::pinned(required_header(request.headers, CERT_URL, CERT_URL)?, &CERTIFICATE_PINS, CERT_URL)
    }

    fn verify_with(
        &self,
        request: &UnverifiedRequest<'_>,
        secrets: &[&Secret],
        key: &CheckedKey<'_>,
    ) -> Result<SignatureMatch, VerifyError> {
        let signature = BASE64
            .decode(required_header(request.headers, TRANSMISSION_SIG, TRANSMISSION_SIG)?)
            .map_err(|_| VerifyError::malformed(TRANSMISSION_SIG))?;
        let id = required_header(request.headers, TRANSMISSION_ID, TRANSMISSION_ID)?;
        let time = required_header(request.headers, TRANSMISSION_TIME, TRANSMISSION_TIME)?;
        let certificate = key.leaf()?;
        if !certificate.is_issued_to_any(&SIGNING_NAMES.map(str::to_owned)) {
            return Err(VerifyError::CertificateUntrusted);
        }
        let crc = crc32(request.body);
        secrets
            .iter()
            .find(|secret| {
                let webhook_id = String::from_utf8_lossy(secret.key());
                let signed = format!("{id}|{time}|{webhook_id}|{crc}");
                certificate.verifies_rsa(RsaDigest::Sha256, signed.as_bytes(), &signature)
            })
            .map(|secret| {
                SignatureMatch::by(secret).covering([TRANSMISSION_ID.into(), TRANSMISSION_TIME.into()]).by_checksum()
            })
            .ok_or(VerifyError::Mismatch)
    }
}

/// PayPal's REST API host for live or sandbox credentials: where the event is confirmed.
pub fn api_host(sandbox: bool) -> &'static str {
    if sandbox { API_SANDBOX_HOST } else { API_LIVE_HOST }
}

const API_LIVE_HOST: &str = "api-m.paypal.com";
const API_SANDBOX_HOST: &str = "api-m.sandbox.paypal.com";

/// Where an OAuth access token is asked for (`POST`, HTTP Basic with the REST app's client id and secret, form
/// `grant_type=client_credentials`).
pub const TOKEN_PATH: &str = "/v1/oauth2/token";

const API_PINS: Pins = Pins {
    hosts: &[HostPin::Exact(API_LIVE_HOST), HostPin::Exact(API_SANDBOX_HOST)],
    path_prefix: "/v1/",
    path_suffix: "",
};

/// PayPal's event ids are short tokens (`WH-58D329510W468432D-8HN650336L201105X`); anything else is not asked for.
const MAX_EVENT_ID_BYTES: usize = 128;

/// The URL of PayPal's OAuth token endpoint.
pub fn token_url(sandbox: bool) -> KeyUrl {
    KeyUrl::pinned(&format!("https://{}{TOKEN_PATH}", api_host(sandbox)), &API_PINS, "token").expect("a pinned URL")
}

/// The URL of the event a checksum-bound `proof` names (its body's `/id`), to be fetched with a bearer token:
/// refused as [`VerifyError::NotConfirmed`] when the body names no plausible event id.
pub fn event_url(proof: &Verified, sandbox: bool) -> Result<KeyUrl, VerifyError> {
    let body: serde_json::Value = serde_json::from_slice(proof.body()).map_err(|_| VerifyError::NotConfirmed)?;
    let id = body
        .get("id")
        .and_then(serde_json::Value::as_str)
        .filter(|id| {
            !id.is_empty()
                && id.len() <= MAX_EVENT_ID_BYTES
                && id.bytes().all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_')
        })
        .ok_or(VerifyError::NotConfirmed)?;
    let url = format!("https://{}/v1/notifications/webhooks-events/{id}", api_host(sandbox));
    KeyUrl::pinned(&url, &API_PINS, "id").map_err(|_| VerifyError::NotConfirmed)
}

/// The members a confirmed body must carry: what an event is (without them a body naming a real event could drop
/// what it says, and still pass as that event).
const REQUIRED_MEMBERS: [&str; 3] = ["id", "event_type", "resource"];

/// `proof` (a PayPal match, the body bound only by its CRC32) made a proof of the whole body, given `answer`, the
/// event PayPal's API returned for the body's `/id`: accepted only when the body is a JSON object without duplicate
/// member names (at any depth, so no reader can see another value than the one compared), carrying `id`,
/// `event_type` and `resource`, each of whose members is equal (as JSON) to the same member of PayPal's answer.
/// Whitespace and member order may differ (PayPal's API need not format the event as its delivery did); nothing
/// the body says may. Anything else is [`VerifyError::NotConfirmed`].
pub fn confirmed(proof: Verified, answer: &[u8]) -> Result<Verified, VerifyError> {
    if proof.coverage != Coverage::BodyChecksum {
        return Err(VerifyError::NotConfirmed);
    }
    let strict::Strict(body) = serde_json::from_slice(&proof.body).map_err(|_| VerifyError::NotConfirmed)?;
    let answer: serde_json::Value = serde_json::from_slice(answer).map_err(|_| VerifyError::NotConfirmed)?;
    let (Some(body), Some(answer)) = (body.as_object(), answer.as_object()) else {
        return Err(VerifyError::NotConfirmed);
    };
    let holds = REQUIRED_MEMBERS.iter().all(|name| body.contains_key(*name))
        && body.iter().all(|(name, value)| answer.get(name) == Some(value));
    if !holds {
        return Err(VerifyError::NotConfirmed);
    }
    Ok(Verified { coverage: Coverage::WholeBody, ..proof })
}

/// JSON read as `serde_json::Value`, refusing a duplicate member name at any depth (`serde_json` keeps the last
/// one, and another reader may keep the first).
mod strict {
    use std::fmt;

    use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
    use serde_json::{Map, Number, Value};

    pub struct Strict(pub Value);

    impl<'de> Deserialize<'de> for Strict {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            deserializer.deserialize_any(StrictVisitor).map(Strict)
        }
    }

    struct StrictVisitor;

    impl<'de> Visitor<'de> for StrictVisitor {
        type Value = Value;

        fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
            formatter.write_str("JSON without duplicate member names")
        }

        fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
            Ok(Value::Bool(value))
        }

        fn visit_i64<E>(self, value: i64) -> Result<Value, E> {
            Ok(Value::Number(value.into()))
        }

        fn visit_u64<E>(self, value: u64) -> Result<Value, E> {
            Ok(Value::Number(value.into()))
        }

        fn visit_f64<E: de::Error>(self, value: f64) -> Result<Value, E> {
            Number::from_f64(value).map(Value::Number).ok_or_else(|| E::custom("not a finite number"))
        }

        fn visit_str<E>(self, value: &str) -> Result<Value, E> {
            Ok(Value::String(value.to_owned()))
        }

        fn visit_string<E>(self, value: String) -> Result<Value, E> {
            Ok(Value::String(value))
        }

        fn visit_unit<E>(self) -> Result<Value, E> {
            Ok(Value::Null)
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
            let mut values = Vec::new();
            while let Some(Strict(value)) = seq.next_element()? {
                values.push(value);
            }
            Ok(Value::Array(values))
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
            let mut members = Map::new();
            while let Some(name) = map.next_key::<String>()? {
                if members.contains_key(&name) {
                    return Err(de::Error::custom("a duplicate member name"));
                }
                let Strict(value) = map.next_value()?;
                members.insert(name, value);
            }
            Ok(Value::Object(members))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ANSWER: &str = r#"{"id":"WH-1","event_type":"PAYMENT.CAPTURE.COMPLETED","resource_type":"capture","summary":"Payment completed","resource":{"id":"C-1","amount":{"value":"12.30","currency_code":"USD"}},"links":[{"rel":"self"}]}"#;

    fn checksum_proof(body: &str) -> Verified {
        let secret = Secret::new("live", b"1JE4291016473214C".to_vec());
        Verified::signed(SignatureMatch::by(&secret).by_checksum(), bytes::Bytes::copy_from_slice(body.as_bytes()))
    }

    #[test]
    fn a_checksum_bound_body_is_confirmed_only_by_what_paypal_holds() {
        // The same event, formatted and ordered otherwise, some of PayPal's members left out: confirmed.
        let reordered = r#"{ "resource": {"amount": {"currency_code": "USD", "value": "12.30"}, "id": "C-1"},
            "event_type": "PAYMENT.CAPTURE.COMPLETED", "id": "WH-1", "summary": "Payment completed" }"#;
        for body in [ANSWER, reordered] {
            let proof = confirmed(checksum_proof(body), ANSWER.as_bytes()).expect("confirmed");
            assert_eq!(proof.coverage(), &Coverage::WholeBody);
            assert_eq!(proof.body().as_ref(), body.as_bytes(), "the body as delivered");
        }
        for refused in [
            ANSWER.replace("12.30", "9999.00"),
            ANSWER.replace("WH-1", "WH-2"),
            ANSWER.replace(r#""links""#, r#""pad":"ACCA","links""#),
            r#"{"id":"WH-1","event_type":"PAYMENT.CAPTURE.COMPLETED"}"#.to_owned(),
            ANSWER.replace(r#""resource":{"#, r#""resource":{"amount":{"value":"9999.00"},"#),
            ANSWER.replace(r#""summary""#, r#""id":"WH-9","summary""#),
            "[1]".to_owned(),
            "not json".to_owned(),
        ] {
            assert_eq!(
                confirmed(checksum_proof(&refused), ANSWER.as_bytes()),
                Err(VerifyError::NotConfirmed),
                "{refused}"
            );
        }
        assert_eq!(confirmed(checksum_proof(ANSWER), b"{}"), Err(VerifyError::NotConfirmed));
        let whole = Verified::signed(SignatureMatch::by(&Secret::new("s", b"k".to_vec())), ANSWER.into());
        assert_eq!(confirmed(whole, ANSWER.as_bytes()), Err(VerifyError::NotConfirmed), "only a PayPal match");
    }

    #[test]
    fn only_a_plausible_event_id_is_asked_for_on_paypals_api_host() {
        let url = event_url(&checksum_proof(ANSWER), false).expect("an id");
        assert_eq!(url.to_string(), "https://api-m.paypal.com/v1/notifications/webhooks-events/WH-1");
        assert_eq!(event_url(&checksum_proof(ANSWER), true).expect("an id").host(), "api-m.sandbox.paypal.com");
        assert_eq!(token_url(true).to_string(), "https://api-m.sandbox.paypal.com/v1/oauth2/token");
        for body in [r#"{"id":"../../v2/x"}"#, r#"{"id":"a?b"}"#, r#"{"id":""}"#, r#"{"id":7}"#, "{}", "x"] {
            assert_eq!(event_url(&checksum_proof(body), false), Err(VerifyError::NotConfirmed), "{body}");
        }
    }

    #[test]
    fn crc32_is_zlibs() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
        assert_eq!(crc32(b"The quick brown fox jumps over the lazy dog"), 0x414F_A339);
    }
}
