//! The replayer's index at volume: past its memory budget (entries on disk) and the dead letters by reference it
//! counts for the expiry alert, against the real broker.

use std::time::Duration;

use bytes::Bytes;
use hookline_common::wire::{EventMeta, kafka, now_ms};
use hookline_dlq_replayer::{
    ReplayerConfig,
    filter::Filter,
    index::Status,
    ops::{DiscardRequest, ReplayRequest, Replayer},
};
use hookline_record::{Original, Outgoing, dead_letter::DeadLetterFailure, inbound::InboundRecord, retry::Origin};
use hookline_tests::{TestStack, eventually};
use rdkafka::{Message, producer::FutureRecord};

/// An event as the gateway writes it to `inbound_topic`, with `body`.
fn accepted(inbound_topic: &str, source: &str, event_id: &str, body: Bytes) -> Outgoing {
    InboundRecord::new(EventMeta {
        source: source.to_owned(),
        event_id: event_id.to_owned(),
        event_type: None,
        received_at_ms: 1,
        content_type: None,
        secret_id: "s1".to_owned(),
        ordering_key: None,
    })
    .encode(inbound_topic, body)
}

/// The failure a consumer of `service` attaches to a poison event first read at `origin`.
fn poison(origin: Origin, service: &str, error: String, failed_at_ms: i64) -> DeadLetterFailure {
    DeadLetterFailure {
        origin,
        consumer_group: service.to_owned(),
        service: service.to_owned(),
        handler: "http".to_owned(),
        attempts: 1,
        error_class: "poison".to_owned(),
        error,
        first_failure_at_ms: failed_at_ms,
        last_failure_at_ms: failed_at_ms,
        consumer_version: "0.1.0".to_owned(),
        dedupe_retention_days: None,
        destination: None,
    }
}

fn original(record: &Outgoing) -> Original<'_> {
    Original { key: record.key.clone(), body: record.body.clone(), headers: &record.headers }
}

fn replayer_for(stack: &TestStack, max_failed_again: u32) -> Replayer {
    let config = ReplayerConfig { kafka: stack.kafka.clone(), max_failed_again, ..ReplayerConfig::default() };
    Replayer::new(config).expect("replayer")
}

/// Issue 44, item 4: past `index.memory_budget_mb` the oldest entries move to disk, and `list` (with and without
/// a cursor and filters), `show`, a status recorded for an entry on disk, and `replay --all` stay correct:
/// every entry listed once in order, and re-driven exactly once.
#[tokio::test]
async fn index_past_its_memory_budget_lists_shows_and_replays_every_entry_exactly_once() {
    let stack = TestStack::builder().build().await;
    let dlq = stack.kafka.dlq_topic.clone();
    let inbound = stack.kafka.inbound_topic.clone();
    // Each entry carries its own 2 KB error message: 1,500 of them are about 3 MiB in memory, three times a
    // 1 MiB budget, so most or all move to disk (a partition's entries in memory move together, up to 65,536 at
    // a time; the unit tests of the index cover entries split between disk and memory), and past an eighth of
    // the budget the messages are no longer interned but kept per entry.
    let n = 1_500_usize;
    let error_of = |i: usize| format!("handler failed for event {i}: {}", "x".repeat(2_000));
    let producer: rdkafka::producer::FutureProducer =
        hookline_common::kafka::producer_config(&stack.kafka).create().expect("producer");
    let sends = (0..n).map(|i| {
        let (event_id, error) = (format!("budget-{i:05}"), error_of(i));
        let source = if i % 3 == 0 { "stripe" } else { "github" };
        let body = format!("{{\"i\":{i}}}");
        let event = accepted(&inbound, source, &event_id, Bytes::from(body.clone()));
        let origin = Origin { topic: inbound.clone(), partition: 0, offset: i as i64 };
        let failure = poison(origin, "hookline-consumer", error, now_ms());
        let headers = kafka::owned_headers(&failure.encode(&dlq, original(&event)).headers);
        let headers = stack.signed(&dlq, Some(event_id.as_bytes()), body.as_bytes(), &headers);
        let producer = producer.clone();
        let dlq = dlq.clone();
        async move {
            let record = FutureRecord::to(&dlq).key(&event_id).payload(&body).headers(headers);
            producer.send(record, Duration::from_secs(30)).await.expect("produced");
        }
    });
    futures_util::future::join_all(sends).await;

    let mut config = ReplayerConfig { kafka: stack.kafka.clone(), ..ReplayerConfig::default() };
    config.index.memory_budget_mb = 1;
    let replayer = Replayer::new(config).expect("replayer");
    let index = replayer.index().await.expect("index");
    let (spilled, disk_bytes) = index.spilled();
    assert!(spilled > n / 2, "{spilled} of {n} entries on disk ({disk_bytes} bytes)");
    assert!(index.approx_bytes() <= 1024 * 1024, "the index holds {} bytes", index.approx_bytes());

    // Every entry once, in (partition, offset) order, with what it was written with.
    let entries = replayer.list(&Filter::default()).await.expect("list");
    assert_eq!(entries.len(), n);
    let positions: Vec<(i32, i64)> = entries.iter().map(|e| (e.entry.partition, e.entry.offset)).collect();
    assert!(positions.windows(2).all(|pair| pair[0] < pair[1]), "not in listing order");
    let mut seen = std::collections::BTreeSet::new();
    for entry in &entries {
        let event_id = entry.entry.event_id.clone().expect("event id");
        let i: usize = event_id.trim_start_matches("budget-").parse().expect("number");
        assert_eq!(entry.entry.error.as_deref(), Some(error_of(i).as_str()), "{event_id}");
        assert_eq!(entry.entry.source.as_deref(), Some(if i % 3 == 0 { "stripe" } else { "github" }));
        assert_eq!(entry.status, Status::New);
        assert!(seen.insert(event_id));
    }
    // Pages with a cursor give the same entries; filters on interned and on per-entry strings both match.
    let mut paged = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = replayer.page(&Filter::default(), cursor.as_deref(), 128).await.expect("page");
        assert_eq!(page.total_matching, n);
        paged.extend(page.entries.into_iter().map(|e| e.entry.id));
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(paged, entries.iter().map(|e| e.entry.id.clone()).collect::<Vec<_>>());
    let stripe = Filter { source: Some("stripe".into()), ..Filter::default() };
    assert_eq!(replayer.list(&stripe).await.expect("list").len(), n.div_ceil(3));
    for i in [0, 7, n - 1] {
        let text = Filter { text: Some(format!("for EVENT {i}:")), ..Filter::default() };
        let found = replayer.list(&text).await.expect("list");
        assert_eq!(found.len(), 1, "text filter for {i}");
        assert_eq!(found[0].entry.event_id.as_deref(), Some(format!("budget-{i:05}").as_str()));
    }

    // `show` of the first entry and the last.
    for entry in [&entries[0], &entries[n - 1]] {
        let detail = replayer.show(&entry.entry.id).await.expect("show").expect("entry");
        assert_eq!(detail.entry.entry.event_id, entry.entry.event_id);
        assert_eq!(detail.entry.entry.error, entry.entry.error);
        assert_eq!(detail.authenticity, "authentic");
    }

    // A discard of an entry on disk holds, and `replay --all` re-drives every other entry exactly once.
    let discarded = entries[1].entry.id.clone();
    let discard = DiscardRequest { ids: vec![discarded.clone()], reason: "test".into(), ..DiscardRequest::default() };
    assert_eq!(replayer.discard(&discard).await.expect("discard").done, vec![discarded.clone()]);
    let all = ReplayRequest { all: true, by: "test".into(), ..ReplayRequest::default() };
    let report = replayer.replay(&all).await.expect("replay --all");
    assert_eq!(report.done.len(), n - 1, "skipped: {:?}", report.skipped);
    assert!(!report.done.contains(&discarded));
    let redriven = stack.inbound_records().await;
    let mut replay_of: Vec<String> = redriven
        .iter()
        .filter_map(|record| InboundRecord::decode(kafka::headers_of(record.headers())).ok()?.replay_of)
        .collect();
    assert_eq!(redriven.len(), n - 1);
    replay_of.sort();
    let mut expected: Vec<String> = entries.iter().map(|e| e.entry.id.clone()).filter(|id| *id != discarded).collect();
    expected.sort();
    assert_eq!(replay_of, expected, "each entry re-driven exactly once");

    // A new index (statuses read back onto entries on disk and in memory): nothing is left untriaged.
    let after = replayer.stats(&Filter::default()).await.expect("stats");
    assert_eq!(after.by_status.get("replayed"), Some(&(n - 1)), "{:?}", after.by_status);
    assert_eq!(after.by_status.get("discarded"), Some(&1), "{:?}", after.by_status);
    let again = replayer.replay(&all).await.expect("replay --all");
    assert!(again.done.is_empty(), "{again:?}");
}

/// P23: a dead letter by reference keeps its body only at its original inbound position, so it expires with the
/// inbound topic. The index counts the unresolved ones per source and service with the age of the oldest one's
/// first failure, the gauge `HooklineDLQBodyExpiring` fires on; ordinary entries are not counted.
#[tokio::test]
async fn dead_letters_by_reference_are_counted_with_their_age_for_the_expiry_alert() {
    let stack = TestStack::builder().build().await;
    let six_days_ago = now_ms() - 6 * 86_400_000;
    let inbound = stack.kafka.inbound_topic.clone();
    let entry = |event_id: &str, by_reference: bool| {
        let origin = Origin { topic: inbound.clone(), partition: 0, offset: 7 };
        let failure = poison(origin, "billing", "boom".to_owned(), six_days_ago);
        // By reference: a copy too large for the broker (2,000,000 bytes), its body left at its inbound position.
        let body =
            Bytes::from(if by_reference { vec![b'x'; 2_000_000] } else { br#"{"ref":"refs/heads/main"}"#.to_vec() });
        let event = accepted(&inbound, "github", event_id, body);
        let dead_letter = if by_reference {
            failure.encode_by_reference(&stack.kafka.dlq_topic, original(&event))
        } else {
            failure.encode(&stack.kafka.dlq_topic, original(&event))
        };
        let body = dead_letter.body.as_deref().unwrap_or_default().to_vec();
        (0, event_id.to_owned(), kafka::owned_headers(&dead_letter.headers), body)
    };
    stack
        .produce_raw_batch_to(
            &stack.kafka.dlq_topic,
            vec![entry("evt_by_reference", true), entry("evt_ordinary", false)],
        )
        .await;
    let index = replayer_for(&stack, 3).index().await.expect("index");
    eventually(Duration::from_secs(30), "both entries indexed", || async { index.len() == 2 }).await;
    let gauges = index.gauges().expect("gauges");
    let key = ("github".to_owned(), "billing".to_owned());
    let by_reference = gauges.by_reference.get(&key).expect("the by-reference entry is counted");
    assert_eq!((by_reference.count, by_reference.oldest_at_ms), (1, six_days_ago), "the ordinary one is not");
    assert_eq!(gauges.by_reference.len(), 1);

    let registry = prometheus::Registry::new();
    let metrics = hookline_dlq_replayer::metrics::Metrics::register(&registry).expect("metrics");
    metrics.refresh(&index, now_ms());
    let age_s = metrics.oldest_by_reference_age_seconds.with_label_values(&["github", "billing"]).get();
    assert!((6 * 86_400..6 * 86_400 + 600).contains(&age_s), "past the alert's 5 days: {age_s}");
    stack.shutdown().await;
}
