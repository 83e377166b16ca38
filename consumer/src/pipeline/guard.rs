//! Nothing stalls on a panic. A record's task that panicked used to end without reporting back: its handler slot
//! and its route slot were never returned and its offset never joined the partition's prefix, so the partition
//! stalled, and after a restart the same record panicked again. Here a panic is a failure like another:
//! - in the handler's call ([`Pipeline::call_handler`]): a retryable failure of that attempt, so the claim is
//!   released, the event is parked in the retry topic (or, ordered, retried in memory) and, once its attempts or
//!   its time budget are spent, dead-lettered (`retryable_exhausted`), with the alert every dead letter raises;
//! - anywhere else in the record's path ([`Pipeline::run`]): the record is recovered the same way from what its
//!   job and headers say (one more attempt counted). A claim the panicking path held is left to expire (its
//!   lease); nothing is marked done. Should the recovery itself panic, the record is retried in memory.
//!
//! Either way the job completes, so the scheduler always gets its [`crate::schedule::Scheduler::complete`] call.
//! Every panic is counted in `hookline_consumer_panics_total{source}` and logged at error level.

use std::{any::Any, panic::AssertUnwindSafe};

use futures_util::FutureExt;
use hookline_common::wire::{InboundEvent, now_ms};

use super::{Disposition, Handled, Interrupted, Pipeline, RetryAt};
use crate::{
    dlq::{ErrorClass, Failure},
    handler::HandlerError,
    metrics::event_outcome,
    retry::Attempts,
    schedule::{Downstream, Job, Work},
};

impl Pipeline {
    /// Runs a started job to its end: the pipeline ([`Self::process`]) or a deferral ([`Self::defer`]). A panic
    /// anywhere on the way ends it as a failure of the record (see the module), never without an answer.
    pub async fn run(&self, job: &Job) -> (Disposition, Downstream) {
        let work = async {
            match job.work {
                Work::Handle => self.process(&job.record, job.prior.clone()).await,
                Work::Defer { due_at_ms, reason } => {
                    (self.defer(&job.record, due_at_ms, reason).await, Downstream::NotCalled)
                }
            }
        };
        match AssertUnwindSafe(work).catch_unwind().await {
            Ok(done) => done,
            Err(panic) => (self.recover(job, &panic_message(panic.as_ref())).await, Downstream::NotCalled),
        }
    }

    /// The handler's call for `event`; a panic in it is a retryable failure of this attempt.
    pub(super) async fn call_handler(&self, event: &InboundEvent) -> Result<(), HandlerError> {
        match AssertUnwindSafe(self.handler.handle(event)).catch_unwind().await {
            Ok(result) => result,
            Err(panic) => {
                let panic = panic_message(panic.as_ref());
                self.panicked(&event.meta.source, Some(&event.meta.event_id), "handler", &panic);
                Err(HandlerError::retryable(format!("handler panicked: {panic}")))
            }
        }
    }

    /// Counts and logs a panic in the path of one record.
    fn panicked(&self, source: &str, event_id: Option<&str>, stage: &'static str, panic: &str) {
        self.metrics.panics.with_label_values(&[source]).inc();
        tracing::error!(
            source = %source,
            event_id = %event_id.unwrap_or(""),
            stage,
            error = %panic,
            "panicked while processing a record: counted as a failed attempt"
        );
    }

    /// A record whose path panicked outside the handler's call: one more failed attempt. Past its attempts or
    /// budget it is dead-lettered; an unordered record written by hookline is parked in the retry topic; an
    /// ordered one (which must keep its key's turn), or one without a valid MAC (never copied into the retry
    /// topic), is retried in memory.
    pub(super) async fn recover(&self, job: &Job, panic: &str) -> Disposition {
        let message = &*job.record;
        let source = message.source_label().to_owned();
        let event_id = message.event_id().map(str::to_owned);
        let ordered = message.event.as_ref().is_ok_and(|event| event.meta.ordering_key.is_some());
        self.panicked(&source, event_id.as_deref(), "pipeline", panic);
        let prior = job.prior.clone().or_else(|| message.retry.as_ref().map(|retry| retry.attempts.clone()));
        let attempts = Attempts {
            attempts: prior.as_ref().map_or(0, |prior| prior.attempts).saturating_add(1),
            first_failure_at_ms: prior.as_ref().map_or_else(now_ms, |prior| prior.first_failure_at_ms),
            last_error: format!("panicked: {panic}"),
        };
        let backoff = self.retry_backoff(attempts.attempts);
        let due_at_ms = now_ms() + i64::try_from(backoff.as_millis()).unwrap_or(i64::MAX);
        let in_memory = || RetryAt { due_at_ms, attempts: attempts.clone() };
        let accepted = message.verdict.accepted();
        let elapsed_ms = u64::try_from(now_ms() - attempts.first_failure_at_ms).unwrap_or(0);
        let retry = self.retry_of(message.event.as_ref().ok());
        let exhausted = attempts.attempts >= retry.max_attempts || elapsed_ms >= retry.max_total_ms;
        let recovery = async {
            if exhausted {
                let failure = Failure {
                    class: if accepted { ErrorClass::RetryableExhausted } else { ErrorClass::UnauthenticatedRecord },
                    error: &attempts.last_error,
                    attempts: attempts.attempts,
                    handler: self.handler.name(),
                    first_failure_at_ms: attempts.first_failure_at_ms,
                    last_failure_at_ms: now_ms(),
                };
                return match self.dead_letter(message, &source, event_id.as_deref(), &failure).await {
                    Some(_) => Handled,
                    None => Interrupted,
                };
            }
            if ordered || !accepted {
                return in_memory();
            }
            match self.park(message, &attempts, due_at_ms).await {
                None => Interrupted,
                Some(Ok(())) => {
                    self.metrics.retries.with_label_values(&[source.as_str()]).inc();
                    Handled
                }
                // Its retry copy cannot be written: retried in memory instead, and dead-lettered (by reference if
                // need be) once its attempts are spent.
                Some(Err(_)) => in_memory(),
            }
        };
        match AssertUnwindSafe(recovery).catch_unwind().await {
            Ok(disposition) => {
                // Counted like the pipeline's own outcomes, so that every record that ends is counted once.
                let outcome = match &disposition {
                    Handled if exhausted => Some(event_outcome::DEAD_LETTERED),
                    Handled => Some(event_outcome::RETRY_SCHEDULED),
                    RetryAt { .. } => Some(event_outcome::RETRY_LATER),
                    Interrupted => None,
                };
                match (outcome, &message.event) {
                    (Some(outcome), Ok(event)) if message.verdict.accepted() => self.count(event, outcome),
                    (Some(outcome), _) => self.metrics.events.with_label_values(&[source.as_str(), outcome]).inc(),
                    (None, _) => {}
                }
                disposition
            }
            Err(second) => {
                self.panicked(&source, event_id.as_deref(), "recovery", &panic_message(second.as_ref()));
                in_memory()
            }
        }
    }
}

/// What a panic said: its message when it is text (as `panic!` makes it), else a placeholder.
pub(super) fn panic_message(panic: &(dyn Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|text| (*text).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

#[cfg(test)]
mod tests {
    use super::panic_message;

    #[test]
    fn a_panics_message_is_kept_whatever_its_type() {
        let text = std::panic::catch_unwind(|| panic!("static text")).unwrap_err();
        assert_eq!(panic_message(text.as_ref()), "static text");
        let formatted = std::panic::catch_unwind(|| panic!("formatted {}", 42)).unwrap_err();
        assert_eq!(panic_message(formatted.as_ref()), "formatted 42");
        let other = std::panic::catch_unwind(|| std::panic::panic_any(7_u8)).unwrap_err();
        assert_eq!(panic_message(other.as_ref()), "a panic without a message");
    }
}
