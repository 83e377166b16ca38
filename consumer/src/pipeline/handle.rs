//! Dedupe, handler and retries for a well-formed event: the claim loop of the two-phase dedupe (a duplicate
//! skipped, a claim held by another consumer waited on, Redis failing closed), the route's filter, the handler's
//! call under a renewed claim, and what its answer becomes: the done marker, or a release and a retry (in memory
//! for an ordered record, else parked in the retry topic), or a dead letter and its marker. The rules are the
//! module's ([`super`]).

use std::time::{Duration, Instant};

use hookline_common::{
    telemetry::traces::{self, KeyValue, Parent, SpanKind, TraceSpan, attribute},
    wire::{InboundEvent, now_ms, redis_key::DoneMarker},
};

use super::{INFRA_BACKOFF_MIN, Outcome, Pipeline, Prepared, Unmarked};
use crate::{
    dedupe::{Claim, ClaimToken},
    dlq::{ErrorClass, Failure},
    handler::HandlerError,
    record::Record,
    retry::Attempts,
};

impl Pipeline {
    /// The claim token of `event`: a re-processing request's run, a re-drive, or the event's own.
    pub(crate) fn token_for(&self, event: &InboundEvent) -> ClaimToken {
        let (source, event_id) = (event.meta.source.as_str(), event.meta.event_id.as_str());
        // A re-processing request runs once per run, whatever the event's own done marker says.
        let token = match (&event.reprocess_id, &event.replay_of) {
            (Some(run_id), _) => self.dedupe.reprocess_token(run_id, source, event_id),
            // The replayer's record (authenticated at the door): it may run an event whose dead marker stops
            // re-sends.
            (None, Some(_)) => self.dedupe.redrive_token(source, event_id),
            (None, None) => self.dedupe.token(source, event_id),
        };
        // A copy of an allowlisted type may claim an event dead-lettered under another type (a forged first
        // copy), once per type; its own dead marker records its type.
        let token = token.recording_type(event.meta.event_type.as_deref());
        if self.handler.allowlists_type(event) { token.allowlisted() } else { token }
    }

    /// Dedupe, handler and retries for a well-formed event. `None` on shutdown. With `prepared.claim`, the first
    /// claim was made before (with other records'); with `prepared.done_later`, a success is returned unmarked
    /// ([`Outcome::Unmarked`]) for the caller to mark done with others.
    pub(super) async fn handle(
        &self,
        message: &Record,
        event: &InboundEvent,
        prior: Option<Attempts>,
        span: &TraceSpan,
        prepared: Prepared,
    ) -> Option<Outcome> {
        let source = event.meta.source.as_str();
        let event_id = event.meta.event_id.as_str();
        let handler_name = self.handler.name_for(event);
        // Attempts so far: carried in memory for an ordered record, in the retry headers for a parked one.
        let prior = prior.or_else(|| message.retry.as_ref().map(|headers| headers.attempts.clone()));
        let mut attempts = prior.as_ref().map_or(0, |prior| prior.attempts);
        let mut first_failure_at_ms: Option<i64> = prior.as_ref().map(|prior| prior.first_failure_at_ms);
        let mut conflict_backoff = INFRA_BACKOFF_MIN;
        let mut first_claim = prepared.claim;
        // Decided before the claim (no I/O), recorded once it is ours. A type its source's allowlist refuses is
        // poison whatever its route: the handler says so and the event is dead-lettered (and its genuine copy
        // claims over the dead marker), never marked filtered, which would make the genuine copy a duplicate.
        let skip = if self.handler.refuses_type(event) { None } else { self.filters.skip(event) };
        loop {
            let claim = match first_claim.take() {
                Some(claim) => claim,
                None => self.claim(&self.token_for(event)).await?,
            };
            let token = match claim {
                Claim::AlreadyDone => {
                    span.set(attribute::DEDUPE_OUTCOME, || "already_done");
                    tracing::info!(source = %source, event_id = %event_id, "duplicate skipped");
                    return Some(Outcome::Duplicate);
                }
                Claim::DeadLettered => {
                    span.set(attribute::DEDUPE_OUTCOME, || "dead_lettered_before");
                    // A provider's retry of an event it already failed, or a captured delivery re-sent under
                    // another unsigned type: the DLQ entry is how it runs again, so the DLQ does not grow.
                    tracing::info!(
                        source = %source,
                        event_id = %event_id,
                        "skipped: dead-lettered before (re-drive its DLQ entry to run it again)"
                    );
                    return Some(Outcome::DeadLetteredBefore);
                }
                Claim::HeldByOther => {
                    // A rebalance race or a crashed consumer: wait for its done marker or its lease to expire.
                    self.metrics.claim_conflicts.inc();
                    self.pause(&mut conflict_backoff).await?;
                    continue;
                }
                Claim::Acquired(token) => token,
            };
            if let Some(skip) = skip {
                return self.record_filtered(message, event, &token, skip, span).await;
            }

            attempts += 1;
            span.set(attribute::DEDUPE_OUTCOME, || "claimed");
            span.set(attribute::ATTEMPT, || i64::from(attempts));
            // The claim is renewed while the handler runs and while the done marker is retried, so that a long
            // `mark_done` retry (Redis failing) cannot let the claim lapse under a processed event.
            let started = Instant::now();
            let handler_span = handler_span(handler_name, attempts);
            let call = tokio::time::timeout(self.handler_timeout, handler_span.scope(self.call_handler(event)));
            let result = match self.renewing(&token, call).await {
                Ok(result) => result,
                Err(_) => Err(HandlerError::retryable(format!(
                    "handler timed out after {} ms",
                    self.handler_timeout.as_millis()
                ))),
            };
            if let Err(error) = &result {
                handler_span
                    .fail(if matches!(error, HandlerError::Poison(_)) { "poison" } else { "retryable" }, || {
                        error.message().to_owned()
                    });
            }
            drop(handler_span);
            let error = match result {
                Ok(()) => {
                    self.metrics.handle_duration.with_label_values(&[source]).observe(started.elapsed().as_secs_f64());
                    // What lookup reads back: written in the same `SET` as the done marker, so it costs nothing.
                    let marker = DoneMarker {
                        processed_at_ms: now_ms(),
                        handling_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                        topic: message.topic().to_owned(),
                        partition: message.partition(),
                        offset: message.offset(),
                    };
                    if prepared.done_later && event.reprocess_id.is_none() && event.replay_of.is_none() {
                        return Some(Outcome::Unmarked(Box::new(Unmarked { token, marker })));
                    }
                    self.renewing(&token, self.mark_done(&token, &marker, event)).await?;
                    if event.replay_of.is_none() && event.reprocess_id.is_none() {
                        let age_ms = now_ms().saturating_sub(event.meta.received_at_ms).max(0);
                        self.metrics.event_age.with_label_values(&[source]).observe(age_ms as f64 / 1000.0);
                    }
                    if event.reprocess_id.is_some() {
                        // The event itself is processed now too, if it never was: its own delivery is then a
                        // duplicate.
                        let own = self.dedupe.token(source, event_id);
                        self.redis_until_done("done", || self.dedupe.mark_done(&own, &marker)).await?;
                    }
                    return Some(Outcome::Processed);
                }
                Err(error) => error,
            };
            let class_label = if matches!(error, HandlerError::Poison(_)) { "poison" } else { "retryable" };
            self.metrics.handler_failures.with_label_values(&[source, class_label]).inc();
            let first_at_ms = *first_failure_at_ms.get_or_insert_with(now_ms);
            let elapsed_ms = u64::try_from(now_ms() - first_at_ms).unwrap_or(0);
            let exhausted = attempts >= self.retry.max_attempts || elapsed_ms >= self.retry.max_total_ms;
            let dead_letter_class = match &error {
                HandlerError::Poison(_) => Some(ErrorClass::Poison),
                HandlerError::Retryable { .. } if exhausted => Some(ErrorClass::RetryableExhausted),
                HandlerError::Retryable { .. } => None,
            };
            if let Some(class) = dead_letter_class {
                let failure = Failure {
                    class,
                    error: error.message(),
                    attempts,
                    handler: handler_name,
                    first_failure_at_ms: first_at_ms,
                    last_failure_at_ms: now_ms(),
                };
                // The claim is held (renewed) until the entry is in the DLQ, then becomes the dead marker: a re-send
                // is skipped, a re-drive of the entry claims it. A crash in between lets the lease lapse, and the
                // record, not yet committed, is dead-lettered again.
                let new_entry =
                    self.renewing(&token, self.dead_letter(message, source, Some(event_id), &failure)).await?;
                self.renewing(&token, self.redis_until_done("dead", || self.dedupe.mark_dead(&token, &new_entry)))
                    .await?;
                let exhausted = class == ErrorClass::RetryableExhausted;
                return Some(Outcome::DeadLettered { new_entry, exhausted });
            }
            // Released so the retry can claim it. If the release is lost, the lease expires.
            self.release(&token).await;
            self.metrics.retries.with_label_values(&[source]).inc();
            let retry_after = match &error {
                HandlerError::Retryable { retry_after, .. } => *retry_after,
                HandlerError::Poison(_) => None,
            };
            // `Retry-After` lengthens the backoff, but nothing waits past the retry budget: at its end one last
            // attempt runs, and its failure is dead-lettered.
            let remaining = Duration::from_millis(self.retry.max_total_ms.saturating_sub(elapsed_ms));
            let backoff = self.retry_backoff(attempts).max(retry_after.unwrap_or_default()).min(remaining);
            let due_at_ms = now_ms() + i64::try_from(backoff.as_millis()).unwrap_or(i64::MAX);
            let so_far =
                Attempts { attempts, first_failure_at_ms: first_at_ms, last_error: error.message().to_owned() };
            tracing::warn!(
                source = %source,
                event_id = %event_id,
                attempts,
                backoff_ms = backoff.as_millis() as u64,
                error = error.message(),
                "will retry"
            );
            if event.meta.ordering_key.is_some() {
                // Later records with the same key wait behind this one; hold no capacity while it waits.
                return Some(Outcome::RetryLater { due_at_ms, attempts: so_far });
            }
            if let Err(refused) = self.park(message, &so_far, due_at_ms).await? {
                return self.not_parked(message, event, &token, &so_far, handler_name, refused).await;
            }
            return Some(Outcome::RetryScheduled);
        }
    }
}

/// The span of one handler call (a child of the record's `process` span): kind client for the handlers that call
/// a downstream (`http`, `postgres`), whose `traceparent` the `http` handler sends.
fn handler_span(handler_name: &str, attempt: u32) -> TraceSpan {
    if !traces::enabled() {
        return TraceSpan::off();
    }
    let kind = if matches!(handler_name, "http" | "postgres") { SpanKind::Client } else { SpanKind::Internal };
    TraceSpan::start(
        kind,
        Parent::Current,
        || format!("handler {handler_name}"),
        || {
            vec![
                KeyValue::new(attribute::HANDLER, handler_name.to_owned()),
                KeyValue::new(attribute::ATTEMPT, i64::from(attempt)),
            ]
        },
    )
}
