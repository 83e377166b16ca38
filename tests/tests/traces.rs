//! Traces across the real Kafka hop, in one process: an in-memory span exporter installed as the process's tracer
//! shows one trace from the gateway's request span to the consumer's handler call (and the downstream's
//! `traceparent`), a retry continuing the same trace, a replay starting a new trace linked to the original, and an
//! inbound `traceparent` ignored unless the source trusts it. Traces off is `traces_off.rs` (another process).
//!
//! Every test of this file shares the one tracer (it is process-wide); each finds its own spans by trace id.

use std::{sync::OnceLock, time::Duration};

use hookline_common::{telemetry::traces, wire::kafka};
use hookline_consumer::config::HandlerConfig;
use hookline_dlq_replayer::{
    ReplayerConfig,
    filter::Filter,
    ops::{ReplayRequest, Replayer},
};
use hookline_gateway::config::SourceConfig;
use hookline_record::Claims;
use hookline_tests::{Delivery, FakeEndpoint, TEST_SECRET, TestStack, eventually};
use opentelemetry::trace::{SpanId, SpanKind, TraceId};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use rdkafka::message::Message;

const TRACEPARENT_FROM_THE_INTERNET: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

fn exporter() -> &'static InMemorySpanExporter {
    static EXPORTER: OnceLock<InMemorySpanExporter> = OnceLock::new();
    EXPORTER.get_or_init(|| {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
        assert!(traces::install(provider), "the first tracer of this process");
        exporter
    })
}

fn finished() -> Vec<SpanData> {
    exporter().get_finished_spans().expect("in-memory spans")
}

fn attribute(span: &SpanData, key: &str) -> Option<String> {
    span.attributes.iter().find(|kv| kv.key.as_str() == key).map(|kv| kv.value.as_str().into_owned())
}

fn in_trace(trace_id: TraceId) -> Vec<SpanData> {
    finished().into_iter().filter(|span| span.span_context.trace_id() == trace_id).collect()
}

/// The one span of `trace_id` named `name` (and, when given, with `key` = `value`).
fn one(spans: &[SpanData], name: &str, with: Option<(&str, &str)>) -> SpanData {
    let found: Vec<&SpanData> = spans
        .iter()
        .filter(|span| span.name == name)
        .filter(|span| with.is_none_or(|(key, value)| attribute(span, key).as_deref() == Some(value)))
        .collect();
    assert_eq!(found.len(), 1, "one `{name}` span {with:?} among {:#?}", names(spans));
    found[0].clone()
}

fn names(spans: &[SpanData]) -> Vec<String> {
    spans.iter().map(|span| format!("{} {:?}", span.name, span.span_kind)).collect()
}

/// The trace of the gateway's `send <topic>` of the event `event_id`, once its send span has ended.
async fn trace_of_event(topic: &str, event_id: &str) -> TraceId {
    let name = format!("send {topic}");
    let mut trace_id = None;
    eventually(Duration::from_secs(30), "the gateway's send span", || {
        trace_id = finished()
            .iter()
            .find(|span| span.name == name && attribute(span, "messaging.message.id").as_deref() == Some(event_id))
            .map(|span| span.span_context.trace_id());
        let found = trace_id.is_some();
        async move { found }
    })
    .await;
    trace_id.expect("found")
}

async fn wait_for_span(trace_id: TraceId, name: &str, with: Option<(&str, &str)>) -> Vec<SpanData> {
    eventually(Duration::from_secs(60), &format!("a `{name}` span {with:?}"), || {
        let found = in_trace(trace_id).iter().any(|span| {
            span.name == name && with.is_none_or(|(key, value)| attribute(span, key).as_deref() == Some(value))
        });
        async move { found }
    })
    .await;
    in_trace(trace_id)
}

fn traceparent_header(message: &rdkafka::message::OwnedMessage) -> Option<String> {
    let traceparent = Claims::of(kafka::headers_of(message.headers())).traceparent()?;
    Some(String::from_utf8_lossy(traceparent).into_owned())
}

#[tokio::test]
async fn one_trace_runs_from_the_gateway_request_to_the_http_handler_call_and_the_downstream_joins_it() {
    exporter();
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

    let delivery = Delivery::new(format!(r#"{{"trace":"{}"}}"#, uuid::Uuid::new_v4()));
    stack.post_accepted(&delivery).await;
    let inbound = stack.kafka.inbound_topic.clone();
    let trace_id = trace_of_event(&inbound, &delivery.delivery_id).await;
    let spans = wait_for_span(trace_id, "handler http", None).await;

    let request = one(&spans, "POST /webhooks/{source}", None);
    assert_eq!(request.span_kind, SpanKind::Server);
    assert_eq!(request.parent_span_id, SpanId::INVALID, "a new trace: nothing sent a trusted traceparent");
    assert_eq!(attribute(&request, "hookline.source").as_deref(), Some("github"));
    assert_eq!(attribute(&request, "hookline.outcome").as_deref(), Some("accepted"));
    assert_eq!(attribute(&request, "hookline.secret_id").as_deref(), Some("primary"));
    assert_eq!(attribute(&request, "http.response.status_code").as_deref(), Some("202"));
    for span in &spans {
        for kv in &span.attributes {
            let value = kv.value.as_str();
            assert!(!value.contains(TEST_SECRET), "a secret in {}: {kv:?}", span.name);
            assert!(!value.contains(r#"{"trace""#), "the body in {}: {kv:?}", span.name);
        }
    }

    let send = one(&spans, &format!("send {inbound}"), None);
    assert_eq!(send.span_kind, SpanKind::Producer);
    assert_eq!(send.parent_span_id, request.span_context.span_id());
    assert_eq!(attribute(&send, "messaging.system").as_deref(), Some("kafka"));
    assert_eq!(attribute(&send, "messaging.destination.name").as_deref(), Some(inbound.as_str()));
    assert_eq!(attribute(&send, "messaging.message.id").as_deref(), Some(delivery.delivery_id.as_str()));
    let partition = attribute(&send, "messaging.destination.partition.id").expect("the partition after the ack");
    let offset = attribute(&send, "messaging.kafka.offset").expect("the offset after the ack");

    // The record carries the send span's context, covered by its MAC (the consumer accepted it).
    let record = stack
        .inbound_records()
        .await
        .into_iter()
        .find(|record| record.partition().to_string() == partition && record.offset().to_string() == offset)
        .expect("the record at the send span's position");
    assert_eq!(
        traceparent_header(&record),
        Some(format!("00-{}-{}-01", trace_id, send.span_context.span_id())),
        "the record's traceparent is the send span's"
    );

    let process = one(&spans, &format!("process {inbound}"), None);
    assert_eq!(process.span_kind, SpanKind::Consumer);
    assert_eq!(process.parent_span_id, send.span_context.span_id(), "the consumer continues the record's context");
    assert_eq!(attribute(&process, "hookline.dedupe.outcome").as_deref(), Some("claimed"));
    assert_eq!(attribute(&process, "hookline.attempt").as_deref(), Some("1"));
    assert_eq!(attribute(&process, "hookline.outcome").as_deref(), Some("processed"));
    assert!(attribute(&process, "hookline.service").is_some_and(|service| !service.is_empty()));
    assert_eq!(
        attribute(&process, "messaging.consumer.group.name").as_deref(),
        Some(stack.consumer_config.kafka.group_id.as_str())
    );
    assert_eq!(attribute(&process, "messaging.kafka.offset").as_deref(), Some(offset.as_str()));

    let handler = one(&spans, "handler http", None);
    assert_eq!(handler.span_kind, SpanKind::Client);
    assert_eq!(handler.parent_span_id, process.span_context.span_id());

    let forwarded = downstream.requests();
    let (headers, _) = forwarded.last().expect("the downstream was called");
    assert_eq!(
        headers.get(traces::http_traceparent()).and_then(|value| value.to_str().ok()),
        Some(format!("00-{}-{}-01", trace_id, handler.span_context.span_id()).as_str()),
        "the downstream joins the trace under the handler call"
    );
    stack.shutdown().await;
}

#[tokio::test]
async fn a_retry_continues_the_same_trace() {
    exporter();
    let stack = TestStack::builder().consumer().build().await;
    let delivery = Delivery::new(format!(r#"{{"retry":"{}"}}"#, uuid::Uuid::new_v4()));
    stack.handler.fail_with(&delivery.delivery_id, [hookline_consumer::handler::HandlerError::retryable("503 once")]);
    stack.post_accepted(&delivery).await;
    let inbound = stack.kafka.inbound_topic.clone();
    let retry_topic = stack.consumer_config.service_retry_topic();
    let trace_id = trace_of_event(&inbound, &delivery.delivery_id).await;
    let spans =
        wait_for_span(trace_id, &format!("process {retry_topic}"), Some(("hookline.outcome", "processed"))).await;

    let first = one(&spans, &format!("process {inbound}"), None);
    assert_eq!(attribute(&first, "hookline.outcome").as_deref(), Some("retry_scheduled"));
    assert_eq!(attribute(&first, "hookline.attempt").as_deref(), Some("1"));
    let park = one(&spans, &format!("send {retry_topic}"), None);
    assert_eq!(park.span_kind, SpanKind::Producer);
    assert_eq!(park.parent_span_id, first.span_context.span_id(), "the retry's send is a child of the processing");
    let second = one(&spans, &format!("process {retry_topic}"), None);
    assert_eq!(second.parent_span_id, park.span_context.span_id(), "the retry continues the retry record's context");
    assert_eq!(attribute(&second, "hookline.attempt").as_deref(), Some("2"));
    let handler_calls: Vec<_> = spans.iter().filter(|span| span.name.starts_with("handler ")).collect();
    assert_eq!(handler_calls.len(), 2, "both attempts in one trace: {:#?}", names(&spans));
    stack.shutdown().await;
}

#[tokio::test]
async fn a_replay_starts_a_new_trace_linked_to_the_original() {
    exporter();
    let stack = TestStack::builder().consumer().build().await;
    let delivery = Delivery::new(format!(r#"{{"replay":"{}"}}"#, uuid::Uuid::new_v4()));
    stack.handler.poison(&delivery.delivery_id);
    stack.post_accepted(&delivery).await;
    let inbound = stack.kafka.inbound_topic.clone();
    let original = trace_of_event(&inbound, &delivery.delivery_id).await;
    let dlq = stack.kafka.dlq_topic.clone();
    let spans = wait_for_span(original, &format!("send {dlq}"), None).await;
    let dead_letter = one(&spans, &format!("send {dlq}"), None);

    let replayer =
        Replayer::new(ReplayerConfig { kafka: stack.kafka.clone(), ..ReplayerConfig::default() }).expect("replayer");
    let entry_of = || async {
        let entries = replayer.list(&Filter::default()).await.expect("list");
        entries.into_iter().find(|e| e.entry.event_id.as_deref() == Some(delivery.delivery_id.as_str()))
    };
    eventually(Duration::from_secs(30), "the DLQ entry", || async { entry_of().await.is_some() }).await;
    let entry_id = entry_of().await.expect("the entry").entry.id;
    stack.handler.heal(&delivery.delivery_id);
    let request = ReplayRequest { ids: vec![entry_id.clone()], by: "test".to_owned(), ..ReplayRequest::default() };
    replayer.replay(&request).await.expect("replay");

    let mut replay = None;
    eventually(Duration::from_secs(30), "the replay span", || {
        replay = finished().into_iter().find(|span| {
            span.name == "replay" && attribute(span, "hookline.dlq.entry_id").as_deref() == Some(&entry_id)
        });
        let found = replay.is_some();
        async move { found }
    })
    .await;
    let replay = replay.expect("found");
    let replayed = replay.span_context.trace_id();
    assert_ne!(replayed, original, "a replay is a new trace");
    assert_eq!(replay.parent_span_id, SpanId::INVALID);
    let links = &replay.links.links;
    assert_eq!(links.len(), 1, "{links:?}");
    assert_eq!(links[0].span_context.trace_id(), original, "linked to the original trace");
    assert_eq!(links[0].span_context.span_id(), dead_letter.span_context.span_id(), "through the DLQ record's context");

    let spans = wait_for_span(replayed, &format!("process {inbound}"), Some(("hookline.outcome", "processed"))).await;
    let send = one(&spans, &format!("send {inbound}"), None);
    assert_eq!(send.parent_span_id, replay.span_context.span_id());
    let process = one(&spans, &format!("process {inbound}"), Some(("hookline.outcome", "processed")));
    assert_eq!(process.parent_span_id, send.span_context.span_id(), "the re-driven record continues the replay");
    stack.shutdown().await;
}

#[tokio::test]
async fn an_inbound_traceparent_never_chooses_our_trace_and_is_linked_when_the_source_trusts_it() {
    exporter();
    let secret_file = std::env::temp_dir().join(format!("hookline-traces-{}.secret", uuid::Uuid::new_v4()));
    std::fs::write(&secret_file, TEST_SECRET).expect("write secret");
    let secret = hookline_common::config::SecretRef::from_file("primary", secret_file.display().to_string());
    let stack = TestStack::builder()
        .gateway_source(SourceConfig {
            trust_traceparent: true,
            type_from_header: Some(true),
            ..SourceConfig::new("trusted", "github", vec![secret])
        })
        .build()
        .await;
    let given = traces::parse_traceparent(TRACEPARENT_FROM_THE_INTERNET.as_bytes()).expect("valid");
    let inbound = stack.kafka.inbound_topic.clone();

    // The default `github` source does not trust it: a trace of its own.
    let untrusted = Delivery::new(format!(r#"{{"untrusted":"{}"}}"#, uuid::Uuid::new_v4()));
    let mut request = untrusted.request(stack.gateway_addr, &untrusted.signature(TEST_SECRET));
    request.headers_mut().insert(traces::http_traceparent(), TRACEPARENT_FROM_THE_INTERNET.parse().expect("value"));
    assert_eq!(stack.send(request).await.status, http::StatusCode::ACCEPTED);
    let trace_id = trace_of_event(&inbound, &untrusted.delivery_id).await;
    assert_ne!(trace_id, given.trace_id(), "an untrusted source's traceparent is ignored");
    let spans = in_trace(trace_id);
    let server = one(&spans, "POST /webhooks/{source}", None);
    assert_eq!(server.parent_span_id, SpanId::INVALID);

    // The trusted source links to it, but its span is still a trace of its own: the span starts before the request
    // is verified, and anyone who reaches the source's URL can send a traceparent (choosing trace ids, forcing
    // sampling).
    let trusted = Delivery::new(format!(r#"{{"trusted":"{}"}}"#, uuid::Uuid::new_v4()));
    let mut request = trusted.request(stack.gateway_addr, &trusted.signature(TEST_SECRET));
    *request.uri_mut() = format!("http://{}/webhooks/trusted", stack.gateway_addr).parse().expect("uri");
    request.headers_mut().insert(traces::http_traceparent(), TRACEPARENT_FROM_THE_INTERNET.parse().expect("value"));
    assert_eq!(stack.send(request).await.status, http::StatusCode::ACCEPTED);
    let trace_id = trace_of_event(&inbound, &trusted.delivery_id).await;
    assert_ne!(trace_id, given.trace_id(), "an unverified header chose our trace id");
    let spans = in_trace(trace_id);
    let server = one(&spans, "POST /webhooks/{source}", Some(("hookline.source", "trusted")));
    assert_eq!(server.parent_span_id, SpanId::INVALID);
    let links = &server.links.links;
    assert_eq!(links.len(), 1, "{links:?}");
    assert_eq!(links[0].span_context.trace_id(), given.trace_id(), "linked to the sender's trace");
    assert_eq!(links[0].span_context.span_id(), given.span_id());
    let _ = std::fs::remove_file(secret_file);
    stack.shutdown().await;
}
