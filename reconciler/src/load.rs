//! Loading a config: read it, check it, and read each source's API credential, once. A config is valid exactly
//! when this succeeds; the service and the CLI run what [`Loaded::build`] returns, and nothing reads a
//! credential a second time.

use std::{collections::HashMap, path::Path};

use hookline_common::config::{ConfigError, Problems};
use secrecy::SecretString;

use crate::config::ReconcilerConfig;

/// A config and the credentials it names, by source.
#[derive(Debug)]
pub struct Loaded {
    pub config: ReconcilerConfig,
    credentials: HashMap<String, SecretString>,
}

impl Loaded {
    /// Reads the file (if any) with environment overrides, then [`Self::build`]s it.
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigError> {
        Self::build(ReconcilerConfig::read(path)?)
    }

    /// Checks `config` and reads every source's credential; on failure returns every problem at once.
    pub fn build(config: ReconcilerConfig) -> Result<Self, ConfigError> {
        let mut problems = Problems::default();
        config.check_settings(&mut problems);
        hookline_common::redis_security::check(&config.redis, &mut problems);
        let mut credentials = HashMap::new();
        for source in &config.sources {
            let credential = source.credential.load().map_err(|problem| problem.to_string()).and_then(|bytes| {
                String::from_utf8(bytes).map_err(|_| format!("secret `{}` is not UTF-8", source.credential.id))
            });
            match credential {
                Ok(text) => {
                    credentials.insert(source.name.clone(), SecretString::from(text));
                }
                Err(problem) => problems.push(format!("source `{}`: credential: {problem}", source.name)),
            }
        }
        problems.into_result()?;
        Ok(Self { config, credentials })
    }

    /// The API credential of source `name`.
    pub fn credential(&self, name: &str) -> Option<&SecretString> {
        self.credentials.get(name)
    }
}
