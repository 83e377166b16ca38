//! The pipeline's calls to Redis and Kafka, each retried until it lands or the consumer shuts down (`None`):
//! the claim and its renewal, the done and dead markers, a retry parked, a dead letter and its alert, a DLQ
//! entry's fate; and the backoffs between attempts.

use std::{
    sync::atomic::Ordering,
    time::{Duration, Instant},
};

use crate::record::Record;
use hookline_common::wire::{EntryStatusRecord, InboundEvent, redis_key::DoneMarker};
use rand::Rng;

use super::{
    INFRA_BACKOFF_MAX, INFRA_BACKOFF_MIN, Pipeline,
    by_reference::{CopyTooLarge, TooLargeStreak},
};
use crate::{
    alert::DeadLettered,
    dedupe::{Claim, ClaimToken, DedupeError},
    dlq::Failure,
    retry::Attempts,
};

impl Pipeline {
    /// Runs `work` while renewing `token`'s lease every third of a lease. No task is spawned: most calls end
    /// long before the first renewal is due. The work keeps being polled while a renewal waits on Redis: a stalled
    /// Redis must not hold a handler's transaction open (its COMMIT unsent) or its downstream call unread.
    pub(super) async fn renewing<F: std::future::Future>(&self, token: &ClaimToken, work: F) -> F::Output {
        let period = self.dedupe.lease() / 3;
        tokio::pin!(work);
        loop {
            tokio::select! {
                output = &mut work => return output,
                () = tokio::time::sleep(period) => {}
            }
            let renewal = self.dedupe.renew(token);
            tokio::pin!(renewal);
            let renewed = tokio::select! {
                output = &mut work => return output,
                renewed = &mut renewal => renewed,
            };
            match renewed {
                Ok(true) => {}
                // Done, released, or lost: the work decides what follows; keep waiting for it.
                Ok(false) => return work.await,
                Err(error) => {
                    if let Some(held_back) = self.outage_log.admit("claim renewal failed", Instant::now()) {
                        tracing::warn!(error = %error, held_back, "claim renewal failed; will try again");
                    }
                }
            }
        }
    }

    /// Parks the record in the retry topic, retrying until Kafka acknowledges. `None` on shutdown;
    /// `Some(Err(_))` when the broker refuses the copy as too large for the retry topic (twice in a row): it would
    /// refuse it for ever, so the caller dead-letters the record by reference instead.
    pub(super) async fn park(
        &self,
        message: &Record,
        attempts: &Attempts,
        due_at_ms: i64,
    ) -> Option<Result<(), CopyTooLarge>> {
        let mut backoff = INFRA_BACKOFF_MIN;
        let mut too_large = TooLargeStreak::default();
        loop {
            match self.dead_letters.schedule_retry(message, attempts, due_at_ms).await {
                Ok(()) => return Some(Ok(())),
                Err(error) => {
                    self.metrics.dlq_produce_errors.inc();
                    if let Some(refused) = too_large.refused(&error, "retry") {
                        return Some(Err(refused));
                    }
                    if let Some(held_back) = self.outage_log.admit("retry produce failed", Instant::now()) {
                        tracing::warn!(error = %error, held_back, "retry produce failed; retrying");
                    }
                }
            }
            self.pause(&mut backoff).await?;
        }
    }

    /// Claims, retrying Redis errors until they clear (fail closed). `None` on shutdown.
    pub(super) async fn claim(&self, token: &ClaimToken) -> Option<Claim> {
        self.redis_until_done("claim", || self.dedupe.claim(token)).await
    }

    /// Marks the event done, retrying Redis errors. The handler succeeded, so storing the offset without the done
    /// marker could let a provider's retry be processed again: keep trying (the claim guards it meanwhile).
    pub(super) async fn mark_done(&self, token: &ClaimToken, marker: &DoneMarker, event: &InboundEvent) -> Option<()> {
        let still_ours = self.redis_until_done("done", || self.dedupe.mark_done(token, marker)).await?;
        if !still_ours {
            claim_expired(event);
        }
        Some(())
    }

    /// Runs the Redis `operation` until it answers, timing each attempt and pausing (with backoff) after each
    /// failure; `None` on shutdown.
    pub(super) async fn redis_until_done<T, F, Attempt>(&self, operation: &'static str, attempt: F) -> Option<T>
    where
        F: Fn() -> Attempt,
        Attempt: Future<Output = Result<T, DedupeError>>,
    {
        let mut backoff = INFRA_BACKOFF_MIN;
        loop {
            match self.timed_redis(operation, attempt()).await {
                Ok(value) => {
                    self.redis_recovered();
                    return Some(value);
                }
                Err(error) => self.redis_failed(operation, &error),
            }
            self.pause(&mut backoff).await?;
        }
    }

    /// One Redis call, observed in `hookline_consumer_redis_duration_seconds{operation}`.
    pub(super) async fn timed_redis<T>(
        &self,
        operation: &'static str,
        call: impl Future<Output = Result<T, DedupeError>>,
    ) -> Result<T, DedupeError> {
        let started = Instant::now();
        let result = call.await;
        self.metrics.redis_duration.with_label_values(&[operation]).observe(started.elapsed().as_secs_f64());
        result
    }

    /// Best effort: a lost release only delays the retry until the lease expires.
    pub(super) async fn release(&self, token: &ClaimToken) {
        if let Err(error) = self.timed_redis("release", self.dedupe.release(token)).await {
            self.redis_failed("release", &error);
        }
    }

    /// Publishes to the DLQ, retrying until Kafka acknowledges; returns the new entry id. `None` on shutdown.
    ///
    /// A copy the broker refuses as too large for the DLQ topic (twice in a row) is not tried again: the record is
    /// dead-lettered by reference instead ([`crate::dlq::DeadLetters::publish_by_reference`]), an ordinary small
    /// produce, retried like any.
    pub(super) async fn dead_letter(
        &self,
        message: &Record,
        source: &str,
        event_id: Option<&str>,
        failure: &Failure<'_>,
    ) -> Option<String> {
        self.dead_letter_as(message, source, event_id, failure, None).await
    }

    /// Dead-letters by reference a record whose retry or deferral copy was refused as too large.
    pub(super) async fn dead_letter_by_reference(
        &self,
        message: &Record,
        source: &str,
        event_id: Option<&str>,
        failure: &Failure<'_>,
        refused: CopyTooLarge,
    ) -> Option<String> {
        self.dead_letter_as(message, source, event_id, failure, Some(refused)).await
    }

    /// [`Self::dead_letter`], by reference from the start when a copy was `refused` already.
    async fn dead_letter_as(
        &self,
        message: &Record,
        source: &str,
        event_id: Option<&str>,
        failure: &Failure<'_>,
        mut refused: Option<CopyTooLarge>,
    ) -> Option<String> {
        let mut backoff = INFRA_BACKOFF_MIN;
        let mut too_large = TooLargeStreak::default();
        loop {
            let published = match &refused {
                None => self.dead_letters.publish(message, failure).await,
                Some(refused) => {
                    // The failure's error, then why the record was not copied.
                    let error = format!("{}; {refused}", failure.error);
                    let failure = Failure { error: &error, ..failure.clone() };
                    self.dead_letters.publish_by_reference(message, &failure).await
                }
            };
            match published {
                Ok(entry_id) => {
                    // The alert: an error line here, `hookline_consumer_dead_lettered_total`, and the webhook.
                    tracing::error!(
                        source = %source,
                        event_id = %event_id.unwrap_or(""),
                        entry_id = %entry_id,
                        error_class = failure.class.as_str(),
                        attempts = failure.attempts,
                        error = failure.error,
                        by_reference = refused.is_some(),
                        "event dead-lettered"
                    );
                    self.metrics.dead_lettered.with_label_values(&[source, failure.class.as_str()]).inc();
                    self.alerts.dead_lettered(DeadLettered {
                        source: source.to_owned(),
                        error_class: failure.class.as_str(),
                        event_id: event_id.map(str::to_owned),
                    });
                    return Some(entry_id);
                }
                Err(error) => {
                    self.metrics.dlq_produce_errors.inc();
                    if refused.is_none() {
                        refused = too_large.refused(&error, "dead-letter");
                        if refused.is_some() {
                            continue;
                        }
                    }
                    if let Some(held_back) = self.outage_log.admit("dead-letter produce failed", Instant::now()) {
                        tracing::warn!(source = %source, error = %error, held_back, "dead-letter produce failed; retrying");
                    }
                }
            }
            self.pause(&mut backoff).await?;
        }
    }

    /// Records a DLQ entry's fate, retrying until Kafka acknowledges. False on shutdown.
    pub(super) async fn record_status(&self, entry_id: &str, record: &EntryStatusRecord) -> bool {
        let mut backoff = INFRA_BACKOFF_MIN;
        loop {
            match self.dead_letters.record_status(entry_id, record).await {
                Ok(()) => return true,
                Err(error) => {
                    if let Some(held_back) = self.outage_log.admit("status produce failed", Instant::now()) {
                        tracing::warn!(entry_id = %entry_id, error = %error, held_back, "status produce failed; retrying");
                    }
                }
            }
            if self.pause(&mut backoff).await.is_none() {
                return false;
            }
        }
    }

    pub(super) fn redis_failed(&self, operation: &'static str, error: &DedupeError) {
        self.metrics.dedupe_errors.inc();
        self.metrics.paused.set(1);
        self.redis_ready.store(false, Ordering::Relaxed);
        if let Some(held_back) = self.outage_log.admit("redis failed", Instant::now()) {
            tracing::warn!(
                operation,
                error = %error,
                cause = ?std::error::Error::source(error),
                held_back,
                "redis failed; pausing (rate-limited log; hookline_consumer_dedupe_errors_total counts every one)"
            );
        }
    }

    pub(super) fn redis_recovered(&self) {
        self.metrics.paused.set(0);
        self.redis_ready.store(true, Ordering::Relaxed);
    }

    /// Exponential backoff for handler retries, jittered uniformly in [ceiling/2, ceiling].
    pub(super) fn retry_backoff(&self, attempts: u32) -> Duration {
        let exponent = attempts.saturating_sub(1).min(20);
        let ceiling = self.retry.initial_backoff_ms.saturating_mul(1 << exponent).min(self.retry.max_backoff_ms);
        Duration::from_millis(rand::rng().random_range(ceiling / 2..=ceiling))
    }

    /// Sleeps `backoff` (doubling it up to the cap); `None` when shutdown came first.
    pub(super) async fn pause(&self, backoff: &mut Duration) -> Option<()> {
        let this = *backoff;
        *backoff = (*backoff * 2).min(INFRA_BACKOFF_MAX);
        self.sleep(this).await
    }

    pub(super) async fn sleep(&self, duration: Duration) -> Option<()> {
        tokio::select! {
            () = self.shutdown.cancelled() => None,
            () = tokio::time::sleep(duration) => Some(()),
        }
    }
}

/// The done marker found the claim gone: another consumer may have processed the event too.
pub(super) fn claim_expired(event: &InboundEvent) {
    tracing::warn!(
        source = %event.meta.source,
        event_id = %event.meta.event_id,
        "claim expired while processing: the handler ran longer than the lease"
    );
}
