//! The dead marker against a real Redis (N7), on a single Redis and on the stack's Redis Cluster: it records the
//! types dead-lettered; a copy of an allowlisted type not yet recorded claims over it, once per type; anything else
//! is skipped; a release after such a takeover leaves the marker as it was, so the recorded types survive a
//! retryable failure. And the filtered outcome by the same rule (P8), a duplicate to anything else.

use hookline_common::{
    config::RedisConfig,
    wire::redis_key::{self, FilteredMarker},
};
use hookline_consumer::dedupe::{Claim, Dedupe};
use hookline_tests::{redis_cluster_urls, redis_url};

async fn dedupe(cluster: bool) -> Dedupe {
    let config = RedisConfig {
        url: if cluster { redis_cluster_urls() } else { redis_url() },
        cluster,
        key_prefix: format!("test:{}", uuid::Uuid::new_v4().simple()),
        ..RedisConfig::default()
    };
    Dedupe::connect(&config, "billing").await.expect("redis")
}

fn acquired(claim: Claim) -> hookline_consumer::dedupe::ClaimToken {
    match claim {
        Claim::Acquired(token) => token,
        other => panic!("expected the claim, got {other:?}"),
    }
}

#[tokio::test]
async fn a_dead_marker_is_claimed_over_once_per_allowlisted_type_and_a_release_puts_it_back() {
    dead_marker_rules(dedupe(false).await).await;
}

#[tokio::test]
async fn a_dead_marker_keeps_its_rules_on_a_redis_cluster() {
    // Needs `scripts/stack start-redis-cluster` (scripts/test starts it).
    dead_marker_rules(dedupe(true).await).await;
}

async fn dead_marker_rules(dedupe: Dedupe) {
    let copy = |event_type: &str| dedupe.token("github", "e1").recording_type(Some(event_type));

    let forged = acquired(dedupe.claim(&copy("bogus")).await.expect("redis"));
    dedupe.mark_dead(&forged, "webhooks.dlq:0:1").await.expect("redis");
    assert_eq!(dedupe.claim(&copy("bogus-2")).await.expect("redis"), Claim::DeadLettered, "not allowlisted: skipped");
    assert_eq!(dedupe.claim(&copy("push")).await.expect("redis"), Claim::DeadLettered, "no allowlist, no takeover");

    // The genuine copy, allowlisted, claims over the marker; a retryable failure releases it: the marker is back.
    let genuine = acquired(dedupe.claim(&copy("push").allowlisted()).await.expect("redis"));
    dedupe.release(&genuine).await.expect("redis");
    assert_eq!(
        dedupe.claim(&copy("bogus-3")).await.expect("redis"),
        Claim::DeadLettered,
        "the release kept the marker"
    );

    // Its retry claims over it again and is dead-lettered too: the marker now records both types.
    let retry = acquired(dedupe.claim(&copy("push").allowlisted()).await.expect("redis"));
    dedupe.mark_dead(&retry, "webhooks.dlq:0:2").await.expect("redis");
    assert_eq!(dedupe.claim(&copy("push").allowlisted()).await.expect("redis"), Claim::DeadLettered, "push was tried");
    assert_eq!(
        dedupe.claim(&copy("bogus").allowlisted()).await.expect("redis"),
        Claim::DeadLettered,
        "bogus was tried"
    );

    // Another allowlisted type gets its one try, and then the event is done: every later copy is a duplicate.
    let issues = acquired(dedupe.claim(&copy("issues").allowlisted()).await.expect("redis"));
    let marker =
        redis_key::DoneMarker { processed_at_ms: 1, handling_ms: 1, topic: "t".into(), partition: 0, offset: 0 };
    assert!(dedupe.mark_done(&issues, &marker).await.expect("redis"));
    assert_eq!(dedupe.claim(&copy("pull_request").allowlisted()).await.expect("redis"), Claim::AlreadyDone);

    // A re-drive still claims over any dead marker, whatever it records.
    let other = |event_type: &str| dedupe.token("github", "e2").recording_type(Some(event_type));
    let first = acquired(dedupe.claim(&other("push").allowlisted()).await.expect("redis"));
    dedupe.mark_dead(&first, "webhooks.dlq:0:3").await.expect("redis");
    assert_eq!(dedupe.claim(&other("push").allowlisted()).await.expect("redis"), Claim::DeadLettered);
    let redrive = dedupe.redrive_token("github", "e2").recording_type(Some("push"));
    acquired(dedupe.claim(&redrive).await.expect("redis"));
}

#[tokio::test]
async fn a_filtered_outcome_is_claimed_over_once_per_allowlisted_type_it_does_not_record() {
    filtered_outcome_rules(dedupe(false).await).await;
}

#[tokio::test]
async fn a_filtered_outcome_keeps_its_rules_on_a_redis_cluster() {
    // Needs `scripts/stack start-redis-cluster` (scripts/test starts it).
    filtered_outcome_rules(dedupe(true).await).await;
}

/// P8 on the bucketed layout: a captured delivery re-sent first under another allowlisted type that a route's
/// filter skips must not make the provider's genuine delivery a duplicate.
async fn filtered_outcome_rules(dedupe: Dedupe) {
    let marker = FilteredMarker {
        filter: "noise".to_owned(),
        filtered_at_ms: 1,
        topic: "t".to_owned(),
        partition: 0,
        offset: 0,
        types: Vec::new(),
    };
    let copy = |event_type: &str| dedupe.token("github", "f1").recording_type(Some(event_type));

    let first = acquired(dedupe.claim(&copy("issues").allowlisted()).await.expect("redis"));
    assert!(dedupe.mark_filtered(&first, &marker).await.expect("redis"));
    assert_eq!(dedupe.claim(&copy("issues").allowlisted()).await.expect("redis"), Claim::AlreadyDone, "recorded");
    assert_eq!(dedupe.claim(&copy("push")).await.expect("redis"), Claim::AlreadyDone, "no allowlist, no takeover");
    let redrive = dedupe.redrive_token("github", "f1").recording_type(Some("push"));
    assert_eq!(dedupe.claim(&redrive).await.expect("redis"), Claim::AlreadyDone, "a re-drive takes over dead only");

    // The genuine copy, allowlisted, claims over it; a retryable failure releases it: the outcome is still there.
    let genuine = acquired(dedupe.claim(&copy("push").allowlisted()).await.expect("redis"));
    dedupe.release(&genuine).await.expect("redis");
    assert_eq!(dedupe.claim(&copy("issues").allowlisted()).await.expect("redis"), Claim::AlreadyDone, "kept");
    // Its retry claims over it again and is processed: every later copy, of any type, is a duplicate.
    let retry = acquired(dedupe.claim(&copy("push").allowlisted()).await.expect("redis"));
    let done = redis_key::DoneMarker { processed_at_ms: 1, handling_ms: 1, topic: "t".into(), partition: 0, offset: 0 };
    assert!(dedupe.mark_done(&retry, &done).await.expect("redis"));
    for event_type in ["push", "issues", "pull_request"] {
        assert_eq!(dedupe.claim(&copy(event_type).allowlisted()).await.expect("redis"), Claim::AlreadyDone);
    }

    // Filtered again under a second type, the outcome records both; a third type dead-lettered keeps all three.
    let other = |event_type: &str| dedupe.token("github", "f2").recording_type(Some(event_type));
    let first = acquired(dedupe.claim(&other("issues").allowlisted()).await.expect("redis"));
    assert!(dedupe.mark_filtered(&first, &marker).await.expect("redis"));
    let second = acquired(dedupe.claim(&other("push").allowlisted()).await.expect("redis"));
    assert!(dedupe.mark_filtered(&second, &marker).await.expect("redis"));
    for event_type in ["issues", "push"] {
        assert_eq!(dedupe.claim(&other(event_type).allowlisted()).await.expect("redis"), Claim::AlreadyDone);
    }
    let third = acquired(dedupe.claim(&other("pull_request").allowlisted()).await.expect("redis"));
    dedupe.mark_dead(&third, "webhooks.dlq:0:9").await.expect("redis");
    for event_type in ["issues", "push", "pull_request"] {
        let claim = dedupe.claim(&other(event_type).allowlisted()).await.expect("redis");
        assert_eq!(claim, Claim::DeadLettered, "{event_type} was tried");
    }
}
