//! The consumer's configuration.

use std::path::Path;

use hookline_common::config::{self, ConfigError, KafkaConfig, Problems, RedisConfig, env};
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConsumerConfig {
    /// Admin listener for `/livez`, `/readyz`, `/metrics`.
    pub admin_addr: String,
    pub kafka: KafkaConfig,
    pub redis: RedisConfig,
    pub handler: HandlerConfig,
    pub retry: RetryConfig,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        Self {
            admin_addr: "127.0.0.1:9091".to_owned(),
            kafka: KafkaConfig::default(),
            redis: RedisConfig::default(),
            handler: HandlerConfig::default(),
            retry: RetryConfig::default(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HandlerConfig {
    /// Built-in handler: `log` writes one structured line per event.
    pub kind: String,
    /// A handler call that takes longer is a retryable failure. Must stay below `redis.claim_lease_ms`, so a
    /// claim cannot expire while its event is still being processed.
    pub timeout_ms: u64,
}

impl Default for HandlerConfig {
    fn default() -> Self {
        Self { kind: "log".to_owned(), timeout_ms: 10_000 }
    }
}

/// Retries of retryable handler failures: exponential backoff with jitter.
#[derive(Debug, Clone, Deserialize)]
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

pub const BUILT_IN_HANDLERS: &[&str] = &["log"];

impl ConsumerConfig {
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigError> {
        let mut config: Self = match path {
            Some(path) => config::load_file(path)?,
            None => Self::default(),
        };
        config.kafka.apply_env();
        config.redis.apply_env();
        config::env_override(env::ADMIN_ADDR, &mut config.admin_addr);
        config.validate()?;
        Ok(config)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut problems = Problems::default();
        self.kafka.validate(&mut problems);
        self.redis.validate(&mut problems);
        problems.check(
            BUILT_IN_HANDLERS.contains(&self.handler.kind.as_str()),
            format!("handler.kind `{}` is unknown (known: {})", self.handler.kind, BUILT_IN_HANDLERS.join(", ")),
        );
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
        problems.into_result()
    }
}
