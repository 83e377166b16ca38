//! The dedupe id depends only on signed bytes: a genuine request captured (from a proxy log, a provider's "recent
//! deliveries" page) and re-sent under a fresh unsigned delivery id is the same event and is processed once; the
//! provider's own id travels as metadata; and Svix's id comes from the header spelling that verified.

use std::time::{SystemTime, UNIX_EPOCH};

use hookline_common::config::SecretRef;
use hookline_gateway::config::SourceConfig;
use hookline_signature::standard_webhooks;
use hookline_tests::{Delivery, TEST_SECRET, TestStack, body_event_id, read};
use http::{Request, StatusCode};
use http_body_util::Full;
use rdkafka::message::Message;

#[tokio::test]
async fn a_captured_request_resent_with_a_fresh_id_is_a_duplicate() {
    let stack = TestStack::builder().consumer().build().await;
    let genuine = Delivery { delivery_id: "72d3162e-cc78-11e3-81ab-4c9367dc0958".to_owned(), ..Delivery::new("{}") };
    let genuine = Delivery { body: br#"{"ref":"refs/heads/main","after":"c0ffee"}"#[..].into(), ..genuine };
    let signature = genuine.signature(TEST_SECRET);
    assert_eq!(stack.post_signed(&genuine, &signature).await.status, StatusCode::ACCEPTED);
    // The attacker replays the captured bytes and signature with a fresh delivery id and another event name.
    let replayed = Delivery {
        delivery_id: "00000000-0000-4000-8000-000000000001".to_owned(),
        event: "release".to_owned(),
        ..genuine.clone()
    };
    assert_eq!(stack.post_signed(&replayed, &signature).await.status, StatusCode::ACCEPTED);
    stack.wait_until_handled(2).await;

    let event_id = body_event_id(&genuine.body);
    assert_eq!(stack.handler.count(&event_id), 1, "processed once");
    assert_eq!(stack.consumer_events("duplicate").await, 1, "the replay is a duplicate");
    let records = stack.inbound_records().await;
    assert_eq!(records.len(), 2);
    for record in &records {
        assert_eq!(read::inbound(record).meta.event_id, event_id);
    }
    let provider_ids: Vec<Option<String>> =
        records.iter().map(|record| read::inbound(record).provider_event_id).collect();
    assert_eq!(
        provider_ids,
        vec![Some(genuine.delivery_id.clone()), Some(replayed.delivery_id.clone())],
        "the provider's id is kept as metadata"
    );
    stack.shutdown().await;
}

#[tokio::test]
async fn svix_takes_its_id_from_the_spelling_that_verified() {
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let path = std::env::temp_dir().join(format!("hookline-identity-{}.secret", uuid::Uuid::new_v4().simple()));
    std::fs::write(&path, SECRET).expect("write secret");
    let stack = TestStack::builder()
        .gateway_source(SourceConfig::new(
            "svix",
            "svix",
            vec![SecretRef::from_file("svix", path.display().to_string())],
        ))
        .build()
        .await;
    let now = i64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_secs()).expect("now");
    let body = br#"{"type":"user.created","data":{}}"#;
    let key = standard_webhooks::decode_secret(SECRET.as_bytes()).expect("key");
    // Signed with the unbranded `webhook-*` spelling; an unsigned `svix-id` added by whoever relayed it.
    let request = Request::post(format!("http://{}/webhooks/svix", stack.gateway_addr))
        .header("webhook-id", "msg_signed")
        .header("webhook-timestamp", now.to_string())
        .header("webhook-signature", standard_webhooks::sign(&key, "msg_signed", now, body))
        .header("svix-id", "msg_unsigned")
        .body(Full::new(body[..].into()))
        .expect("request");
    assert_eq!(stack.send(request).await.status, StatusCode::ACCEPTED);
    let records = stack.inbound_records().await;
    assert_eq!(read::inbound(&records[0]).meta.event_id, "msg_signed");
    assert_eq!(records.len(), 1);
    stack.shutdown().await;
}

#[tokio::test]
async fn a_source_ordering_key_keys_the_record_and_rides_in_its_header() {
    const SECRET: &str = "whsec_ordering_test";
    let path = std::env::temp_dir().join(format!("hookline-ordering-{}.secret", uuid::Uuid::new_v4().simple()));
    std::fs::write(&path, SECRET).expect("write secret");
    let stack = TestStack::builder()
        .gateway_source(SourceConfig {
            ordering_key: Some(hookline_signature::FieldSource::pointer("/data/object/id")),
            ..SourceConfig::new("stripe", "stripe", vec![SecretRef::from_file("s", path.display().to_string())])
        })
        .build()
        .await;
    let now = i64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_secs()).expect("now");
    let send = |body: &'static [u8]| {
        let request = Request::post(format!("http://{}/webhooks/stripe", stack.gateway_addr))
            .header("stripe-signature", hookline_signature::stripe::sign(SECRET.as_bytes(), body, now))
            .body(Full::new(body.into()))
            .expect("request");
        stack.send(request)
    };
    let ordered = br#"{"id":"evt_1","type":"invoice.paid","data":{"object":{"id":"in_42"}}}"#;
    let unordered = br#"{"id":"evt_2","type":"ping","data":{}}"#;
    assert_eq!(send(ordered).await.status, StatusCode::ACCEPTED);
    assert_eq!(send(unordered).await.status, StatusCode::ACCEPTED);
    let records = stack.inbound_records().await;
    let by_id = |id: &str| records.iter().find(|record| read::inbound(*record).meta.event_id == id).expect("record");
    assert_eq!(by_id("evt_1").key(), Some(&b"in_42"[..]), "keyed by the ordering key");
    assert_eq!(read::inbound(by_id("evt_1")).meta.ordering_key.as_deref(), Some("in_42"));
    assert_eq!(by_id("evt_2").key(), Some(&b"evt_2"[..]), "no value: keyed by the event id");
    assert_eq!(read::inbound(by_id("evt_2")).meta.ordering_key, None);
    stack.shutdown().await;
}

/// `/readyz` covers every topic a source produces to: a source routed to a topic nothing created would answer
/// 503 to every delivery while the gateway looked ready.
#[tokio::test]
async fn readyz_covers_every_topic_the_sources_produce_to() {
    let topic = format!("test-{}-elsewhere", uuid::Uuid::new_v4().simple());
    let stack = TestStack::builder()
        .gateway_source(SourceConfig { topic: Some(topic.clone()), ..SourceConfig::new("elsewhere", "none", vec![]) })
        .build()
        .await;
    let readyz = || async {
        let request =
            Request::get(format!("http://{}/readyz", stack.gateway_admin_addr)).body(Full::default()).expect("request");
        stack.send(request).await.status
    };
    // Several readiness probes' worth: never ready while the topic is missing (the broker itself is up).
    for _ in 0..40 {
        assert_eq!(readyz().await, StatusCode::SERVICE_UNAVAILABLE, "ready without topic {topic}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let spec = hookline_common::kafka::TopicSpec { name: topic.clone(), partitions: 1, compacted: false };
    hookline_common::kafka::ensure_topics(&hookline_tests::plaintext_kafka(), &[spec], 1).await.expect("create topic");
    hookline_tests::eventually(std::time::Duration::from_secs(30), "ready once the topic exists", || async {
        readyz().await == StatusCode::OK
    })
    .await;
    stack.shutdown().await;
}

/// F1 (a): a type from a header the signature does not cover reaches Kafka only where the source chose it
/// (`type_from_header = true`); with `false` the same signed delivery is produced with no type at all.
#[tokio::test]
async fn an_unsigned_type_header_types_the_event_only_where_the_source_chose_it() {
    let path = std::env::temp_dir().join(format!("hookline-untyped-{}.secret", uuid::Uuid::new_v4().simple()));
    std::fs::write(&path, TEST_SECRET).expect("write secret");
    let stack = TestStack::builder()
        .gateway_source(SourceConfig {
            type_from_header: Some(false),
            ..SourceConfig::new(
                "github-untyped",
                "github",
                vec![SecretRef::from_file("primary", path.display().to_string())],
            )
        })
        .build()
        .await;
    let delivery = Delivery { event: "release".to_owned(), ..Delivery::new(&br#"{"action":"published"}"#[..]) };
    let signature = delivery.signature(TEST_SECRET);
    assert_eq!(stack.post_signed(&delivery, &signature).await.status, StatusCode::ACCEPTED);
    let mut untyped = delivery.request(stack.gateway_addr, &signature);
    *untyped.uri_mut() = format!("http://{}/webhooks/github-untyped", stack.gateway_addr).parse().expect("uri");
    assert_eq!(stack.send(untyped).await.status, StatusCode::ACCEPTED);

    let records = stack.inbound_records().await;
    let type_of = |source: &str| {
        let record = records.iter().map(read::inbound).find(|r| r.meta.source == source).expect(source);
        record.meta.event_type
    };
    assert_eq!(type_of("github").as_deref(), Some("release"), "type_from_header = true: the header is the type");
    assert_eq!(type_of("github-untyped"), None, "type_from_header = false: GitHub signs no type, so there is none");
    stack.shutdown().await;
}
