//! Configuration pieces every service shares, and the one way a service loads its config:
//! defaults, then a TOML file, then environment overrides, then `validate()`, which reports every problem at once
//! before any port is bound.

use std::{fmt, path::Path};

use serde::{Deserialize, Serialize, Serializer, de::DeserializeOwned};

pub use toml::{Table, ser::Error as PrintError};

use crate::wire::default_topic;

/// Environment variables that override the file, the same for every service.
pub mod env {
    pub const CONFIG: &str = "HOOKLINE_CONFIG";
    pub const KAFKA_BROKERS: &str = "HOOKLINE_KAFKA_BROKERS";
    pub const REDIS_URL: &str = "HOOKLINE_REDIS_URL";
    pub const LISTEN_ADDR: &str = "HOOKLINE_LISTEN_ADDR";
    pub const ADMIN_ADDR: &str = "HOOKLINE_ADMIN_ADDR";
}

/// How to reach Kafka, and the topic for each role.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct KafkaConfig {
    /// Comma-separated `host:port` list.
    pub brokers: String,
    pub inbound_topic: String,
    pub dlq_topic: String,
    pub dlq_status_topic: String,
    /// The base name of the consumer services' retry topics: service `S` parks events between handler attempts
    /// in `<retry_topic>.<S>`, which only it writes and reads. (Before services had names, every consumer shared
    /// this topic itself; an upgraded service drains what is left in it.)
    pub retry_topic: String,
    /// How long the gateway waits for the broker's acknowledgement before answering 503.
    /// Keep it below the providers' HTTP timeouts (GitHub: 10 s).
    pub produce_timeout_ms: u64,
    /// Consumer group of the consumer service (one group per service; also the service's name unless the
    /// consumer sets `service.name`).
    pub group_id: String,
    /// Extra librdkafka properties (for example TLS or SASL settings), applied last. Keys that would break a
    /// guarantee (`acks`, `enable.idempotence`, `enable.auto.offset.store`, ...: see
    /// [`REFUSED_PROPERTIES`]) are refused. Printed with credentials redacted.
    #[serde(serialize_with = "redact::kafka_properties")]
    pub properties: std::collections::BTreeMap<String, String>,
    /// `[kafka.record_auth]`: the internal keys every record is signed and verified with.
    pub record_auth: crate::record_auth::RecordAuthConfig,
    /// `[kafka.tls]`: TLS to the brokers (see [`crate::kafka_security`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<crate::kafka_security::KafkaTlsConfig>,
    /// `[kafka.sasl]`: SASL authentication, always over TLS (see [`crate::kafka_security`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sasl: Option<crate::kafka_security::KafkaSaslConfig>,
}

impl Default for KafkaConfig {
    fn default() -> Self {
        Self {
            brokers: "127.0.0.1:19092".to_owned(),
            inbound_topic: default_topic::INBOUND.to_owned(),
            dlq_topic: default_topic::DEAD_LETTER.to_owned(),
            dlq_status_topic: default_topic::DEAD_LETTER_STATUS.to_owned(),
            retry_topic: default_topic::RETRY.to_owned(),
            produce_timeout_ms: 5_000,
            group_id: "hookline-consumer".to_owned(),
            properties: Default::default(),
            record_auth: Default::default(),
            tls: None,
            sasl: None,
        }
    }
}

/// `kafka.properties` keys that would break a guarantee, each with the guarantee it would break. Refused by
/// [`KafkaConfig::validate`] (and never applied): the producer's
/// acknowledgement settings are what make a 2xx mean "stored", the consumer's offset settings what make
/// processing at-least-once, and the rest are set from their own config keys.
pub const REFUSED_PROPERTIES: &[(&str, &str)] = &[
    ("acks", "a 2xx means every in-sync replica has the event (acks=all)"),
    ("request.required.acks", "a 2xx means every in-sync replica has the event (acks=all)"),
    ("enable.idempotence", "a retried produce is written once (idempotent producer)"),
    ("enable.gapless.guarantee", "the idempotent producer's ordering is managed by hookline"),
    ("max.in.flight.requests.per.connection", "the idempotent producer keeps per-partition order"),
    ("max.in.flight", "the idempotent producer keeps per-partition order"),
    ("retries", "a produce is retried until the produce timeout"),
    ("message.send.max.retries", "a produce is retried until the produce timeout"),
    ("message.timeout.ms", "set it with kafka.produce_timeout_ms, which the gateway's 503 relies on"),
    ("delivery.timeout.ms", "set it with kafka.produce_timeout_ms, which the gateway's 503 relies on"),
    ("transactional.id", "the producer is idempotent, not transactional"),
    ("enable.auto.offset.store", "an offset is stored only after its record was handled (at-least-once)"),
    ("enable.auto.commit", "offsets are committed only once stored after handling"),
    ("auto.offset.reset", "a new consumer group starts from the earliest record, so nothing is skipped"),
    ("isolation.level", "consumers read only committed records"),
    ("partition.assignment.strategy", "the consumer's rebalance handling assumes cooperative-sticky"),
    ("enable.partition.eof", "the consumer does not expect end-of-partition events"),
    ("group.id", "set it with kafka.group_id"),
    ("bootstrap.servers", "set it with kafka.brokers"),
    ("metadata.broker.list", "set it with kafka.brokers"),
];

/// Why `key` may not be set through `kafka.properties`, if it may not.
pub fn refused_property(key: &str) -> Option<&'static str> {
    let lower = key.trim().to_ascii_lowercase();
    REFUSED_PROPERTIES
        .iter()
        .find(|(refused, _)| *refused == lower)
        .map(|(_, why)| *why)
        .or_else(|| crate::kafka_security::refused_security_property(key))
}

impl KafkaConfig {
    pub fn validate(&self, problems: &mut Problems) {
        problems.check(!self.brokers.trim().is_empty(), "kafka.brokers is empty");
        for (key, topic) in [
            ("kafka.inbound_topic", &self.inbound_topic),
            ("kafka.dlq_topic", &self.dlq_topic),
            ("kafka.dlq_status_topic", &self.dlq_status_topic),
            ("kafka.retry_topic", &self.retry_topic),
        ] {
            problems.check(!topic.is_empty(), format!("{key} is empty"));
        }
        problems.check(
            (100..=120_000).contains(&self.produce_timeout_ms),
            "kafka.produce_timeout_ms must be between 100 and 120000",
        );
        problems.check(!self.group_id.is_empty(), "kafka.group_id is empty");
        for key in self.properties.keys() {
            if let Some(why) = refused_property(key) {
                problems.push(format!("kafka.properties.\"{key}\" is refused: {why}"));
            }
        }
        self.record_auth.validate(problems);
        crate::kafka_security::validate(self, problems);
    }

    pub fn apply_env(&mut self) {
        if let Ok(brokers) = std::env::var(env::KAFKA_BROKERS) {
            self.brokers = brokers;
        }
    }
}

/// How to reach Redis and lay out the dedupe keys.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedisConfig {
    /// `redis://host:port`; with `cluster = true`, a comma-separated list of seed nodes. Printed without the
    /// password of a `redis://user:password@host` URL.
    #[serde(serialize_with = "redact::url_list_passwords")]
    pub url: String,
    /// Connect to a Redis Cluster. Every dedupe script touches a single key, so no hash tags are needed.
    pub cluster: bool,
    /// Dedupe keys are `<key_prefix>:svc=<service>:<source>:<event id>`.
    pub key_prefix: String,
    /// How long a processed event id is remembered. 72 hours covers the retry windows of the providers we
    /// know (Stripe retries for up to 3 days, GitHub does not redeliver on its own, Shopify for 48 hours).
    pub dedupe_ttl_s: u64,
    /// How long a consumer's claim on an event lives if the consumer dies while processing it.
    pub claim_lease_ms: u64,
    /// Bound on each Redis command; a timed-out claim is treated as uncertain and read back.
    pub response_timeout_ms: u64,
    /// Redis 6 ACL user (`AUTH <username> <password>`); without it, the `default` user.
    pub username: Option<String>,
    /// The password of `username` (or of the default user), a secret reference; never in `url`.
    pub password: Option<SecretRef>,
    /// For a `rediss://` URL: the CA to trust instead of the built-in roots, and a client certificate
    /// ([`crate::redis_security`]).
    pub tls: Option<crate::redis_security::RedisTls>,
}

impl Default for RedisConfig {
    fn default() -> Self {
        Self {
            url: "redis://127.0.0.1:16379".to_owned(),
            cluster: false,
            key_prefix: "hookline:dedupe".to_owned(),
            dedupe_ttl_s: 72 * 3600,
            claim_lease_ms: 30_000,
            response_timeout_ms: 2_000,
            username: None,
            password: None,
            tls: None,
        }
    }
}

impl RedisConfig {
    pub fn validate(&self, problems: &mut Problems) {
        problems.check(
            self.url.starts_with("redis://") || self.url.starts_with("rediss://"),
            "redis.url must be redis:// or rediss://",
        );
        problems.check(!self.key_prefix.is_empty(), "redis.key_prefix is empty");
        problems.check(self.dedupe_ttl_s >= 60, "redis.dedupe_ttl_s must be at least 60");
        problems.check(self.claim_lease_ms >= 1_000, "redis.claim_lease_ms must be at least 1000");
        problems.check(self.response_timeout_ms >= 50, "redis.response_timeout_ms must be at least 50");
        crate::redis_security::validate(self, problems);
    }

    /// The node URLs in `url`.
    pub fn urls(&self) -> impl Iterator<Item = &str> {
        self.url.split(',').map(str::trim).filter(|url| !url.is_empty())
    }

    pub fn apply_env(&mut self) {
        if let Ok(url) = std::env::var(env::REDIS_URL) {
            self.url = url;
        }
    }
}

/// Where a secret's value comes from. Secrets are never written inline in a config file, so printing a
/// `SecretRef` (an id, a variable name, a path) shows no secret.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SecretRef {
    pub id: String,
    /// Name of an environment variable holding the secret.
    pub env: Option<String>,
    /// Path of a file holding the secret (trailing newline stripped).
    pub file: Option<String>,
    /// RFC 3339 time (`2026-06-01T00:00:00Z`) before which the secret is not accepted yet: lets a rotation be
    /// configured ahead of the provider's switch.
    #[serde(default)]
    pub not_before: Option<String>,
    /// RFC 3339 time after which the secret is no longer accepted: a retiring secret stops working by itself.
    #[serde(default)]
    pub not_after: Option<String>,
}

impl SecretRef {
    /// A secret read from a file, valid at any time.
    pub fn from_file(id: impl Into<String>, path: impl Into<String>) -> Self {
        Self { id: id.into(), file: Some(path.into()), ..Self::default() }
    }

    /// A secret read from an environment variable, valid at any time.
    pub fn from_env(id: impl Into<String>, var: impl Into<String>) -> Self {
        Self { id: id.into(), env: Some(var.into()), ..Self::default() }
    }

    /// `not_before` and `not_after` as ms since the Unix epoch, or why they cannot be read.
    pub fn validity_ms(&self) -> Result<(Option<i64>, Option<i64>), String> {
        let parse = |key: &str, value: &Option<String>| -> Result<Option<i64>, String> {
            let Some(text) = value else { return Ok(None) };
            let time = humantime::parse_rfc3339(text.trim()).map_err(|_| {
                format!("secret `{}`: {key} `{text}` is not an RFC 3339 UTC time like 2026-06-01T00:00:00Z", self.id)
            })?;
            let since_epoch = time.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            Ok(Some(i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX)))
        };
        let not_before = parse("not_before", &self.not_before)?;
        let not_after = parse("not_after", &self.not_after)?;
        if let (Some(start), Some(end)) = (not_before, not_after) {
            if start > end {
                return Err(format!("secret `{}`: not_before is after not_after", self.id));
            }
        }
        Ok((not_before, not_after))
    }

    /// Reads the secret's bytes, or says why it cannot.
    pub fn load(&self) -> Result<Vec<u8>, String> {
        let value = match (&self.env, &self.file) {
            (Some(var), None) => std::env::var(var)
                .map_err(|_| format!("secret `{}`: environment variable {var} is not set", self.id))?,
            (None, Some(path)) => std::fs::read_to_string(path)
                .map_err(|error| format!("secret `{}`: cannot read {path}: {error}", self.id))?
                .trim_end_matches(['\r', '\n'])
                .to_owned(),
            _ => return Err(format!("secret `{}`: give exactly one of `env` or `file`", self.id)),
        };
        if value.is_empty() {
            return Err(format!("secret `{}` is empty", self.id));
        }
        Ok(value.into_bytes())
    }
}

/// Every problem found while validating a config, reported together.
#[derive(Debug, Default)]
pub struct Problems(Vec<String>);

impl Problems {
    pub fn check(&mut self, ok: bool, problem: impl Into<String>) {
        if !ok {
            self.0.push(problem.into());
        }
    }

    pub fn push(&mut self, problem: impl Into<String>) {
        self.0.push(problem.into());
    }

    /// Every problem, or `Ok`.
    pub fn into_result(self) -> Result<(), ConfigError> {
        if self.0.is_empty() { Ok(()) } else { Err(ConfigError::Invalid(self.0)) }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("config file {path} is not valid")]
    Parse {
        path: String,
        #[source]
        source: toml::de::Error,
    },
    #[error("invalid configuration:\n{}", ProblemList(.0))]
    Invalid(Vec<String>),
}

struct ProblemList<'a>(&'a [String]);

impl fmt::Display for ProblemList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for problem in self.0 {
            writeln!(f, "  - {problem}")?;
        }
        Ok(())
    }
}

/// Parses a TOML config file; missing keys take their defaults.
pub fn load_file<T: DeserializeOwned>(path: &Path) -> Result<T, ConfigError> {
    let display = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: display.clone(), source })?;
    parse_str(&text, &display)
}

/// Parses TOML text; `origin` names it in errors.
pub fn parse_str<T: DeserializeOwned>(text: &str, origin: &str) -> Result<T, ConfigError> {
    toml::from_str(text).map_err(|source| ConfigError::Parse { path: origin.to_owned(), source })
}

/// Reads an address override from the environment.
pub fn env_override(var: &str, target: &mut String) {
    if let Ok(value) = std::env::var(var) {
        *target = value;
    }
}

/// A config as TOML, every default applied and every inline credential redacted (the config structs'
/// `Serialize` impls see to both): what `--print-config` prints. Keys are in declaration order, maps sorted.
pub fn effective_toml<T: Serialize>(config: &T) -> Result<String, PrintError> {
    toml::to_string(config)
}

/// [`effective_toml`] as a table, for tests and tools that read it back.
pub fn effective_table<T: Serialize>(config: &T) -> Result<Table, PrintError> {
    Table::try_from(config)
}

/// Serializes a map in key order, so the printed config is the same from one run to the next.
pub fn sorted_map<V: Serialize, S: Serializer>(
    map: &std::collections::HashMap<String, V>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_map(map.iter().collect::<std::collections::BTreeMap<_, _>>())
}

/// Serializers that print a config value without the credential it may carry inline.
pub mod redact {
    use serde::Serializer;

    /// What a redacted value becomes.
    pub const REDACTED: &str = "<redacted>";

    /// librdkafka properties whose values are credentials (`sasl.password`, `ssl.key.password`,
    /// `sasl.jaas.config`, `sasl.oauthbearer.client.secret`, an inline `ssl.key.pem`, ...). Paths such as
    /// `ssl.key.location` are not.
    pub fn is_credential_property(key: &str) -> bool {
        let key = key.to_ascii_lowercase();
        ["password", "secret", "jaas", "token", "ssl.key.pem", "credentials"].iter().any(|part| key.contains(part))
    }

    pub fn kafka_properties<S: Serializer>(
        properties: &std::collections::BTreeMap<String, String>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.collect_map(
            properties
                .iter()
                .map(|(key, value)| (key, if is_credential_property(key) { REDACTED } else { value.as_str() })),
        )
    }

    /// `scheme://user:password@host/...` without the password (`scheme://user:<redacted>@host/...`); a URL with
    /// no password is unchanged.
    pub fn url_password(url: &str) -> String {
        let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(authority_end);
        let Some((userinfo, host)) = authority.rsplit_once('@') else { return url.to_owned() };
        match userinfo.split_once(':') {
            Some((user, _password)) => format!("{scheme}://{user}:{REDACTED}@{host}{tail}"),
            // `redis://secret@host`: a lone userinfo is a password to Redis.
            None if scheme.starts_with("redis") => format!("{scheme}://{REDACTED}@{host}{tail}"),
            None => url.to_owned(),
        }
    }

    /// A comma-separated list of URLs (Redis cluster seeds), each without its password.
    pub fn url_list_passwords<S: Serializer>(urls: &str, serializer: S) -> Result<S::Ok, S::Error> {
        let redacted: Vec<String> = urls.split(',').map(url_password).collect();
        serializer.serialize_str(&redacted.join(","))
    }

    pub fn optional_url_password<S: Serializer>(url: &Option<String>, serializer: S) -> Result<S::Ok, S::Error> {
        match url {
            Some(url) => serializer.serialize_str(&url_password(url)),
            None => serializer.serialize_none(),
        }
    }

    /// A URL whose path is itself the credential (a Slack incoming webhook, `https://hooks.slack.com/services/
    /// T0/B0/XXXX`): only the scheme and host are printed.
    pub fn optional_url_path<S: Serializer>(url: &Option<String>, serializer: S) -> Result<S::Ok, S::Error> {
        match url {
            Some(url) => {
                let printed = match url.split_once("://") {
                    Some((scheme, rest)) => {
                        let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
                        let host = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
                        format!("{scheme}://{host}/{REDACTED}")
                    }
                    None => REDACTED.to_owned(),
                };
                serializer.serialize_str(&printed)
            }
            None => serializer.serialize_none(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_validity_parses_rfc3339_and_refuses_nonsense() {
        let secret = SecretRef {
            not_before: Some("2026-06-01T00:00:00Z".into()),
            not_after: Some("2026-07-01T00:00:00.5Z".into()),
            ..SecretRef::from_env("s", "VAR")
        };
        assert_eq!(secret.validity_ms(), Ok((Some(1_780_272_000_000), Some(1_782_864_000_500))));
        let reversed =
            SecretRef { not_before: secret.not_after.clone(), not_after: secret.not_before.clone(), ..secret };
        assert!(reversed.validity_ms().is_err_and(|problem| problem.contains("not_before is after not_after")));
        let garbage = SecretRef { not_after: Some("next tuesday".into()), ..SecretRef::from_file("s", "/f") };
        assert!(garbage.validity_ms().is_err_and(|problem| problem.contains("RFC 3339")));
        assert_eq!(SecretRef::from_file("s", "/f").validity_ms(), Ok((None, None)));
    }

    #[test]
    fn a_refused_kafka_property_names_itself() {
        let mut kafka = KafkaConfig::default();
        kafka.record_auth.keys = vec![SecretRef::from_env("k1", "HOOKLINE_RECORD_KEY_K1")];
        for (key, value) in [("acks", "1"), ("Enable.Idempotence", "false"), ("enable.auto.offset.store", "true")] {
            kafka.properties.insert(key.to_owned(), value.to_owned());
        }
        kafka.properties.insert("client.rack".to_owned(), "rack-1".to_owned());
        let mut problems = Problems::default();
        kafka.validate(&mut problems);
        let Err(ConfigError::Invalid(problems)) = problems.into_result() else { panic!("refused") };
        assert_eq!(problems.len(), 3, "{problems:?}");
        for key in ["\"acks\"", "\"Enable.Idempotence\"", "\"enable.auto.offset.store\""] {
            assert!(problems.iter().any(|problem| problem.contains(key) && problem.contains("refused")), "{key}");
        }
        // Never applied either, for a config that skipped validation.
        let config = crate::kafka::producer_config(&kafka);
        assert_eq!(config.get("acks"), Some("all"));
        assert_eq!(config.get("enable.idempotence"), Some("true"));
        assert_eq!(config.get("client.rack"), Some("rack-1"));
    }

    #[test]
    fn inline_credentials_are_redacted_and_references_kept() {
        assert_eq!(redact::url_password("redis://app:hunter2@redis:6379/0"), "redis://app:<redacted>@redis:6379/0");
        assert_eq!(redact::url_password("rediss://hunter2@redis:6380"), "rediss://<redacted>@redis:6380");
        assert_eq!(redact::url_password("redis://redis:6379"), "redis://redis:6379");
        assert_eq!(redact::url_password("https://api.example.com/a@b"), "https://api.example.com/a@b");
        let redis = RedisConfig { url: "redis://:pw1@a:1,redis://:pw2@b:2".into(), ..RedisConfig::default() };
        let printed = effective_toml(&redis).unwrap();
        assert!(printed.contains(r#"url = "redis://:<redacted>@a:1,redis://:<redacted>@b:2""#), "{printed}");
        for (key, redacted) in [
            ("sasl.password", true),
            ("sasl.jaas.config", true),
            ("sasl.oauthbearer.client.secret", true),
            ("ssl.key.pem", true),
            ("ssl.key.location", false),
            ("security.protocol", false),
        ] {
            assert_eq!(redact::is_credential_property(key), redacted, "{key}");
        }
        let secret = SecretRef::from_file("v1", "/run/secrets/hookline/github-v1");
        let printed = effective_toml(&secret).unwrap();
        assert!(printed.contains("file = \"/run/secrets/hookline/github-v1\""), "{printed}");
    }
}
