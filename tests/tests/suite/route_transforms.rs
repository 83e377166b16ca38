//! Route transforms (issue 48): a route's jq program reshapes the body its `http` handler forwards, and the forward
//! is signed over the transformed bytes, which the official Standard Webhooks libraries (Python's and Node's,
//! tests/forward/) verify; a transform that fails makes the event poison, dead-lettered with its original body and
//! a message naming the route's transform, and nothing is forwarded; a program that does not compile is refused
//! when the config loads.

use std::time::Duration;

use hookline_consumer::{ConsumerConfig, Loaded, config::HandlerConfig, config::RouteConfig};
use hookline_gateway::config::SourceConfig;
use hookline_tests::{
    Delivery, TEST_SECRET, TestStack, eventually,
    forward::{Downstream, Verifier, new_whsec, secret_file, stack_ca_file},
    read,
};
use http::{Request, StatusCode};
use http_body_util::Full;
use rdkafka::Message;

const SOURCE: &str = "gh";

/// Picks fields, renames one, changes one and builds a new object.
const TRANSFORM: &str = r#"{kind: "github.push", sequence: .n, nonce, action: (.action | ascii_upcase)}"#;

async fn stack() -> TestStack {
    TestStack::builder()
        .gateway_source(SourceConfig {
            type_from_header: Some(true),
            ..SourceConfig::new(SOURCE, "github", vec![secret_file("github", TEST_SECRET)])
        })
        .build()
        .await
}

/// A route of `event_type` to `url`, signed with `whsec`, transformed by `transform`.
fn route(event_type: &str, url: String, whsec: &str, transform: &str) -> RouteConfig {
    RouteConfig {
        source: SOURCE.into(),
        event_types: Some(vec![event_type.into()]),
        handler: HandlerConfig {
            kind: "http".into(),
            url: Some(url),
            ca_file: Some(stack_ca_file()),
            signing_secrets: vec![secret_file("forward-v1", whsec)],
            ..HandlerConfig::default()
        },
        transform: Some(transform.to_owned()),
        ..RouteConfig::default()
    }
}

async fn start_consumer(stack: &mut TestStack, routes: Vec<RouteConfig>) {
    let config = ConsumerConfig { routes, ..stack.consumer_config.clone() };
    let router = Loaded::build(config.clone()).expect("a valid consumer config").handler;
    stack.start_consumer_with(config, router).await;
}

/// Posts a GitHub delivery of `event_type` numbered `n`, accepted; returns its event id and its body.
async fn post(stack: &TestStack, event_type: &str, n: usize) -> (String, String) {
    let body = format!(r#"{{"action":"opened","n":{n},"nonce":"{}","sender":{{"login":"x"}}}}"#, uuid::Uuid::new_v4());
    let delivery = Delivery { event: event_type.to_owned(), ..Delivery::new(body.clone()) };
    let request = Request::post(format!("http://{}/webhooks/{SOURCE}", stack.gateway_addr))
        .header("content-type", "application/json")
        .header("x-github-delivery", &delivery.delivery_id)
        .header("x-github-event", event_type)
        .header("x-hub-signature-256", delivery.signature(TEST_SECRET))
        .body(Full::new(delivery.body.clone()))
        .expect("request");
    let reply = stack.send(request).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
    (delivery.delivery_id, body)
}

/// What [`TRANSFORM`] makes of `body`, as the consumer writes it.
fn transformed(body: &str) -> String {
    let body: serde_json::Value = serde_json::from_str(body).expect("json");
    format!(
        r#"{{"kind":"github.push","sequence":{},"nonce":"{}","action":"OPENED"}}"#,
        body["n"],
        body["nonce"].as_str().expect("nonce")
    )
}

#[tokio::test]
async fn a_transformed_forward_is_signed_over_its_new_body_and_verifies_with_the_official_libraries() {
    let secret = new_whsec();
    let python = Downstream::start(Verifier::Python, &[&secret]).await;
    let node = Downstream::start(Verifier::Node, &[&secret]).await;
    let mut stack = stack().await;
    start_consumer(
        &mut stack,
        vec![
            route("push", python.url("/hooks"), &secret, TRANSFORM),
            route("issues", node.url("/hooks"), &secret, TRANSFORM),
        ],
    )
    .await;
    let mut sent = Vec::new();
    for n in 0..3 {
        sent.push((post(&stack, "push", n).await, &python));
        sent.push((post(&stack, "issues", n).await, &node));
    }
    eventually(Duration::from_secs(60), "6 events processed", || async {
        stack.consumer_events("processed").await >= 6
    })
    .await;

    for ((event_id, body), downstream) in &sent {
        let requests = downstream.requests();
        let seen: Vec<&serde_json::Value> =
            requests.iter().filter(|request| request["webhook_id"].as_str() == Some(event_id)).collect();
        assert_eq!(seen.len(), 1, "{event_id} forwarded once: {requests:#?}");
        assert_eq!(seen[0]["verified"], true, "the signature covers the transformed bytes: {}", seen[0]);
        assert_eq!(seen[0]["body"].as_str(), Some(transformed(body).as_str()), "{}", seen[0]);
    }
    assert_eq!(stack.consumer_events("dead_lettered").await, 0);
    // Kafka keeps what the provider sent.
    let inbound = stack.records(&stack.kafka.inbound_topic).await;
    for ((event_id, body), _) in &sent {
        let record = inbound.iter().find(|record| read::inbound(*record).meta.event_id == *event_id).expect("in Kafka");
        assert_eq!(record.payload(), Some(body.as_bytes()));
    }
    stack.shutdown().await;
}

#[tokio::test]
async fn a_transform_that_fails_dead_letters_the_original_as_poison_naming_the_transform_and_forwards_nothing() {
    let secret = new_whsec();
    let python = Downstream::start(Verifier::Python, &[&secret]).await;
    let mut stack = stack().await;
    let failing_on_one = r#"if .n == 1 then error("refusing n=\(.n)") else {sequence: .n} end"#;
    start_consumer(&mut stack, vec![route("push", python.url("/hooks"), &secret, failing_on_one)]).await;
    let (good_id, _) = post(&stack, "push", 0).await;
    let (bad_id, bad_body) = post(&stack, "push", 1).await;

    eventually(Duration::from_secs(60), "one processed, one dead-lettered", || async {
        stack.consumer_events("processed").await >= 1 && !stack.records(&stack.kafka.dlq_topic).await.is_empty()
    })
    .await;
    let dead_letters = stack.records(&stack.kafka.dlq_topic).await;
    assert_eq!(dead_letters.len(), 1);
    let record = &dead_letters[0];
    assert_eq!(read::inbound(record).meta.event_id, bad_id);
    assert_eq!(record.payload(), Some(bad_body.as_bytes()), "the dead letter keeps the original body");
    let failure = read::dead_letter_failure(record);
    assert_eq!(failure.error_class, "poison");
    assert_eq!(failure.attempts, 1, "not retried");
    assert_eq!(failure.error, "transform of routes[0] (`gh:push`) failed: refusing n=1");

    let requests = python.requests();
    assert_eq!(requests.len(), 1, "only the event the transform took is forwarded: {requests:#?}");
    assert_eq!(requests[0]["webhook_id"].as_str(), Some(good_id.as_str()));
    assert_eq!(requests[0]["body"].as_str(), Some(r#"{"sequence":0}"#));
    stack.shutdown().await;
}

#[tokio::test]
async fn a_transform_that_does_not_compile_is_refused_when_the_config_loads() {
    let stack = stack().await;
    let mut config = stack.consumer_config.clone();
    config.routes = vec![
        route("push", "https://example.invalid/a".into(), &new_whsec(), "{sequence: .n,"),
        route("issues", "https://example.invalid/b".into(), &new_whsec(), ".a | no_such_filter"),
    ];
    let problems = Loaded::build(config).expect_err("refused").to_string();
    assert!(
        problems.contains("routes[0] (source `gh`): transform does not parse: line 1, column 15: expected"),
        "{problems}"
    );
    assert!(
        problems.contains(
            "routes[1] (source `gh`): transform does not compile: line 1, column 6: undefined filter `no_such_filter/0`"
        ),
        "{problems}"
    );
    stack.shutdown().await;
}
