//! A forward the downstream can verify: gateway -> Kafka -> consumer -> `http` handler -> a downstream over
//! https that verifies each forward with the official Standard Webhooks library of its language (Python's
//! `standardwebhooks` from PyPI, Node's from npm: tests/forward/), refuses one it cannot verify, and sees which
//! HTTP version was spoken. Plus a downstream whose error body never ends.

use std::{
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use bytes::Bytes;
use hookline_common::config::SecretRef;
use hookline_consumer::{ConsumerConfig, config::HandlerConfig, config::RouteConfig};
use hookline_gateway::config::SourceConfig;
use hookline_tests::{
    Delivery, TEST_SECRET, TestStack, eventually,
    forward::{ClientCertificates, Downstream, Verifier, new_whsec, secret_file, stack_ca_file, stack_client_identity},
    read,
};
use http::{Request, StatusCode};
use http_body_util::Full;
use hyper::body::{Body, Frame};

/// The gateway source the tests post to: GitHub's scheme, carrying `X-GitHub-Event` and the provider's own
/// signature into Kafka, so a route can forward them.
const SOURCE: &str = "gh";

async fn stack() -> TestStack {
    let secret = secret_file("github", TEST_SECRET);
    TestStack::builder()
        .gateway_source(SourceConfig {
            forward_headers: vec!["X-GitHub-Event".into(), "X-Hub-Signature-256".into(), "User-Agent".into()],
            // The downstream verifies GitHub's own signature again: the documented, weaker opt-in.
            forward_untimed_signature: true,
            type_from_header: Some(true),
            ..SourceConfig::new(SOURCE, "github", vec![secret])
        })
        .build()
        .await
}

/// A route of the `gh` source's events of `event_type` to `url`, signed with `signing_secrets`.
fn route(event_type: &str, url: String, signing_secrets: Vec<SecretRef>) -> RouteConfig {
    RouteConfig {
        source: SOURCE.into(),
        event_types: Some(vec![event_type.into()]),
        handler: HandlerConfig {
            kind: "http".into(),
            url: Some(url),
            ca_file: Some(stack_ca_file()),
            signing_secrets,
            authorization: Some(secret_file("authorization", "Bearer forward-test-token")),
            forward_headers: vec!["X-GitHub-Event".into(), "X-Hub-Signature-256".into()],
            ..HandlerConfig::default()
        },
        ..RouteConfig::default()
    }
}

/// Starts a consumer running the configured routes (the real router and `http` handlers, not the test handler).
async fn start_consumer(stack: &mut TestStack, routes: Vec<RouteConfig>) {
    let config = ConsumerConfig { routes, ..stack.consumer_config.clone() };
    let router = hookline_consumer::Loaded::build(config.clone()).expect("a valid consumer config").handler;
    stack.start_consumer_with(config, router).await;
}

/// Posts a GitHub delivery of `event_type` to the `gh` source, accepted; returns its event id and the
/// provider's signature.
async fn post(stack: &TestStack, event_type: &str, n: usize) -> (String, String) {
    let body = format!(r#"{{"action":"forward-test","n":{n},"nonce":"{}"}}"#, uuid::Uuid::new_v4());
    let delivery = Delivery { event: event_type.to_owned(), ..Delivery::new(body) };
    let provider_signature = delivery.signature(TEST_SECRET);
    let request = Request::post(format!("http://{}/webhooks/{SOURCE}", stack.gateway_addr))
        .header("content-type", "application/json")
        .header("x-github-delivery", &delivery.delivery_id)
        .header("x-github-event", event_type)
        .header("x-hub-signature-256", &provider_signature)
        .body(Full::new(delivery.body.clone()))
        .expect("request");
    let reply = stack.send(request).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
    (delivery.delivery_id, provider_signature)
}

/// The requests `downstream` has recorded, once there are at least `n`. The downstream records a request before
/// it answers, but the test reads its lines in a task of its own: an event the consumer counts as processed may
/// not be among `requests()` yet, so every count is waited for, never read at once.
async fn wait_for_requests(downstream: &Downstream, n: usize) -> Vec<serde_json::Value> {
    eventually(Duration::from_secs(60), &format!("{n} forwards reached the downstream"), || async {
        downstream.requests().len() >= n
    })
    .await;
    downstream.requests()
}

fn text(value: &serde_json::Value) -> &str {
    value.as_str().unwrap_or_default()
}

#[tokio::test]
async fn every_forward_verifies_with_the_official_python_and_node_libraries_over_https_and_http2_when_offered() {
    let secret = new_whsec();
    let python = Downstream::start(Verifier::Python, &[&secret]).await;
    let node = Downstream::start(Verifier::Node, &[&secret]).await;
    let mut stack = stack().await;
    let signing = || vec![secret_file("forward-v1", &secret)];
    start_consumer(
        &mut stack,
        vec![route("push", python.url("/hooks"), signing()), route("issues", node.url("/hooks"), signing())],
    )
    .await;

    // One event each first, so that each route's connection exists and is idle in its pool; then three more each.
    let mut sent = vec![(post(&stack, "push", 0).await, "push"), (post(&stack, "issues", 0).await, "issues")];
    wait_for_requests(&python, 1).await;
    wait_for_requests(&node, 1).await;
    for n in 1..4 {
        sent.push((post(&stack, "push", n).await, "push"));
        sent.push((post(&stack, "issues", n).await, "issues"));
    }
    eventually(Duration::from_secs(60), "8 events processed", || async {
        stack.consumer_events("processed").await >= 8
    })
    .await;

    for (downstream, event_type, version) in [(&python, "push", "1.1"), (&node, "issues", "2.0")] {
        let requests = wait_for_requests(downstream, 4).await;
        let expected: Vec<&(String, String)> =
            sent.iter().filter(|(_, sent_type)| *sent_type == event_type).map(|(event, _)| event).collect();
        assert_eq!(requests.len(), expected.len(), "each event forwarded once: {requests:#?}");
        for (event_id, provider_signature) in expected {
            let seen: Vec<&serde_json::Value> =
                requests.iter().filter(|request| text(&request["webhook_id"]) == event_id).collect();
            assert_eq!(seen.len(), 1, "{event_id} forwarded once to {event_type}: {requests:#?}");
            let request = seen[0];
            assert_eq!(request["verified"], true, "{request}");
            assert_eq!(request["n_signatures"], 1, "{request}");
            assert_eq!(text(&request["http_version"]), version, "{request}");
            let headers = &request["headers"];
            assert_eq!(text(&headers["idempotency-key"]), event_id, "{request}");
            assert_eq!(text(&headers["x-hookline-event-id"]), event_id, "{request}");
            assert_eq!(text(&headers["authorization"]), "Bearer forward-test-token", "{request}");
            assert_eq!(text(&headers["x-github-event"]), event_type, "{request}");
            assert_eq!(text(&headers["x-hub-signature-256"]), provider_signature, "the provider's own signature");
        }
        let mut connections: Vec<u64> = requests.iter().filter_map(|request| request["connection"].as_u64()).collect();
        connections.sort_unstable();
        connections.dedup();
        assert!(connections.len() < requests.len(), "connections are reused: {requests:#?}");
    }
    // HTTP/2 multiplexes: every forward to the downstream that offers it shares the first connection.
    let node_connections: Vec<u64> =
        node.requests().iter().filter_map(|request| request["connection"].as_u64()).collect();
    assert!(node_connections.iter().all(|connection| *connection == node_connections[0]), "{node_connections:?}");
    assert_eq!(stack.consumer_events("dead_lettered").await, 0);
    stack.shutdown().await;
}

#[tokio::test]
async fn a_forward_signed_with_a_secret_the_downstream_does_not_know_is_refused_and_dead_lettered() {
    let known = new_whsec();
    let python = Downstream::start(Verifier::Python, &[&known]).await;
    let node = Downstream::start(Verifier::Node, &[&known]).await;
    let mut stack = stack().await;
    let wrong = || vec![secret_file("wrong", &new_whsec())];
    start_consumer(
        &mut stack,
        vec![route("push", python.url("/hooks"), wrong()), route("issues", node.url("/hooks"), wrong())],
    )
    .await;
    let (push_id, _) = post(&stack, "push", 0).await;
    let (issues_id, _) = post(&stack, "issues", 0).await;

    eventually(Duration::from_secs(60), "both events dead-lettered", || async {
        stack.records(&stack.kafka.dlq_topic).await.len() >= 2
    })
    .await;
    let dead_letters = stack.records(&stack.kafka.dlq_topic).await;
    assert_eq!(dead_letters.len(), 2);
    for record in &dead_letters {
        let event_id = read::inbound(record).meta.event_id;
        assert!(event_id == push_id || event_id == issues_id, "{event_id}");
        let failure = read::dead_letter_failure(record);
        assert_eq!(failure.error_class, "poison");
        assert!(failure.error.contains("401") && failure.error.contains("signature refused"), "{}", failure.error);
    }
    for downstream in [&python, &node] {
        let requests = wait_for_requests(downstream, 1).await;
        assert_eq!(requests.len(), 1, "refused once, not retried: {requests:#?}");
        assert_eq!(requests[0]["verified"], false, "{requests:#?}");
    }
    assert_eq!(stack.consumer_events("processed").await, 0);
    stack.shutdown().await;
}

#[tokio::test]
async fn during_a_rotation_both_secrets_sign_and_a_downstream_knowing_either_one_verifies() {
    let (old, new) = (new_whsec(), new_whsec());
    let python = Downstream::start(Verifier::Python, &[&old]).await;
    let node = Downstream::start(Verifier::Node, &[&new]).await;
    let mut stack = stack().await;
    let now = std::time::SystemTime::now();
    let rfc3339 =
        |time| hookline_common::time::Rfc3339::of_time(time, hookline_common::time::Precision::Seconds).to_string();
    let rotating = || {
        vec![
            SecretRef { not_after: Some(rfc3339(now + Duration::from_secs(3600))), ..secret_file("forward-old", &old) },
            SecretRef { not_before: Some(rfc3339(now - Duration::from_secs(60))), ..secret_file("forward-new", &new) },
        ]
    };
    start_consumer(
        &mut stack,
        vec![route("push", python.url("/hooks"), rotating()), route("issues", node.url("/hooks"), rotating())],
    )
    .await;
    for n in 0..2 {
        post(&stack, "push", n).await;
        post(&stack, "issues", n).await;
    }
    eventually(Duration::from_secs(60), "4 events processed", || async {
        stack.consumer_events("processed").await >= 4
    })
    .await;
    for downstream in [&python, &node] {
        let requests = wait_for_requests(downstream, 2).await;
        assert_eq!(requests.len(), 2, "{requests:#?}");
        for request in &requests {
            assert_eq!(request["verified"], true, "{request}");
            assert_eq!(request["n_signatures"], 2, "both secrets sign during the overlap: {request}");
        }
    }
    stack.shutdown().await;
}

#[tokio::test]
async fn mutual_tls_presents_the_client_certificate_and_a_route_without_one_is_refused() {
    let secret = new_whsec();
    let node = Downstream::start_with(Verifier::Node, &[&secret], ClientCertificates::RequiredFromTheStackCa).await;
    let mut stack = stack().await;
    let (certificate, key) = stack_client_identity();
    let mut with_certificate = route("push", node.url("/hooks"), vec![secret_file("forward", &secret)]);
    with_certificate.handler.client_certificate = Some(certificate);
    with_certificate.handler.client_key = Some(key);
    let without = route("issues", node.url("/hooks"), vec![secret_file("forward", &secret)]);
    start_consumer(&mut stack, vec![with_certificate, without]).await;
    let (push_id, _) = post(&stack, "push", 0).await;
    let (issues_id, _) = post(&stack, "issues", 0).await;

    eventually(Duration::from_secs(90), "one processed and one dead-lettered", || async {
        stack.consumer_events("processed").await >= 1 && !stack.records(&stack.kafka.dlq_topic).await.is_empty()
    })
    .await;
    let requests = wait_for_requests(&node, 1).await;
    assert_eq!(requests.len(), 1, "{requests:#?}");
    assert_eq!(text(&requests[0]["webhook_id"]), push_id);
    assert_eq!(requests[0]["verified"], true);
    assert_eq!(text(&requests[0]["client_cn"]), "hookline", "{requests:#?}");
    let dead_letters = stack.records(&stack.kafka.dlq_topic).await;
    assert_eq!(dead_letters.len(), 1);
    assert_eq!(read::inbound(&dead_letters[0]).meta.event_id, issues_id);
    assert_eq!(read::dead_letter_failure(&dead_letters[0]).error_class, "retryable_exhausted");
    stack.shutdown().await;
}

/// A response body that never ends: counts what was taken from it, and notes when it was dropped (its
/// connection closed).
struct EndlessBody {
    sent: Arc<AtomicUsize>,
    dropped: Arc<AtomicBool>,
}

const CHUNK: &[u8] = &[b'x'; 64 * 1024];

/// Far more than any buffer between the two ends: what a reader without a bound would take.
const ENDLESS_CAP_BYTES: usize = 1 << 30;

impl Body for EndlessBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.sent.fetch_add(CHUNK.len(), Ordering::SeqCst) >= ENDLESS_CAP_BYTES {
            return Poll::Ready(None);
        }
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(CHUNK)))))
    }
}

impl Drop for EndlessBody {
    fn drop(&mut self) {
        self.dropped.store(true, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn a_huge_error_body_is_read_only_up_to_the_bound() {
    let sent = Arc::new(AtomicUsize::new(0));
    let dropped = Arc::new(AtomicBool::new(false));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (server_sent, server_dropped) = (sent.clone(), dropped.clone());
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (sent, dropped) = (server_sent.clone(), server_dropped.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |_request: hyper::Request<hyper::body::Incoming>| {
                    let body = EndlessBody { sent: sent.clone(), dropped: dropped.clone() };
                    async move {
                        let mut response = hyper::Response::new(body);
                        *response.status_mut() = StatusCode::BAD_REQUEST;
                        Ok::<_, std::convert::Infallible>(response)
                    }
                });
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
            });
        }
    });
    let mut stack = stack().await;
    let plain = RouteConfig {
        name: None,
        retry: None,
        handler: HandlerConfig {
            kind: "http".into(),
            url: Some(format!("http://{addr}/hooks")),
            ..HandlerConfig::default()
        },
        ..route("push", String::new(), Vec::new())
    };
    start_consumer(&mut stack, vec![plain]).await;
    let (event_id, _) = post(&stack, "push", 0).await;

    eventually(Duration::from_secs(60), "the event dead-lettered", || async {
        !stack.records(&stack.kafka.dlq_topic).await.is_empty()
    })
    .await;
    let dead_letters = stack.records(&stack.kafka.dlq_topic).await;
    assert_eq!(read::inbound(&dead_letters[0]).meta.event_id, event_id);
    let failure = read::dead_letter_failure(&dead_letters[0]);
    assert_eq!(failure.error_class, "poison");
    let error = failure.error;
    assert!(error.contains("400 Bad Request") && error.contains("body read too long"), "{error}");
    let kept = error.chars().filter(|c| *c == 'x').count();
    assert_eq!(kept, hookline_consumer::handler::http::ERROR_BODY_BYTES, "{error}");
    eventually(Duration::from_secs(30), "the endless body abandoned", || async { dropped.load(Ordering::SeqCst) })
        .await;
    let sent = sent.load(Ordering::SeqCst);
    assert!(sent < ENDLESS_CAP_BYTES / 8, "{sent} bytes of the endless body were taken");
    stack.shutdown().await;
}
