//! Traces off (no tracer installed in this process, as with no `OTEL_EXPORTER_OTLP_ENDPOINT`): a webhook goes from
//! the gateway through Kafka to the `http` handler's downstream and no span context is made anywhere: the record
//! carries no `traceparent`, the downstream receives none, and an inbound one is not passed on.

use std::time::Duration;

use hookline_common::{telemetry::traces, wire::kafka};
use hookline_consumer::config::HandlerConfig;
use hookline_record::{Claims, inbound::InboundRecord};
use hookline_tests::{Delivery, FakeEndpoint, TEST_SECRET, TestStack, eventually};
use rdkafka::message::Message;

#[tokio::test]
async fn with_traces_off_no_record_and_no_downstream_request_carries_a_traceparent() {
    assert!(!traces::enabled(), "nothing in this process turns traces on");
    let downstream = FakeEndpoint::start().await;
    let mut stack = TestStack::builder().build().await;
    let config = hookline_consumer::ConsumerConfig {
        handler: HandlerConfig {
            kind: "http".into(),
            url: Some(format!("http://{}/hooks", downstream.addr)),
            ..HandlerConfig::default()
        },
        ..stack.consumer_config.clone()
    };
    let router = hookline_consumer::Loaded::build(config.clone()).expect("a valid consumer config").handler;
    stack.start_consumer_with(config, router).await;

    let delivery = Delivery::new(format!(r#"{{"off":"{}"}}"#, uuid::Uuid::new_v4()));
    let mut request = delivery.request(stack.gateway_addr, &delivery.signature(TEST_SECRET));
    request.headers_mut().insert(
        traces::http_traceparent(),
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".parse().expect("value"),
    );
    assert_eq!(stack.send(request).await.status, http::StatusCode::ACCEPTED);
    eventually(Duration::from_secs(60), "the downstream was called", || async { !downstream.requests().is_empty() })
        .await;

    let (headers, _) = downstream.requests().pop().expect("a request");
    assert!(headers.get(traces::http_traceparent()).is_none(), "{headers:?}");
    let records = stack.inbound_records().await;
    assert_eq!(records.len(), 1);
    let headers = kafka::headers_of(records[0].headers());
    let record = InboundRecord::decode(headers.clone()).expect("a gateway record");
    assert_eq!(record.meta.event_id, delivery.delivery_id, "the delivery's record");
    let traceparent = Claims::of(headers).traceparent();
    assert!(traceparent.is_none(), "{:?}", traceparent.map(String::from_utf8_lossy));
    stack.shutdown().await;
}
