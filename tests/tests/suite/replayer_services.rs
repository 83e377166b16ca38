//! The replayer with consumer services, against the real broker, Redis and consumers: entries name the service
//! that dead-lettered them and filter by it, a replay goes to that service only, re-processing re-drives exactly
//! the records asked for with the headers that address one service, and the index is not fooled by the
//! re-processing records that share its status topic.

use hookline_common::time::format_rfc3339_millis;
use std::{sync::Arc, time::Duration};

use bytes::Bytes;
use hookline_common::wire::{EntryStatus, EntryStatusRecord, REPROCESS_STATUS_KEY_PREFIX, kafka, now_ms};
use hookline_dlq_replayer::{
    ReplayerConfig,
    filter::Filter,
    index::{Entry, Status},
    ops::{ReplayRequest, Replayer, ReprocessRequest},
};
use hookline_record::{inbound::InboundRecord, redrive::ReprocessHeaders};
use hookline_tests::{Delivery, TestHandler, TestStack, eventually, prometheus::Scrape};
use http::{Request, StatusCode};
use http_body_util::Full;
use rdkafka::{Message, message::OwnedMessage, producer::FutureRecord};

fn replayer_for(stack: &TestStack) -> Replayer {
    Replayer::new(ReplayerConfig { kafka: stack.kafka.clone(), ..ReplayerConfig::default() }).expect("replayer")
}

fn by_service(service: &str) -> Filter {
    Filter { service: Some(service.to_owned()), ..Filter::default() }
}

/// An inbound record a service or the replayer wrote, decoded.
fn inbound(record: &OwnedMessage) -> InboundRecord {
    InboundRecord::decode(kafka::headers_of(record.headers())).expect("an inbound record")
}

/// A re-processing copy's own headers, when it is one.
fn reprocess_headers(record: &OwnedMessage) -> Option<ReprocessHeaders> {
    ReprocessHeaders::decode(kafka::headers_of(record.headers()))
}

/// The stack's consumer (its service is named after its group) and a second service, `billing`, with its own
/// handler, both reading the stack's inbound topic.
async fn two_services() -> (TestStack, Arc<TestHandler>) {
    let mut stack = TestStack::builder().consumer().build().await;
    let billing = Arc::new(TestHandler::default());
    let config = stack.service_config("billing");
    stack.start_consumer_with(config, billing.clone()).await;
    (stack, billing)
}

/// Posts `n` deliveries both services reject as poison and waits until each service dead-lettered each.
async fn dead_lettered_by_both(stack: &TestStack, billing: &TestHandler, n: usize) -> Vec<Delivery> {
    let deliveries: Vec<Delivery> = (0..n).map(|i| Delivery::new(format!("{{\"i\":{i}}}").into_bytes())).collect();
    for delivery in &deliveries {
        stack.handler.poison(&delivery.delivery_id);
        billing.poison(&delivery.delivery_id);
        stack.post_accepted(delivery).await;
    }
    stack.wait_until_handled(2 * n as u64).await;
    deliveries
}

async fn entry_of(replayer: &Replayer, service: &str, event_id: &str) -> Entry {
    let entries = replayer.list(&by_service(service)).await.expect("list");
    entries.into_iter().rfind(|e| e.entry.event_id.as_deref() == Some(event_id)).expect("entry for the event")
}

/// Writes a status record as the replayer or a consumer does: signed with the record key.
async fn write_status(stack: &TestStack, key: &str, record: &EntryStatusRecord) {
    let producer =
        hookline_common::producer::AckedProducer::new(&stack.kafka, "test-status-producer").expect("producer");
    let value = serde_json::to_vec(record).expect("JSON");
    let out = FutureRecord::<str, [u8]>::to(&stack.kafka.dlq_status_topic).key(key).payload(&value);
    producer.send(out, hookline_common::producer::QueueWait::UpToDeadline).await.expect("status produced");
}

#[tokio::test]
async fn entries_are_listed_filtered_and_counted_by_the_service_that_dead_lettered_them() {
    let (stack, billing) = two_services().await;
    let replayer = replayer_for(&stack);
    let default_service = stack.consumer_config.service_name().to_owned();
    let deliveries = dead_lettered_by_both(&stack, &billing, 2).await;

    let all = replayer.list(&Filter::default()).await.expect("list");
    assert_eq!(all.len(), 4, "each service dead-lettered each event");
    for service in ["billing", default_service.as_str()] {
        let entries = replayer.list(&by_service(service)).await.expect("list");
        assert_eq!(entries.len(), 2, "{service}");
        assert!(entries.iter().all(|e| e.entry.service.as_deref() == Some(service)), "{service}");
        let mut ids: Vec<_> = entries.iter().filter_map(|e| e.entry.event_id.clone()).collect();
        ids.sort();
        let mut expected: Vec<_> = deliveries.iter().map(|d| d.delivery_id.clone()).collect();
        expected.sort();
        assert_eq!(ids, expected, "{service}");
    }
    assert!(replayer.list(&by_service("no-such-service")).await.expect("list").is_empty());
    let stats = replayer.stats(&Filter::default()).await.expect("stats");
    assert_eq!(stats.by_service.get("billing"), Some(&2));
    assert_eq!(stats.by_service.get(&default_service), Some(&2));
    let detail = replayer.show(&all[0].entry.id).await.expect("show").expect("entry");
    assert!(detail.entry.entry.service.is_some(), "show names the service");

    // The API takes `service=` like the other filters; the untriaged gauge is per source and service.
    let api = stack.start_replayer_api("t0ken-t0ken-t0ken-t0ken-t0ken-t0ken-t0").await;
    let addr = api.addr;
    let get = |path: &str| {
        Request::get(format!("http://{addr}{path}"))
            .header("authorization", "Bearer t0ken-t0ken-t0ken-t0ken-t0ken-t0ken-t0")
            .body(Full::new(Bytes::new()))
            .expect("request")
    };
    eventually(Duration::from_secs(30), "index built (ready)", || async {
        stack.send(get("/readyz")).await.status == StatusCode::OK
    })
    .await;
    let reply = stack.send(get("/v1/entries?service=billing")).await;
    assert_eq!(reply.status, StatusCode::OK);
    let page: serde_json::Value = serde_json::from_slice(&reply.body).expect("JSON");
    assert_eq!(page["total_matching"].as_u64(), Some(2));
    assert!(page["entries"].as_array().expect("entries").iter().all(|e| e["service"] == "billing"));
    eventually(Duration::from_secs(15), "the untriaged gauge has a series per service", || async {
        let reply = stack.send(get("/metrics")).await;
        let metrics = Scrape::parse(&String::from_utf8_lossy(&reply.body));
        let series = |service: &str| {
            metrics
                .value("hookline_dlq_oldest_untriaged_age_seconds", &[("service", service), ("source", "github")])
                .is_some()
        };
        series("billing") && series(&default_service)
    })
    .await;
    api.stop().await;
    stack.shutdown().await;
}

#[tokio::test]
async fn replay_redrives_an_entry_to_the_service_that_dead_lettered_it_only() {
    let (stack, billing) = two_services().await;
    let replayer = replayer_for(&stack);
    let delivery = dead_lettered_by_both(&stack, &billing, 1).await.remove(0);
    let entry = entry_of(&replayer, "billing", &delivery.delivery_id).await;
    assert_eq!(entry.entry.service.as_deref(), Some("billing"));

    billing.heal(&delivery.delivery_id);
    stack.handler.heal(&delivery.delivery_id);
    let request = ReplayRequest { ids: vec![entry.entry.id.clone()], by: "test".into(), ..ReplayRequest::default() };
    assert_eq!(replayer.replay(&request).await.expect("replay").done, vec![entry.entry.id.clone()]);
    eventually(Duration::from_secs(30), "billing processed the replay and its entry is succeeded", || async {
        billing.count(&delivery.delivery_id) == 1
            && entry_of(&replayer, "billing", &delivery.delivery_id).await.status == Status::Succeeded
    })
    .await;

    let redriven: Vec<OwnedMessage> = stack
        .inbound_records()
        .await
        .into_iter()
        .filter(|r| inbound(r).replay_of.as_deref() == Some(entry.entry.id.as_str()))
        .collect();
    assert_eq!(redriven.len(), 1);
    assert_eq!(inbound(&redriven[0]).service.as_deref(), Some("billing"), "addressed to its service");
    let as_dead_letter = hookline_common::wire::dead_letter_entry(&redriven[0]);
    assert_eq!(
        (as_dead_letter.service, as_dead_letter.error_class, as_dead_letter.original_topic),
        (None, None, None),
        "no dead-letter header goes back"
    );
    // The other service skips it (as it arrives: nothing is held back), so the default service's own entry
    // is untouched and its handler was never called again.
    let default_service = stack.consumer_config.service_name().to_owned();
    let other = entry_of(&replayer, &default_service, &delivery.delivery_id).await;
    assert_eq!(other.status, Status::New, "the other service's entry is left alone");
    eventually(Duration::from_secs(30), "the other service skipped the replay as addressed elsewhere", || async {
        stack.consumer_metric(0, "hookline_consumer_events_total", &[("outcome", "other_service")]).await >= 1.0
    })
    .await;
    assert_eq!(stack.handler.attempts(&delivery.delivery_id), 1, "the other service never handled the replay");
    stack.shutdown().await;
}

/// Produces records through the gateway and returns them as the inbound topic holds them, once their broker
/// timestamps are all in the past (so that what is produced next is timestamped later).
async fn posted(stack: &TestStack, bodies: &[String]) -> Vec<OwnedMessage> {
    let deliveries: Vec<Delivery> = bodies.iter().map(|body| Delivery::new(body.clone().into_bytes())).collect();
    for delivery in &deliveries {
        stack.post_accepted(delivery).await;
    }
    let ids: Vec<&str> = deliveries.iter().map(|d| d.delivery_id.as_str()).collect();
    let records: Vec<OwnedMessage> = stack
        .inbound_records()
        .await
        .into_iter()
        .filter(|r| ids.contains(&inbound(r).meta.event_id.as_str()))
        .collect();
    assert_eq!(records.len(), deliveries.len());
    let latest = records.iter().filter_map(|r| r.timestamp().to_millis()).max().expect("timestamps");
    eventually(Duration::from_secs(5), "the clock passed the last record's timestamp", || async { now_ms() > latest })
        .await;
    records
}

#[tokio::test]
async fn reprocess_dry_run_changes_nothing_and_apply_redrives_exactly_the_range_to_one_service() {
    let stack = TestStack::builder().build().await;
    let replayer = replayer_for(&stack);
    let before = posted(&stack, &["{\"n\":1}".to_owned(), "{\"n\":2}".to_owned()]).await;
    let from_ms = now_ms();
    let inside = posted(&stack, &(3..6).map(|n| format!("{{\"n\":{n}}}")).collect::<Vec<_>>()).await;
    // Re-drives inside the range are copies of events their originals select: never selected themselves.
    let copy_of = &before[0];
    let copies = [
        InboundRecord { replay_of: Some("some.dlq:0:0".to_owned()), ..inbound(copy_of) },
        InboundRecord { reprocess_id: Some("an-earlier-run".to_owned()), ..inbound(copy_of) },
    ];
    for copy in copies {
        let headers = kafka::owned_headers(&copy.encode(&stack.kafka.inbound_topic, Bytes::new()).headers);
        stack.produce_raw(0, "copy", headers, copy_of.payload().unwrap_or_default()).await;
    }
    let last_inside = stack.inbound_records().await.iter().filter_map(|r| r.timestamp().to_millis()).max();
    eventually(Duration::from_secs(5), "the clock passed the range", || async {
        last_inside.is_some_and(|last| now_ms() > last)
    })
    .await;
    let to_ms = now_ms();
    let after = posted(&stack, &["{\"n\":9}".to_owned()]).await;
    let n_inbound = stack.inbound_records().await.len();
    assert_eq!(n_inbound, before.len() + inside.len() + 2 + after.len());

    let position = |r: &OwnedMessage| format!("{}:{}:{}", stack.kafka.inbound_topic, r.partition(), r.offset());
    let mut expected: Vec<String> = inside.iter().map(position).collect();
    expected.sort();
    let request = ReprocessRequest {
        service: "billing".into(),
        from: Some(format_rfc3339_millis(from_ms)),
        to: Some(format_rfc3339_millis(to_ms)),
        by: "test".into(),
        ..ReprocessRequest::default()
    };

    // A dry run lists what would be re-driven and changes nothing.
    let dry = replayer.reprocess(&request).await.expect("dry run");
    assert!(!dry.applied && dry.run_id.is_none());
    let mut listed: Vec<String> = dry.records.iter().map(|r| r.position.clone()).collect();
    listed.sort();
    assert_eq!(listed, expected, "exactly the originals in the range");
    assert!(dry.records.iter().all(|r| r.source.as_deref() == Some("github") && r.received_at_ms.is_some()));
    assert_eq!(stack.inbound_records().await.len(), n_inbound, "nothing produced");
    assert!(stack.records(&stack.kafka.dlq_status_topic).await.is_empty(), "nothing recorded");

    // Applied: the request is recorded, then each record is produced again, addressed to the service.
    let applied = replayer.reprocess(&ReprocessRequest { apply: true, ..request.clone() }).await.expect("apply");
    let run_id = applied.run_id.clone().expect("a run id");
    assert!(uuid::Uuid::parse_str(&run_id).is_ok_and(|id| id.get_version_num() == 4));
    let records = stack.inbound_records().await;
    let redriven: Vec<(&OwnedMessage, ReprocessHeaders)> = records
        .iter()
        .filter_map(|r| Some((r, reprocess_headers(r)?)))
        .filter(|(_, copy)| copy.run_id == run_id)
        .collect();
    assert_eq!(records.len(), n_inbound + inside.len(), "one record per selected event, nothing else");
    let mut of: Vec<String> = redriven.iter().map(|(_, copy)| copy.of.clone()).collect();
    of.sort();
    assert_eq!(of, expected);
    for (record, copy) in &redriven {
        let original = inside.iter().find(|o| position(o) == copy.of).expect("the record it re-drives");
        assert_eq!(copy.service, "billing");
        assert_eq!(record.key(), original.key(), "the exact key");
        assert_eq!(record.payload(), original.payload(), "the exact body");
        let (record, original) = (inbound(record), inbound(original));
        assert_eq!(record.meta, original.meta, "the event's metadata: id, received at, ...");
        assert_eq!(record.service.as_deref(), Some("billing"));
        assert!(record.replay_of.is_none());
    }
    let statuses = stack.records(&stack.kafka.dlq_status_topic).await;
    assert_eq!(statuses.len(), 1, "the request, recorded once");
    let key = String::from_utf8_lossy(statuses[0].key().expect("key")).into_owned();
    assert_eq!(key, format!("{REPROCESS_STATUS_KEY_PREFIX}{run_id}"));
    let recorded: EntryStatusRecord = serde_json::from_slice(statuses[0].payload().expect("value")).expect("JSON");
    assert_eq!(
        (recorded.status, recorded.by.as_str(), recorded.replays),
        (EntryStatus::Replayed, "replayer:test", Some(3))
    );
    assert!(recorded.note.as_deref().is_some_and(|note| note.contains("billing") && note.contains("3 records")));

    // By event id (the topic's whole retention): the original only, not the copies made since.
    let wanted = inbound(&inside[1]).meta.event_id;
    let by_id = ReprocessRequest { service: "billing".into(), event_ids: vec![wanted], ..ReprocessRequest::default() };
    let found = replayer.reprocess(&by_id).await.expect("by event id");
    assert_eq!(found.records.iter().map(|r| r.position.clone()).collect::<Vec<_>>(), vec![position(&inside[1])]);
    // No service, or no range and no id, is refused.
    assert!(replayer.reprocess(&ReprocessRequest { service: " ".into(), ..request.clone() }).await.is_err());
    let unbounded = ReprocessRequest { service: "billing".into(), ..ReprocessRequest::default() };
    assert!(replayer.reprocess(&unbounded).await.is_err());
    assert!(!after.is_empty());
    stack.shutdown().await;
}

#[tokio::test]
async fn the_index_ignores_reprocess_status_keys() {
    let stack = TestStack::builder().consumer().build().await;
    let replayer = replayer_for(&stack);
    let delivery = Delivery::new(b"{\"only\":1}".to_vec());
    stack.handler.poison(&delivery.delivery_id);
    stack.post_accepted(&delivery).await;
    stack.wait_until_handled(1).await;
    let record = |status, by: &str| EntryStatusRecord {
        status,
        at_ms: now_ms(),
        by: by.to_owned(),
        event_id: Some(delivery.delivery_id.clone()),
        new_entry: Some(format!("{}:0:7", stack.kafka.dlq_topic)),
        note: Some("re-process".into()),
        replays: Some(3),
    };
    // A request and its fates, keyed as the replayer and the consumer write them; one names a DLQ position.
    let run = uuid::Uuid::new_v4();
    write_status(&stack, &format!("reprocess:{run}"), &record(EntryStatus::Replayed, "replayer:ops")).await;
    let fate = format!("reprocess:{run}:{}:0:0", stack.kafka.inbound_topic);
    write_status(&stack, &fate, &record(EntryStatus::Succeeded, "consumer:billing")).await;
    let dlq_lookalike = format!("reprocess:{run}:{}:0:0", stack.kafka.dlq_topic);
    write_status(&stack, &dlq_lookalike, &record(EntryStatus::FailedAgain, "consumer:billing")).await;

    let entries = replayer.list(&Filter::default()).await.expect("list");
    assert_eq!(entries.len(), 1, "no phantom entries");
    assert_eq!(entries[0].status, Status::New, "no re-processing fate applied to a DLQ entry");
    assert_eq!(entries[0].replays, 0);
    assert_eq!(replayer.stats(&Filter::default()).await.expect("stats").total, 1);
    stack.shutdown().await;
}
