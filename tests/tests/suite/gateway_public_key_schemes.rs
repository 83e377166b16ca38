//! The public-key schemes end to end against the real broker: Discord (Ed25519) and SendGrid (ECDSA P-256) sign
//! `timestamp + body`, the gateway holds the public half, checks the signed timestamp, answers Discord's PING
//! after verification and produces nothing it refused.

use std::{
    collections::HashMap,
    time::{SystemTime, UNIX_EPOCH},
};

use bytes::Bytes;
use hookline_common::config::SecretRef;
use hookline_gateway::config::SourceConfig;
use hookline_tests::{Reply, TestStack, read};
use http::{Request, StatusCode};
use http_body_util::Full;
use rdkafka::{Message, message::OwnedMessage};

fn now_s() -> i64 {
    i64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_secs()).expect("time")
}

/// Writes a secret to its own file (the gateway never takes secrets inline) and returns a reference to it.
fn secret(id: &str, value: &str) -> SecretRef {
    let path = std::env::temp_dir().join(format!("hookline-gw-test-{}.secret", uuid::Uuid::new_v4().simple()));
    std::fs::write(&path, value).expect("write secret");
    SecretRef::from_file(id, path.display().to_string())
}

async fn post(stack: &TestStack, path: &str, headers: &[(&str, &str)], body: impl Into<Bytes>) -> Reply {
    let mut request = Request::post(format!("http://{}{path}", stack.gateway_addr));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    stack.send(request.body(Full::new(body.into())).expect("request")).await
}

/// Discord and SendGrid sign `timestamp + body` with an Ed25519 or ECDSA P-256 key; the gateway holds the public
/// half. Keys from fixed seeds, signatures made now (both schemes check the signed timestamp).
fn discord_key() -> ed25519_dalek::SigningKey {
    ed25519_dalek::SigningKey::from_bytes(&[41u8; 32])
}

fn discord_sign(timestamp: &str, body: &str) -> String {
    use ed25519_dalek::Signer;
    hex::encode(discord_key().sign(format!("{timestamp}{body}").as_bytes()).to_bytes())
}

fn sendgrid_key() -> p256::ecdsa::SigningKey {
    p256::ecdsa::SigningKey::from_slice(&[43u8; 32]).expect("key")
}

fn sendgrid_public_key() -> String {
    // SubjectPublicKeyInfo DER: the fixed P-256 header, then the uncompressed point.
    let mut der = hex::decode("3059301306072a8648ce3d020106082a8648ce3d030107034200").expect("hex");
    der.extend_from_slice(p256::ecdsa::VerifyingKey::from(&sendgrid_key()).to_encoded_point(false).as_bytes());
    base64_encode(&der)
}

fn sendgrid_sign(timestamp: &str, body: &str) -> String {
    use p256::ecdsa::signature::Signer;
    let signature: p256::ecdsa::Signature = sendgrid_key().sign(format!("{timestamp}{body}").as_bytes());
    base64_encode(signature.to_der().as_bytes())
}

fn base64_encode(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, byte)| n | u32::from(*byte) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

const DISCORD_PING: &str = r#"{"id":"1","type":1}"#;
const DISCORD_COMMAND: &str = r#"{"id":"1187","type":2,"data":{"name":"hello"}}"#;
const SENDGRID_BATCH: &str = r#"[{"email":"a@example.com","event":"delivered","sg_event_id":"ev-1"}]"#;

#[tokio::test]
async fn public_key_schemes_discord_and_sendgrid_end_to_end() {
    let stack = TestStack::builder()
        .gateway_source(SourceConfig::new(
            "discord",
            "discord",
            vec![secret("app", &hex::encode(discord_key().verifying_key().to_bytes()))],
        ))
        .gateway_source(SourceConfig::new("sendgrid", "sendgrid", vec![secret("events", &sendgrid_public_key())]))
        .build()
        .await;
    let stack_ref = &stack;
    let now = now_s().to_string();
    let now_ref = &now;
    let discord = |body: &'static str, signature: String| async move {
        let headers = [("X-Signature-Ed25519", signature.as_str()), ("X-Signature-Timestamp", now_ref.as_str())];
        post(stack_ref, "/webhooks/discord", &headers, body).await
    };

    // PING is answered after verification; Discord's deliberately bad signatures are refused.
    let reply = discord(DISCORD_PING, discord_sign(&now, DISCORD_PING)).await;
    assert_eq!((reply.status, &reply.body[..]), (StatusCode::OK, &br#"{"type":1}"#[..]));
    let reply = discord(DISCORD_PING, discord_sign(&now, DISCORD_COMMAND)).await;
    assert_eq!((reply.status, reply.error_code().as_deref()), (StatusCode::UNAUTHORIZED, Some("signature_mismatch")));
    // A command gets Discord's deferred interaction response once the broker has it.
    let reply = discord(DISCORD_COMMAND, discord_sign(&now, DISCORD_COMMAND)).await;
    assert_eq!((reply.status, &reply.body[..]), (StatusCode::OK, &br#"{"type":5}"#[..]));

    let sendgrid_signature = sendgrid_sign(&now, SENDGRID_BATCH);
    let headers = [
        ("X-Twilio-Email-Event-Webhook-Signature", sendgrid_signature.as_str()),
        ("X-Twilio-Email-Event-Webhook-Timestamp", now.as_str()),
    ];
    assert_eq!(post(&stack, "/webhooks/sendgrid", &headers, SENDGRID_BATCH).await.status, StatusCode::ACCEPTED);
    let tampered = SENDGRID_BATCH.replace("delivered", "bounce");
    assert_eq!(post(&stack, "/webhooks/sendgrid", &headers, tampered).await.status, StatusCode::UNAUTHORIZED);
    // A genuine request captured and replayed later: its signed timestamp is stale.
    let stale_signature = sendgrid_sign("1000000000", SENDGRID_BATCH);
    let stale = [
        ("X-Twilio-Email-Event-Webhook-Signature", stale_signature.as_str()),
        ("X-Twilio-Email-Event-Webhook-Timestamp", "1000000000"),
    ];
    let reply = post(&stack, "/webhooks/sendgrid", &stale, SENDGRID_BATCH).await;
    assert_eq!((reply.status, reply.error_code().as_deref()), (StatusCode::UNAUTHORIZED, Some("timestamp_stale")));

    let records: HashMap<String, OwnedMessage> =
        stack.inbound_records().await.into_iter().map(|record| (read::inbound(&record).meta.source, record)).collect();
    assert_eq!(records.len(), 2, "the PING and the refused requests produced nothing");
    assert_eq!(records["discord"].key(), Some(&b"1187"[..]));
    assert_eq!(read::inbound(&records["discord"]).meta.event_type.as_deref(), Some("2"));
    let sendgrid_key = String::from_utf8_lossy(records["sendgrid"].key().expect("key")).into_owned();
    assert!(sendgrid_key.starts_with("sha256:"), "a batch is keyed by its body's SHA-256: {sendgrid_key}");
    stack.shutdown().await;
}
