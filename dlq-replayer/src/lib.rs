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
pub mod identity;
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
    // The shared token: one admin for everyone, for a local demo only (docs/security.md, F14).
    let token = match config.api_token.as_ref() {
        Some(reference) => {
            let token = reference.load().map_err(ServeError::ApiToken)?;
            if token.len() < MIN_TOKEN_BYTES {
                return Err(ServeError::Config(format!(
                    "`api_token` must be at least {MIN_TOKEN_BYTES} characters (it has {}): use a random one, e.g. \
                     `openssl rand -hex 32`",
                    token.len()
                )));
            }
            tracing::warn!(
                "`api_token` is set: everyone who holds it is one admin, recorded as `{}`. It is for a local demo \
                 only; give each operator a scoped token (`hookline-replayer tokens create`) and remove it",
                identity::SHARED_TOKEN_SUBJECT
            );
            Some(SecretSlice::from(token))
        }
        None => None,
    };
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
    let tokens_ready = readiness.check("tokens");
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
    let replayer = Replayer::live(config.clone(), index.clone())?;
    replayer.ensure_identity_topics().await.map_err(|error| match error {
        ops::OpError::Kafka(error) => ServeError::Kafka(error),
        other => ServeError::Config(format!("cannot create the tokens and audit topics: {other}")),
    })?;
    let tokens = Arc::new(identity::tokens::LiveTokens::default());
    let tokens_tail = {
        let (kafka, keys, tokens, stop) =
            (config.kafka.clone(), replayer.record_keys().clone(), tokens.clone(), tail_stop.clone());
        let topic = config.tokens_topic();
        std::thread::Builder::new()
            .name("tokens-tail".to_owned())
            .spawn(move || {
                while !stop.is_cancelled() {
                    if let Err(error) = identity::tokens::tail(&kafka, &topic, &keys, &tokens, &stop) {
                        tracing::warn!(error = %error, "tailing the tokens topic failed; retrying");
                        std::thread::sleep(Duration::from_secs(1));
                    }
                }
            })
            .map_err(|error| ServeError::Config(format!("cannot start the tokens thread: {error}")))?
    };
    let oidc = match &config.oidc {
        Some(oidc) => {
            let secret = oidc
                .client_secret
                .as_ref()
                .ok_or_else(|| ServeError::Config("`oidc.client_secret` is required".to_owned()))?
                .load()
                .map_err(ServeError::ApiToken)?;
            let secret = String::from_utf8(secret)
                .map_err(|_| ServeError::Config("`oidc.client_secret` is not UTF-8".to_owned()))?;
            let http = hookline_common::http_client::client(oidc.ca_file.as_deref().map(std::path::Path::new))
                .map_err(|error| ServeError::Config(format!("oidc.ca_file: {error}")))?;
            Some(identity::oidc::OidcClient::new(oidc.clone(), secret.trim().to_owned().into(), http))
        }
        None => None,
    };
    let rejections = rejections::Gatherer::new(&config.gateways).map_err(ServeError::Rejections)?;
    let flow = Arc::new(flow::Flow::new(&config).map_err(ServeError::Flow)?);
    let api = Arc::new(Api {
        replayer: replayer.clone(),
        token,
        tokens: tokens.clone(),
        oidc,
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
    // Token states a replayed or tombstoned record shadows (a revocation above all) are written again too.
    tasks.spawn(replayer.clone().keep_tokens(tokens.clone(), shutdown.child_token()));
    let router = app::router(api);
    let handler = move |request: Request<Incoming>| app::serve_on(router.clone(), request);
    tasks.spawn(serve(admin, handler, ServeLimits::default(), shutdown.child_token()));

    let interval = Duration::from_secs(config.refresh_interval_s);
    loop {
        let ready = index.is_caught_up() && !tail.is_finished();
        kafka_ready.store(ready, Ordering::Relaxed);
        tokens_ready.store(tokens.is_caught_up() && !tokens_tail.is_finished(), Ordering::Relaxed);
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
    let _ = tokio::task::spawn_blocking(move || (tail.join(), tokens_tail.join())).await;
    Ok(())
}
