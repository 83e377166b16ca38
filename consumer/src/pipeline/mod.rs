//! What happens to one record, from the moment it is fetched until its offset may be stored:
//! dedupe claim → validation and handler (with retries) → done marker, or → dead-letter topic. Every path ends in
//! [`Handled`] (store the offset) or [`Interrupted`] (shutdown: do not store; the record is redelivered).
//!
//! Failure rules, decided here and nowhere else:
//! - a record without hookline's valid MAC (`hookline-mac`, [`hookline_common::record_auth`]) is dead-lettered at
//!   once as `unauthenticated_record`, before dedupe: it claims nothing (a forged record carrying a real event id
//!   must not block the real event), reaches no handler and records no replay fate; it is counted in
//!   `hookline_consumer_record_auth_total` and alerted like every dead letter. Inside
//!   `kafka.record_auth.accept_unsigned_until` a record with no MAC at all is processed as before, and counted;
//! - a record no gateway wrote (headers missing) is poison: dead-lettered at once;
//! - a duplicate (key marked done) is skipped, and counted;
//! - an event its route's filter skips ([`crate::filter`]) is claimed like any, then its key becomes the filtered
//!   marker (a done marker naming the filter) instead of the handler running: counted, never poison, and its later
//!   copies are duplicates; a re-drive or a re-processing run is never filtered;
//! - a claim held by another consumer is waited on, never skipped;
//! - Redis unreachable or uncertain: fail closed, pause and retry; never process without the dedupe gate;
//! - a retryable handler failure releases the claim, backs off with jitter (at least the downstream's
//!   `Retry-After`, capped by what remains of the budget) and tries again, until the attempt or time budget is
//!   spent; then, like a poison failure, the event is dead-lettered with every attempt counted. Nothing sleeps
//!   in the record's path: an unordered event is parked in the retry topic ([`crate::retry`]) and its offset
//!   stored once that record is acknowledged; an ordered one waits in the scheduler, holding its key's turn;
//! - a record deferred by the scheduler (its route saturated or its breaker open) is copied to the retry topic
//!   with its attempts unchanged ([`Pipeline::defer`]); its retry budget starts at its first deferral if it never
//!   failed, so deferral alone can never keep an event out of the DLQ past `retry.max_total_ms`;
//! - a dead-letter, retry or status produce that fails is retried; the offset is stored only once Kafka
//!   acknowledged.
//! - a re-driven event (`hookline-replay-of`) takes exactly this path; its DLQ entry is then recorded as
//!   `succeeded` (processed now or before) or `failed_again` (with the new entry's id), also when the re-driven
//!   record is not a hookline record at all (its poison path);
//! - a re-processing request (`hookline-reprocess-id`, an event its service already processed, re-driven by an
//!   operator) claims the run's own key instead of the event's, so it runs once per run whatever the done marker
//!   says, then marks the event done too; its fate is recorded under `reprocess:<run id>:<position>`.

use std::{
    sync::{Arc, atomic::AtomicBool},
    time::Duration,
};

use hookline_common::{
    record_auth::{RecordKind, Verdict},
    telemetry::{
        LogThrottle,
        traces::{self, KeyValue, Parent, SpanKind, TraceSpan, attribute},
    },
    wire::{EntryStatus, EntryStatusRecord, FetchedRecord, now_ms, redis_key::DoneMarker},
};
use tokio_util::sync::CancellationToken;

mod by_reference;
mod calls;
mod filtered;
mod guard;
mod handle;
mod together;

pub use together::{Ended, TOGETHER_MAX};

use crate::{
    alert::Alerts,
    config::RetryConfig,
    dedupe::{Claim, ClaimToken, Dedupe},
    dlq::{DeadLetters, ErrorClass, Failure},
    filter::Filters,
    handler::Handler,
    metrics::{Metrics, event_outcome},
    record::Record,
    retry::Attempts,
};

/// How processing a record ended (see [`Completion`]): `Handled` means processed, skipped as a duplicate, or
/// acknowledged by the DLQ, so the offset may be stored; `Interrupted` means shutdown came first.
pub use crate::schedule::Completion::{self as Disposition, Handled, Interrupted, RetryAt};
use crate::schedule::{DeferReason, Downstream};

/// Pause after a Redis or Kafka error, and between checks of a claim held by another consumer.
const INFRA_BACKOFF_MIN: Duration = Duration::from_millis(100);
const INFRA_BACKOFF_MAX: Duration = Duration::from_secs(5);

/// Everything one record's processing needs; shared by all record tasks.
#[derive(Debug, Clone)]
pub struct Pipeline {
    pub dedupe: Dedupe,
    pub dead_letters: DeadLetters,
    pub handler: Arc<dyn Handler>,
    /// Which events this service skips on purpose, whatever the handler.
    pub filters: Arc<Filters>,
    pub handler_timeout: Duration,
    pub retry: RetryConfig,
    /// The retry budgets of the fan-out destinations that have their own (`[routes.retry]`), by name.
    pub destination_retries: Arc<std::collections::HashMap<String, RetryConfig>>,
    pub metrics: Metrics,
    pub alerts: Alerts,
    /// Cleared while Redis fails, for `/readyz`.
    pub redis_ready: Arc<AtomicBool>,
    /// Rate limit of the lines an outage repeats for every record in flight (Redis failing, produces retried).
    pub outage_log: Arc<LogThrottle>,
    pub shutdown: CancellationToken,
}

/// What became of an event that reached the handler stage.
enum Outcome {
    Processed,
    Duplicate,
    /// Dead-lettered before, and this is not a re-drive: skipped.
    DeadLetteredBefore,
    DeadLettered {
        new_entry: String,
        /// Retryable failures exhausted (the downstream failed), rather than poison.
        exhausted: bool,
    },
    /// An ordered record: retry it at this time, in memory, still at the head of its key.
    RetryLater {
        due_at_ms: i64,
        attempts: Attempts,
    },
    /// Parked in the retry topic (acknowledged): this record is done with.
    RetryScheduled,
    /// Skipped by its route's filter, and recorded so in its dedupe key.
    Filtered,
    /// The handler succeeded and the claim is held; the done marker is the caller's to write
    /// ([`Prepared::done_later`]).
    Unmarked(Box<Unmarked>),
}

/// What the path of a record started with others was given ([`Pipeline::run_together`]).
#[derive(Debug, Default)]
pub(crate) struct Prepared {
    /// The first claim's answer, made together with the other records'.
    claim: Option<Claim>,
    /// Return a success unmarked, for its done marker to be written with the others'.
    done_later: bool,
}

/// A record whose handler succeeded, waiting for its done marker.
#[derive(Debug)]
pub(crate) struct Unmarked {
    token: ClaimToken,
    marker: DoneMarker,
}

/// Where the path of a record started with others stands: ended, or processed and waiting for its done marker.
#[derive(Debug)]
pub(crate) enum Step {
    End(Disposition, Downstream),
    Unmarked(Box<Unmarked>),
}

impl From<(Disposition, Downstream)> for Step {
    fn from((disposition, downstream): (Disposition, Downstream)) -> Self {
        Step::End(disposition, downstream)
    }
}

impl Outcome {
    /// The `outcome` label of `hookline_consumer_events_total`: one of [`event_outcome::ALL`].
    fn label(&self) -> &'static str {
        match self {
            Outcome::Processed => event_outcome::PROCESSED,
            Outcome::Duplicate => event_outcome::DUPLICATE,
            Outcome::DeadLetteredBefore => event_outcome::DEAD_LETTERED_BEFORE,
            Outcome::DeadLettered { .. } => event_outcome::DEAD_LETTERED,
            Outcome::RetryLater { .. } => event_outcome::RETRY_LATER,
            Outcome::RetryScheduled => event_outcome::RETRY_SCHEDULED,
            // Counted once marked ([`Pipeline::finish_unmarked`]).
            Outcome::Unmarked(_) => event_outcome::PROCESSED,
            Outcome::Filtered => event_outcome::FILTERED,
        }
    }

    /// What this outcome says of the route's downstream, for its circuit breaker.
    fn downstream(&self) -> Downstream {
        match self {
            Outcome::Processed | Outcome::Unmarked(_) | Outcome::DeadLettered { exhausted: false, .. } => {
                Downstream::Answered
            }
            Outcome::Duplicate | Outcome::DeadLetteredBefore | Outcome::Filtered => Downstream::NotCalled,
            Outcome::DeadLettered { exhausted: true, .. } | Outcome::RetryLater { .. } | Outcome::RetryScheduled => {
                Downstream::Failed
            }
        }
    }
}

impl Pipeline {
    /// Processes one record, as parsed at the door; `prior` carries the attempts of an ordered record retried in
    /// memory. Returns how it ended and what the handler call said of the downstream.
    ///
    /// With traces on, the processing is a `process <topic>` consumer span continuing the record's `traceparent`
    /// (its retry, dead-letter and status sends and the handler call are its children).
    pub async fn process(&self, message: &Record, prior: Option<Attempts>) -> (Disposition, Downstream) {
        if !traces::enabled() {
            return self.process_record(message, prior, &TraceSpan::off()).await;
        }
        let span = self.process_span(message);
        let (disposition, downstream) = span.scope(self.process_record(message, prior, &span)).await;
        if matches!(disposition, Interrupted) {
            span.set(attribute::OUTCOME, || "interrupted");
        }
        (disposition, downstream)
    }

    /// The `process <topic>` span of a record, continuing the trace its `traceparent` carries (a retry record's
    /// carries its sender's context, so a retry continues the trace) when its MAC was accepted ([`Record::trace`]);
    /// else a new trace.
    fn process_span(&self, message: &Record) -> TraceSpan {
        let parent = match &message.trace {
            Some(span_context) => Parent::Remote(span_context),
            None => Parent::Root,
        };
        TraceSpan::start(
            SpanKind::Consumer,
            parent,
            || format!("process {}", message.topic()),
            || {
                let mut attributes = vec![
                    KeyValue::new(attribute::MESSAGING_SYSTEM, "kafka"),
                    KeyValue::new(attribute::MESSAGING_OPERATION_NAME, "process"),
                    KeyValue::new(attribute::MESSAGING_OPERATION_TYPE, "process"),
                    KeyValue::new(attribute::MESSAGING_DESTINATION_NAME, message.topic().to_owned()),
                    KeyValue::new(attribute::MESSAGING_DESTINATION_PARTITION_ID, message.partition().to_string()),
                    KeyValue::new(attribute::MESSAGING_KAFKA_OFFSET, message.offset()),
                    KeyValue::new(attribute::MESSAGING_CONSUMER_GROUP_NAME, self.dead_letters.group_id().to_owned()),
                    KeyValue::new(attribute::SERVICE, self.dead_letters.service().to_owned()),
                ];
                if let Some(event_id) = message.event_id() {
                    attributes.push(KeyValue::new(attribute::MESSAGING_MESSAGE_ID, event_id.to_owned()));
                }
                attributes
            },
        )
    }

    async fn process_record(
        &self,
        message: &Record,
        prior: Option<Attempts>,
        span: &TraceSpan,
    ) -> (Disposition, Downstream) {
        match self.process_prepared(message, prior, span, Prepared::default()).await {
            Step::End(disposition, downstream) => (disposition, downstream),
            // Not returned without `done_later`; marked here all the same.
            Step::Unmarked(unmarked) => self.mark_alone(message, *unmarked).await,
        }
    }

    /// [`Self::process_record`], with what [`Prepared`] gives.
    async fn process_prepared(
        &self,
        message: &Record,
        prior: Option<Attempts>,
        span: &TraceSpan,
        prepared: Prepared,
    ) -> Step {
        self.metrics.record_auth.with_label_values(&[message.verdict.label()]).inc();
        if let Verdict::Refused(refusal) = &message.verdict {
            let now = now_ms();
            let error = refusal.reason();
            let failure = Failure {
                class: ErrorClass::UnauthenticatedRecord,
                error: &error,
                attempts: 0,
                handler: self.handler.name(),
                first_failure_at_ms: now,
                last_failure_at_ms: now,
            };
            // Its headers are not to be believed, its source name included: the bounded `unknown` label.
            let source = "unknown";
            // Named in the DLQ entry as its headers claim it (not believed: it claims nothing).
            let event_id = message.claims().event_id();
            if self.dead_letter(message, source, event_id.as_deref(), &failure).await.is_none() {
                return (Interrupted, Downstream::NotCalled).into();
            }
            self.metrics.events.with_label_values(&[source, event_outcome::DEAD_LETTERED]).inc();
            span.set(attribute::OUTCOME, || event_outcome::DEAD_LETTERED);
            span.fail("unauthenticated_record", || error.clone());
            return (Handled, Downstream::NotCalled).into();
        }
        let event = match &message.event {
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
                // The source label of a record that names none: bounded, and visible on the dashboards.
                let source = "unknown";
                let Some(new_entry) = self.dead_letter(message, source, None, &failure).await else {
                    return (Interrupted, Downstream::NotCalled).into();
                };
                self.metrics.events.with_label_values(&[source, event_outcome::DEAD_LETTERED]).inc();
                span.set(attribute::OUTCOME, || event_outcome::DEAD_LETTERED);
                span.fail("poison", || failure.error.to_owned());
                // A re-driven entry that is not a hookline record still gets its outcome, or it would stay
                // `replayed` for ever.
                let claims = message.claims();
                if let Some(entry_id) = claims.replay_of() {
                    let record = EntryStatusRecord {
                        status: EntryStatus::FailedAgain,
                        at_ms: now_ms(),
                        by: format!("consumer:{}", self.dead_letters.service()),
                        event_id: None,
                        new_entry: Some(new_entry),
                        note: Some("not a hookline record".to_owned()),
                        replays: claims.replay_count(),
                    };
                    if !self.record_status(&entry_id, &record).await {
                        return (Interrupted, Downstream::NotCalled).into();
                    }
                }
                return (Handled, Downstream::NotCalled).into();
            }
        };
        span.set(attribute::SOURCE, || event.meta.source.clone());
        let outcome = match self.handle(message, event, prior, span, prepared).await {
            Some(Outcome::Unmarked(unmarked)) => return Step::Unmarked(unmarked),
            Some(Outcome::RetryLater { due_at_ms, attempts }) => {
                span.set(attribute::OUTCOME, || event_outcome::RETRY_LATER);
                return (RetryAt { due_at_ms, attempts }, Downstream::Failed).into();
            }
            Some(outcome) => outcome,
            None => return (Interrupted, Downstream::NotCalled).into(),
        };
        span.set(attribute::OUTCOME, || outcome.label());
        let downstream = outcome.downstream();
        self.count(event, outcome.label());
        // A re-driven DLQ entry's fate is keyed by its entry id; a re-processing request's by
        // `reprocess:<run id>:<where the record was>`, so that each re-processing is recorded.
        let fate_key = event.replay_of.clone().or_else(|| {
            let run_id = event.reprocess_id.as_deref()?;
            let of = message.claims().reprocess_of().unwrap_or_default();
            Some(format!("{}{run_id}:{of}", hookline_common::wire::REPROCESS_STATUS_KEY_PREFIX))
        });
        if let Some(entry_id) = &fate_key {
            let (status, new_entry, note) = match outcome {
                Outcome::Processed => (EntryStatus::Succeeded, None, None),
                Outcome::Duplicate => (EntryStatus::Succeeded, None, Some("already processed".to_owned())),
                // Not reached: a re-drive claims over the dead marker. Left as it was rather than called a success.
                Outcome::DeadLetteredBefore => return (Handled, downstream).into(),
                // Not reached: filters never skip a re-drive or a re-processing run.
                Outcome::Filtered => return (Handled, downstream).into(),
                Outcome::DeadLettered { new_entry, .. } => (EntryStatus::FailedAgain, Some(new_entry), None),
                Outcome::RetryLater { .. } | Outcome::RetryScheduled | Outcome::Unmarked(_) => {
                    return (Handled, downstream).into();
                }
            };
            let record = EntryStatusRecord {
                status,
                at_ms: now_ms(),
                by: format!("consumer:{}", self.dead_letters.service()),
                event_id: Some(event.meta.event_id.clone()),
                new_entry,
                note,
                // Carried so that the count survives compaction of the entry's earlier `replayed` record.
                replays: event.replay_count,
            };
            if !self.record_status(entry_id, &record).await {
                return (Interrupted, downstream).into();
            }
        }
        (Handled, downstream).into()
    }

    /// The retry budget of `event`: its destination's own, if it has one, else the service's.
    pub(crate) fn retry_of(&self, event: Option<&hookline_common::wire::InboundEvent>) -> &RetryConfig {
        event
            .and_then(|event| event.destination.as_ref())
            .and_then(|destination| self.destination_retries.get(destination))
            .unwrap_or(&self.retry)
    }

    /// Counts an event's outcome: by source, and by destination for a destination of a fan-out service.
    pub(crate) fn count(&self, event: &hookline_common::wire::InboundEvent, outcome: &'static str) {
        self.metrics.events.with_label_values(&[event.meta.source.as_str(), outcome]).inc();
        if let Some(destination) = &event.destination {
            self.metrics.destination_events.with_label_values(&[destination.as_str(), outcome]).inc();
        }
    }

    /// Parks a record its route cannot take now (saturated, or its breaker open) in the retry topic until
    /// `due_at_ms`, spending no attempt: it keeps the attempts of its retry headers, if any. Its retry budget
    /// starts now unless it started before, so that an event deferred again and again still ends, in the DLQ at
    /// the latest (`retry.max_total_ms`). The offset may be stored once this returns `Handled`: the broker
    /// acknowledged the copy, exactly as for a retry.
    ///
    /// With traces on, a `process <topic>` span with outcome `deferred`, so the copy's send (and the copy's later
    /// processing) stays in the record's trace.
    pub async fn defer(&self, message: &Record, due_at_ms: i64, reason: DeferReason) -> Disposition {
        if !traces::enabled() {
            return self.defer_record(message, due_at_ms, reason).await;
        }
        let span = self.process_span(message);
        span.set(attribute::OUTCOME, || "deferred");
        span.set("hookline.defer.reason", || reason.as_str());
        span.scope(self.defer_record(message, due_at_ms, reason)).await
    }

    async fn defer_record(&self, message: &Record, due_at_ms: i64, reason: DeferReason) -> Disposition {
        if !message.verdict.accepted() {
            // Never copied (and so signed) into the retry topic: dead-lettered now instead.
            return self.process(message, None).await.0;
        }
        let attempts = message.retry.as_ref().map(|headers| headers.attempts.clone()).unwrap_or_else(|| Attempts {
            attempts: 0,
            first_failure_at_ms: now_ms(),
            last_error: format!("deferred: {}", reason.as_str()),
        });
        match self.park(message, &attempts, due_at_ms).await {
            None => return Interrupted,
            Some(Ok(())) => {}
            // It cannot be copied: handled now instead, over its route's limit or through its open breaker (this
            // once), rather than dead-lettered without a failure. A failure is then dead-lettered by reference.
            Some(Err(refused)) => {
                tracing::warn!(error = %refused, "deferral not copied: handling the record now");
                return self.process(message, None).await.0;
            }
        }
        self.metrics.deferred.with_label_values(&[message.source_label(), reason.as_str()]).inc();
        Handled
    }

    /// The record's MAC checked with this service's keys, at this consumer's clock (never the record's timestamp,
    /// which its writer chose). Once per record, at the door ([`Record::verdict`]); not counted: [`Self::process`]
    /// counts each record's verdict once. `kind` is what the record's topic holds: a retry topic's records are
    /// never the gateway's, whatever their headers say.
    pub fn authenticate(&self, message: &FetchedRecord, kind: RecordKind) -> Verdict {
        self.dead_letters.record_keys().verify_as(
            kind,
            message.topic(),
            message.key(),
            message.payload(),
            message.headers(),
            now_ms(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--print-metrics` lists the outcome values the deploy checks hold alert rules to: every label is among them.
    #[test]
    fn every_outcome_label_is_listed_for_print_metrics() {
        let attempts = Attempts { attempts: 1, first_failure_at_ms: 0, last_error: String::new() };
        let outcomes = [
            Outcome::Processed,
            Outcome::Duplicate,
            Outcome::DeadLetteredBefore,
            Outcome::DeadLettered { new_entry: String::new(), exhausted: true },
            Outcome::RetryLater { due_at_ms: 0, attempts },
            Outcome::RetryScheduled,
            Outcome::Filtered,
        ];
        let mut labels: Vec<&str> = outcomes.iter().map(Outcome::label).collect();
        // Skipped before the pipeline, in the fetch loop.
        labels.push(event_outcome::OTHER_SERVICE);
        assert_eq!(labels, event_outcome::ALL);
    }
}
