//! Traces end to end, as an operator sees them: the gateway and a consumer, each its own process (the `test-gateway`
//! and `test-consumer router` binaries, which start traces exactly as `hookline-gateway` and `hookline-consumer`
//! do), export over OTLP/HTTP to a real collector (Jaeger v2, built by `tests/tools/jaeger/install`); one webhook
//! goes through Kafka to a downstream, and the trace is read back through Jaeger's query API. `traces.rs` checks
//! the spans in detail in one process; this checks that they leave the processes, arrive whole, and join up across
//! the two services and the Kafka hop.

use std::time::Duration;

use hookline_common::telemetry::traces;
use hookline_consumer::config::HandlerConfig;
use hookline_gateway::config::Limits;
use hookline_tests::{
    Delivery, FakeEndpoint, TEST_SECRET, TestStack, eventually,
    gateway_process::{GatewayProcess, github_gateway_config},
    jaeger::{Jaeger, StoredSpan},
    process::spawn_consumer_process_with_env,
};

fn one<'a>(spans: &'a [StoredSpan], service: &str, operation: &str) -> &'a StoredSpan {
    let found: Vec<&StoredSpan> =
        spans.iter().filter(|span| span.service == service && span.operation == operation).collect();
    assert_eq!(
        found.len(),
        1,
        "one `{operation}` span of {service} among {:?}",
        spans.iter().map(|s| (&s.service, &s.operation)).collect::<Vec<_>>()
    );
    found[0]
}

#[tokio::test]
async fn one_webhooks_trace_reaches_a_real_collector_from_the_gateway_and_the_consumer_and_the_downstream_joins_it() {
    let jaeger = Jaeger::start().await;
    let downstream = FakeEndpoint::start().await;
    let stack = TestStack::builder().build().await;
    let gateway = GatewayProcess::start(
        env!("CARGO_BIN_EXE_test-gateway").as_ref(),
        &github_gateway_config(&stack.kafka, Limits::default()),
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &jaeger.otlp_endpoint), ("OTEL_SERVICE_NAME", "hookline-gateway")],
    );
    let consumer_config = hookline_consumer::ConsumerConfig {
        handler: HandlerConfig {
            kind: "http".into(),
            url: Some(format!("http://{}/hooks", downstream.addr)),
            ..HandlerConfig::default()
        },
        ..stack.consumer_config.clone()
    };
    let (_consumer, _) = spawn_consumer_process_with_env(
        env!("CARGO_BIN_EXE_test-consumer").as_ref(),
        &consumer_config,
        "router",
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &jaeger.otlp_endpoint), ("OTEL_SERVICE_NAME", "hookline-consumer")],
    );

    let delivery = Delivery::new(format!(r#"{{"collector":"{}"}}"#, uuid::Uuid::new_v4()));
    let request = delivery.request(gateway.public, &delivery.signature(TEST_SECRET));
    let reply = stack.send(request).await;
    assert_eq!(reply.status, 202, "accepted: {:?}", String::from_utf8_lossy(&reply.body));

    // The downstream got the event with the trace's context.
    let mut traceparent = None;
    eventually(Duration::from_secs(60), "the downstream receives the event", || {
        traceparent = downstream.requests().iter().find_map(|(headers, body)| {
            (body == &delivery.body)
                .then(|| {
                    headers.get(traces::http_traceparent()).and_then(|value| value.to_str().ok()).map(str::to_owned)
                })
                .flatten()
        });
        let found = traceparent.is_some();
        async move { found }
    })
    .await;
    let traceparent = traceparent.expect("found");
    let mut fields = traceparent.split('-');
    let (_, trace_id, downstream_parent) =
        (fields.next(), fields.next().expect("trace id").to_owned(), fields.next().expect("span id").to_owned());

    // Jaeger holds the whole trace: both services' spans, joined across the Kafka hop.
    let inbound = &stack.kafka.inbound_topic;
    let (request_op, send_op, process_op) =
        ("POST /webhooks/{source}", format!("send {inbound}"), format!("process {inbound}"));
    let spans = jaeger
        .wait_for_trace(&trace_id, Duration::from_secs(60), |spans| {
            [("hookline-gateway", request_op), ("hookline-gateway", &send_op), ("hookline-consumer", &process_op)]
                .iter()
                .all(|(service, op)| spans.iter().any(|s| s.service == *service && s.operation == *op))
                && spans.iter().any(|s| s.service == "hookline-consumer" && s.operation == "handler http")
        })
        .await;
    let request = one(&spans, "hookline-gateway", request_op);
    let send = one(&spans, "hookline-gateway", &send_op);
    let process = one(&spans, "hookline-consumer", &process_op);
    let handler = one(&spans, "hookline-consumer", "handler http");
    assert_eq!(request.parent(), None, "the request starts the trace");
    assert_eq!(send.parent(), Some(request.span_id.as_str()), "the send is the request's child");
    assert_eq!(process.parent(), Some(send.span_id.as_str()), "across Kafka: the process span continues the send");
    assert_eq!(handler.parent(), Some(process.span_id.as_str()));
    assert_eq!(handler.span_id, downstream_parent, "the downstream's parent is the handler's call");

    assert_eq!(request.tag_str("hookline.source").as_deref(), Some("github"));
    assert_eq!(request.tag_str("hookline.outcome").as_deref(), Some("accepted"));
    assert_eq!(request.tag_str("span.kind").as_deref(), Some("server"));
    assert_eq!(send.tag_str("span.kind").as_deref(), Some("producer"));
    assert_eq!(send.tag_str("messaging.message.id").as_deref(), Some(delivery.delivery_id.as_str()));
    assert!(send.tag("messaging.kafka.offset").is_some(), "the send span has the record's offset: {:?}", send.tags);
    assert_eq!(process.tag_str("span.kind").as_deref(), Some("consumer"));
    assert_eq!(process.tag_str("hookline.dedupe.outcome").as_deref(), Some("claimed"));
    assert_eq!(handler.tag_str("span.kind").as_deref(), Some("client"));
    assert!(jaeger.services().await.iter().any(|service| service == "hookline-consumer"));
    if let Ok(path) = std::env::var("HOOKLINE_TRACE_JSON") {
        // scripts/trace-waterfall draws docs/operations.md's picture from what Jaeger answered in a run of this test.
        let json = serde_json::to_vec_pretty(&jaeger.trace_json(&trace_id).await).expect("JSON");
        std::fs::write(path, json).expect("write the trace");
    }
}
