//! Nothing stalls: a panic on a record's path and a copy the broker refuses as too large each end their record as
//! a failure (retried, then dead-lettered, by reference when the record cannot be copied), free its slots, and let
//! its partition's committed offset move on. Both stalled a partition for good before (security review N2, N11).

use std::{collections::HashMap, sync::Arc, time::Duration};

use hookline_common::kafka::admin_config;
use hookline_consumer::handler::{BoxFuture, Handler, HandlerError};
use hookline_dlq_replayer::{
    ReplayerConfig,
    filter::Filter,
    index::Status,
    ops::{ReplayRequest, Replayer},
};
use hookline_record::{raw, retry::Origin};
use hookline_tests::{Delivery, FakeEndpoint, TestHandler, TestStack, eventually, read};
use rdkafka::{
    Message,
    admin::{AdminClient, AdminOptions, AlterConfig, ResourceSpecifier},
    client::DefaultClientContext,
    message::OwnedMessage,
};

/// The stack's [`TestHandler`], except that it panics in its call for one event, and while naming the handler
/// (a step of the pipeline before the call, outside it) for another.
#[derive(Debug)]
struct Panicking {
    inner: Arc<TestHandler>,
    in_handle: String,
    in_name_for: String,
}

impl Handler for Panicking {
    fn name(&self) -> &str {
        "test"
    }

    fn name_for(&self, event: &hookline_common::wire::InboundEvent) -> &str {
        assert!(event.meta.event_id != self.in_name_for, "a pipeline step fails on {}", event.meta.event_id);
        self.name()
    }

    fn handle<'a>(&'a self, event: &'a hookline_common::wire::InboundEvent) -> BoxFuture<'a, Result<(), HandlerError>> {
        if event.meta.event_id == self.in_handle {
            return Box::pin(async move { panic!("the handler fails on {}", event.meta.event_id) });
        }
        self.inner.handle(event)
    }
}

/// Events of one partition, more than its window and more than the handler slots: a slot or a prefix that a
/// panic kept would hold every one behind it.
fn small_deliveries(n: usize) -> Vec<Delivery> {
    (0..n).map(|i| Delivery::new(format!("{{\"n\":{i}}}").into_bytes())).collect()
}

/// Waits until the group's committed offset of every inbound partition is its high watermark.
async fn wait_until_committed_to_the_end(stack: &TestStack) {
    eventually(Duration::from_secs(30), "the committed offset reaches the end of the partition", || async {
        stack.consumer_metric(0, "hookline_consumer_assigned_partitions", &[]).await >= 1.0
            && stack.consumer_metric(0, "hookline_consumer_lag_records", &[]).await == 0.0
            && stack.consumer_metric(0, "hookline_consumer_in_flight_records", &[]).await == 0.0
    })
    .await;
}

#[tokio::test]
async fn a_handler_that_panics_on_one_event_is_dead_lettered_after_its_retries_and_its_partition_moves_on() {
    let alert = FakeEndpoint::start().await;
    let alert_url = alert.url("/alert");
    let mut stack = TestStack::builder()
        .partitions(1)
        .consumer_config(move |config| {
            config.retry.max_attempts = 3;
            config.processing.max_in_flight = 2;
            config.processing.partition_window = 4;
            config.alert.url = Some(alert_url.clone());
            config.alert.interval_s = 1;
        })
        .build()
        .await;
    let in_handle = Delivery::new(&br#"{"panics":"in the handler"}"#[..]);
    let in_name_for = Delivery::new(&br#"{"panics":"before the handler"}"#[..]);
    let fine = small_deliveries(12);
    let handler = Panicking {
        inner: stack.handler.clone(),
        in_handle: in_handle.delivery_id.clone(),
        in_name_for: in_name_for.delivery_id.clone(),
    };
    stack.start_consumer_with(stack.consumer_config.clone(), Arc::new(handler)).await;
    stack.post_accepted(&in_handle).await;
    stack.post_accepted(&in_name_for).await;
    for delivery in &fine {
        stack.post_accepted(delivery).await;
    }

    eventually(Duration::from_secs(60), "both panicking events dead-lettered", || async {
        stack.records(&stack.kafka.dlq_topic).await.len() >= 2
    })
    .await;
    stack.wait_until_handled(14).await;
    for delivery in &fine {
        assert_eq!(
            stack.handler.count(&delivery.delivery_id),
            1,
            "every other event of the partition is processed once"
        );
    }
    let dlq = stack.records(&stack.kafka.dlq_topic).await;
    assert_eq!(dlq.len(), 2, "each panicking event dead-lettered once");
    let mut by_event: HashMap<String, &OwnedMessage> = HashMap::new();
    for entry in &dlq {
        by_event.insert(read::inbound(entry).meta.event_id, entry);
    }
    for (delivery, said) in [(&in_handle, "handler panicked: the handler fails on"), (&in_name_for, "panicked: ")] {
        let entry = by_event.get(&delivery.delivery_id).expect("its dead letter");
        assert_eq!(entry.payload(), Some(delivery.body.as_ref()), "raw body unchanged");
        let failure = read::dead_letter_failure(*entry);
        assert_eq!(failure.error_class, "retryable_exhausted");
        assert_eq!(failure.attempts, 3, "dead-lettered after its retries");
        assert!(failure.error.contains(said), "{}", failure.error);
    }
    assert_eq!(stack.consumer_metric(0, "hookline_consumer_panics_total", &[("source", "github")]).await, 6.0);
    assert_eq!(stack.consumer_metric(0, "hookline_consumer_retries_total", &[]).await, 4.0, "two retries each");
    // The slots are back and the prefix moved past both: nothing is in flight and nothing is left uncommitted.
    wait_until_committed_to_the_end(&stack).await;
    eventually(Duration::from_secs(10), "the dead letters alerted", || async {
        alert.requests().iter().any(|(_, body)| String::from_utf8_lossy(body).contains("retryable_exhausted"))
    })
    .await;
    stack.shutdown().await;
}

/// Sets `max.message.bytes` of `topic`.
async fn limit_topic(stack: &TestStack, topic: &str, max_message_bytes: usize) {
    let admin: AdminClient<DefaultClientContext> = admin_config(&stack.kafka).create().expect("admin client");
    let value = max_message_bytes.to_string();
    let alter = AlterConfig::new(ResourceSpecifier::Topic(topic)).set("max.message.bytes", &value);
    let results = admin.alter_configs([&alter], &AdminOptions::new()).await.expect("alter configs");
    for result in results {
        result.expect("topic config altered");
    }
}

#[tokio::test]
async fn a_record_too_large_for_its_retry_copy_is_dead_lettered_by_reference_re_driven_and_nothing_stalls() {
    let mut stack = TestStack::builder()
        .partitions(1)
        .consumer_config(|config| config.processing.partition_window = 4)
        .build()
        .await;
    // The inbound topic takes what the gateway accepts (64 KiB here); the retry topic, as a deployment that did
    // not raise it would have it, takes much less. Random hex: lz4 cannot shrink it under the limit.
    limit_topic(&stack, &stack.consumer_config.service_retry_topic(), 16 * 1024).await;
    stack.start_consumer().await;
    let random: String = (0..1250).map(|_| uuid::Uuid::new_v4().simple().to_string()).collect();
    let large = Delivery::new(format!("{{\"blob\":\"{random}\"}}").into_bytes());
    stack.handler.fail_with(&large.delivery_id, [HandlerError::retryable("downstream 503")]);
    let fine = small_deliveries(12);
    stack.post_accepted(&large).await;
    for delivery in &fine {
        stack.post_accepted(delivery).await;
    }

    eventually(Duration::from_secs(60), "the large event dead-lettered", || async {
        !stack.records(&stack.kafka.dlq_topic).await.is_empty()
    })
    .await;
    stack.wait_until_handled(13).await;
    for delivery in &fine {
        assert_eq!(
            stack.handler.count(&delivery.delivery_id),
            1,
            "every other event of the partition is processed once"
        );
    }
    let dlq = stack.records(&stack.kafka.dlq_topic).await;
    assert_eq!(dlq.len(), 1);
    let entry = &dlq[0];
    let original = stack
        .inbound_records()
        .await
        .into_iter()
        .find(|record| read::inbound(record).meta.event_id == large.delivery_id)
        .expect("the original record");
    assert!(entry.payload().unwrap_or_default().is_empty(), "dead-lettered by reference: no body");
    // With no body of its own, the size it is listed with is the body it points to; and its event id, with no
    // event id header, is the by-reference one.
    let listed = read::dead_letter(entry);
    assert_eq!(listed.body_bytes, large.body.len(), "the length of the body it points to");
    assert_eq!(listed.event_id.as_deref(), Some(large.delivery_id.as_str()));
    assert_eq!(listed.source.as_deref(), Some("github"));
    let failure = read::dead_letter_failure(entry);
    let origin =
        Origin { topic: stack.kafka.inbound_topic.clone(), partition: original.partition(), offset: original.offset() };
    assert_eq!(failure.origin, origin);
    assert_eq!(failure.error_class, "retryable_exhausted");
    assert_eq!(failure.service, stack.consumer_config.service_name());
    assert!(failure.error.contains("downstream 503") && failure.error.contains("too large"), "{}", failure.error);
    assert!(
        !read::headers(entry).iter().any(|header| header.name == raw::EVENT_ID),
        "an older replayer cannot re-drive the empty body as the event"
    );
    wait_until_committed_to_the_end(&stack).await;

    // The replayer re-drives it with the body it reads from the original position, checked, to the same path.
    let replayer =
        Replayer::new(ReplayerConfig { kafka: stack.kafka.clone(), ..ReplayerConfig::default() }).expect("replayer");
    let listed = replayer.list(&Filter::default()).await.expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].entry.event_id.as_deref(), Some(large.delivery_id.as_str()), "listed under its event id");
    assert_eq!(listed[0].entry.body_bytes, large.body.len(), "listed with the size of the body it points to");
    let id = listed[0].entry.id.clone();
    let request = ReplayRequest { ids: vec![id.clone()], by: "test".into(), ..ReplayRequest::default() };
    let report = replayer.replay(&request).await.expect("replay");
    assert_eq!(report.done, vec![id.clone()], "{report:?}");
    eventually(Duration::from_secs(30), "the re-driven event processed", || async {
        stack.handler.count(&large.delivery_id) == 1
    })
    .await;
    let processed = stack.handler.successes().into_iter().find(|event| event.meta.event_id == large.delivery_id);
    assert_eq!(processed.expect("processed").body, large.body, "the original body, unchanged");
    eventually(Duration::from_secs(30), "the entry marked succeeded", || async {
        replayer.list(&Filter::default()).await.expect("list")[0].status == Status::Succeeded
    })
    .await;
    stack.shutdown().await;
}
