//! Records only hookline could have written: a record in the inbound topic without hookline's MAC (a client
//! without the record key copied every `hookline-*` header of a real record) or a signed record changed since is
//! dead-lettered as `unauthenticated_record` before dedupe: it reaches no handler, claims nothing (the genuine
//! event sent afterwards is processed once), is counted, and the replayer refuses to re-drive it without force.
//! A key rotation loses and doubles nothing, and a key past its `not_after` is refused; unsigned records are
//! processed only inside `accept_unsigned_until`.

use hookline_common::{
    record_auth::{RecordAuthConfig, RecordKeys, RecordKind, Verdict},
    wire::{EventMeta, UNAUTHENTICATED_RECORD_CLASS, dead_letter_entry, now_ms},
};
use hookline_dlq_replayer::{
    ReplayerConfig,
    ops::{ReplayRequest, Replayer},
};
use hookline_record::raw;
use hookline_tests::{
    Delivery, TestStack, eventually,
    prometheus::Sample,
    record_auth::{key_file, keys_of, rfc3339_in},
};
use http::StatusCode;
use rdkafka::{
    Message,
    message::{Header, Headers, OwnedHeaders, OwnedMessage},
};
use std::time::Duration;

/// `record`'s headers without its MAC, with `change` applied to each value: a forger's copy.
fn copied_headers(record: &OwnedMessage, change: impl Fn(&str, &[u8]) -> Vec<u8>) -> OwnedHeaders {
    let headers = record.headers().expect("headers");
    headers.iter().filter(|h| h.key != raw::MAC).fold(OwnedHeaders::new(), |out, h| {
        let value = change(h.key, h.value.unwrap_or_default());
        out.insert(Header { key: h.key, value: Some(value.as_slice()) })
    })
}

#[tokio::test]
async fn records_hookline_did_not_write_are_dead_lettered_unprocessed_and_not_replayable_without_force() {
    let stack = TestStack::builder().consumer().build().await;
    // A real record, read back, gives the forger every header it needs.
    let template = Delivery::new(&br#"{"action":"template"}"#[..]);
    assert_eq!(stack.post(&template).await.status, StatusCode::ACCEPTED);
    stack.wait_until_handled(1).await;
    let real = stack.inbound_records().await.remove(0);
    let stack_keys = keys_of(&stack.kafka.record_auth.keys);
    assert_eq!(signing_key_id(&stack_keys, &real), "test-k1", "the gateway signs what it writes");

    // 1. Unsigned: every hookline-* header of a real record, a fresh event id the genuine delivery will use later.
    let genuine = Delivery::new(&br#"{"action":"genuine"}"#[..]);
    let forged = copied_headers(&real, |key, value| {
        if key == raw::EVENT_ID { genuine.delivery_id.as_bytes().to_vec() } else { value.to_vec() }
    });
    stack.produce_unsigned(0, &genuine.delivery_id, forged, br#"{"action":"forged"}"#).await;
    // 2. A signed record's body changed. 3. A signed record's header changed.
    let mac_of = |record: &OwnedMessage| {
        record.headers().unwrap().iter().find(|h| h.key == raw::MAC).and_then(|h| h.value).unwrap().to_vec()
    };
    let with_mac = |headers: OwnedHeaders, mac: &[u8]| headers.insert(Header { key: raw::MAC, value: Some(mac) });
    let key = std::str::from_utf8(real.key().unwrap()).unwrap().to_owned();
    let body_changed = with_mac(copied_headers(&real, |_, value| value.to_vec()), &mac_of(&real));
    stack.produce_unsigned(0, &key, body_changed, br#"{"action":"tampered"}"#).await;
    let header_changed = with_mac(
        copied_headers(&real, |key, value| if key == raw::EVENT_TYPE { b"ping".to_vec() } else { value.to_vec() }),
        &mac_of(&real),
    );
    stack.produce_unsigned(0, &key, header_changed, real.payload().unwrap()).await;

    stack.wait_until_handled(4).await;
    eventually(Duration::from_secs(30), "three unauthenticated records counted", || async {
        stack.consumer_metric(0, "hookline_consumer_record_auth_total", &[("outcome", "unsigned")]).await == 1.0
            && stack.consumer_metric(0, "hookline_consumer_record_auth_total", &[("outcome", "bad_mac")]).await == 2.0
    })
    .await;
    assert_eq!(stack.handler.calls().len(), 1, "only the real record reached the handler");
    let dead = stack.records(&stack.kafka.dlq_topic).await;
    assert_eq!(dead.len(), 3);
    for record in &dead {
        assert_eq!(dead_letter_entry(record).error_class.as_deref(), Some(UNAUTHENTICATED_RECORD_CLASS));
    }
    assert_eq!(
        stack
            .consumer_metric(0, "hookline_consumer_dead_lettered_total", &[("error_class", "unauthenticated_record")])
            .await,
        3.0
    );

    // The forged record claimed nothing: the genuine delivery with that id is processed, once.
    assert_eq!(stack.post(&genuine).await.status, StatusCode::ACCEPTED);
    stack.wait_until_handled(5).await;
    assert_eq!(stack.handler.count(&genuine.delivery_id), 1);
    assert_eq!(stack.handler.calls().last().unwrap().body.as_ref(), genuine.body.as_ref());

    // The replayer refuses every such entry without force.
    let replayer = Replayer::new(ReplayerConfig { kafka: stack.kafka.clone(), ..ReplayerConfig::default() }).unwrap();
    let entries = replayer.list(&Default::default()).await.expect("list");
    let ids: Vec<String> = entries.iter().map(|entry| entry.entry.id.clone()).collect();
    assert_eq!(ids.len(), 3);
    let report = replayer.replay(&ReplayRequest { ids: ids.clone(), ..ReplayRequest::default() }).await.unwrap();
    assert!(report.done.is_empty(), "{report:?}");
    assert!(report.skipped.iter().all(|skip| skip.reason.contains(UNAUTHENTICATED_RECORD_CLASS)), "{report:?}");
    assert_eq!(stack.records(&stack.kafka.inbound_topic).await.len(), 5, "nothing re-driven");
    stack.shutdown().await;
}

#[tokio::test]
async fn an_unsigned_dead_letter_is_not_replayed_without_force() {
    let stack = TestStack::builder().build().await;
    // Written to the DLQ by a client without the key: it looks like a poison entry.
    let headers = OwnedHeaders::new()
        .insert(Header { key: raw::SOURCE, value: Some("github") })
        .insert(Header { key: raw::EVENT_ID, value: Some("forged-1") })
        .insert(Header { key: raw::dlq::ERROR_CLASS, value: Some("poison") })
        .insert(Header { key: raw::dlq::ORIGINAL_TOPIC, value: Some(stack.kafka.inbound_topic.as_str()) });
    let producer: rdkafka::producer::FutureProducer =
        hookline_common::kafka::producer_config(&stack.kafka).create().expect("producer");
    let record =
        rdkafka::producer::FutureRecord::to(&stack.kafka.dlq_topic).key("forged-1").payload("{}").headers(headers);
    producer.send(record, Duration::from_secs(10)).await.expect("produced");

    let replayer = Replayer::new(ReplayerConfig { kafka: stack.kafka.clone(), ..ReplayerConfig::default() }).unwrap();
    let entries = replayer.list(&Default::default()).await.expect("list");
    assert_eq!(entries.len(), 1);
    let id = entries[0].entry.id.clone();
    assert_eq!(replayer.show(&id).await.unwrap().unwrap().authenticity, "unsigned");
    let report = replayer.replay(&ReplayRequest { ids: vec![id.clone()], ..ReplayRequest::default() }).await.unwrap();
    assert!(report.done.is_empty() && report.skipped[0].reason.contains("not written by hookline"), "{report:?}");
    assert!(stack.inbound_records().await.is_empty());
    // With force, the operator vouches for it: re-driven, and signed by the replayer.
    let forced = ReplayRequest { ids: vec![id], force: true, ..ReplayRequest::default() };
    assert_eq!(replayer.replay(&forced).await.unwrap().done.len(), 1);
    let redriven = stack.inbound_records().await;
    assert_eq!(redriven.len(), 1);
    assert_eq!(signing_key_id(&keys_of(&stack.kafka.record_auth.keys), &redriven[0]), "test-k1", "signed");
    stack.shutdown().await;
}

fn meta(event_id: &str) -> EventMeta {
    EventMeta {
        source: "github".into(),
        event_id: event_id.into(),
        event_type: Some("push".into()),
        received_at_ms: now_ms(),
        content_type: Some("application/json".into()),
        secret_id: "primary".into(),
        ordering_key: None,
    }
}

/// The id of the key that signed the inbound record `record`, as a reader holding `keys` verifies it now.
fn signing_key_id(keys: &RecordKeys, record: &OwnedMessage) -> String {
    let (topic, key, body, headers) = (record.topic(), record.key(), record.payload(), record.headers());
    match keys.verify_as(RecordKind::Inbound, topic, key, body, headers, now_ms()) {
        Verdict::Authentic { key_id } => key_id,
        other => panic!("a record hookline signed: {other:?}"),
    }
}

/// The error class of every record in the stack's DLQ.
async fn dead_letter_classes(stack: &TestStack) -> Vec<String> {
    stack
        .records(&stack.kafka.dlq_topic)
        .await
        .iter()
        .map(|record| dead_letter_entry(record).error_class.expect("an error class"))
        .collect()
}

#[tokio::test]
async fn a_key_rotation_loses_and_doubles_nothing_and_the_old_key_is_refused_after_its_not_after() {
    let mut stack = TestStack::builder().consumer().build().await;
    // k1 is the stack's own key: the gateway and the consumer start with it alone.
    let k1 = stack.kafka.record_auth.keys[0].clone();
    let k2 = key_file("k2", "hookline-test-record-key-two-0123456789abcdef");
    let posted = |label: &str, n: usize| -> Vec<Delivery> {
        (0..n).map(|i| Delivery::new(format!(r#"{{"phase":"{label}","n":{i}}}"#).into_bytes())).collect()
    };

    // 1. Signed with k1 and processed.
    let before = posted("before", 3);
    for delivery in &before {
        stack.post_accepted(delivery).await;
    }
    stack.wait_until_handled(3).await;
    // 2. Signed with k1 while the consumer is down for the upgrade: still in the topic when it comes back.
    stack.stop_consumer(0).await;
    let during = posted("during", 3);
    for delivery in &during {
        stack.post_accepted(delivery).await;
    }
    // 3. Consumers first: they know k2 (first, so it would sign) and still k1. Then the gateway signs with k2.
    let rotated = RecordAuthConfig {
        keys: vec![k2.clone(), k1.clone()],
        accept_unsigned_until: None,
        inbound_only_keys: Vec::new(),
    };
    let config = stack.consumer_config_with_record_auth(rotated.clone());
    let handler = stack.handler.clone();
    let consumer = stack.start_consumer_with(config, handler).await;
    stack.restart_gateway_with_record_auth(rotated.clone()).await;
    let after = posted("after", 3);
    for delivery in &after {
        stack.post_accepted(delivery).await;
    }

    let all: Vec<&Delivery> = before.iter().chain(&during).chain(&after).collect();
    eventually(Duration::from_secs(60), "every event of both keys processed", || async {
        all.iter().all(|delivery| stack.handler.count(&delivery.delivery_id) >= 1)
    })
    .await;
    for delivery in &all {
        assert_eq!(stack.handler.count(&delivery.delivery_id), 1, "processed once: {}", delivery.delivery_id);
    }
    assert_eq!(stack.handler.calls().len(), 9);
    let records = stack.inbound_records().await;
    let readers = keys_of(&[k2.clone(), k1.clone()]);
    let keys: Vec<String> = records.iter().map(|record| signing_key_id(&readers, record)).collect();
    assert_eq!(keys.iter().filter(|id| *id == "test-k1").count(), 6, "{keys:?}");
    assert_eq!(keys.iter().filter(|id| *id == "k2").count(), 3, "{keys:?}");
    assert_eq!(
        stack.consumer_metric(consumer, "hookline_consumer_record_auth_total", &[("outcome", "authentic")]).await,
        6.0,
        "the restarted consumer verified the 3 k1 records it found and the 3 k2 ones"
    );
    assert!(dead_letter_classes(&stack).await.is_empty(), "nothing dead-lettered by the rotation");

    // 4. k1 retired: its not_after is now. A record signed with k1 afterwards is not hookline's any more.
    stack.stop_consumer(consumer).await;
    let retired = RecordAuthConfig {
        keys: vec![k2, hookline_common::config::SecretRef { not_after: Some(rfc3339_in(0)), ..k1.clone() }],
        accept_unsigned_until: None,
        inbound_only_keys: Vec::new(),
    };
    let config = stack.consumer_config_with_record_auth(retired);
    let handler = stack.handler.clone();
    let consumer = stack.start_consumer_with(config, handler).await;
    let late = Delivery::new(&br#"{"phase":"late k1"}"#[..]);
    let body = late.body.as_ref();
    let old_writer = keys_of(std::slice::from_ref(&k1));
    let headers = old_writer
        .sign(
            &stack.kafka.inbound_topic,
            Some(late.delivery_id.as_bytes()),
            Some(body),
            Some(&hookline_common::wire::event_headers(&meta(&late.delivery_id))),
            now_ms(),
        )
        .unwrap();
    stack.produce_unsigned(0, &late.delivery_id, headers, body).await;
    eventually(Duration::from_secs(60), "the late k1 record dead-lettered", || async {
        !dead_letter_classes(&stack).await.is_empty()
    })
    .await;
    assert_eq!(dead_letter_classes(&stack).await, vec![UNAUTHENTICATED_RECORD_CLASS.to_owned()]);
    assert_eq!(
        stack.consumer_metric(consumer, "hookline_consumer_record_auth_total", &[("outcome", "expired_key")]).await,
        1.0
    );
    assert_eq!(stack.handler.count(&late.delivery_id), 0);
    assert_eq!(stack.handler.calls().len(), 9, "no handler saw it");
    stack.shutdown().await;
}

#[tokio::test]
async fn unsigned_records_are_processed_inside_the_transition_window_and_dead_lettered_after_it() {
    let mut stack = TestStack::builder().build().await;
    let record_auth =
        |until: String| RecordAuthConfig { accept_unsigned_until: Some(until), ..stack.kafka.record_auth.clone() };
    let (open, closed) = (record_auth(rfc3339_in(3600)), record_auth(rfc3339_in(-3600)));

    // Inside the window: a record from before the upgrade (no MAC at all) is processed, and counted.
    let handler = stack.handler.clone();
    let consumer = stack.start_consumer_with(stack.consumer_config_with_record_auth(open), handler).await;
    let old = "written-before-the-upgrade";
    stack.produce_unsigned(0, old, hookline_common::wire::event_headers(&meta(old)), br#"{"n":1}"#).await;
    stack.wait_until_handled(1).await;
    assert_eq!(stack.handler.count(old), 1);
    assert_eq!(
        stack
            .consumer_metric(consumer, "hookline_consumer_record_auth_total", &[("outcome", "unsigned_accepted")])
            .await,
        1.0
    );
    stack.stop_consumer(consumer).await;

    // After the window: an unsigned record is dead-lettered, unprocessed.
    let handler = stack.handler.clone();
    let consumer = stack.start_consumer_with(stack.consumer_config_with_record_auth(closed), handler).await;
    let late = "written-after-the-window";
    stack.produce_unsigned(0, late, hookline_common::wire::event_headers(&meta(late)), br#"{"n":2}"#).await;
    eventually(Duration::from_secs(60), "the unsigned record dead-lettered", || async {
        !dead_letter_classes(&stack).await.is_empty()
    })
    .await;
    assert_eq!(dead_letter_classes(&stack).await, vec![UNAUTHENTICATED_RECORD_CLASS.to_owned()]);
    assert_eq!(
        stack.consumer_metric(consumer, "hookline_consumer_record_auth_total", &[("outcome", "unsigned")]).await,
        1.0
    );
    assert_eq!(stack.handler.count(late), 0);
    assert_eq!(stack.handler.calls().len(), 1);
    stack.shutdown().await;
}

#[tokio::test]
async fn records_for_another_service_without_a_mac_add_no_source_series() {
    let stack = TestStack::builder().consumer().build().await;
    stack.wait_until_assigned().await;
    let addressed = |source: &str| {
        OwnedHeaders::new()
            .insert(Header { key: raw::SERVICE, value: Some("nobody") })
            .insert(Header { key: raw::SOURCE, value: Some(source) })
    };
    // Written by a client without the record key: one made-up source each.
    for n in 0..20 {
        stack.produce_unsigned(0, &format!("k{n}"), addressed(&format!("made-up-{n}")), b"{}").await;
    }
    // Written by hookline (a re-drive addressed to another service): its source is believed.
    stack.produce_raw(0, "signed", addressed("github"), b"{}").await;
    let other = [("outcome", "other_service")];
    eventually(Duration::from_secs(30), "every record passed", || async {
        stack.consumer_metric(0, "hookline_consumer_events_total", &other).await == 21.0
    })
    .await;
    let scrape = stack.consumer_scrape(0).await;
    let made_up = |sample: &&Sample| sample.labels.get("source").is_some_and(|source| source.starts_with("made-up-"));
    assert!(!scrape.samples("hookline_consumer_events_total", &[]).any(|sample| made_up(&sample)), "{scrape}");
    let unknown = stack.consumer_metric(0, "hookline_consumer_events_total", &[("source", "unknown")]).await;
    assert_eq!(unknown, 20.0);
    assert_eq!(stack.consumer_metric(0, "hookline_consumer_events_total", &[("source", "github")]).await, 1.0);
    stack.shutdown().await;
}
