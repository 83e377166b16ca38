//! The consumer's configuration.

pub mod postgres;
mod routes;
pub mod windows;

pub use routes::{FilterConfig, RouteConfig, RouteMatch, RouteRetryConfig, Routing, chosen, chosen_index};

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
};

use hookline_common::{
    config::{self, ConfigError, KafkaConfig, Problems, RedisConfig, env},
    wire::dedupe_layout,
};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConsumerConfig {
    /// Admin listener for `/livez`, `/readyz`, `/metrics`.
    pub admin_addr: String,
    /// The consumer service this consumer is a member of: its dedupe keys, retry topic, dead letters, replays
    /// and metrics are its own.
    pub service: ServiceConfig,
    pub kafka: KafkaConfig,
    pub redis: RedisConfig,
    /// The default handler, for events no route matches.
    pub handler: HandlerConfig,
    /// Handlers per source, optionally per event type: the first matching route wins, or, with
    /// `service.routing = "fan_out"`, every matching route (each a destination) gets the event.
    pub routes: Vec<RouteConfig>,
    /// Validation per source name (`[sources.<name>]`): what makes an event poison before any handler runs.
    #[serde(serialize_with = "config::sorted_map")]
    pub sources: HashMap<String, SourceRulesConfig>,
    pub retry: RetryConfig,
    pub processing: ProcessingConfig,
    /// Traces (on when `OTEL_EXPORTER_OTLP_ENDPOINT` is set; see docs/operations.md, "Traces").
    pub telemetry: hookline_common::telemetry::traces::TelemetryConfig,
    pub alert: AlertConfig,
    /// The config file's folder: relative schema paths are resolved from it. Not a config key.
    #[serde(skip)]
    pub config_dir: PathBuf,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        Self {
            admin_addr: "127.0.0.1:9091".to_owned(),
            service: ServiceConfig::default(),
            kafka: KafkaConfig::default(),
            redis: RedisConfig::default(),
            handler: HandlerConfig::default(),
            routes: Vec::new(),
            sources: HashMap::new(),
            retry: RetryConfig::default(),
            processing: ProcessingConfig::default(),
            alert: AlertConfig::default(),
            telemetry: Default::default(),
            config_dir: PathBuf::from("."),
        }
    }
}

/// A consumer service: one name, one consumer group, reading the same stream as every other service at its own
/// pace, with its own handler, dedupe keys, retry topic and dead letters.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServiceConfig {
    /// The service's name (letters, digits, `.`, `-`, `_`); absent: `kafka.group_id`. Dedupe keys are scoped
    /// to it and its retry topic is `<kafka.retry_topic>.<name>`: two services must not share it.
    pub name: Option<String>,
    /// Where the service's consumer group starts reading the first time it runs (a group with committed
    /// offsets resumes from them): `earliest`, every event still in the topic (the default: nothing is
    /// skipped), or `latest`, only events that arrive after it joined.
    pub starts_at: StartAt,
    /// Source topics: topics that each carry one source's events (a gateway source with its own `topic`), read
    /// beside the inbound topic. A route whose records come from such a topic costs nothing while it is held (its
    /// breaker open, or paused by an operator): its partitions stop being fetched and its records wait in memory,
    /// instead of being copied to the retry topic as records of shared partitions are (ARCHITECTURE.md,
    /// "Holding a route").
    pub source_topics: Vec<String>,
    /// What the `[[routes]]` are: `first_match` (the default, and how every service ran before fan-out existed:
    /// an event goes to the first route that takes it, else to `[handler]`), or `fan_out`: every route that takes
    /// an event gets it, each a *destination* with its own name, dedupe scope, retries, breaker, pause, dead
    /// letters and metrics, all fed from the service's one read of the topic (docs/configuration/consumer.md,
    /// "Fan-out").
    pub routing: Routing,
}

/// Where a new consumer group starts reading.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StartAt {
    #[default]
    Earliest,
    Latest,
}

impl StartAt {
    /// The `auto.offset.reset` value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Earliest => "earliest",
            Self::Latest => "latest",
        }
    }
}

/// Longest service name: it is part of a topic name (at most 249 bytes) and of every dedupe key.
const MAX_SERVICE_NAME_BYTES: usize = 100;

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct HandlerConfig {
    /// Built-in handler: `log` writes one structured line per event; `http` POSTs the raw body to `url`.
    pub kind: String,
    /// For `http`: the downstream's `https://` (or, in-cluster, `http://`) URL (printed without a password it
    /// may carry).
    #[serde(serialize_with = "config::redact::optional_url_password")]
    pub url: Option<String>,
    /// A handler call that takes longer is a retryable failure. Must stay below `redis.claim_lease_ms`, so a
    /// claim cannot expire while its event is still being processed. Only read from `[handler]`.
    pub timeout_ms: u64,
    /// For `http`: a PEM file of CA certificates trusted besides the built-in Mozilla roots (a downstream
    /// behind a private CA). Relative to the config file's folder.
    pub ca_file: Option<PathBuf>,
    /// For `http`: a PEM certificate chain presented for mutual TLS, with `client_key`.
    pub client_certificate: Option<PathBuf>,
    /// For `http`: the PEM private key of `client_certificate`, from a secret.
    pub client_key: Option<config::SecretRef>,
    /// For `http`: Standard Webhooks secrets (`whsec_...`) that sign each forward; every one valid now
    /// (`not_before` / `not_after`) signs, so a rotation overlaps. Empty: forwards are not signed.
    pub signing_secrets: Vec<config::SecretRef>,
    /// For `http`: the whole `Authorization` header value (`Bearer ...`), from a secret.
    pub authorization: Option<config::SecretRef>,
    /// For `http`: provider request headers sent on, by name, when the record carries them (the gateway
    /// source's `forward_headers` must carry them into Kafka too).
    pub forward_headers: Vec<String>,
    /// For `postgres`: the database and the work (`[handler.postgres]`, docs/configuration/consumer.md).
    pub postgres: Option<postgres::PostgresConfig>,
}

impl Default for HandlerConfig {
    fn default() -> Self {
        Self {
            kind: "log".to_owned(),
            url: None,
            timeout_ms: 10_000,
            ca_file: None,
            client_certificate: None,
            client_key: None,
            signing_secrets: Vec::new(),
            authorization: None,
            forward_headers: Vec::new(),
            postgres: None,
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SourceRulesConfig {
    /// The body must be valid JSON (implied by `schemas`).
    pub json: bool,
    /// Event types this source may send; any other (or none) is poison. Absent: any.
    pub event_types: Option<Vec<String>>,
    /// JSON Schema file per event type (`"*"` for every type without its own), relative to the config file.
    #[serde(serialize_with = "config::sorted_map")]
    pub schemas: HashMap<String, String>,
    /// The provider the source's events come from (its gateway `scheme`, e.g. `stripe`): a provider with a
    /// documented retry schedule sets the source's default dedupe window ([`windows`]).
    pub provider: Option<String>,
    /// How long the source's processed events are remembered (its dedupe window), seconds; absent: its
    /// provider's default, else `redis.dedupe_ttl_s`. At least 1, at most 30 days.
    pub dedupe_ttl_s: Option<u64>,
}

/// How much the consumer does at once.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProcessingConfig {
    /// Records in the handler stage at once, across partitions and within one: records of one partition run
    /// concurrently, except those sharing an ordering key.
    pub max_in_flight: usize,
    /// Records per partition fetched and not yet committed (running, queued, or handled above an unhandled
    /// one); when full, the partition is paused while the others keep flowing. Bounds memory and redelivery.
    #[serde(alias = "partition_queue")]
    pub partition_window: usize,
    /// Bytes (payload, key and headers) of the records fetched and not yet committed, across every partition:
    /// once reached, every partition stops fetching until the windows are down to half of it (a single record
    /// larger than the bound is still taken, alone). Bounds the consumer's memory in bytes where
    /// `partition_window` bounds it in records (docs/operations.md, "Memory").
    pub max_window_bytes: u64,
    /// librdkafka's prefetch per assigned partition: it stops fetching a partition once its queue holds this many
    /// bytes of payload (`queued.max.messages.kbytes`) or `partition_window` records (`queued.min.messages`).
    /// Checked before each fetch: the fetch that takes a queue over it adds what `fetch_max_bytes` brings.
    pub partition_prefetch_bytes: usize,
    /// Compressed bytes of one fetch response, every partition of it together (`fetch.max.bytes`, and
    /// `fetch.message.max.bytes` per partition; a first record batch larger still comes, alone). librdkafka's
    /// limits are all in compressed bytes and hookline's lz4 records decompress up to 255 times, so this, not
    /// `partition_prefetch_bytes`, is what bounds a fetch in memory: 255 x this (docs/operations.md, "Memory").
    pub fetch_max_bytes: usize,
    /// Default per-route limit of records in the handler stage (see `[[routes]] max_in_flight`), for routes and
    /// sources without their own.
    pub route_max_in_flight: usize,
    /// On revoke, how long to wait for the revoked partitions' records in the handler before giving them up
    /// (their next owner waits for the claim, then skips them as duplicates).
    pub revoke_wait_ms: u64,
    /// A record of a saturated route (no free slot or rate token) whose partition is paused, while another
    /// route has room, is parked in the retry topic for about this long (jittered to [half, all] of it) without
    /// spending an attempt, so that it does not hold its partition's commit prefix. 0: never.
    pub defer_delay_ms: u64,
    /// Default for every route: consecutive retryable failures that open its circuit breaker (0: no breaker).
    /// While open, the route's records go to the retry topic, due at the next probe, without a handler call and
    /// without spending an attempt.
    pub breaker_failures: u32,
    /// Default for every route: how long an open breaker waits before one probe call; the probe's success
    /// closes it, its failure opens it again for as long.
    pub breaker_cooldown_ms: u64,
}

impl Default for ProcessingConfig {
    fn default() -> Self {
        Self {
            max_in_flight: 256,
            partition_window: 1024,
            max_window_bytes: 192 * 1024 * 1024,
            partition_prefetch_bytes: 1024 * 1024,
            fetch_max_bytes: 16 * 1024,
            route_max_in_flight: 128,
            revoke_wait_ms: 10_000,
            defer_delay_ms: 1_000,
            breaker_failures: 5,
            breaker_cooldown_ms: 10_000,
        }
    }
}

/// An optional alert webhook (Slack-compatible JSON `{"text": ...}`), aggregated: at most one message per
/// interval, with counts by source and error class and a few event ids, so a storm is one alert, not thousands.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct AlertConfig {
    /// `https://` (or `http://`) URL to POST to; absent: no webhook (the metric and the error log line remain).
    /// Printed as its scheme and host only: a Slack webhook's path is its credential.
    #[serde(serialize_with = "config::redact::optional_url_path")]
    pub url: Option<String>,
    pub interval_s: u64,
    /// Event ids listed per message.
    pub max_event_ids: usize,
    /// A PEM file of CA certificates to trust besides the built-in Mozilla roots (an endpoint behind a private
    /// CA). Relative to the config file's folder.
    pub ca_file: Option<PathBuf>,
}

impl Default for AlertConfig {
    fn default() -> Self {
        Self { url: None, interval_s: 60, max_event_ids: 5, ca_file: None }
    }
}

/// Retries of retryable handler failures: exponential backoff with jitter.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetryConfig {
    /// Handler attempts before a retryable failure is dead-lettered.
    pub max_attempts: u32,
    pub initial_backoff_ms: u64,
    pub max_backoff_ms: u64,
    /// Dead-letter once this much time has passed since the first failure, whatever the attempt count.
    pub max_total_ms: u64,
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self { max_attempts: 5, initial_backoff_ms: 200, max_backoff_ms: 10_000, max_total_ms: 60_000 }
    }
}

impl ConsumerConfig {
    /// Defaults, then the file (if any), then environment overrides. Nothing is checked or built here: that is
    /// [`crate::load::Loaded::build`], which a config must pass before it runs.
    pub fn read(path: Option<&Path>) -> Result<Self, ConfigError> {
        let mut config: Self = match path {
            Some(path) => config::load_file(path)?,
            None => Self::default(),
        };
        if let Some(dir) = path.and_then(Path::parent) {
            config.config_dir = dir.to_path_buf();
        }
        config.kafka.apply_env();
        config.redis.apply_env();
        config::env_override(env::ADMIN_ADDR, &mut config.admin_addr);
        Ok(config)
    }

    /// Adds every problem of the settings that need nothing built (handlers, schemas and the alert client are
    /// checked by building them).
    pub(crate) fn check(&self, problems: &mut Problems) {
        let service = self.service_name();
        problems.check(
            !service.is_empty()
                && service.len() <= MAX_SERVICE_NAME_BYTES
                && service.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')),
            format!(
                "service name `{service}` (service.name, or else kafka.group_id) must be 1 to {MAX_SERVICE_NAME_BYTES} letters, digits, `.`, `-` or `_`"
            ),
        );
        let mut seen = std::collections::HashSet::new();
        for topic in &self.service.source_topics {
            problems.check(
                !topic.is_empty()
                    && *topic != self.kafka.inbound_topic
                    && !topic.starts_with(&self.kafka.retry_topic)
                    && seen.insert(topic.as_str()),
                format!(
                    "service.source_topics: `{topic}` must be non-empty, listed once, and neither the inbound topic nor a retry topic"
                ),
            );
        }
        self.kafka.validate(problems);
        self.telemetry.validate(problems);
        self.redis.validate(problems);
        problems.check(
            self.handler.timeout_ms > 0 && self.handler.timeout_ms < self.redis.claim_lease_ms,
            "handler.timeout_ms must be positive and below redis.claim_lease_ms",
        );
        problems.check(self.retry.max_attempts >= 1, "retry.max_attempts must be at least 1");
        problems.check(self.retry.initial_backoff_ms > 0, "retry.initial_backoff_ms must be positive");
        problems.check(
            self.retry.max_backoff_ms >= self.retry.initial_backoff_ms,
            "retry.max_backoff_ms must be at least retry.initial_backoff_ms",
        );
        problems.check(self.processing.max_in_flight > 0, "processing.max_in_flight must be positive");
        problems.check(self.processing.partition_window > 0, "processing.partition_window must be positive");
        problems.check(self.processing.max_window_bytes > 0, "processing.max_window_bytes must be positive");
        problems.check(
            (4096..=1 << 30).contains(&self.processing.partition_prefetch_bytes),
            "processing.partition_prefetch_bytes must be between 4096 and 1073741824",
        );
        // librdkafka's own floor for `message.max.bytes`, which `fetch.max.bytes` may not be below.
        problems.check(
            (1000..=64 << 20).contains(&self.processing.fetch_max_bytes),
            "processing.fetch_max_bytes must be between 1000 and 67108864",
        );
        problems.check(self.processing.route_max_in_flight > 0, "processing.route_max_in_flight must be positive");
        problems.check(self.processing.breaker_cooldown_ms > 0, "processing.breaker_cooldown_ms must be positive");
        self.check_route_names(problems);
        for (index, route) in self.routes.iter().enumerate() {
            problems.check(route.max_in_flight != Some(0), format!("routes[{index}].max_in_flight must be positive"));
            problems.check(
                route.breaker_cooldown_ms != Some(0),
                format!("routes[{index}].breaker_cooldown_ms must be positive"),
            );
            problems.check(
                route.rate_per_s.is_none_or(|rate| rate.is_finite() && rate > 0.0),
                format!("routes[{index}].rate_per_s must be positive"),
            );
        }
        problems.check(self.alert.interval_s > 0, "alert.interval_s must be positive");
        for (name, source) in &self.sources {
            problems.check(
                source.dedupe_ttl_s.is_none_or(|window| (1..=dedupe_layout::MAX_WINDOW_S).contains(&window)),
                format!("sources.{name}.dedupe_ttl_s must be between 1 and 2592000 (30 days)"),
            );
        }
    }
}

impl ConsumerConfig {
    /// Whether every matching route gets an event (`service.routing = "fan_out"`).
    pub fn fans_out(&self) -> bool {
        self.service.routing == Routing::FanOut
    }

    /// The service's name: `service.name`, or else the consumer group.
    pub fn service_name(&self) -> &str {
        self.service.name.as_deref().unwrap_or(&self.kafka.group_id)
    }

    /// The service's own retry topic: `<kafka.retry_topic>.<service>`. Only this service writes and reads it.
    pub fn service_retry_topic(&self) -> String {
        format!("{}.{}", self.kafka.retry_topic, self.service_name())
    }

    /// The config with the service's name resolved (`service.name`, or else the consumer group): what
    /// `--print-config` prints, so that deploy checks read the name without knowing its default.
    pub fn resolved(mut self) -> Self {
        self.service.name = Some(self.service_name().to_owned());
        self
    }

    /// The effective config as `--print-config` prints it: every default applied (the service's name
    /// included), inline credentials redacted.
    pub fn effective(&self) -> Result<config::Table, config::PrintError> {
        config::effective_table(&self.clone().resolved())
    }
}

#[cfg(test)]
mod effective_tests {
    use super::*;

    #[test]
    fn the_effective_config_has_every_default_redacts_urls_and_reads_back() {
        let parsed: ConsumerConfig = config::parse_str(
            "[redis]\nurl = \"redis://app:hunter2@redis:6379\"\n[alert]\nurl = \"https://hooks.slack.com/services/T0/B0/XXXX\"\n[sources.b]\njson = true\n[sources.a]\njson = true\n",
            "test",
        )
        .unwrap();
        let table = parsed.effective().unwrap();
        assert_eq!(table["service"]["name"].as_str(), Some(parsed.kafka.group_id.as_str()), "the name is resolved");
        assert_eq!(table["handler"]["timeout_ms"].as_integer(), Some(HandlerConfig::default().timeout_ms as i64));
        assert_eq!(table["retry"]["max_total_ms"].as_integer(), Some(RetryConfig::default().max_total_ms as i64));
        assert_eq!(table["redis"]["url"].as_str(), Some("redis://app:<redacted>@redis:6379"));
        assert_eq!(table["alert"]["url"].as_str(), Some("https://hooks.slack.com/<redacted>"));
        let printed = config::effective_toml(&parsed).unwrap();
        assert!(!printed.contains("hunter2") && !printed.contains("XXXX"), "{printed}");
        assert!(printed.find("[sources.a]") < printed.find("[sources.b]"), "maps are printed in key order");
        let again: ConsumerConfig = config::parse_str(&printed, "printed").unwrap();
        assert_eq!(config::effective_toml(&again).unwrap(), printed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example consumer config of docs/configuration/consumer.md parses with this parser, which refuses unknown keys,
    /// so every key it shows exists; the values it gives as defaults are the defaults; and it validates once the
    /// schema file it names exists.
    #[test]
    fn configuration_doc_consumer_example_is_valid_and_shows_the_defaults() {
        let doc = include_str!("../../../docs/configuration/consumer.md");
        let start = doc.find("## Example: consumer.toml").expect("consumer example heading");
        let block = doc[start..].split("```toml\n").nth(1).and_then(|rest| rest.split("```").next()).expect("block");
        let mut config: ConsumerConfig =
            config::parse_str(block, "docs/configuration/consumer.md").expect("the example parses");
        let defaults = ConsumerConfig::default();
        assert_eq!(config.admin_addr, defaults.admin_addr);
        for (section, documented, default) in [
            ("redis", format!("{:?}", config.redis), format!("{:?}", defaults.redis)),
            ("handler", format!("{:?}", config.handler), format!("{:?}", defaults.handler)),
            ("retry", format!("{:?}", config.retry), format!("{:?}", defaults.retry)),
            ("processing", format!("{:?}", config.processing), format!("{:?}", defaults.processing)),
            ("alert", format!("{:?}", config.alert), format!("{:?}", defaults.alert)),
            ("service", format!("{:?}", config.service), format!("{:?}", defaults.service)),
            (
                "kafka",
                format!(
                    "{:?}",
                    KafkaConfig {
                        brokers: defaults.kafka.brokers.clone(),
                        record_auth: defaults.kafka.record_auth.clone(),
                        ..config.kafka.clone()
                    }
                ),
                format!("{:?}", defaults.kafka),
            ),
        ] {
            assert_eq!(documented, default, "[{section}] of the example is not the defaults");
        }
        assert_eq!(config.routes.len(), 1);
        assert!(config.sources.contains_key("github"));

        let directory = std::env::temp_dir().join(format!("hookline-consumer-config-doc-{}", std::process::id()));
        std::fs::create_dir_all(directory.join("schemas")).unwrap();
        std::fs::write(directory.join("schemas/github-push.json"), r#"{"type": "object"}"#).unwrap();
        config.config_dir = directory.clone();
        let built = crate::load::Loaded::build(config);
        let _ = std::fs::remove_dir_all(&directory);
        if let Err(problems) = built {
            panic!("the documented consumer example does not validate: {problems}");
        }
    }
}
