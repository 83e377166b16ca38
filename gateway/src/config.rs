//! The gateway's configuration: listeners, Kafka, limits and the sources it serves.

use std::path::Path;

use hookline_common::{
    config::{self, ConfigError, KafkaConfig, Problems, SecretRef, env},
    signature::SCHEME_NAMES,
};
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GatewayConfig {
    /// Public listener for `POST /webhooks/{source}`.
    pub listen_addr: String,
    /// Admin listener for `/livez`, `/readyz`, `/metrics`.
    pub admin_addr: String,
    pub kafka: KafkaConfig,
    pub limits: Limits,
    pub sources: Vec<SourceConfig>,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self {
            listen_addr: "127.0.0.1:8080".to_owned(),
            admin_addr: "127.0.0.1:9090".to_owned(),
            kafka: KafkaConfig::default(),
            limits: Limits::default(),
            sources: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Requests being handled at once; past it the gateway answers 503 at once rather than queueing.
    pub max_in_flight: usize,
    /// A client that has not sent its whole request head by then is disconnected.
    pub header_read_timeout_ms: u64,
    /// A client that has not sent its whole body by then gets 408.
    pub body_read_timeout_ms: u64,
    /// How long in-flight requests may take to finish on shutdown.
    pub drain_deadline_ms: u64,
    /// Seconds advertised in `Retry-After` on a 503.
    pub retry_after_s: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_in_flight: 1024,
            header_read_timeout_ms: 10_000,
            body_read_timeout_ms: 30_000,
            drain_deadline_ms: 15_000,
            retry_after_s: 5,
        }
    }
}

/// Default body limit: a little under the broker's default `message.max.bytes` (1 MiB), so an accepted body
/// always fits in one record. Raise it together with the topic's `max.message.bytes`.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1_000_000;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    /// Served at `POST /webhooks/{name}`.
    pub name: String,
    /// Signature scheme name (see `hookline_common::signature::SCHEME_NAMES`).
    pub scheme: String,
    /// Secrets tried in order; more than one during a rotation.
    pub secrets: Vec<SecretRef>,
    #[serde(default = "default_max_body_bytes")]
    pub max_body_bytes: usize,
}

fn default_max_body_bytes() -> usize {
    DEFAULT_MAX_BODY_BYTES
}

impl GatewayConfig {
    /// Defaults, then the file (if any), then environment overrides, then validation.
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigError> {
        let mut config: Self = match path {
            Some(path) => config::load_file(path)?,
            None => Self::default(),
        };
        config.kafka.apply_env();
        config::env_override(env::LISTEN_ADDR, &mut config.listen_addr);
        config::env_override(env::ADMIN_ADDR, &mut config.admin_addr);
        config.validate()?;
        Ok(config)
    }

    /// Reports every problem at once. Secrets are loaded here too, so a missing one stops start-up.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut problems = Problems::default();
        self.kafka.validate(&mut problems);
        problems.check(self.limits.max_in_flight > 0, "limits.max_in_flight must be positive");
        problems.check(self.sources.iter().len() > 0, "no [[sources]] configured: the gateway would serve nothing");
        let mut seen = std::collections::HashSet::new();
        for source in &self.sources {
            let name = &source.name;
            problems.check(
                !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
                format!("source name `{name}` must be non-empty and use only letters, digits, `-` and `_`"),
            );
            problems.check(seen.insert(name.clone()), format!("source `{name}` is declared twice"));
            problems.check(
                SCHEME_NAMES.contains(&source.scheme.as_str()),
                format!("source `{name}`: unknown scheme `{}` (known: {})", source.scheme, SCHEME_NAMES.join(", ")),
            );
            problems.check(
                !source.secrets.is_empty(),
                format!("source `{name}` has no secrets: it would accept nothing, or worse"),
            );
            for secret in &source.secrets {
                if let Err(problem) = secret.load() {
                    problems.push(format!("source `{name}`: {problem}"));
                }
            }
            problems.check(source.max_body_bytes > 0, format!("source `{name}`: max_body_bytes must be positive"));
        }
        problems.into_result()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_problem_is_reported_at_once() {
        let config: GatewayConfig = config::parse_str(
            r#"
            [kafka]
            brokers = ""
            [[sources]]
            name = "bad name"
            scheme = "nope"
            secrets = []
            [[sources]]
            name = "gh"
            scheme = "github"
            secrets = [{ id = "a", env = "HOOKLINE_TEST_SURELY_UNSET_VARIABLE" }]
            "#,
            "test",
        )
        .unwrap();
        let Err(ConfigError::Invalid(problems)) = config.validate() else { panic!("expected invalid") };
        let all = problems.join("\n");
        for expected in [
            "kafka.brokers",
            "bad name",
            "unknown scheme `nope`",
            "has no secrets",
            "HOOKLINE_TEST_SURELY_UNSET_VARIABLE",
        ] {
            assert!(all.contains(expected), "{expected} not in {all}");
        }
    }

    #[test]
    fn unknown_keys_are_rejected() {
        let parsed = config::parse_str::<GatewayConfig>("listen_adr = \"x\"", "test");
        assert!(matches!(parsed, Err(ConfigError::Parse { .. })));
    }
}
