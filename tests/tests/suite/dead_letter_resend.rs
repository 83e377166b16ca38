//! One captured delivery cannot grow the DLQ (issue 23): a dead-lettered event keeps a dead marker for the dedupe
//! TTL, so re-sends of it (a provider's retries, or a captured GitHub delivery re-sent with a new unsigned
//! `X-GitHub-Event` each time: the event id is the body's digest, the same every time) are skipped, counted as
//! `dead_lettered_before`; only a re-drive of its DLQ entry by the replayer runs it again.

use std::time::Duration;

use hookline_dlq_replayer::{
    ReplayerConfig,
    filter::Filter,
    index::Status,
    ops::{ReplayRequest, Replayer},
};
use hookline_tests::{Delivery, TestStack, eventually};

#[tokio::test]
async fn a_captured_delivery_re_sent_under_new_types_is_dead_lettered_once_and_its_re_drive_still_runs() {
    let stack = TestStack::builder().consumer().build().await;
    let captured = Delivery::new(&br#"{"ref":"refs/heads/main","after":"0f3a"}"#[..]);
    stack.handler.poison(&captured.delivery_id);
    stack.post_accepted(&captured).await;
    stack.wait_until_handled(1).await;
    for n in 0..30 {
        stack.post_accepted(&Delivery { event: format!("bogus-{n}"), ..captured.clone() }).await;
    }
    stack.wait_until_handled(31).await;
    assert_eq!(stack.consumer_events("dead_lettered").await, 1, "one dead letter, however often it is re-sent");
    assert_eq!(stack.consumer_events("dead_lettered_before").await, 30, "every re-send skipped and counted");
    assert_eq!(stack.handler.attempts(&captured.delivery_id), 1, "the handler ran once");
    assert_eq!(stack.records(&stack.kafka.dlq_topic).await.len(), 1);

    // The bug is fixed; the operator re-drives the entry: the replayer's record passes the dead marker.
    stack.handler.heal(&captured.delivery_id);
    let replayer =
        Replayer::new(ReplayerConfig { kafka: stack.kafka.clone(), ..ReplayerConfig::default() }).expect("replayer");
    let entries = replayer.list(&Filter::default()).await.expect("list");
    assert_eq!(entries.len(), 1);
    let id = entries[0].entry.id.clone();
    let request = ReplayRequest { ids: vec![id.clone()], by: "test".into(), ..ReplayRequest::default() };
    assert_eq!(replayer.replay(&request).await.expect("replay").done, vec![id]);
    eventually(Duration::from_secs(30), "the re-drive processed the event", || async {
        stack.handler.count(&captured.delivery_id) == 1
    })
    .await;
    eventually(Duration::from_secs(30), "its entry marked succeeded", || async {
        replayer.list(&Filter::default()).await.expect("list").first().is_some_and(|e| e.status == Status::Succeeded)
    })
    .await;

    // Processed now: a later re-send is an ordinary duplicate.
    stack.post_accepted(&Delivery { event: "bogus-again".into(), ..captured.clone() }).await;
    stack.wait_until_handled(33).await;
    assert_eq!(stack.consumer_events("duplicate").await, 1);
    assert_eq!(stack.handler.count(&captured.delivery_id), 1, "processed exactly once");
    assert_eq!(stack.records(&stack.kafka.dlq_topic).await.len(), 1, "the DLQ never grew");
    stack.shutdown().await;
}

/// An event whose retries ran out is dead-lettered once too, and a re-send is skipped, not retried again.
#[tokio::test]
async fn an_event_whose_retries_ran_out_is_not_retried_again_by_a_re_send() {
    let stack = TestStack::builder()
        .consumer()
        .consumer_config(|config| {
            config.retry.max_attempts = 2;
            config.retry.initial_backoff_ms = 10;
            config.retry.max_backoff_ms = 20;
        })
        .build()
        .await;
    let delivery = Delivery::new(&br#"{"flaky":true}"#[..]);
    stack.handler.fail_with(
        &delivery.delivery_id,
        (0..10).map(|_| hookline_consumer::handler::HandlerError::retryable("503 from the downstream")),
    );
    stack.post_accepted(&delivery).await;
    eventually(Duration::from_secs(30), "dead-lettered after 2 attempts", || async {
        stack.consumer_events("dead_lettered").await == 1
    })
    .await;
    stack.post_accepted(&delivery).await;
    eventually(Duration::from_secs(30), "the re-send skipped", || async {
        stack.consumer_events("dead_lettered_before").await == 1
    })
    .await;
    assert_eq!(stack.handler.attempts(&delivery.delivery_id), 2, "no attempt beyond the budget");
    assert_eq!(stack.records(&stack.kafka.dlq_topic).await.len(), 1);
    stack.shutdown().await;
}

/// N7: a captured delivery re-sent first with a forged type (not on the allowlist) is dead-lettered, and its dead
/// marker records that type; the provider's genuine delivery, of an allowlisted type, still claims the event over
/// the marker and is processed exactly once; a second genuine copy is a duplicate, and forged copies of any type
/// after that change nothing.
#[tokio::test]
async fn a_forged_type_dead_lettered_first_does_not_keep_the_genuine_delivery_from_being_processed_once() {
    let mut stack = TestStack::builder()
        .consumer_config(|config| {
            let rules = hookline_consumer::config::SourceRulesConfig {
                event_types: Some(vec!["push".into(), "issues".into()]),
                ..Default::default()
            };
            config.sources.insert("github".into(), rules);
        })
        .build()
        .await;
    let config = stack.consumer_config.clone();
    let handler = hookline_tests::routed(&stack.handler, &config);
    stack.start_consumer_with(config, handler).await;
    let genuine = Delivery::new(&br#"{"ref":"refs/heads/main","after":"7b21"}"#[..]);
    stack.post_accepted(&Delivery { event: "bogus".into(), ..genuine.clone() }).await;
    stack.wait_until_handled(1).await;
    assert_eq!(stack.consumer_events("dead_lettered").await, 1, "the forged type is not allowlisted: poison");
    stack.post_accepted(&Delivery { event: "bogus-again".into(), ..genuine.clone() }).await;
    stack.wait_until_handled(2).await;
    assert_eq!(stack.consumer_events("dead_lettered_before").await, 1, "another forged type is still skipped");

    stack.post_accepted(&genuine).await;
    eventually(Duration::from_secs(30), "the genuine delivery processed", || async {
        stack.handler.count(&genuine.delivery_id) == 1
    })
    .await;
    stack.post_accepted(&genuine).await;
    stack.post_accepted(&Delivery { event: "issues".into(), ..genuine.clone() }).await;
    stack.wait_until_handled(5).await;
    assert_eq!(stack.consumer_events("duplicate").await, 2, "every later copy is a duplicate");
    assert_eq!(stack.handler.count(&genuine.delivery_id), 1, "processed exactly once");
    let calls = stack.handler.calls();
    assert!(calls.iter().all(|event| event.meta.event_type.as_deref() == Some("push")), "only the genuine type ran");
    assert_eq!(stack.records(&stack.kafka.dlq_topic).await.len(), 1, "the forged copy's entry, and no other");
    stack.shutdown().await;
}

/// P8: a route filter is judged only for a type the source's allowlist takes. A captured delivery re-sent first
/// under a type nobody allowed, routed to a route whose filter matches the body, is poison (dead-lettered, then
/// claimed over by the genuine copy), never filtered; one re-sent first under another allowlisted type is
/// filtered with its type recorded, and the genuine copy claims the event over the filtered marker. Before the fix
/// either first copy was marked filtered and the genuine delivery was a duplicate, never processed.
#[tokio::test]
async fn a_copy_re_typed_to_a_filtered_route_does_not_make_the_genuine_delivery_a_duplicate() {
    use hookline_consumer::config::{FilterConfig, HandlerConfig, RouteConfig};
    let route = |event_types: Option<Vec<String>>, filters: Vec<FilterConfig>| RouteConfig {
        source: "github".to_owned(),
        event_types,
        handler: HandlerConfig::default(),
        filters,
        ..RouteConfig::default()
    };
    let mut stack = TestStack::builder()
        .consumer_config(move |config| {
            let rules = hookline_consumer::config::SourceRulesConfig {
                event_types: Some(vec!["push".into(), "issues".into()]),
                ..Default::default()
            };
            config.sources.insert("github".into(), rules);
            let noise = FilterConfig { name: "noise".to_owned(), skip_when: vec!["/ref exists".to_owned()] };
            config.routes = vec![route(Some(vec!["push".into()]), Vec::new()), route(None, vec![noise])];
        })
        .build()
        .await;
    let config = stack.consumer_config.clone();
    let handler = hookline_tests::routed(&stack.handler, &config);
    stack.start_consumer_with(config, handler).await;
    let outcomes = |expected: [(&'static str, u64); 4]| {
        let stack = &stack;
        async move {
            eventually(Duration::from_secs(60), &format!("outcomes {expected:?}"), || async {
                let mut all = true;
                for (outcome, n) in expected {
                    all &= stack.consumer_events(outcome).await == n;
                }
                all
            })
            .await;
        }
    };

    // A type not on the allowlist: poison, not filtered.
    let genuine = Delivery::new(&br#"{"ref":"refs/heads/main","after":"5c1e"}"#[..]);
    stack.post_accepted(&Delivery { event: "bogus".into(), ..genuine.clone() }).await;
    outcomes([("filtered", 0), ("dead_lettered", 1), ("processed", 0), ("duplicate", 0)]).await;
    stack.post_accepted(&genuine).await;
    outcomes([("filtered", 0), ("dead_lettered", 1), ("processed", 1), ("duplicate", 0)]).await;

    // An allowlisted type routed to the filtered route: filtered, its type recorded in the marker.
    let second = Delivery::new(&br#"{"ref":"refs/heads/dev","after":"9d02"}"#[..]);
    stack.post_accepted(&Delivery { event: "issues".into(), ..second.clone() }).await;
    outcomes([("filtered", 1), ("dead_lettered", 1), ("processed", 1), ("duplicate", 0)]).await;
    stack.post_accepted(&second).await;
    outcomes([("filtered", 1), ("dead_lettered", 1), ("processed", 2), ("duplicate", 0)]).await;
    // Then every copy, of either type, is a duplicate.
    stack.post_accepted(&second).await;
    stack.post_accepted(&Delivery { event: "issues".into(), ..second.clone() }).await;
    outcomes([("filtered", 1), ("dead_lettered", 1), ("processed", 2), ("duplicate", 2)]).await;
    stack.shutdown().await;
}
