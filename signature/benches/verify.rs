//! What verifying one request costs, per scheme, on a 1 KiB and a 64 KiB body: the signature check plus the
//! timestamp check, through the same `signature::verify` entry the gateway calls (filtering the active secrets
//! included). The HMAC schemes differ mostly in how many bytes they hash and how they encode the MAC; Discord
//! (Ed25519) and SendGrid (ECDSA P-256, key parsed once when the source is built) are the asymmetric outliers.
//!
//! `cargo bench -p hookline-signature --bench verify`; `scripts/bench` runs it with short measurement times.

use std::hint::black_box;

use base64::Engine;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use ed25519_dalek::Signer as _;
use hookline_signature::{
    self as signature, SchemeOptions, Secret, UnverifiedRequest, github, paddle, shopify, slack, standard_webhooks,
    stripe, twitch, typeform,
};
use http::{HeaderMap, HeaderName, HeaderValue};

const SECRET: &str = "bench-secret-0123456789abcdef";
const WHSEC: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const ID: &str = "evt_bench_0001";

/// Signs a body at a time (seconds): the headers the provider would send.
type SignHeaders = fn(&[u8], i64) -> Vec<(&'static str, String)>;

/// One scheme's request: the secret as configured, and the headers for a body signed at `now_s`.
struct Case {
    scheme: &'static str,
    secret: Vec<u8>,
    headers: SignHeaders,
}

impl Case {
    /// A scheme keyed with the bench's HMAC secret, [`SECRET`].
    fn hmac(scheme: &'static str, headers: SignHeaders) -> Self {
        Self { scheme, secret: SECRET.into(), headers }
    }
}

fn ed25519_key() -> ed25519_dalek::SigningKey {
    ed25519_dalek::SigningKey::from_bytes(&[7; 32])
}

fn p256_key() -> p256::ecdsa::SigningKey {
    p256::ecdsa::SigningKey::from_slice(&[7; 32]).expect("a valid P-256 scalar")
}

fn cases() -> Vec<Case> {
    vec![
        Case::hmac("github", |body, _| {
            vec![("x-hub-signature-256", github::sign(SECRET.as_bytes(), body)), ("x-github-delivery", ID.into())]
        }),
        Case::hmac("stripe", |body, now| vec![("stripe-signature", stripe::sign(SECRET.as_bytes(), body, now))]),
        Case {
            scheme: "standard_webhooks",
            secret: WHSEC.into(),
            headers: |body, now| {
                let key = standard_webhooks::decode_secret(WHSEC.as_bytes()).expect("valid whsec");
                vec![
                    ("webhook-id", ID.into()),
                    ("webhook-timestamp", now.to_string()),
                    ("webhook-signature", standard_webhooks::sign(&key, ID, now, body)),
                ]
            },
        },
        Case::hmac("shopify", |body, _| vec![("x-shopify-hmac-sha256", shopify::sign(SECRET.as_bytes(), body))]),
        Case::hmac("slack", |body, now| {
            vec![
                ("x-slack-signature", slack::sign(SECRET.as_bytes(), body, now)),
                ("x-slack-request-timestamp", now.to_string()),
            ]
        }),
        Case::hmac("paddle", |body, now| vec![("paddle-signature", paddle::sign(SECRET.as_bytes(), body, now))]),
        Case::hmac("twitch", |body, now| {
            let timestamp = rfc3339(now);
            vec![
                ("twitch-eventsub-message-id", ID.into()),
                ("twitch-eventsub-message-timestamp", timestamp.clone()),
                ("twitch-eventsub-message-signature", twitch::sign(SECRET.as_bytes(), ID, &timestamp, body)),
            ]
        }),
        Case::hmac("typeform", |body, _| vec![("typeform-signature", typeform::sign(SECRET.as_bytes(), body))]),
        Case {
            scheme: "discord",
            secret: hex::encode(ed25519_key().verifying_key().to_bytes()).into_bytes(),
            headers: |body, now| {
                let timestamp = now.to_string();
                let message = [timestamp.as_bytes(), body].concat();
                vec![
                    ("x-signature-ed25519", hex::encode(ed25519_key().sign(&message).to_bytes())),
                    ("x-signature-timestamp", timestamp),
                ]
            },
        },
        Case {
            scheme: "sendgrid",
            secret: {
                // SubjectPublicKeyInfo DER of a P-256 key: the fixed algorithm prefix, then the uncompressed point.
                let mut der = hex::decode("3059301306072a8648ce3d020106082a8648ce3d030107034200").expect("hex");
                der.extend_from_slice(p256_key().verifying_key().to_encoded_point(false).as_bytes());
                base64::engine::general_purpose::STANDARD.encode(der).into_bytes()
            },
            headers: |body, now| {
                let timestamp = now.to_string();
                let message = [timestamp.as_bytes(), body].concat();
                let signature: p256::ecdsa::Signature = p256_key().sign(&message);
                vec![
                    (
                        "x-twilio-email-event-webhook-signature",
                        base64::engine::general_purpose::STANDARD.encode(signature.to_der().as_bytes()),
                    ),
                    ("x-twilio-email-event-webhook-timestamp", timestamp),
                ]
            },
        },
    ]
}

/// `2026-12-02T14:00:00Z`-style UTC time for Twitch, from seconds since the epoch.
fn rfc3339(unix_s: i64) -> String {
    let at = time::OffsetDateTime::from_unix_timestamp(unix_s).expect("a time after 1970");
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        at.second()
    )
}

fn body(size: usize) -> Vec<u8> {
    let mut body = format!(r#"{{"id":"{ID}","type":"bench.event","data":{{"pad":""#).into_bytes();
    body.resize(size - 3, b'x');
    body.extend_from_slice(br#""}}"#);
    body
}

fn verify_benches(c: &mut Criterion) {
    let mut group = c.benchmark_group("verify");
    for case in cases() {
        let scheme = signature::build(case.scheme, &SchemeOptions::default()).expect("known scheme");
        let key = scheme.decode_secret(&case.secret).expect("valid secret");
        let secrets = vec![Secret::new("bench", key)];
        for (label, size) in [("1KiB", 1024), ("64KiB", 64 * 1024)] {
            let body = bytes::Bytes::from(body(size));
            let now_ms = i64::try_from(
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("after 1970").as_millis(),
            )
            .expect("ms fit i64");
            let mut headers = HeaderMap::new();
            for (name, value) in (case.headers)(&body, now_ms / 1000) {
                headers
                    .insert(HeaderName::from_static(name), HeaderValue::from_str(&value).expect("ASCII header value"));
            }
            let request = UnverifiedRequest::new(&headers, &body, now_ms);
            signature::verify(scheme.as_ref(), &request, &secrets).expect("the bench request verifies");
            group.throughput(Throughput::Bytes(size as u64));
            group.bench_with_input(BenchmarkId::new(case.scheme, label), &request, |b, request| {
                b.iter(|| signature::verify(scheme.as_ref(), black_box(request), &secrets))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, verify_benches);
criterion_main!(benches);
