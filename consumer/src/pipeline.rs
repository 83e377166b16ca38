//! What happens to one record, from the moment it is fetched until its offset may be stored:
//! dedupe claim → handler (with retries) → done marker, or → dead-letter topic. Every path ends in
//! [`Handled`] (store the offset) or [`Interrupted`] (shutdown: do not store; the record is redelivered).
//!
//! Failure rules, decided here and nowhere else:
//! - a record no gateway wrote (headers missing) is poison: dead-lettered at once;
//! - a duplicate (key marked done) is skipped, and counted;
//! - a claim held by another consumer is waited on, never skipped;
//! - Redis unreachable or uncertain: fail closed, pause and retry; never process without the dedupe gate;
//! - a retryable handler failure releases the claim, backs off with jitter, and tries again, until the attempt
//!   or time budget is spent; then, like a poison failure, the event is dead-lettered;
//! - a dead-letter produce that fails is retried; the offset is stored only once the DLQ acknowledged.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use hookline_common::wire::{InboundEvent, now_ms};
use rand::Rng;
use rdkafka::message::BorrowedMessage;
use tokio_util::sync::CancellationToken;

use crate::{
    config::{HandlerConfig, RetryConfig},
    dedupe::{Claim, ClaimToken, Dedupe},
    dlq::{DeadLetters, ErrorClass, Failure},
    handler::{Handler, HandlerError},
    metrics::Metrics,
};

/// How processing a record ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Processed, skipped as a duplicate, or acknowledged by the DLQ: store the offset.
    Handled,
    /// Shutdown came first: do not store the offset.
    Interrupted,
}
pub use Disposition::{Handled, Interrupted};

/// Pause after a Redis error, and between checks of a claim held by another consumer.
const INFRA_BACKOFF_MIN: Duration = Duration::from_millis(100);
const INFRA_BACKOFF_MAX: Duration = Duration::from_secs(5);

#[derive(Debug, Clone)]
pub struct Pipeline {
    pub dedupe: Dedupe,
    pub dead_letters: DeadLetters,
    pub handler: Arc<dyn Handler>,
    pub handler_config: HandlerConfig,
    pub retry: RetryConfig,
    pub metrics: Metrics,
    /// Cleared while Redis fails, for `/readyz`.
    pub redis_ready: Arc<AtomicBool>,
    pub shutdown: CancellationToken,
}

impl Pipeline {
    pub async fn process(&self, message: &BorrowedMessage<'_>) -> Disposition {
        let event = match InboundEvent::from_message(message) {
            Ok(event) => event,
            Err(error) => {
                let now = now_ms();
                let failure = Failure {
                    class: ErrorClass::Poison,
                    error: &format!("not a hookline record: {error}"),
                    attempts: 0,
                    handler: self.handler.name(),
                    first_failure_at_ms: now,
                    last_failure_at_ms: now,
                };
                return self.dead_letter(message, "unknown", &failure).await;
            }
        };
        let source = event.meta.source.as_str();
        let mut attempts = 0_u32;
        let mut first_failure: Option<(Instant, i64)> = None;
        let mut infra_backoff = INFRA_BACKOFF_MIN;
        loop {
            let token = self.dedupe.token(source, &event.meta.event_id);
            let token = match self.claim(&token).await {
                None => return Interrupted,
                Some(Claim::AlreadyDone) => {
                    tracing::info!(source, event_id = %event.meta.event_id, "duplicate skipped");
                    self.metrics.events.with_label_values(&[source, "duplicate"]).inc();
                    return Handled;
                }
                Some(Claim::HeldByOther) => {
                    self.metrics.claim_conflicts.inc();
                    if !self.pause(&mut infra_backoff).await {
                        return Interrupted;
                    }
                    continue;
                }
                Some(Claim::Acquired(token)) => token,
            };

            attempts += 1;
            let started = Instant::now();
            let timeout = Duration::from_millis(self.handler_config.timeout_ms);
            let result = match tokio::time::timeout(timeout, self.handler.handle(&event)).await {
                Ok(result) => result,
                Err(_) => Err(HandlerError::Retryable(format!("handler timed out after {} ms", timeout.as_millis()))),
            };
            match result {
                Ok(()) => {
                    self.metrics.handle_duration.with_label_values(&[source]).observe(started.elapsed().as_secs_f64());
                    return self.mark_done(&token, &event).await;
                }
                Err(error) => {
                    let class = match &error {
                        HandlerError::Retryable(_) => "retryable",
                        HandlerError::Poison(_) => "poison",
                    };
                    self.metrics.handler_failures.with_label_values(&[source, class]).inc();
                    let (first_instant, first_at_ms) = *first_failure.get_or_insert((Instant::now(), now_ms()));
                    // Release before anything else: a retry, or a replay of the dead-lettered event, must be able
                    // to claim it again. If the release is lost, the lease expires.
                    self.release(&token).await;
                    let exhausted = attempts >= self.retry.max_attempts
                        || first_instant.elapsed() >= Duration::from_millis(self.retry.max_total_ms);
                    let class = match error {
                        HandlerError::Poison(_) => Some(ErrorClass::Poison),
                        HandlerError::Retryable(_) if exhausted => Some(ErrorClass::RetryableExhausted),
                        HandlerError::Retryable(_) => None,
                    };
                    let message_text = match &error {
                        HandlerError::Retryable(text) | HandlerError::Poison(text) => text.as_str(),
                    };
                    if let Some(class) = class {
                        let failure = Failure {
                            class,
                            error: message_text,
                            attempts,
                            handler: self.handler.name(),
                            first_failure_at_ms: first_at_ms,
                            last_failure_at_ms: now_ms(),
                        };
                        return self.dead_letter(message, source, &failure).await;
                    }
                    tracing::warn!(source, event_id = %event.meta.event_id, attempts, error = message_text, "retrying");
                    if !self.sleep(self.retry_backoff(attempts)).await {
                        return Interrupted;
                    }
                }
            }
        }
    }

    /// Claims, retrying Redis errors until they clear (fail closed). `None` on shutdown.
    async fn claim(&self, token: &ClaimToken) -> Option<Claim> {
        let mut backoff = INFRA_BACKOFF_MIN;
        loop {
            match self.dedupe.claim(token).await {
                Ok(claim) => {
                    self.redis_ready.store(true, Ordering::Relaxed);
                    return Some(claim);
                }
                Err(error) => self.redis_failed("claim", &error),
            }
            if !self.pause(&mut backoff).await {
                return None;
            }
        }
    }

    async fn mark_done(&self, token: &ClaimToken, event: &InboundEvent) -> Disposition {
        let source = event.meta.source.as_str();
        let mut backoff = INFRA_BACKOFF_MIN;
        loop {
            match self.dedupe.mark_done(token).await {
                Ok(still_ours) => {
                    self.redis_ready.store(true, Ordering::Relaxed);
                    if !still_ours {
                        tracing::warn!(source, event_id = %event.meta.event_id, "claim expired while processing: the handler ran longer than the lease");
                    }
                    self.metrics.events.with_label_values(&[source, "processed"]).inc();
                    return Handled;
                }
                Err(error) => self.redis_failed("mark done", &error),
            }
            // The handler succeeded but the event is not marked done. Storing the offset now could let a
            // provider's retry be processed again; keep trying (the claim still guards it meanwhile).
            if !self.pause(&mut backoff).await {
                return Interrupted;
            }
        }
    }

    /// Best effort: a lost release only delays the retry until the lease expires.
    async fn release(&self, token: &ClaimToken) {
        if let Err(error) = self.dedupe.release(token).await {
            self.redis_failed("release", &error);
        }
    }

    async fn dead_letter(&self, message: &BorrowedMessage<'_>, source: &str, failure: &Failure<'_>) -> Disposition {
        let mut backoff = INFRA_BACKOFF_MIN;
        loop {
            match self.dead_letters.publish(message, failure).await {
                Ok(()) => {
                    // The alert: an error line here, and `hookline_consumer_dead_lettered_total` for Prometheus.
                    tracing::error!(
                        source,
                        error_class = failure.class.as_str(),
                        attempts = failure.attempts,
                        error = failure.error,
                        "event dead-lettered"
                    );
                    self.metrics.dead_lettered.with_label_values(&[source, failure.class.as_str()]).inc();
                    self.metrics.events.with_label_values(&[source, "dead_lettered"]).inc();
                    return Handled;
                }
                Err(error) => {
                    self.metrics.dlq_produce_errors.inc();
                    tracing::warn!(source, error = %error, "dead-letter produce failed; retrying");
                }
            }
            if !self.pause(&mut backoff).await {
                return Interrupted;
            }
        }
    }

    fn redis_failed(&self, operation: &'static str, error: &crate::dedupe::DedupeError) {
        self.metrics.dedupe_errors.inc();
        self.redis_ready.store(false, Ordering::Relaxed);
        tracing::warn!(operation, error = %error, cause = ?std::error::Error::source(error), "redis failed; pausing");
    }

    /// Exponential backoff for handler retries, jittered uniformly in [ceiling/2, ceiling].
    fn retry_backoff(&self, attempts: u32) -> Duration {
        let exponent = attempts.saturating_sub(1).min(20);
        let ceiling = self.retry.initial_backoff_ms.saturating_mul(1 << exponent).min(self.retry.max_backoff_ms);
        Duration::from_millis(rand::rng().random_range(ceiling / 2..=ceiling))
    }

    /// Sleeps `backoff` (doubling it up to the cap); false when shutdown came first.
    async fn pause(&self, backoff: &mut Duration) -> bool {
        let this = *backoff;
        *backoff = (*backoff * 2).min(INFRA_BACKOFF_MAX);
        self.sleep(this).await
    }

    async fn sleep(&self, duration: Duration) -> bool {
        tokio::select! {
            () = self.shutdown.cancelled() => false,
            () = tokio::time::sleep(duration) => true,
        }
    }
}
