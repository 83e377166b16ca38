//! The replayer's configuration.

use std::path::Path;

use hookline_common::config::{self, ConfigError, KafkaConfig, Problems, env};
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReplayerConfig {
    /// Admin listener for `/livez`, `/readyz`, `/metrics` (`serve`).
    pub admin_addr: String,
    pub kafka: KafkaConfig,
}

impl Default for ReplayerConfig {
    fn default() -> Self {
        Self { admin_addr: "127.0.0.1:9092".to_owned(), kafka: KafkaConfig::default() }
    }
}

impl ReplayerConfig {
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigError> {
        let mut config: Self = match path {
            Some(path) => config::load_file(path)?,
            None => Self::default(),
        };
        config.kafka.apply_env();
        config::env_override(env::ADMIN_ADDR, &mut config.admin_addr);
        let mut problems = Problems::default();
        config.kafka.validate(&mut problems);
        problems.into_result()?;
        Ok(config)
    }
}
