//! Missed-webhook reconciliation, end to end: the real gateway, consumer, Kafka and Redis, the reconciler's
//! indexer and runs, against local fakes of GitHub's and Paddle's APIs and the real `stripe-mock` behind TLS.
//! Each test asserts on what the providers were asked, what reached the topic and what the handler processed.

use std::{
    collections::HashSet,
    time::{Duration, SystemTime},
};

use bytes::Bytes;
use hookline_common::{
    config::{SaslMechanism, SecretRef},
    wire::{self, EventMeta, kafka::owned_headers},
};
use hookline_reconciler::{
    Mode, Outcome, Provider, ReconcileError, ReconcilerConfig, Report, RunRequest, SourceConfig,
};
use hookline_record::inbound::InboundRecord;
use hookline_tests::{
    Delivery, TEST_SECRET, TestStack, TestStackBuilder, body_event_id, eventually,
    kafka_tls::KafkaSecurity,
    prometheus::Scrape,
    provider_fakes::{FakeGithub, FakePaddle, GITHUB_HOOK, StripeMock, TlsFront},
    read,
    reconciler::{
        API_TOKEN, ReconcilerService, STRIPE_KEY, TestReconciler, admin_get, github_source, outcomes, paddle_source,
        push_body, temp_file,
    },
};
use http::Request;
use http_body_util::Full;
use rdkafka::Message;

#[tokio::test]
async fn github_outage_window_is_found_dry_run_first_then_redelivered_once_and_processed_once() {
    let stack = TestStack::builder().consumer().build().await;
    let gateway_url = format!("http://{}/webhooks/github", stack.gateway_addr);
    let github = FakeGithub::start(API_TOKEN, &gateway_url, TEST_SECRET, 2).await;
    let now = SystemTime::now();
    for n in 0..3 {
        let delivery = github.deliver(push_body(n), "push", now).await;
        assert_eq!(delivery.status_code, 202, "delivered before the outage");
    }
    // The outage: GitHub tried and failed, and never retries on its own.
    let dropped: Vec<u64> = (3..6).map(|n| github.drop_delivery(push_body(n), "push", now).id).collect();
    let reconciler = TestReconciler::start(&stack, vec![github_source(&github, API_TOKEN)]).await;

    let dry = reconciler.run("github", Mode::DryRun).await.expect("dry run");
    assert_eq!((dry.listed, dry.accepted), (6, 3), "{dry:?}");
    assert_eq!(outcomes(&dry), vec![Outcome::WouldRecover; 3]);
    assert!(github.redelivery_requests().is_empty(), "a dry run asks for nothing");
    assert!(github.calls().iter().any(|call| call.target.contains("cursor=v1_")), "the Link header was followed");

    let applied = reconciler.run("github", Mode::Apply).await.expect("apply");
    assert_eq!(outcomes(&applied), vec![Outcome::RedeliveryRequested; 3]);
    let requested: HashSet<u64> = github.redelivery_requests().into_iter().collect();
    assert_eq!(requested, dropped.iter().copied().collect(), "exactly the dropped deliveries were redelivered");

    let ids: Vec<String> = (0..6).map(|n| body_event_id(&push_body(n))).collect();
    eventually(Duration::from_secs(30), "all six events processed", || async {
        ids.iter().all(|id| stack.handler.count(id) == 1)
    })
    .await;

    // A later run finds nothing missing (the redeliveries are in the index) and asks for nothing more.
    let again = reconciler.run("github", Mode::Apply).await.expect("third run");
    assert_eq!((again.listed, again.accepted, again.missed.len()), (6, 6, 0), "{again:?}");
    assert_eq!(github.redelivery_requests().len(), 3, "nothing redelivered twice");

    // The original of a redelivered delivery arriving late is a duplicate of it.
    let late = Delivery { delivery_id: "late-original".to_owned(), ..Delivery::new(push_body(3)) };
    assert_eq!(stack.post_signed(&late, &late.signature(TEST_SECRET)).await.status, 202);
    eventually(Duration::from_secs(20), "the late original skipped as a duplicate", || async {
        stack.consumer_events("duplicate").await >= 1
    })
    .await;
    assert!(ids.iter().all(|id| stack.handler.count(id) == 1), "every event processed exactly once");
    let credentials: HashSet<Option<String>> = github.calls().into_iter().map(|call| call.authorization).collect();
    assert_eq!(credentials, HashSet::from([Some(format!("Bearer {API_TOKEN}"))]));
}

#[tokio::test]
async fn the_first_scheduled_run_is_a_dry_run_and_the_next_one_acts() {
    let stack = TestStack::builder().consumer().build().await;
    let gateway_url = format!("http://{}/webhooks/github", stack.gateway_addr);
    let github = FakeGithub::start(API_TOKEN, &gateway_url, TEST_SECRET, 100).await;
    // Five minutes ago: inside the default look-back, before now.
    let past = SystemTime::now() - Duration::from_secs(300);
    github.deliver(push_body(10), "push", past).await;
    let dropped = github.drop_delivery(push_body(11), "push", past);
    let source = github_source(&github, API_TOKEN);
    let reconciler = TestReconciler::start(&stack, vec![source.clone()]).await;

    let first = hookline_reconciler::scheduled_run(&reconciler.reconciler, &source).await.expect("first run");
    assert!(first.dry_run);
    assert_eq!(outcomes(&first), vec![Outcome::WouldRecover]);
    assert!(github.redelivery_requests().is_empty());

    let second = hookline_reconciler::scheduled_run(&reconciler.reconciler, &source).await.expect("second run");
    assert!(!second.dry_run);
    assert_eq!(outcomes(&second), vec![Outcome::RedeliveryRequested]);
    assert_eq!(github.redelivery_requests(), vec![dropped.id]);
    eventually(Duration::from_secs(20), "the redelivered event processed", || async {
        stack.handler.count(&body_event_id(&push_body(11))) == 1
    })
    .await;
}

#[tokio::test]
async fn paddle_failed_notifications_are_replayed_once_and_those_paddle_still_retries_are_left_to_it() {
    let secret_file = temp_file("paddle-secret", TEST_SECRET);
    let stack = TestStack::builder()
        .gateway_source(hookline_gateway::config::SourceConfig::new(
            "paddle",
            "paddle",
            vec![SecretRef::from_file("primary", secret_file)],
        ))
        .consumer()
        .build()
        .await;
    let gateway_url = format!("http://{}/webhooks/paddle", stack.gateway_addr);
    let paddle = FakePaddle::start(API_TOKEN, &gateway_url, TEST_SECRET, 2).await;
    let now = SystemTime::now();
    let delivered = [
        paddle.notify("transaction.completed", "delivered", now).await,
        paddle.notify("subscription.created", "delivered", now).await,
        paddle.notify("transaction.paid", "delivered", now).await,
    ];
    let failed = paddle.notify("transaction.completed", "failed", now).await;
    let retrying = paddle.notify("subscription.updated", "needs_retry", now).await;
    let reconciler = TestReconciler::start(&stack, vec![paddle_source(&paddle)]).await;

    let dry = reconciler.run("paddle", Mode::DryRun).await.expect("dry run");
    assert_eq!((dry.listed, dry.accepted), (5, 3), "{dry:?}");
    let by_id = |report: &Report, id: &str| report.missed.iter().find(|m| m.id == id).map(|m| m.outcome);
    assert_eq!(by_id(&dry, &failed.event_id), Some(Outcome::WouldRecover));
    assert_eq!(by_id(&dry, &retrying.event_id), Some(Outcome::ProviderRetrying));
    assert!(paddle.replay_requests().is_empty());
    assert!(paddle.calls().iter().any(|call| call.target.contains("after=ntf_")), "meta.pagination.next was followed");

    let applied = reconciler.run("paddle", Mode::Apply).await.expect("apply");
    assert_eq!(by_id(&applied, &failed.event_id), Some(Outcome::RedeliveryRequested));
    assert_eq!(by_id(&applied, &retrying.event_id), Some(Outcome::ProviderRetrying));
    assert_eq!(paddle.replay_requests(), vec![failed.id.clone()], "only the failed notification is replayed");
    eventually(Duration::from_secs(30), "the replayed event processed", || async {
        stack.handler.count(&failed.event_id) == 1
    })
    .await;

    let again = reconciler.run("paddle", Mode::Apply).await.expect("third run");
    assert_eq!(by_id(&again, &failed.event_id), None, "the replay is in the index: {again:?}");
    assert_eq!(paddle.replay_requests().len(), 1, "nothing replayed twice");
    for notification in delivered.iter().chain([&failed]) {
        assert_eq!(stack.handler.count(&notification.event_id), 1, "{}", notification.event_type);
    }
    assert_eq!(stack.handler.count(&retrying.event_id), 0, "left to Paddle's own retries");
}

/// A stack with a `stripe` gateway source and a consumer, the real `stripe-mock` behind a TLS front, and a
/// reconciler for it; all of it runs until the setup is dropped (the reconciler first).
struct StripeSetup {
    reconciler: TestReconciler,
    stack: TestStack,
    tls: TlsFront,
    _stripe_mock: StripeMock,
}

impl StripeSetup {
    async fn start(builder: TestStackBuilder) -> Self {
        let secret_file = temp_file("stripe-secret", TEST_SECRET);
        let stack = builder
            .gateway_source(hookline_gateway::config::SourceConfig::new(
                "stripe",
                "stripe",
                vec![SecretRef::from_file("primary", secret_file)],
            ))
            .consumer()
            .build()
            .await;
        let stripe_mock = StripeMock::start().await;
        let tls = TlsFront::start(stripe_mock.addr).await;
        let source = SourceConfig {
            api_url: Some(format!("https://127.0.0.1:{}", tls.addr.port())),
            allow_custom_api_url: true,
            ca_file: Some(temp_file("ca.pem", &tls.ca_pem)),
            settle_s: 0,
            ..SourceConfig::new(
                "stripe",
                Provider::Stripe,
                SecretRef::from_file("stripe-api", temp_file("key", STRIPE_KEY)),
            )
        };
        let reconciler = TestReconciler::start(&stack, vec![source]).await;
        Self { reconciler, stack, tls, _stripe_mock: stripe_mock }
    }
}

#[tokio::test]
async fn a_stripe_event_missed_is_fetched_over_tls_produced_once_and_its_late_webhook_is_a_duplicate() {
    let setup = StripeSetup::start(TestStack::builder()).await;
    let (stack, tls, reconciler) = (&setup.stack, &setup.tls, &setup.reconciler);
    // stripe-mock's fixture events were created in 2009: the window reaches back that far.
    let window = |mode| reconciler.run_window("stripe", mode, 1_000_000_000_000, wire::now_ms() + 60_000);

    let dry = window(Mode::DryRun).await.expect("dry run");
    assert!(dry.listed >= 1, "stripe-mock lists its fixture events: {dry:?}");
    assert!(outcomes(&dry).iter().all(|outcome| *outcome == Outcome::WouldRecover));
    assert!(stack.inbound_records().await.is_empty(), "a dry run produces nothing");

    let applied = window(Mode::Apply).await.expect("apply");
    assert_eq!(applied.count(Outcome::FetchedAndProduced), dry.missed.len(), "{applied:?}");
    assert!(tls.tls_connections() >= 1, "the API was reached over TLS");
    let records = stack.inbound_records().await;
    assert_eq!(records.len(), dry.missed.len());
    let record = &records[0];
    let inbound = read::inbound(record);
    let event_id = inbound.meta.event_id;
    assert!(dry.missed.iter().any(|missed| missed.id == event_id));
    assert_eq!(record.key(), Some(event_id.as_bytes()), "keyed by the provider's event id");
    assert_eq!(inbound.origin.as_deref(), Some(wire::origin::RECONCILED));
    assert_eq!(inbound.meta.secret_id, "api:stripe-api");
    let body = Bytes::copy_from_slice(record.payload().expect("body"));
    let fetched: serde_json::Value = serde_json::from_slice(&body).expect("the event object");
    assert_eq!(fetched["id"], event_id.as_str());
    eventually(Duration::from_secs(20), "the fetched event processed", || async {
        stack.handler.count(&event_id) == 1
    })
    .await;
    let processed =
        stack.handler.successes().into_iter().find(|event| event.meta.event_id == event_id).expect("processed");
    assert_eq!(processed.origin.as_deref(), Some(wire::origin::RECONCILED), "the handler sees the provenance");

    // Stripe delivers the same event late (its own retry, or a resend from the dashboard): a duplicate.
    let timestamp =
        i64::try_from(SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs())
            .unwrap_or(0);
    let request = Request::post(format!("http://{}/webhooks/stripe", stack.gateway_addr))
        .header("content-type", "application/json")
        .header("stripe-signature", hookline_signature::stripe::sign(TEST_SECRET.as_bytes(), &body, timestamp))
        .body(Full::new(body.clone()))
        .expect("request");
    assert_eq!(stack.send(request).await.status, 202);
    eventually(Duration::from_secs(20), "the late webhook skipped as a duplicate", || async {
        stack.consumer_events("duplicate").await >= 1
    })
    .await;
    assert_eq!(stack.handler.count(&event_id), 1, "processed once");

    // Nothing already accepted is fetched again.
    let again = window(Mode::Apply).await.expect("third run");
    assert!(again.missed.is_empty(), "{again:?}");
    assert_eq!(stack.inbound_records().await.len(), records.len() + 1, "only the late webhook was added");
}

/// Over SASL_SSL (the indexer's consumer and the reconciler's producer, like every other client): a record forged
/// into the inbound topic, claiming each missed Stripe event was accepted, proves nothing. The consumer
/// dead-letters it unprocessed, the indexer refuses it (counted), and the reconciler still fetches each event,
/// which is then processed once.
#[tokio::test]
async fn a_forged_record_does_not_hide_a_missed_event_from_a_reconciler_running_over_sasl_ssl() {
    let sasl_ssl = TestStack::builder().kafka_security(KafkaSecurity::sasl_ssl(SaslMechanism::ScramSha512));
    let setup = StripeSetup::start(sasl_ssl).await;
    let (stack, reconciler) = (&setup.stack, &setup.reconciler);
    assert!(stack.kafka.sasl.is_some(), "every client of the stack uses SASL_SSL");
    let window = |mode| reconciler.run_window("stripe", mode, 1_000_000_000_000, wire::now_ms() + 60_000);
    let dry = window(Mode::DryRun).await.expect("dry run");
    let missed: Vec<String> = dry.missed.iter().map(|missed| missed.id.clone()).collect();
    assert!(!missed.is_empty(), "stripe-mock lists its fixture events: {dry:?}");

    // Someone with write access to the topic, but not the record key, claims every missed event arrived.
    for id in &missed {
        let meta = EventMeta {
            source: "stripe".into(),
            event_id: id.clone(),
            event_type: Some("charge.succeeded".into()),
            received_at_ms: wire::now_ms(),
            content_type: Some("application/json".into()),
            secret_id: "primary".into(),
            ordering_key: None,
        };
        stack.produce_unsigned(0, id, hookline_common::wire::event_headers(&meta), br#"{"forged":true}"#).await;
    }
    let refused = || reconciler.metrics.record_auth.with_label_values(&["unsigned"]).get();
    eventually(Duration::from_secs(30), "the indexer refuses every forged record", || async {
        refused() == u64::try_from(missed.len()).unwrap_or(u64::MAX)
    })
    .await;
    eventually(Duration::from_secs(30), "the consumer dead-letters every forged record", || async {
        stack.consumer_metric(0, "hookline_consumer_record_auth_total", &[("outcome", "unsigned")]).await
            >= missed.len() as f64
    })
    .await;
    assert!(missed.iter().all(|id| stack.handler.count(id) == 0), "no forged record reached the handler");

    let applied = window(Mode::Apply).await.expect("apply");
    assert_eq!(applied.count(Outcome::FetchedAndProduced), missed.len(), "the forged records hid nothing: {applied:?}");
    for id in &missed {
        eventually(Duration::from_secs(30), "the fetched event processed", || async { stack.handler.count(id) == 1 })
            .await;
    }
    let again = window(Mode::Apply).await.expect("a later run");
    assert!(again.missed.is_empty(), "the fetched records, signed, are indexed: {again:?}");
    assert_eq!(reconciler.metrics.record_auth.with_label_values(&["authentic"]).get(), missed.len() as u64);
    assert!(missed.iter().all(|id| stack.handler.count(id) == 1), "each processed once");
}

#[tokio::test]
async fn missing_or_refused_credentials_and_long_rate_limits_give_clear_errors_and_change_nothing() {
    let stack = TestStack::builder().build().await;
    let gateway_url = format!("http://{}/webhooks/github", stack.gateway_addr);
    let github = FakeGithub::start(API_TOKEN, &gateway_url, TEST_SECRET, 100).await;
    github.drop_delivery(push_body(20), "push", SystemTime::now());

    // Missing: the config does not validate, and says which source and which variable.
    let missing = SourceConfig::new(
        "github",
        Provider::Github,
        SecretRef::from_env("github-api", "HOOKLINE_RECONCILER_TEST_TOKEN_THAT_IS_NOT_SET"),
    );
    let config = ReconcilerConfig {
        sources: vec![SourceConfig { hook: Some(GITHUB_HOOK.to_owned()), ..missing }],
        ..ReconcilerConfig::default()
    };
    let problem =
        hookline_reconciler::Loaded::build(config).expect_err("a missing credential is a config error").to_string();
    assert!(
        problem.contains("source `github`: credential: secret `github-api`: environment variable HOOKLINE_RECONCILER_TEST_TOKEN_THAT_IS_NOT_SET is not set"),
        "{problem}"
    );

    // Refused: the run fails with the provider's status and asks for nothing.
    let refused = TestReconciler::start(&stack, vec![github_source(&github, "revoked-token")]).await;
    let error = refused.run("github", Mode::Apply).await.expect_err("refused credential");
    assert!(matches!(error, ReconcileError::CredentialsRefused { status: 401, .. }), "{error:?}");
    assert!(error.to_string().contains("refused our credential (HTTP 401)"), "{error}");
    assert!(github.redelivery_requests().is_empty());

    // Stripe's own answer to a key it refuses, through stripe-mock.
    let stripe_mock = StripeMock::start().await;
    let stripe = SourceConfig {
        api_url: Some(format!("http://{}", stripe_mock.addr)),
        allow_custom_api_url: true,
        ..SourceConfig::new(
            "stripe",
            Provider::Stripe,
            SecretRef::from_file("stripe-api", temp_file("key", "not-a-key")),
        )
    };
    let stripe_refused = TestReconciler::start(&stack, vec![stripe]).await;
    let error = stripe_refused.run("stripe", Mode::Apply).await.expect_err("refused key");
    assert!(matches!(error, ReconcileError::CredentialsRefused { status: 401, .. }), "{error:?}");

    // A rate limit within max_retry_after_s is waited out, as told; a longer one fails the run and does nothing.
    let reconciler = TestReconciler::start(&stack, vec![github_source(&github, API_TOKEN)]).await;
    github.rate_limit_next(1, 1);
    let calls_before = github.calls().len();
    let report = reconciler.run("github", Mode::DryRun).await.expect("waited out the rate limit");
    assert_eq!(report.missed.len(), 1);
    let calls = github.calls();
    let (limited, retried) = (&calls[calls_before], &calls[calls_before + 1]);
    assert!(retried.at.duration_since(limited.at) >= Duration::from_secs(1), "Retry-After: 1 was honoured");

    github.rate_limit_next(1, 3_600);
    let error = reconciler.run("github", Mode::Apply).await.expect_err("an hour's wait is too long");
    assert!(matches!(error, ReconcileError::RateLimited { .. }), "{error:?}");
    assert!(github.redelivery_requests().is_empty(), "nothing was asked for");
}

#[tokio::test]
async fn a_redelivery_that_never_arrives_is_not_requested_again_until_an_operator_asks() {
    let stack = TestStack::builder().build().await;
    // The hole in the webhook path is still there: GitHub's deliveries, redeliveries included, reach nothing.
    let github = FakeGithub::start(API_TOKEN, "http://127.0.0.1:9/webhooks/github", TEST_SECRET, 100).await;
    let dropped = github.drop_delivery(push_body(30), "push", SystemTime::now());
    let reconciler = TestReconciler::start(&stack, vec![github_source(&github, API_TOKEN)]).await;

    let first = reconciler.run("github", Mode::Apply).await.expect("first run");
    assert_eq!(outcomes(&first), vec![Outcome::RedeliveryRequested]);
    let second = reconciler.run("github", Mode::Apply).await.expect("second run");
    assert_eq!(outcomes(&second), vec![Outcome::AlreadyRequested], "asked once, not again");
    assert_eq!(second.unrecovered(), 1, "still counted as unrecovered, which the alert shows");
    assert_eq!(github.redelivery_requests(), vec![dropped.id]);

    // Once the hole is fixed, the operator asks again explicitly (`run --apply --again-after-request`).
    let now = wire::now_ms();
    let request = RunRequest {
        source: "github".to_owned(),
        from_ms: now - 3_600_000,
        to_ms: now + 60_000,
        mode: Mode::Apply,
        again_after_request: true,
    };
    let again = reconciler.reconciler.run(&request).await.expect("operator's run");
    assert_eq!(outcomes(&again), vec![Outcome::RedeliveryRequested]);
    let requested = github.redelivery_requests();
    assert_eq!(requested.len(), 2);
    let guids: HashSet<String> = github
        .deliveries()
        .into_iter()
        .filter(|delivery| requested.contains(&delivery.id))
        .map(|delivery| delivery.guid)
        .collect();
    assert_eq!(guids, HashSet::from([dropped.guid]), "both requests were for the one missed event");
}

#[tokio::test]
async fn the_service_indexes_reports_ready_and_its_first_scheduled_run_is_a_dry_run_with_metrics() {
    let stack = TestStack::builder().build().await;
    let gateway_url = format!("http://{}/webhooks/github", stack.gateway_addr);
    let github = FakeGithub::start(API_TOKEN, &gateway_url, TEST_SECRET, 100).await;
    let past = SystemTime::now() - Duration::from_secs(300);
    github.deliver(push_body(40), "push", past).await;
    github.drop_delivery(push_body(41), "push", past);
    let service = ReconcilerService::start(&stack, vec![github_source(&github, API_TOKEN)]).await;
    let admin_addr = service.admin_addr;

    eventually(Duration::from_secs(30), "the first scheduled run reported as a dry run", || async {
        let (_, metrics) = admin_get(admin_addr, "/metrics").await;
        let runs = Scrape::parse(&metrics)
            .value("hookline_reconciler_runs_total", &[("outcome", "dry_run"), ("source", "github")]);
        runs == Some(1.0)
    })
    .await;
    let (status, metrics) = admin_get(admin_addr, "/metrics").await;
    assert_eq!(status, 200);
    let metrics = Scrape::parse(&metrics);
    for name in [
        "hookline_reconciler_missed_events_total",
        "hookline_reconciler_unrecovered_events",
        "hookline_reconciler_indexed_records_total",
    ] {
        assert_eq!(metrics.value(name, &[("source", "github")]), Some(1.0), "{name} in\n{metrics}");
    }
    assert_eq!(admin_get(admin_addr, "/readyz").await.0, 200);
    assert!(github.redelivery_requests().is_empty(), "the first run only reports");
    service.stop().await;
}

/// A measurement, not a test of behaviour beyond its one check: how long the indexer takes to index a topic, and
/// how long a dry run over thousands of GitHub deliveries takes (pages of 100). By hand, figures in
/// docs/benchmarks/dlq-and-reconciler.md:
/// `RECONCILER_MEASURE_RECORDS=50000 RECONCILER_MEASURE_DELIVERIES=5000 cargo test -p hookline-tests --test
/// reconciler -- --ignored --nocapture measure_`
#[tokio::test]
#[ignore = "a measurement, run by hand; figures in docs/benchmarks/dlq-and-reconciler.md"]
async fn measure_indexing_and_a_dry_run_over_thousands_of_github_deliveries() {
    let number = |var: &str, default: usize| std::env::var(var).ok().and_then(|n| n.parse().ok()).unwrap_or(default);
    let (n_records, n_deliveries) =
        (number("RECONCILER_MEASURE_RECORDS", 50_000), number("RECONCILER_MEASURE_DELIVERIES", 5_000));
    let stack = TestStack::builder().partitions(6).build().await;
    let github = FakeGithub::start(API_TOKEN, "http://127.0.0.1:9/webhooks/github", TEST_SECRET, 100).await;
    let now = SystemTime::now() - Duration::from_secs(60);
    let record = |n: usize, guid: &str, body: &[u8]| {
        let meta = wire::EventMeta {
            source: "github".to_owned(),
            event_id: body_event_id(body),
            event_type: Some("push".to_owned()),
            received_at_ms: wire::now_ms(),
            content_type: Some("application/json".to_owned()),
            secret_id: "primary".to_owned(),
            ordering_key: None,
        };
        let event_id = meta.event_id.clone();
        let record = InboundRecord { provider_event_id: Some(guid.to_owned()), ..InboundRecord::new(meta) };
        let written = record.encode(&stack.kafka.inbound_topic, Bytes::copy_from_slice(body));
        (i32::try_from(n % 6).unwrap_or(0), event_id, owned_headers(&written.headers), body.to_vec())
    };
    // GitHub lists n_deliveries; every other one reached hookline. The rest of the topic is other deliveries.
    let mut records = Vec::with_capacity(n_records);
    for n in 0..n_deliveries {
        let delivery = github.drop_delivery(push_body(n), "push", now);
        if n % 2 == 0 {
            records.push(record(n, &delivery.guid, &delivery.body));
        }
    }
    for n in records.len()..n_records {
        let body = push_body(1_000_000 + n);
        records.push(record(n, &uuid::Uuid::new_v4().to_string(), &body));
    }
    stack.produce_raw_batch(records).await;

    let source = SourceConfig { requests_per_s: Some(100.0), ..github_source(&github, API_TOKEN) };
    let started = std::time::Instant::now();
    let reconciler = TestReconciler::start(&stack, vec![source]).await;
    let index =
        hookline_reconciler::index::IndexCheck::new(&stack.kafka, &reconciler.reconciler.config().index_group_id, &[])
            .expect("index check");
    tokio::task::spawn_blocking(move || index.wait_caught_up(Duration::from_secs(600)))
        .await
        .expect("task")
        .expect("indexed");
    let indexed_in = started.elapsed();

    let started = std::time::Instant::now();
    let report = reconciler.run("github", Mode::DryRun).await.expect("dry run");
    let run_in = started.elapsed();
    assert_eq!((report.listed, report.missed.len()), (n_deliveries, n_deliveries / 2));
    let pages = github.calls().iter().filter(|call| call.target.contains("/deliveries")).count();
    println!(
        "indexer: {n_records} records in {:.2} s ({:.0} records/s); dry run: {n_deliveries} deliveries in {pages} \
         pages, {} missed, {:.2} s at requests_per_s = 100",
        indexed_in.as_secs_f64(),
        n_records as f64 / indexed_in.as_secs_f64(),
        report.missed.len(),
        run_in.as_secs_f64()
    );
}

#[tokio::test]
async fn the_reconcilers_index_ledger_and_lock_work_against_redis_cluster() {
    let prefix = format!("test:{}:reconcile", uuid::Uuid::new_v4().simple());
    let config = hookline_common::config::RedisConfig {
        url: hookline_tests::redis_cluster_urls(),
        cluster: true,
        key_prefix: prefix,
        ..hookline_common::config::RedisConfig::default()
    };
    let store = hookline_reconciler::store::Store::connect(&config).await.expect("connect to the cluster");
    // Ids that hash to different slots, in one call: one command per key on a cluster.
    let entries: Vec<(String, String, i64, u64)> =
        (0..50).map(|n| ("github".to_owned(), format!("guid-{n}"), 1_700_000_000_000, 600)).collect();
    store.index(&entries).await.expect("index");
    let ids: Vec<String> = (0..60).map(|n| format!("guid-{n}")).collect();
    let id_refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let accepted = store.accepted("github", &id_refs).await.expect("lookup");
    assert_eq!(accepted.iter().filter(|accepted| **accepted).count(), 50);
    assert!(accepted[..50].iter().all(|accepted| *accepted) && accepted[50..].iter().all(|accepted| !*accepted));

    assert!(store.note_missed("github", "guid-55", 1, 600).await.expect("note"), "first time found");
    assert!(!store.note_missed("github", "guid-55", 2, 600).await.expect("note"), "counted once");
    assert!(store.claim_action("github", "guid-55", 3, 600, false).await.expect("claim"));
    assert!(!store.claim_action("github", "guid-55", 4, 600, false).await.expect("claim"), "never twice");
    let lock = store.lock("github", Duration::from_secs(60)).await.expect("lock").expect("free");
    assert!(store.lock("github", Duration::from_secs(60)).await.expect("lock").is_none(), "one run at a time");
    store.unlock("github", &lock).await.expect("unlock");
    assert!(store.lock("github", Duration::from_secs(60)).await.expect("lock").is_some());
}

#[tokio::test]
async fn events_older_than_the_index_are_never_acted_on() {
    let stack = TestStack::builder().build().await;
    let gateway_url = format!("http://{}/webhooks/github", stack.gateway_addr);
    let github = FakeGithub::start(API_TOKEN, &gateway_url, TEST_SECRET, 100).await;
    // Delivered (and maybe processed) an hour before the reconciler existed, and since gone from the topic:
    // the index cannot know it, so it must not be redelivered.
    github.drop_delivery(push_body(50), "push", SystemTime::now() - Duration::from_secs(3_600));
    let reconciler = TestReconciler::start_with(&stack, vec![github_source(&github, API_TOKEN)], None).await;
    let now = wire::now_ms();
    let report = reconciler.run_window("github", Mode::Apply, now - 7_200_000, now + 60_000).await.expect("run");
    assert_eq!((report.before_index, report.listed, report.missed.len()), (1, 0, 0), "{report:?}");
    assert!(report.index_since_ms > now - 3_000_000, "coverage starts when the indexer first ran");
    assert!(github.redelivery_requests().is_empty());
}
