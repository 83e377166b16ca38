//! The dead-letter replayer: a CLI and an HTTP admin API, with the same semantics, to list, inspect, re-drive
//! and discard dead-letter entries. An entry's id is `<dlq topic>:<partition>:<offset>`; its fate lives in the
//! compacted status topic. The replayer keeps nothing that Kafka does not hold ([`view`]).
//!
//! Re-driving produces the entry's raw body and headers back to the inbound topic; the consumer takes it through
//! its normal dedupe and handler path, so a replay is processed at most once however often it is sent.

pub mod api;
pub mod config;
pub mod filter;
pub mod metrics;
pub mod ops;
pub mod view;

use std::{
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use hookline_common::http::{Readiness, ServeLimits, serve};
use prometheus::Registry;
use secrecy::SecretSlice;
use tokio::net::TcpListener;
use tokio_util::{sync::CancellationToken, task::TaskTracker};

pub use crate::config::ReplayerConfig;
use crate::{api::Api, metrics::Metrics, ops::Replayer};

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("configuration: {0}")]
    Config(String),
    #[error("kafka")]
    Kafka(#[from] rdkafka::error::KafkaError),
    #[error("cannot register metrics")]
    Metrics(#[from] prometheus::Error),
}

/// Serves the admin API until `shutdown`. `/readyz` is true while the DLQ and status topics can be read.
pub async fn serve_api(
    config: ReplayerConfig,
    admin: TcpListener,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    let token = config
        .api_token
        .as_ref()
        .ok_or_else(|| ServeError::Config("`api_token` is required to serve the admin API".to_owned()))?
        .load()
        .map_err(ServeError::Config)?;
    let registry = Registry::new();
    let metrics = Metrics::register(&registry)?;
    let readiness = Arc::new(Readiness::default());
    let kafka_ready = readiness.check("kafka");
    let replayer = Replayer::new(config.clone())?;
    let api = Arc::new(Api {
        replayer: replayer.clone(),
        token: SecretSlice::from(token),
        registry,
        readiness,
        metrics: metrics.clone(),
    });
    let tasks = TaskTracker::new();
    let handler = move |request| api.clone().handle(request);
    tasks.spawn(serve(admin, handler, ServeLimits::default(), shutdown.child_token()));

    let interval = Duration::from_secs(config.refresh_interval_s);
    loop {
        match replayer.view().await {
            Ok(view) => {
                kafka_ready.store(true, Ordering::Relaxed);
                metrics.set_entries(&view.entries);
            }
            Err(error) => {
                kafka_ready.store(false, Ordering::Relaxed);
                tracing::warn!(error = %error, "cannot read the dead-letter topics");
            }
        }
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep(interval) => {}
        }
    }
    tasks.close();
    tasks.wait().await;
    Ok(())
}
