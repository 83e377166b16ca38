//! Registration checks (issue 39): the reconciler asks Stripe (the real `stripe-mock`), GitHub and Paddle (the
//! reconciliation tests' fakes) whether each source's `webhook_url` is registered, enabled, subscribed to the
//! expected event types and the endpoint reconciliation reads; every drift is reported, a provider that cannot be
//! asked is an error rather than drift, and nothing is changed at any provider.
//!
//! stripe-mock serves one fixture endpoint, always enabled (`https://example.com/my/webhook/endpoint`,
//! `charge.failed` and `charge.succeeded`), so Stripe's disabled case is the `status: disabled` parsing of the
//! GitHub and Paddle fakes' counterparts plus the unit tests of `registration::judge`.

use std::{sync::Arc, time::Duration};

use hookline_common::config::SecretRef;
use hookline_reconciler::{
    Provider, ReconcilerConfig, SourceConfig,
    metrics::Metrics,
    registration::{self, Check, RegistrationReport, SourceRegistration, Status, Verdict},
};
use hookline_tests::{
    TestStack, eventually,
    prometheus::Scrape,
    provider_fakes::{FakeGithub, FakePaddle, GithubHook, PADDLE_SETTING, PaddleSetting, StripeMock},
    reconciler::{API_TOKEN, ReconcilerService, STRIPE_KEY, admin_get, github_source, paddle_source, temp_file},
    record_auth::test_record_auth,
};
use prometheus::core::Collector;

const GITHUB_URL: &str = "https://hooks.example.com/webhooks/github";
const PADDLE_URL: &str = "https://hooks.example.com/webhooks/paddle";
/// stripe-mock's fixture endpoint.
const STRIPE_FIXTURE_URL: &str = "https://example.com/my/webhook/endpoint";

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|item| (*item).to_owned()).collect()
}

fn hook(id: u64, url: &str, active: bool, events: &[&str]) -> GithubHook {
    GithubHook { id, url: url.to_owned(), active, events: strings(events) }
}

fn setting(id: &str, url: &str, active: bool, traffic_source: &str, events: &[&str]) -> PaddleSetting {
    PaddleSetting {
        id: id.to_owned(),
        destination: url.to_owned(),
        active,
        traffic_source: traffic_source.to_owned(),
        subscribed_events: strings(events),
    }
}

fn github(fake: &FakeGithub, name: &str, hook_id: u64, url: &str, expected: &[&str]) -> SourceConfig {
    SourceConfig {
        name: name.to_owned(),
        hook: Some(format!("repos/acme/widgets/hooks/{hook_id}")),
        webhook_url: Some(url.to_owned()),
        webhook_event_types: strings(expected),
        ..github_source(fake, API_TOKEN)
    }
}

fn paddle(fake: &FakePaddle, name: &str, setting_id: &str, url: &str, expected: &[&str]) -> SourceConfig {
    SourceConfig {
        name: name.to_owned(),
        notification_setting_id: Some(setting_id.to_owned()),
        webhook_url: Some(url.to_owned()),
        webhook_event_types: strings(expected),
        ..paddle_source(fake)
    }
}

fn stripe(mock: &StripeMock, name: &str, url: &str) -> SourceConfig {
    SourceConfig {
        api_url: Some(format!("http://{}", mock.addr)),
        allow_custom_api_url: true,
        webhook_url: Some(url.to_owned()),
        ..SourceConfig::new(name, Provider::Stripe, SecretRef::from_file("stripe-api", temp_file("key", STRIPE_KEY)))
    }
}

/// Checks `sources` (all, or `only`) the way `hookline-reconciler registrations` does.
async fn check(
    sources: Vec<SourceConfig>,
    only: Option<&str>,
) -> (RegistrationReport, Arc<Metrics>, prometheus::Registry) {
    let mut config = ReconcilerConfig { sources, ..ReconcilerConfig::default() };
    config.kafka.record_auth = test_record_auth();
    let loaded = hookline_reconciler::Loaded::build(config).expect("valid reconciler config");
    let registry = prometheus::Registry::new();
    let metrics = Arc::new(Metrics::register(&registry).expect("metrics"));
    let providers = hookline_reconciler::provider::clients(&loaded, &metrics).expect("clients");
    let report = registration::check_all(&loaded.config.sources, &providers, only, &metrics).await.expect("checked");
    (report, metrics, registry)
}

fn source<'a>(report: &'a RegistrationReport, name: &str) -> &'a SourceRegistration {
    report.sources.iter().find(|source| source.source == name).unwrap_or_else(|| panic!("{name} not in {report:?}"))
}

fn verdict(report: &RegistrationReport, name: &str, check: Check) -> Verdict {
    source(report, name).checks.iter().find(|result| result.check == check).map(|result| result.verdict).expect("check")
}

fn detail(report: &RegistrationReport, name: &str, check: Check) -> String {
    source(report, name).checks.iter().find(|result| result.check == check).map(|r| r.detail.clone()).expect("check")
}

#[tokio::test]
async fn registration_drift_a_missing_url_a_disabled_webhook_and_an_unsubscribed_type_are_each_reported_and_nothing_changes()
 {
    // GitHub: pages of two hooks, so the hooks list's `Link` is followed.
    let github_fake = FakeGithub::start(API_TOKEN, "http://127.0.0.1:9/webhooks/github", "unused", 2).await;
    let hooks = vec![
        hook(1, GITHUB_URL, true, &["push", "pull_request"]),
        hook(2, "https://hooks.example.com/webhooks/github-disabled", false, &["push"]),
        hook(3, "https://hooks.example.com/webhooks/github-push-only", true, &["push"]),
        hook(4, "https://ci.example.com/hook", true, &["*"]),
        hook(5, "https://hooks.example.com/webhooks/github-elsewhere", true, &["*"]),
    ];
    github_fake.set_hooks(hooks.clone());
    // Paddle: pages of two destinations, through `meta.pagination.next`.
    let paddle_fake = FakePaddle::start(API_TOKEN, "http://127.0.0.1:9/webhooks/paddle", "unused", 2).await;
    let settings = vec![
        setting(PADDLE_SETTING, PADDLE_URL, true, "platform", &["transaction.completed", "subscription.created"]),
        setting("ntfset_02", "https://hooks.example.com/webhooks/paddle-disabled", false, "platform", &["*"]),
        setting(
            "ntfset_03",
            "https://hooks.example.com/webhooks/paddle-one-type",
            true,
            "all",
            &["transaction.completed"],
        ),
        setting("ntfset_04", "https://hooks.example.com/webhooks/paddle-simulation", true, "simulation", &[]),
    ];
    paddle_fake.set_settings(settings.clone());
    let stripe_mock = StripeMock::start().await;

    let sources = vec![
        github(&github_fake, "github", 1, GITHUB_URL, &["push", "pull_request"]),
        github(&github_fake, "github-disabled", 2, "https://hooks.example.com/webhooks/github-disabled", &[]),
        github(
            &github_fake,
            "github-push-only",
            3,
            "https://hooks.example.com/webhooks/github-push-only",
            &["push", "issues"],
        ),
        github(&github_fake, "github-missing", 1, "https://hooks.example.com/webhooks/github-gone", &["push"]),
        // Registered, but reconciliation reads hook 1's deliveries: this URL's missed events would never be found.
        github(&github_fake, "github-elsewhere", 1, "https://hooks.example.com/webhooks/github-elsewhere", &[]),
        paddle(&paddle_fake, "paddle", PADDLE_SETTING, PADDLE_URL, &["transaction.completed"]),
        paddle(&paddle_fake, "paddle-disabled", "ntfset_02", "https://hooks.example.com/webhooks/paddle-disabled", &[]),
        paddle(
            &paddle_fake,
            "paddle-one-type",
            "ntfset_03",
            "https://hooks.example.com/webhooks/paddle-one-type",
            &["transaction.completed", "subscription.canceled"],
        ),
        paddle(
            &paddle_fake,
            "paddle-simulation",
            "ntfset_04",
            "https://hooks.example.com/webhooks/paddle-simulation",
            &[],
        ),
        paddle(&paddle_fake, "paddle-missing", PADDLE_SETTING, "https://hooks.example.com/webhooks/paddle-gone", &[]),
        // The expected types default to the Stripe source's `event_types` (the endpoint's, as reconciliation reads).
        SourceConfig {
            event_types: strings(&["charge.succeeded"]),
            ..stripe(&stripe_mock, "stripe", STRIPE_FIXTURE_URL)
        },
        SourceConfig {
            webhook_event_types: strings(&["charge.succeeded", "invoice.paid"]),
            ..stripe(&stripe_mock, "stripe-one-type", STRIPE_FIXTURE_URL)
        },
        stripe(&stripe_mock, "stripe-missing", "https://hooks.example.com/webhooks/stripe"),
        // Not checked: no webhook_url.
        SourceConfig { name: "github-unchecked".to_owned(), ..github_source(&github_fake, API_TOKEN) },
    ];
    let (report, metrics, _registry) = check(sources, None).await;

    // As expected.
    for name in ["github", "paddle", "stripe"] {
        assert_eq!(source(&report, name).status, Status::Ok, "{:?}", source(&report, name));
    }
    assert_eq!(verdict(&report, "github", Check::ReconciledEndpoint), Verdict::Ok);
    assert_eq!(verdict(&report, "stripe", Check::EventTypes), Verdict::Ok, "from event_types");
    assert_eq!(verdict(&report, "stripe", Check::ReconciledEndpoint), Verdict::NotJudged);
    // A URL missing.
    for name in ["github-missing", "paddle-missing", "stripe-missing"] {
        assert_eq!(source(&report, name).status, Status::Drift);
        assert_eq!(verdict(&report, name, Check::Registered), Verdict::Drift, "{name}");
        assert_eq!(verdict(&report, name, Check::Enabled), Verdict::NotJudged, "{name}");
    }
    assert!(detail(&report, "github-missing", Check::Registered).contains("among the 5 registered"), "every page read");
    assert!(detail(&report, "paddle-missing", Check::Registered).contains("among the 4 registered"));
    // A webhook disabled (and a Paddle destination that only receives simulated events).
    for name in ["github-disabled", "paddle-disabled", "paddle-simulation"] {
        assert_eq!(verdict(&report, name, Check::Registered), Verdict::Ok, "{name}");
        assert_eq!(verdict(&report, name, Check::Enabled), Verdict::Drift, "{name}");
    }
    assert!(detail(&report, "github-disabled", Check::Enabled).contains("2 (inactive)"));
    assert!(detail(&report, "paddle-simulation", Check::Enabled).contains("ntfset_04 (simulation only)"));
    // An event type not subscribed.
    for (name, missing) in [
        ("github-push-only", "issues"),
        ("paddle-one-type", "subscription.canceled"),
        ("stripe-one-type", "invoice.paid"),
    ] {
        assert_eq!(verdict(&report, name, Check::EventTypes), Verdict::Drift, "{name}");
        assert_eq!(source(&report, name).missing_event_types, vec![missing.to_owned()], "{name}");
    }
    // Registered at another hook than the one reconciliation reads.
    assert_eq!(verdict(&report, "github-elsewhere", Check::ReconciledEndpoint), Verdict::Drift);
    assert_eq!(report.not_checked, vec!["github-unchecked".to_owned()]);
    assert_eq!(report.exit_status(), 2, "drift found");

    // The metric: 1 per check that held, 0 per drift, no series for a check not judged.
    let gauge = |name: &str, check: Check| {
        metrics.registration_ok.get_metric_with_label_values(&[name, check.name()]).map(|gauge| gauge.get()).ok()
    };
    assert_eq!(gauge("github", Check::EventTypes), Some(1));
    assert_eq!(gauge("github-missing", Check::Registered), Some(0));
    assert_eq!(gauge("paddle-disabled", Check::Enabled), Some(0));
    assert_eq!(gauge("stripe-one-type", Check::EventTypes), Some(0));
    let series = metrics.registration_ok.collect()[0].get_metric().len();
    let judged: usize = report
        .sources
        .iter()
        .map(|source| source.checks.iter().filter(|check| check.verdict != Verdict::NotJudged).count())
        .sum();
    assert_eq!(series, judged, "a check not judged has no series");
    assert!(metrics.registration_last_check.with_label_values(&["stripe"]).get() > 1.7e9);
    assert_eq!(metrics.registration_checks.with_label_values(&["github-missing", "drift"]).get(), 1);

    // The JSON report names each drift.
    let json: serde_json::Value = serde_json::to_value(&report).expect("json");
    let missing = json["sources"].as_array().and_then(|sources| {
        sources
            .iter()
            .find(|source| source["source"] == "paddle-one-type")
            .map(|source| source["missing_event_types"].clone())
    });
    assert_eq!(missing, Some(serde_json::json!(["subscription.canceled"])));

    // Nothing was changed at any provider: only GETs of the registration lists, and the fakes' state is as it was.
    for call in github_fake.calls().iter().chain(paddle_fake.calls().iter()) {
        assert_eq!(call.method, "GET", "{call:?}");
        assert!(
            call.target.starts_with("/repos/acme/widgets/hooks?") || call.target.starts_with("/notification-settings?"),
            "{call:?}"
        );
    }
    assert!(github_fake.calls().iter().any(|call| call.target.contains("page=3")), "GitHub's Link was followed");
    assert!(paddle_fake.calls().iter().any(|call| call.target.contains("after=")), "Paddle's next was followed");
    assert_eq!(github_fake.hooks(), hooks);
    assert_eq!(paddle_fake.settings(), settings);
    assert!(github_fake.redelivery_requests().is_empty() && paddle_fake.replay_requests().is_empty());
}

#[tokio::test]
async fn a_provider_that_refuses_the_credential_is_an_error_not_drift() {
    let github_fake = FakeGithub::start(API_TOKEN, "http://127.0.0.1:9/webhooks/github", "unused", 100).await;
    github_fake.set_hooks(vec![hook(1, GITHUB_URL, true, &["*"])]);
    let revoked =
        SourceConfig { webhook_url: Some(GITHUB_URL.to_owned()), ..github_source(&github_fake, "revoked-token") };
    let (report, metrics, _registry) = check(vec![revoked], Some("github")).await;
    let checked = source(&report, "github");
    assert_eq!(checked.status, Status::Error);
    assert!(
        checked.error.as_deref().is_some_and(|error| error.contains("refused our credential (HTTP 401)")),
        "{checked:?}"
    );
    assert!(checked.checks.is_empty());
    assert_eq!(report.exit_status(), 1);
    assert_eq!(metrics.registration_checks.with_label_values(&["github", "error"]).get(), 1);
    assert!(metrics.registration_ok.collect()[0].get_metric().is_empty(), "no verdict from an unanswered check");
    assert_eq!(metrics.registration_last_check.with_label_values(&["github"]).get(), 0.0);
}

#[tokio::test]
async fn the_service_checks_registrations_on_its_own_and_exports_the_verdicts() {
    let stack = TestStack::builder().build().await;
    let github_fake = FakeGithub::start(API_TOKEN, "http://127.0.0.1:9/webhooks/github", "unused", 100).await;
    github_fake.set_hooks(vec![hook(1, GITHUB_URL, true, &["push"])]);
    let source = SourceConfig {
        webhook_url: Some(GITHUB_URL.to_owned()),
        webhook_event_types: strings(&["push", "issues"]),
        ..github_source(&github_fake, API_TOKEN)
    };
    let service = ReconcilerService::start(&stack, vec![source]).await;
    let admin_addr = service.admin_addr;

    eventually(Duration::from_secs(30), "the first registration check exported", || async {
        let (_, metrics) = admin_get(admin_addr, "/metrics").await;
        let check = &[("check", "event_types"), ("source", "github")];
        Scrape::parse(&metrics).value("hookline_reconciler_registration_ok", check) == Some(0.0)
    })
    .await;
    let (_, metrics) = admin_get(admin_addr, "/metrics").await;
    let metrics = Scrape::parse(&metrics);
    for (name, labels) in [
        ("hookline_reconciler_registration_ok", &[("check", "registered"), ("source", "github")][..]),
        ("hookline_reconciler_registration_ok", &[("check", "enabled"), ("source", "github")]),
        ("hookline_reconciler_registration_ok", &[("check", "reconciled_endpoint"), ("source", "github")]),
        ("hookline_reconciler_registration_checks_total", &[("outcome", "drift"), ("source", "github")]),
    ] {
        assert_eq!(metrics.value(name, labels), Some(1.0), "{name} {labels:?} in\n{metrics}");
    }
    let last_check = &[("source", "github")];
    assert!(metrics.value("hookline_reconciler_registration_last_check_timestamp_seconds", last_check).is_some());
    service.stop().await;
    let hooks_lists =
        github_fake.calls().iter().filter(|call| call.target.starts_with("/repos/acme/widgets/hooks?")).count();
    assert_eq!(hooks_lists, 1, "one check per registration_interval_s");
    assert!(github_fake.calls().iter().all(|call| call.method == "GET"), "nothing changed at the provider");
}
