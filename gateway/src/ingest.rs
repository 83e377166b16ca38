//! The hot path: `POST /webhooks/{source}` → find the source → read the body within its limits → verify the
//! signature over the raw bytes → answer a handshake, or produce → 202 once the broker acknowledged.
//! Nothing else happens here.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use arc_swap::ArcSwap;
use bytes::Bytes;
use hookline_common::{
    http::Body,
    signature::{self, UnverifiedRequest},
    wire::{EventMeta, now_ms},
};
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use tokio::sync::Semaphore;

use crate::{
    config::{FORWARDED_HEADER_PREFIX, GatewayConfig, Limits},
    error::{Rejection, json_response},
    metrics::Metrics,
    produce::{EventProducer, VerifiedWebhook},
    source::{Source, SourceTable},
};

/// Everything a request needs, shared by all connections. The source table is swapped whole on a reload; each
/// request keeps the table it started with.
#[derive(Debug)]
pub struct Ingest {
    sources: ArcSwap<SourceTable>,
    producer: EventProducer,
    metrics: Metrics,
    limits: Limits,
    in_flight: Semaphore,
}

const ROUTE_PREFIX: &str = "/webhooks/";

/// A rejection, with the event id when it was known by then (for the one log line).
struct Failure {
    rejection: Rejection,
    event_id: Option<String>,
}

impl From<Rejection> for Failure {
    fn from(rejection: Rejection) -> Self {
        Self { rejection, event_id: None }
    }
}

/// How a request ended well.
enum Answer {
    Accepted(Response<Body>),
    Handshake(Response<Body>),
}

impl Ingest {
    pub fn new(config: &GatewayConfig, producer: EventProducer, metrics: Metrics) -> Result<Self, Vec<String>> {
        let sources = SourceTable::build(config)?;
        sources.log_warnings();
        Ok(Self {
            sources: ArcSwap::from_pointee(sources),
            producer,
            metrics,
            limits: config.limits.clone(),
            in_flight: Semaphore::new(config.limits.max_in_flight),
        })
    }

    /// Serves `sources` from the next request on; requests in flight finish with the table they started with.
    pub fn replace_sources(&self, sources: SourceTable) {
        sources.log_warnings();
        self.sources.store(Arc::new(sources));
    }

    /// The source table serving now.
    pub fn sources(&self) -> Arc<SourceTable> {
        self.sources.load_full()
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    pub async fn handle(self: Arc<Self>, request: Request<Incoming>) -> Response<Body> {
        let started = Instant::now();
        let sources = self.sources.load_full();
        let source_label = source_label(&sources, request.uri().path()).to_owned();
        let (outcome, response) = match self.in_flight.try_acquire() {
            Err(_) => {
                let failure = Failure::from(Rejection::Overloaded);
                log_rejection(&source_label, &failure);
                (failure.rejection.code(), failure.rejection.into_response(self.limits.retry_after_s))
            }
            Ok(_permit) => {
                let result = {
                    // A guard, not inc/dec around the await: hyper drops this future when the client goes away.
                    let _in_flight = InFlight::enter(&self.metrics.in_flight);
                    self.accept(&sources, request, started).await
                };
                match result {
                    Ok(Answer::Accepted(response)) => ("accepted", response),
                    Ok(Answer::Handshake(response)) => ("handshake", response),
                    Err(failure) => {
                        log_rejection(&source_label, &failure);
                        (failure.rejection.code(), failure.rejection.into_response(self.limits.retry_after_s))
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

    async fn accept(
        &self,
        sources: &SourceTable,
        request: Request<Incoming>,
        started: Instant,
    ) -> Result<Answer, Failure> {
        let name = request.uri().path().strip_prefix(ROUTE_PREFIX).ok_or(Rejection::NotFound)?;
        let source = sources.get(name).ok_or(Rejection::UnknownSource)?;
        if request.method() != Method::POST {
            return Err(Rejection::MethodNotAllowed.into());
        }
        let received_at_ms = now_ms();
        let deadline = Duration::from_millis(self.limits.request_deadline_ms);
        let (parts, body) = request.into_parts();
        let body_deadline =
            Duration::from_millis(self.limits.body_read_timeout_ms).min(deadline.saturating_sub(started.elapsed()));
        let body = read_body(body, &parts.headers, source.max_body_bytes, body_deadline).await?;
        self.metrics.body_size.with_label_values(&[&source.name]).observe(body.len() as f64);

        let url = source.signed_url(parts.uri.query());
        let mut unverified = UnverifiedRequest::new(&parts.headers, &body, received_at_ms).with_method(&parts.method);
        if let Some(url) = &url {
            unverified = unverified.with_url(url);
        }
        let proof = signature::verify(source.scheme.as_ref(), &unverified, &source.secrets).map_err(|error| {
            self.metrics.verification_failures.with_label_values(&[&source.name, error.reason()]).inc();
            Rejection::Verify(error)
        })?;
        self.metrics.verified.with_label_values(&[&source.name, proof.secret_id()]).inc();

        let secret = source.secrets.iter().find(|secret| secret.id == proof.secret_id());
        if let Some(handshake) = secret.and_then(|secret| source.scheme.handshake(&unverified, secret)) {
            tracing::info!(source = %source.name, "answered the provider's handshake");
            let mut response = Response::new(Body::new(Bytes::from(handshake.body)));
            response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(handshake.content_type));
            return Ok(Answer::Handshake(response));
        }

        let identity = source.identity.identify(&parts.headers, &body);
        let event_id = identity.event_id.ok_or(Rejection::MissingEventId)?;
        let meta = EventMeta {
            source: source.name.clone(),
            event_id: event_id.clone(),
            event_type: identity.event_type,
            received_at_ms,
            content_type: parts.headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_owned),
            secret_id: String::new(),
            ordering_key: None,
        };
        let webhook = VerifiedWebhook::new(proof, meta, body, &source.topic)
            .with_forwarded_headers(forwarded_headers(source, &parts.headers));

        let produce_started = Instant::now();
        let delivery = self.producer.produce(&webhook, deadline.saturating_sub(started.elapsed())).await;
        self.metrics.producer_queue_depth.set(i64::from(self.producer.queue_depth()));
        let produce_outcome = if delivery.is_ok() { "acked" } else { "failed" };
        self.metrics
            .produce_duration
            .with_label_values(&[produce_outcome])
            .observe(produce_started.elapsed().as_secs_f64());
        let delivery =
            delivery.map_err(|error| Failure { rejection: Rejection::Produce(error), event_id: Some(event_id) })?;

        tracing::debug!(
            source = %webhook.meta().source,
            event_id = %webhook.meta().event_id,
            topic = %webhook.topic(),
            partition = delivery.partition,
            offset = delivery.offset,
            "accepted"
        );
        Ok(Answer::Accepted(json_response(
            StatusCode::ACCEPTED,
            &serde_json::json!({ "status": "accepted", "event_id": webhook.meta().event_id }),
        )))
    }

    pub fn producer(&self) -> &EventProducer {
        &self.producer
    }
}

/// The `source` metric label: the configured name, or `unknown` (never the raw path: bounded cardinality).
fn source_label<'a>(sources: &'a SourceTable, path: &str) -> &'a str {
    path.strip_prefix(ROUTE_PREFIX).and_then(|name| sources.name_of(name)).unwrap_or("unknown")
}

/// The allowlisted request headers, as Kafka record headers named `http-<lowercase name>` (one per value).
fn forwarded_headers(source: &Source, headers: &http::HeaderMap) -> Vec<(String, Vec<u8>)> {
    source
        .forward_headers
        .iter()
        .flat_map(|name| {
            let key = format!("{FORWARDED_HEADER_PREFIX}{}", name.as_str());
            headers.get_all(name).iter().map(move |value| (key.clone(), value.as_bytes().to_vec()))
        })
        .collect()
}

/// Reads the whole body, refusing it as soon as it is known to exceed `limit_bytes`: from `Content-Length` before
/// reading anything, and while streaming when there is none (or it lies). Memory per request is bounded by the
/// limit.
async fn read_body(
    body: Incoming,
    headers: &http::HeaderMap,
    limit_bytes: usize,
    deadline: Duration,
) -> Result<Bytes, Rejection> {
    let declared =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit_bytes as u64) {
        return Err(Rejection::BodyTooLarge { limit_bytes });
    }
    let collect = Limited::new(body, limit_bytes).collect();
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

/// The one log line of a rejection: source, reason, event id when known. Never the body, a signature or a secret.
fn log_rejection(source: &str, failure: &Failure) {
    let rejection = &failure.rejection;
    let event_id = failure.event_id.as_deref().unwrap_or("");
    if rejection.status().is_server_error() {
        tracing::warn!(source, code = rejection.code(), event_id, error = %rejection, "refused with 5xx");
    } else {
        tracing::info!(source, code = rejection.code(), event_id, reason = %rejection, "rejected");
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
