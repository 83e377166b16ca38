//! Graceful shutdown against the real broker: a request in flight when shutdown starts still gets its real answer,
//! 202 only after the broker acknowledged it, and the gateway then exits within its drain deadline.

use std::time::{Duration, Instant};

use hookline_common::kafka::read_topic;
use hookline_signature::github;
use hookline_tests::{TEST_SECRET, TestStack};
use rdkafka::Message;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

#[tokio::test]
async fn a_request_in_flight_at_shutdown_is_finished_and_acknowledged_only_once_stored() {
    let stack = TestStack::builder().build().await;
    let topic = stack.kafka.inbound_topic.clone();
    let body = br#"{"in_flight":"at shutdown"}"#;
    let signature = github::sign(TEST_SECRET.as_bytes(), body);

    // The head and half the body arrive; then shutdown starts; then the rest of the body.
    let mut stream = TcpStream::connect(stack.gateway_addr).await.expect("connect");
    let head = format!(
        "POST /webhooks/github HTTP/1.1\r\nHost: test\r\nX-GitHub-Delivery: shutdown-1\r\nX-Hub-Signature-256: {signature}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.expect("head");
    stream.write_all(&body[..10]).await.expect("half the body");
    tokio::time::sleep(Duration::from_millis(200)).await;

    let started = Instant::now();
    let shutdown = tokio::spawn(stack.shutdown());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!shutdown.is_finished(), "the gateway waits for the request in flight");
    stream.write_all(&body[10..]).await.expect("rest of the body");

    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
        .await
        .expect("answer")
        .expect("read");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 202"), "{answer}");
    tokio::time::timeout(Duration::from_secs(20), shutdown).await.expect("exits within its deadline").expect("task");
    assert!(started.elapsed() < Duration::from_secs(20));

    let records = tokio::task::spawn_blocking(move || {
        read_topic(&hookline_tests::plaintext_kafka(), &topic, Duration::from_secs(20))
    })
    .await
    .expect("reader")
    .expect("read topic");
    assert_eq!(records.len(), 1, "the acknowledged request is in Kafka");
    assert_eq!(records[0].payload(), Some(&body[..]));
}
