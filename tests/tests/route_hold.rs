//! Holding a route: an operator's pause (across instances, through a restart) and an open breaker on a source
//! in its own topic. Counts, not timings: what was processed while held, and that every event ends processed
//! exactly once after the resume or the heal.

use std::{sync::Arc, time::Duration};

use hookline_common::{
    kafka::{TopicSpec, ensure_topics},
    wire::EventMeta,
};
use hookline_consumer::handler::HandlerError;
use hookline_dlq_replayer::{
    ReplayerConfig,
    ops::{PauseRequest, Replayer},
};
use hookline_tests::{TestStack, eventually};
use rdkafka::message::OwnedHeaders;

fn meta(source: &str, event_id: &str) -> EventMeta {
    EventMeta {
        source: source.into(),
        event_id: event_id.into(),
        event_type: Some("push".into()),
        received_at_ms: 1_700_000_000_000,
        content_type: Some("application/json".into()),
        secret_id: "primary".into(),
        ordering_key: None,
    }
}

fn record(partition: i32, meta: &EventMeta) -> (i32, String, OwnedHeaders, Vec<u8>) {
    (partition, meta.record_key().to_owned(), meta.to_headers(), b"{}".to_vec())
}

fn events(source: &str, prefix: &str, n: usize) -> Vec<(i32, String, OwnedHeaders, Vec<u8>)> {
    (0..n).map(|i| record(i32::try_from(i % 2).expect("partition"), &meta(source, &format!("{prefix}-{i}")))).collect()
}

async fn paused_gauge(stack: &TestStack, index: usize, route: &str) -> f64 {
    stack.consumer_metric(index, "hookline_consumer_route_paused", &format!("route=\"{route}\"")).await
}

fn replayer(stack: &TestStack) -> Replayer {
    Replayer::new(ReplayerConfig { kafka: stack.kafka.clone(), ..ReplayerConfig::default() }).expect("replayer")
}

#[tokio::test]
async fn a_route_paused_by_hand_processes_nothing_on_any_instance_even_one_restarted_then_everything_once() {
    const N: usize = 60;
    let mut stack = TestStack::builder()
        .partitions(2)
        .consumer_config(|config| {
            // A small window: the paused route's records fill it, so they take the copy path of shared partitions
            // too, and the other route must still move on.
            config.processing.partition_window = 8;
            config.processing.defer_delay_ms = 500;
        })
        .consumers(2)
        .build()
        .await;
    let service = stack.consumer_config.service_name().to_owned();
    let replayer = replayer(&stack);
    let request = PauseRequest {
        service: service.clone(),
        route: "maintained".to_owned(),
        reason: "downstream maintenance".to_owned(),
        by: "test".to_owned(),
    };
    let refused = replayer.pause(&PauseRequest { reason: String::new(), ..request.clone() }).await;
    assert!(refused.is_err(), "a pause needs a reason");
    let written = replayer.pause(&request).await.expect("paused");
    assert!(written.paused);
    let listed = replayer.pauses().await.expect("pauses");
    assert_eq!(listed.len(), 1);
    assert_eq!((listed[0].by.as_str(), listed[0].reason.as_str()), ("test", "downstream maintenance"));
    for index in 0..2 {
        eventually(Duration::from_secs(30), "every instance obeys the pause", || async {
            paused_gauge(&stack, index, "maintained").await == 1.0
        })
        .await;
    }

    stack.produce_raw_batch(events("maintained", "paused", N)).await;
    stack.produce_raw_batch(events("github", "flowing", N)).await;
    eventually(Duration::from_secs(60), "the other route's events are processed while one is paused", || async {
        (0..N).all(|i| stack.handler.count(&format!("flowing-{i}")) == 1)
    })
    .await;

    // One instance restarts while the route is paused: it obeys from the control topic before its first record.
    stack.stop_consumer(1).await;
    let restarted = stack.start_consumer().await;
    eventually(Duration::from_secs(30), "the restarted instance obeys the pause", || async {
        paused_gauge(&stack, restarted, "maintained").await == 1.0
    })
    .await;
    stack.produce_raw_batch(events("github", "after-restart", N)).await;
    eventually(Duration::from_secs(60), "the others keep flowing after the restart", || async {
        (0..N).all(|i| stack.handler.count(&format!("after-restart-{i}")) == 1)
    })
    .await;
    let called_while_paused: usize = (0..N).map(|i| stack.handler.attempts(&format!("paused-{i}"))).sum();
    assert_eq!(called_while_paused, 0, "nothing of a paused route is called, on any instance");

    let resumed = replayer.resume(&PauseRequest { reason: "maintenance over".to_owned(), ..request.clone() }).await;
    assert!(!resumed.expect("resumed").paused);
    assert!(replayer.pauses().await.expect("pauses").is_empty());
    eventually(Duration::from_secs(90), "every paused event is processed after the resume", || async {
        (0..N).all(|i| stack.handler.count(&format!("paused-{i}")) >= 1)
    })
    .await;
    // A little longer, so that a second copy would have had time to land.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for i in 0..N {
        assert_eq!(stack.handler.count(&format!("paused-{i}")), 1, "paused-{i} processed exactly once");
        assert_eq!(stack.handler.count(&format!("flowing-{i}")), 1, "flowing-{i} processed exactly once");
    }
    stack.shutdown().await;
}

#[tokio::test]
async fn a_failing_source_in_its_own_topic_is_held_without_copies_through_a_restart_and_processed_once_after_the_heal()
{
    const N_FAILING: usize = 40;
    const N_HEALTHY: usize = 100;
    let source_topic = Arc::new(std::sync::Mutex::new(String::new()));
    let topic_for_config = source_topic.clone();
    let mut stack = TestStack::builder()
        .partitions(2)
        .consumer_config(move |config| {
            let topic = format!("{}-source-failing", config.kafka.inbound_topic);
            *topic_for_config.lock().expect("lock") = topic.clone();
            config.service.source_topics = vec![topic];
            config.processing.route_max_in_flight = 4;
            config.processing.breaker_failures = 3;
            config.processing.breaker_cooldown_ms = 1_000;
            // High enough that no event is dead-lettered during the outage.
            config.retry.max_attempts = 50;
        })
        .build()
        .await;
    let topic = source_topic.lock().expect("lock").clone();
    let spec = TopicSpec { name: topic.clone(), partitions: 2, compacted: false };
    ensure_topics(&stack.kafka, &[spec], 1).await.expect("source topic");
    let first = stack.start_consumer().await;
    stack.wait_until_assigned().await;
    for i in 0..N_FAILING {
        stack.handler.fail_with(&format!("failing-{i}"), (0..10_000).map(|_| HandlerError::retryable("503")));
    }
    stack.produce_raw_batch_to(&topic, events("failing", "failing", N_FAILING)).await;
    stack.produce_raw_batch(events("github", "healthy", N_HEALTHY)).await;
    eventually(Duration::from_secs(60), "the healthy source is processed while the other fails", || async {
        (0..N_HEALTHY).all(|i| stack.handler.count(&format!("healthy-{i}")) == 1)
    })
    .await;
    eventually(Duration::from_secs(30), "the failing route's breaker opens", || async {
        stack.consumer_metric(first, "hookline_consumer_route_breaker_open", "route=\"failing\"").await == 1.0
    })
    .await;
    let copies = stack.consumer_metric(first, "hookline_consumer_deferred_total", "reason=\"breaker_open\"").await;
    assert_eq!(copies, 0.0, "records of a source topic wait in memory: none is copied to the retry topic");

    // A restart in the middle of the outage: the new instance holds them too.
    stack.stop_consumer(first).await;
    let second = stack.start_consumer().await;
    eventually(Duration::from_secs(60), "the restarted consumer's breaker opens again", || async {
        stack.consumer_metric(second, "hookline_consumer_route_breaker_open", "route=\"failing\"").await == 1.0
    })
    .await;
    eventually(Duration::from_secs(10), "its records wait in memory", || async {
        stack.consumer_metric(second, "hookline_consumer_route_waiting_records", "route=\"failing\"").await > 0.0
    })
    .await;
    let copies = stack.consumer_metric(second, "hookline_consumer_deferred_total", "reason=\"breaker_open\"").await;
    assert_eq!(copies, 0.0);

    for i in 0..N_FAILING {
        stack.handler.heal(&format!("failing-{i}"));
    }
    eventually(Duration::from_secs(90), "every held event is processed once the downstream heals", || async {
        (0..N_FAILING).all(|i| stack.handler.count(&format!("failing-{i}")) >= 1)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    for i in 0..N_FAILING {
        assert_eq!(stack.handler.count(&format!("failing-{i}")), 1, "failing-{i} processed exactly once");
    }
    stack.shutdown().await;
}
