//! The hot path: `POST /webhooks/{source}` → find the source → read the body within its limits → verify the
//! signature over the raw bytes → produce → 202 once the broker acknowledged. Nothing else happens here.

use std::{collections::HashMap, sync::Arc, time::Instant};

use bytes::Bytes;
use hookline_common::{
    http::Body,
    signature::{Scheme, Secret, UnverifiedRequest, scheme_by_name},
    wire::{EventMeta, now_ms},
};
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use tokio::sync::Semaphore;

use crate::{
    config::{GatewayConfig, Limits, SourceConfig},
    error::{Rejection, json_response},
    metrics::Metrics,
    produce::{EventProducer, VerifiedWebhook},
};

/// A configured source, ready to verify requests: its scheme and its loaded secrets.
#[derive(Debug)]
pub struct Source {
    pub name: String,
    scheme: Box<dyn Scheme>,
    secrets: Vec<Secret>,
    max_body_bytes: usize,
}

impl Source {
    /// Builds a source from validated config (the scheme exists, the secrets load).
    pub fn from_config(config: &SourceConfig) -> Result<Self, String> {
        let scheme = scheme_by_name(&config.scheme).ok_or_else(|| format!("unknown scheme `{}`", config.scheme))?;
        let secrets = config
            .secrets
            .iter()
            .map(|secret| secret.load().map(|key| Secret::new(&secret.id, key)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { name: config.name.clone(), scheme, secrets, max_body_bytes: config.max_body_bytes })
    }
}

/// Everything a request needs, shared by all connections.
#[derive(Debug)]
pub struct Ingest {
    sources: HashMap<String, Source>,
    producer: EventProducer,
    metrics: Metrics,
    limits: Limits,
    in_flight: Semaphore,
}

const ROUTE_PREFIX: &str = "/webhooks/";

impl Ingest {
    pub fn new(config: &GatewayConfig, producer: EventProducer, metrics: Metrics) -> Result<Self, String> {
        let sources = config
            .sources
            .iter()
            .map(|source| Source::from_config(source).map(|built| (built.name.clone(), built)))
            .collect::<Result<HashMap<_, _>, _>>()?;
        Ok(Self {
            sources,
            producer,
            metrics,
            limits: config.limits.clone(),
            in_flight: Semaphore::new(config.limits.max_in_flight),
        })
    }

    pub async fn handle(self: Arc<Self>, request: Request<Incoming>) -> Response<Body> {
        let started = Instant::now();
        let source_label = self.source_label(request.uri().path()).to_owned();
        let (outcome, response) = match self.in_flight.try_acquire() {
            Err(_) => {
                let rejection = Rejection::Overloaded;
                (rejection.code(), rejection.into_response(self.limits.retry_after_s))
            }
            Ok(_permit) => {
                let result = {
                    // A guard, not inc/dec around the await: hyper drops this future when the client goes away.
                    let _in_flight = InFlight::enter(&self.metrics.in_flight);
                    self.accept(request).await
                };
                match result {
                    Ok(response) => ("accepted", response),
                    Err(rejection) => {
                        log_rejection(&source_label, &rejection);
                        (rejection.code(), rejection.into_response(self.limits.retry_after_s))
                    }
                }
            }
        };
        self.metrics.requests.with_label_values(&[&source_label, outcome]).inc();
        self.metrics
            .request_duration
            .with_label_values(&[&source_label, outcome])
            .observe(started.elapsed().as_secs_f64());
        response
    }

    /// The `source` metric label: the configured name, or `unknown` (never the raw path: bounded cardinality).
    fn source_label(&self, path: &str) -> &str {
        path.strip_prefix(ROUTE_PREFIX).and_then(|name| self.sources.get_key_value(name)).map_or("unknown", |(k, _)| k)
    }

    async fn accept(&self, request: Request<Incoming>) -> Result<Response<Body>, Rejection> {
        let name = request.uri().path().strip_prefix(ROUTE_PREFIX).ok_or(Rejection::NotFound)?;
        let source = self.sources.get(name).ok_or(Rejection::UnknownSource)?;
        if request.method() != Method::POST {
            return Err(Rejection::MethodNotAllowed);
        }
        let received_at_ms = now_ms();
        let (parts, body) = request.into_parts();
        let body = read_body(body, &parts.headers, source.max_body_bytes, &self.limits).await?;

        let unverified = UnverifiedRequest { headers: &parts.headers, body: &body };
        let proof = source.scheme.verify(&unverified, &source.secrets).map_err(Rejection::Verify)?;
        self.metrics.verified.with_label_values(&[&source.name, proof.secret_id()]).inc();

        let identity = source.scheme.identify(&unverified);
        let event_id = identity
            .event_id
            .filter(|id| !id.is_empty())
            .ok_or(Rejection::MissingEventId { header: source.scheme.name() })?;
        let meta = EventMeta {
            source: source.name.clone(),
            event_id,
            event_type: identity.event_type,
            received_at_ms,
            content_type: parts.headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_owned),
            secret_id: String::new(),
        };
        let webhook = VerifiedWebhook::new(proof, meta, body);

        let produce_started = Instant::now();
        let delivery = self.producer.produce(&webhook).await;
        let produce_outcome = if delivery.is_ok() { "acked" } else { "failed" };
        self.metrics
            .produce_duration
            .with_label_values(&[produce_outcome])
            .observe(produce_started.elapsed().as_secs_f64());
        let delivery = delivery.map_err(Rejection::Produce)?;

        tracing::debug!(
            source = %webhook.meta().source,
            event_id = %webhook.meta().event_id,
            partition = delivery.partition,
            offset = delivery.offset,
            "accepted"
        );
        Ok(json_response(
            StatusCode::ACCEPTED,
            &serde_json::json!({ "status": "accepted", "event_id": webhook.meta().event_id }),
        ))
    }

    pub fn producer(&self) -> &EventProducer {
        &self.producer
    }
}

/// Reads the whole body, refusing it as soon as it is known to exceed `limit_bytes`: from `Content-Length` before
/// reading anything, and while streaming when there is none (or it lies).
async fn read_body(
    body: Incoming,
    headers: &http::HeaderMap,
    limit_bytes: usize,
    limits: &Limits,
) -> Result<Bytes, Rejection> {
    let declared =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit_bytes as u64) {
        return Err(Rejection::BodyTooLarge { limit_bytes });
    }
    let collect = Limited::new(body, limit_bytes).collect();
    let deadline = std::time::Duration::from_millis(limits.body_read_timeout_ms);
    match tokio::time::timeout(deadline, collect).await {
        Err(_elapsed) => Err(Rejection::BodyTimeout),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(error)) => match error.downcast::<hyper::Error>() {
            Ok(error) => Err(Rejection::BodyRead(*error)),
            // The only other error `Limited` yields is its length limit.
            Err(_) => Err(Rejection::BodyTooLarge { limit_bytes }),
        },
    }
}

fn log_rejection(source: &str, rejection: &Rejection) {
    if rejection.status().is_server_error() {
        tracing::warn!(source, code = rejection.code(), error = %rejection, "refused with 5xx");
    } else {
        tracing::info!(source, code = rejection.code(), "rejected");
    }
}

/// Counts a request in the in-flight gauge for as long as it lives.
struct InFlight<'a>(&'a prometheus::IntGauge);

impl<'a> InFlight<'a> {
    fn enter(gauge: &'a prometheus::IntGauge) -> Self {
        gauge.inc();
        Self(gauge)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}
