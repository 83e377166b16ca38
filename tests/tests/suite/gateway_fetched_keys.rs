//! The fetched-key schemes (AWS SNS, PayPal, Google Pub/Sub push) against the real gateway and broker, with a key host of the test's
//! own on loopback (its own CA; the pinned names resolved to it by the gateway's test-only setting). Requests are
//! signed as the providers document it (RSA PKCS#1 v1.5, SHA-1 for SNS v1, SHA-256 for SNS v2, PayPal and Google's
//! RS256 OIDC tokens) by the `openssl` command line: SNS and Google sign server-side and PayPal's SDKs only verify,
//! so there is no provider SDK that signs and no official vector with a key a test could serve.
//!
//! Accepted requests are stored byte for byte; a tampered body, a wrong key, a stale timestamp, an unpinned
//! certificate URL (never fetched), an expired certificate and one from an untrusted CA are refused 401; a key
//! host that hangs or answers 10 MB costs a 503 with `Retry-After` while another source keeps answering 202; the
//! cache is bounded; SNS's subscription confirmation is confirmed at its pinned `SubscribeURL` and produces
//! nothing, and a confirmation that fails its checks is refused without the URL being visited. A PayPal delivery
//! becomes an event only once PayPal's event API (played by the key host, with OAuth client credentials) holds
//! its body: a captured delivery's headers with another body of the same CRC32 are refused, a retry of the
//! genuine one carries the same event id.

use std::{sync::Arc, time::Duration};

use base64::Engine;
use bytes::Bytes;
use hookline_common::config::SecretRef;
use hookline_gateway::{config::SourceConfig, paypal_api::PayPalOptions};
use hookline_signature::fetched::paypal::crc32;
use hookline_tests::{
    Delivery, Reply, TestStack,
    key_server::{KeyServer, PAYPAL_HOST, RsaKey, SNS_HOST, Served, TestCa},
};
use http::{Request, StatusCode};
use http_body_util::Full;
use rdkafka::Message;

const TOPIC_ARN: &str = "arn:aws:sns:us-east-1:123456789012:orders";
const WEBHOOK_ID: &str = "1JE4291016473214C";
const PUSH_ACCOUNT: &str = "pubsub-push@orders-project.iam.gserviceaccount.com";
const PUSH_URL: &str = "https://hooks.example.com/webhooks/pubsub";
const PAYPAL_CLIENT_ID: &str = "AZ-sandbox-client-id";
const PAYPAL_CLIENT_SECRET: &str = "EL-sandbox-client-secret";
/// The event of the PayPal test that every refusal is judged against.
const PAYPAL_EVENT: &str = r#"{"id":"WH-58D329510W468432D-8HN650336L201105X","event_type":"PAYMENT.CAPTURE.COMPLETED","resource":{"amount":{"value":"12.30"}}}"#;
/// The delivery the forgery test captures (the review's `crc_forge.py` original).
const PAYPAL_ORIGINAL: &str = r#"{"id":"WH-ORIGINAL-1","event_type":"PAYMENT.CAPTURE.COMPLETED","resource":{"amount":{"value":"1.00","currency_code":"USD"}}}"#;

fn secret(id: &str, value: &str) -> SecretRef {
    let path = std::env::temp_dir().join(format!("hookline-fetched-{}.secret", uuid::Uuid::new_v4().simple()));
    std::fs::write(&path, value).expect("write secret");
    SecretRef::from_file(id, path.display().to_string())
}

/// The signing material of one test: the trusted CA's key server, a signing key with good, expired and
/// foreign-CA certificates for it, and a second key nobody certified.
struct Keys {
    server: KeyServer,
    signer: RsaKey,
    stranger: RsaKey,
}

async fn keys() -> Keys {
    let directory = std::env::temp_dir().join(format!("hookline-fetched-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&directory).expect("temp dir");
    let signer = RsaKey::generate(&directory, "signer");
    let stranger = RsaKey::generate(&directory, "stranger");
    let ca = Arc::new(TestCa::new("hookline test key CA"));
    let foreign = TestCa::new("a CA the gateway does not trust");
    let server = KeyServer::start(ca.clone()).await;
    let good = ca.signing_certificate(&signer, "sns.amazonaws.com", 86_400);
    server.serve("/SimpleNotificationService-good.pem", Served::Pem(good.clone()));
    for n in 0..6 {
        server.serve(&format!("/SimpleNotificationService-many{n}.pem"), Served::Pem(good.clone()));
    }
    server.serve(
        "/SimpleNotificationService-expired.pem",
        Served::Pem(ca.signing_certificate(&signer, "sns.amazonaws.com", -3_600)),
    );
    server.serve(
        "/SimpleNotificationService-foreign.pem",
        Served::Pem(foreign.signing_certificate(&signer, "sns.amazonaws.com", 86_400)),
    );
    // Chains to the trusted CA, served by the pinned host, but issued to another name than SNS's.
    server.serve(
        "/SimpleNotificationService-elsewhere.pem",
        Served::Pem(ca.signing_certificate(&signer, "attacker.example", 86_400)),
    );
    server.serve("/SimpleNotificationService-hang.pem", Served::Hang);
    server.serve("/SimpleNotificationService-huge.pem", Served::Huge);
    server.serve("/?Action=ConfirmSubscription&", Served::Ok);
    server.serve(
        "/v1/notifications/certs/CERT-good",
        Served::Pem(ca.signing_certificate(&signer, "messageverificationcerts.paypal.com", 86_400)),
    );
    server.serve(
        "/v1/notifications/certs/CERT-elsewhere",
        Served::Pem(ca.signing_certificate(&signer, "attacker.example", 86_400)),
    );
    // After every certificate: the first route whose prefix matches answers.
    server.serve(
        "/v1/",
        Served::PayPalApi {
            client_id: PAYPAL_CLIENT_ID.to_owned(),
            secret: PAYPAL_CLIENT_SECRET.to_owned(),
            events: [PAYPAL_EVENT, PAYPAL_ORIGINAL]
                .iter()
                .map(|event| {
                    let value: serde_json::Value = serde_json::from_str(event).expect("json");
                    // PayPal's API formats the event as it likes: pretty-printed here, the delivery compact.
                    (
                        value["id"].as_str().expect("an id").to_owned(),
                        serde_json::to_string_pretty(&value).expect("json"),
                    )
                })
                .collect(),
        },
    );
    let jwks = serde_json::json!({ "keys": [signer.jwk("k-1"), stranger.jwk("k-other")] });
    server.serve("/oauth2/v3/certs", Served::Json(jwks.to_string()));
    Keys { server, signer, stranger }
}

async fn stack(keys: &Keys) -> TestStack {
    TestStack::builder()
        .gateway_key_fetch(keys.server.key_fetch_config())
        .gateway_source(SourceConfig::new("sns", "sns", vec![secret("orders", TOPIC_ARN)]))
        .gateway_source(SourceConfig {
            paypal: Some(PayPalOptions {
                api_credentials: Some(secret("rest", &format!("{PAYPAL_CLIENT_ID}:{PAYPAL_CLIENT_SECRET}"))),
                sandbox: true,
                allow_crc_only: false,
            }),
            ..SourceConfig::new("paypal", "paypal", vec![secret("live", WEBHOOK_ID)])
        })
        .gateway_source(SourceConfig {
            paypal: Some(PayPalOptions { allow_crc_only: true, ..PayPalOptions::default() }),
            ..SourceConfig::new("paypal-crc", "paypal", vec![secret("live", WEBHOOK_ID)])
        })
        .gateway_source(SourceConfig {
            allow_token: true,
            public_url: Some(PUSH_URL.to_owned()),
            ..SourceConfig::new("pubsub", "google_pubsub", vec![secret("push", PUSH_ACCOUNT)])
        })
        .build()
        .await
}

fn rfc3339(offset_s: i64) -> String {
    hookline_common::time::format_rfc3339_millis(hookline_common::wire::now_ms() + offset_s * 1000)
}

/// PayPal's form: whole seconds.
fn rfc3339_seconds(offset_s: i64) -> String {
    hookline_common::time::format_rfc3339_seconds(hookline_common::wire::now_ms() + offset_s * 1000)
}

/// An SNS message of `kind` (`Notification` or `SubscriptionConfirmation`), signed with `key` as `version`
/// documents it: the type's fields, `name\nvalue\n` each, in order.
fn sns_message(key: &RsaKey, version: &str, certificate: &str, fields: &[(&str, &str)]) -> String {
    let value = |name: &str| fields.iter().find(|(field, _)| *field == name).map(|(_, value)| *value);
    let order: &[&str] = match value("Type") {
        Some("Notification") => &["Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type"],
        _ => &["Message", "MessageId", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type"],
    };
    let signed: String =
        order.iter().filter_map(|name| value(name).map(|value| format!("{name}\n{value}\n"))).collect();
    let digest = if version == "1" { "sha1" } else { "sha256" };
    let signature = base64::engine::general_purpose::STANDARD.encode(key.sign(digest, signed.as_bytes()));
    let mut body = serde_json::Map::new();
    for (name, value) in fields {
        body.insert((*name).to_owned(), serde_json::Value::from(*value));
    }
    body.insert("SignatureVersion".to_owned(), version.into());
    body.insert("Signature".to_owned(), signature.into());
    body.insert("SigningCertURL".to_owned(), certificate.into());
    body.insert(
        "MessageAttributes".to_owned(),
        serde_json::json!({ "store": { "Type": "String", "Value": "unsigned, still stored" } }),
    );
    serde_json::Value::Object(body).to_string()
}

fn certificate_url(name: &str) -> String {
    format!("https://{SNS_HOST}/SimpleNotificationService-{name}.pem")
}

fn notification(key: &RsaKey, version: &str, certificate: &str, message_id: &str, timestamp: &str) -> String {
    sns_message(
        key,
        version,
        certificate,
        &[
            ("Type", "Notification"),
            ("MessageId", message_id),
            ("TopicArn", TOPIC_ARN),
            ("Subject", "order"),
            ("Message", r#"{"order":"o-1","total":"12.30"}"#),
            ("Timestamp", timestamp),
        ],
    )
}

async fn post(stack: &TestStack, source: &str, headers: &[(&str, &str)], body: &str) -> Reply {
    let mut request = Request::post(format!("http://{}/webhooks/{source}", stack.gateway_addr));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    stack.send(request.body(Full::new(Bytes::from(body.to_owned()))).expect("request")).await
}

async fn post_sns(stack: &TestStack, body: &str) -> Reply {
    post(stack, "sns", &[("Content-Type", "text/plain; charset=UTF-8"), ("x-amz-sns-message-type", "x")], body).await
}

fn refused(reply: &Reply) -> (StatusCode, Option<String>) {
    (reply.status, reply.error_code())
}

fn unauthorized(code: &str) -> (StatusCode, Option<String>) {
    (StatusCode::UNAUTHORIZED, Some(code.to_owned()))
}

#[tokio::test]
async fn sns_messages_verify_with_a_fetched_certificate_and_every_forgery_is_refused() {
    let keys = keys().await;
    let stack = stack(&keys).await;
    let good = certificate_url("good");

    // Signature versions 2 (SHA256withRSA) and 1 (SHA1withRSA), each stored byte for byte.
    let v2 = notification(&keys.signer, "2", &good, "m-v2", &rfc3339(0));
    let reply = post_sns(&stack, &v2).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
    let v1 = notification(&keys.signer, "1", &good, "m-v1", &rfc3339(0));
    assert_eq!(post_sns(&stack, &v1).await.status, StatusCode::ACCEPTED);
    let records = stack.inbound_records().await;
    let mut bodies: Vec<&[u8]> = records.iter().filter_map(|record| record.payload()).collect();
    bodies.sort();
    let mut sent = [v2.as_bytes(), v1.as_bytes()];
    sent.sort();
    assert!(bodies == sent, "the raw bodies, byte for byte");
    assert_eq!(keys.server.requests_for("/SimpleNotificationService-good.pem"), 1, "fetched once, then cached");

    let tampered = v2.replace("12.30", "99.99");
    assert_eq!(refused(&post_sns(&stack, &tampered).await), unauthorized("signature_mismatch"));
    let stranger = notification(&keys.stranger, "2", &good, "m-stranger", &rfc3339(0));
    assert_eq!(refused(&post_sns(&stack, &stranger).await), unauthorized("signature_mismatch"), "a wrong key");
    let other_topic = notification(&keys.signer, "2", &good, "m-topic", &rfc3339(0)).replace(TOPIC_ARN, "x");
    assert_eq!(refused(&post_sns(&stack, &other_topic).await), unauthorized("signature_mismatch"));

    // Refused before anything is fetched: a stale timestamp, an unpinned certificate URL.
    let stale = notification(&keys.signer, "2", &certificate_url("unserved"), "m-stale", &rfc3339(-7_200));
    assert_eq!(refused(&post_sns(&stack, &stale).await), unauthorized("timestamp_stale"));
    for unpinned in [
        "http://sns.us-east-1.amazonaws.com/SimpleNotificationService-good.pem".to_owned(),
        format!("https://{SNS_HOST}.evil.example/SimpleNotificationService-good.pem"),
        format!("https://{PAYPAL_HOST}/SimpleNotificationService-good.pem"),
        format!("https://{SNS_HOST}/keys/SimpleNotificationService-good.pem"),
    ] {
        let message = notification(&keys.signer, "2", &unpinned, "m-unpinned", &rfc3339(0));
        assert_eq!(refused(&post_sns(&stack, &message).await), unauthorized("key_url_not_pinned"), "{unpinned}");
    }
    assert!(keys.server.requests().iter().all(|target| !target.contains("unserved") && !target.starts_with("/keys")));

    // Certificates the gateway must not believe, though served by the pinned host.
    let expired = notification(&keys.signer, "2", &certificate_url("expired"), "m-expired", &rfc3339(0));
    assert_eq!(refused(&post_sns(&stack, &expired).await), unauthorized("certificate_untrusted"));
    let foreign = notification(&keys.signer, "2", &certificate_url("foreign"), "m-foreign", &rfc3339(0));
    assert_eq!(refused(&post_sns(&stack, &foreign).await), unauthorized("certificate_untrusted"));
    let elsewhere = notification(&keys.signer, "2", &certificate_url("elsewhere"), "m-elsewhere", &rfc3339(0));
    assert_eq!(refused(&post_sns(&stack, &elsewhere).await), unauthorized("certificate_untrusted"), "not SNS's name");

    // The subscription confirmation: verified, confirmed at its pinned SubscribeURL, answered 200, not produced.
    let subscribe = format!("https://{SNS_HOST}/?Action=ConfirmSubscription&TopicArn={TOPIC_ARN}&Token=tok-1");
    let confirmation = |key: &RsaKey, url: &str| {
        sns_message(
            key,
            "2",
            &good,
            &[
                ("Type", "SubscriptionConfirmation"),
                ("MessageId", "m-subscribe"),
                ("Token", "tok-1"),
                ("TopicArn", TOPIC_ARN),
                ("Message", "You have chosen to subscribe to the topic."),
                ("SubscribeURL", url),
                ("Timestamp", &rfc3339(0)),
            ],
        )
    };
    let forged = confirmation(&keys.stranger, &subscribe);
    assert_eq!(refused(&post_sns(&stack, &forged).await), unauthorized("signature_mismatch"));
    let elsewhere = confirmation(&keys.signer, "https://evil.example/?Action=ConfirmSubscription&Token=tok-1");
    assert_eq!(refused(&post_sns(&stack, &elsewhere).await), unauthorized("key_url_not_pinned"));
    assert_eq!(keys.server.requests_for("/?Action=ConfirmSubscription"), 0, "a refused handshake visits nothing");
    let captured = confirmation(&keys.signer, &subscribe);
    let reply = post_sns(&stack, &captured).await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    assert_eq!(keys.server.requests_for("/?Action=ConfirmSubscription&TopicArn="), 1, "the SubscribeURL was visited");
    // P18: 100 concurrent replays of the captured confirmation visit it no more (each answered 200, or 503 past
    // the source's verification budget).
    let replays = futures_util::future::join_all((0..100).map(|_| post_sns(&stack, &captured))).await;
    assert!(
        replays.iter().all(|reply| reply.status == StatusCode::OK || reply.status == StatusCode::SERVICE_UNAVAILABLE)
    );
    assert!(replays.iter().any(|reply| reply.status == StatusCode::OK), "a replay is answered as the capture was");
    assert_eq!(keys.server.requests_for("/?Action=ConfirmSubscription&TopicArn="), 1, "visited once for 101 requests");
    assert_eq!(stack.inbound_records().await.len(), 2, "neither refusals nor the handshake were produced");
    let n_answered = 1 + replays.iter().filter(|reply| reply.status == StatusCode::OK).count();
    assert_eq!(
        stack.gateway_metric("hookline_gateway_requests_total", &[("outcome", "handshake")]).await,
        n_answered as f64
    );

    // The cache holds at most cache_max_entries (4): six certificates later, the first is fetched again.
    for n in 0..6 {
        let message = notification(&keys.signer, "2", &certificate_url(&format!("many{n}")), "m-many", &rfc3339(0));
        assert_eq!(post_sns(&stack, &message).await.status, StatusCode::ACCEPTED);
    }
    assert!(stack.gateway_metric("hookline_gateway_key_cache_entries", &[]).await <= 4.0);
    let again = notification(&keys.signer, "2", &certificate_url("many0"), "m-many", &rfc3339(0));
    assert_eq!(post_sns(&stack, &again).await.status, StatusCode::ACCEPTED);
    assert_eq!(keys.server.requests_for("/SimpleNotificationService-many0.pem"), 2, "evicted, then fetched again");
    stack.shutdown().await;
}

#[tokio::test]
async fn a_key_host_that_hangs_or_answers_10_mb_costs_a_503_and_other_sources_keep_answering() {
    let keys = keys().await;
    let stack = Arc::new(stack(&keys).await);

    let hanging = notification(&keys.signer, "2", &certificate_url("hang"), "m-hang", &rfc3339(0));
    let waiting = {
        let stack = stack.clone();
        tokio::spawn(async move { post_sns(&stack, &hanging).await })
    };
    // While the SNS request waits on the hanging host, the github source answers at once.
    while keys.server.requests_for("/SimpleNotificationService-hang.pem") == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for n in 0..5 {
        let started = std::time::Instant::now();
        stack.post_accepted(&Delivery::new(format!(r#"{{"zen":"meanwhile {n}"}}"#))).await;
        assert!(started.elapsed() < Duration::from_millis(900), "another source is not held up by the key host");
    }
    let reply = waiting.await.expect("request task");
    assert_eq!(refused(&reply), (StatusCode::SERVICE_UNAVAILABLE, Some("key_unavailable".to_owned())));
    assert_eq!(reply.headers.get("retry-after").map(|value| value.as_bytes()), Some(&b"1"[..]));

    // Within failure_hold_s the failure is remembered: 503 at once, no second fetch.
    let again = notification(&keys.signer, "2", &certificate_url("hang"), "m-hang-2", &rfc3339(0));
    let started = std::time::Instant::now();
    assert_eq!(post_sns(&stack, &again).await.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(started.elapsed() < Duration::from_millis(500));
    assert_eq!(keys.server.requests_for("/SimpleNotificationService-hang.pem"), 1);

    let huge = notification(&keys.signer, "2", &certificate_url("huge"), "m-huge", &rfc3339(0));
    let reply = post_sns(&stack, &huge).await;
    assert_eq!(refused(&reply), (StatusCode::SERVICE_UNAVAILABLE, Some("key_unavailable".to_owned())));
    assert_eq!(stack.gateway_metric("hookline_gateway_key_fetches_total", &[("outcome", "timeout")]).await, 1.0);
    assert_eq!(stack.gateway_metric("hookline_gateway_key_fetches_total", &[("outcome", "too_large")]).await, 1.0);

    stack.post_accepted(&Delivery::new(r#"{"zen":"afterwards"}"#)).await;
    assert_eq!(stack.inbound_records().await.len(), 6, "only the github deliveries were produced");
    Arc::into_inner(stack).expect("the only reference").shutdown().await;
}

fn paypal_headers(key: &RsaKey, certificate: &str, time: &str, webhook_id: &str, body: &str) -> Vec<(String, String)> {
    let transmission_id = uuid::Uuid::new_v4().to_string();
    let signed = format!("{transmission_id}|{time}|{webhook_id}|{}", crc32(body.as_bytes()));
    let signature = base64::engine::general_purpose::STANDARD.encode(key.sign("sha256", signed.as_bytes()));
    vec![
        ("PAYPAL-TRANSMISSION-ID".to_owned(), transmission_id),
        ("PAYPAL-TRANSMISSION-TIME".to_owned(), time.to_owned()),
        ("PAYPAL-TRANSMISSION-SIG".to_owned(), signature),
        ("PAYPAL-CERT-URL".to_owned(), certificate.to_owned()),
        ("PAYPAL-AUTH-ALGO".to_owned(), "SHA256withRSA".to_owned()),
        ("Content-Type".to_owned(), "application/json".to_owned()),
    ]
}

async fn post_paypal(stack: &TestStack, headers: &[(String, String)], body: &str) -> Reply {
    post_paypal_to(stack, "paypal", headers, body).await
}

async fn post_paypal_to(stack: &TestStack, source: &str, headers: &[(String, String)], body: &str) -> Reply {
    let headers: Vec<(&str, &str)> = headers.iter().map(|(name, value)| (name.as_str(), value.as_str())).collect();
    post(stack, source, &headers, body).await
}

/// A body `template(pad)` (the pad 48 characters, each `A` or `C`) whose CRC32 is `target`: CRC32 is affine over
/// GF(2) for inputs of one length, so the pad bits that solve a 32-bit linear system give any CRC. The review's
/// `crc_forge.py`, in Rust.
fn crc_forged(target: u32, template: impl Fn(&str) -> String) -> String {
    const N: usize = 48;
    let body = |bits: u64| template(&(0..N).map(|i| if (bits >> i) & 1 == 1 { 'C' } else { 'A' }).collect::<String>());
    let base = crc32(body(0).as_bytes());
    let mut basis: [Option<(u32, u64)>; 32] = [None; 32];
    for i in 0..N {
        let (mut value, mut mask) = (crc32(body(1 << i).as_bytes()) ^ base, 1u64 << i);
        for bit in (0..32).rev() {
            if (value >> bit) & 1 == 0 {
                continue;
            }
            match basis[bit] {
                Some((row, row_mask)) => (value, mask) = (value ^ row, mask ^ row_mask),
                None => {
                    basis[bit] = Some((value, mask));
                    break;
                }
            }
        }
    }
    let (mut value, mut mask) = (base ^ target, 0u64);
    for bit in (0..32).rev() {
        if (value >> bit) & 1 == 1 {
            let (row, row_mask) = basis[bit].expect("rank 32 (else: more pad positions)");
            (value, mask) = (value ^ row, mask ^ row_mask);
        }
    }
    assert_eq!(value, 0);
    let forged = body(mask);
    assert_eq!(crc32(forged.as_bytes()), target, "the same CRC32");
    forged
}

fn event_id_of(record: &rdkafka::message::OwnedMessage) -> String {
    hookline_tests::read::inbound(record).meta.event_id
}

#[tokio::test]
async fn a_captured_paypal_delivery_mints_no_event_with_a_forged_body_of_the_same_crc_and_retries_stay_one_event() {
    let keys = keys().await;
    let stack = stack(&keys).await;
    let certificate = format!("https://{PAYPAL_HOST}/v1/notifications/certs/CERT-good");
    let captured = paypal_headers(&keys.signer, &certificate, &rfc3339_seconds(0), WEBHOOK_ID, PAYPAL_ORIGINAL);
    let reply = post_paypal(&stack, &captured, PAYPAL_ORIGINAL).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);

    // A new id and amount, padded to the captured body's CRC32, under the captured PAYPAL-* headers: PayPal's API
    // knows no such event.
    let target = crc32(PAYPAL_ORIGINAL.as_bytes());
    let forged = crc_forged(target, |pad| {
        format!(
            r#"{{"id":"WH-FORGED-42","event_type":"PAYMENT.CAPTURE.COMPLETED","resource":{{"amount":{{"value":"9999.00","currency_code":"USD"}}}},"pad":"{pad}"}}"#
        )
    });
    assert_eq!(refused(&post_paypal(&stack, &captured, &forged).await), unauthorized("not_confirmed"));
    // The original's id with another amount: PayPal holds that event with other contents.
    let same_id = crc_forged(target, |pad| {
        format!(
            r#"{{"id":"WH-ORIGINAL-1","event_type":"PAYMENT.CAPTURE.COMPLETED","resource":{{"amount":{{"value":"9999.00","currency_code":"USD"}},"note":"{pad}"}}}}"#
        )
    });
    assert_eq!(refused(&post_paypal(&stack, &captured, &same_id).await), unauthorized("not_confirmed"));

    // PayPal's retry of the genuine delivery: another transmission (id, time, signature), the same event.
    let retry = paypal_headers(&keys.signer, &certificate, &rfc3339_seconds(0), WEBHOOK_ID, PAYPAL_ORIGINAL);
    assert_ne!(retry[0].1, captured[0].1, "another transmission id");
    assert_eq!(post_paypal(&stack, &retry, PAYPAL_ORIGINAL).await.status, StatusCode::ACCEPTED);
    let records = stack.inbound_records().await;
    assert_eq!(records.len(), 2, "the delivery and its retry, nothing forged");
    assert!(records.iter().all(|record| record.payload() == Some(PAYPAL_ORIGINAL.as_bytes())));
    assert!(records.iter().all(|record| event_id_of(record) == "WH-ORIGINAL-1"), "one event id: deduped downstream");
    assert_eq!(keys.server.requests_for("/v1/oauth2/token"), 1, "one OAuth token, then reused");
    assert_eq!(keys.server.requests_for("/v1/notifications/webhooks-events/WH-FORGED-42"), 1);

    // The opt-in to the CRC32 alone (`allow_crc_only`) is what it says: the forgery becomes an event there.
    let reply = post_paypal_to(&stack, "paypal-crc", &captured, &forged).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
    stack.shutdown().await;
}

#[tokio::test]
async fn paypal_verifies_with_its_fetched_certificate_and_refuses_tampered_wrong_and_stale_requests() {
    let keys = keys().await;
    let stack = stack(&keys).await;
    let certificate = format!("https://{PAYPAL_HOST}/v1/notifications/certs/CERT-good");
    let body = PAYPAL_EVENT;

    let headers = paypal_headers(&keys.signer, &certificate, &rfc3339_seconds(0), WEBHOOK_ID, body);
    let reply = post_paypal(&stack, &headers, body).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
    let records = stack.inbound_records().await;
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].payload(), Some(body.as_bytes()), "the raw body, byte for byte");

    let tampered = body.replace("12.30", "99.99");
    assert_eq!(refused(&post_paypal(&stack, &headers, &tampered).await), unauthorized("signature_mismatch"));
    let wrong_key = paypal_headers(&keys.stranger, &certificate, &rfc3339_seconds(0), WEBHOOK_ID, body);
    assert_eq!(refused(&post_paypal(&stack, &wrong_key, body).await), unauthorized("signature_mismatch"));
    let other_webhook =
        paypal_headers(&keys.signer, &certificate, &rfc3339_seconds(0), "8PT597110X687430LKGECATA", body);
    assert_eq!(refused(&post_paypal(&stack, &other_webhook, body).await), unauthorized("signature_mismatch"));
    let stale = paypal_headers(&keys.signer, &certificate, &rfc3339_seconds(-900), WEBHOOK_ID, body);
    assert_eq!(refused(&post_paypal(&stack, &stale, body).await), unauthorized("timestamp_stale"));
    let unpinned = paypal_headers(
        &keys.signer,
        "https://paypal.evil.example/v1/notifications/certs/CERT-good",
        &rfc3339_seconds(0),
        WEBHOOK_ID,
        body,
    );
    assert_eq!(refused(&post_paypal(&stack, &unpinned, body).await), unauthorized("key_url_not_pinned"));
    let elsewhere = paypal_headers(
        &keys.signer,
        &format!("https://{PAYPAL_HOST}/v1/notifications/certs/CERT-elsewhere"),
        &rfc3339_seconds(0),
        WEBHOOK_ID,
        body,
    );
    assert_eq!(refused(&post_paypal(&stack, &elsewhere, body).await), unauthorized("certificate_untrusted"));
    let mut missing = headers.clone();
    missing.retain(|(name, _)| name != "PAYPAL-TRANSMISSION-SIG");
    assert_eq!(refused(&post_paypal(&stack, &missing, body).await), unauthorized("signature_missing"));
    assert_eq!(keys.server.requests_for("/v1/notifications/certs/CERT-good"), 1, "fetched once, then cached");
    assert_eq!(stack.inbound_records().await.len(), 1, "nothing refused was produced");
    stack.shutdown().await;
}

/// A Google-style OIDC token: RS256 over `header.claims`, base64url without padding.
fn oidc_token(key: &RsaKey, kid: &str, claims: serde_json::Value) -> String {
    let base64url = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    let header = base64url(serde_json::json!({ "alg": "RS256", "kid": kid, "typ": "JWT" }).to_string().as_bytes());
    let claims = base64url(claims.to_string().as_bytes());
    let signature = base64url(&key.sign("sha256", format!("{header}.{claims}").as_bytes()));
    format!("{header}.{claims}.{signature}")
}

fn push_claims(audience: &str, email: &str, issued_s_ago: i64) -> serde_json::Value {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs() as i64;
    serde_json::json!({
        "iss": "https://accounts.google.com", "aud": audience, "azp": "1147", "sub": "1147",
        "email": email, "email_verified": true,
        "iat": now - issued_s_ago, "exp": now - issued_s_ago + 3600,
    })
}

#[tokio::test]
async fn google_pubsub_push_tokens_verify_with_googles_fetched_key_set_and_forged_ones_are_refused() {
    let keys = keys().await;
    let stack = stack(&keys).await;
    let body = r#"{"message":{"attributes":{"kind":"order"},"data":"eyJvcmRlciI6Im8tMSJ9","messageId":"2070443601311540","publishTime":"2026-12-06T19:00:00.000Z"},"subscription":"projects/orders-project/subscriptions/push"}"#;
    let push = |token: String| {
        let authorization = format!("Bearer {token}");
        let stack = &stack;
        async move {
            post(stack, "pubsub", &[("Content-Type", "application/json"), ("Authorization", &authorization)], body)
                .await
        }
    };

    let reply = push(oidc_token(&keys.signer, "k-1", push_claims(PUSH_URL, PUSH_ACCOUNT, 5))).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
    let records = stack.inbound_records().await;
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].payload(), Some(body.as_bytes()), "the raw body, byte for byte");

    let mismatch = unauthorized("signature_mismatch");
    let forged = oidc_token(&keys.stranger, "k-1", push_claims(PUSH_URL, PUSH_ACCOUNT, 5));
    assert_eq!(refused(&push(forged).await), mismatch, "signed by another key than its kid's");
    let other_audience =
        oidc_token(&keys.signer, "k-1", push_claims("https://elsewhere.example/push", PUSH_ACCOUNT, 5));
    assert_eq!(refused(&push(other_audience).await), mismatch);
    let other_account =
        oidc_token(&keys.signer, "k-1", push_claims(PUSH_URL, "someone@else.iam.gserviceaccount.com", 5));
    assert_eq!(refused(&push(other_account).await), mismatch);
    let expired = oidc_token(&keys.signer, "k-1", push_claims(PUSH_URL, PUSH_ACCOUNT, 7_200));
    assert_eq!(refused(&push(expired).await), unauthorized("timestamp_stale"));
    let mut tampered = oidc_token(&keys.signer, "k-1", push_claims(PUSH_URL, PUSH_ACCOUNT, 5));
    tampered.insert_str(tampered.find('.').expect("a dot") + 1, "e30");
    assert!(matches!(push(tampered).await.status, StatusCode::UNAUTHORIZED | StatusCode::BAD_REQUEST));
    let reply = post(&stack, "pubsub", &[("Content-Type", "application/json")], body).await;
    assert_eq!(refused(&reply), unauthorized("signature_missing"));
    assert_eq!(keys.server.requests_for("/oauth2/v3/certs"), 1, "Google's key set fetched once, then cached");
    assert_eq!(stack.inbound_records().await.len(), 1, "nothing refused was produced");
    stack.shutdown().await;
}
