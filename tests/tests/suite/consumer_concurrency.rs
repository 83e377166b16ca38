//! The consumer's window: many records of one partition in the handler at once, routes isolated from each other
//! (deferral of a saturated route's records, a breaker per route), ordering keys respected, rebalances with full
//! windows losing and doubling nothing. Counts, not timings.

use std::{collections::HashMap, time::Duration};

use hookline_common::wire::EventMeta;
use hookline_consumer::{
    config::{HandlerConfig, RouteConfig},
    handler::HandlerError,
};
use hookline_tests::{TestStack, eventually, read};
use rdkafka::{Message, message::OwnedHeaders};

fn meta(source: &str, event_id: &str, ordering_key: Option<&str>) -> EventMeta {
    EventMeta {
        source: source.into(),
        event_id: event_id.into(),
        event_type: Some("push".into()),
        received_at_ms: 1_700_000_000_000,
        content_type: Some("application/json".into()),
        secret_id: "primary".into(),
        ordering_key: ordering_key.map(str::to_owned),
    }
}

fn record(partition: i32, meta: &EventMeta) -> (i32, String, OwnedHeaders, Vec<u8>) {
    (partition, meta.record_key().to_owned(), hookline_common::wire::event_headers(meta), b"{}".to_vec())
}

/// The route's breaker gauge on consumer 0.
async fn breaker_open(stack: &TestStack, route: &str) -> f64 {
    stack.consumer_metric(0, "hookline_consumer_route_breaker_open", &[("route", route)]).await
}

async fn deferred(stack: &TestStack, source: &str) -> f64 {
    stack.consumer_metric(0, "hookline_consumer_deferred_total", &[("source", source)]).await
}

#[tokio::test]
async fn failing_source_does_not_stall_a_healthy_one_its_breaker_opens_and_its_events_wait_for_the_heal() {
    const N_FAILING: usize = 30;
    const N_HEALTHY: usize = 200;
    let stack = TestStack::builder()
        .partitions(2)
        .consumer_config(|config| {
            config.processing.max_in_flight = 16;
            config.processing.route_max_in_flight = 4;
            config.processing.partition_window = 16;
            config.processing.breaker_failures = 3;
            config.processing.breaker_cooldown_ms = 1_000;
            // High enough that the probes made during the outage cannot dead-letter an event.
            config.retry.max_attempts = 50;
        })
        .consumer()
        .build()
        .await;
    let mut records = Vec::new();
    for n in 0..N_FAILING {
        let id = format!("failing-{n}");
        stack.handler.fail_with(&id, (0..1_000).map(|_| HandlerError::retryable("downstream 503")));
        records.push(record(i32::try_from(n % 2).expect("partition"), &meta("failing", &id, None)));
    }
    for n in 0..N_HEALTHY {
        records.push(record(i32::try_from(n % 2).expect("partition"), &meta("github", &format!("healthy-{n}"), None)));
    }
    stack.produce_raw_batch(records).await;

    eventually(Duration::from_secs(60), "every healthy event processed", || async {
        (0..N_HEALTHY).all(|n| stack.handler.count(&format!("healthy-{n}")) == 1)
    })
    .await;
    eventually(Duration::from_secs(30), "the failing route's breaker is open and its records deferred", || async {
        breaker_open(&stack, "failing").await == 1.0 && deferred(&stack, "failing").await > 0.0
    })
    .await;
    assert!(stack.records(&stack.kafka.dlq_topic).await.is_empty(), "an outage burns no event into the DLQ");

    // The downstream is back: the next probe closes the breaker and every deferred event is processed, once.
    for n in 0..N_FAILING {
        stack.handler.heal(&format!("failing-{n}"));
    }
    eventually(Duration::from_secs(60), "every failing event processed after the heal", || async {
        (0..N_FAILING).all(|n| stack.handler.count(&format!("failing-{n}")) >= 1)
    })
    .await;
    eventually(Duration::from_secs(30), "the breaker closed", || async {
        breaker_open(&stack, "failing").await == 0.0
    })
    .await;
    for n in 0..N_FAILING {
        assert_eq!(stack.handler.count(&format!("failing-{n}")), 1, "failing-{n} processed once");
    }
    for n in 0..N_HEALTHY {
        assert_eq!(stack.handler.count(&format!("healthy-{n}")), 1, "healthy-{n} processed once");
    }
    assert!(stack.records(&stack.kafka.dlq_topic).await.is_empty());
    stack.shutdown().await;
}

#[tokio::test]
async fn a_saturated_route_defers_records_of_paused_partitions_without_spending_attempts() {
    const N_SLOW: usize = 12;
    const N_HEALTHY: usize = 200;
    let stack = TestStack::builder()
        .partitions(2)
        .consumer_config(|config| {
            config.processing.max_in_flight = 16;
            config.processing.route_max_in_flight = 8;
            config.processing.partition_window = 8;
            config.processing.defer_delay_ms = 300;
            config.routes.push(RouteConfig {
                source: "slow".into(),
                handler: HandlerConfig::default(),
                max_in_flight: Some(1),
                ..RouteConfig::default()
            });
        })
        .consumer()
        .build()
        .await;
    let mut records = Vec::new();
    for n in 0..N_SLOW {
        let id = format!("slow-{n}");
        stack.handler.delay_event(&id, Duration::from_millis(300));
        records.push(record(i32::try_from(n % 2).expect("partition"), &meta("slow", &id, None)));
    }
    for n in 0..N_HEALTHY {
        records.push(record(i32::try_from(n % 2).expect("partition"), &meta("github", &format!("fast-{n}"), None)));
    }
    stack.produce_raw_batch(records).await;
    stack.wait_until_handled(u64::try_from(N_SLOW + N_HEALTHY).expect("count")).await;
    assert!(deferred(&stack, "slow").await > 0.0, "records waiting for the one slow slot were deferred");
    for n in 0..N_SLOW {
        assert_eq!(stack.handler.attempts(&format!("slow-{n}")), 1, "slow-{n}: one call, deferrals spend none");
        assert_eq!(stack.handler.count(&format!("slow-{n}")), 1);
    }
    for n in 0..N_HEALTHY {
        assert_eq!(stack.handler.count(&format!("fast-{n}")), 1, "fast-{n} processed once");
    }
    stack.shutdown().await;
}

#[tokio::test]
async fn same_ordering_key_events_are_handled_in_offset_order_while_other_keys_run_concurrently() {
    const N_KEYS: usize = 4;
    const N_PER_KEY: usize = 15;
    let stack = TestStack::builder().partitions(1).consumer().build().await;
    stack.handler.set_delay(Duration::from_millis(30));
    // The third event of key 0 fails twice: the events behind it with the same key must wait for it.
    stack.handler.fail_with("key-0-2", [HandlerError::retryable("503"), HandlerError::retryable("503")]);
    let mut records = Vec::new();
    for n in 0..N_PER_KEY {
        for key in 0..N_KEYS {
            records.push(record(0, &meta("github", &format!("key-{key}-{n}"), Some(&format!("key-{key}")))));
        }
    }
    stack.produce_raw_batch(records).await;
    stack.wait_until_handled(u64::try_from(N_KEYS * N_PER_KEY).expect("count")).await;

    let mut offsets_by_key: HashMap<String, Vec<i64>> = HashMap::new();
    for event in stack.handler.successes() {
        let key = event.meta.ordering_key.clone().expect("ordering key");
        offsets_by_key.entry(key).or_default().push(event.offset);
    }
    assert_eq!(offsets_by_key.len(), N_KEYS);
    for (key, offsets) in &offsets_by_key {
        assert_eq!(offsets.len(), N_PER_KEY, "{key}: every event once");
        assert!(offsets.windows(2).all(|pair| pair[0] < pair[1]), "{key} handled in offset order: {offsets:?}");
    }
    assert_eq!(stack.handler.attempts("key-0-2"), 3);
    assert!(stack.handler.max_concurrent_calls() > 1, "different keys of one partition ran concurrently");
    stack.shutdown().await;
}

#[tokio::test]
async fn events_without_an_ordering_key_of_one_partition_run_concurrently() {
    const N_EVENTS: usize = 100;
    let stack = TestStack::builder().partitions(1).consumer().build().await;
    stack.handler.set_delay(Duration::from_millis(200));
    let records = (0..N_EVENTS).map(|n| record(0, &meta("github", &format!("free-{n}"), None))).collect();
    stack.produce_raw_batch(records).await;
    stack.wait_until_handled(u64::try_from(N_EVENTS).expect("count")).await;
    assert!(
        stack.handler.max_concurrent_calls() >= 50,
        "many records of one partition in the handler at once: {}",
        stack.handler.max_concurrent_calls()
    );
    for n in 0..N_EVENTS {
        assert_eq!(stack.handler.count(&format!("free-{n}")), 1);
    }
    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebalance_with_full_windows_neither_loses_nor_double_processes() {
    const N_EVENTS: usize = 240;
    let mut stack = TestStack::builder()
        .partitions(4)
        .consumer_config(|config| {
            config.processing.max_in_flight = 8;
            config.processing.route_max_in_flight = 8;
            config.processing.partition_window = 6;
        })
        .consumer()
        .build()
        .await;
    stack.handler.set_delay(Duration::from_millis(40));
    let records = (0..N_EVENTS)
        .map(|n| record(i32::try_from(n % 4).expect("partition"), &meta("github", &format!("rb-{n}"), None)))
        .collect();
    stack.produce_raw_batch(records).await;
    let processed = |stack: &TestStack| stack.handler.successes().len();

    eventually(Duration::from_secs(60), "a first part processed", || async { processed(&stack) >= 40 }).await;
    stack.start_consumer().await;
    eventually(Duration::from_secs(60), "more processed by two members", || async { processed(&stack) >= 120 }).await;
    stack.stop_consumer(0).await;
    eventually(Duration::from_secs(90), "every event processed", || async {
        (0..N_EVENTS).all(|n| stack.handler.count(&format!("rb-{n}")) >= 1)
    })
    .await;
    for n in 0..N_EVENTS {
        assert_eq!(stack.handler.count(&format!("rb-{n}")), 1, "rb-{n} processed once");
    }
    stack.shutdown().await;
}

#[tokio::test]
async fn retry_records_survive_a_consumer_crash_and_the_dlq_record_counts_every_attempt() {
    let mut stack = TestStack::builder()
        .partitions(1)
        .consumer_config(|config| {
            config.retry.max_attempts = 4;
            config.retry.initial_backoff_ms = 1_500;
            config.retry.max_backoff_ms = 1_500;
        })
        .consumer()
        .build()
        .await;
    stack.handler.fail_with("parked", (0..10).map(|n| HandlerError::retryable(format!("503 number {n}"))));
    stack.produce_raw_batch(vec![record(0, &meta("github", "parked", None))]).await;
    eventually(Duration::from_secs(60), "the first attempt failed and the event is parked", || async {
        stack.handler.attempts("parked") == 1
            && stack.records(&stack.consumer_config.service_retry_topic()).await.len() == 1
    })
    .await;
    // The consumer dies before the retry is due; its successor finds the parked record and keeps counting.
    stack.kill_consumer(0).await;
    stack.start_consumer().await;
    eventually(Duration::from_secs(60), "the event is dead-lettered after its last attempt", || async {
        !stack.records(&stack.kafka.dlq_topic).await.is_empty()
    })
    .await;
    assert_eq!(stack.handler.attempts("parked"), 4, "every attempt ran once, across the crash");
    let retries = stack.records(&stack.consumer_config.service_retry_topic()).await;
    assert_eq!(retries.len(), 3, "parked after attempts 1, 2 and 3");
    let attempts: Vec<Option<u32>> =
        retries.iter().map(|r| read::retry(r).map(|retry| retry.attempts.attempts)).collect();
    assert_eq!(attempts, vec![Some(1), Some(2), Some(3)]);
    let dlq = stack.records(&stack.kafka.dlq_topic).await;
    assert_eq!(dlq.len(), 1);
    let entry = &dlq[0];
    let failure = read::dead_letter_failure(entry);
    assert_eq!(failure.attempts, 4);
    assert_eq!(failure.error_class, "retryable_exhausted");
    assert_eq!(failure.error, "503 number 3");
    assert_eq!((failure.origin.topic.as_str(), failure.origin.offset), (stack.kafka.inbound_topic.as_str(), 0));
    assert!(!read::has_retry_header(entry), "no retry header leaks into the DLQ record");
    assert_eq!(read::inbound(entry).meta, meta("github", "parked", None), "original headers kept");
    assert_eq!(entry.key(), Some(&b"parked"[..]));
    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_ordering_key_events_stay_in_offset_order_across_a_rebalance() {
    const N_KEYS: usize = 6;
    const N_PER_KEY: usize = 25;
    let mut stack = TestStack::builder()
        .partitions(2)
        .consumer_config(|config| {
            config.processing.max_in_flight = 4;
            config.processing.partition_window = 16;
        })
        .consumer()
        .build()
        .await;
    stack.handler.set_delay(Duration::from_millis(100));
    let mut records = Vec::new();
    for n in 0..N_PER_KEY {
        for key in 0..N_KEYS {
            let partition = i32::try_from(key % 2).expect("partition");
            records.push(record(partition, &meta("github", &format!("rk-{key}-{n}"), Some(&format!("rk-{key}")))));
        }
    }
    stack.produce_raw_batch(records).await;
    let n_events = N_KEYS * N_PER_KEY;
    eventually(Duration::from_secs(60), "a first part processed", || async {
        stack.handler.successes().len() >= n_events / 4
    })
    .await;
    stack.start_consumer().await;
    stack.wait_until_assigned().await;
    eventually(Duration::from_secs(60), "more processed by two members", || async {
        stack.handler.successes().len() >= n_events / 2
    })
    .await;
    stack.stop_consumer(0).await;
    eventually(Duration::from_secs(90), "every event processed", || async {
        stack.handler.successes().len() >= n_events
    })
    .await;

    let mut offsets_by_key: HashMap<String, Vec<i64>> = HashMap::new();
    for event in stack.handler.successes() {
        offsets_by_key.entry(event.meta.ordering_key.clone().expect("key")).or_default().push(event.offset);
    }
    for (key, offsets) in &offsets_by_key {
        assert_eq!(offsets.len(), N_PER_KEY, "{key}: every event processed once");
        assert!(offsets.windows(2).all(|pair| pair[0] < pair[1]), "{key} in offset order: {offsets:?}");
    }
    stack.shutdown().await;
}
