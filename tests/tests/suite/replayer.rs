//! The DLQ replayer against the real broker, Redis and the real consumer: entries re-driven through the same
//! dedupe and handler path, processed once however often they are replayed, and every fate recorded.

use std::time::Duration;

use bytes::Bytes;
use hookline_common::wire::{EntryStatus, EntryStatusRecord, kafka, now_ms};
use hookline_dlq_replayer::{
    ReplayerConfig,
    filter::Filter,
    index::{Entry, Status},
    ops::{DiscardRequest, ReplayRequest, Replayer},
};
use hookline_tests::{Delivery, TestStack, eventually, prometheus::Scrape};
use http::{Request, StatusCode};
use http_body_util::Full;
use rdkafka::{
    Message,
    message::{Header, OwnedHeaders},
    producer::FutureRecord,
};

fn replayer_for(stack: &TestStack, max_failed_again: u32) -> Replayer {
    let config = ReplayerConfig { kafka: stack.kafka.clone(), max_failed_again, ..ReplayerConfig::default() };
    Replayer::new(config).expect("replayer")
}

/// Posts deliveries the handler rejects as poison and waits until each is dead-lettered.
async fn dead_lettered(stack: &TestStack, n: usize) -> Vec<Delivery> {
    dead_lettered_among(stack, 0..n).await
}

/// Like [`dead_lettered`], for bodies numbered `range` (distinct numbers are distinct events), after everything
/// the consumers handled before.
async fn dead_lettered_among(stack: &TestStack, range: std::ops::Range<usize>) -> Vec<Delivery> {
    let deliveries: Vec<Delivery> = range.map(|i| Delivery::new(format!("{{\"i\":{i}}}").into_bytes())).collect();
    let before = stack.consumer_events("processed").await
        + stack.consumer_events("duplicate").await
        + stack.consumer_events("dead_lettered").await;
    for delivery in &deliveries {
        stack.handler.poison(&delivery.delivery_id);
        stack.post_accepted(delivery).await;
    }
    stack.wait_until_handled(before + deliveries.len() as u64).await;
    deliveries
}

async fn entry_of(replayer: &Replayer, event_id: &str) -> Entry {
    let entries = replayer.list(&Filter::default()).await.expect("list");
    entries.into_iter().rfind(|e| e.entry.event_id.as_deref() == Some(event_id)).expect("entry for the event")
}

fn by_ids(ids: &[&str]) -> ReplayRequest {
    ReplayRequest { ids: ids.iter().map(|id| id.to_string()).collect(), by: "test".into(), ..ReplayRequest::default() }
}

#[tokio::test]
async fn fixed_entry_replayed_is_processed_once_and_marked_succeeded_even_when_replayed_twice() {
    let stack = TestStack::builder().consumer().build().await;
    let replayer = replayer_for(&stack, 3);
    let delivery = dead_lettered(&stack, 1).await.remove(0);
    let entry = entry_of(&replayer, &delivery.delivery_id).await;
    assert_eq!(entry.status, Status::New);
    assert_eq!(entry.entry.error_class.as_deref(), Some("poison"));

    stack.handler.heal(&delivery.delivery_id);
    let id = entry.entry.id.clone();
    let report = replayer.replay(&by_ids(&[&id])).await.expect("replay");
    assert_eq!(report.done, vec![id.clone()]);
    eventually(Duration::from_secs(30), "replayed event processed", || async {
        stack.handler.count(&delivery.delivery_id) == 1
    })
    .await;
    eventually(Duration::from_secs(30), "entry marked succeeded", || async {
        entry_of(&replayer, &delivery.delivery_id).await.status == Status::Succeeded
    })
    .await;
    let processed = stack.handler.successes();
    assert_eq!(processed[0].body, delivery.body, "the raw body is re-driven unchanged");
    assert_eq!(processed[0].replay_of.as_deref(), Some(id.as_str()));

    // Again: the consumer's dedupe makes it a duplicate.
    replayer.replay(&by_ids(&[&id])).await.expect("second replay");
    stack.wait_until_handled(3).await;
    assert_eq!(stack.handler.count(&delivery.delivery_id), 1, "processed once, replayed twice");
    eventually(Duration::from_secs(30), "second replay recorded", || async {
        let entry = entry_of(&replayer, &delivery.delivery_id).await;
        entry.status == Status::Succeeded && entry.replays == 2
    })
    .await;
    stack.shutdown().await;
}

#[tokio::test]
async fn dry_run_changes_nothing() {
    let stack = TestStack::builder().consumer().build().await;
    let replayer = replayer_for(&stack, 3);
    dead_lettered(&stack, 2).await;
    let inbound_before = stack.inbound_records().await.len();
    let request = ReplayRequest { all: true, dry_run: true, ..ReplayRequest::default() };
    let report = replayer.replay(&request).await.expect("dry run");
    assert!(report.dry_run);
    assert_eq!(report.done.len(), 2, "it says what it would replay");
    assert_eq!(stack.inbound_records().await.len(), inbound_before, "nothing produced");
    assert!(stack.records(&stack.kafka.dlq_status_topic).await.is_empty(), "nothing recorded");
    assert!(replayer.list(&Filter::default()).await.expect("list").iter().all(|e| e.status == Status::New));
    stack.shutdown().await;
}

#[tokio::test]
async fn discard_is_recorded_and_replay_all_skips_it() {
    let stack = TestStack::builder().consumer().build().await;
    let replayer = replayer_for(&stack, 3);
    let deliveries = dead_lettered(&stack, 2).await;
    let (kept, dropped) = (&deliveries[0], &deliveries[1]);
    let dropped_id = entry_of(&replayer, &dropped.delivery_id).await.entry.id;
    let discard = DiscardRequest {
        ids: vec![dropped_id.clone()],
        reason: "test data, never valid".into(),
        by: "ops-1".into(),
        ..DiscardRequest::default()
    };
    assert_eq!(replayer.discard(&discard).await.expect("discard").done, vec![dropped_id.clone()]);
    let entry = entry_of(&replayer, &dropped.delivery_id).await;
    assert_eq!(entry.status, Status::Discarded);
    let last = entry.last_status.expect("status");
    assert_eq!((last.note.as_deref(), last.by.as_str()), (Some("test data, never valid"), "ops-1"));

    stack.handler.heal(&kept.delivery_id);
    stack.handler.heal(&dropped.delivery_id);
    let report = replayer
        .replay(&ReplayRequest { all: true, by: "test".into(), ..ReplayRequest::default() })
        .await
        .expect("all");
    assert_eq!(report.done.len(), 1);
    eventually(Duration::from_secs(30), "kept entry processed", || async {
        stack.handler.count(&kept.delivery_id) == 1
    })
    .await;
    stack.wait_until_handled(3).await;
    assert_eq!(stack.handler.count(&dropped.delivery_id), 0, "a discarded entry is never re-driven by --all");
    let forced = ReplayRequest {
        all: true,
        force: true,
        filter: Filter { status: Some("discarded".into()), ..Filter::default() },
        ..ReplayRequest::default()
    };
    assert_eq!(replayer.replay(&forced).await.expect("forced all").done.len(), 0, "not even forced");
    assert!(stack.records(&stack.kafka.dlq_topic).await.len() == 2, "discarding deletes nothing");
    stack.shutdown().await;
}

#[tokio::test]
async fn entry_that_fails_again_links_to_its_new_entry_and_is_flagged() {
    let stack = TestStack::builder().consumer().build().await;
    let replayer = replayer_for(&stack, 1);
    let delivery = dead_lettered(&stack, 1).await.remove(0);
    let first = entry_of(&replayer, &delivery.delivery_id).await;
    replayer.replay(&by_ids(&[&first.entry.id])).await.expect("replay");
    stack.wait_until_handled(2).await;

    let entries = replayer.list(&Filter::default()).await.expect("list");
    assert_eq!(entries.len(), 2, "it came back to the DLQ");
    let old = entries.iter().find(|e| e.entry.id == first.entry.id).expect("old entry");
    let new = entries.iter().find(|e| e.entry.id != first.entry.id).expect("new entry");
    assert_eq!(old.status, Status::FailedAgain);
    assert_eq!(old.last_status.as_ref().and_then(|s| s.new_entry.clone()), Some(new.entry.id.clone()));
    assert_eq!(new.replay_of.as_deref(), Some(first.entry.id.as_str()), "the new entry links the old");
    assert_eq!(new.failed_again, 1);
    assert!(new.flagged, "max_failed_again = 1");

    let refused = replayer.replay(&by_ids(&[&new.entry.id])).await.expect("replay flagged");
    assert!(refused.done.is_empty() && refused.skipped[0].reason.contains("flagged"));
    stack.handler.heal(&delivery.delivery_id);
    let forced = ReplayRequest { force: true, ..by_ids(&[&new.entry.id]) };
    assert_eq!(replayer.replay(&forced).await.expect("forced").done.len(), 1);
    eventually(Duration::from_secs(30), "processed after the forced replay", || async {
        stack.handler.count(&delivery.delivery_id) == 1
    })
    .await;
    stack.shutdown().await;
}

#[tokio::test]
async fn replay_rate_cap_holds() {
    let stack = TestStack::builder().consumer().build().await;
    let replayer = replayer_for(&stack, 3);
    dead_lettered(&stack, 5).await;
    let before = stack.inbound_records().await.len();
    let request = ReplayRequest { all: true, rate: Some(2.0), by: "test".into(), ..ReplayRequest::default() };
    assert_eq!(replayer.replay(&request).await.expect("replay").done.len(), 5);
    // Counted on the broker's record timestamps: no one-second window holds more than the rate (+1 for the edge).
    let records = stack.inbound_records().await;
    let mut times: Vec<i64> = records
        .iter()
        .filter(|r| {
            let record = hookline_record::inbound::InboundRecord::decode(kafka::headers_of(r.headers()));
            record.is_ok_and(|record| record.replay_of.is_some())
        })
        .filter_map(|r| r.timestamp().to_millis())
        .collect();
    times.sort_unstable();
    assert_eq!(times.len(), 5);
    assert_eq!(records.len(), before + 5);
    for (index, start) in times.iter().enumerate() {
        let in_window = times[index..].iter().take_while(|t| **t < start + 1_000).count();
        assert!(in_window <= 3, "{in_window} replays within one second of {start}: {times:?}");
    }
    stack.shutdown().await;
}

#[tokio::test]
async fn admin_api_requires_the_token_and_has_the_cli_semantics() {
    let stack = TestStack::builder().consumer().build().await;
    let delivery = dead_lettered(&stack, 1).await.remove(0);
    let api = stack.start_replayer_api("s3cret-token-s3cret-token-s3cret-token").await;
    let addr = api.addr;
    let request = |method: &str, path: &str, token: Option<&str>, body: &str| {
        let mut builder = Request::builder().method(method).uri(format!("http://{addr}{path}"));
        if let Some(token) = token {
            builder = builder.header("authorization", format!("Bearer {token}"));
        }
        builder.body(Full::new(Bytes::from(body.to_owned()))).expect("request")
    };

    // While the index is being built the API answers 503, like /readyz.
    eventually(Duration::from_secs(30), "index built (ready)", || async {
        stack.send(request("GET", "/readyz", None, "")).await.status == StatusCode::OK
    })
    .await;
    for token in [None, Some("wrong"), Some("s3cret-tokeN"), Some("")] {
        let reply = stack.send(request("GET", "/v1/entries", token, "")).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{token:?}");
    }
    let reply = stack
        .send(request(
            "GET",
            "/v1/entries?status=new&source=github",
            Some("s3cret-token-s3cret-token-s3cret-token"),
            "",
        ))
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    let page: serde_json::Value = serde_json::from_slice(&reply.body).expect("JSON");
    let entries = page["entries"].as_array().expect("entries").clone();
    assert_eq!((entries.len(), page["total_matching"].as_u64()), (1, Some(1)));
    let id = entries[0]["id"].as_str().expect("id").to_owned();
    assert_eq!(entries[0]["event_id"].as_str(), Some(delivery.delivery_id.as_str()));

    let reply = stack
        .send(request("GET", &format!("/v1/entries/{id}"), Some("s3cret-token-s3cret-token-s3cret-token"), ""))
        .await;
    let detail: serde_json::Value = serde_json::from_slice(&reply.body).expect("JSON");
    assert_eq!(detail["body"].as_str().map(str::as_bytes), Some(delivery.body.as_ref()));
    assert!(detail["headers"].as_array().is_some_and(|h| h.len() > 10));

    let reply = stack
        .send(request(
            "POST",
            "/v1/replay",
            Some("s3cret-token-s3cret-token-s3cret-token"),
            r#"{"all":true,"dry_run":true}"#,
        ))
        .await;
    let report: serde_json::Value = serde_json::from_slice(&reply.body).expect("JSON");
    assert_eq!(report["done"].as_array().map(Vec::len), Some(1));
    assert_eq!(stack.handler.attempts(&delivery.delivery_id), 1, "a dry run re-drives nothing");
    let reply = stack
        .send(request(
            "POST",
            "/v1/discard",
            Some("s3cret-token-s3cret-token-s3cret-token"),
            &format!(r#"{{"ids":["{id}"]}}"#),
        ))
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "a discard needs a reason");
    let body = format!(r#"{{"ids":["{id}"],"reason":"duplicate test","by":"oncall"}}"#);
    assert_eq!(
        stack.send(request("POST", "/v1/discard", Some("s3cret-token-s3cret-token-s3cret-token"), &body)).await.status,
        StatusCode::OK
    );
    // Read your writes: the call returned once the service's index had read the status back.
    let reply = stack.send(request("GET", "/v1/stats", Some("s3cret-token-s3cret-token-s3cret-token"), "")).await;
    let stats: serde_json::Value = serde_json::from_slice(&reply.body).expect("JSON");
    assert_eq!(stats["by_status"]["discarded"].as_u64(), Some(1));

    // Probes and metrics need no token.
    assert_eq!(stack.send(request("GET", "/livez", None, "")).await.status, StatusCode::OK);
    eventually(Duration::from_secs(15), "metrics show the discarded entry", || async {
        let reply = stack.send(request("GET", "/metrics", None, "")).await;
        let scrape = Scrape::parse(&String::from_utf8_lossy(&reply.body));
        scrape.value("hookline_dlq_discards_total", &[]) == Some(1.0)
            && scrape.samples("hookline_dlq_entries", &[("status", "discarded")]).any(|sample| sample.value == 1.0)
    })
    .await;
    api.stop().await;
    stack.shutdown().await;
}

/// Writes a status record as another process would have (a replayer that died between its `replayed` record and
/// the re-drive): signed with the record key, since the index applies only status records hookline wrote.
async fn write_status(stack: &TestStack, entry_id: &str, record: &EntryStatusRecord) {
    let producer =
        hookline_common::producer::AckedProducer::new(&stack.kafka, "test-status-producer").expect("producer");
    let value = serde_json::to_vec(record).expect("JSON");
    let out = FutureRecord::<str, [u8]>::to(&stack.kafka.dlq_status_topic).key(entry_id).payload(&value);
    producer.send(out, hookline_common::producer::QueueWait::UpToDeadline).await.expect("status produced");
}

#[tokio::test]
async fn replayed_entry_without_an_outcome_turns_overdue_and_replay_all_takes_it_again() {
    let stack = TestStack::builder().consumer().build().await;
    let config =
        ReplayerConfig { kafka: stack.kafka.clone(), replay_outcome_timeout_s: 600, ..ReplayerConfig::default() };
    let replayer = Replayer::new(config).expect("replayer");
    let deliveries = dead_lettered(&stack, 2).await;
    let (lost, pending) = (&deliveries[0], &deliveries[1]);
    let lost_id = entry_of(&replayer, &lost.delivery_id).await.entry.id;
    let pending_id = entry_of(&replayer, &pending.delivery_id).await.entry.id;
    let replayed = |at_ms| EntryStatusRecord {
        status: EntryStatus::Replayed,
        at_ms,
        by: "replayer:crashed".into(),
        event_id: None,
        new_entry: None,
        note: None,
        replays: Some(1),
    };
    // One re-drive recorded an hour ago whose event never arrived; one recorded just now (its outcome may come).
    write_status(&stack, &lost_id, &replayed(now_ms() - 3_600_000)).await;
    write_status(&stack, &pending_id, &replayed(now_ms())).await;
    assert_eq!(entry_of(&replayer, &lost.delivery_id).await.status, Status::ReplayOverdue);
    assert_eq!(entry_of(&replayer, &pending.delivery_id).await.status, Status::Replayed);
    let overdue = Filter { status: Some("replay_overdue".into()), ..Filter::default() };
    let listed: Vec<String> = replayer.list(&overdue).await.expect("list").into_iter().map(|e| e.entry.id).collect();
    assert_eq!(listed, vec![lost_id.clone()], "visible as such");

    stack.handler.heal(&lost.delivery_id);
    stack.handler.heal(&pending.delivery_id);
    let report = replayer.replay(&ReplayRequest { all: true, by: "test".into(), ..ReplayRequest::default() }).await;
    assert_eq!(report.expect("replay --all").done, vec![lost_id.clone()], "the overdue entry only");
    eventually(Duration::from_secs(30), "overdue entry processed and marked succeeded", || async {
        stack.handler.count(&lost.delivery_id) == 1
            && entry_of(&replayer, &lost.delivery_id).await.status == Status::Succeeded
    })
    .await;
    assert_eq!(entry_of(&replayer, &lost.delivery_id).await.replays, 2, "counted after the lost re-drive");
    assert_eq!(stack.handler.count(&pending.delivery_id), 0, "a pending replay is left alone");
    stack.shutdown().await;
}

#[tokio::test]
async fn redriven_record_that_is_not_a_hookline_record_is_recorded_failed_again() {
    let stack = TestStack::builder().consumer().build().await;
    let replayer = replayer_for(&stack, 3);
    let headers = OwnedHeaders::new().insert(Header { key: "unrelated", value: Some("x") });
    stack.produce_raw(0, "k", headers, b"not from a gateway").await;
    stack.wait_until_handled(1).await;
    let first = replayer.list(&Filter::default()).await.expect("list").remove(0);
    assert_eq!(first.status, Status::New);

    replayer.replay(&by_ids(&[&first.entry.id])).await.expect("replay");
    stack.wait_until_handled(2).await;
    eventually(Duration::from_secs(30), "the old entry gets its outcome", || async {
        let entries = replayer.list(&Filter::default()).await.expect("list");
        entries.len() == 2 && entries.iter().any(|e| e.entry.id == first.entry.id && e.status == Status::FailedAgain)
    })
    .await;
    let entries = replayer.list(&Filter::default()).await.expect("list");
    let old = entries.iter().find(|e| e.entry.id == first.entry.id).expect("old entry");
    let new = entries.iter().find(|e| e.entry.id != first.entry.id).expect("new entry");
    assert_eq!(old.last_status.as_ref().and_then(|s| s.new_entry.clone()), Some(new.entry.id.clone()));
    assert_eq!(new.replay_of.as_deref(), Some(first.entry.id.as_str()));
    assert_eq!(new.status, Status::New);
    stack.shutdown().await;
}

#[tokio::test]
async fn service_index_follows_both_topics_pages_with_a_stable_cursor_and_gauges_untriaged_age() {
    let stack = TestStack::builder().consumer().build().await;
    let first = dead_lettered(&stack, 5).await;
    let api = stack.start_replayer_api("t0ken-t0ken-t0ken-t0ken-t0ken-t0ken-t0").await;
    let addr = api.addr;
    let get = |path: String| {
        Request::get(format!("http://{addr}{path}"))
            .header("authorization", "Bearer t0ken-t0ken-t0ken-t0ken-t0ken-t0ken-t0")
            .body(Full::new(Bytes::new()))
            .expect("request")
    };
    eventually(Duration::from_secs(30), "index built (ready)", || async {
        stack.send(get("/readyz".into())).await.status == StatusCode::OK
    })
    .await;

    // Pages of two: every entry once, in one stable order, whatever arrives meanwhile.
    let mut seen: Vec<String> = Vec::new();
    let mut cursor = String::new();
    loop {
        let reply = stack.send(get(format!("/v1/entries?limit=2&cursor={cursor}"))).await;
        assert_eq!(reply.status, StatusCode::OK);
        let page: serde_json::Value = serde_json::from_slice(&reply.body).expect("JSON");
        assert_eq!(page["total_matching"].as_u64(), Some(5));
        seen.extend(
            page["entries"].as_array().expect("entries").iter().map(|e| e["id"].as_str().expect("id").to_owned()),
        );
        match page["next_cursor"].as_str() {
            Some(next) => cursor = next.to_owned(),
            None => break,
        }
    }
    let mut sorted = seen.clone();
    sorted.sort_by_key(|id| id.rsplit(':').next().and_then(|o| o.parse::<i64>().ok()));
    sorted.dedup();
    assert_eq!((seen.len(), &seen), (5, &sorted), "five entries, each once, in offset order");
    assert_eq!(stack.send(get("/v1/entries?cursor=nonsense".into())).await.status, StatusCode::BAD_REQUEST);

    // New dead letters reach the running service's index by tailing, without a restart.
    let more = dead_lettered_among(&stack, 5..7).await;
    eventually(Duration::from_secs(30), "tailed entries listed", || async {
        let reply = stack.send(get(format!("/v1/entries?text=poison&source=github&limit=1&cursor={cursor}"))).await;
        let page: serde_json::Value = serde_json::from_slice(&reply.body).unwrap_or_default();
        page["total_matching"].as_u64() == Some(7)
    })
    .await;
    // `show` reads the body by partition and offset.
    let reply = stack.send(get(format!("/v1/entries/{}", seen[0]))).await;
    let detail: serde_json::Value = serde_json::from_slice(&reply.body).expect("JSON");
    // Dead letters reach the DLQ in the order they fail, not the order they were sent (events run concurrently):
    // the entry's body is that of the event it names.
    let event_id = detail["event_id"].as_str().expect("event id");
    let delivery = first.iter().find(|delivery| delivery.delivery_id == event_id).expect("one of the first five");
    assert_eq!(detail["body"].as_str().map(str::as_bytes), Some(delivery.body.as_ref()));
    assert_eq!(stack.send(get("/v1/entries/no-such-topic:0:0".into())).await.status, StatusCode::NOT_FOUND);

    let metric = |text: &str| {
        Scrape::parse(text)
            .value("hookline_dlq_oldest_untriaged_age_seconds", &[("source", "github")])
            .map(|age| age as i64)
    };
    eventually(Duration::from_secs(15), "the untriaged gauge shows github", || async {
        let reply = stack.send(get("/metrics".into())).await;
        metric(&String::from_utf8_lossy(&reply.body)).is_some_and(|age| (0..600).contains(&age))
    })
    .await;
    // Discard everything matching: dry run first, then for real; the gauge then disappears.
    let discard = |dry_run: bool| {
        let body = format!(r#"{{"all":true,"filter":{{"source":"github"}},"reason":"test","dry_run":{dry_run}}}"#);
        Request::post(format!("http://{addr}/v1/discard"))
            .header("authorization", "Bearer t0ken-t0ken-t0ken-t0ken-t0ken-t0ken-t0")
            .body(Full::new(Bytes::from(body)))
            .expect("request")
    };
    let report: serde_json::Value = serde_json::from_slice(&stack.send(discard(true)).await.body).expect("JSON");
    assert_eq!(report["done"].as_array().map(Vec::len), Some(7));
    let reply = stack.send(get("/v1/stats".into())).await;
    let stats: serde_json::Value = serde_json::from_slice(&reply.body).expect("JSON");
    assert_eq!(stats["by_status"]["new"].as_u64(), Some(7), "a dry run records nothing");
    let report: serde_json::Value = serde_json::from_slice(&stack.send(discard(false)).await.body).expect("JSON");
    assert_eq!(report["done"].as_array().map(Vec::len), Some(7));
    let reply = stack.send(get("/v1/stats".into())).await;
    let stats: serde_json::Value = serde_json::from_slice(&reply.body).expect("JSON");
    assert_eq!(stats["by_status"]["discarded"].as_u64(), Some(7), "visible as soon as the call returned");
    eventually(Duration::from_secs(15), "no untriaged entry left: the gauge is gone", || async {
        let reply = stack.send(get("/metrics".into())).await;
        metric(&String::from_utf8_lossy(&reply.body)).is_none()
    })
    .await;
    assert_eq!(stack.handler.attempts(&more[0].delivery_id), 1, "discarding re-drives nothing");
    api.stop().await;
    stack.shutdown().await;
}

#[tokio::test]
async fn local_stack_dlq_topic_never_expires_entries() {
    use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
    let admin: AdminClient<rdkafka::client::DefaultClientContext> =
        hookline_common::kafka::admin_config(&hookline_tests::plaintext_kafka()).create().expect("admin");
    let topic = hookline_common::wire::default_topic::DEAD_LETTER;
    let results = admin
        .describe_configs([&ResourceSpecifier::Topic(topic)], &AdminOptions::new())
        .await
        .expect("describe configs");
    let resource = results.into_iter().next().expect("one result").expect("the stack's DLQ topic exists");
    let value = |name: &str| resource.get(name).and_then(|entry| entry.value.clone());
    assert_eq!(value("retention.ms").as_deref(), Some("-1"), "scripts/stack creates {topic} with unlimited retention");
    assert_eq!(value("retention.bytes").as_deref(), Some("-1"));
}

#[tokio::test]
async fn cli_lists_an_empty_dlq_without_waiting() {
    let stack = TestStack::builder().build().await;
    let replayer = replayer_for(&stack, 3);
    let entries = tokio::time::timeout(Duration::from_secs(30), replayer.list(&Filter::default()))
        .await
        .expect("an empty DLQ is listed at once, not waited on")
        .expect("list");
    assert!(entries.is_empty());
    stack.shutdown().await;
}
