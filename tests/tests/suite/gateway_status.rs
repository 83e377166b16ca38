//! Every status path of the gateway against the real broker: what real providers send is acknowledged only once
//! Kafka has it, each kind of bad request gets its own 4xx with a stable JSON code and changes nothing, our own
//! trouble is a 503 with `Retry-After`, and provider handshakes are answered without producing anything.

use hookline_common::time::{Precision, Rfc3339};
use std::{
    collections::HashMap,
    net::SocketAddr,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use bytes::Bytes;
use hookline_common::{
    config::SecretRef,
    kafka::{TopicSpec, ensure_topics, read_topic},
};
use hookline_gateway::config::{Limits, SourceConfig};
use hookline_signature::{slack, standard_webhooks, stripe, twilio, twitch, zoom};
use hookline_tests::{Reply, TestStack, read};
use http::{Request, StatusCode};
use http_body_util::Full;
use rdkafka::{Message, message::OwnedMessage};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

const STRIPE_SECRET: &str = "whsec_integration_stripe";
const SLACK_SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
const SVIX_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const TWILIO_TOKEN: &str = "12345";
const TWILIO_URL: &str = "https://hooks.example.test/twilio";
const ZOOM_SECRET: &str = "zoom-secret-token";
const TWITCH_SECRET: &str = "twitch-secret-0123456789";

fn now_s() -> i64 {
    i64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_secs()).expect("time")
}

/// Writes a secret to its own file (the gateway never takes secrets inline) and returns a reference to it.
fn secret(id: &str, value: &str) -> SecretRef {
    let path = std::env::temp_dir().join(format!("hookline-gw-test-{}.secret", uuid::Uuid::new_v4().simple()));
    std::fs::write(&path, value).expect("write secret");
    SecretRef::from_file(id, path.display().to_string())
}

/// A source as these tests have always used it: a type from an unsigned header where the scheme has one.
fn source(name: &str, scheme: &str, secrets: Vec<SecretRef>) -> SourceConfig {
    SourceConfig { type_from_header: Some(true), ..SourceConfig::new(name, scheme, secrets) }
}

async fn stack_with_providers(stripe_topic: &str) -> TestStack {
    TestStack::builder()
        .gateway_source(SourceConfig {
            topic: Some(stripe_topic.to_owned()),
            forward_headers: vec!["User-Agent".to_owned(), "Content-Type".to_owned()],
            ..source("stripe", "stripe", vec![secret("2026-06", "whsec_retired"), secret("2026-12", STRIPE_SECRET)])
        })
        .gateway_source(source("slack", "slack", vec![secret("signing", SLACK_SECRET)]))
        .gateway_source(source("svix", "svix", vec![secret("svix", SVIX_SECRET)]))
        .gateway_source(SourceConfig {
            public_url: Some(TWILIO_URL.to_owned()),
            ..source("twilio", "twilio", vec![secret("auth-token", TWILIO_TOKEN)])
        })
        .gateway_source(source("zoom", "zoom", vec![secret("zoom", ZOOM_SECRET)]))
        .gateway_source(source("twitch", "twitch", vec![secret("twitch", TWITCH_SECRET)]))
        .gateway_source(SourceConfig {
            event_id: Some(hookline_signature::FieldSource::header("X-Request-Id")),
            ..source("internal", "none", vec![])
        })
        .build()
        .await
}

async fn post_stripe(stack: &TestStack, signature: String, body: &'static [u8]) -> Reply {
    post(stack, "/webhooks/stripe", &[("Stripe-Signature", &signature)], body).await
}

async fn post(stack: &TestStack, path: &str, headers: &[(&str, &str)], body: impl Into<Bytes>) -> Reply {
    let mut request = Request::post(format!("http://{}{path}", stack.gateway_addr));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    stack.send(request.body(Full::new(body.into())).expect("request")).await
}

/// The provider headers a record carries (its source's `forward_headers`), as (lowercase name, value), sorted.
fn forwarded(record: &OwnedMessage) -> Vec<(String, String)> {
    let mut headers: Vec<(String, String)> = read::inbound(record)
        .forwarded_headers
        .into_iter()
        .map(|(name, value)| (name, String::from_utf8_lossy(&value).into_owned()))
        .collect();
    headers.sort();
    headers
}

async fn create_topic(name: &str) {
    let topics = [TopicSpec { name: name.to_owned(), partitions: 1, compacted: false }];
    ensure_topics(&hookline_tests::plaintext_kafka(), &topics, 1).await.expect("create topic");
}

async fn records_of(topic: &str) -> Vec<OwnedMessage> {
    let topic = topic.to_owned();
    tokio::task::spawn_blocking(move || read_topic(&hookline_tests::plaintext_kafka(), &topic, Duration::from_secs(20)))
        .await
        .expect("reader")
        .expect("read topic")
}

#[tokio::test]
async fn real_provider_requests_are_acknowledged_only_once_stored_verbatim() {
    let stripe_topic = format!("test-{}-stripe", uuid::Uuid::new_v4().simple());
    create_topic(&stripe_topic).await;
    let stack = stack_with_providers(&stripe_topic).await;
    let now = now_s();

    // Stripe, on its own topic, verified by the second of two secrets, two headers forwarded.
    let stripe_body = br#"{"id":"evt_integration_1","type":"invoice.paid","data":{}}"#;
    let stripe_signature = stripe::sign(STRIPE_SECRET.as_bytes(), stripe_body, now);
    let reply = post(
        &stack,
        "/webhooks/stripe",
        &[("Stripe-Signature", &stripe_signature), ("User-Agent", "Stripe/1.0"), ("Content-Type", "application/json")],
        &stripe_body[..],
    )
    .await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);

    // Slack, Svix (Standard Webhooks family) and Twilio (form parameters under the public URL).
    let slack_body = br#"{"type":"event_callback","event_id":"Ev-integration","event":{"type":"app_mention"}}"#;
    let t = now.to_string();
    let slack_signature = slack::sign(SLACK_SECRET.as_bytes(), slack_body, now);
    let reply = post(
        &stack,
        "/webhooks/slack",
        &[("X-Slack-Signature", &slack_signature), ("X-Slack-Request-Timestamp", &t)],
        &slack_body[..],
    )
    .await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);

    let svix_body = br#"{"type":"user.created","data":{"id":"user_1"}}"#;
    let key = standard_webhooks::decode_secret(SVIX_SECRET.as_bytes()).expect("key");
    let svix_signature = standard_webhooks::sign(&key, "msg_integration_1", now, svix_body);
    let reply = post(
        &stack,
        "/webhooks/svix",
        &[("svix-id", "msg_integration_1"), ("svix-timestamp", &t), ("svix-signature", &svix_signature)],
        &svix_body[..],
    )
    .await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);

    let twilio_body = b"MessageSid=SM1&From=%2B15550001111&Body=hello+there";
    let twilio_url = format!("{TWILIO_URL}?tenant=7");
    let twilio_signature = twilio::sign(TWILIO_TOKEN.as_bytes(), &twilio_url, twilio_body);
    let reply = post(
        &stack,
        "/webhooks/twilio?tenant=7",
        &[
            ("X-Twilio-Signature", &twilio_signature),
            ("Content-Type", "application/x-www-form-urlencoded"),
            ("I-Twilio-Idempotency-Token", "idem-twilio-1"),
        ],
        &twilio_body[..],
    )
    .await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);

    let reply = post(&stack, "/webhooks/internal", &[("X-Request-Id", "internal-1")], &b"{}"[..]).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "an explicit scheme = \"none\" source: {:?}", reply.body);

    // 202 means the broker has it: read back at once, byte for byte, with the right headers.
    let stripe_records = records_of(&stripe_topic).await;
    assert_eq!(stripe_records.len(), 1);
    let record = &stripe_records[0];
    assert_eq!(record.payload(), Some(&stripe_body[..]));
    assert_eq!(record.key(), Some(&b"evt_integration_1"[..]));
    let meta = read::inbound(record).meta;
    assert_eq!(meta.event_type.as_deref(), Some("invoice.paid"));
    assert_eq!(meta.secret_id, "2026-12", "the secret that matched");
    let expected = [("content-type", "application/json"), ("user-agent", "Stripe/1.0")];
    assert_eq!(forwarded(record), expected.map(|(name, value)| (name.to_owned(), value.to_owned())));

    let inbound: HashMap<String, OwnedMessage> =
        stack.inbound_records().await.into_iter().map(|record| (read::inbound(&record).meta.source, record)).collect();
    assert_eq!(inbound.len(), 4, "slack, svix, twilio, internal: {:?}", inbound.keys());
    assert_eq!(inbound["slack"].key(), Some(&b"Ev-integration"[..]));
    assert_eq!(read::inbound(&inbound["slack"]).meta.event_type.as_deref(), Some("app_mention"));
    assert_eq!(inbound["svix"].key(), Some(&b"msg_integration_1"[..]));
    assert_eq!(inbound["svix"].payload(), Some(&svix_body[..]));
    // Twilio's idempotency token is not signed: the dedupe id is the body's digest, the token kept as metadata.
    let twilio_event_id = hookline_tests::body_event_id(&twilio_body[..]);
    assert_eq!(inbound["twilio"].key(), Some(twilio_event_id.as_bytes()));
    assert_eq!(read::inbound(&inbound["twilio"]).provider_event_id.as_deref(), Some("idem-twilio-1"));
    assert_eq!(inbound["twilio"].payload(), Some(&twilio_body[..]));
    assert_eq!(read::inbound(&inbound["internal"]).meta.secret_id, "none");
    assert!(
        !forwarded(&inbound["slack"]).iter().any(|(name, _)| name == "user-agent"),
        "only allowlisted headers are carried"
    );
    stack.shutdown().await;
}

#[tokio::test]
async fn each_bad_request_gets_its_own_status_and_code_and_changes_nothing() {
    let stripe_topic = format!("test-{}-stripe", uuid::Uuid::new_v4().simple());
    create_topic(&stripe_topic).await;
    let stack = stack_with_providers(&stripe_topic).await;
    let now = now_s();
    let body = br#"{"id":"evt_bad","type":"x"}"#;
    let stripe = |signature: String| post_stripe(&stack, signature, &body[..]);

    let cases: Vec<(Reply, StatusCode, &str)> = vec![
        (stripe("t=1,v1=zz".to_owned()).await, StatusCode::BAD_REQUEST, "signature_malformed"),
        (stripe(stripe::sign(b"whsec_wrong", body, now)).await, StatusCode::UNAUTHORIZED, "signature_mismatch"),
        (
            stripe(stripe::sign(STRIPE_SECRET.as_bytes(), body, now - 330)).await,
            StatusCode::UNAUTHORIZED,
            "timestamp_stale",
        ),
        (
            stripe(stripe::sign(STRIPE_SECRET.as_bytes(), body, now + 330)).await,
            StatusCode::UNAUTHORIZED,
            "timestamp_future",
        ),
        (
            stripe(stripe::sign(STRIPE_SECRET.as_bytes(), br#"{"type":"no id"}"#, now)).await,
            StatusCode::UNAUTHORIZED,
            "signature_mismatch",
        ),
        (post(&stack, "/webhooks/stripe", &[], &body[..]).await, StatusCode::UNAUTHORIZED, "signature_missing"),
        (post(&stack, "/webhooks/nope", &[], &body[..]).await, StatusCode::NOT_FOUND, "unknown_source"),
        (post(&stack, "/elsewhere", &[], &body[..]).await, StatusCode::NOT_FOUND, "not_found"),
        (
            post(
                &stack,
                "/webhooks/twilio",
                &[("X-Twilio-Signature", "RSOYDt4T1cUTdK1PDd93/VVr8B8="), ("Content-Type", "application/json")],
                &b"{}"[..],
            )
            .await,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "content_type_unsupported",
        ),
        (
            // Refused before it is parsed: a forged form costs what it sends, not a sort of 300 parameters.
            post(
                &stack,
                "/webhooks/twilio",
                &[
                    ("X-Twilio-Signature", "RSOYDt4T1cUTdK1PDd93/VVr8B8="),
                    ("Content-Type", "application/x-www-form-urlencoded"),
                ],
                (0..300).map(|n| format!("p{n}=v")).collect::<Vec<_>>().join("&").into_bytes(),
            )
            .await,
            StatusCode::PAYLOAD_TOO_LARGE,
            "form_too_large",
        ),
    ];
    for (reply, status, code) in &cases {
        assert_eq!((reply.status, reply.error_code().as_deref()), (*status, Some(*code)), "{:?}", reply.body);
        assert!(!reply.headers.contains_key(http::header::RETRY_AFTER), "4xx carry no Retry-After");
        let text = String::from_utf8_lossy(&reply.body);
        assert!(!text.contains(STRIPE_SECRET) && !text.contains("v1="), "no secret or signature in {text}");
    }

    // A verified request without an event id where the source expects one.
    let no_id = br#"{"type":"missing.id"}"#;
    let reply = post(
        &stack,
        "/webhooks/stripe",
        &[("Stripe-Signature", &stripe::sign(STRIPE_SECRET.as_bytes(), no_id, now))],
        &no_id[..],
    )
    .await;
    assert_eq!((reply.status, reply.error_code().as_deref()), (StatusCode::BAD_REQUEST, Some("event_id_missing")));

    let get =
        Request::get(format!("http://{}/webhooks/stripe", stack.gateway_addr)).body(Full::default()).expect("get");
    let reply = stack.send(get).await;
    assert_eq!(
        (reply.status, reply.error_code().as_deref()),
        (StatusCode::METHOD_NOT_ALLOWED, Some("method_not_allowed"))
    );
    assert_eq!(reply.headers.get(http::header::ALLOW).map(|v| v.as_bytes()), Some(&b"POST"[..]));

    // Over the 64 KiB limit of the `github` source: declared up front, and streamed without a length.
    let reply = post(&stack, "/webhooks/github", &[], vec![b'x'; 64 * 1024 + 1]).await;
    assert_eq!((reply.status, reply.error_code().as_deref()), (StatusCode::PAYLOAD_TOO_LARGE, Some("body_too_large")));
    let chunked = raw_chunked_post(stack.gateway_addr, "/webhooks/github", 70 * 1024).await;
    assert!(chunked.starts_with("HTTP/1.1 413"), "streamed body over the limit: {chunked}");

    // A request head over `limits.max_header_bytes` (64 KiB) is refused by the HTTP layer.
    let mut stream = TcpStream::connect(stack.gateway_addr).await.expect("connect");
    let huge = format!(
        "POST /webhooks/github HTTP/1.1\r\nHost: test\r\nX-Padding: {}\r\nContent-Length: 2\r\n\r\n{{}}",
        "p".repeat(80 * 1024)
    );
    let _ = stream.write_all(huge.as_bytes()).await;
    let answer = read_answer(&mut stream).await;
    assert!(answer.is_empty() || answer.starts_with("HTTP/1.1 431"), "oversized head: {answer}");

    assert!(records_of(&stripe_topic).await.is_empty(), "no rejected request reached Kafka");
    assert!(stack.inbound_records().await.is_empty(), "no rejected request reached Kafka");
    stack.shutdown().await;
}

/// Sends `total` bytes in 8 KiB chunks with `Transfer-Encoding: chunked` (no `Content-Length`) and returns what
/// the gateway answered.
async fn raw_chunked_post(addr: SocketAddr, path: &str, total: usize) -> String {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let head = format!("POST {path} HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
    stream.write_all(head.as_bytes()).await.expect("head");
    let chunk = vec![b'y'; 8 * 1024];
    let mut sent = 0;
    while sent < total {
        let frame = [format!("{:x}\r\n", chunk.len()).as_bytes(), &chunk, b"\r\n"].concat();
        if stream.write_all(&frame).await.is_err() {
            break; // The gateway may answer and close before we finish: that is the point.
        }
        sent += chunk.len();
    }
    let _ = stream.write_all(b"0\r\n\r\n").await;
    read_answer(&mut stream).await
}

async fn read_answer(stream: &mut TcpStream) -> String {
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test]
async fn http2_and_http1_keep_alive_are_served() {
    let stack = TestStack::builder().build().await;
    // HTTP/2 with prior knowledge (h2c), as a TLS-terminating proxy in front of the gateway would speak it.
    let stream = TcpStream::connect(stack.gateway_addr).await.expect("connect");
    let (mut sender, connection) = hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
        .handshake(hyper_util::rt::TokioIo::new(stream))
        .await
        .expect("h2 handshake");
    tokio::spawn(connection);
    for n in 0..2 {
        let delivery = hookline_tests::Delivery::new(format!(r#"{{"h2":{n}}}"#).into_bytes());
        let request = Request::post(format!("http://{}/webhooks/github", stack.gateway_addr))
            .header("x-github-delivery", &delivery.delivery_id)
            .header("x-hub-signature-256", delivery.signature(hookline_tests::TEST_SECRET))
            .body(Full::new(delivery.body.clone()))
            .expect("request");
        let response = sender.send_request(request).await.expect("h2 response");
        assert_eq!(response.version(), http::Version::HTTP_2);
        assert_eq!(response.status(), StatusCode::ACCEPTED, "request {n} on one HTTP/2 connection");
    }

    // HTTP/1.1: two requests on one kept-alive connection.
    let stream = TcpStream::connect(stack.gateway_addr).await.expect("connect");
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.expect("h1 handshake");
    tokio::spawn(connection);
    for n in 0..2 {
        let delivery = hookline_tests::Delivery::new(format!(r#"{{"h1":{n}}}"#).into_bytes());
        let request = Request::post("/webhooks/github")
            .header("host", "test")
            .header("x-github-delivery", &delivery.delivery_id)
            .header("x-hub-signature-256", delivery.signature(hookline_tests::TEST_SECRET))
            .body(Full::new(delivery.body.clone()))
            .expect("request");
        let response = sender.send_request(request).await.expect("h1 response");
        assert_eq!(response.status(), StatusCode::ACCEPTED, "request {n} on one kept-alive connection");
        http_body_util::BodyExt::collect(response.into_body()).await.expect("drain the body");
    }
    assert_eq!(stack.inbound_records().await.len(), 4);
    stack.shutdown().await;
}

#[tokio::test]
async fn a_body_that_does_not_arrive_in_time_is_408() {
    let stack = TestStack::builder().build().await; // body_read_timeout_ms = 2000
    let mut stream = TcpStream::connect(stack.gateway_addr).await.expect("connect");
    let head =
        "POST /webhooks/github HTTP/1.1\r\nHost: test\r\nContent-Length: 100\r\nConnection: close\r\n\r\n{\"half\":";
    stream.write_all(head.as_bytes()).await.expect("write");
    let answer = read_answer(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("body_timeout"), "{answer}");
    stack.shutdown().await;
}

#[tokio::test]
async fn the_request_deadline_bounds_a_slow_body_below_the_body_timeout() {
    let stack = TestStack::builder()
        .gateway_limits(Limits { body_read_timeout_ms: 30_000, request_deadline_ms: 1_000, ..Limits::default() })
        .build()
        .await;
    let started = std::time::Instant::now();
    let mut stream = TcpStream::connect(stack.gateway_addr).await.expect("connect");
    let head = "POST /webhooks/github HTTP/1.1\r\nHost: test\r\nContent-Length: 100\r\nConnection: close\r\n\r\n{";
    stream.write_all(head.as_bytes()).await.expect("write");
    let answer = read_answer(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(started.elapsed() < Duration::from_secs(5), "answered at the request deadline: {:?}", started.elapsed());
    stack.shutdown().await;
}

#[tokio::test]
async fn past_the_concurrency_limit_the_answer_is_503_at_once() {
    // No broker answers this gateway, so a verified request holds its permit while it waits to be acknowledged.
    // (A request whose body is still arriving holds none: see gateway_connections.rs.)
    let stack = TestStack::builder()
        .gateway_brokers("127.0.0.1:1")
        .produce_timeout_ms(5_000)
        .gateway_limits(Limits { max_in_flight: 1, ..Limits::default() })
        .build()
        .await;
    let stack = std::sync::Arc::new(stack);
    let holder = {
        let stack = stack.clone();
        tokio::spawn(async move { stack.post(&hookline_tests::Delivery::new(&b"{\"holds\":1}"[..])).await })
    };
    hookline_tests::eventually(Duration::from_secs(10), "the first request holds the only permit", || async {
        stack.gateway_metric("hookline_gateway_producer_queue_depth", &[]).await >= 1.0
    })
    .await;

    let started = std::time::Instant::now();
    let reply = stack.post(&hookline_tests::Delivery::new(&b"{\"second\":1}"[..])).await;
    assert_eq!((reply.status, reply.error_code().as_deref()), (StatusCode::SERVICE_UNAVAILABLE, Some("overloaded")));
    assert!(reply.headers.contains_key(http::header::RETRY_AFTER));
    assert!(started.elapsed() < Duration::from_secs(2), "refused at once, not queued");
    assert_eq!(holder.await.expect("holder").status, StatusCode::SERVICE_UNAVAILABLE, "never acknowledged");
}

#[tokio::test]
async fn handshakes_are_answered_after_verification_and_never_produced() {
    let stripe_topic = format!("test-{}-stripe", uuid::Uuid::new_v4().simple());
    create_topic(&stripe_topic).await;
    let stack = stack_with_providers(&stripe_topic).await;
    let now = now_s();
    let t = now.to_string();

    let slack_body = br#"{"token":"x","challenge":"slack-challenge-value","type":"url_verification"}"#;
    let signature = slack::sign(SLACK_SECRET.as_bytes(), slack_body, now);
    let reply = post(
        &stack,
        "/webhooks/slack",
        &[("X-Slack-Signature", &signature), ("X-Slack-Request-Timestamp", &t)],
        &slack_body[..],
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&reply.body).expect("json")["challenge"],
        "slack-challenge-value"
    );
    // The same handshake with a bad signature is refused: nothing is answered before verification.
    let forged = slack::sign(b"not the secret", slack_body, now);
    let reply = post(
        &stack,
        "/webhooks/slack",
        &[("X-Slack-Signature", &forged), ("X-Slack-Request-Timestamp", &t)],
        &slack_body[..],
    )
    .await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);

    let zoom_body = br#"{"payload":{"plainToken":"qgg8vlvZRS6UYooatFL8Aw"},"event_ts":1654503849680,"event":"endpoint.url_validation"}"#;
    let signature = zoom::sign(ZOOM_SECRET.as_bytes(), zoom_body, now);
    let reply = post(
        &stack,
        "/webhooks/zoom",
        &[("x-zm-signature", &signature), ("x-zm-request-timestamp", &t)],
        &zoom_body[..],
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    let answer: serde_json::Value = serde_json::from_slice(&reply.body).expect("json");
    assert_eq!(answer["plainToken"], "qgg8vlvZRS6UYooatFL8Aw");
    assert_eq!(answer["encryptedToken"].as_str().map(str::len), Some(64));

    let twitch_body = br#"{"challenge":"pogchamp-kappa-360noscope-vohiyo","subscription":{"type":"channel.follow"}}"#;
    let timestamp = Rfc3339::of_time(SystemTime::now(), Precision::Nanos).to_string();
    let signature = twitch::sign(TWITCH_SECRET.as_bytes(), "twitch-msg-1", &timestamp, twitch_body);
    let post_twitch = |message_type: &'static str| {
        let headers = [
            ("Twitch-Eventsub-Message-Id", "twitch-msg-1"),
            ("Twitch-Eventsub-Message-Timestamp", timestamp.as_str()),
            ("Twitch-Eventsub-Message-Signature", signature.as_str()),
            ("Twitch-Eventsub-Message-Type", message_type),
        ];
        let stack = &stack;
        async move { post(stack, "/webhooks/twitch", &headers, &twitch_body[..]).await }
    };
    let reply = post_twitch("webhook_callback_verification").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(&reply.body[..], b"pogchamp-kappa-360noscope-vohiyo");
    assert!(reply.headers.get(http::header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"text/plain")));
    // The same captured verification re-sent as a `notification` (the type header is unsigned): still a handshake,
    // decided on the signed body, so it is never produced as an event.
    let reply = post_twitch("notification").await;
    assert_eq!((reply.status, &reply.body[..]), (StatusCode::OK, &b"pogchamp-kappa-360noscope-vohiyo"[..]));

    assert!(stack.inbound_records().await.is_empty(), "handshakes are not events");
    let metrics = stack.gateway_scrape().await;
    let handshakes = metrics.value("hookline_gateway_requests_total", &[("source", "zoom"), ("outcome", "handshake")]);
    assert_eq!(handshakes, Some(1.0), "{metrics}");
    stack.shutdown().await;
}

/// A metric name, some of its labels, and the value expected.
type Expected = (&'static str, &'static [(&'static str, &'static str)], f64);

#[tokio::test]
async fn metrics_show_outcomes_failure_reasons_secret_ids_and_sizes() {
    let stripe_topic = format!("test-{}-stripe", uuid::Uuid::new_v4().simple());
    create_topic(&stripe_topic).await;
    let stack = stack_with_providers(&stripe_topic).await;
    let now = now_s();
    let body = br#"{"id":"evt_metrics","type":"x"}"#;
    let good = stripe::sign(STRIPE_SECRET.as_bytes(), body, now);
    let stale = stripe::sign(STRIPE_SECRET.as_bytes(), body, now - 1_000);
    assert_eq!(
        post(&stack, "/webhooks/stripe", &[("Stripe-Signature", &good)], &body[..]).await.status,
        StatusCode::ACCEPTED
    );
    assert_eq!(
        post(&stack, "/webhooks/stripe", &[("Stripe-Signature", &stale)], &body[..]).await.status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(post(&stack, "/webhooks/whatever", &[], &body[..]).await.status, StatusCode::NOT_FOUND);

    let metrics = stack.gateway_scrape().await;
    let expectations: [Expected; 8] = [
        ("hookline_gateway_requests_total", &[("source", "stripe"), ("outcome", "accepted")], 1.0),
        ("hookline_gateway_requests_total", &[("source", "stripe"), ("outcome", "timestamp_stale")], 1.0),
        ("hookline_gateway_requests_total", &[("source", "unknown"), ("outcome", "unknown_source")], 1.0),
        ("hookline_gateway_verification_failures_total", &[("source", "stripe"), ("reason", "timestamp_stale")], 1.0),
        ("hookline_gateway_verified_total", &[("source", "stripe"), ("secret_id", "2026-12")], 1.0),
        ("hookline_gateway_body_size_bytes_count", &[("source", "stripe")], 2.0),
        ("hookline_gateway_produce_duration_seconds_count", &[("outcome", "acked")], 1.0),
        ("hookline_gateway_in_flight_requests", &[], 0.0),
    ];
    for (name, labels, value) in expectations {
        assert_eq!(metrics.value(name, labels), Some(value), "{name} {labels:?} in:\n{metrics}");
    }
    assert!(metrics.value("hookline_gateway_producer_queue_depth", &[]).is_some());
    let readyz = format!("http://{}/readyz", stack.gateway_admin_addr);
    hookline_tests::eventually(Duration::from_secs(10), "gateway ready with the broker up", || async {
        let request = Request::get(&readyz).body(Full::default()).expect("get");
        stack.send(request).await.status == StatusCode::OK
    })
    .await;
    stack.shutdown().await;
}
