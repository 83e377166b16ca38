//! The walking skeleton end to end, against the real broker and Redis: what the gateway acknowledges is in Kafka
//! byte for byte and is processed once; duplicates are processed once; unverified bytes never reach Kafka.

use bytes::Bytes;
use hookline_gateway::config::ProducerConfig;
use hookline_tests::{Delivery, TestStack, read};
use http::StatusCode;
use rdkafka::Message;

#[tokio::test]
async fn signed_webhook_is_acknowledged_stored_verbatim_and_processed_once() {
    let stack = TestStack::builder().consumer().build().await;
    // Whitespace and key order that a parse-and-reserialize would not keep.
    let delivery = Delivery::new(&b"{ \"zen\":  \"Keep it logically awesome.\",\n  \"hook_id\": 1 }"[..]);

    let reply = stack.post(&delivery).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);

    // 202 means the broker has it: read it back without waiting.
    let records = stack.inbound_records().await;
    assert_eq!(records.len(), 1);
    let record = &records[0];
    assert_eq!(record.payload(), Some(delivery.body.as_ref()), "the value is the raw body, byte for byte");
    assert_eq!(record.key(), Some(delivery.delivery_id.as_bytes()));
    let inbound = read::inbound(record);
    let meta = &inbound.meta;
    assert_eq!(meta.source, "github");
    assert_eq!(meta.event_id, delivery.delivery_id);
    assert_eq!(meta.event_type.as_deref(), Some("push"));
    assert_eq!(meta.secret_id, "primary");
    assert_eq!(meta.content_type.as_deref(), Some("application/json"));
    assert!(meta.received_at_ms > 0);
    // Byte for byte the record InboundRecord encodes (this format version's), signed: nothing else in its headers.
    let expected =
        stack.signed_record(inbound.encode(&stack.kafka.inbound_topic, Bytes::copy_from_slice(&delivery.body)));
    assert_eq!(read::headers(record), expected.headers);

    stack.wait_until_handled(1).await;
    assert_eq!(stack.handler.count(&delivery.delivery_id), 1);
    let processed = stack.handler.calls();
    assert_eq!(processed[0].body, delivery.body);
    assert_eq!(stack.consumer_events("processed").await, 1);
    stack.shutdown().await;
}

#[tokio::test]
async fn same_delivery_sent_twice_is_processed_once() {
    let stack = TestStack::builder().consumer().build().await;
    let delivery = Delivery::new(&br#"{"action":"opened"}"#[..]);

    for _ in 0..2 {
        assert_eq!(stack.post(&delivery).await.status, StatusCode::ACCEPTED);
    }
    // Both deliveries are durably stored (the gateway does not dedupe); the consumer processes one.
    assert_eq!(stack.inbound_records().await.len(), 2);
    stack.wait_until_handled(2).await;
    assert_eq!(stack.handler.count(&delivery.delivery_id), 1);
    assert_eq!(stack.consumer_events("processed").await, 1);
    assert_eq!(stack.consumer_events("duplicate").await, 1);
    stack.shutdown().await;
}

#[tokio::test]
async fn tampered_body_gets_401_and_nothing_reaches_kafka() {
    let stack = TestStack::builder().build().await;
    let genuine = Delivery::new(&br#"{"amount":100}"#[..]);
    let signature = genuine.signature(hookline_tests::TEST_SECRET);
    let tampered = Delivery { body: (&br#"{"amount":999}"#[..]).into(), ..genuine.clone() };

    let reply = stack.post_signed(&tampered, &signature).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    assert_eq!(reply.error_code().as_deref(), Some("signature_mismatch"));

    let wrong_secret = Delivery::new(&br#"{"amount":5}"#[..]);
    let reply = stack.post_signed(&wrong_secret, &wrong_secret.signature("not the secret")).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);

    let reply = stack.post_signed(&wrong_secret, "sha256=nothex").await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.error_code().as_deref(), Some("signature_malformed"));

    // A genuine delivery afterwards is the only record in the topic.
    assert_eq!(stack.post(&genuine).await.status, StatusCode::ACCEPTED);
    let records = stack.inbound_records().await;
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].payload(), Some(genuine.body.as_ref()));
    stack.shutdown().await;
}

#[tokio::test]
async fn broker_unreachable_gives_503_with_retry_after_never_2xx() {
    // A loopback port where no broker listens: every produce fails within the deadline.
    let closed_port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("port").port();
    let stack = TestStack::builder()
        .gateway_brokers(format!("127.0.0.1:{closed_port}"))
        .produce_timeout_ms(1_000)
        .build()
        .await;
    for _ in 0..3 {
        let reply = stack.post(&Delivery::new(&b"{}"[..])).await;
        assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE, "{:?}", reply.body);
        assert!(reply.headers.contains_key(http::header::RETRY_AFTER));
        assert_eq!(reply.error_code().as_deref(), Some("broker_unavailable"));
    }
    // The test topics live on the real broker: nothing reached them.
    assert!(stack.inbound_records().await.is_empty());
    stack.shutdown().await;
}

#[tokio::test]
async fn bad_requests_get_clear_4xx_and_change_nothing() {
    let stack = TestStack::builder().build().await;
    let base = format!("http://{}", stack.gateway_addr);
    let empty = http_body_util::Full::new(bytes::Bytes::new());

    let unknown = http::Request::post(format!("{base}/webhooks/nope")).body(empty.clone()).expect("request");
    let reply = stack.send(unknown).await;
    assert_eq!((reply.status, reply.error_code().as_deref()), (StatusCode::NOT_FOUND, Some("unknown_source")));

    let get = http::Request::get(format!("{base}/webhooks/github")).body(empty.clone()).expect("request");
    let reply = stack.send(get).await;
    assert_eq!(reply.status, StatusCode::METHOD_NOT_ALLOWED);

    // Over the source's 64 KiB limit, declared up front.
    let big = Delivery::new(vec![b'x'; 64 * 1024 + 1]);
    let reply = stack.post(&big).await;
    assert_eq!((reply.status, reply.error_code().as_deref()), (StatusCode::PAYLOAD_TOO_LARGE, Some("body_too_large")));

    let unsigned = http::Request::post(format!("{base}/webhooks/github"))
        .header("x-github-delivery", "d-1")
        .body(http_body_util::Full::new(bytes::Bytes::from_static(b"{}")))
        .expect("request");
    let reply = stack.send(unsigned).await;
    assert_eq!((reply.status, reply.error_code().as_deref()), (StatusCode::UNAUTHORIZED, Some("signature_missing")));

    let no_id = Delivery { delivery_id: String::new(), ..Delivery::new(&b"{}"[..]) };
    let reply = stack.post(&no_id).await;
    assert_eq!((reply.status, reply.error_code().as_deref()), (StatusCode::BAD_REQUEST, Some("event_id_missing")));

    assert!(stack.inbound_records().await.is_empty(), "no rejected request reached Kafka");
    stack.shutdown().await;
}

/// Batching that follows the load (issue 25): with a low `batch_from_in_flight`, the first deliveries of a burst go
/// to the producer that sends at once and the rest to the lingering one; every 202 is a record in the topic either
/// way, once.
#[tokio::test]
async fn acknowledged_deliveries_are_stored_once_whichever_producer_carried_them() {
    let producer = ProducerConfig { batch_from_in_flight: 4, batch_linger_ms: 20.0 };
    let stack = TestStack::builder().gateway_producer(producer).build().await;
    let deliveries: Vec<Delivery> =
        (0..48).map(|n| Delivery::new(format!("{{\"zen\": \"burst\", \"n\": {n}}}").into_bytes())).collect();

    let replies = futures_util::future::join_all(deliveries.iter().map(|delivery| stack.post(delivery))).await;
    for reply in &replies {
        assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
    }

    let records = stack.inbound_records().await;
    let mut stored: Vec<&[u8]> = records.iter().filter_map(Message::key).collect();
    stored.sort_unstable();
    let mut acknowledged: Vec<&[u8]> = deliveries.iter().map(|delivery| delivery.delivery_id.as_bytes()).collect();
    acknowledged.sort_unstable();
    assert_eq!(stored, acknowledged, "each acknowledged delivery once, nothing else");
    stack.shutdown().await;
}
