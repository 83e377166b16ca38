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
pub mod reload;
pub mod source;

use std::{
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use hookline_common::http::{Body, Readiness, ServeLimits, admin_response, serve};
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use prometheus::Registry;
use tokio::net::TcpListener;
use tokio_util::{sync::CancellationToken, task::TaskTracker};

pub use crate::{config::GatewayConfig, error::GatewayError, reload::ConfigOrigin};
use crate::{error::json_response, ingest::Ingest, metrics::Metrics, produce::EventProducer, reload::Reloader};

/// The gateway's bound sockets.
#[derive(Debug)]
pub struct Listeners {
    /// Public webhook traffic.
    pub public: TcpListener,
    /// `/livez`, `/readyz`, `/metrics`, and `POST /admin/reload`.
    pub admin: TcpListener,
}

const READINESS_INTERVAL: Duration = Duration::from_secs(2);
const FLUSH_DEADLINE: Duration = Duration::from_secs(10);

/// The admin route that reloads the config (see [`reload`]).
pub const RELOAD_PATH: &str = "/admin/reload";

/// Runs the gateway until `shutdown` is cancelled: then it stops accepting, drains in-flight requests (each still
/// gets its real answer), and flushes the producer. Returns an error if the producer becomes unusable.
/// A reload (SIGHUP or [`RELOAD_PATH`]) re-reads the secrets of this same config.
pub async fn run(config: GatewayConfig, listeners: Listeners, shutdown: CancellationToken) -> Result<(), GatewayError> {
    let origin = ConfigOrigin::Fixed(Box::new(config.clone()));
    run_with_origin(config, origin, listeners, shutdown).await
}

/// [`run`], with reloads reading the config from `origin` (the config file, for the binary).
pub async fn run_with_origin(
    config: GatewayConfig,
    origin: ConfigOrigin,
    listeners: Listeners,
    shutdown: CancellationToken,
) -> Result<(), GatewayError> {
    let registry = Registry::new();
    let metrics = Metrics::register(&registry)?;
    let producer = EventProducer::new(&config.kafka)?;
    let ingest = Arc::new(
        Ingest::new(&config, producer.clone(), metrics).map_err(hookline_common::config::ConfigError::Invalid)?,
    );
    let reloader = Arc::new(Reloader::new(origin, &config, ingest.clone()));
    let readiness = Arc::new(Readiness::default());
    let tasks = TaskTracker::new();
    let fatal = Arc::new(std::sync::Mutex::new(None::<String>));

    tasks.spawn(serve_gateway_admin(
        listeners.admin,
        registry,
        readiness.clone(),
        reloader.clone(),
        shutdown.child_token(),
    ));
    tasks.spawn(watch_producer(producer.clone(), ingest.clone(), readiness, fatal.clone(), shutdown.clone()));
    tasks.spawn(reload::reload_on_sighup(reloader, shutdown.child_token()));

    let limits = public_serve_limits(&config.limits, hookline_common::http::open_files_limit());
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

/// File descriptors kept out of the public listener's reach: the admin listener's connections, the Kafka
/// client's sockets, secret and config files.
const RESERVED_FILE_DESCRIPTORS: usize = 256;

/// The public listener's limits; `max_connections` is lowered, with a warning, to what `open_files` leaves after
/// [`RESERVED_FILE_DESCRIPTORS`], so that silent connections cannot take the descriptors `/livez` and the producer
/// need.
fn public_serve_limits(limits: &config::Limits, open_files: Option<usize>) -> ServeLimits {
    let reserve = RESERVED_FILE_DESCRIPTORS.max(ServeLimits::default().max_connections * 2);
    let mut max_connections = limits.max_connections;
    if let Some(open_files) = open_files {
        let room = open_files.saturating_sub(reserve).max(1);
        if max_connections > room {
            tracing::warn!(
                configured = max_connections,
                open_files,
                lowered_to = room,
                "limits.max_connections is above what the open-file limit allows; raise `ulimit -n`"
            );
            max_connections = room;
        }
    }
    ServeLimits {
        header_read_timeout: Duration::from_millis(limits.header_read_timeout_ms),
        drain_deadline: Duration::from_millis(limits.drain_deadline_ms),
        max_header_bytes: limits.max_header_bytes,
        idle_timeout: Duration::from_millis(limits.idle_timeout_ms),
        max_connections,
        max_connections_per_peer: limits.max_connections_per_peer.min(max_connections),
        max_concurrent_streams: limits.max_concurrent_streams,
    }
}

/// The admin listener: the shared `/livez`, `/readyz`, `/metrics`, plus `POST /admin/reload`.
async fn serve_gateway_admin(
    listener: TcpListener,
    registry: Registry,
    readiness: Arc<Readiness>,
    reloader: Arc<Reloader>,
    shutdown: CancellationToken,
) {
    let handler = move |request: Request<Incoming>| {
        let (registry, readiness, reloader) = (registry.clone(), readiness.clone(), reloader.clone());
        async move {
            if request.uri().path() != RELOAD_PATH {
                return admin_response(&request, &registry, &readiness);
            }
            if request.method() != Method::POST {
                return json_response(
                    StatusCode::METHOD_NOT_ALLOWED,
                    &serde_json::json!({ "error": { "code": "method_not_allowed", "message": "POST to reload" } }),
                );
            }
            reload_response(reloader.reload().await)
        }
    };
    let limits = ServeLimits { drain_deadline: Duration::from_secs(1), ..ServeLimits::default() };
    serve(listener, handler, limits, shutdown).await;
}

fn reload_response(result: Result<reload::Reloaded, Vec<String>>) -> Response<Body> {
    match result {
        Ok(reloaded) => {
            json_response(StatusCode::OK, &serde_json::json!({ "status": "reloaded", "sources": reloaded.n_sources }))
        }
        // The admin listener is internal; the problems name env variables and files, never secret values.
        Err(problems) => json_response(
            StatusCode::UNPROCESSABLE_ENTITY,
            &serde_json::json!({
                "error": { "code": "reload_rejected", "message": "the previous config keeps serving", "problems": problems }
            }),
        ),
    }
}

/// Marks the gateway ready while the broker answers metadata requests for the inbound topic, and samples the
/// producer's queue depth; on a fatal producer error, records it and shuts the gateway down so the orchestrator
/// restarts a clean process.
async fn watch_producer(
    producer: EventProducer,
    ingest: Arc<Ingest>,
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
        ingest.metrics().producer_queue_depth.set(i64::from(producer.queue_depth()));
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
