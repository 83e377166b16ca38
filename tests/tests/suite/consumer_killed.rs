//! Consumer processes killed with SIGKILL lose nothing: a claim of an event in the handler expires with the lease
//! and another member of the group processes the event; records handled beyond a partition's committed prefix
//! are redelivered and skipped by their done markers; the only events a kill may let be processed twice are
//! those whose handler succeeded before their done marker was written.

use std::time::Duration;

use hookline_tests::{
    Delivery, TestStack, eventually,
    process::{self, Announcements, ConsumerProcess, announced},
    push_meta,
};

/// Starts `test-consumer` in `mode` on the stack's topics and group; its stdout lines are collected.
fn spawn_consumer_process(stack: &TestStack, mode: &str) -> (ConsumerProcess, Announcements) {
    process::spawn_consumer_process(env!("CARGO_BIN_EXE_test-consumer").as_ref(), &stack.consumer_config, mode)
}

async fn crash_stack() -> TestStack {
    TestStack::builder()
        .partitions(1)
        .consumer_config(|config| {
            config.redis.claim_lease_ms = 3_000;
            config.handler.timeout_ms = 2_500;
            config.processing.route_max_in_flight = config.processing.max_in_flight;
        })
        .build()
        .await
}

#[tokio::test]
async fn consumer_killed_between_claim_and_done_loses_nothing() {
    let mut stack = crash_stack().await;
    let (mut child, lines) = spawn_consumer_process(&stack, "hang");
    let delivery = Delivery::new(&br#"{"kill":"me"}"#[..]);
    stack.post_accepted(&delivery).await;

    // Wait until the process is inside the handler: it has claimed the event and not marked it done.
    eventually(Duration::from_secs(60), "the consumer process reached the handler", || async {
        announced(&lines, "handling").contains(&delivery.delivery_id)
    })
    .await;
    child.kill();

    // Another member takes over once the group notices (session timeout) and the claim's lease has expired.
    stack.start_consumer().await;
    eventually(Duration::from_secs(60), "the event is processed by the surviving member", || async {
        stack.handler.count(&delivery.delivery_id) >= 1
    })
    .await;
    stack.wait_until_handled(1).await;
    assert_eq!(stack.handler.count(&delivery.delivery_id), 1);
    stack.shutdown().await;
}

#[tokio::test]
async fn consumer_killed_with_hundreds_in_flight_on_one_partition_loses_nothing_and_doubles_only_unmarked_successes() {
    const N_EVENTS: usize = 400;
    let mut stack = crash_stack().await;
    let records = (0..N_EVENTS)
        .map(|n| {
            let id = format!("kill-{n}");
            (
                0,
                id.clone(),
                hookline_common::wire::event_headers(&push_meta(&id)),
                format!("{{\"n\":{n}}}").into_bytes(),
            )
        })
        .collect();
    stack.produce_raw_batch(records).await;
    // Every record produced above was acknowledged by the broker.
    let (mut child, lines) = spawn_consumer_process(&stack, "work:100");
    eventually(Duration::from_secs(60), "the process has done some events and has hundreds in the handler", || async {
        let (handling, done) = (announced(&lines, "handling").len(), announced(&lines, "done").len());
        done >= 50 && handling - done >= 200
    })
    .await;
    child.kill();
    let done_by_killed = announced(&lines, "done");
    let handling_by_killed = announced(&lines, "handling");
    assert!(handling_by_killed.len() - done_by_killed.len() >= 200, "hundreds were in flight at the kill");

    stack.start_consumer().await;
    let ids: Vec<String> = (0..N_EVENTS).map(|n| format!("kill-{n}")).collect();
    eventually(Duration::from_secs(90), "every event processed by one of the two", || async {
        ids.iter().all(|id| done_by_killed.contains(id) || stack.handler.count(id) >= 1)
    })
    .await;
    stack.wait_until_handled(u64::try_from(N_EVENTS - done_by_killed.len()).expect("count")).await;
    let doubles: Vec<&String> =
        ids.iter().filter(|id| done_by_killed.contains(*id) && stack.handler.count(id) >= 1).collect();
    assert!(
        doubles.len() <= stack.consumer_config.processing.max_in_flight,
        "only events in the handler at the kill can be processed twice: {}",
        doubles.len()
    );
    for id in &ids {
        assert!(stack.handler.count(id) <= 1, "{id} processed twice by the survivor");
    }
    assert!(stack.records(&stack.kafka.dlq_topic).await.is_empty(), "nothing dead-lettered");
    stack.shutdown().await;
}

#[tokio::test]
async fn slow_head_record_does_not_hold_back_later_ones_yet_holds_back_the_committed_offset() {
    const N_LATER: usize = 30;
    let mut stack = crash_stack().await;
    let records = (0..=N_LATER)
        .map(|n| {
            let id = format!("head-test-{n}");
            (0, id.clone(), hookline_common::wire::event_headers(&push_meta(&id)), b"{}".to_vec())
        })
        .collect();
    stack.produce_raw_batch(records).await;
    let (mut child, lines) = spawn_consumer_process(&stack, "slow-head:head-test-0");
    eventually(Duration::from_secs(60), "every later record done while the head is in the handler", || async {
        announced(&lines, "handling").contains("head-test-0") && announced(&lines, "done").len() == N_LATER
    })
    .await;
    child.kill();

    // The committed offset stayed at the head: the survivor gets every record again, processes the head (once
    // its claim expired) and skips the rest by their done markers.
    stack.start_consumer().await;
    stack.wait_until_handled(u64::try_from(N_LATER + 1).expect("count")).await;
    assert_eq!(stack.handler.count("head-test-0"), 1, "the head is processed");
    assert_eq!(stack.consumer_events("duplicate").await, u64::try_from(N_LATER).expect("count"));
    assert_eq!(stack.handler.calls().len(), 1, "only the head reached the survivor's handler");
    stack.shutdown().await;
}
