//! Records only hookline could have written: a record in the inbound topic without hookline's MAC (a client
//! without the record key copied every `hookline-*` header of a real record) or a signed record changed since is
//! dead-lettered as `unauthenticated_record` before dedupe: it reaches no handler, claims nothing (the genuine
//! event sent afterwards is processed once), is counted, and the replayer refuses to re-drive it without force.

use hookline_common::wire::{UNAUTHENTICATED_RECORD_CLASS, header};
use hookline_dlq_replayer::{
    ReplayerConfig,
    ops::{ReplayRequest, Replayer},
};
use hookline_tests::{Delivery, TestStack, eventually};
use http::StatusCode;
use rdkafka::{
    Message,
    message::{Header, Headers, OwnedHeaders, OwnedMessage},
};
use std::time::Duration;

/// `record`'s headers without its MAC, with `change` applied to each value.
fn copied_headers(record: &OwnedMessage, change: impl Fn(&str, &[u8]) -> Vec<u8>) -> OwnedHeaders {
    let headers = record.headers().expect("headers");
    headers.iter().filter(|h| h.key != header::MAC).fold(OwnedHeaders::new(), |out, h| {
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
    assert!(real.headers().unwrap().iter().any(|h| h.key == header::MAC), "the gateway signs what it writes");

    // 1. Unsigned: every hookline-* header of a real record, a fresh event id the genuine delivery will use later.
    let genuine = Delivery::new(&br#"{"action":"genuine"}"#[..]);
    let forged = copied_headers(&real, |key, value| {
        if key == header::EVENT_ID { genuine.delivery_id.as_bytes().to_vec() } else { value.to_vec() }
    });
    stack.produce_unsigned(0, &genuine.delivery_id, forged, br#"{"action":"forged"}"#).await;
    // 2. A signed record's body changed. 3. A signed record's header changed.
    let mac_of = |record: &OwnedMessage| {
        record.headers().unwrap().iter().find(|h| h.key == header::MAC).and_then(|h| h.value).unwrap().to_vec()
    };
    let with_mac = |headers: OwnedHeaders, mac: &[u8]| headers.insert(Header { key: header::MAC, value: Some(mac) });
    let key = std::str::from_utf8(real.key().unwrap()).unwrap().to_owned();
    let body_changed = with_mac(copied_headers(&real, |_, value| value.to_vec()), &mac_of(&real));
    stack.produce_unsigned(0, &key, body_changed, br#"{"action":"tampered"}"#).await;
    let header_changed = with_mac(
        copied_headers(&real, |key, value| if key == header::EVENT_TYPE { b"ping".to_vec() } else { value.to_vec() }),
        &mac_of(&real),
    );
    stack.produce_unsigned(0, &key, header_changed, real.payload().unwrap()).await;

    stack.wait_until_handled(4).await;
    eventually(Duration::from_secs(30), "three unauthenticated records counted", || async {
        stack.consumer_metric(0, "hookline_consumer_record_auth_total", "outcome=\"unsigned\"").await == 1.0
            && stack.consumer_metric(0, "hookline_consumer_record_auth_total", "outcome=\"bad_mac\"").await == 2.0
    })
    .await;
    assert_eq!(stack.handler.calls().len(), 1, "only the real record reached the handler");
    let dead = stack.records(&stack.kafka.dlq_topic).await;
    assert_eq!(dead.len(), 3);
    for record in &dead {
        let class = record.headers().unwrap().iter().find(|h| h.key == header::dlq::ERROR_CLASS).unwrap().value;
        assert_eq!(class, Some(UNAUTHENTICATED_RECORD_CLASS.as_bytes()));
    }
    assert_eq!(
        stack
            .consumer_metric(0, "hookline_consumer_dead_lettered_total", "error_class=\"unauthenticated_record\"")
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
        .insert(Header { key: header::SOURCE, value: Some("github") })
        .insert(Header { key: header::EVENT_ID, value: Some("forged-1") })
        .insert(Header { key: header::dlq::ERROR_CLASS, value: Some("poison") })
        .insert(Header { key: header::dlq::ORIGINAL_TOPIC, value: Some(stack.kafka.inbound_topic.as_str()) });
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
    assert!(redriven[0].headers().unwrap().iter().any(|h| h.key == header::MAC));
    stack.shutdown().await;
}
