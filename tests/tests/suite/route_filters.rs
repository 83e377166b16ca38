//! Route filters against the real broker, Redis and consumers: two services read one stream, and `billing`'s
//! route skips bots' pushes. The bot's push is skipped by billing with its reason (the filtered marker, the
//! metrics, `lookup`, event search) and processed by the other service; a copy delivered again is a duplicate for
//! both; a body that is not JSON and a body without the field are processed, never poison; and `reprocess` for
//! billing runs the filtered event exactly once, although the run re-drives both of the provider's deliveries.

use hookline_common::time::format_rfc3339_millis;
use std::{sync::Arc, time::Duration};

use hookline_common::wire::{dedupe_layout::Outcome, now_ms, redis_key};
use hookline_consumer::config::{FilterConfig, HandlerConfig, RouteConfig};
use hookline_dlq_replayer::{
    ReplayerConfig,
    config::{LookupConfig, LookupService},
    events::SearchRequest,
    lookup::{DedupeState, Lookup, render_text},
    ops::{Replayer, ReprocessRequest},
};
use hookline_tests::{Delivery, TestHandler, TestStack, eventually, read};

const WAIT: Duration = Duration::from_secs(60);

/// Billing's one route: every github event, skipping a bot's push.
fn billing_route() -> RouteConfig {
    RouteConfig {
        source: "github".to_owned(),
        handler: HandlerConfig::default(),
        filters: vec![FilterConfig {
            name: "bot_push".to_owned(),
            skip_when: vec![r#"/sender/type == "Bot""#.to_owned()],
        }],
        ..RouteConfig::default()
    }
}

#[tokio::test]
async fn a_filtered_event_is_skipped_with_its_reason_for_one_service_processed_by_the_other_and_reprocessed_once() {
    let mut stack = TestStack::builder().consumer().build().await;
    let other = stack.consumer_config.service_name().to_owned();
    let billing = Arc::new(TestHandler::default());
    let mut billing_config = stack.service_config("billing");
    billing_config.routes = vec![billing_route()];
    let billing_group = billing_config.kafka.group_id.clone();
    let billing_index = stack.start_consumer_with(billing_config, billing.clone()).await;
    let since_ms = now_ms() - 1_000;

    let bot = Delivery::new(br#"{"sender":{"type":"Bot","login":"dependabot[bot]"},"ref":"refs/heads/deps"}"#.to_vec());
    let human = Delivery::new(br#"{"sender":{"type":"User","login":"ada"},"ref":"refs/heads/main"}"#.to_vec());
    let no_sender = Delivery::new(br#"{"ref":"refs/heads/tags"}"#.to_vec());
    let not_json = Delivery::new(b"payload=not-json".to_vec());
    for delivery in [&bot, &human, &no_sender, &not_json] {
        stack.post_accepted(delivery).await;
    }
    let everything_else = [&human, &no_sender, &not_json];
    eventually(WAIT, "the other service processed all four, billing all but the bot's", || async {
        [&bot, &human, &no_sender, &not_json].iter().all(|d| stack.handler.count(&d.delivery_id) == 1)
            && everything_else.iter().all(|d| billing.count(&d.delivery_id) == 1)
            && stack.consumer_metric(billing_index, "hookline_consumer_events_total", &[("outcome", "filtered")]).await
                == 1.0
    })
    .await;
    assert_eq!(billing.count(&bot.delivery_id), 0, "skipped by billing's filter");
    let filtered = stack
        .consumer_metric(
            billing_index,
            "hookline_consumer_filtered_total",
            &[("filter", "bot_push"), ("route", "github")],
        )
        .await;
    assert_eq!(filtered, 1.0, "counted with its route and filter");
    assert_eq!(stack.consumer_events("filtered").await, 1, "only billing filters");
    assert_eq!(stack.consumer_events("dead_lettered").await, 0, "a filter never makes poison");

    // Billing's buckets hold the filtered outcome: the reason (the record's position is not kept).
    let mut redis = redis::Client::open(stack.redis.url.as_str())
        .expect("redis url")
        .get_multiplexed_async_connection()
        .await
        .expect("redis");
    let outcome =
        hookline_tests::dedupe_outcome(&mut redis, &stack.redis.key_prefix, "billing", "github", &bot.delivery_id)
            .await;
    let Some((Outcome::Filtered { filter, .. }, ttl_ms)) = outcome else { panic!("not filtered: {outcome:?}") };
    assert_eq!(filter, "bot_push");
    assert!(ttl_ms > 3_600_000, "the window, not a lease: {ttl_ms}");

    // The provider delivers the bot's push again: a duplicate for both services, processed by neither.
    stack.post_accepted(&bot).await;
    eventually(WAIT, "both services skipped the copy as a duplicate", || async {
        stack.consumer_events("duplicate").await >= 2
    })
    .await;
    assert_eq!((stack.handler.count(&bot.delivery_id), billing.count(&bot.delivery_id)), (1, 0));

    // `lookup` says filtered, by which filter, and how to run it; the other service processed it.
    let config = ReplayerConfig {
        kafka: stack.kafka.clone(),
        lookup: LookupConfig {
            redis: Some(stack.redis.clone()),
            services: vec![
                LookupService { name: other.clone(), group_id: Some(stack.kafka.group_id.clone()) },
                LookupService { name: "billing".to_owned(), group_id: Some(billing_group) },
            ],
            ..LookupConfig::default()
        },
        ..ReplayerConfig::default()
    };
    let replayer = Replayer::new(config).expect("replayer");
    let lookup = Lookup::new(replayer.clone());
    let answer = lookup.lookup("github", &bot.delivery_id).await.expect("lookup");
    let state_of = |answer: &hookline_dlq_replayer::lookup::Answer, name: &str| {
        answer.services.iter().find(|s| s.service == name).map(|s| s.dedupe.clone()).expect("the service")
    };
    match state_of(&answer, "billing") {
        DedupeState::Filtered { filter, position, expires_in_ms, .. } => {
            assert_eq!(filter, "bot_push");
            assert_eq!(position, None, "the bucketed layout keeps no position (docs/dedupe.md)");
            assert!(expires_in_ms.is_some_and(|ms| ms > 0));
        }
        other => panic!("billing: not filtered: {other:?}"),
    }
    assert!(matches!(state_of(&answer, &other), DedupeState::Processed { .. }), "{answer:#?}");
    // The bucketed layout keeps no record position: lookup finds no accepted record from a filtered outcome.
    let text = render_text(&answer, false).join("\n");
    println!("{text}");
    assert!(text.contains("billing: filtered ") && text.contains("by `bot_push` (skipped, not processed)"), "{text}");
    assert!(text.contains(&format!("reprocess --service billing --event-id {}", bot.delivery_id)), "{text}");

    // Event search with the filter's own condition finds exactly the bot's push (both deliveries the gateway
    // accepted), filtered for billing and processed for the other service.
    let search = SearchRequest {
        source: "github".to_owned(),
        since: format_rfc3339_millis(since_ms),
        conditions: vec![r#"/sender/type == "Bot""#.to_owned()],
        ..SearchRequest::default()
    };
    let report = replayer.search_events(&search, |_| {}).await.expect("search");
    assert_eq!(report.matches.len(), 2, "{report:#?}");
    for found in &report.matches {
        assert_eq!(found.event_id.as_deref(), Some(bot.delivery_id.as_str()));
        let state = |name: &str| found.services.iter().find(|s| s.service == name).map(|s| s.dedupe.clone());
        assert!(matches!(state("billing"), Some(DedupeState::Filtered { .. })), "{found:?}");
        assert!(matches!(state(&other), Some(DedupeState::Processed { .. })), "{found:?}");
        let line = hookline_dlq_replayer::events::render::match_line(found);
        assert!(line.contains("billing filtered by bot_push"), "{line}");
    }
    assert_eq!(report.progress.not_json, 1, "the body that is not JSON matches no condition");

    // Re-processed for billing on an operator's word: the filter does not apply, and billing runs it once although
    // the run re-drives both of the provider's deliveries (two records, one run: the second is a duplicate of the
    // run's own key); the other service does not run it again.
    let duplicates = || async {
        stack.consumer_metric(billing_index, "hookline_consumer_events_total", &[("outcome", "duplicate")]).await
    };
    let duplicates_before = duplicates().await;
    let request = ReprocessRequest {
        service: "billing".to_owned(),
        event_ids: vec![bot.delivery_id.clone()],
        apply: true,
        by: "test".to_owned(),
        ..ReprocessRequest::default()
    };
    let report = replayer.reprocess(&request).await.expect("reprocess");
    assert_eq!(report.records.len(), 2, "the provider's two deliveries: {report:?}");
    let run_id = report.run_id.clone().expect("a run id");
    eventually(WAIT, "billing processed the filtered event, and skipped the run's second record", || async {
        billing.count(&bot.delivery_id) == 1 && duplicates().await > duplicates_before
    })
    .await;
    let redriven = stack
        .inbound_records()
        .await
        .into_iter()
        .filter(|r| read::inbound(r).reprocess_id.as_deref() == Some(run_id.as_str()))
        .count();
    assert_eq!(redriven, 2);
    assert_eq!(billing.count(&bot.delivery_id), 1, "once per run");
    assert_eq!(stack.handler.count(&bot.delivery_id), 1, "re-processing is for billing alone");

    // Billing's own key now says processed: a later copy from the provider is a duplicate, not filtered again.
    let answer = lookup.lookup("github", &bot.delivery_id).await.expect("lookup");
    assert!(matches!(state_of(&answer, "billing"), DedupeState::Processed { .. }), "{answer:#?}");
    stack.post_accepted(&bot).await;
    eventually(WAIT, "billing skipped the provider's third copy", || async {
        duplicates().await > duplicates_before + 1.0
    })
    .await;
    assert_eq!(billing.count(&bot.delivery_id), 1);
    assert_eq!(stack.consumer_events("filtered").await, 1, "filtered once, ever");
    stack.shutdown().await;
}

/// The filtered marker is a done marker to every dedupe script: a later claim (a provider's copy, a re-drive) finds
/// the event done, never a claim to wait on, and a re-processing run's done marker replaces it.
#[tokio::test]
async fn the_filtered_marker_is_done_to_every_dedupe_script() {
    use hookline_consumer::dedupe::{Claim, Dedupe};
    let redis = hookline_common::config::RedisConfig {
        url: hookline_tests::redis_url(),
        key_prefix: format!("test:{}", uuid::Uuid::new_v4().simple()),
        ..hookline_common::config::RedisConfig::default()
    };
    let dedupe = Dedupe::connect(&redis, "billing").await.expect("connect");
    let token = dedupe.token("github", "evt_1");
    assert!(matches!(dedupe.claim(&token).await.expect("claim"), Claim::Acquired(_)));
    let marker = redis_key::FilteredMarker {
        filter: "bot_push".to_owned(),
        filtered_at_ms: now_ms(),
        topic: "webhooks.inbound".to_owned(),
        partition: 1,
        offset: 9,
        types: Vec::new(),
    };
    assert!(dedupe.mark_filtered(&token, &marker).await.expect("filtered"), "our claim");
    assert!(dedupe.mark_filtered(&token, &marker).await.expect("again"), "a re-sent mark finds it done");
    assert_eq!(dedupe.claim(&dedupe.token("github", "evt_1")).await.expect("claim"), Claim::AlreadyDone);
    assert_eq!(dedupe.claim(&dedupe.redrive_token("github", "evt_1")).await.expect("claim"), Claim::AlreadyDone);
    let client = redis::Client::open(redis.url.as_str()).expect("client");
    let mut connection = client.get_multiplexed_async_connection().await.expect("connection");
    let stored = hookline_tests::dedupe_outcome(&mut connection, &redis.key_prefix, "billing", "github", "evt_1").await;
    assert!(matches!(&stored, Some((Outcome::Filtered { filter, .. }, _)) if *filter == marker.filter), "{stored:?}");

    // A re-processing run claims its own key, then marks the event's own key done over the filtered marker.
    let run = dedupe.reprocess_token("run-1", "github", "evt_1");
    assert!(matches!(dedupe.claim(&run).await.expect("claim"), Claim::Acquired(_)));
    let done = redis_key::DoneMarker {
        processed_at_ms: now_ms(),
        handling_ms: 3,
        topic: "webhooks.inbound".to_owned(),
        partition: 1,
        offset: 12,
    };
    assert!(dedupe.mark_done(&run, &done).await.expect("run done"));
    dedupe.mark_done(&dedupe.token("github", "evt_1"), &done).await.expect("own done");
    let stored = hookline_tests::dedupe_outcome(&mut connection, &redis.key_prefix, "billing", "github", "evt_1").await;
    assert!(matches!(stored, Some((Outcome::Processed { .. }, _))), "{stored:?}");
    assert_eq!(
        dedupe.claim(&dedupe.reprocess_token("run-1", "github", "evt_1")).await.expect("claim"),
        Claim::AlreadyDone
    );
}
