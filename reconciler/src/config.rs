//! The reconciler's configuration: defaults, then an optional TOML file, then the shared environment overrides,
//! then [`ReconcilerConfig::validate`], which reports every problem at once (a credential that cannot be read
//! included) before anything is bound or called.

use std::{path::Path, time::Duration};

use hookline_common::{
    config::{self, ConfigError, KafkaConfig, Problems, RedisConfig, SecretRef, env},
    http_client,
};
use hookline_signature::FieldSource;
use serde::{Deserialize, Serialize};

const DAY_S: u64 = 24 * 3600;

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReconcilerConfig {
    /// Admin listener of `serve`: `/livez`, `/readyz`, `/metrics`.
    pub admin_addr: String,
    /// `inbound_topic` is what the indexer reads and where a fetched (Stripe) event is produced.
    pub kafka: KafkaConfig,
    /// Consumer group of the indexer, which records every accepted event of a reconciled source.
    pub index_group_id: String,
    /// `url`, `cluster` and `response_timeout_ms` as for the consumer; `key_prefix` prefixes the index, the
    /// action ledger and the run locks (default `hookline:reconcile`, apart from the consumer's dedupe keys).
    pub redis: RedisConfig,
    /// How often `serve` reconciles each source.
    pub interval_s: u64,
    /// How often `serve` asks each provider whether a source's `webhook_url` is still registered, enabled and
    /// subscribed ([`crate::registration`]); sources without a `webhook_url` are not asked.
    pub registration_interval_s: u64,
    /// How long a run waits for the indexer to have indexed every record the inbound topic held once the
    /// provider's list was read; past it the run fails and does nothing.
    pub index_catch_up_timeout_ms: u64,
    /// How long a run may hold its source's lock (a crashed run's lock ends by itself after this).
    pub run_lease_s: u64,
    /// RFC 3339 time from which the index may be trusted although the indexer started later: everything the
    /// reconciled sources had accepted since then was still in the topic when the indexer first read it (the
    /// sources are newer than that, or the topic's retention reached that far). Without it, coverage starts at
    /// the indexer's first start or the oldest record it indexed, whichever is earlier, and older events are
    /// never acted on (they could have been accepted and processed long ago).
    pub index_complete_since: Option<String>,
    /// Traces (on when `OTEL_EXPORTER_OTLP_ENDPOINT` is set; see docs/operations.md, "Traces").
    pub telemetry: hookline_common::telemetry::traces::TelemetryConfig,
    pub sources: Vec<SourceConfig>,
}

impl Default for ReconcilerConfig {
    fn default() -> Self {
        Self {
            admin_addr: "127.0.0.1:9093".to_owned(),
            kafka: KafkaConfig::default(),
            index_group_id: "hookline-reconciler-index".to_owned(),
            redis: RedisConfig { key_prefix: "hookline:reconcile".to_owned(), ..RedisConfig::default() },
            interval_s: 3600,
            registration_interval_s: 900,
            index_catch_up_timeout_ms: 60_000,
            run_lease_s: 900,
            index_complete_since: None,
            telemetry: Default::default(),
            sources: Vec::new(),
        }
    }
}

/// A provider whose event log the reconciler reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Provider {
    /// `GET /v1/events`; no redelivery call, so a missed event is fetched and produced.
    Stripe,
    /// A repository's or organization's webhook deliveries; a missed one is redelivered by GitHub.
    Github,
    /// Paddle Billing's notifications; a missed one is replayed by Paddle.
    Paddle,
}

impl Provider {
    pub fn name(self) -> &'static str {
        match self {
            Self::Stripe => "stripe",
            Self::Github => "github",
            Self::Paddle => "paddle",
        }
    }

    /// How far back the provider's log reaches (and, for GitHub, how far back it can redeliver).
    pub fn window(self) -> Duration {
        Duration::from_secs(match self {
            Self::Stripe => 30 * DAY_S,
            Self::Github => 3 * DAY_S,
            Self::Paddle => 90 * DAY_S,
        })
    }

    /// The hosts of the provider's own API: the only ones a credential goes to unless `allow_custom_api_url`.
    pub fn official_api_hosts(self) -> &'static [&'static str] {
        match self {
            Self::Stripe => &["api.stripe.com"],
            Self::Github => &["api.github.com"],
            Self::Paddle => &["api.paddle.com", "sandbox-api.paddle.com"],
        }
    }

    pub fn default_api_url(self) -> &'static str {
        match self {
            Self::Stripe => "https://api.stripe.com",
            Self::Github => "https://api.github.com",
            Self::Paddle => "https://api.paddle.com",
        }
    }

    /// Our default pace, well below each provider's documented limit (Stripe 100 read requests/s in live mode,
    /// GitHub 5,000 requests/h per token, Paddle 240 requests/min per IP).
    pub fn default_requests_per_s(self) -> f64 {
        match self {
            Self::Stripe => 20.0,
            Self::Github => 1.0,
            Self::Paddle => 2.0,
        }
    }
}

/// One reconciled source: the gateway's source name and where its provider keeps the log.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    /// The gateway source whose events these are (`POST /webhooks/<name>`): index entries and produced records
    /// carry it.
    pub name: String,
    pub provider: Provider,
    /// The provider's API base URL (default: its public API). `https://` in production; `http://` is accepted
    /// only for loopback. Printed without a password it may carry.
    #[serde(default, serialize_with = "config::redact::optional_url_password")]
    pub api_url: Option<String>,
    /// Allow an `api_url` on a host other than the provider's own API (a test double, GitHub Enterprise Server, a
    /// proxy you run): the credential is sent there. Off by default, so a typo or a tampered config cannot hand
    /// the provider's key to someone else.
    #[serde(default)]
    pub allow_custom_api_url: bool,
    /// The API key or token (Stripe: a restricted key with read access to events; GitHub: a token that can read
    /// and redeliver the hook's deliveries; Paddle: an API key with `notification.read` and `notification.write`).
    /// With `webhook_url`, it must also read the webhook registrations (Stripe: webhook endpoints; GitHub: the
    /// "Webhooks" permission, read; Paddle: `notification_setting.read`).
    pub credential: SecretRef,
    /// A PEM file of further CA certificates to trust for the API (a private CA or a proxy's).
    #[serde(default)]
    pub ca_file: Option<String>,
    /// How far back a scheduled run looks; default (and maximum) the provider's window.
    #[serde(default)]
    pub lookback_s: Option<u64>,
    /// Events younger than this are left alone: the webhook may still be on its way, or the provider still
    /// retrying it.
    #[serde(default = "default_settle_s")]
    pub settle_s: u64,
    /// API requests per second, at most (default: [`Provider::default_requests_per_s`]).
    #[serde(default)]
    pub requests_per_s: Option<f64>,
    /// The longest `Retry-After` (or rate-limit reset) a run waits for; a longer one fails the run, which the
    /// next scheduled run repeats.
    #[serde(default = "default_max_retry_after_s")]
    pub max_retry_after_s: u64,
    /// How long an accepted id is remembered (default: the provider's window plus 2 days).
    #[serde(default)]
    pub index_ttl_s: Option<u64>,
    /// The gateway source's topic, when it has its own (default `kafka.inbound_topic`): a fetched event is
    /// produced there, and the indexer reads it too.
    #[serde(default)]
    pub topic: Option<String>,
    /// The gateway source's `ordering_key`, if it has one, so a fetched event is keyed like its webhook.
    #[serde(default)]
    pub ordering_key: Option<FieldSource>,
    /// Scheduled runs of `serve` act on what they find (after the source's first run, which is always a dry
    /// run). `false`: report only.
    #[serde(default = "default_true")]
    pub apply: bool,
    /// GitHub: the hook, as the API path `repos/<owner>/<repo>/hooks/<id>` or `orgs/<org>/hooks/<id>`.
    #[serde(default)]
    pub hook: Option<String>,
    /// Paddle: the notification destination (`ntfset_...`) of this source's endpoint.
    #[serde(default)]
    pub notification_setting_id: Option<String>,
    /// Stripe: the event types the endpoint is subscribed to (empty: every type). Events of other types were
    /// never sent to us and must not be produced.
    #[serde(default)]
    pub event_types: Vec<String>,
    /// Stripe: the `Stripe-Version` to fetch events in: the endpoint's API version, so a fetched event has the
    /// shape its webhook would have had (default: the account's).
    #[serde(default)]
    pub api_version: Option<String>,
    /// The URL the provider sends this source's webhooks to: the gateway's public URL for the source
    /// (`https://hooks.example.com/webhooks/<name>`). When set, `registrations` and `serve` check that the
    /// provider still has it registered, enabled and subscribed to `webhook_event_types`.
    #[serde(default)]
    pub webhook_url: Option<String>,
    /// The event types the consumers route for this source, which the registration at `webhook_url` must
    /// deliver (default: Stripe's `event_types`; otherwise none, and only the URL and its state are checked).
    #[serde(default)]
    pub webhook_event_types: Vec<String>,
}

fn default_settle_s() -> u64 {
    900
}

fn default_max_retry_after_s() -> u64 {
    300
}

fn default_true() -> bool {
    true
}

impl SourceConfig {
    /// A source with the defaults, for tests and examples.
    pub fn new(name: &str, provider: Provider, credential: SecretRef) -> Self {
        Self {
            name: name.to_owned(),
            provider,
            api_url: None,
            allow_custom_api_url: false,
            credential,
            ca_file: None,
            lookback_s: None,
            settle_s: default_settle_s(),
            requests_per_s: None,
            max_retry_after_s: default_max_retry_after_s(),
            index_ttl_s: None,
            topic: None,
            ordering_key: None,
            apply: true,
            hook: None,
            notification_setting_id: None,
            event_types: Vec::new(),
            api_version: None,
            webhook_url: None,
            webhook_event_types: Vec::new(),
        }
    }

    /// The event types the registration at `webhook_url` must deliver: `webhook_event_types`, or for Stripe
    /// the endpoint's `event_types` the reconciler already reads.
    pub fn expected_event_types(&self) -> &[String] {
        if self.webhook_event_types.is_empty() && self.provider == Provider::Stripe {
            &self.event_types
        } else {
            &self.webhook_event_types
        }
    }

    pub fn api_url(&self) -> &str {
        self.api_url.as_deref().unwrap_or(self.provider.default_api_url()).trim_end_matches('/')
    }

    pub fn lookback(&self) -> Duration {
        self.lookback_s.map_or(self.provider.window(), Duration::from_secs)
    }

    pub fn index_ttl_s(&self) -> u64 {
        self.index_ttl_s.unwrap_or(self.provider.window().as_secs() + 2 * DAY_S)
    }

    pub fn requests_per_s(&self) -> f64 {
        self.requests_per_s.unwrap_or(self.provider.default_requests_per_s())
    }

    fn validate(&self, problems: &mut Problems) {
        let name = &self.name;
        problems.check(!name.is_empty(), "sources[].name is empty");
        match http_client::check_url(self.api_url()) {
            Ok(uri) => {
                let loopback = matches!(uri.host(), Some("127.0.0.1" | "localhost" | "[::1]" | "::1"));
                problems.check(
                    uri.scheme_str() == Some("https") || loopback,
                    format!("source `{name}`: api_url must be https:// (http:// only on loopback)"),
                );
                let host = uri.host().unwrap_or("");
                let official = self.provider.official_api_hosts();
                problems.check(
                    official.contains(&host) || self.allow_custom_api_url,
                    format!(
                        "source `{name}`: api_url host `{host}` is not the provider's API ({}): the credential would \
                         go there; set allow_custom_api_url = true for a test double, GitHub Enterprise Server or a \
                         proxy you run",
                        official.join(", ")
                    ),
                );
            }
            Err(problem) => problems.push(format!("source `{name}`: api_url {problem}")),
        }
        if let Some(path) = &self.ca_file {
            problems.check(Path::new(path).is_file(), format!("source `{name}`: ca_file {path} is not a file"));
        }
        let window = self.provider.window().as_secs();
        if let Some(lookback) = self.lookback_s {
            problems.check(
                (60..=window).contains(&lookback),
                format!(
                    "source `{name}`: lookback_s must be between 60 and {window} ({}'s window)",
                    self.provider.name()
                ),
            );
        }
        problems.check(
            self.index_ttl_s() >= self.lookback().as_secs(),
            format!("source `{name}`: index_ttl_s must cover lookback_s, or accepted events would look missed"),
        );
        let rate = self.requests_per_s();
        problems.check(rate > 0.0 && rate <= 100.0, format!("source `{name}`: requests_per_s must be in (0, 100]"));
        if let Some(key) = &self.ordering_key {
            if let Some(problem) = key.problem() {
                problems.push(format!("source `{name}`: ordering_key: {problem}"));
            }
        }
        match self.provider {
            Provider::Github => match &self.hook {
                Some(hook) if is_hook_path(hook) => {}
                _ => problems.push(format!(
                    "source `{name}`: hook must be `repos/<owner>/<repo>/hooks/<id>` or `orgs/<org>/hooks/<id>`"
                )),
            },
            Provider::Paddle => problems.check(
                self.notification_setting_id.as_deref().is_some_and(|id| id.starts_with("ntfset_")),
                format!("source `{name}`: notification_setting_id (`ntfset_...`) is required for Paddle"),
            ),
            Provider::Stripe => {}
        }
        if let Some(url) = &self.webhook_url {
            let parsed = url.parse::<http::Uri>().ok();
            let absolute = parsed.as_ref().is_some_and(|uri| {
                matches!(uri.scheme_str(), Some("https" | "http")) && uri.host().is_some_and(|host| !host.is_empty())
            });
            problems.check(
                absolute,
                format!("source `{name}`: webhook_url must be an absolute http(s) URL (the gateway's public URL)"),
            );
        }
        problems.check(
            self.webhook_event_types.is_empty() || self.webhook_url.is_some(),
            format!("source `{name}`: webhook_event_types needs webhook_url"),
        );
        for (key, set) in [
            ("hook", self.hook.is_some() && self.provider != Provider::Github),
            ("notification_setting_id", self.notification_setting_id.is_some() && self.provider != Provider::Paddle),
            ("event_types", !self.event_types.is_empty() && self.provider != Provider::Stripe),
            ("api_version", self.api_version.is_some() && self.provider != Provider::Stripe),
        ] {
            problems.check(!set, format!("source `{name}`: {key} does not apply to {}", self.provider.name()));
        }
    }
}

fn is_hook_path(hook: &str) -> bool {
    let parts: Vec<&str> = hook.trim_matches('/').split('/').collect();
    let ok_id = |id: &str| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit());
    let ok_name = |name: &str| !name.is_empty() && !name.contains(['?', '#', '%']) && name != ".." && name != ".";
    match parts.as_slice() {
        ["repos", owner, repo, "hooks", id] => ok_name(owner) && ok_name(repo) && ok_id(id),
        ["orgs", org, "hooks", id] => ok_name(org) && ok_id(id),
        _ => false,
    }
}

impl ReconcilerConfig {
    /// Defaults, then the file (if any), then environment overrides; nothing checked (that is
    /// [`crate::load::Loaded::build`]).
    pub fn read(path: Option<&Path>) -> Result<Self, ConfigError> {
        let mut config: Self = match path {
            Some(path) => config::load_file(path)?,
            None => Self::default(),
        };
        config.kafka.apply_env();
        config.redis.apply_env();
        config::env_override(env::ADMIN_ADDR, &mut config.admin_addr);
        Ok(config)
    }

    /// The problems of everything but the credentials' values: what `--print-config` checks, reading no secret.
    pub fn check_settings(&self, problems: &mut Problems) {
        self.kafka.validate(problems);
        self.telemetry.validate(problems);
        self.redis.validate(problems);
        problems.check(!self.index_group_id.is_empty(), "index_group_id is empty");
        problems.check(self.index_group_id != self.kafka.group_id, "index_group_id must differ from kafka.group_id");
        problems.check(self.interval_s >= 60, "interval_s must be at least 60");
        problems.check(self.registration_interval_s >= 60, "registration_interval_s must be at least 60");
        problems.check(self.index_catch_up_timeout_ms >= 1_000, "index_catch_up_timeout_ms must be at least 1000");
        problems.check(self.run_lease_s >= 60, "run_lease_s must be at least 60");
        if let Err(problem) = self.index_complete_since_ms() {
            problems.push(problem.to_string());
        }
        let mut names = std::collections::HashSet::new();
        for source in &self.sources {
            problems.check(names.insert(source.name.as_str()), format!("source `{}` is listed twice", source.name));
            source.validate(problems);
        }
    }

    /// [`Self::index_complete_since`] in ms since the epoch.
    pub fn index_complete_since_ms(&self) -> Result<Option<i64>, IndexCompleteSinceError> {
        let Some(text) = &self.index_complete_since else { return Ok(None) };
        let ms = hookline_common::time::parse_rfc3339_weak_ms(text.trim())
            .map_err(|source| IndexCompleteSinceError { text: text.clone(), source })?;
        Ok(Some(ms))
    }

    pub fn source(&self, name: &str) -> Option<&SourceConfig> {
        self.sources.iter().find(|source| source.name == name)
    }
}

/// `index_complete_since` is not a time.
#[derive(Debug, thiserror::Error)]
#[error("index_complete_since `{text}` is not an RFC 3339 time like 2026-06-01T00:00:00Z")]
pub struct IndexCompleteSinceError {
    text: String,
    #[source]
    source: hookline_common::time::ParseError,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(config: &ReconcilerConfig) -> Vec<String> {
        match crate::load::Loaded::build(config.clone()) {
            Ok(_) => Vec::new(),
            Err(ConfigError::Invalid(problems)) => problems,
            Err(other) => panic!("{other}"),
        }
    }

    #[test]
    fn a_missing_credential_and_a_bad_hook_are_reported_together() {
        let mut github =
            SourceConfig::new("github", Provider::Github, SecretRef::from_env("token", "HOOKLINE_TEST_UNSET_VAR_0"));
        github.hook = Some("repos/acme/../hooks/x".to_owned());
        let mut paddle = SourceConfig::new("paddle", Provider::Paddle, SecretRef::from_file("key", "/nonexistent/key"));
        paddle.api_url = Some("http://api.example.com".to_owned());
        let config = ReconcilerConfig { sources: vec![github, paddle], ..ReconcilerConfig::default() };
        let found = problems(&config);
        for expected in [
            "source `github`: credential: secret `token`: environment variable HOOKLINE_TEST_UNSET_VAR_0 is not set",
            "source `github`: hook must be",
            "source `paddle`: credential: secret `key`: cannot read /nonexistent/key",
            "source `paddle`: api_url must be https://",
            "source `paddle`: api_url host `api.example.com` is not the provider's API (api.paddle.com, \
             sandbox-api.paddle.com)",
            "source `paddle`: notification_setting_id",
        ] {
            assert!(found.iter().any(|problem| problem.starts_with(expected)), "{expected} not in {found:?}");
        }
    }

    #[test]
    fn hook_paths_are_repo_or_org_hooks_only() {
        assert!(is_hook_path("repos/acme/widgets/hooks/12"));
        assert!(is_hook_path("orgs/acme/hooks/7"));
        for bad in ["repos/acme/hooks/12", "orgs/acme/hooks/x", "repos/acme/../hooks/1", "app/hook", ""] {
            assert!(!is_hook_path(bad), "{bad}");
        }
    }

    #[test]
    fn windows_and_index_retention_cover_each_provider() {
        for provider in [Provider::Stripe, Provider::Github, Provider::Paddle] {
            let source = SourceConfig::new("s", provider, SecretRef::from_env("k", "V"));
            assert!(source.index_ttl_s() > source.lookback().as_secs());
        }
        assert_eq!(Provider::Paddle.window(), Duration::from_secs(90 * DAY_S));
    }

    /// The example reconciler config of docs/configuration/reconciler.md parses with this parser, which refuses unknown
    /// keys, so every key it shows exists; the values it gives as defaults are the defaults; and it validates once
    /// its credentials point at files.
    #[test]
    fn configuration_doc_reconciler_example_is_valid_and_shows_the_defaults() {
        let doc = include_str!("../../docs/configuration/reconciler.md");
        let start = doc.find("## Example: reconciler.toml").expect("reconciler example heading");
        let block = doc[start..].split("```toml\n").nth(1).and_then(|rest| rest.split("```").next()).expect("block");
        let mut config: ReconcilerConfig =
            config::parse_str(block, "docs/configuration/reconciler.md").expect("the example parses");
        let defaults = ReconcilerConfig::default();
        assert_eq!(
            (&config.admin_addr, &config.index_group_id, config.interval_s, config.registration_interval_s),
            (&defaults.admin_addr, &defaults.index_group_id, defaults.interval_s, defaults.registration_interval_s)
        );
        assert_eq!(
            (config.index_catch_up_timeout_ms, config.run_lease_s, &config.index_complete_since),
            (defaults.index_catch_up_timeout_ms, defaults.run_lease_s, &defaults.index_complete_since)
        );
        assert_eq!(format!("{:?}", config.redis), format!("{:?}", defaults.redis), "[redis] is not the defaults");
        let kafka = KafkaConfig {
            brokers: defaults.kafka.brokers.clone(),
            record_auth: defaults.kafka.record_auth.clone(),
            ..config.kafka.clone()
        };
        assert_eq!(format!("{kafka:?}"), format!("{:?}", defaults.kafka), "[kafka] is not the defaults");
        let providers: Vec<Provider> = config.sources.iter().map(|source| source.provider).collect();
        assert_eq!(providers, [Provider::Stripe, Provider::Github, Provider::Paddle]);
        let stripe = &config.sources[0];
        let stripe_defaults = SourceConfig::new("stripe", Provider::Stripe, stripe.credential.clone());
        assert_eq!(
            (stripe.lookback(), stripe.requests_per_s(), stripe.index_ttl_s()),
            (stripe_defaults.lookback(), stripe_defaults.requests_per_s(), stripe_defaults.index_ttl_s())
        );
        assert_eq!(
            (stripe.settle_s, stripe.max_retry_after_s, stripe.apply),
            (stripe_defaults.settle_s, stripe_defaults.max_retry_after_s, stripe_defaults.apply)
        );

        let directory = std::env::temp_dir().join(format!("hookline-reconciler-config-doc-{}", std::process::id()));
        std::fs::create_dir_all(&directory).unwrap();
        for source in &mut config.sources {
            let path = directory.join(&source.name);
            std::fs::write(&path, "an-api-credential").unwrap();
            source.credential = SecretRef::from_file(source.credential.id.clone(), path.display().to_string());
        }
        let validated = crate::load::Loaded::build(config);
        let _ = std::fs::remove_dir_all(&directory);
        if let Err(problems) = validated {
            panic!("the documented reconciler example does not validate: {problems}");
        }
    }
}

impl ReconcilerConfig {
    /// The effective config as `--print-config` prints it: every default applied, inline credentials redacted
    /// (a source's `credential` is a reference, an env var name or a file path, and stays).
    pub fn effective(&self) -> Result<config::Table, config::PrintError> {
        config::effective_table(self)
    }
}

#[cfg(test)]
mod effective_tests {
    use super::*;

    #[test]
    fn the_effective_config_has_every_default_and_reads_back_the_same() {
        let parsed: ReconcilerConfig = config::parse_str(
            "[[sources]]\nname = \"gh\"\nprovider = \"github\"\nhook = \"orgs/acme/hooks/1\"\ncredential = { id = \"t\", env = \"GH_TOKEN\" }\n",
            "test",
        )
        .unwrap();
        let table = parsed.effective().unwrap();
        assert_eq!(table["redis"]["key_prefix"].as_str(), Some("hookline:reconcile"));
        assert_eq!(table["sources"][0]["settle_s"].as_integer(), Some(default_settle_s() as i64));
        assert_eq!(table["sources"][0]["credential"]["env"].as_str(), Some("GH_TOKEN"));
        let printed = config::effective_toml(&parsed).unwrap();
        let again: ReconcilerConfig = config::parse_str(&printed, "printed").unwrap();
        assert_eq!(config::effective_toml(&again).unwrap(), printed);
    }
}
