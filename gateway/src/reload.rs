//! Secret rotation without a restart: on SIGHUP, or `POST /admin/reload` on the admin listener, the config is read
//! again (from its file when the gateway has one, else the running config, so secret files and variables are
//! re-read) and every source is rebuilt. Only a config that validates completely replaces the running one, in one
//! atomic swap; a bad one is rejected with a log line naming every problem, and the old one keeps serving.
//!
//! Sources (schemes, secrets, limits per source, topics, identity, forwarded headers) reload. Listeners, Kafka
//! settings and global limits need a restart; a reload that changes them says so and applies the sources only.

use std::{path::PathBuf, sync::Arc};

use hookline_common::config::ConfigError;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use crate::{config::GatewayConfig, ingest::Ingest, source::SourceTable};

/// Where a reload reads the config from.
#[derive(Debug, Clone)]
pub enum ConfigOrigin {
    /// A TOML file, read again on every reload (with environment overrides, as at start-up).
    File(PathBuf),
    /// The config the gateway started with (tests, embedded use): secrets are still re-read from their files and
    /// environment variables.
    Fixed(Box<GatewayConfig>),
}

/// What a reload did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reloaded {
    pub n_sources: usize,
}

#[derive(Debug)]
pub struct Reloader {
    origin: ConfigOrigin,
    ingest: Arc<Ingest>,
    /// The settings a reload cannot change, as first loaded, to warn when a new file changes them.
    restart_only: String,
    /// One reload at a time: two concurrent ones could otherwise swap in the older file last.
    serial: Mutex<()>,
}

fn restart_only_settings(config: &GatewayConfig) -> String {
    format!("{}|{}|{:?}|{:?}", config.listen_addr, config.admin_addr, config.kafka, config.limits)
}

impl Reloader {
    pub fn new(origin: ConfigOrigin, running: &GatewayConfig, ingest: Arc<Ingest>) -> Self {
        Self { origin, ingest, restart_only: restart_only_settings(running), serial: Mutex::new(()) }
    }

    /// Reads, validates and swaps in the config; on any problem keeps the running one and returns every problem.
    pub async fn reload(&self) -> Result<Reloaded, Vec<String>> {
        let _serial = self.serial.lock().await;
        let origin = self.origin.clone();
        // Reading files is blocking work; keep it off the runtime's threads.
        let built = tokio::task::spawn_blocking(move || load_and_build(&origin))
            .await
            .unwrap_or_else(|_| Err(vec!["the reload task panicked".to_owned()]));
        let metrics = self.ingest.metrics();
        match built {
            Ok((config, table)) => {
                if restart_only_settings(&config) != self.restart_only {
                    tracing::warn!(
                        "config reload: listener, kafka or limits settings changed; they apply after a restart"
                    );
                }
                let n_sources = table.len();
                self.ingest.replace_sources(table);
                metrics.reloads.with_label_values(&["applied"]).inc();
                tracing::info!(sources = n_sources, "config reloaded");
                Ok(Reloaded { n_sources })
            }
            Err(problems) => {
                metrics.reloads.with_label_values(&["rejected"]).inc();
                tracing::error!(
                    problems = %problems.join("; "),
                    "config reload rejected; the previous config keeps serving"
                );
                Err(problems)
            }
        }
    }
}

fn load_and_build(origin: &ConfigOrigin) -> Result<(GatewayConfig, SourceTable), Vec<String>> {
    let config = match origin {
        ConfigOrigin::File(path) => GatewayConfig::load(Some(path)).map_err(problems_of)?,
        ConfigOrigin::Fixed(config) => {
            config.validate().map_err(problems_of)?;
            (**config).clone()
        }
    };
    let table = SourceTable::build(&config)?;
    Ok((config, table))
}

fn problems_of(error: ConfigError) -> Vec<String> {
    match error {
        ConfigError::Invalid(problems) => problems,
        ConfigError::Read { path, source } => vec![format!("cannot read {path}: {source}")],
        ConfigError::Parse { path, source } => vec![format!("{path} is not valid: {source}")],
    }
}

/// Reloads on every SIGHUP until `shutdown`.
pub async fn reload_on_sighup(reloader: Arc<Reloader>, shutdown: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut hangups) = signal(SignalKind::hangup()) else {
        tracing::error!("cannot install the SIGHUP handler; reload through the admin endpoint only");
        return;
    };
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            received = hangups.recv() => {
                if received.is_none() {
                    return;
                }
                tracing::info!("SIGHUP: reloading the config");
                let _ = reloader.reload().await;
            }
        }
    }
}
