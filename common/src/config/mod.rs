//! Configuration pieces every service shares, and the one way a service loads its config:
//! defaults, then a TOML file, then environment overrides, then `validate()`, which reports every problem at once
//! before any port is bound. The sections every service shares: `[kafka]` ([`KafkaConfig`], with its TLS, SASL
//! and record keys) and `[redis]` ([`RedisConfig`]); credentials are [`SecretRef`]s, printed through [`redact`].
//!
//! This module only describes and checks settings; the modules that act on them ([`crate::kafka`],
//! [`crate::kafka_security`], [`crate::redis_security`], [`crate::record_auth`]) depend on it, never the reverse.

use std::{fmt, path::Path};

use serde::{Serialize, Serializer, de::DeserializeOwned};

pub use toml::{Table, ser::Error as PrintError};

mod kafka;
mod record_auth;
pub mod redact;
mod redis;
mod secret;

pub use kafka::{KafkaConfig, KafkaSaslConfig, KafkaTlsConfig, REFUSED_PROPERTIES, SaslMechanism, refused_property};
pub use record_auth::{AcceptUnsignedUntilError, MIN_RECORD_KEY_BYTES, RecordAuthConfig};
pub use redis::{RedisConfig, RedisTls};
pub use secret::{SecretError, SecretRef, ValidityError};

/// Environment variables that override the file, the same for every service.
pub mod env {
    pub const CONFIG: &str = "HOOKLINE_CONFIG";
    pub const KAFKA_BROKERS: &str = "HOOKLINE_KAFKA_BROKERS";
    pub const REDIS_URL: &str = "HOOKLINE_REDIS_URL";
    pub const LISTEN_ADDR: &str = "HOOKLINE_LISTEN_ADDR";
    pub const ADMIN_ADDR: &str = "HOOKLINE_ADMIN_ADDR";
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

    /// Every problem, one line each.
    pub fn into_lines(self) -> Vec<String> {
        self.0
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
        assert!(
            reversed.validity_ms().is_err_and(|problem| problem.to_string().contains("not_before is after not_after"))
        );
        let garbage = SecretRef { not_after: Some("next tuesday".into()), ..SecretRef::from_file("s", "/f") };
        assert!(garbage.validity_ms().is_err_and(|problem| problem.to_string().contains("RFC 3339")));
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
