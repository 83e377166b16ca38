//! Nothing the replayer acts on is believed from Kafka without a MAC: a status record that hookline did not write
//! (unsigned, or signed and changed since) leaves the entry's status as it was, and is counted; statuses for
//! positions that hold no entry are dropped, not kept. A forced re-drive of a dead letter without a valid MAC goes
//! to the inbound topic only, with the core metadata only (no re-processing, ordering, origin headers); an unsigned
//! dead letter inside `accept_unsigned_until` needs force too. An entry older than its service's dedupe retention
//! is not re-driven without `past_retention`.

use std::time::Duration;

use bytes::Bytes;
use hookline_common::{
    producer::{AckedProducer, QueueWait},
    wire::{EntryStatus, EntryStatusRecord, EventMeta, now_ms},
};
// This file forges records hookline did not write (headers added, replaced, granting powers): raw names.
use hookline_dlq_replayer::{
    ReplayerConfig,
    index::Status,
    ops::{ReplayRequest, Replayer},
};
use hookline_record::{Original, dead_letter::DeadLetterFailure, inbound::InboundRecord, raw as header, retry::Origin};
use hookline_tests::{TestStack, record_auth::rfc3339_in};
use rdkafka::{
    Message,
    message::{Header, Headers, OwnedHeaders},
    producer::{FutureProducer, FutureRecord},
};

/// A dead letter's headers, as a consumer writes them (through the record crate's writers), with `extra` forged in:
/// added, or replacing the header of that name.
fn dead_letter_headers(stack: &TestStack, event_id: &str, extra: &[(&str, &str)]) -> OwnedHeaders {
    let inbound = stack.kafka.inbound_topic.clone();
    let event = InboundRecord::new(EventMeta {
        source: "github".to_owned(),
        event_id: event_id.to_owned(),
        event_type: None,
        received_at_ms: 1,
        content_type: None,
        secret_id: "s1".to_owned(),
        ordering_key: None,
    })
    .encode(&inbound, Bytes::new());
    let failure = DeadLetterFailure {
        origin: Origin { topic: inbound, partition: 0, offset: 0 },
        consumer_group: "hookline-consumer".to_owned(),
        service: "hookline-consumer".to_owned(),
        handler: "http".to_owned(),
        attempts: 1,
        error_class: "poison".to_owned(),
        error: "boom".to_owned(),
        first_failure_at_ms: now_ms(),
        last_failure_at_ms: now_ms(),
        consumer_version: "0.1.0".to_owned(),
        dedupe_retention_days: None,
        destination: None,
    };
    let original = Original { key: event.key.clone(), body: event.body.clone(), headers: &event.headers };
    let dead_letter = failure.encode(&stack.kafka.dlq_topic, original);
    let replaced = |key: &str| extra.iter().any(|(name, _)| *name == key);
    let mut headers = OwnedHeaders::new();
    for h in dead_letter.headers.iter().filter(|h| !replaced(h.name)) {
        headers = headers.insert(Header { key: h.name, value: h.value });
    }
    for (key, value) in extra {
        headers = headers.insert(Header { key, value: Some(*value) });
    }
    headers
}

/// Writes a record the way a client without the record key does.
async fn produce_unsigned(stack: &TestStack, topic: &str, key: &str, headers: OwnedHeaders, body: &[u8]) {
    let producer: FutureProducer = hookline_common::kafka::producer_config(&stack.kafka).create().expect("producer");
    let record = FutureRecord::to(topic).key(key).payload(body).headers(headers);
    producer.send(record, Duration::from_secs(10)).await.expect("produced");
}

/// Writes a record the way a hookline service does (signed with the stack's key).
async fn produce_signed(stack: &TestStack, topic: &str, key: &str, headers: OwnedHeaders, body: &[u8]) {
    let producer = AckedProducer::new(&stack.kafka, "test-producer").expect("producer");
    let record = FutureRecord::to(topic).key(key).payload(body).headers(headers);
    producer.send(record, QueueWait::UpToDeadline).await.expect("produced");
}

fn status_json(status: EntryStatus) -> Vec<u8> {
    serde_json::to_vec(&EntryStatusRecord {
        status,
        at_ms: 1,
        by: "alice".into(),
        event_id: None,
        new_entry: None,
        note: Some("dup".into()),
        replays: None,
    })
    .expect("json")
}

fn replayer(stack: &TestStack) -> Replayer {
    Replayer::new(ReplayerConfig { kafka: stack.kafka.clone(), ..ReplayerConfig::default() }).expect("replayer")
}

#[tokio::test]
async fn status_records_hookline_did_not_write_are_never_applied() {
    let stack = TestStack::builder().build().await;
    let dlq = stack.kafka.dlq_topic.clone();
    let statuses = stack.kafka.dlq_status_topic.clone();
    produce_signed(&stack, &dlq, "e1", dead_letter_headers(&stack, "e1", &[]), b"{}").await;
    let entry_id = replayer(&stack).list(&Default::default()).await.expect("list")[0].entry.id.clone();

    // A writer of the status topic without the key: unsigned, and a signed status with its body changed.
    produce_unsigned(&stack, &statuses, &entry_id, OwnedHeaders::new(), &status_json(EntryStatus::Discarded)).await;
    let signed =
        stack.signed(&statuses, Some(entry_id.as_bytes()), &status_json(EntryStatus::Replayed), &OwnedHeaders::new());
    produce_unsigned(&stack, &statuses, &entry_id, signed, &status_json(EntryStatus::Succeeded)).await;
    // A status written with the key for a position far beyond the DLQ's end: checked, then waiting for an entry
    // (the bound on those is a unit test of the index).
    let nowhere = format!("{dlq}:0:1000000000");
    produce_signed(&stack, &statuses, &nowhere, OwnedHeaders::new(), &status_json(EntryStatus::Discarded)).await;

    let index = replayer(&stack).index().await.expect("index");
    let entries = replayer(&stack).list(&Default::default()).await.expect("list");
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].status, Status::New, "a forged status moved the entry: {:?}", entries[0].last_status);
    let auth: Vec<(&str, u64)> = index.status_counts().auth().into_iter().filter(|(_, n)| *n > 0).collect();
    assert_eq!(auth, vec![("authentic", 1), ("unsigned", 1), ("bad_mac", 1)]);

    // A status hookline writes is applied, as before.
    produce_signed(&stack, &statuses, &entry_id, OwnedHeaders::new(), &status_json(EntryStatus::Discarded)).await;
    let entries = replayer(&stack).list(&Default::default()).await.expect("list");
    assert_eq!(entries[0].status, Status::Discarded);
    stack.shutdown().await;
}

#[tokio::test]
async fn an_unsigned_status_is_refused_even_inside_the_transition_window() {
    let mut stack = TestStack::builder().build().await;
    stack.kafka.record_auth.accept_unsigned_until = Some(rfc3339_in(3600));
    let (dlq, statuses) = (stack.kafka.dlq_topic.clone(), stack.kafka.dlq_status_topic.clone());
    produce_signed(&stack, &dlq, "e1", dead_letter_headers(&stack, "e1", &[]), b"{}").await;
    let entry_id = replayer(&stack).list(&Default::default()).await.expect("list")[0].entry.id.clone();
    produce_unsigned(&stack, &statuses, &entry_id, OwnedHeaders::new(), &status_json(EntryStatus::Discarded)).await;
    let index = replayer(&stack).index().await.expect("index");
    let entries = replayer(&stack).list(&Default::default()).await.expect("list");
    assert_eq!(entries[0].status, Status::New, "an unsigned status moved the entry: {:?}", entries[0].last_status);
    let auth: Vec<(&str, u64)> = index.status_counts().auth().into_iter().filter(|(_, n)| *n > 0).collect();
    assert_eq!(auth, vec![("unsigned", 1)]);
    stack.shutdown().await;
}

#[tokio::test]
async fn a_status_signed_with_the_gateway_key_is_refused_whatever_headers_it_carries() {
    use hookline_tests::record_auth::{key_file, keys_of};
    let mut stack = TestStack::builder().build().await;
    // The replayer knows the gateway's key as inbound-only, beside the services' key.
    let gateway_key = key_file("gw", "a-gateway-record-key-0123456789abcdef-xyz");
    stack.kafka.record_auth.keys.insert(0, gateway_key.clone());
    stack.kafka.record_auth.inbound_only_keys = vec!["gw".to_owned()];
    let (dlq, statuses) = (stack.kafka.dlq_topic.clone(), stack.kafka.dlq_status_topic.clone());
    produce_signed(&stack, &dlq, "e1", dead_letter_headers(&stack, "e1", &[]), b"{}").await;
    let entry_id = replayer(&stack).list(&Default::default()).await.expect("list")[0].entry.id.clone();
    // Whoever stole the gateway's key signs a status with the two headers of an inbound record added.
    let stuffed = OwnedHeaders::new()
        .insert(Header { key: header::SOURCE, value: Some("github") })
        .insert(Header { key: header::EVENT_ID, value: Some("e1") });
    let body = status_json(EntryStatus::Discarded);
    let thief = keys_of(&[gateway_key]);
    let signed = thief.sign(&statuses, Some(entry_id.as_bytes()), Some(&body), Some(&stuffed), now_ms()).unwrap();
    produce_unsigned(&stack, &statuses, &entry_id, signed, &body).await;
    let index = replayer(&stack).index().await.expect("index");
    let entries = replayer(&stack).list(&Default::default()).await.expect("list");
    assert_eq!(entries[0].status, Status::New, "the thief's status moved the entry: {:?}", entries[0].last_status);
    let auth: Vec<(&str, u64)> = index.status_counts().auth().into_iter().filter(|(_, n)| *n > 0).collect();
    assert_eq!(auth, vec![("kind_not_allowed", 1)]);
    stack.shutdown().await;
}

#[tokio::test]
async fn a_forced_redrive_believes_no_routing_from_an_unsigned_dead_letter() {
    let stack = TestStack::builder().build().await;
    let dlq = stack.kafka.dlq_topic.clone();
    let status_topic = stack.kafka.dlq_status_topic.clone();
    // Aimed at the status topic: refused even forced.
    let aimed = dead_letter_headers(&stack, "aimed", &[(header::dlq::ORIGINAL_TOPIC, status_topic.as_str())]);
    produce_unsigned(&stack, &dlq, "aimed", aimed, &status_json(EntryStatus::Succeeded)).await;
    // Aimed at the inbound topic with the headers that would re-run a processed event under a fresh key.
    let powers = [
        (header::REPROCESS_ID, "r1"),
        (header::REPROCESS_OF, "x"),
        (header::ORDERING_KEY, "k"),
        (header::ORIGIN, "reconciled"),
        ("http-x-github-event", "push"),
    ];
    produce_unsigned(&stack, &dlq, "planted", dead_letter_headers(&stack, "planted", &powers), b"{}").await;

    let replayer = replayer(&stack);
    let ids: Vec<String> =
        replayer.list(&Default::default()).await.expect("list").iter().map(|entry| entry.entry.id.clone()).collect();
    let report =
        replayer.replay(&ReplayRequest { ids, force: true, ..ReplayRequest::default() }).await.expect("replay");
    assert_eq!(report.done.len(), 1, "{report:?}");
    assert!(report.skipped[0].reason.contains("inbound topic"), "{report:?}");
    assert!(
        stack
            .records(&status_topic)
            .await
            .iter()
            .all(|record| record.payload() != Some(&status_json(EntryStatus::Succeeded)[..])),
        "the planted status record was signed into the status topic"
    );

    let redriven = stack.inbound_records().await;
    assert_eq!(redriven.len(), 1);
    let names: Vec<&str> = redriven[0].headers().expect("headers").iter().map(|h| h.key).collect();
    for power in [header::REPROCESS_ID, header::REPROCESS_OF, header::ORDERING_KEY, header::ORIGIN] {
        assert!(!names.contains(&power), "{power} was carried into a signed record: {names:?}");
    }
    for kept in [header::SOURCE, header::EVENT_ID, header::REPLAY_OF, header::MAC, "http-x-github-event"] {
        assert!(names.contains(&kept), "{kept} missing: {names:?}");
    }
    stack.shutdown().await;
}

#[tokio::test]
async fn an_unsigned_dead_letter_inside_the_transition_window_still_needs_force() {
    let mut stack = TestStack::builder().build().await;
    stack.kafka.record_auth.accept_unsigned_until = Some(rfc3339_in(3600));
    let dlq = stack.kafka.dlq_topic.clone();
    produce_unsigned(&stack, &dlq, "old", dead_letter_headers(&stack, "old", &[]), b"{}").await;
    let replayer = replayer(&stack);
    let ids: Vec<String> =
        replayer.list(&Default::default()).await.expect("list").iter().map(|entry| entry.entry.id.clone()).collect();
    let report = replayer.replay(&ReplayRequest { ids, ..ReplayRequest::default() }).await.expect("replay");
    assert!(report.done.is_empty(), "laundered into a signed record: {report:?}");
    assert!(report.skipped[0].reason.contains("unsigned_accepted (needs force)"), "{report:?}");
    assert!(stack.inbound_records().await.is_empty());
    stack.shutdown().await;
}

#[tokio::test]
async fn an_entry_older_than_its_dedupe_retention_is_not_redriven_without_past_retention() {
    let stack = TestStack::builder().build().await;
    let dlq = stack.kafka.dlq_topic.clone();
    let day_ms = 86_400_000_i64;
    let long_ago = (now_ms() - 31 * day_ms).to_string();
    let recent = (now_ms() - day_ms).to_string();
    let old = [(header::dlq::DEDUPE_RETENTION_DAYS, "30"), (header::dlq::FIRST_FAILURE_AT_MS, long_ago.as_str())];
    let young = [(header::dlq::DEDUPE_RETENTION_DAYS, "30"), (header::dlq::FIRST_FAILURE_AT_MS, recent.as_str())];
    produce_signed(&stack, &dlq, "old", dead_letter_headers(&stack, "old", &old), b"{}").await;
    produce_signed(&stack, &dlq, "young", dead_letter_headers(&stack, "young", &young), b"{}").await;

    let replayer = replayer(&stack);
    let entries = replayer.list(&Default::default()).await.expect("list");
    let id_of = |event: &str| {
        entries.iter().find(|entry| entry.entry.event_id.as_deref() == Some(event)).expect("entry").entry.id.clone()
    };
    let (old_id, young_id) = (id_of("old"), id_of("young"));
    let report = replayer
        .replay(&ReplayRequest { ids: vec![old_id.clone(), young_id.clone()], ..ReplayRequest::default() })
        .await
        .expect("replay");
    assert_eq!(report.done, vec![young_id]);
    assert_eq!(report.skipped.len(), 1);
    assert!(report.skipped[0].reason.contains("dedupe retention (30 days)"), "{report:?}");
    assert_eq!(stack.inbound_records().await.len(), 1);

    // The documented override, once the operator has checked the database.
    let forced = ReplayRequest { ids: vec![old_id.clone()], past_retention: true, ..ReplayRequest::default() };
    assert_eq!(replayer.replay(&forced).await.expect("replay").done, vec![old_id]);
    assert_eq!(stack.inbound_records().await.len(), 2);
    stack.shutdown().await;
}

#[tokio::test]
async fn an_old_entry_whose_record_names_no_retention_is_not_redriven_without_past_retention() {
    let stack = TestStack::builder().build().await;
    let dlq = stack.kafka.dlq_topic.clone();
    let day_ms = 86_400_000_i64;
    // Dead-lettered as the build before the retention header wrote it: signed, no retention header.
    let long_ago = (now_ms() - 31 * day_ms).to_string();
    let recent = (now_ms() - day_ms).to_string();
    let old = [(header::dlq::FIRST_FAILURE_AT_MS, long_ago.as_str())];
    let young = [(header::dlq::FIRST_FAILURE_AT_MS, recent.as_str())];
    produce_signed(&stack, &dlq, "old", dead_letter_headers(&stack, "old", &old), b"{}").await;
    produce_signed(&stack, &dlq, "young", dead_letter_headers(&stack, "young", &young), b"{}").await;

    let replayer = replayer(&stack);
    let entries = replayer.list(&Default::default()).await.expect("list");
    let id_of = |event: &str| {
        entries.iter().find(|entry| entry.entry.event_id.as_deref() == Some(event)).expect("entry").entry.id.clone()
    };
    let (old_id, young_id) = (id_of("old"), id_of("young"));
    let report = replayer
        .replay(&ReplayRequest { ids: vec![old_id.clone(), young_id.clone()], ..ReplayRequest::default() })
        .await
        .expect("replay");
    assert_eq!(report.done, vec![young_id]);
    assert_eq!(report.skipped.len(), 1, "{report:?}");
    assert!(report.skipped[0].reason.contains("does not say its service's retention"), "{report:?}");
    let forced = ReplayRequest { ids: vec![old_id.clone()], past_retention: true, ..ReplayRequest::default() };
    assert_eq!(replayer.replay(&forced).await.expect("replay").done, vec![old_id]);
    assert_eq!(stack.inbound_records().await.len(), 2);
    stack.shutdown().await;
}

#[tokio::test]
async fn wrong_api_tokens_are_throttled_counted_and_share_the_console_logins_budget_and_the_right_one_passes() {
    let stack = TestStack::builder().build().await;
    let token = "a-replayer-api-token-of-32-characters-or-more";
    let api = stack.start_replayer_api(token).await;
    let get = |bearer: String| {
        http::Request::get(format!("http://{}/v1/stats", api.addr))
            .header(http::header::AUTHORIZATION, format!("Bearer {bearer}"))
            .body(Default::default())
            .expect("request")
    };
    let mut statuses = Vec::new();
    for guess in 0..12 {
        statuses.push(stack.send(get(format!("guess-{guess}"))).await.status);
    }
    let unauthorized = statuses.iter().filter(|status| **status == http::StatusCode::UNAUTHORIZED).count();
    assert_eq!(unauthorized, 10, "{statuses:?}");
    assert_eq!(statuses[11], http::StatusCode::TOO_MANY_REQUESTS, "{statuses:?}");
    // The right token from the same address is never refused (behind a proxy, every operator shares it).
    let right = stack.send(get(token.to_owned())).await.status;
    assert!(![http::StatusCode::TOO_MANY_REQUESTS, http::StatusCode::UNAUTHORIZED].contains(&right), "{right}");
    let metrics = stack.scrape(api.addr).await;
    assert_eq!(metrics.value("hookline_replayer_auth_failures_total", &[("surface", "api")]), Some(12.0), "{metrics}");
    api.stop().await;
    stack.shutdown().await;
}

#[tokio::test]
async fn an_entry_dead_lettered_for_a_forged_type_is_redriven_with_the_type_the_operator_checked() {
    let stack = TestStack::builder().build().await;
    let dlq = stack.kafka.dlq_topic.clone();
    // A copy of a GitHub delivery with a type header the provider does not sign, re-sent with a made-up value.
    let forged = [(header::EVENT_TYPE, "bogus")];
    produce_signed(&stack, &dlq, "typed", dead_letter_headers(&stack, "typed", &forged), b"{\"ref\":\"main\"}").await;
    let replayer = replayer(&stack);
    let id = replayer.list(&Default::default()).await.expect("list")[0].entry.id.clone();
    let request = ReplayRequest { ids: vec![id], as_event_type: Some("push".into()), ..ReplayRequest::default() };
    assert_eq!(replayer.replay(&request).await.expect("replay").done.len(), 1);
    let redriven = stack.inbound_records().await;
    let types: Vec<&[u8]> = redriven[0]
        .headers()
        .expect("headers")
        .iter()
        .filter(|h| h.key == header::EVENT_TYPE)
        .filter_map(|h| h.value)
        .collect();
    assert_eq!(types, vec![&b"push"[..]], "one type, the operator's");
    stack.shutdown().await;
}

/// Finding P3: a writer of the DLQ topic without the record key (any consumer principal, by the ACL table) can
/// neither grow the replayer's index with megabyte headers (the DLQ never expires: every start would re-read them)
/// nor make forged entries `new`, untriaged or taken by `replay --all`. Every string a verified entry keeps is cut
/// to 2 KiB, as the consumer writes it.
#[tokio::test]
async fn unsigned_dead_letters_with_huge_headers_stay_minimal_and_are_never_untriaged() {
    let stack = TestStack::builder().build().await;
    let dlq = stack.kafka.dlq_topic.clone();
    produce_signed(&stack, &dlq, "real", dead_letter_headers(&stack, "real", &[]), b"{}").await;
    // Signed, with an error far longer than a consumer writes: kept, cut to 2 KiB.
    let long_error = "e".repeat(100_000);
    let long = [(header::dlq::ERROR, long_error.as_str())];
    produce_signed(&stack, &dlq, "long", dead_letter_headers(&stack, "long", &long), b"{}").await;
    let forged = 12;
    for n in 0..forged {
        let error = format!("{n}{}", "x".repeat(600_000));
        let source = format!("{n}{}", "s".repeat(100_000));
        let event_id = format!("forged-{n}-{}", "i".repeat(100_000));
        let huge = [(header::dlq::ERROR, error.as_str()), (header::SOURCE, source.as_str())];
        produce_unsigned(&stack, &dlq, "forged", dead_letter_headers(&stack, &event_id, &huge), b"{}").await;
    }

    let replayer = replayer(&stack);
    let index = replayer.index().await.expect("index");
    assert_eq!(index.len(), 2 + forged);
    // Old code: over 9 MB of forged strings. Now: a vector of entries per partition (1,024 reserved each) and the
    // two verified entries' strings, one of them 2 KiB.
    assert!(index.approx_bytes() < 1024 * 1024, "the index holds {} bytes", index.approx_bytes());
    let entries = replayer.list(&Default::default()).await.expect("list");
    let long_entry = entries.iter().find(|entry| entry.entry.event_id.as_deref() == Some("long")).expect("long");
    assert_eq!(long_entry.entry.error.as_deref().map(str::len), Some(2048));
    let untriaged: Vec<&str> =
        entries.iter().filter(|entry| entry.status.is_untriaged()).map(|entry| entry.entry.id.as_str()).collect();
    assert_eq!(untriaged.len(), 2, "forged entries are untriaged: {untriaged:?}");
    for entry in entries.iter().filter(|entry| !untriaged.contains(&entry.entry.id.as_str())) {
        assert_eq!(entry.status, Status::Unverified);
        assert_eq!((entry.entry.source.as_deref(), entry.entry.error.as_deref()), (None, None), "claims indexed");
    }
    let gauges = index.gauges().expect("gauges");
    let alerting: usize = gauges.untriaged.values().map(|seen| seen.count).sum();
    assert_eq!(alerting, 2, "forged entries feed HooklineDLQEntryUntriaged: {:?}", gauges.untriaged);
    assert_eq!(index.unverified_len(), forged);
    assert!(index.string_bytes().0 <= 2 * 2048, "{:?}", index.string_bytes());
    let auth: Vec<(&str, u64)> = index.entry_counts().auth().into_iter().filter(|(_, n)| *n > 0).collect();
    assert_eq!(auth, vec![("authentic", 2), ("unsigned", forged as u64)]);

    // `replay --all` takes the two real entries and does not even fetch the forged ones.
    let all = ReplayRequest { all: true, dry_run: true, ..ReplayRequest::default() };
    let report = replayer.replay(&all).await.expect("replay");
    assert_eq!((report.done.len(), report.skipped.len()), (2, 0), "{report:?}");
    // `show` reads the record itself: its claims are there, marked as unsigned.
    let forged_id = entries.iter().find(|entry| entry.status == Status::Unverified).expect("forged").entry.id.clone();
    let detail = replayer.show(&forged_id).await.expect("show").expect("entry");
    assert_eq!(detail.authenticity, "unsigned");
    assert!(detail.headers.iter().any(|(name, value)| name == header::dlq::ERROR && value.len() > 600_000));
    stack.shutdown().await;
}
