//! Several consumer services on one stream (issue 20): each processes every event once with its own dedupe keys,
//! retries and dead letters; a dead letter replays to its service alone; a service added later starts where it
//! is told; a consumer upgraded from the unscoped key layout processes nothing twice; a SIGKILLed consumer of one
//! service changes nothing for the others; a re-processing request runs its events once more, for one service.

use hookline_common::time::format_rfc3339_millis;
use std::{collections::HashSet, sync::Arc, time::Duration};

use hookline_common::{
    kafka::{TopicSpec, ensure_topics},
    wire::{EntryStatus, EntryStatusRecord, redis_key},
};
use hookline_consumer::{config::StartAt, handler::HandlerError};
use hookline_dlq_replayer::{
    ReplayerConfig,
    ops::{ReplayRequest, Replayer, ReprocessRequest},
};
use hookline_record::{
    HeaderTable, Original, Outgoing, raw,
    retry::{Attempts, Origin, RetryHeaders},
};
use hookline_tests::{
    Delivery, TestHandler, TestStack, eventually,
    process::{announced, spawn_consumer_process},
    read,
};
use rdkafka::{
    Message, Offset, TopicPartitionList,
    consumer::{BaseConsumer, CommitMode, Consumer},
    message::{Header, OwnedHeaders},
};

const WAIT: Duration = Duration::from_secs(60);

fn deliveries(tag: &str, n: usize) -> Vec<Delivery> {
    (0..n).map(|i| Delivery::new(format!("{{\"{tag}\":{i}}}").into_bytes())).collect()
}

async fn post_all(stack: &TestStack, deliveries: &[Delivery]) {
    for delivery in deliveries {
        stack.post_accepted(delivery).await;
    }
}

/// `hookline_consumer_events_total{outcome}` of one consumer.
async fn events(stack: &TestStack, index: usize, outcome: &str) -> u64 {
    stack.consumer_metric(index, "hookline_consumer_events_total", &[("outcome", outcome)]).await as u64
}

fn assert_each_processed_once(handler: &TestHandler, deliveries: &[Delivery], service: &str) {
    for delivery in deliveries {
        assert_eq!(handler.count(&delivery.delivery_id), 1, "{service} processed {} once", delivery.delivery_id);
    }
}

#[tokio::test]
async fn every_service_processes_every_event_once_and_its_dead_letters_replay_to_it_alone() {
    let mut stack = TestStack::builder().build().await;
    let (billing, analytics) = (Arc::new(TestHandler::default()), Arc::new(TestHandler::default()));
    let billing_index = stack.start_consumer_with(stack.service_config("billing"), billing.clone()).await;
    let analytics_index = stack.start_consumer_with(stack.service_config("analytics"), analytics.clone()).await;
    let all = deliveries("fan-out", 40);
    // Analytics' downstream rejects four events until it is fixed, and fails four more twice before taking them.
    for delivery in &all[..4] {
        analytics.poison(&delivery.delivery_id);
    }
    for delivery in &all[4..8] {
        analytics.fail_with(&delivery.delivery_id, [HandlerError::retryable("503"), HandlerError::retryable("503")]);
    }
    post_all(&stack, &all).await;

    eventually(WAIT, "billing processed 40, analytics 36 and dead-lettered 4", || async {
        billing.successes().len() == 40
            && analytics.successes().len() == 36
            && stack.records(&stack.kafka.dlq_topic).await.len() == 4
    })
    .await;
    assert_each_processed_once(&billing, &all, "billing");
    assert_eq!(billing.calls().len(), 40, "billing's downstream saw nothing of analytics' failures");
    assert_each_processed_once(&analytics, &all[4..], "analytics");
    for delivery in &all[4..8] {
        assert_eq!(analytics.attempts(&delivery.delivery_id), 3, "two retries, then success");
    }

    // Retries went to analytics' own retry topic, tagged for it; billing's has nothing.
    let analytics_retries = stack.records(&stack.service_config("analytics").service_retry_topic()).await;
    // 4 events x 2 retries, and deferrals if analytics' breaker opened meanwhile.
    assert!(analytics_retries.len() >= 8, "{} retry records", analytics_retries.len());
    for record in &analytics_retries {
        assert_eq!(read::inbound(record).service.as_deref(), Some("analytics"));
    }
    assert!(stack.records(&stack.service_config("billing").service_retry_topic()).await.is_empty());

    // Every dead letter names its service.
    let dead_letters = stack.records(&stack.kafka.dlq_topic).await;
    let dead_ids: HashSet<String> = dead_letters
        .iter()
        .map(|record| {
            let entry = read::dead_letter(record);
            assert_eq!(entry.service.as_deref(), Some("analytics"));
            entry.event_id.expect("event id")
        })
        .collect();
    let expected: HashSet<String> = all[..4].iter().map(|delivery| delivery.delivery_id.clone()).collect();
    assert_eq!(dead_ids, expected);

    // Fixed: replay every dead letter. Only analytics processes them; billing skips them and writes no fate.
    for delivery in &all[..4] {
        analytics.heal(&delivery.delivery_id);
    }
    let replayer =
        Replayer::new(ReplayerConfig { kafka: stack.kafka.clone(), ..ReplayerConfig::default() }).expect("replayer");
    let report = replayer
        .replay(&ReplayRequest { all: true, by: "test".into(), ..ReplayRequest::default() })
        .await
        .expect("replay");
    assert_eq!(report.done.len(), 4);
    eventually(WAIT, "analytics processed the replays and billing skipped them", || async {
        analytics.successes().len() == 40 && events(&stack, billing_index, "other_service").await == 4
    })
    .await;
    assert_each_processed_once(&analytics, &all, "analytics");
    assert_eq!(billing.calls().len(), 40, "billing's downstream saw no replay");
    eventually(WAIT, "every replay's fate recorded by analytics", || async {
        let fates: Vec<EntryStatusRecord> = stack
            .records(&stack.kafka.dlq_status_topic)
            .await
            .iter()
            .filter_map(|record| serde_json::from_slice(record.payload()?).ok())
            .filter(|record: &EntryStatusRecord| record.status != EntryStatus::Replayed)
            .collect();
        fates.len() == 4
            && fates.iter().all(|fate| {
                fate.status == EntryStatus::Succeeded && fate.by == "consumer:analytics" && fate.note.is_none()
            })
    })
    .await;

    // A third service, added later, reads from the beginning: every event once, none of analytics' replays.
    let search = Arc::new(TestHandler::default());
    let search_index = stack.start_consumer_with(stack.service_config("search"), search.clone()).await;
    eventually(WAIT, "search processed the whole stream", || async {
        search.successes().len() == 40 && events(&stack, search_index, "other_service").await == 4
    })
    .await;
    assert_each_processed_once(&search, &all, "search");
    assert_eq!(events(&stack, analytics_index, "duplicate").await, 0, "no service saw another's done markers");
    assert_eq!(billing.calls().len(), 40);
    assert_eq!(analytics.successes().len(), 40);
    stack.shutdown().await;
}

#[tokio::test]
async fn a_service_added_while_others_run_starts_where_it_is_told() {
    let mut stack = TestStack::builder().build().await;
    let billing = Arc::new(TestHandler::default());
    stack.start_consumer_with(stack.service_config("billing"), billing.clone()).await;
    let before = deliveries("before", 10);
    post_all(&stack, &before).await;
    eventually(WAIT, "billing processed the first events", || async { billing.successes().len() == 10 }).await;

    let (early, late) = (Arc::new(TestHandler::default()), Arc::new(TestHandler::default()));
    stack.start_consumer_with(stack.service_config("early"), early.clone()).await;
    let mut late_config = stack.service_config("late");
    late_config.service.starts_at = StartAt::Latest;
    stack.start_consumer_with(late_config, late.clone()).await;
    stack.wait_until_assigned().await;
    // "Latest" is the end of each partition when the new group first fetches it: send probes until the late
    // service has seen one on every partition, so the events after them are surely after its start.
    let mut probes = Vec::new();
    eventually(WAIT, "the late service reads every partition", || {
        let probe = Delivery::new(format!("{{\"probe\":{}}}", probes.len()).into_bytes());
        probes.push(probe.clone());
        let (stack, late) = (&stack, &late);
        async move {
            stack.post_accepted(&probe).await;
            let partitions: HashSet<i32> = late.successes().iter().map(|event| event.partition).collect();
            partitions.len() == 3
        }
    })
    .await;
    let after = deliveries("after", 10);
    post_all(&stack, &after).await;

    eventually(WAIT, "every service processed what it should", || async {
        billing.successes().len() == 20 + probes.len()
            && early.successes().len() == 20 + probes.len()
            && after.iter().all(|delivery| late.count(&delivery.delivery_id) == 1)
    })
    .await;
    assert_each_processed_once(&early, &before, "early");
    assert_each_processed_once(&early, &after, "early");
    assert_each_processed_once(&late, &after, "late");
    for delivery in &before {
        assert_eq!(late.attempts(&delivery.delivery_id), 0, "the late service starts after what was there");
    }
    assert_each_processed_once(&billing, &after, "billing");
    stack.shutdown().await;
}

/// The retry record a consumer of `service` parks `record` (the inbound record at `offset`) with, after one failed
/// attempt, in the shared retry topic of the build before services.
fn parked(stack: &TestStack, record: &rdkafka::message::OwnedMessage, service: &str) -> Outgoing {
    let now = hookline_common::wire::now_ms();
    let retry = RetryHeaders {
        attempts: Attempts { attempts: 1, first_failure_at_ms: now, last_error: "503".to_owned() },
        due_at_ms: now,
        origin: Origin { topic: stack.kafka.inbound_topic.clone(), partition: 0, offset: record.offset() },
    };
    let headers = read::headers(record);
    let original = Original {
        key: record.key().map(bytes::Bytes::copy_from_slice),
        body: record.payload().map(bytes::Bytes::copy_from_slice),
        headers: &headers,
    };
    retry.encode(&stack.kafka.retry_topic, service, None, original)
}

/// `record` as the build before services parked it: without the service header, which that build did not write
/// (an old record forged as it was: only the raw header name says which one is missing).
fn unscoped(record: Outgoing) -> Outgoing {
    let mut headers = HeaderTable::new();
    for header in record.headers.iter().filter(|header| header.name != raw::SERVICE) {
        headers.push(header.name, header.value);
    }
    Outgoing { headers, ..record }
}

/// The upgrade test. What the build before services left behind is written as it wrote it: unscoped done
/// markers (`<prefix>:<source>:<event id>`, the layout that build used) for what it processed, untagged retry
/// records in the shared retry topic for what it parked, and the group's committed offset where it stopped.
/// (Running that build itself would mean compiling an older commit in CI; its layout is all the new build reads.)
#[tokio::test]
async fn a_consumer_upgraded_from_unscoped_keys_mid_stream_processes_nothing_twice() {
    let mut stack = TestStack::builder().partitions(1).build().await;
    let config = stack.consumer_config.clone();
    let all = deliveries("upgrade", 40);
    post_all(&stack, &all).await;
    let records = stack.inbound_records().await;
    assert_eq!(records.len(), 40);
    let event_id = |index: usize| all[index].delivery_id.clone();

    // The old build processed 0..=25 but for 20 and 21, which it parked for a retry, and was stopped with 22
    // committed: 22..=25 were processed after the last commit (a stop before the next auto-commit).
    let redis = redis::Client::open(stack.redis.url.as_str()).expect("redis client");
    let mut connection = redis.get_multiplexed_async_connection().await.expect("redis");
    for index in (0..26).filter(|index| !matches!(index, 20 | 21)) {
        let key = redis_key::dedupe_unscoped(&config.redis.key_prefix, "github", &event_id(index));
        let _: () =
            redis::cmd("SET").arg(&key).arg("done").arg("EX").arg(3600).query_async(&mut connection).await.unwrap();
    }
    ensure_topics(
        &stack.kafka,
        &[TopicSpec { name: stack.kafka.retry_topic.clone(), partitions: 1, compacted: false }],
        1,
    )
    .await
    .expect("the shared retry topic");
    for (index, record) in records.iter().enumerate().filter(|(index, _)| matches!(index, 20 | 21 | 30)) {
        // Signed: these stand for a hookline consumer's retry records.
        if index == 30 {
            // A newer service's retry record in the shared topic (two services misconfigured onto one topic).
            stack.produce_record(0, parked(&stack, record, "another-service")).await;
        } else {
            stack.produce_record(0, unscoped(parked(&stack, record, config.service_name()))).await;
        }
    }
    let group: BaseConsumer =
        hookline_common::kafka::consumer_config(&stack.kafka, &config.kafka.group_id).create().expect("group client");
    let mut committed = TopicPartitionList::new();
    committed.add_partition_offset(&stack.kafka.inbound_topic, 0, Offset::Offset(22)).expect("offset");
    group.commit(&committed, CommitMode::Sync).expect("the old build's commit");
    drop(group);

    // The new build takes over.
    let index = stack.start_consumer().await;
    eventually(WAIT, "the upgraded consumer caught up", || async {
        stack.handler.successes().len() == 16 && events(&stack, index, "other_service").await == 1
    })
    .await;
    let service_key = redis_key::service(&config.redis.key_prefix, config.service_name());
    let history: String = redis::cmd("GET").arg(&service_key).query_async(&mut connection).await.expect("history");
    assert!(history.starts_with("upgraded:"), "{history}");
    for index in (0..26).filter(|index| !matches!(index, 20 | 21)) {
        assert_eq!(stack.handler.attempts(&event_id(index)), 0, "event {index} was processed before the upgrade");
    }
    for index in [20, 21].into_iter().chain(26..40) {
        assert_eq!(stack.handler.count(&event_id(index)), 1, "event {index} processed once");
    }
    assert_eq!(events(&stack, index, "duplicate").await, 4, "22..=25 redelivered, skipped by unscoped markers");

    // A service that starts on the new build is not bound by another's old work: it processes all 40, once.
    let analytics = Arc::new(TestHandler::default());
    stack.start_consumer_with(stack.service_config("analytics"), analytics.clone()).await;
    eventually(WAIT, "the new service processed everything", || async { analytics.successes().len() == 40 }).await;
    assert_each_processed_once(&analytics, &all, "analytics");
    let analytics_key = redis_key::service(&config.redis.key_prefix, "analytics");
    let history: String = redis::cmd("GET").arg(&analytics_key).query_async(&mut connection).await.expect("history");
    assert!(history.starts_with("new:"), "{history}");
    stack.shutdown().await;
}

#[tokio::test]
async fn a_sigkill_of_one_services_consumer_changes_nothing_for_the_others() {
    let mut stack = TestStack::builder()
        .partitions(2)
        .consumer_config(|config| {
            config.redis.claim_lease_ms = 3_000;
            config.handler.timeout_ms = 2_500;
        })
        .build()
        .await;
    let billing = Arc::new(TestHandler::default());
    stack.start_consumer_with(stack.service_config("billing"), billing.clone()).await;
    let analytics_config = stack.service_config("analytics");
    let (mut analytics, lines) =
        spawn_consumer_process(env!("CARGO_BIN_EXE_test-consumer").as_ref(), &analytics_config, "work:100");
    let all = deliveries("kill", 60);
    post_all(&stack, &all).await;
    eventually(WAIT, "analytics is mid-stream", || async { announced(&lines, "done").len() >= 10 }).await;
    analytics.kill();
    let done_before_kill = announced(&lines, "done");
    assert!(done_before_kill.len() < all.len(), "killed mid-stream");

    eventually(WAIT, "billing processed everything", || async { billing.successes().len() == 60 }).await;
    assert_each_processed_once(&billing, &all, "billing");
    assert_eq!(billing.calls().len(), 60, "billing saw nothing of the kill");

    // Analytics restarted: it finishes its own stream; billing still saw each event once.
    let (_analytics, lines_after) =
        spawn_consumer_process(env!("CARGO_BIN_EXE_test-consumer").as_ref(), &analytics_config, "work:1");
    eventually(WAIT, "analytics finished after its restart", || async {
        let done: HashSet<String> = done_before_kill.union(&announced(&lines_after, "done")).cloned().collect();
        all.iter().all(|delivery| done.contains(&delivery.delivery_id))
    })
    .await;
    assert_eq!(billing.calls().len(), 60);
    stack.shutdown().await;
}

/// Waits until the clock has passed the timestamp of every record in the inbound topic; the time then.
async fn clock_past_last_record(stack: &TestStack) -> i64 {
    let last = stack.inbound_records().await.iter().filter_map(|record| record.timestamp().to_millis()).max();
    eventually(WAIT, "the clock passed the last record", || async {
        last.is_some_and(|last| hookline_common::wire::now_ms() > last)
    })
    .await;
    hookline_common::wire::now_ms()
}

#[tokio::test]
async fn reprocessing_a_time_range_runs_exactly_those_events_once_for_that_service_only() {
    let mut stack = TestStack::builder().build().await;
    let (billing, analytics) = (Arc::new(TestHandler::default()), Arc::new(TestHandler::default()));
    let billing_index = stack.start_consumer_with(stack.service_config("billing"), billing.clone()).await;
    let analytics_index = stack.start_consumer_with(stack.service_config("analytics"), analytics.clone()).await;
    // The range is [from, to) in record timestamps, which are milliseconds: an acknowledgement can come back within
    // the millisecond its record was stamped, so each bound is taken only once the clock has passed every record
    // before it, and the records after the range are sent only once the clock has passed `to`.
    let before = deliveries("before-range", 8);
    post_all(&stack, &before).await;
    let from_ms = clock_past_last_record(&stack).await;
    let inside = deliveries("in-range", 10);
    post_all(&stack, &inside).await;
    let to_ms = clock_past_last_record(&stack).await;
    eventually(WAIT, "the clock passed the end of the range", || async { hookline_common::wire::now_ms() > to_ms })
        .await;
    let after = deliveries("after-range", 5);
    post_all(&stack, &after).await;
    eventually(WAIT, "both services processed the stream", || async {
        billing.successes().len() == 23 && analytics.successes().len() == 23
    })
    .await;

    // Billing's handler had a bug for those two hours: re-process them for billing alone.
    let replayer =
        Replayer::new(ReplayerConfig { kafka: stack.kafka.clone(), ..ReplayerConfig::default() }).expect("replayer");
    let request = ReprocessRequest {
        service: "billing".into(),
        from: Some(format_rfc3339_millis(from_ms)),
        to: Some(format_rfc3339_millis(to_ms)),
        apply: true,
        by: "test".into(),
        ..ReprocessRequest::default()
    };
    let report = replayer.reprocess(&request).await.expect("reprocess");
    assert_eq!(report.records.len(), inside.len());
    let run_id = report.run_id.expect("a run id");
    eventually(WAIT, "billing re-processed the range and analytics skipped it", || async {
        billing.successes().len() == 33 && events(&stack, analytics_index, "other_service").await == 10
    })
    .await;
    for delivery in &inside {
        assert_eq!(billing.count(&delivery.delivery_id), 2, "processed, then re-processed once");
    }
    assert_each_processed_once(&billing, &before, "billing");
    assert_each_processed_once(&billing, &after, "billing");
    assert_eq!(analytics.calls().len(), 23, "analytics re-processed nothing");
    assert_eq!(events(&stack, billing_index, "duplicate").await, 0);
    let fates: Vec<(String, EntryStatusRecord)> = stack
        .records(&stack.kafka.dlq_status_topic)
        .await
        .iter()
        .filter_map(|record| {
            let key = String::from_utf8(record.key()?.to_vec()).ok()?;
            Some((key, EntryStatusRecord::decode(record.payload()?).ok()?))
        })
        .filter(|(key, _)| key.starts_with(&format!("reprocess:{run_id}:")))
        .collect();
    assert_eq!(fates.len(), inside.len(), "each re-processing recorded");
    assert!(fates.iter().all(|(_, fate)| fate.status == EntryStatus::Succeeded && fate.by == "consumer:billing"));

    // The same run's records delivered again (a second copy of each) are not processed again.
    let again: Vec<_> = stack
        .inbound_records()
        .await
        .into_iter()
        .filter(|record| read::inbound(record).reprocess_id.as_deref() == Some(run_id.as_str()))
        .collect();
    assert_eq!(again.len(), inside.len());
    let copies = again
        .iter()
        .map(|record| {
            let mut headers = OwnedHeaders::new();
            for h in rdkafka::message::Headers::iter(record.headers().expect("headers")) {
                headers = headers.insert(Header { key: h.key, value: h.value });
            }
            let key = String::from_utf8_lossy(record.key().unwrap_or_default()).into_owned();
            (record.partition(), key, headers, record.payload().unwrap_or_default().to_vec())
        })
        .collect();
    stack.produce_raw_batch(copies).await;
    eventually(WAIT, "billing skipped the redelivered run", || async {
        events(&stack, billing_index, "duplicate").await == 10
    })
    .await;
    assert_eq!(billing.successes().len(), 33);
    stack.shutdown().await;
}
