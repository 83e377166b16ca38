//! The hot path: `POST /webhooks/{source}` → the client address's rate, when configured ([`crate::peer_limit`]) →
//! find the source → read the body within its limits → take an
//! in-flight permit → verify the signature over the raw bytes → answer a handshake, or charge the source's quota
//! when it has one ([`crate::quota`]) and produce → 202 once the broker acknowledged. Nothing else happens here.
//!
//! A source with a `GET` handshake (Meta, Okta, X, Dropbox, Nylas) also answers `GET /webhooks/{source}` when it
//! is that handshake, from its query and headers alone (no body is read); any other `GET`, and any other method,
//! is 405. A handshake produces nothing; it is counted (`outcome="handshake"`), logged with its kind and kept in
//! the source's ring beside its rejections (`GET /admin/rejections`, code `handshake`).
//!
//! The in-flight permit is taken only once the body is complete, so clients that send slowly (or, over HTTP/2,
//! declare a body and never send it) hold no permit and cannot starve fast ones; what they can hold is bounded
//! by the connection caps, the body timeout, `limits.max_requests_in_progress` (taken as soon as the head has
//! arrived) and the shared body buffer budget ([`BodyBudget`]), which each request's head is charged to as well.

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use arc_swap::ArcSwap;
use bytes::Bytes;
use hookline_common::{
    http::{Body, PeerAddr},
    telemetry::traces::{TraceSpan, attribute},
    wire::now_ms,
};
use hookline_signature::{
    self as signature, UnverifiedRequest,
    handshake::{Challenge, HandshakeKeys},
};
use http::{Method, Request, Response, header};
use hyper::body::Incoming;
use tokio::sync::Semaphore;

use crate::{
    body::{BodyBudget, head_bytes, read_body, reserve_head},
    config::Limits,
    error::Rejection,
    in_progress::{self, InProgress},
    key_fetch::KeyFetcher,
    metrics::{Metrics, outcome},
    peer_limit::{Admission, PeerLimiter},
    produce::{EventProducer, VerifiedWebhook},
    quota::SourceQuotas,
    rejection_log::{RejectionLog, Verdict, log_handshake_summary, log_summary},
    rejection_ring::RejectionRing,
    reply,
    source::{Source, SourceTable},
    verify::{self, Checked},
};

mod span;
mod trail;
mod webhook;

use span::{request_span, source_label};
use trail::{handshake_entry, log_rejection, ring_entry};
use webhook::webhook_for;

/// Everything a request needs, shared by all connections. The source table is swapped whole on a reload; each
/// request keeps the table it started with.
#[derive(Debug)]
pub struct Ingest {
    sources: ArcSwap<SourceTable>,
    producer: EventProducer,
    metrics: Metrics,
    limits: Limits,
    in_flight: Semaphore,
    /// Requests whose head has arrived and that are not answered yet (`limits.max_requests_in_progress`, and
    /// `limits.max_requests_in_progress_per_peer` of them from one address).
    in_progress: InProgress,
    body_budget: BodyBudget,
    rejection_log: RejectionLog,
    /// Answered handshakes' lines, bounded the same way and apart (a flood of credential-less handshakes neither
    /// fills the log nor spends the rejections' lines).
    handshake_log: RejectionLog,
    /// Each source's last rejections, for `GET /admin/rejections`.
    rejection_ring: RejectionRing,
    /// The request rate per client address, when configured.
    peer_limiter: Option<PeerLimiter>,
    /// Each source's quota cell, kept across reloads ([`crate::quota`]).
    quotas: SourceQuotas,
    /// Metric handles of the hot path's fixed labels, resolved once per source table instead of per request.
    handles: ArcSwap<HashMap<String, SourceHandles>>,
    produce_acked: prometheus::Histogram,
    produce_failed: prometheus::Histogram,
    /// Providers' fetched keys (SNS, PayPal), kept across reloads.
    fetcher: KeyFetcher,
}

/// One source's metric handles for an accepted request.
#[derive(Debug)]
struct SourceHandles {
    accepted: prometheus::IntCounter,
    accepted_duration: prometheus::Histogram,
    body_size: prometheus::Histogram,
    /// By secret id.
    verified: HashMap<String, prometheus::IntCounter>,
}

fn resolve_handles(metrics: &Metrics, sources: &SourceTable) -> HashMap<String, SourceHandles> {
    sources
        .iter()
        .map(|source| {
            let name = source.name.as_str();
            let handles = SourceHandles {
                accepted: metrics.requests.with_label_values(&[name, outcome::ACCEPTED]),
                accepted_duration: metrics.request_duration.with_label_values(&[name, outcome::ACCEPTED]),
                body_size: metrics.body_size.with_label_values(&[name]),
                verified: source
                    .secrets
                    .iter()
                    .map(|secret| (secret.id.clone(), metrics.verified.with_label_values(&[name, &secret.id])))
                    .collect(),
            };
            (source.name.clone(), handles)
        })
        .collect()
}

const ROUTE_PREFIX: &str = "/webhooks/";

/// A rejection, with the event id when it was known by then (for the one log line and the ring), and the ids of
/// the secrets a refused signature was checked against (for the ring).
struct Failure {
    rejection: Rejection,
    event_id: Option<String>,
    secrets_tried: Vec<String>,
}

impl From<Rejection> for Failure {
    fn from(rejection: Rejection) -> Self {
        Self { rejection, event_id: None, secrets_tried: Vec::new() }
    }
}

/// How a request ended well.
enum Answer {
    Accepted(Response<Body>),
    /// A provider's handshake answered (its kind: the scheme or the challenge), never produced.
    Handshake(Response<Body>, &'static str),
}

impl Ingest {
    /// Serves `sources` (already built from a config, see [`crate::load::Loaded`]) within `limits`.
    pub fn new(
        limits: &Limits,
        sources: SourceTable,
        producer: EventProducer,
        metrics: Metrics,
        fetcher: KeyFetcher,
    ) -> Self {
        sources.log_warnings();
        let handles = resolve_handles(&metrics, &sources);
        Self {
            handles: ArcSwap::from_pointee(handles),
            produce_acked: metrics.produce_duration.with_label_values(&[outcome::ACKED]),
            produce_failed: metrics.produce_duration.with_label_values(&[outcome::FAILED]),
            sources: ArcSwap::from_pointee(sources),
            producer,
            metrics,
            limits: limits.clone(),
            in_flight: Semaphore::new(limits.max_in_flight),
            in_progress: InProgress::new(limits.max_requests_in_progress, limits.max_requests_in_progress_per_peer),
            body_budget: BodyBudget::new(limits.max_body_buffer_bytes),
            rejection_log: RejectionLog::default(),
            handshake_log: RejectionLog::default(),
            rejection_ring: RejectionRing::default(),
            peer_limiter: PeerLimiter::new(
                limits.peer_rate_per_s,
                if limits.peer_burst > 0 {
                    limits.peer_burst
                } else {
                    // One second's worth.
                    limits.peer_rate_per_s.ceil().clamp(1.0, f64::from(u32::MAX)) as u32
                },
                Duration::from_millis(limits.peer_max_wait_ms),
                Instant::now(),
            ),
            quotas: SourceQuotas::default(),
            fetcher,
        }
    }

    /// Serves `sources` from the next request on; requests in flight finish with the table they started with.
    pub fn replace_sources(&self, sources: SourceTable) {
        sources.log_warnings();
        self.handles.store(Arc::new(resolve_handles(&self.metrics, &sources)));
        self.rejection_ring.retain_sources(|name| sources.get(name).is_some());
        self.fetcher.retain_sources(|name| sources.get(name).is_some());
        // A source kept with a quota keeps its cell (converted, when its quota changed, at its next charge).
        self.quotas.retain_sources(|name| sources.get(name).is_some_and(|source| source.quota.is_some()));
        self.sources.store(Arc::new(sources));
    }

    /// Sets `hookline_gateway_source_quota_tokens` to what each source with a quota holds now (sources without one,
    /// or no longer served, have no series): called when `/metrics` is read.
    pub fn refresh_quota_gauges(&self) {
        let (gauge, now) = (&self.metrics.source_quota_tokens, Instant::now());
        gauge.reset();
        for source in self.sources.load().iter() {
            if let Some(quota) = &source.quota {
                gauge.with_label_values(&[&source.name]).set(self.quotas.available(&source.name, quota, now));
            }
        }
    }

    /// The source table serving now.
    pub fn sources(&self) -> Arc<SourceTable> {
        self.sources.load_full()
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    pub fn rejection_log(&self) -> &RejectionLog {
        &self.rejection_log
    }

    pub fn handshake_log(&self) -> &RejectionLog {
        &self.handshake_log
    }

    pub fn rejection_ring(&self) -> &RejectionRing {
        &self.rejection_ring
    }

    pub async fn handle(self: Arc<Self>, request: Request<Incoming>) -> Response<Body> {
        let started = Instant::now();
        let sources = self.sources.load_full();
        let source_label = source_label(&sources, request.uri().path()).to_owned();
        let peer = request.extensions().get::<PeerAddr>().map(|PeerAddr(peer)| peer.ip());
        // Both held until the answer (hyper drops this future when the client goes away): a head waiting for its
        // body counts, whatever it waits in (the peer's turn, the body, the broker).
        let span = request_span(&sources, &request, &source_label);
        let held = self.hold_head(&request);
        let result = match held {
            Ok(_held) => match self.admit_peer(&request).await {
                Ok(()) => {
                    // A guard, not inc/dec around the await.
                    let _in_flight = InFlight::enter(&self.metrics.in_flight);
                    span.scope(self.accept(&sources, request, started, &span)).await
                }
                Err(rejection) => Err(rejection.into()),
            },
            Err(rejection) => Err(rejection.into()),
        };
        let (outcome, response) = match result {
            Ok(Answer::Accepted(response)) => (outcome::ACCEPTED, response),
            Ok(Answer::Handshake(response, kind)) => {
                let (verdict, summary) = self.handshake_log.record(&source_label, kind, started);
                log_handshake_summary(&summary);
                if verdict == Verdict::Log {
                    tracing::info!(source = %source_label, handshake = kind, "answered the provider's handshake");
                }
                // Listed with the source's rejections (in a ring of their own), so an operator setting up a
                // provider sees that its handshake arrived and was answered (a refused one is a rejection).
                self.rejection_ring.record(&source_label, handshake_entry(kind, response.status(), peer));
                (outcome::HANDSHAKE, response)
            }
            Err(mut failure) => {
                if let (true, Some(limiter), Some(peer)) = (failure.rejection.charges_peer(), &self.peer_limiter, peer)
                {
                    limiter.charge_failed_verification(peer, Instant::now());
                }
                let (verdict, summary) = self.rejection_log.record(&source_label, failure.rejection.code(), started);
                log_summary(&summary);
                if verdict == Verdict::Log {
                    log_rejection(&source_label, &failure);
                }
                self.rejection_ring.record(&source_label, ring_entry(&mut failure, peer));
                span.set(attribute::REJECTION_REASON, || failure.rejection.code());
                if failure.rejection.status().is_server_error() {
                    span.fail(failure.rejection.code(), || failure.rejection.to_string());
                }
                (failure.rejection.code(), failure.rejection.into_response(self.limits.retry_after_s))
            }
        };
        span.set(attribute::OUTCOME, || outcome);
        span.set(attribute::HTTP_RESPONSE_STATUS_CODE, || i64::from(response.status().as_u16()));
        let handles = self.handles.load();
        match handles.get(&source_label).filter(|_| outcome == outcome::ACCEPTED) {
            Some(handles) => {
                handles.accepted.inc();
                handles.accepted_duration.observe(started.elapsed().as_secs_f64());
            }
            None => {
                self.metrics.requests.with_label_values(&[&source_label, outcome]).inc();
                self.metrics
                    .request_duration
                    .with_label_values(&[&source_label, outcome])
                    .observe(started.elapsed().as_secs_f64());
            }
        }
        response
    }

    /// Takes one of `limits.max_requests_in_progress` (within its address's share) and reserves the request's
    /// head from the body budget, or refuses the request at once: with neither, nothing but its head has been read.
    fn hold_head(
        &self,
        request: &Request<Incoming>,
    ) -> Result<(in_progress::Slot<'_>, tokio::sync::OwnedSemaphorePermit), Rejection> {
        let peer = request.extensions().get::<PeerAddr>().map(|PeerAddr(peer)| peer.ip());
        let in_progress = self.in_progress.take(peer)?;
        let head = reserve_head(&self.body_budget, head_bytes(request.uri(), request.headers()))?;
        Ok((in_progress, head))
    }

    /// Waits for this client address's turn under `limits.peer_rate_per_s`, or refuses it after holding it (see
    /// [`crate::peer_limit`]). Nothing about the request has been read but its head.
    async fn admit_peer(&self, request: &Request<Incoming>) -> Result<(), Rejection> {
        let (Some(limiter), Some(PeerAddr(peer))) = (&self.peer_limiter, request.extensions().get::<PeerAddr>()) else {
            return Ok(());
        };
        match limiter.admit(peer.ip(), Instant::now()) {
            Admission::Now => Ok(()),
            Admission::After(wait) => {
                self.metrics.peer_paced.inc();
                tokio::time::sleep(wait).await;
                Ok(())
            }
            Admission::Refuse(hold) => {
                tokio::time::sleep(hold).await;
                Err(Rejection::PeerRateLimited)
            }
        }
    }

    /// One request to a source: routed, its body read, its signature verified, then produced and answered (or a
    /// handshake answered). Each step is its own function below, in the order a request takes them.
    async fn accept(
        &self,
        sources: &SourceTable,
        request: Request<Incoming>,
        started: Instant,
        span: &TraceSpan,
    ) -> Result<Answer, Failure> {
        let name = request.uri().path().strip_prefix(ROUTE_PREFIX).ok_or(Rejection::NotFound)?;
        let source = sources.get(name).ok_or(Rejection::UnknownSource)?;
        if request.method() == Method::GET && source.answers_get() {
            return self.answer_get(source, &request).map_err(|failure| *failure);
        }
        if request.method() != Method::POST {
            return Err(Rejection::MethodNotAllowed.into());
        }
        let received_at_ms = now_ms();
        let deadline = Duration::from_millis(self.limits.request_deadline_ms);
        let (parts, body) = request.into_parts();
        // Held until the answer: the body's share of the buffer budget, and the permits.
        let (body, held) =
            self.read_request_body(source, &parts, body, deadline.saturating_sub(started.elapsed())).await?;
        let (proof, unverified_url) =
            match self.verify_request(source, &parts, &body, received_at_ms, held.1, span).await? {
                Verification::Event(proof, url) => (proof, url),
                Verification::Answered(answer) => return Ok(answer),
            };
        let webhook = webhook_for(source, &parts, &body, proof, received_at_ms).ok_or(Rejection::MissingEventId)?;
        self.charge_quota(source, &webhook).map_err(|failure| *failure)?;
        let accepted_reply = {
            let mut unverified = UnverifiedRequest::new(&parts.headers, &body, received_at_ms)
                .with_method(&parts.method)
                .with_query(parts.uri.query());
            if let Some(url) = &unverified_url {
                unverified = unverified.with_url(url);
            }
            source.scheme.accepted_reply(&unverified)
        };
        self.produce_webhook(&webhook, deadline.saturating_sub(started.elapsed())).await?;
        Ok(Answer::Accepted(match (&source.reply, accepted_reply) {
            (Some(configured), _) => configured.response(),
            (None, Some(provider)) => reply::provider(provider),
            (None, None) => reply::accepted(&webhook.meta().event_id),
        }))
    }

    /// Reads the body within the source's limits and the body timeout (`within` is what is left of the request's
    /// deadline), then takes the source's verification budget and an in-flight permit: only a complete body takes
    /// one, so slow senders hold none. Returns the body and what it holds until the answer.
    async fn read_request_body(
        &self,
        source: &Source,
        parts: &http::request::Parts,
        body: Incoming,
        within: Duration,
    ) -> Result<(Bytes, HeldForRequest<'_>), Failure> {
        let body_deadline = Duration::from_millis(self.limits.body_read_timeout_ms).min(within);
        let declared =
            parts.headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
        let (body, body_reservation) =
            read_body(body, declared, source.max_body_bytes, &self.body_budget, body_deadline).await?;
        // A public-key source's own budget first, so its flood never holds the in-flight permits others need.
        let verify_permit = match &source.verify_budget {
            Some(budget) => Some(budget.clone().try_acquire_owned().map_err(|_| Rejection::VerifyBusy)?),
            None => None,
        };
        let permit = self.in_flight.try_acquire().map_err(|_| Rejection::Overloaded)?;
        match self.handles.load().get(&source.name) {
            Some(handles) => handles.body_size.observe(body.len() as f64),
            None => self.metrics.body_size.with_label_values(&[&source.name]).observe(body.len() as f64),
        }
        Ok((body, (body_reservation, verify_permit, permit)))
    }

    /// Answers a handshake that comes before any credential, or verifies the signature (counting the secret that
    /// matched) and answers a handshake that comes after it; otherwise the proof for the event, with the URL the
    /// signature was checked against.
    async fn verify_request(
        &self,
        source: &Arc<Source>,
        parts: &http::request::Parts,
        body: &Bytes,
        received_at_ms: i64,
        verify_permit: Option<tokio::sync::OwnedSemaphorePermit>,
        span: &TraceSpan,
    ) -> Result<Verification, Failure> {
        let url = source.signed_url(parts.uri.query());
        let query = parts.uri.query();
        {
            // Handshakes that come before any credential (Microsoft Graph's `validationToken`).
            let unverified = UnverifiedRequest::new(&parts.headers, body, received_at_ms)
                .with_method(&parts.method)
                .with_query(query);
            if let Some(answer) = self.answer_unverified(source, &unverified, received_at_ms) {
                return answer.map(Verification::Answered).map_err(|failure| *failure);
            }
        }
        let presented = verify::Presented {
            headers: parts.headers.clone(),
            method: parts.method.clone(),
            body: body.clone(),
            url: url.clone(),
            query: query.map(str::to_owned),
            received_at_ms,
        };
        let checked = verify::verify(source, &self.fetcher, presented, verify_permit).await.map_err(|rejection| {
            let Rejection::Verify(error) = &rejection else { return Failure::from(rejection) };
            self.metrics.verification_failures.with_label_values(&[&source.name, error.reason()]).inc();
            Failure {
                event_id: None,
                secrets_tried: signature::active_secrets(&source.secrets, received_at_ms)
                    .map(|secret| secret.id.clone())
                    .collect(),
                rejection,
            }
        })?;
        let proof = match checked {
            Checked::Event(proof) => proof,
            Checked::Confirmed(kind) => {
                let empty = signature::Handshake { content_type: "text/plain; charset=utf-8", body: Vec::new() };
                return Ok(Verification::Answered(handshake_answer(kind, empty)));
            }
        };
        match self.handles.load().get(&source.name).and_then(|handles| handles.verified.get(proof.secret_id())) {
            Some(verified) => verified.inc(),
            None => self.metrics.verified.with_label_values(&[&source.name, proof.secret_id()]).inc(),
        }
        span.set(attribute::SECRET_ID, || proof.secret_id().to_owned());
        let mut unverified =
            UnverifiedRequest::new(&parts.headers, body, received_at_ms).with_method(&parts.method).with_query(query);
        if let Some(url) = &url {
            unverified = unverified.with_url(url);
        }
        let secret = source.secrets.iter().find(|secret| secret.id == proof.secret_id());
        if let Some(handshake) = secret.and_then(|secret| source.scheme.handshake(&unverified, secret)) {
            return Ok(Verification::Answered(handshake_answer(source.scheme.name(), handshake)));
        }
        for challenge in &source.handshakes {
            if let Some(handshake) = challenge.answer_verified(&unverified) {
                return Ok(Verification::Answered(handshake_answer(challenge.name(), handshake)));
            }
        }
        Ok(Verification::Event(proof, url))
    }

    /// Takes one turn of the source's quota for a verified event about to be produced, or refuses it (429, nothing
    /// produced; the ring keeps its event id, which the signature vouched for). (A refusal is boxed: its `Failure`
    /// is large.)
    fn charge_quota(&self, source: &Source, webhook: &VerifiedWebhook) -> Result<(), Box<Failure>> {
        let Some(quota) = &source.quota else { return Ok(()) };
        self.quotas.charge(&source.name, quota, Instant::now()).map_err(|over| {
            Box::new(Failure {
                rejection: Rejection::QuotaExceeded { retry_after_s: over.retry_after_s() },
                event_id: Some(webhook.meta().event_id.clone()),
                secrets_tried: Vec::new(),
            })
        })
    }

    /// Produces `webhook` and waits for the broker's acknowledgement (within `within`), timing the produce.
    async fn produce_webhook(&self, webhook: &VerifiedWebhook, within: Duration) -> Result<(), Failure> {
        let produce_started = Instant::now();
        let delivery = self.producer.produce(webhook, within).await;
        self.metrics.producer_queue_depth.set(i64::from(self.producer.queue_depth()));
        let produce_duration = if delivery.is_ok() { &self.produce_acked } else { &self.produce_failed };
        produce_duration.observe(produce_started.elapsed().as_secs_f64());
        let delivery = delivery.map_err(|error| Failure {
            rejection: Rejection::Produce(error),
            event_id: Some(webhook.meta().event_id.clone()),
            secrets_tried: Vec::new(),
        })?;
        tracing::debug!(
            source = %webhook.meta().source,
            event_id = %webhook.meta().event_id,
            topic = %webhook.topic(),
            partition = delivery.partition,
            offset = delivery.offset,
            "accepted"
        );
        Ok(())
    }

    /// A `GET` to a source with a `GET` handshake: answered if it is one of them (nothing is read but the head),
    /// refused if it is one that fails its own check, 405 otherwise.
    /// (A refusal is boxed: this path is rare and its `Failure` large.)
    fn answer_get(&self, source: &Source, request: &Request<Incoming>) -> Result<Answer, Box<Failure>> {
        let received_at_ms = now_ms();
        let body = Bytes::new();
        let unverified = UnverifiedRequest::new(request.headers(), &body, received_at_ms)
            .with_method(request.method())
            .with_query(request.uri().query());
        self.answer_unverified(source, &unverified, received_at_ms)
            .unwrap_or_else(|| Err(Box::new(Rejection::MethodNotAllowed.into())))
    }

    /// The first of the source's handshakes that `request` is, answered or refused; `None` when it is none.
    fn answer_unverified(
        &self,
        source: &Source,
        request: &UnverifiedRequest<'_>,
        received_at_ms: i64,
    ) -> Option<Result<Answer, Box<Failure>>> {
        let keys = HandshakeKeys {
            scheme: source.scheme.as_ref(),
            secrets: &source.secrets,
            verify_tokens: &source.verify_tokens,
        };
        let (challenge, answer) = source
            .handshakes
            .iter()
            .find_map(|challenge| challenge.answer_unverified(request, keys).map(|answer| (*challenge, answer)))?;
        Some(match answer {
            Ok(handshake) => Ok(handshake_answer(challenge.name(), handshake)),
            Err(error) => {
                self.metrics.verification_failures.with_label_values(&[&source.name, error.reason()]).inc();
                let secrets_tried = match challenge {
                    Challenge::MetaHub => &source.verify_tokens,
                    _ => &source.secrets,
                };
                Err(Box::new(Failure {
                    rejection: Rejection::Verify(error),
                    event_id: None,
                    secrets_tried: signature::active_secrets(secrets_tried, received_at_ms)
                        .map(|secret| secret.id.clone())
                        .collect(),
                }))
            }
        })
    }

    pub fn producer(&self) -> &EventProducer {
        &self.producer
    }
}

/// A handshake's answer (200), with its kind (logged, rate-limited, by [`Ingest::handle`]).
fn handshake_answer(kind: &'static str, handshake: signature::Handshake) -> Answer {
    Answer::Handshake(reply::handshake(handshake), kind)
}

/// What a request holds until it is answered: its body's share of the buffer budget, its source's verification
/// permit (given up to the verification, which holds it while it runs) and its in-flight permit.
type HeldForRequest<'a> =
    (tokio::sync::OwnedSemaphorePermit, Option<tokio::sync::OwnedSemaphorePermit>, tokio::sync::SemaphorePermit<'a>);

/// What verifying a request came to, short of a rejection.
enum Verification {
    /// An event: its proof, and the URL its signature was checked against.
    Event(signature::Verified, Option<String>),
    /// A handshake, answered; nothing is produced.
    Answered(Answer),
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
