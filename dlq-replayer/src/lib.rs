//! The dead-letter replayer: reads the DLQ topic to list and inspect entries. Re-driving and discarding
//! entries, with each entry's fate recorded in the DLQ status topic, are not built yet.
//!
//! [`serve`] runs the admin listener (`/livez`, `/readyz`, `/metrics`); [`entries::read_all`] backs `list`.

pub mod config;
pub mod entries;

use std::{
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use hookline_common::http::{Readiness, serve_admin};
use prometheus::{IntGauge, Registry};
use tokio::net::TcpListener;
use tokio_util::{sync::CancellationToken, task::TaskTracker};

pub use crate::config::ReplayerConfig;

const REFRESH_INTERVAL: Duration = Duration::from_secs(15);

/// Serves the admin listener until `shutdown`; `/readyz` is true while the DLQ topic can be read, and
/// `hookline_dlq_entries` reports how many entries it holds.
pub async fn serve(
    config: ReplayerConfig,
    admin: TcpListener,
    shutdown: CancellationToken,
) -> Result<(), prometheus::Error> {
    let registry = Registry::new();
    let entries_gauge = IntGauge::new("hookline_dlq_entries", "Entries in the dead-letter topic.")?;
    registry.register(Box::new(entries_gauge.clone()))?;
    let readiness = Arc::new(Readiness::default());
    let kafka_ready = readiness.check("kafka");
    let tasks = TaskTracker::new();
    tasks.spawn(serve_admin(admin, registry, readiness, shutdown.child_token()));
    loop {
        let kafka = config.kafka.clone();
        match tokio::task::spawn_blocking(move || entries::read_all(&kafka)).await {
            Ok(Ok(entries)) => {
                kafka_ready.store(true, Ordering::Relaxed);
                entries_gauge.set(i64::try_from(entries.len()).unwrap_or(i64::MAX));
            }
            Ok(Err(error)) => {
                kafka_ready.store(false, Ordering::Relaxed);
                tracing::warn!(error = %error, "cannot read the dead-letter topic");
            }
            Err(error) => tracing::error!(error = %error, "dead-letter reader panicked"),
        }
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep(REFRESH_INTERVAL) => {}
        }
    }
    tasks.close();
    tasks.wait().await;
    Ok(())
}
