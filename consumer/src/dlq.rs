//! Publishing what cannot succeed to the dead-letter topic: the raw body unchanged, the original headers, and
//! the failure's metadata (see `hookline_common::wire::header::dlq`). The original offset is stored only after
//! the DLQ produce is acknowledged; a failed DLQ produce is retried, never skipped.

use std::time::Duration;

use crate::{record::Record, retry::Attempts};

use hookline_common::{
    config::KafkaConfig,
    producer::{AckedProducer, ProduceError, QueueWait},
    wire::{
        DeadLetterEntry, EntryStatusRecord, FORMAT_VERSION, FetchedRecord, MAX_DLQ_ERROR_BYTES,
        header::{self, dlq, retry},
    },
};
use rdkafka::{
    error::KafkaError,
    message::{Header, Headers, OwnedHeaders},
    producer::FutureRecord,
};

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
            Self::UnauthenticatedRecord => hookline_common::wire::UNAUTHENTICATED_RECORD_CLASS,
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
    /// [`dlq::DEDUPE_RETENTION_DAYS`], for a service with a `postgres` handler.
    dedupe_retention_days: Option<String>,
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
    /// ([`dlq::DEDUPE_RETENTION_DAYS`]).
    #[must_use]
    pub fn keeping_dedupe_rows_for(mut self, days: Option<u32>) -> Self {
        self.dedupe_retention_days = days.map(|days| days.to_string());
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
    /// failure headers of [`Self::publish`], the original's `hookline-*` headers (forwarded `http-*` headers left
    /// out, and the event id carried as [`dlq::EVENT_ID`]), [`dlq::BODY_BY_REFERENCE`] with the body's length,
    /// and an empty body. The body stays at the original position the record names, from where a re-drive reads
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
        let delivery = self.producer.send(record, QueueWait::UpToDeadline).await?;
        Ok(DeadLetterEntry::entry_id(&self.topic, delivery.partition, delivery.offset))
    }

    /// The dead-letter record for `original` (by reference when `by_reference`), as [`Self::publish`] and
    /// [`Self::publish_by_reference`] send it (before the producer signs it): the golden record tests read it.
    pub fn dead_letter_record<'a>(
        &'a self,
        original: &'a Record,
        failure: &Failure<'_>,
        by_reference: bool,
    ) -> FutureRecord<'a, [u8], [u8]> {
        let body = if by_reference { DlqBody::ByReference } else { DlqBody::Copied };
        let body_bytes = original.payload().map_or(0, <[u8]>::len).to_string();
        let origin = original.origin();
        let partition = origin.partition.to_string();
        let offset = origin.offset.to_string();
        let attempts = failure.attempts.to_string();
        let first = failure.first_failure_at_ms.to_string();
        let last = failure.last_failure_at_ms.to_string();
        let error = truncate_utf8(failure.error, MAX_DLQ_ERROR_BYTES);
        let mut failure_headers = vec![
            (dlq::ORIGINAL_TOPIC, origin.topic.as_str()),
            (dlq::ORIGINAL_PARTITION, partition.as_str()),
            (dlq::ORIGINAL_OFFSET, offset.as_str()),
            (dlq::CONSUMER_GROUP, self.group_id.as_str()),
            (dlq::SERVICE, self.service.as_str()),
            (dlq::HANDLER, failure.handler),
            (dlq::ATTEMPTS, attempts.as_str()),
            (dlq::ERROR_CLASS, failure.class.as_str()),
            (dlq::ERROR, error),
            (dlq::FIRST_FAILURE_AT_MS, first.as_str()),
            (dlq::LAST_FAILURE_AT_MS, last.as_str()),
            (dlq::CONSUMER_VERSION, env!("CARGO_PKG_VERSION")),
            (dlq::FORMAT_VERSION, FORMAT_VERSION),
        ];
        if let Some(days) = &self.dedupe_retention_days {
            failure_headers.push((dlq::DEDUPE_RETENTION_DAYS, days.as_str()));
        }
        match body {
            DlqBody::Copied => copy_of(original, &self.topic, &failure_headers),
            DlqBody::ByReference => reference_to(original, &self.topic, &failure_headers, &body_bytes),
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
        self.producer.send(record, QueueWait::UpToDeadline).await.map(drop)
    }

    /// The retry record [`Self::schedule_retry`] sends (before the producer signs it): the golden record tests
    /// read it.
    pub fn retry_record<'a>(
        &'a self,
        original: &'a Record,
        attempts: &Attempts,
        due_at_ms: i64,
    ) -> FutureRecord<'a, [u8], [u8]> {
        let origin = original.origin();
        let (partition, offset) = (origin.partition.to_string(), origin.offset.to_string());
        let (count, first) = (attempts.attempts.to_string(), attempts.first_failure_at_ms.to_string());
        let due = due_at_ms.to_string();
        let error = truncate_utf8(&attempts.last_error, MAX_DLQ_ERROR_BYTES);
        let retry_headers = [
            (retry::ATTEMPTS, count.as_str()),
            (retry::FIRST_FAILURE_AT_MS, first.as_str()),
            (retry::DUE_AT_MS, due.as_str()),
            (retry::ERROR, error),
            (retry::ORIGINAL_TOPIC, origin.topic.as_str()),
            (retry::ORIGINAL_PARTITION, partition.as_str()),
            (retry::ORIGINAL_OFFSET, offset.as_str()),
            // Only this service takes it back, wherever the record is read.
            (header::SERVICE, self.service.as_str()),
        ];
        copy_of(original, &self.retry_topic, &retry_headers)
    }

    /// Records an entry's fate in the status topic (keyed by entry id, compacted) and waits for the ack.
    pub async fn record_status(&self, entry_id: &str, status: &EntryStatusRecord) -> Result<(), ProduceError> {
        // Strings, integers and an enum: serialising cannot fail.
        let value = serde_json::to_vec(status).expect("a status record serialises");
        let record = FutureRecord::<str, [u8]>::to(&self.status_topic).key(entry_id).payload(&value);
        self.producer.send(record, QueueWait::UpToDeadline).await.map(drop)
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

/// A record to `topic` with `original`'s key, body and headers (its retry headers, and any header `extra`
/// replaces, left out) and `extra` headers.
fn copy_of<'a>(original: &'a FetchedRecord, topic: &'a str, extra: &[(&str, &str)]) -> FutureRecord<'a, [u8], [u8]> {
    let replaced = |key: &str| extra.iter().any(|(name, _)| *name == key);
    let kept = crate::retry::original_headers(original).filter(|header| !replaced(header.key));
    let mut headers = OwnedHeaders::new_with_capacity(original.headers().map_or(0, Headers::count) + extra.len());
    for header in kept {
        headers = headers.insert(header);
    }
    for (key, value) in extra {
        headers = headers.insert(Header { key, value: Some(*value) });
    }
    let mut record = FutureRecord::to(topic).headers(headers);
    if let Some(key) = original.key() {
        record = record.key(key);
    }
    if let Some(payload) = original.payload() {
        record = record.payload(payload);
    }
    record
}

/// A dead letter by reference to `original`: its key, its `hookline-*` headers but the event id (carried as
/// [`dlq::EVENT_ID`], see there why) and without its retry headers, `extra`, [`dlq::BODY_BY_REFERENCE`] =
/// `body_bytes`, and an empty body. Forwarded provider headers (`http-*`, the one part of a record's headers whose
/// size a provider chooses) are left out: the re-drive takes them from the original record.
fn reference_to<'a>(
    original: &'a FetchedRecord,
    topic: &'a str,
    extra: &[(&str, &str)],
    body_bytes: &str,
) -> FutureRecord<'a, [u8], [u8]> {
    let kept = crate::retry::original_headers(original).filter(|header| {
        !header.key.starts_with(header::FORWARDED_PREFIX)
            && header.key != header::EVENT_ID
            && !extra.iter().any(|(name, _)| *name == header.key)
    });
    let mut headers = OwnedHeaders::new_with_capacity(original.headers().map_or(0, Headers::count) + extra.len() + 2);
    for kept in kept {
        headers = headers.insert(kept);
    }
    if let Some(Ok(event_id)) = hookline_common::wire::header_str(original.headers(), header::EVENT_ID) {
        headers = headers.insert(Header { key: dlq::EVENT_ID, value: Some(event_id.as_str()) });
    }
    for (key, value) in extra {
        headers = headers.insert(Header { key, value: Some(*value) });
    }
    headers = headers.insert(Header { key: dlq::BODY_BY_REFERENCE, value: Some(body_bytes) });
    let mut record = FutureRecord::to(topic).headers(headers).payload(&[][..]);
    if let Some(key) = original.key() {
        record = record.key(key);
    }
    record
}

/// Whether a dead letter carries the record's body or points to where it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DlqBody {
    Copied,
    ByReference,
}

/// The longest prefix of `text` that fits in `max_bytes` without splitting a character.
fn truncate_utf8(text: &str, max_bytes: usize) -> &str {
    if text.len() <= max_bytes {
        return text;
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::truncate_utf8;

    #[test]
    fn truncation_never_splits_a_character() {
        assert_eq!(truncate_utf8("héllo", 2), "h");
        assert_eq!(truncate_utf8("héllo", 3), "hé");
        assert_eq!(truncate_utf8("short", 100), "short");
    }
}
