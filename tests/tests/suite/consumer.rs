//! The consumer's guarantees against the real broker and Redis: every event processed once in effect, failures
//! retried or dead-lettered with their metadata, never skipped, never processed twice.

use std::{collections::HashSet, time::Duration};

use bytes::Bytes;
use hookline_common::wire::{EntryStatus, kafka::table_of};
use hookline_consumer::handler::HandlerError;
use hookline_record::{Original, inbound::InboundRecord, retry::Origin};
use hookline_tests::{Delivery, FakeEndpoint, TestStack, eventually, push_meta, read};
use rdkafka::{
    Message,
    message::{Header, OwnedHeaders},
};

/// A re-drive of `event_id` from DLQ entry `entry`, as the replayer builds it.
fn redrive(stack: &TestStack, event_id: &str, entry: &str, body: &'static [u8]) -> hookline_record::Outgoing {
    let record = InboundRecord { replay_of: Some(entry.to_owned()), ..InboundRecord::new(push_meta(event_id)) };
    record.encode(&stack.kafka.inbound_topic, Bytes::from_static(body))
}

#[tokio::test]
async fn retryable_failure_then_success_is_processed_once() {
    let stack = TestStack::builder().consumer().build().await;
    let delivery = Delivery::new(&br#"{"flaky":true}"#[..]);
    stack.handler.fail_with(
        &delivery.delivery_id,
        [HandlerError::retryable("downstream 503"), HandlerError::retryable("downstream timeout")],
    );
    stack.post_accepted(&delivery).await;
    stack.wait_until_handled(1).await;
    assert_eq!(stack.handler.attempts(&delivery.delivery_id), 3);
    assert_eq!(stack.handler.count(&delivery.delivery_id), 1);
    assert_eq!(stack.consumer_events("processed").await, 1);
    assert_eq!(stack.consumer_metric(0, "hookline_consumer_retries_total", &[]).await, 2.0);
    // Its age when processed, from the gateway's acceptance: observed once, after both retries' backoff.
    assert_eq!(stack.consumer_metric(0, "hookline_consumer_event_age_seconds_count", &[]).await, 1.0);
    assert!(stack.consumer_metric(0, "hookline_consumer_event_age_seconds_sum", &[]).await > 0.0);
    assert!(stack.records(&stack.kafka.dlq_topic).await.is_empty(), "nothing dead-lettered");
    stack.shutdown().await;
}

/// A stack with a consumer whose alert webhook (every second) is a recording endpoint.
async fn stack_with_alerts() -> (FakeEndpoint, TestStack) {
    let alert = FakeEndpoint::start().await;
    let alert_url = alert.url("/alert");
    let stack = TestStack::builder()
        .consumer_config(move |config| {
            config.alert.url = Some(alert_url.clone());
            config.alert.interval_s = 1;
        })
        .consumer()
        .build()
        .await;
    (alert, stack)
}

/// The alert webhook's first message text.
async fn first_alert_text(alert: &FakeEndpoint) -> String {
    eventually(Duration::from_secs(10), "alert webhook called", || async { !alert.requests().is_empty() }).await;
    let (_, body) = &alert.requests()[0];
    let alert_body: serde_json::Value = serde_json::from_slice(body).expect("alert JSON");
    alert_body["text"].as_str().expect("Slack-compatible text").to_owned()
}

#[tokio::test]
async fn poison_event_lands_in_the_dlq_with_its_metadata_and_the_alert_fires() {
    let (alert, stack) = stack_with_alerts().await;
    let poison = Delivery::new(&b"{\"bad\":  true }"[..]);
    stack.handler.poison(&poison.delivery_id);
    let fine = Delivery::new(&br#"{"ok":1}"#[..]);
    stack.post_accepted(&poison).await;
    stack.post_accepted(&fine).await;
    stack.wait_until_handled(2).await;

    assert_eq!(stack.handler.count(&fine.delivery_id), 1, "the next event is not blocked by the poison one");
    assert_eq!(stack.handler.attempts(&poison.delivery_id), 1, "poison is not retried");
    let dlq = stack.records(&stack.kafka.dlq_topic).await;
    assert_eq!(dlq.len(), 1);
    let entry = &dlq[0];
    assert_eq!(entry.payload(), Some(poison.body.as_ref()), "raw body unchanged");
    assert_eq!(entry.key(), Some(poison.delivery_id.as_bytes()), "keyed by event id");
    let inbound = stack.inbound_records().await;
    let original = inbound.iter().find(|r| r.key() == Some(poison.delivery_id.as_bytes())).expect("original");
    assert_eq!(read::inbound(entry), read::inbound(original), "the original's headers kept");
    let failure = read::dead_letter_failure(entry);
    let origin =
        Origin { topic: stack.kafka.inbound_topic.clone(), partition: original.partition(), offset: original.offset() };
    assert_eq!(failure.origin, origin);
    assert_eq!(failure.consumer_group, stack.kafka.group_id);
    assert_eq!((failure.handler.as_str(), failure.attempts), ("test", 1));
    assert_eq!(failure.error_class, "poison");
    assert!(failure.error.contains("test poison"), "{}", failure.error);
    assert!(failure.first_failure_at_ms <= failure.last_failure_at_ms);
    assert!(!failure.consumer_version.is_empty());
    // Byte for byte what the record types write: the original's key, body and headers, then the failure's
    // (the DLQ format version among them), signed.
    let original_headers = table_of(original.headers());
    let copy = Original {
        key: original.key().map(Bytes::copy_from_slice),
        body: original.payload().map(Bytes::copy_from_slice),
        headers: &original_headers,
    };
    let expected = stack.signed_record(failure.encode(&stack.kafka.dlq_topic, copy));
    assert_eq!(read::headers(entry), expected.headers, "the dead letter as DeadLetterFailure encodes it");
    assert_eq!(
        stack.consumer_metric(0, "hookline_consumer_dead_lettered_total", &[("error_class", "poison")]).await,
        1.0
    );

    let text = first_alert_text(&alert).await;
    assert!(text.contains("1 event(s) dead-lettered") && text.contains("github: 1 poison"), "{text}");
    assert!(text.contains(&poison.delivery_id), "{text}");
    stack.shutdown().await;
}

/// An event id is whatever the sender's signed bytes say: in the alert it is escaped and shown as code, so it
/// cannot mention `@channel` or disguise a link during an incident.
#[tokio::test]
async fn an_event_id_chosen_by_the_sender_cannot_mention_or_link_in_the_alert() {
    let (alert, stack) = stack_with_alerts().await;
    let hostile = "<!channel> <https://evil.example/|Open the DLQ console>";
    stack.handler.poison(hostile);
    let meta = push_meta(hostile);
    stack.produce_raw(0, meta.record_key(), hookline_common::wire::event_headers(&meta), b"{}").await;
    stack.wait_until_handled(1).await;
    let text = first_alert_text(&alert).await;
    assert!(
        text.contains("`&lt;!channel&gt; &lt;https://evil.example/|Open the DLQ console&gt;`"),
        "the id escaped, as code: {text}"
    );
    assert!(!text.contains("<!channel>") && !text.contains("<https://"), "{text}");
    stack.shutdown().await;
}

#[tokio::test]
async fn retryable_failures_past_the_budget_are_dead_lettered_with_their_attempts() {
    let stack = TestStack::builder().consumer_config(|config| config.retry.max_attempts = 3).consumer().build().await;
    let delivery = Delivery::new(&br#"{"down":true}"#[..]);
    stack.handler.fail_with(&delivery.delivery_id, (0..10).map(|n| HandlerError::retryable(format!("still down {n}"))));
    stack.post_accepted(&delivery).await;
    stack.wait_until_handled(1).await;
    assert_eq!(stack.handler.attempts(&delivery.delivery_id), 3);
    assert_eq!(stack.handler.count(&delivery.delivery_id), 0);
    let dlq = stack.records(&stack.kafka.dlq_topic).await;
    assert_eq!(dlq.len(), 1);
    let failure = read::dead_letter_failure(&dlq[0]);
    assert_eq!(failure.error_class, "retryable_exhausted");
    assert_eq!(failure.attempts, 3);
    assert_eq!(failure.error, "still down 2");
    stack.shutdown().await;
}

#[tokio::test]
async fn record_no_gateway_wrote_is_dead_lettered_not_skipped() {
    let stack = TestStack::builder().consumer().build().await;
    let headers = OwnedHeaders::new().insert(Header { key: "unrelated", value: Some("x") });
    stack.produce_raw(0, "k", headers, b"not from a gateway").await;
    stack.wait_until_handled(1).await;
    assert!(stack.handler.calls().is_empty(), "never handed to the handler");
    let dlq = stack.records(&stack.kafka.dlq_topic).await;
    assert_eq!(dlq.len(), 1);
    assert_eq!(dlq[0].payload(), Some(&b"not from a gateway"[..]));
    assert_eq!(read::dead_letter_failure(&dlq[0]).error_class, "poison");
    let headers = read::headers(&dlq[0]);
    let unrelated: Vec<_> = headers.iter().filter(|h| h.name == "unrelated").map(|h| h.value).collect();
    assert_eq!(unrelated, vec![Some(&b"x"[..])], "its headers kept");
    stack.shutdown().await;
}

#[tokio::test]
async fn same_event_delivered_concurrently_to_two_consumers_is_processed_once() {
    let stack = TestStack::builder().partitions(2).consumers(2).build().await;
    stack.wait_until_assigned().await;
    stack.handler.set_delay(Duration::from_millis(1500));
    // The same event on both partitions: each consumer owns one, so both see it at the same time.
    for partition in 0..2 {
        stack
            .produce_raw(
                partition,
                "same-event",
                hookline_common::wire::event_headers(&push_meta("same-event")),
                br#"{"n":1}"#,
            )
            .await;
    }
    stack.wait_until_handled(2).await;
    assert_eq!(stack.handler.count("same-event"), 1);
    assert_eq!(stack.handler.attempts("same-event"), 1, "the second consumer waited on the claim, then skipped");
    assert_eq!(stack.consumer_events("duplicate").await, 1);
    stack.shutdown().await;
}

#[tokio::test]
async fn two_consumers_split_the_partitions_and_together_process_every_event_once() {
    let stack = TestStack::builder().partitions(4).consumers(2).build().await;
    stack.wait_until_assigned().await;
    let deliveries: Vec<Delivery> = (0..40).map(|n| Delivery::new(format!("{{\"n\":{n}}}").into_bytes())).collect();
    for delivery in &deliveries {
        stack.post_accepted(delivery).await;
    }
    stack.wait_until_handled(40).await;
    for delivery in &deliveries {
        assert_eq!(stack.handler.count(&delivery.delivery_id), 1, "{}", delivery.delivery_id);
    }
    for index in 0..2 {
        let processed =
            stack.consumer_metric(index, "hookline_consumer_events_total", &[("outcome", "processed")]).await;
        assert!(processed > 0.0, "consumer {index} processed its share");
    }
    stack.shutdown().await;
}

#[tokio::test]
async fn rebalance_during_processing_neither_loses_nor_double_processes() {
    let mut stack = TestStack::builder().partitions(4).consumer().build().await;
    stack.handler.set_delay(Duration::from_millis(100));
    let deliveries: Vec<Delivery> = (0..30).map(|n| Delivery::new(format!("{{\"n\":{n}}}").into_bytes())).collect();
    for delivery in &deliveries {
        stack.post_accepted(delivery).await;
    }
    eventually(Duration::from_secs(30), "processing under way", || async { stack.handler.successes().len() >= 3 })
        .await;
    // A second member joins mid-stream (partitions move), then the first leaves (they move back).
    let second = stack.start_consumer().await;
    eventually(Duration::from_secs(30), "more processed after the join", || async {
        stack.handler.successes().len() >= 12
    })
    .await;
    stack.stop_consumer(0).await;
    eventually(Duration::from_secs(60), "every event processed", || async {
        let processed: HashSet<String> = stack.handler.successes().into_iter().map(|e| e.meta.event_id).collect();
        deliveries.iter().all(|d| processed.contains(&d.delivery_id))
    })
    .await;
    for delivery in &deliveries {
        assert_eq!(stack.handler.count(&delivery.delivery_id), 1, "{}", delivery.delivery_id);
    }
    eventually(Duration::from_secs(30), "the remaining member owns the partitions", || async {
        stack.consumer_metric(second, "hookline_consumer_assigned_partitions", &[]).await >= 4.0
    })
    .await;
    stack.shutdown().await;
}

#[tokio::test]
async fn replayed_event_takes_the_same_path_and_its_entry_is_recorded() {
    let stack = TestStack::builder().consumer().build().await;
    stack.produce_record(0, redrive(&stack, "replayed-1", "dlq:0:7", br#"{"n":1}"#)).await;
    stack.wait_until_handled(1).await;
    // The same entry re-driven again: deduped, and still recorded as succeeded.
    stack.produce_record(0, redrive(&stack, "replayed-1", "dlq:0:8", br#"{"n":1}"#)).await;
    stack.wait_until_handled(2).await;
    assert_eq!(stack.handler.count("replayed-1"), 1);
    assert_eq!(stack.handler.calls()[0].replay_of.as_deref(), Some("dlq:0:7"));
    // A replay is old by nature: it is not counted in the age the lateness alert watches.
    assert_eq!(stack.consumer_metric(0, "hookline_consumer_event_age_seconds_count", &[]).await, 0.0);

    let statuses: Vec<_> = stack.records(&stack.kafka.dlq_status_topic).await.iter().map(read::status).collect();
    assert_eq!(statuses.len(), 2);
    assert_eq!(statuses[0].0, "dlq:0:7");
    assert_eq!(statuses[0].1.status, EntryStatus::Succeeded);
    assert_eq!(statuses[0].1.event_id.as_deref(), Some("replayed-1"));
    assert_eq!(statuses[1].0, "dlq:0:8");
    assert_eq!(statuses[1].1.status, EntryStatus::Succeeded);
    assert_eq!(statuses[1].1.note.as_deref(), Some("already processed"));
    stack.shutdown().await;
}

#[tokio::test]
async fn replayed_event_that_fails_again_links_its_new_entry() {
    let stack = TestStack::builder().consumer().build().await;
    stack.handler.poison("replayed-2");
    stack.produce_record(0, redrive(&stack, "replayed-2", "dlq:0:3", b"{}")).await;
    stack.wait_until_handled(1).await;
    let dlq = stack.records(&stack.kafka.dlq_topic).await;
    assert_eq!(dlq.len(), 1);
    assert_eq!(read::inbound(&dlq[0]).replay_of.as_deref(), Some("dlq:0:3"), "new entry links the old");
    let new_entry = format!("{}:{}:{}", stack.kafka.dlq_topic, dlq[0].partition(), dlq[0].offset());
    let status = stack.records(&stack.kafka.dlq_status_topic).await;
    assert_eq!(status.len(), 1);
    let (_, record) = read::status(&status[0]);
    assert_eq!(record.status, EntryStatus::FailedAgain);
    assert_eq!(record.new_entry, Some(new_entry));
    stack.shutdown().await;
}

#[tokio::test]
async fn http_handler_retries_5xx_then_succeeds_and_dead_letters_4xx() {
    let downstream = FakeEndpoint::start().await;
    let url = downstream.url("/hooks");
    let stack = TestStack::builder()
        .consumer_config(move |config| {
            config.handler.kind = "http".into();
            config.handler.url = Some(url.clone());
        })
        .build()
        .await;
    // The stack's consumers use the TestHandler; this one runs the config's own router, as the binary does.
    let loaded = hookline_consumer::Loaded::build(stack.consumer_config.clone()).expect("valid config");
    let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let shutdown = tokio_util::sync::CancellationToken::new();
    let consumer = tokio::spawn(hookline_consumer::run(loaded, admin, shutdown.clone()));

    downstream.respond_with([503, 500]);
    let flaky = Delivery::new(&br#"{"n":"flaky"}"#[..]);
    stack.post_accepted(&flaky).await;
    eventually(Duration::from_secs(20), "downstream got the event three times", || async {
        downstream.requests().len() >= 3
    })
    .await;
    let (headers, body) = &downstream.requests()[2];
    assert_eq!(body, &flaky.body, "the raw body is posted");
    assert_eq!(headers.get("x-hookline-event-id").and_then(|v| v.to_str().ok()), Some(flaky.delivery_id.as_str()));

    downstream.respond_with([422]);
    let rejected = Delivery::new(&br#"{"n":"rejected"}"#[..]);
    stack.post_accepted(&rejected).await;
    eventually(Duration::from_secs(20), "4xx dead-lettered", || async {
        !stack.records(&stack.kafka.dlq_topic).await.is_empty()
    })
    .await;
    let dlq = stack.records(&stack.kafka.dlq_topic).await;
    assert_eq!(dlq.len(), 1, "only the 4xx event");
    assert_eq!(dlq[0].key(), Some(rejected.delivery_id.as_bytes()));
    let failure = read::dead_letter_failure(&dlq[0]);
    assert_eq!((failure.error_class.as_str(), failure.handler.as_str()), ("poison", "http"));
    assert_eq!(downstream.requests().len(), 4, "a 4xx is not retried");
    shutdown.cancel();
    consumer.await.expect("task").expect("consumer ran cleanly");
    stack.shutdown().await;
}

#[tokio::test]
async fn dedupe_works_against_redis_cluster() {
    // Needs `scripts/stack start-redis-cluster` (scripts/test starts it).
    let stack = TestStack::builder()
        .consumer_config(|config| {
            config.redis.url = hookline_tests::redis_cluster_urls();
            config.redis.cluster = true;
        })
        .consumer()
        .build()
        .await;
    let deliveries: Vec<Delivery> = (0..6).map(|n| Delivery::new(format!("{{\"n\":{n}}}").into_bytes())).collect();
    stack.handler.fail_with(&deliveries[0].delivery_id, [HandlerError::retryable("once")]);
    for delivery in deliveries.iter().chain(deliveries.iter()) {
        stack.post_accepted(delivery).await;
    }
    stack.wait_until_handled(12).await;
    for delivery in &deliveries {
        assert_eq!(stack.handler.count(&delivery.delivery_id), 1, "{}", delivery.delivery_id);
    }
    assert_eq!(stack.consumer_events("duplicate").await, 6);
    assert_eq!(stack.handler.attempts(&deliveries[0].delivery_id), 2, "released after the failure, claimed again");
    stack.shutdown().await;
}
