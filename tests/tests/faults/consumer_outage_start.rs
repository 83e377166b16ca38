//! A consumer started while the broker is down joins its group within seconds of the broker's return, however
//! long the outage lasted. This binary stops and restarts the shared broker with `scripts/stack`, so it holds a
//! single test (cargo runs test binaries one after another).

use std::time::{Duration, Instant};

use hookline_tests::{Delivery, StackRestore, TestStack, eventually, stack_script};

/// Long enough for a consumer that has never reached a broker to pile up error events and back off its
/// reconnects (the issue saw joins 37 to 89 s after the broker's return, longer for longer outages).
const OUTAGE: Duration = Duration::from_secs(20);
/// "Within seconds": reconnect (at most `reconnect.backoff.max.ms`), find the coordinator, join, sync, fetch.
const JOIN_DEADLINE: Duration = Duration::from_secs(15);

#[tokio::test]
async fn a_consumer_started_during_a_broker_outage_joins_within_seconds_of_the_brokers_return() {
    let mut stack = TestStack::builder().build().await;
    let before = Delivery::new(&br#"{"acknowledged":"before the outage"}"#[..]);
    stack.post_accepted(&before).await;

    let guard = StackRestore("start-kafka");
    stack_script("stop-kafka");
    let consumer = stack.start_consumer().await;
    // The outage itself is the fault under test, so its length is fixed, not waited for.
    tokio::time::sleep(OUTAGE).await;
    assert_eq!(stack.handler.count(&before.delivery_id), 0, "nothing is processed without a broker");
    let fetch_errors = stack.consumer_metric(consumer, "hookline_consumer_fetch_errors_total", &[]).await;
    assert!(fetch_errors > 0.0, "the consumer saw the outage (and counted it instead of logging each error)");
    drop(guard); // start-kafka returns once the broker answers metadata requests.

    let back = Instant::now();
    eventually(JOIN_DEADLINE, "the consumer started during the outage has joined and processed", || async {
        stack.handler.count(&before.delivery_id) == 1
    })
    .await;
    eprintln!("processed {:?} after the broker answered again", back.elapsed());
    // The gauge is sampled every 2 s: it may lag the first record by that much.
    eventually(Duration::from_secs(10), "the consumer reports its partitions", || async {
        stack.consumer_metric(consumer, "hookline_consumer_assigned_partitions", &[]).await >= 1.0
    })
    .await;

    let after = Delivery::new(&br#"{"acknowledged":"after the outage"}"#[..]);
    stack.post_accepted(&after).await;
    eventually(Duration::from_secs(30), "the event acknowledged after the outage is processed", || async {
        stack.handler.count(&after.delivery_id) == 1
    })
    .await;
    assert_eq!(stack.handler.count(&before.delivery_id), 1, "processed once");
    stack.shutdown().await;
}
