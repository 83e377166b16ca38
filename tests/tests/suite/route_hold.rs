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
use hookline_tests::{TestStack, eventually, read};
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
    (partition, meta.record_key().to_owned(), hookline_common::wire::event_headers(meta), b"{}".to_vec())
}

fn events(source: &str, prefix: &str, n: usize) -> Vec<(i32, String, OwnedHeaders, Vec<u8>)> {
    (0..n).map(|i| record(i32::try_from(i % 2).expect("partition"), &meta(source, &format!("{prefix}-{i}")))).collect()
}

async fn paused_gauge(stack: &TestStack, index: usize, route: &str) -> f64 {
    stack.consumer_metric(index, "hookline_consumer_route_paused", &[("route", route)]).await
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
        stack.consumer_metric(first, "hookline_consumer_route_breaker_open", &[("route", "failing")]).await == 1.0
    })
    .await;
    let copies = stack.consumer_metric(first, "hookline_consumer_deferred_total", &[("reason", "breaker_open")]).await;
    assert_eq!(copies, 0.0, "records of a source topic wait in memory: none is copied to the retry topic");

    // A restart in the middle of the outage: the new instance holds them too.
    stack.stop_consumer(first).await;
    let second = stack.start_consumer().await;
    eventually(Duration::from_secs(60), "the restarted consumer's breaker opens again", || async {
        stack.consumer_metric(second, "hookline_consumer_route_breaker_open", &[("route", "failing")]).await == 1.0
    })
    .await;
    eventually(Duration::from_secs(10), "its records wait in memory", || async {
        stack.consumer_metric(second, "hookline_consumer_route_waiting_records", &[("route", "failing")]).await > 0.0
    })
    .await;
    let copies = stack.consumer_metric(second, "hookline_consumer_deferred_total", &[("reason", "breaker_open")]).await;
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

#[tokio::test]
async fn the_api_pauses_and_resumes_a_route_behind_its_token_and_refuses_a_pause_without_a_reason() {
    use bytes::Bytes;
    use http::{Request, StatusCode};
    use http_body_util::Full;

    let stack = TestStack::builder().consumer().build().await;
    let token = "pause-token-pause-token-pause-token-00";
    let api = stack.start_replayer_api(token).await;
    let addr = api.addr;
    let request = |method: &str, path: &str, token: Option<&str>, body: &str| {
        let mut builder = Request::builder().method(method).uri(format!("http://{addr}{path}"));
        if let Some(token) = token {
            builder = builder.header("authorization", format!("Bearer {token}"));
        }
        builder.body(Full::new(Bytes::from(body.to_owned()))).expect("request")
    };
    let service = stack.consumer_config.service_name().to_owned();
    let pause = format!(r#"{{"service":"{service}","route":"github","reason":"db migration","by":"alice"}}"#);
    let reply = stack.send(request("POST", "/v1/pause", None, &pause)).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    let no_reason = format!(r#"{{"service":"{service}","route":"github","reason":""}}"#);
    let reply = stack.send(request("POST", "/v1/pause", Some(token), &no_reason)).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    let reply = stack.send(request("POST", "/v1/pause", Some(token), &pause)).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", String::from_utf8_lossy(&reply.body));
    eventually(Duration::from_secs(30), "the consumer obeys the API's pause", || async {
        paused_gauge(&stack, 0, "github").await == 1.0
    })
    .await;
    let reply = stack.send(request("GET", "/v1/pauses", Some(token), "")).await;
    let listed: serde_json::Value = serde_json::from_slice(&reply.body).expect("json");
    // The verified subject (the shared demo token's), not the body's `by` (docs/security.md, F14).
    assert_eq!(listed[0]["by"], "shared-token");
    assert_eq!(listed[0]["reason"], "db migration");
    let resume = format!(r#"{{"service":"{service}","route":"github","reason":"done"}}"#);
    let reply = stack.send(request("POST", "/v1/resume", Some(token), &resume)).await;
    assert_eq!(reply.status, StatusCode::OK);
    eventually(Duration::from_secs(30), "the consumer obeys the API's resume", || async {
        paused_gauge(&stack, 0, "github").await == 0.0
    })
    .await;
    let reply = stack.send(request("POST", "/v1/resume", Some(token), &resume)).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "a route that is not paused cannot be resumed");
    api.stop().await;
    stack.shutdown().await;
}

#[tokio::test]
async fn a_control_record_without_a_valid_mac_is_never_applied() {
    use hookline_common::control::RoutePause;
    use rdkafka::producer::{FutureProducer, FutureRecord};

    let stack = TestStack::builder().consumer().build().await;
    let service = stack.consumer_config.service_name().to_owned();
    let forged = RoutePause {
        service,
        route: "github".to_owned(),
        paused: true,
        by: "intruder".to_owned(),
        reason: "no key".to_owned(),
        at_ms: hookline_common::wire::now_ms(),
    };
    let producer: FutureProducer = hookline_common::kafka::producer_config(&stack.kafka).create().expect("producer");
    let (key, value) = (forged.key(), serde_json::to_vec(&forged).expect("json"));
    let record = FutureRecord::to(&stack.kafka.control_topic).key(&key).payload(&value);
    producer.send(record, Duration::from_secs(10)).await.expect("produced");
    eventually(Duration::from_secs(30), "the forged record is read and refused", || async {
        stack
            .consumer_metric(0, "hookline_consumer_control_records_refused_total", &[("reason", "unauthenticated")])
            .await
            >= 1.0
    })
    .await;
    stack.produce_raw_batch(events("github", "after-forgery", 5)).await;
    eventually(Duration::from_secs(30), "the route still runs", || async {
        (0..5).all(|i| stack.handler.count(&format!("after-forgery-{i}")) == 1)
    })
    .await;
    assert_eq!(paused_gauge(&stack, 0, "github").await, 0.0);
    assert!(replayer(&stack).pauses().await.expect("pauses").is_empty(), "the replayer ignores it too");
    stack.shutdown().await;
}

/// Re-produces `record` (key, value, headers) byte for byte: what anyone who may write the control topic can do
/// with a record they read from it, without any key.
async fn produce_copy(stack: &TestStack, record: &rdkafka::message::OwnedMessage) {
    use rdkafka::{
        Message,
        message::{Header, Headers},
        producer::{FutureProducer, FutureRecord},
    };
    let producer: FutureProducer = hookline_common::kafka::producer_config(&stack.kafka).create().expect("producer");
    let headers = record.headers().map_or_else(OwnedHeaders::new, |headers| {
        headers.iter().fold(OwnedHeaders::new(), |out, h| out.insert(Header { key: h.key, value: h.value }))
    });
    let mut copy = FutureRecord::<[u8], [u8]>::to(record.topic()).headers(headers);
    if let Some(key) = record.key() {
        copy = copy.key(key);
    }
    if let Some(value) = record.payload() {
        copy = copy.payload(value);
    }
    producer.send(copy, Duration::from_secs(10)).await.expect("produced");
}

/// The control topic's records under `key`, in offset order.
async fn control_records(stack: &TestStack, key: &str) -> Vec<rdkafka::message::OwnedMessage> {
    use rdkafka::Message;
    let records = stack.records(&stack.kafka.control_topic).await;
    records.into_iter().filter(|record| record.key() == Some(key.as_bytes())).collect()
}

#[tokio::test]
async fn an_old_resume_written_again_does_not_lift_a_pause_on_a_running_or_a_new_instance() {
    use hookline_common::control::RoutePause;
    use rdkafka::Message;

    let mut stack = TestStack::builder().consumer().build().await;
    let service = stack.consumer_config.service_name().to_owned();
    let replayer = replayer(&stack);
    let request =
        PauseRequest { service: service.clone(), route: "github".into(), reason: "first".into(), by: "ops".into() };
    replayer.pause(&request).await.expect("paused");
    replayer.resume(&request).await.expect("resumed");
    replayer.pause(&PauseRequest { reason: "second".into(), ..request.clone() }).await.expect("paused again");
    eventually(Duration::from_secs(30), "the consumer obeys the second pause", || async {
        paused_gauge(&stack, 0, "github").await == 1.0
    })
    .await;
    let key = hookline_common::control::route_pause_key(&service, "github");
    let written = control_records(&stack, &key).await;
    let resume = written
        .iter()
        .find(|record| {
            let pause = RoutePause::decode(record.key().unwrap_or_default(), record.payload().unwrap_or_default());
            pause.is_some_and(|pause| !pause.paused)
        })
        .expect("the resume");
    // Whoever may write the topic copies the signed resume, byte for byte: its MAC verifies.
    produce_copy(&stack, resume).await;
    eventually(Duration::from_secs(30), "the copy is read and refused as stale", || async {
        stack.consumer_metric(0, "hookline_consumer_control_records_refused_total", &[("reason", "stale")]).await >= 1.0
    })
    .await;
    // The gauges follow within a second: a pause the copy lifted would show by then.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(paused_gauge(&stack, 0, "github").await, 1.0, "the old resume lifted the pause");
    assert_eq!(replayer.pauses().await.expect("pauses").len(), 1, "the replayer lists the pause");
    // The copy is now the key's latest record: compaction would delete the pause. The replayer writes it again.
    assert_eq!(replayer.reassert_pauses().await.expect("reasserted"), 1);
    let latest = control_records(&stack, &key).await.pop().expect("records");
    let latest = RoutePause::decode(latest.key().unwrap_or_default(), latest.payload().unwrap_or_default());
    assert_eq!(latest.map(|pause| (pause.paused, pause.reason)), Some((true, "second".to_owned())));
    assert_eq!(replayer.reassert_pauses().await.expect("reasserted"), 0, "nothing shadowed any more");

    // A new instance reads the whole topic, the copy included, and obeys the pause.
    let restarted = stack.start_consumer().await;
    eventually(Duration::from_secs(30), "the new instance obeys the pause", || async {
        paused_gauge(&stack, restarted, "github").await == 1.0
    })
    .await;
    stack.produce_raw_batch(events("github", "while-paused", 3)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let called: usize = (0..3).map(|i| stack.handler.attempts(&format!("while-paused-{i}"))).sum();
    assert_eq!(called, 0, "a paused route's events ran");
    stack.shutdown().await;
}

#[tokio::test]
async fn a_tombstone_cannot_erase_a_pause() {
    use hookline_common::control::RoutePause;
    use rdkafka::{
        Message,
        producer::{FutureProducer, FutureRecord},
    };

    let mut stack = TestStack::builder().consumer().build().await;
    let service = stack.consumer_config.service_name().to_owned();
    let replayer = replayer(&stack);
    let request =
        PauseRequest { service: service.clone(), route: "github".into(), reason: "hold".into(), by: "ops".into() };
    replayer.pause(&request).await.expect("paused");
    eventually(Duration::from_secs(30), "the consumer obeys the pause", || async {
        paused_gauge(&stack, 0, "github").await == 1.0
    })
    .await;
    let key = hookline_common::control::route_pause_key(&service, "github");
    // An unsigned tombstone: compaction would delete the signed pause before it.
    let producer: FutureProducer = hookline_common::kafka::producer_config(&stack.kafka).create().expect("producer");
    let tombstone = FutureRecord::<str, [u8]>::to(&stack.kafka.control_topic).key(&key);
    producer.send(tombstone, Duration::from_secs(10)).await.expect("produced");
    eventually(Duration::from_secs(30), "the running consumer reads the tombstone and keeps the pause", || async {
        stack
            .consumer_metric(0, "hookline_consumer_control_records_refused_total", &[("reason", "unauthenticated")])
            .await
            >= 1.0
    })
    .await;
    // The gauges follow within a second: a pause the tombstone erased would show by then.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(paused_gauge(&stack, 0, "github").await, 1.0, "the tombstone lifted the pause");
    assert_eq!(replayer.pauses().await.expect("pauses").len(), 1, "the replayer still lists the pause");
    // The replayer writes the pause again after the tombstone: compaction keeps that one, so a consumer started
    // after compaction knows the pause.
    assert_eq!(replayer.reassert_pauses().await.expect("reasserted"), 1);
    let latest = control_records(&stack, &key).await.pop().expect("records");
    let latest = RoutePause::decode(latest.key().unwrap_or_default(), latest.payload().unwrap_or_default());
    assert!(latest.is_some_and(|pause| pause.paused), "the key's latest record is not the pause");
    // Compacted, the topic would hold the tombstone and the pause written again: a new instance obeys it.
    let restarted = stack.start_consumer().await;
    eventually(Duration::from_secs(30), "the new instance obeys the pause", || async {
        paused_gauge(&stack, restarted, "github").await == 1.0
    })
    .await;
    let resumed = replayer.resume(&PauseRequest { reason: "done".into(), ..request }).await;
    assert!(!resumed.expect("resumed").paused, "the pause can be resumed after the tombstone");
    stack.shutdown().await;
}

#[tokio::test]
async fn a_flood_of_junk_in_the_control_topic_does_not_keep_a_new_consumer_from_a_pause() {
    use rdkafka::{
        message::{Header, OwnedHeaders},
        producer::{FutureProducer, FutureRecord},
    };

    let mut stack = TestStack::builder().consumer().build().await;
    let service = stack.consumer_config.service_name().to_owned();
    let replayer = replayer(&stack);
    let request =
        PauseRequest { service: service.clone(), route: "github".into(), reason: "hold".into(), by: "ops".into() };
    // The flood lands before the pause: a new consumer must read all of it to learn the pause.
    let producer: FutureProducer = hookline_common::kafka::producer_config(&stack.kafka)
        .set("linger.ms", "20")
        .set("batch.num.messages", "10000")
        .set("queue.buffering.max.messages", "1000000")
        // The flood is the test's input: on a broker shared with other tests it may take longer than the stack's
        // 5 s produce timeout, which is the services' and not what this test is about.
        .set("message.timeout.ms", "120000")
        .create()
        .expect("producer");
    let junk_value = vec![b'x'; 64];
    let mut sends = Vec::new();
    for i in 0..FLOOD {
        let key = format!("route-pause:{service}:junk-{i}");
        // A forged MAC (no key signed it): junk no reader may believe.
        let headers = OwnedHeaders::new().insert(Header { key: hookline_record::raw::MAC, value: Some("v1,k,AAAA") });
        let record = FutureRecord::to(&stack.kafka.control_topic).key(&key).payload(&junk_value).headers(headers);
        sends.push(producer.send_result(record).expect("queued"));
    }
    for send in sends {
        send.await.expect("delivered").expect("produced");
    }
    replayer.pause(&request).await.expect("paused, the flood read within the replayer's bound");
    assert_eq!(replayer.pauses().await.expect("pauses").len(), 1);
    let restarted = stack.start_consumer().await;
    eventually(Duration::from_secs(60), "the new instance obeys the pause", || async {
        paused_gauge(&stack, restarted, "github").await == 1.0
    })
    .await;
    assert!(
        stack
            .consumer_metric(
                restarted,
                "hookline_consumer_control_records_refused_total",
                &[("reason", "unauthenticated")]
            )
            .await
            >= FLOOD as f64,
        "the whole flood was read before the start"
    );
    stack.shutdown().await;
}

/// Junk records of the flood test.
const FLOOD: usize = 200_000;

/// A stack whose consumers read `<inbound>-source-failing` as a source topic (2 partitions, created here).
async fn stack_with_source_topic(
    tweak: impl Fn(&mut hookline_consumer::ConsumerConfig) + Send + Sync + 'static,
) -> (TestStack, String) {
    let stack = TestStack::builder()
        .partitions(2)
        .consumer_config(move |config| {
            config.service.source_topics = vec![format!("{}-source-failing", config.kafka.inbound_topic)];
            config.processing.route_max_in_flight = 4;
            config.processing.breaker_failures = 3;
            tweak(config);
        })
        .build()
        .await;
    let topic = stack.consumer_config.service.source_topics[0].clone();
    let spec = TopicSpec { name: topic.clone(), partitions: 2, compacted: false };
    ensure_topics(&stack.kafka, &[spec], 1).await.expect("source topic");
    (stack, topic)
}

#[tokio::test]
async fn a_held_source_topic_survives_a_rebalance_with_no_copies_and_each_event_is_processed_once_after_the_heal() {
    const N: usize = 30;
    let (mut stack, topic) = stack_with_source_topic(|config| {
        config.processing.breaker_cooldown_ms = 1_000;
        config.retry.max_attempts = 50;
    })
    .await;
    let first = stack.start_consumer().await;
    stack.wait_until_assigned().await;
    for i in 0..N {
        stack.handler.fail_with(&format!("failing-{i}"), (0..10_000).map(|_| HandlerError::retryable("503")));
    }
    stack.produce_raw_batch_to(&topic, events("failing", "failing", N)).await;
    eventually(Duration::from_secs(30), "the breaker opens", || async {
        stack.consumer_metric(first, "hookline_consumer_route_breaker_open", &[("route", "failing")]).await == 1.0
    })
    .await;
    // A second member joins in the middle of the outage: the partitions are shared out again.
    let second = stack.start_consumer().await;
    stack.wait_until_assigned().await;
    stack.produce_raw_batch(events("github", "during-rebalance", 40)).await;
    eventually(Duration::from_secs(60), "healthy events flow through the rebalance", || async {
        (0..40).all(|i| stack.handler.count(&format!("during-rebalance-{i}")) == 1)
    })
    .await;
    for index in [first, second] {
        let copies =
            stack.consumer_metric(index, "hookline_consumer_deferred_total", &[("reason", "breaker_open")]).await;
        assert_eq!(copies, 0.0, "consumer {index} copied held records");
    }
    for i in 0..N {
        stack.handler.heal(&format!("failing-{i}"));
    }
    eventually(Duration::from_secs(90), "every held event is processed after the heal", || async {
        (0..N).all(|i| stack.handler.count(&format!("failing-{i}")) >= 1)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    for i in 0..N {
        assert_eq!(stack.handler.count(&format!("failing-{i}")), 1, "failing-{i} processed exactly once");
    }
    stack.shutdown().await;
}

#[tokio::test]
async fn a_record_held_in_a_source_topic_past_its_retry_budget_is_dead_lettered_once() {
    const N: usize = 10;
    let (mut stack, topic) = stack_with_source_topic(|config| {
        // Probes fail too: only the budget ends the wait.
        config.processing.breaker_cooldown_ms = 1_000;
        config.retry.max_total_ms = 3_000;
        config.retry.max_attempts = 50;
    })
    .await;
    let consumer = stack.start_consumer().await;
    stack.wait_until_assigned().await;
    for i in 0..N {
        stack.handler.fail_with(&format!("doomed-{i}"), (0..10_000).map(|_| HandlerError::retryable("503")));
    }
    stack.produce_raw_batch_to(&topic, events("failing", "doomed", N)).await;
    let dead_letters = || async {
        let records = stack.records(&stack.kafka.dlq_topic).await;
        records.iter().filter_map(|record| read::dead_letter(record).event_id).collect::<Vec<_>>()
    };
    eventually(Duration::from_secs(60), "every doomed event is dead-lettered", || async {
        dead_letters().await.len() >= N
    })
    .await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let mut ids = dead_letters().await;
    ids.sort();
    let expected: Vec<String> = {
        let mut expected: Vec<String> = (0..N).map(|i| format!("doomed-{i}")).collect();
        expected.sort();
        expected
    };
    assert_eq!(ids, expected, "each doomed event dead-lettered exactly once");
    let copies =
        stack.consumer_metric(consumer, "hookline_consumer_deferred_total", &[("reason", "breaker_open")]).await;
    assert_eq!(copies, 0.0);
    stack.shutdown().await;
}
