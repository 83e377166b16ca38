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
        // A re-processing request runs once per run, whatever the event's own done marker says. A destination of a
        // fan-out service has its own scope for each.
        let token = match (&event.reprocess_id, &event.replay_of, event.destination.as_deref()) {
            (Some(run_id), _, None) => self.dedupe.reprocess_token(run_id, source, event_id),
            (Some(run_id), _, Some(to)) => self.dedupe.destination_reprocess_token(run_id, to, source, event_id),
            // The replayer's record (authenticated at the door): it may run an event whose dead marker stops
            // re-sends.
            (None, Some(_), None) => self.dedupe.redrive_token(source, event_id),
            (None, Some(_), Some(to)) => self.dedupe.destination_redrive_token(to, source, event_id),
            (None, None, None) => self.dedupe.token(source, event_id),
            (None, None, Some(to)) => self.dedupe.destination_token(to, source, event_id),
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
        let handler_name = self.handler.name_for(event);
        // Attempts so far: carried in memory for an ordered record, in the retry headers for a parked one.
        let prior = prior.or_else(|| message.retry.as_ref().map(|headers| headers.attempts.clone()));
        // Decided before the claim (no I/O), recorded once it is ours. A type its source's allowlist refuses is
        // poison whatever its route: the handler says so and the event is dead-lettered (and its genuine copy
        // claims over the dead marker), never marked filtered, which would make the genuine copy a duplicate.
        let skip = if self.handler.refuses_type(event) { None } else { self.filters.skip(event) };
        let token = match self.claim_until_decided(event, prepared.claim, span).await? {
            Ok(token) => token,
            Err(outcome) => return Some(outcome),
        };
        if let Some(skip) = skip {
            return self.record_filtered(message, event, &token, skip, span).await;
        }

        let attempts = prior.as_ref().map_or(0, |prior| prior.attempts) + 1;
        span.set(attribute::DEDUPE_OUTCOME, || "claimed");
        span.set(attribute::ATTEMPT, || i64::from(attempts));
        let started = Instant::now();
        let error = match self.call_under_claim(event, &token, handler_name, attempts).await {
            Ok(()) => return self.succeeded(message, event, token, started, prepared.done_later).await,
            Err(error) => error,
        };
        let first_failure_at_ms = prior.as_ref().map_or_else(now_ms, |prior| prior.first_failure_at_ms);
        let failed = Failed { message, event, token, handler_name, attempts, first_failure_at_ms, error };
        self.failed(failed).await
    }

    /// Claims `event` until the answer decides: the claim is ours, or the event ends without the handler (a
    /// duplicate, or dead-lettered before). A claim held by another consumer (a rebalance race or a crashed
    /// consumer) is waited on, for its done marker or its lease to expire. With `first`, the first claim's answer
    /// is already known. `None` on shutdown.
    async fn claim_until_decided(
        &self,
        event: &InboundEvent,
        mut first: Option<Claim>,
        span: &TraceSpan,
    ) -> Option<Result<ClaimToken, Outcome>> {
        let (source, event_id) = (event.meta.source.as_str(), event.meta.event_id.as_str());
        let mut conflict_backoff = INFRA_BACKOFF_MIN;
        loop {
            let claim = match first.take() {
                Some(claim) => claim,
                None => self.claim(&self.token_for(event)).await?,
            };
            match claim {
                Claim::AlreadyDone => {
                    span.set(attribute::DEDUPE_OUTCOME, || "already_done");
                    tracing::info!(source = %source, event_id = %event_id, "duplicate skipped");
                    return Some(Err(Outcome::Duplicate));
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
                    return Some(Err(Outcome::DeadLetteredBefore));
                }
                Claim::HeldByOther => {
                    self.metrics.claim_conflicts.inc();
                    self.pause(&mut conflict_backoff).await?;
                }
                Claim::Acquired(token) => return Some(Ok(token)),
            }
        }
    }

    /// Calls the handler in its span, under the handler timeout. The claim is renewed while the handler runs (and
    /// while the done marker is retried, in [`Self::succeeded`]), so that a long `mark_done` retry (Redis failing)
    /// cannot let the claim lapse under a processed event.
    async fn call_under_claim(
        &self,
        event: &InboundEvent,
        token: &ClaimToken,
        handler_name: &str,
        attempts: u32,
    ) -> Result<(), HandlerError> {
        let handler_span = handler_span(handler_name, attempts);
        let call = tokio::time::timeout(self.handler_timeout, handler_span.scope(self.call_handler(event)));
        let result = match self.renewing(token, call).await {
            Ok(result) => result,
            Err(_) => {
                Err(HandlerError::retryable(format!("handler timed out after {} ms", self.handler_timeout.as_millis())))
            }
        };
        if let Err(error) = &result {
            handler_span.fail(if matches!(error, HandlerError::Poison(_)) { "poison" } else { "retryable" }, || {
                error.message().to_owned()
            });
        }
        result
    }

    /// The handler succeeded: the done marker (with what lookup reads back), or, with `done_later`, the success
    /// returned unmarked. `None` on shutdown.
    async fn succeeded(
        &self,
        message: &Record,
        event: &InboundEvent,
        token: ClaimToken,
        started: Instant,
        done_later: bool,
    ) -> Option<Outcome> {
        let (source, event_id) = (event.meta.source.as_str(), event.meta.event_id.as_str());
        self.metrics.handle_duration.with_label_values(&[source]).observe(started.elapsed().as_secs_f64());
        // What lookup reads back: written in the same `SET` as the done marker, so it costs nothing.
        let marker = DoneMarker {
            processed_at_ms: now_ms(),
            handling_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            topic: message.topic().to_owned(),
            partition: message.partition(),
            offset: message.offset(),
        };
        if done_later && event.reprocess_id.is_none() && event.replay_of.is_none() {
            return Some(Outcome::Unmarked(Box::new(Unmarked { token, marker })));
        }
        self.renewing(&token, self.mark_done(&token, &marker, event)).await?;
        if event.replay_of.is_none() && event.reprocess_id.is_none() {
            let age_ms = now_ms().saturating_sub(event.meta.received_at_ms).max(0);
            self.metrics.event_age.with_label_values(&[source]).observe(age_ms as f64 / 1000.0);
        }
        if event.reprocess_id.is_some() {
            // The event itself is processed now too, if it never was: its own delivery is then a duplicate.
            let own = match event.destination.as_deref() {
                Some(to) => self.dedupe.destination_token(to, source, event_id),
                None => self.dedupe.token(source, event_id),
            };
            self.redis_until_done("done", || self.dedupe.mark_done(&own, &marker)).await?;
        }
        Some(Outcome::Processed)
    }

    /// The handler failed: a dead letter when the error is poison or the retry budget is spent, else a retry.
    /// `None` on shutdown.
    async fn failed(&self, failed: Failed<'_>) -> Option<Outcome> {
        let source = failed.event.meta.source.as_str();
        let class_label = if matches!(failed.error, HandlerError::Poison(_)) { "poison" } else { "retryable" };
        self.metrics.handler_failures.with_label_values(&[source, class_label]).inc();
        let elapsed_ms = u64::try_from(now_ms() - failed.first_failure_at_ms).unwrap_or(0);
        let retry = self.retry_of(Some(failed.event));
        let exhausted = failed.attempts >= retry.max_attempts || elapsed_ms >= retry.max_total_ms;
        let dead_letter_class = match &failed.error {
            HandlerError::Poison(_) => Some(ErrorClass::Poison),
            HandlerError::Retryable { .. } if exhausted => Some(ErrorClass::RetryableExhausted),
            HandlerError::Retryable { .. } => None,
        };
        match dead_letter_class {
            Some(class) => self.dead_letter_failed(&failed, class).await,
            None => self.retry_failed(&failed, elapsed_ms).await,
        }
    }

    /// Dead-letters a failed event and turns its claim into the dead marker. `None` on shutdown.
    async fn dead_letter_failed(&self, failed: &Failed<'_>, class: ErrorClass) -> Option<Outcome> {
        let (source, event_id, token) =
            (failed.event.meta.source.as_str(), failed.event.meta.event_id.as_str(), &failed.token);
        let failure = Failure {
            class,
            error: failed.error.message(),
            attempts: failed.attempts,
            handler: failed.handler_name,
            first_failure_at_ms: failed.first_failure_at_ms,
            last_failure_at_ms: now_ms(),
        };
        // The claim is held (renewed) until the entry is in the DLQ, then becomes the dead marker: a re-send is
        // skipped, a re-drive of the entry claims it. A crash in between lets the lease lapse, and the record, not
        // yet committed, is dead-lettered again.
        let new_entry =
            self.renewing(token, self.dead_letter(failed.message, source, Some(event_id), &failure)).await?;
        self.renewing(token, self.redis_until_done("dead", || self.dedupe.mark_dead(token, &new_entry))).await?;
        let exhausted = class == ErrorClass::RetryableExhausted;
        Some(Outcome::DeadLettered { new_entry, exhausted })
    }

    /// Releases the claim so that a retry can claim it (if the release is lost, the lease expires), and schedules
    /// the retry: in memory for an ordered record, else parked in the retry topic. `None` on shutdown.
    async fn retry_failed(&self, failed: &Failed<'_>, elapsed_ms: u64) -> Option<Outcome> {
        let (message, event, error) = (failed.message, failed.event, &failed.error);
        let (source, event_id) = (event.meta.source.as_str(), event.meta.event_id.as_str());
        self.release(&failed.token).await;
        self.metrics.retries.with_label_values(&[source]).inc();
        let retry_after = match error {
            HandlerError::Retryable { retry_after, .. } => *retry_after,
            HandlerError::Poison(_) => None,
        };
        // `Retry-After` lengthens the backoff, but nothing waits past the retry budget: at its end one last attempt
        // runs, and its failure is dead-lettered.
        let remaining = Duration::from_millis(self.retry_of(Some(event)).max_total_ms.saturating_sub(elapsed_ms));
        let backoff = self.retry_backoff(failed.attempts).max(retry_after.unwrap_or_default()).min(remaining);
        let due_at_ms = now_ms() + i64::try_from(backoff.as_millis()).unwrap_or(i64::MAX);
        let so_far = Attempts {
            attempts: failed.attempts,
            first_failure_at_ms: failed.first_failure_at_ms,
            last_error: error.message().to_owned(),
        };
        tracing::warn!(
            source = %source,
            event_id = %event_id,
            attempts = failed.attempts,
            backoff_ms = backoff.as_millis() as u64,
            error = error.message(),
            "will retry"
        );
        if event.meta.ordering_key.is_some() {
            // Later records with the same key wait behind this one; hold no capacity while it waits.
            return Some(Outcome::RetryLater { due_at_ms, attempts: so_far });
        }
        if let Err(refused) = self.park(message, &so_far, due_at_ms).await? {
            return self.not_parked(message, event, &failed.token, &so_far, failed.handler_name, refused).await;
        }
        Some(Outcome::RetryScheduled)
    }
}

/// A failed handler call: the record, its claim, the handler's error, and the attempts counted against the retry
/// budget (this one included).
struct Failed<'a> {
    message: &'a Record,
    event: &'a InboundEvent,
    token: ClaimToken,
    handler_name: &'a str,
    attempts: u32,
    first_failure_at_ms: i64,
    error: HandlerError,
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
