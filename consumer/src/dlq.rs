//! Publishing what cannot succeed to the dead-letter topic: the raw body unchanged, the original headers, and
//! the failure's metadata (the dead-letter record of the `record` crate). The original offset is stored only after
//! the DLQ produce is acknowledged; a failed DLQ produce is retried, never skipped.

use std::time::Duration;

use crate::{
    record::Record,
    retry::{Attempts, RetryHeaders},
};

use hookline_common::{
    config::KafkaConfig,
    producer::{AckedProducer, ProduceError, QueueWait},
    wire::{DeadLetterEntry, EntryStatusRecord},
};
use hookline_record::{Outgoing, dead_letter::DeadLetterFailure};
use rdkafka::error::KafkaError;

/// Why an event is being dead-lettered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// Retryable failures that did not clear within the retry budget.
    RetryableExhausted,
    /// A failure no retry can fix (including a record with no hookline headers).
    Poison,
    /// A record without hookline's valid MAC ([`hookline_common::record_auth`]): written by something that does
    /// not hold the record key, or changed since. Never processed, never claimed in dedupe; alerted, and never
    /// replayed without `force`.
    UnauthenticatedRecord,
}

impl ErrorClass {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RetryableExhausted => "retryable_exhausted",
            Self::Poison => "poison",
            Self::UnauthenticatedRecord => hookline_record::UNAUTHENTICATED_RECORD_CLASS,
        }
    }
}

/// The failure metadata of one dead-letter record.
#[derive(Debug, Clone)]
pub struct Failure<'a> {
    pub class: ErrorClass,
    pub error: &'a str,
    pub attempts: u32,
    pub handler: &'a str,
    pub first_failure_at_ms: i64,
    pub last_failure_at_ms: i64,
}

#[derive(Clone)]
pub struct DeadLetters {
    producer: AckedProducer,
    topic: String,
    status_topic: String,
    retry_topic: String,
    group_id: String,
    service: String,
    /// How long the service's `postgres` handler keeps dedupe rows, for a service that has one.
    dedupe_retention_days: Option<u32>,
}

impl std::fmt::Debug for DeadLetters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeadLetters").field("topic", &self.topic).finish_non_exhaustive()
    }
}

impl DeadLetters {
    /// Dead letters, retries and fates of the consumer service `service`, whose retry topic is `retry_topic`.
    pub fn new(kafka: &KafkaConfig, service: &str, retry_topic: &str) -> Result<Self, KafkaError> {
        Ok(Self {
            producer: AckedProducer::new(kafka, "consumer-dlq-producer")?,
            topic: kafka.dlq_topic.clone(),
            status_topic: kafka.dlq_status_topic.clone(),
            retry_topic: retry_topic.to_owned(),
            group_id: kafka.group_id.clone(),
            service: service.to_owned(),
            dedupe_retention_days: None,
        })
    }

    /// Stamps every dead letter with how long the service's `postgres` handler keeps dedupe rows (`None`: the
    /// service has none), so the replayer can refuse a re-drive that could apply an effect twice
    /// ([`DeadLetterFailure::dedupe_retention_days`]).
    #[must_use]
    pub fn keeping_dedupe_rows_for(mut self, days: Option<u32>) -> Self {
        self.dedupe_retention_days = days;
        self
    }

    /// Produces the dead-letter record for `original` and waits for the broker's acknowledgement; returns the
    /// new entry's id. Keyed like the original (the event id), so all failures of one event land on one DLQ
    /// partition. A record read back from the retry topic is dead-lettered as the original event: its retry
    /// headers are left out and the DLQ record names the inbound position the event first had.
    pub async fn publish(&self, original: &Record, failure: &Failure<'_>) -> Result<String, ProduceError> {
        self.publish_as(original, failure, DlqBody::Copied).await
    }

    /// Produces a dead letter *by reference* for `original`, whose copy the broker refused as too large: the
    /// failure headers of [`Self::publish`], the original's own headers but the forwarded ones, the body's length,
    /// and an empty body ([`DeadLetterFailure::encode_by_reference`]). The body stays at the original position the record names, from where a re-drive reads
    /// it. Small, so an ordinary produce: a failure is retried like any.
    pub async fn publish_by_reference(&self, original: &Record, failure: &Failure<'_>) -> Result<String, ProduceError> {
        self.publish_as(original, failure, DlqBody::ByReference).await
    }

    async fn publish_as(
        &self,
        original: &Record,
        failure: &Failure<'_>,
        body: DlqBody,
    ) -> Result<String, ProduceError> {
        let record = self.dead_letter_record(original, failure, body == DlqBody::ByReference);
        let delivery = self.producer.send_record(record, QueueWait::UpToDeadline).await?;
        Ok(DeadLetterEntry::entry_id(&self.topic, delivery.partition, delivery.offset))
    }

    /// The dead-letter record for `original` (by reference when `by_reference`), as [`Self::publish`] and
    /// [`Self::publish_by_reference`] send it (before the producer signs it): the golden record tests read it.
    pub fn dead_letter_record(&self, original: &Record, failure: &Failure<'_>, by_reference: bool) -> Outgoing {
        let failure = DeadLetterFailure {
            origin: original.origin(),
            consumer_group: self.group_id.clone(),
            service: self.service.clone(),
            handler: failure.handler.to_owned(),
            attempts: failure.attempts,
            error_class: failure.class.as_str().to_owned(),
            error: failure.error.to_owned(),
            first_failure_at_ms: failure.first_failure_at_ms,
            last_failure_at_ms: failure.last_failure_at_ms,
            consumer_version: env!("CARGO_PKG_VERSION").to_owned(),
            dedupe_retention_days: self.dedupe_retention_days,
            // A fan-out service's destination, only from an authenticated record's event (the consumer addressed
            // it): a replay reaches that destination alone.
            destination: original
                .event
                .as_ref()
                .ok()
                .filter(|_| original.verdict.accepted())
                .and_then(|event| event.destination.clone()),
        };
        if by_reference {
            failure.encode_by_reference(&self.topic, original.original())
        } else {
            failure.encode(&self.topic, original.original())
        }
    }

    /// Parks `original` in the retry topic until `due_at_ms`, with the attempts so far, and waits for the
    /// broker's acknowledgement: only then may the original offset be stored. Keyed like the original.
    pub async fn schedule_retry(
        &self,
        original: &Record,
        attempts: &Attempts,
        due_at_ms: i64,
    ) -> Result<(), ProduceError> {
        let record = self.retry_record(original, attempts, due_at_ms);
        self.producer.send_record(record, QueueWait::UpToDeadline).await.map(drop)
    }

    /// The retry record [`Self::schedule_retry`] sends (before the producer signs it): the golden record tests
    /// read it.
    pub fn retry_record(&self, original: &Record, attempts: &Attempts, due_at_ms: i64) -> Outgoing {
        let retry = RetryHeaders { attempts: attempts.clone(), due_at_ms, origin: original.origin() };
        let destination = original.event.as_ref().ok().and_then(|event| event.destination.as_deref());
        retry.encode(&self.retry_topic, &self.service, destination, original.original())
    }

    /// Records an entry's fate in the status topic (keyed by entry id, compacted) and waits for the ack.
    pub async fn record_status(&self, entry_id: &str, status: &EntryStatusRecord) -> Result<(), ProduceError> {
        let record = status.encode(&self.status_topic, entry_id);
        self.producer.send_record(record, QueueWait::UpToDeadline).await.map(drop)
    }

    /// The record keys this service signs with and verifies with.
    pub fn record_keys(&self) -> &hookline_common::record_auth::RecordKeys {
        self.producer.record_keys()
    }

    /// The consumer service whose dead letters these are.
    /// The consumer group this service reads in.
    pub fn group_id(&self) -> &str {
        &self.group_id
    }

    pub fn service(&self) -> &str {
        &self.service
    }

    /// Waits for queued dead-letter records. Blocking: call off the runtime.
    pub fn flush(&self, timeout: Duration) -> Result<(), KafkaError> {
        self.producer.flush(timeout)
    }
}

/// Whether a dead letter carries the record's body or points to where it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DlqBody {
    Copied,
    ByReference,
}
