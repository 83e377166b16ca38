//! Secret rotation without a restart: on SIGHUP, or `POST /admin/reload` on the admin listener, the config is read
//! again (from its file when the gateway has one, else the running config, so secret files and variables are
//! re-read) and every source is rebuilt. Only a config that validates completely replaces the running one, in one
//! atomic swap; a bad one is rejected with a log line naming every problem, and the old one keeps serving.
//!
//! Sources (schemes, secrets, limits per source, quotas, topics, identity, forwarded headers) reload, and with them
//! the quota defaults `limits.source_rate_per_s` and `limits.source_burst` (each source's quota is resolved when it
//! is built; the quota cells outlive the reload, see [`crate::quota`]). Listeners, Kafka settings and the other
//! global limits need a restart; a reload that changes them says so and applies the sources only.

use std::{path::PathBuf, sync::Arc};

use hookline_common::config::ConfigError;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use crate::{config::GatewayConfig, ingest::Ingest, load::Loaded};

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
    // The quota defaults apply on a reload, with the sources.
    let limits = crate::config::Limits { source_rate_per_s: 0.0, source_burst: 0, ..config.limits.clone() };
    format!("{}|{}|{:?}|{:?}|{:?}", config.listen_addr, config.admin_addr, config.kafka, config.producer, limits)
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
            Ok(Loaded { config, sources: table, .. }) => {
                if restart_only_settings(&config) != self.restart_only {
                    tracing::warn!(
                        "config reload: listener, kafka, producer or limits settings changed; they apply after a restart"
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

fn load_and_build(origin: &ConfigOrigin) -> Result<Loaded, Vec<String>> {
    match origin {
        ConfigOrigin::File(path) => Loaded::load(Some(path)),
        ConfigOrigin::Fixed(config) => Loaded::build((**config).clone()),
    }
    .map_err(problems_of)
}

fn problems_of(error: ConfigError) -> Vec<String> {
    match error {
        ConfigError::Invalid(problems) => problems,
        ConfigError::Read { path, source } => vec![format!("cannot read {path}: {source}")],
        // The message only, not the parser's excerpt of the file: a misplaced inline secret would be in it.
        ConfigError::Parse { path, source } => vec![format!("{path} is not valid TOML: {}", source.message())],
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

#[cfg(test)]
mod tests {
    use prometheus::Registry;

    use super::*;
    use crate::{metrics::Metrics, produce::EventProducer};

    fn temp_path(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("hookline-reload-{}-{name}", std::process::id()))
    }

    fn config_text(secret_path: &std::path::Path, extra_source: &str) -> String {
        let key_path = temp_path("record-key");
        std::fs::write(&key_path, "a-record-key-of-at-least-thirty-two-bytes").unwrap();
        format!(
            "[kafka]\nbrokers = \"127.0.0.1:1\"\n[kafka.record_auth]\nkeys = [{{ id = \"k1\", file = \"{}\" }}]\n[[sources]]\nname = \"gh\"\nscheme = \"github\"\ntype_from_header = true\nsecrets = [{{ id = \"a\", file = \"{}\" }}]\n{extra_source}",
            key_path.display(),
            secret_path.display()
        )
    }

    #[tokio::test]
    async fn a_file_reload_applies_a_valid_config_and_rejects_a_bad_one_keeping_the_old() {
        let secret_path = temp_path("secret");
        let config_path = temp_path("gateway.toml");
        std::fs::write(&secret_path, "s3cret").unwrap();
        std::fs::write(&config_path, config_text(&secret_path, "")).unwrap();
        let Loaded { config, sources, .. } = Loaded::load(Some(&config_path)).unwrap();
        let metrics = Metrics::register(&Registry::new()).unwrap();
        // Creating a producer does not connect; no broker is needed here.
        let producer = EventProducer::new(&config.kafka, &config.producer).unwrap();
        let fetcher = crate::key_fetch::KeyFetcher::new(&config.key_fetch, metrics.clone()).unwrap();
        let ingest = Arc::new(Ingest::new(&config.limits, sources, producer, metrics, fetcher));
        let reloader = Reloader::new(ConfigOrigin::File(config_path.clone()), &config, ingest.clone());

        let added = "[[sources]]\nname = \"stripe\"\nscheme = \"stripe\"\nsecrets = [{ id = \"b\", env = \"PATH\" }]\n";
        std::fs::write(&config_path, config_text(&secret_path, added)).unwrap();
        assert_eq!(reloader.reload().await, Ok(Reloaded { n_sources: 2 }));
        assert!(ingest.sources().get("stripe").is_some());

        // An unknown scheme and a missing secret: rejected with both problems, the two sources keep serving.
        let broken = "[[sources]]\nname = \"x\"\nscheme = \"nope\"\nsecrets = [{ id = \"c\", env = \"HOOKLINE_SURELY_UNSET_VAR\" }]\n";
        std::fs::write(&config_path, config_text(&secret_path, broken)).unwrap();
        let problems = reloader.reload().await.unwrap_err().join("\n");
        assert!(problems.contains("unknown scheme `nope`"), "{problems}");
        assert!(problems.contains("HOOKLINE_SURELY_UNSET_VAR"), "{problems}");
        assert_eq!(ingest.sources().len(), 2);

        std::fs::write(&config_path, "secret = \"sk_live_do_not_echo\"\n").unwrap();
        let problems = reloader.reload().await.unwrap_err().join("");
        assert!(problems.contains("is not valid TOML"), "{problems}");
        assert!(!problems.contains("sk_live_do_not_echo"), "a misplaced secret is not echoed: {problems}");
        assert_eq!(ingest.sources().len(), 2);
        assert_eq!(ingest.metrics().reloads.with_label_values(&["rejected"]).get(), 2);
        assert_eq!(ingest.metrics().reloads.with_label_values(&["applied"]).get(), 1);
        let _ = std::fs::remove_file(&secret_path);
        let _ = std::fs::remove_file(&config_path);
    }
}
