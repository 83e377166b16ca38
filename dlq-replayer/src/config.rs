//! The replayer's configuration.

use std::path::Path;

use hookline_common::config::{self, ConfigError, KafkaConfig, Problems, RedisConfig, SecretRef, env};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReplayerConfig {
    /// Admin listener (`serve`): the HTTP API under `/v1/`, and `/livez`, `/readyz`, `/metrics`.
    pub admin_addr: String,
    pub kafka: KafkaConfig,
    /// The shared bearer token: one admin token for every caller of the API and the console, recorded as
    /// `shared-token`. For a local demo only (`serve` warns at start): operators use their own scoped tokens
    /// (`[identity]`, `hookline-replayer tokens create`). Read from an env var or a file; the CLI does not use it.
    pub api_token: Option<SecretRef>,
    /// An entry whose event has already failed again this many times after replays is flagged: replaying it
    /// needs `force`, because something other than a transient fault is wrong.
    pub max_failed_again: u32,
    /// How often `serve` refreshes the `hookline_dlq_entries` and `hookline_dlq_oldest_untriaged_age_seconds`
    /// gauges from its index.
    pub refresh_interval_s: u64,
    /// A `replayed` entry with no outcome (`succeeded`, `failed_again`) after this long is `replay_overdue`, and
    /// `replay --all` takes it again. Keep it above the consumers' `retry.max_total_ms` plus their usual lag: a
    /// re-driven event that is being retried has no outcome yet. A second re-drive is harmless (dedupe).
    pub replay_outcome_timeout_s: u64,
    /// The gateways whose recent rejections `serve` gathers (`GET /v1/rejections`, the console's Rejections page).
    /// Traces (on when `OTEL_EXPORTER_OTLP_ENDPOINT` is set; see docs/operations.md, "Traces").
    pub telemetry: hookline_common::telemetry::traces::TelemetryConfig,
    pub gateways: GatewaysConfig,
    /// What `lookup` ("where is event X?") reads besides the topics.
    pub lookup: LookupConfig,
    /// Event search (`events`, `GET /v1/events`, the console's Events page).
    pub events: EventsConfig,
    /// The console overview's flow of the last hour: what `serve` samples, and from where.
    pub flow: FlowConfig,
    /// The dead-letter index's memory budget, and where the entries past it go.
    pub index: IndexConfig,
    /// Scoped API tokens and the audit trail: where they are kept.
    pub identity: IdentityConfig,
    /// Console login through an OpenID Connect provider. Absent: the console takes API tokens only.
    pub oidc: Option<OidcConfig>,
}

/// The console's OpenID Connect login (authorization code with PKCE): the provider, this client, and how the ID
/// token's claims map to a subject and a role (docs/security.md, "Operators by name").
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct OidcConfig {
    /// The provider's issuer URL (its discovery document is `<issuer>/.well-known/openid-configuration`):
    /// `https://`, or `http://` on a loopback address only (a local provider).
    pub issuer: String,
    pub client_id: String,
    /// The client's secret (sent with HTTP Basic to the token endpoint); read from an env var or a file.
    pub client_secret: Option<SecretRef>,
    /// This console's callback as registered at the provider: `https://<console host>/ui/oidc/callback`.
    pub redirect_url: String,
    /// The scopes asked for (`openid` first).
    pub scopes: Vec<String>,
    /// The claim whose value is the subject recorded (`oidc:<value>`).
    pub subject_claim: String,
    /// The claim that holds the user's roles or groups (a string or an array of strings).
    pub roles_claim: String,
    /// Values of `roles_claim` that make a viewer (read), an operator (operate) and an admin. The highest wins; a
    /// user with none is refused.
    pub viewer_roles: Vec<String>,
    pub operator_roles: Vec<String>,
    pub admin_roles: Vec<String>,
    /// A PEM file of CA certificates trusted besides the compiled-in Mozilla roots (a provider behind a private CA).
    pub ca_file: Option<String>,
}

impl Default for OidcConfig {
    fn default() -> Self {
        Self {
            issuer: String::new(),
            client_id: String::new(),
            client_secret: None,
            redirect_url: String::new(),
            scopes: vec!["openid".to_owned(), "profile".to_owned(), "email".to_owned()],
            subject_claim: "sub".to_owned(),
            roles_claim: "roles".to_owned(),
            viewer_roles: vec!["viewer".to_owned()],
            operator_roles: vec!["operator".to_owned()],
            admin_roles: vec!["admin".to_owned()],
            ca_file: None,
        }
    }
}

impl OidcConfig {
    fn validate(&self, problems: &mut Problems) {
        let loopback_http = |url: &str| {
            url.strip_prefix("http://").is_some_and(|rest| {
                ["127.0.0.1", "localhost", "[::1]"].iter().any(|host| {
                    rest.strip_prefix(host).is_some_and(|after| after.is_empty() || after.starts_with([':', '/']))
                })
            })
        };
        let secure = |url: &str| url.starts_with("https://") || loopback_http(url);
        problems
            .check(secure(&self.issuer), "oidc.issuer must be an https:// URL (http:// only on a loopback address)");
        problems.check(!self.client_id.is_empty(), "oidc.client_id is required");
        problems.check(self.client_secret.is_some(), "oidc.client_secret is required");
        problems.check(
            secure(&self.redirect_url) && self.redirect_url.ends_with("/ui/oidc/callback"),
            "oidc.redirect_url must be this console's https://<host>/ui/oidc/callback (http:// only on a loopback address)",
        );
        problems
            .check(self.scopes.first().is_some_and(|scope| scope == "openid"), "oidc.scopes must start with `openid`");
        problems.check(
            !(self.viewer_roles.is_empty() && self.operator_roles.is_empty() && self.admin_roles.is_empty()),
            "oidc: at least one of viewer_roles, operator_roles, admin_roles must name a role",
        );
    }
}

/// Where the scoped API tokens and the audit trail live (docs/security.md, "Operators by name").
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct IdentityConfig {
    /// The compacted topic of the API tokens (their SHA-256, name, scope, revocation; never a token), under the
    /// record MAC. Every replayer instance tails it. Absent: `<kafka.control_topic>-tokens`.
    pub tokens_topic: Option<String>,
    /// The audit topic: one record per mutating action (who, what, when), deleted past its retention. Absent:
    /// `<kafka.control_topic>-audit`.
    pub audit_topic: Option<String>,
    /// The audit topic's retention when the replayer creates it (a deployment's topic job sets its own).
    pub audit_retention_days: u64,
}

impl Default for IdentityConfig {
    fn default() -> Self {
        Self { tokens_topic: None, audit_topic: None, audit_retention_days: 30 }
    }
}

impl ReplayerConfig {
    /// The tokens topic: as configured, or beside the control topic.
    pub fn tokens_topic(&self) -> String {
        self.identity.tokens_topic.clone().unwrap_or_else(|| format!("{}-tokens", self.kafka.control_topic))
    }

    /// The audit topic: as configured, or beside the control topic.
    pub fn audit_topic(&self) -> String {
        self.identity.audit_topic.clone().unwrap_or_else(|| format!("{}-audit", self.kafka.control_topic))
    }
}

/// The index of dead-letter entries (`serve`, and every CLI command that builds one): what it may hold in memory.
/// Past `memory_budget_mb` the oldest entries move to a file in `spill_dir` (deleted as soon as it is made: it
/// lives as long as the process), about 200 bytes per entry there, and the index's memory stops growing with the
/// number of dead letters. See docs/operations.md, "Memory".
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct IndexConfig {
    /// The index's heap (entries in memory, their event ids and error messages, the interned strings), counted
    /// from its structures: about 200 bytes per entry, so the default holds about 1.3 million entries in memory.
    pub memory_budget_mb: u64,
    /// Where the spill file is made. Empty: the system's temporary directory (`TMPDIR`, else `/tmp`).
    pub spill_dir: String,
}

impl Default for IndexConfig {
    fn default() -> Self {
        Self { memory_budget_mb: 256, spill_dir: String::new() }
    }
}

impl IndexConfig {
    pub fn spill_dir(&self) -> std::path::PathBuf {
        if self.spill_dir.is_empty() { std::env::temp_dir() } else { std::path::PathBuf::from(&self.spill_dir) }
    }
}

/// What the console overview's flow samples: the gateways of `[gateways] admin_urls` (their `/metrics`), and the
/// consumer services listed here (their replicas' `/metrics`, and their consumer group's offsets in Kafka).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct FlowConfig {
    /// How often `serve` samples every gateway, consumer and consumer group; the charts are per minute.
    pub sample_interval_s: u64,
    /// The consumer services shown. Empty: the overview shows the sources only.
    pub services: Vec<FlowService>,
}

impl Default for FlowConfig {
    fn default() -> Self {
        Self { sample_interval_s: 15, services: Vec::new() }
    }
}

/// One consumer service of the flow.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FlowService {
    /// The service's name (its `service.name`, or else its `kafka.group_id`).
    pub name: String,
    /// Its consumer group, when it is not the name (as in `[lookup] services`, which is asked when this is absent).
    pub group_id: Option<String>,
    /// Base URLs of every replica's admin listener (`http://consumer-0.consumer:9091`), each asked for `/metrics`.
    /// Empty: only the group's lag (from Kafka) is shown.
    #[serde(default)]
    pub admin_urls: Vec<String>,
}

/// Event search's topics and bounds. A request may ask for less than a bound, never more.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct EventsConfig {
    /// Topics that carry one source's events besides the inbound topic (the gateway's per-source `topic`, the
    /// consumers' `service.source_topics`): searched too.
    pub source_topics: Vec<String>,
    /// At most this many records read per search.
    pub max_records: u64,
    /// At most this many seconds reading per search.
    pub max_seconds: u64,
    /// Matches shown when a search does not say.
    pub default_limit: usize,
    /// At most this many matches per search.
    pub max_matches: usize,
}

impl Default for EventsConfig {
    fn default() -> Self {
        Self {
            source_topics: Vec::new(),
            max_records: 10_000_000,
            max_seconds: 60,
            default_limit: 100,
            max_matches: 10_000,
        }
    }
}

/// `lookup`'s sources: the consumers' Redis (their dedupe keys) and which services there are.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct LookupConfig {
    /// The consumers' Redis (same `url`, `key_prefix`, TLS and user settings as theirs; the user needs only
    /// GET and PTTL). Absent: `lookup` answers from the topics alone, without dedupe state or service discovery.
    pub redis: Option<RedisConfig>,
    /// The consumer services to look in. Empty: every consumer group the brokers know that has a service key in
    /// Redis (a service whose `service.name` differs from its group id must be listed), plus any service a DLQ
    /// entry names.
    pub services: Vec<LookupService>,
    /// At most this many records of each partition of a service's retry topic are read, from the service group's
    /// committed offset on; the answer says how many were left unread.
    pub retry_scan_max_records: u64,
}

/// One consumer service for `lookup`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LookupService {
    /// The service's name (its `service.name`, or else its `kafka.group_id`).
    pub name: String,
    /// Its consumer group (`kafka.group_id`), when it is not the name: whose committed offsets bound the retry
    /// topic's search.
    pub group_id: Option<String>,
}

impl Default for LookupConfig {
    fn default() -> Self {
        Self { redis: None, services: Vec::new(), retry_scan_max_records: 10_000 }
    }
}

impl LookupConfig {
    /// The consumer group of `service`: as configured, or else its name.
    pub fn group_of<'a>(&'a self, service: &'a str) -> &'a str {
        self.services
            .iter()
            .find(|known| known.name == service)
            .and_then(|known| known.group_id.as_deref())
            .unwrap_or(service)
    }
}

/// Where the gateways' admin listeners are, and the token they want for `/admin/` routes.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct GatewaysConfig {
    /// Base URLs of every gateway replica's admin listener (`http://gateway-0.gateway:9091`), each asked for
    /// `/admin/rejections`, and by the flow sampler for `/metrics`. Empty: the replayer gathers nothing.
    pub admin_urls: Vec<String>,
    /// The gateways' `reload_token`, sent as a bearer token. Without it the gateways answer only a caller on
    /// their own loopback, so set it whenever the replayer runs elsewhere.
    pub token: Option<SecretRef>,
}

impl Default for ReplayerConfig {
    fn default() -> Self {
        Self {
            admin_addr: "127.0.0.1:9092".to_owned(),
            kafka: KafkaConfig::default(),
            api_token: None,
            max_failed_again: 3,
            refresh_interval_s: 15,
            replay_outcome_timeout_s: 3600,
            telemetry: Default::default(),
            gateways: GatewaysConfig::default(),
            lookup: LookupConfig::default(),
            events: EventsConfig::default(),
            flow: FlowConfig::default(),
            index: IndexConfig::default(),
            identity: IdentityConfig::default(),
            oidc: None,
        }
    }
}

impl ReplayerConfig {
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigError> {
        let mut config: Self = match path {
            Some(path) => config::load_file(path)?,
            None => Self::default(),
        };
        config.kafka.apply_env();
        // The identity topics are named once loaded, so the effective config (`--print-config`) shows them.
        let (tokens_topic, audit_topic) = (config.tokens_topic(), config.audit_topic());
        config.identity.tokens_topic = Some(tokens_topic);
        config.identity.audit_topic = Some(audit_topic);
        // The consumers' Redis, where a deployment names it once for every service (HOOKLINE_REDIS_URL).
        if let Some(redis) = &mut config.lookup.redis {
            redis.apply_env();
        }
        config::env_override(env::ADMIN_ADDR, &mut config.admin_addr);
        let mut problems = Problems::default();
        config.kafka.validate(&mut problems);
        config.telemetry.validate(&mut problems);
        problems.check(config.max_failed_again >= 1, "max_failed_again must be at least 1");
        problems.check(config.refresh_interval_s >= 1, "refresh_interval_s must be at least 1");
        problems.check(config.replay_outcome_timeout_s >= 1, "replay_outcome_timeout_s must be at least 1");
        for url in &config.gateways.admin_urls {
            if let Err(problem) = hookline_common::http_client::check_url(url) {
                problems.push(format!("gateways.admin_urls: `{url}` {problem}"));
            }
        }
        if let Some(redis) = &config.lookup.redis {
            redis.validate(&mut problems);
        }
        problems.check(config.flow.sample_interval_s >= 1, "flow.sample_interval_s must be at least 1");
        problems.check(config.index.memory_budget_mb >= 1, "index.memory_budget_mb must be at least 1");
        problems.check(
            config.index.spill_dir().is_dir(),
            "index.spill_dir must be a directory (the replayer writes its index past the memory budget there)",
        );
        for (position, service) in config.flow.services.iter().enumerate() {
            problems.check(!service.name.is_empty(), "flow.services: every service has a name");
            if config.flow.services[..position].iter().any(|earlier| earlier.name == service.name) {
                problems.push(format!("flow.services: `{}` is listed twice", service.name));
            }
            for url in &service.admin_urls {
                if let Err(problem) = hookline_common::http_client::check_url(url) {
                    problems.push(format!("flow.services.admin_urls: `{url}` {problem}"));
                }
            }
        }
        problems.check(config.lookup.retry_scan_max_records >= 1, "lookup.retry_scan_max_records must be at least 1");
        let (tokens_topic, audit_topic) = (config.tokens_topic(), config.audit_topic());
        problems.check(
            !tokens_topic.is_empty() && !audit_topic.is_empty() && tokens_topic != audit_topic,
            "identity.tokens_topic and identity.audit_topic are two non-empty topics",
        );
        if let Some(oidc) = &config.oidc {
            oidc.validate(&mut problems);
        }
        problems.check(
            (1..=3650).contains(&config.identity.audit_retention_days),
            "identity.audit_retention_days must be from 1 to 3650",
        );
        problems.check(config.events.max_records >= 1, "events.max_records must be at least 1");
        problems.check(config.events.max_seconds >= 1, "events.max_seconds must be at least 1");
        problems.check(
            (1..=config.events.max_matches).contains(&config.events.default_limit),
            "events.default_limit must be at least 1 and at most events.max_matches",
        );
        for topic in &config.events.source_topics {
            problems.check(
                !topic.is_empty() && *topic != config.kafka.inbound_topic,
                "events.source_topics: a topic is non-empty and not the inbound topic",
            );
        }
        problems.into_result()?;
        Ok(config)
    }
}

impl ReplayerConfig {
    /// The effective config as `--print-config` prints it: every default applied, inline credentials redacted
    /// (`api_token` is a reference, an env var name or a file path, and stays).
    pub fn effective(&self) -> Result<config::Table, config::PrintError> {
        config::effective_table(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_effective_config_has_every_default_and_redacts_kafka_credentials() {
        let parsed: ReplayerConfig = config::parse_str(
            "api_token = { id = \"api\", env = \"TOKEN_VAR\" }\n[kafka.properties]\n\"sasl.password\" = \"hunter2\"\n\"ssl.key.location\" = \"/k.pem\"\n",
            "test",
        )
        .unwrap();
        let table = parsed.effective().unwrap();
        let defaults = ReplayerConfig::default();
        assert_eq!(table["refresh_interval_s"].as_integer(), Some(defaults.refresh_interval_s as i64));
        assert_eq!(table["kafka"]["dlq_topic"].as_str(), Some(defaults.kafka.dlq_topic.as_str()));
        assert_eq!(table["api_token"]["env"].as_str(), Some("TOKEN_VAR"));
        assert_eq!(table["kafka"]["properties"]["sasl.password"].as_str(), Some("<redacted>"));
        assert_eq!(table["kafka"]["properties"]["ssl.key.location"].as_str(), Some("/k.pem"));
    }

    /// The example replayer config of docs/configuration/replayer.md parses with this parser, which refuses unknown keys,
    /// so every key it shows exists; and the values it gives as defaults are the defaults.
    #[test]
    fn configuration_doc_replayer_example_parses_and_shows_the_defaults() {
        let doc = include_str!("../../docs/configuration/replayer.md");
        let start = doc.find("## Example: replayer.toml").expect("replayer example heading");
        let block = doc[start..].split("```toml\n").nth(1).and_then(|rest| rest.split("```").next()).expect("block");
        let config: ReplayerConfig =
            config::parse_str(block, "docs/configuration/replayer.md").expect("the example parses");
        let defaults = ReplayerConfig::default();
        assert_eq!(config.admin_addr, defaults.admin_addr);
        assert_eq!(config.max_failed_again, defaults.max_failed_again);
        assert_eq!(config.refresh_interval_s, defaults.refresh_interval_s);
        assert_eq!(config.replay_outcome_timeout_s, defaults.replay_outcome_timeout_s);
        let kafka = KafkaConfig { brokers: defaults.kafka.brokers.clone(), ..config.kafka.clone() };
        assert_eq!(format!("{kafka:?}"), format!("{:?}", defaults.kafka), "[kafka] of the example is not the defaults");
        assert_eq!(format!("{:?}", config.events), format!("{:?}", defaults.events), "[events] of the example");
        assert_eq!(format!("{:?}", config.index), format!("{:?}", defaults.index), "[index] of the example");
        let token = config.api_token.expect("the example sets api_token");
        assert_eq!((token.env.as_deref(), token.file), (Some("HOOKLINE_REPLAYER_TOKEN"), None));
    }

    #[test]
    fn gateway_admin_urls_must_be_http_or_https() {
        let path = std::env::temp_dir().join(format!("hookline-replayer-gateways-{}.toml", std::process::id()));
        std::fs::write(
            &path,
            "[gateways]\nadmin_urls = [\"http://gateway-0.gateway:9091\", \"ftp://gateway-1:9091\", \"gateway-2:9091\"]\n",
        )
        .unwrap();
        let loaded = ReplayerConfig::load(Some(&path));
        let _ = std::fs::remove_file(&path);
        let message = loaded.expect_err("two bad URLs").to_string();
        assert!(message.contains("`ftp://gateway-1:9091`"), "{message}");
        assert!(message.contains("`gateway-2:9091`"), "{message}");
        assert!(!message.contains("gateway-0"), "{message}");
    }
}
