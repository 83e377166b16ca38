//! The gateway: the system's only public surface. For each `POST /webhooks/{source}` it verifies the signature
//! over the raw body, produces the body to the inbound Kafka topic, and answers 202 only after the broker's
//! acknowledgement (idempotent producer, `acks=all`). Broker trouble is a 503 with `Retry-After`, never a 2xx.
//!
//! [`run`] takes already-bound listeners so tests can run the real gateway in-process on port 0.

pub mod config;
pub mod error;
pub mod ingest;
pub mod metrics;
pub mod produce;

use std::{
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use hookline_common::http::{Readiness, ServeLimits, serve, serve_admin};
use prometheus::Registry;
use tokio::net::TcpListener;
use tokio_util::{sync::CancellationToken, task::TaskTracker};

pub use crate::{config::GatewayConfig, error::GatewayError};
use crate::{ingest::Ingest, metrics::Metrics, produce::EventProducer};

/// The gateway's bound sockets.
#[derive(Debug)]
pub struct Listeners {
    /// Public webhook traffic.
    pub public: TcpListener,
    /// `/livez`, `/readyz`, `/metrics`.
    pub admin: TcpListener,
}

const READINESS_INTERVAL: Duration = Duration::from_secs(2);
const FLUSH_DEADLINE: Duration = Duration::from_secs(10);

/// Runs the gateway until `shutdown` is cancelled: then it stops accepting, drains in-flight requests (each still
/// gets its real answer), and flushes the producer. Returns an error if the producer becomes unusable.
pub async fn run(config: GatewayConfig, listeners: Listeners, shutdown: CancellationToken) -> Result<(), GatewayError> {
    let registry = Registry::new();
    let metrics = Metrics::register(&registry)?;
    let producer = EventProducer::new(&config.kafka)?;
    let ingest = Arc::new(
        Ingest::new(&config, producer.clone(), metrics)
            .map_err(|problem| hookline_common::config::ConfigError::Invalid(vec![problem]))?,
    );
    let readiness = Arc::new(Readiness::default());
    let tasks = TaskTracker::new();
    let fatal = Arc::new(std::sync::Mutex::new(None::<String>));

    tasks.spawn(serve_admin(listeners.admin, registry, readiness.clone(), shutdown.child_token()));
    tasks.spawn(watch_producer(producer.clone(), readiness, fatal.clone(), shutdown.clone()));

    let limits = ServeLimits {
        header_read_timeout: Duration::from_millis(config.limits.header_read_timeout_ms),
        drain_deadline: Duration::from_millis(config.limits.drain_deadline_ms),
    };
    let handler = move |request| ingest.clone().handle(request);
    serve(listeners.public, handler, limits, shutdown.clone()).await;

    shutdown.cancel();
    tasks.close();
    tasks.wait().await;
    let flushed = tokio::task::spawn_blocking(move || producer.flush(FLUSH_DEADLINE)).await;
    if !matches!(flushed, Ok(Ok(()))) {
        tracing::warn!("producer flush did not complete; unacknowledged requests were already answered 503");
    }
    let fatal = fatal.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take();
    match fatal {
        Some(reason) => Err(GatewayError::ProducerFatal(reason)),
        None => Ok(()),
    }
}

/// Marks the gateway ready while the broker answers metadata requests for the inbound topic; on a fatal
/// producer error, records it and shuts the gateway down so the orchestrator restarts a clean process.
async fn watch_producer(
    producer: EventProducer,
    readiness: Arc<Readiness>,
    fatal: Arc<std::sync::Mutex<Option<String>>>,
    shutdown: CancellationToken,
) {
    let kafka_ready = readiness.check("kafka");
    loop {
        let probe = producer.clone();
        let reachable =
            tokio::task::spawn_blocking(move || probe.broker_reachable(READINESS_INTERVAL)).await.unwrap_or(false);
        kafka_ready.store(reachable, Ordering::Relaxed);
        if let Some(reason) = producer.fatal_error() {
            tracing::error!(error = %reason, "fatal producer error; shutting down");
            *fatal.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(reason);
            shutdown.cancel();
            return;
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(READINESS_INTERVAL) => {}
        }
    }
}
