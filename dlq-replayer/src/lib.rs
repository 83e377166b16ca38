//! The dead-letter replayer: a CLI and an HTTP admin API, with the same semantics, to list, inspect, re-drive
//! and discard dead-letter entries. An entry's id is `<dlq topic>:<partition>:<offset>`; its fate lives in the
//! compacted status topic. The replayer keeps nothing that Kafka does not hold: its [`index`] of entries and
//! fates (metadata, not bodies) is built from the two topics and advanced by tailing them.
//!
//! Re-driving produces the entry's raw body and headers back to the inbound topic; the consumer takes it through
//! its normal dedupe and handler path, so a replay is processed at most once however often it is sent.
//! A replay is addressed to the service that dead-lettered the entry (`hookline-service`); `reprocess` re-drives
//! events a service already processed, from the inbound topic, to that one service ([`ops`]).

pub mod api;
pub mod app;
pub mod config;
pub mod console;
pub mod events;
pub mod fetch;
pub mod filter;
pub mod flow;
pub mod index;
mod login_throttle;
pub mod lookup;
pub mod metrics;
pub mod ops;
pub mod rejections;
pub mod session;

use std::{
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use hookline_common::http::{Readiness, ServeLimits, serve};
use http::Request;
use hyper::body::Incoming;
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
    /// The API token's secret cannot be read. (Its Display says why, so it is not also its source: an error chain
    /// prints it once.)
    #[error("configuration: {0}")]
    ApiToken(hookline_common::config::SecretError),
    /// (Its Display says why, so it is not also its source: an error chain prints it once.)
    #[error("configuration: {0}")]
    Rejections(rejections::GathererError),
    /// (Its Display says why, so it is not also its source: an error chain prints it once.)
    #[error("configuration: {0}")]
    Flow(flow::FlowError),
    #[error("kafka")]
    Kafka(#[from] rdkafka::error::KafkaError),
    #[error("cannot register metrics")]
    Metrics(#[from] prometheus::Error),
}

/// The shortest API token `serve` accepts: it guards re-drives and discards from anyone who reaches the listener.
pub const MIN_TOKEN_BYTES: usize = 32;

/// Serves the admin API until `shutdown`. The index is built once, then kept current by a thread tailing the
/// DLQ and status topics; `/readyz` is true once it has caught up, and while the tail runs.
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
        .map_err(ServeError::ApiToken)?;
    if token.len() < MIN_TOKEN_BYTES {
        return Err(ServeError::Config(format!(
            "`api_token` must be at least {MIN_TOKEN_BYTES} characters (it has {}): use a random one, e.g. \
             `openssl rand -hex 32`",
            token.len()
        )));
    }
    // A broker that refuses our TLS or SASL settings is a configuration error, not an outage to wait out.
    hookline_common::kafka_security::check_broker_accepts(
        &config.kafka,
        hookline_common::kafka_security::ACCEPT_CHECK_WAIT,
    )
    .await?;
    let registry = Registry::new();
    let metrics = Metrics::register(&registry)?;
    let readiness = Arc::new(Readiness::default());
    let kafka_ready = readiness.check("kafka");
    let index = Arc::new(Replayer::empty_index(&config)?);
    let tail_stop = shutdown.child_token();
    let tail = {
        let (kafka, index, stop) = (config.kafka.clone(), index.clone(), tail_stop.clone());
        std::thread::Builder::new()
            .name("dlq-index".to_owned())
            .spawn(move || {
                // The tail ends only on shutdown or when Kafka cannot be read at all; then it starts over.
                while !stop.is_cancelled() {
                    if let Err(error) = index::tail(&kafka, &index, true, &stop, Duration::from_secs(30)) {
                        tracing::warn!(error = %error, "tailing the dead-letter topics failed; retrying");
                        std::thread::sleep(Duration::from_secs(1));
                    }
                }
            })
            .map_err(|error| ServeError::Config(format!("cannot start the index thread: {error}")))?
    };
    let rejections = rejections::Gatherer::new(&config.gateways).map_err(ServeError::Rejections)?;
    let replayer = Replayer::live(config.clone(), index.clone())?;
    let flow = Arc::new(flow::Flow::new(&config).map_err(ServeError::Flow)?);
    let api = Arc::new(Api {
        replayer: replayer.clone(),
        token: SecretSlice::from(token),
        registry,
        readiness,
        metrics: metrics.clone(),
        console: session::Console::default(),
        rejections,
        lookup: lookup::Lookup::new(replayer.clone()),
        flow: flow.clone(),
    });
    let tasks = TaskTracker::new();
    tasks.spawn(flow.run(shutdown.child_token()));
    // Route states a replayed or tombstoned record shadows are written again before compaction can delete them.
    tasks.spawn(replayer.clone().keep_pauses(shutdown.child_token()));
    let router = app::router(api);
    let handler = move |request: Request<Incoming>| app::serve_on(router.clone(), request);
    tasks.spawn(serve(admin, handler, ServeLimits::default(), shutdown.child_token()));

    let interval = Duration::from_secs(config.refresh_interval_s);
    loop {
        let ready = index.is_caught_up() && !tail.is_finished();
        kafka_ready.store(ready, Ordering::Relaxed);
        if ready {
            metrics.refresh(&index, hookline_common::wire::now_ms());
        }
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep(if ready { interval } else { Duration::from_millis(200) }) => {}
        }
    }
    tail_stop.cancel();
    tasks.close();
    tasks.wait().await;
    let _ = tokio::task::spawn_blocking(move || tail.join()).await;
    Ok(())
}
