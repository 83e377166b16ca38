//! Redis stopped mid-stream: the consumer fails closed (nothing is processed without the dedupe gate) and
//! resumes when Redis returns. This binary stops the shared Redis with `scripts/stack`, so it holds a single
//! test: cargo runs test binaries one after another.

use std::time::Duration;

use hookline_tests::{Delivery, StackRestore, TestStack, eventually, stack_script};

#[tokio::test]
async fn redis_stopped_mid_stream_processes_nothing_without_dedupe_then_resumes() {
    let stack = TestStack::builder().consumer().build().await;
    let first = Delivery::new(&br#"{"n":0}"#[..]);
    stack.post_accepted(&first).await;
    stack.wait_until_handled(1).await;

    let guard = StackRestore("start-redis");
    stack_script("stop-redis");
    let during: Vec<Delivery> = (1..=3).map(|n| Delivery::new(format!("{{\"n\":{n}}}").into_bytes())).collect();
    for delivery in &during {
        stack.post_accepted(delivery).await; // The gateway needs no Redis: events are durable in Kafka.
    }
    // The consumer has fetched them and tried to claim: it is paused, failing closed.
    eventually(Duration::from_secs(30), "consumer paused on Redis errors", || async {
        stack.consumer_metric(0, "hookline_consumer_paused", &[]).await == 1.0
            && stack.consumer_metric(0, "hookline_consumer_dedupe_errors_total", &[]).await >= 2.0
    })
    .await;
    for delivery in &during {
        assert_eq!(stack.handler.attempts(&delivery.delivery_id), 0, "nothing processed without the dedupe gate");
    }
    drop(guard);

    eventually(Duration::from_secs(60), "processing resumes after Redis returns", || async {
        during.iter().all(|delivery| stack.handler.count(&delivery.delivery_id) == 1)
    })
    .await;
    stack.wait_until_handled(4).await;
    for delivery in during.iter().chain([&first]) {
        assert_eq!(stack.handler.count(&delivery.delivery_id), 1);
    }
    assert_eq!(stack.consumer_metric(0, "hookline_consumer_paused", &[]).await, 0.0);
    stack.shutdown().await;
}
