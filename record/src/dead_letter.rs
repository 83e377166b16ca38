//! The dead-letter record (the DLQ topic): the original record's key, body and headers (but its retry headers),
//! plus the `hookline-dlq-*` failure headers. A dead letter *by reference* (its copy was too large for the broker)
//! has an empty body, leaves out the forwarded `http-*` headers, carries the event id as
//! [`header::dlq::EVENT_ID`] and the body's length as [`header::dlq::BODY_BY_REFERENCE`].
//!
//! **One decoder.** The replayer's index and the tools once read these headers each their own way and disagreed
//! on a record without [`header::dlq::LAST_FAILURE_AT_MS`]: the index took the record's timestamp, the tools had
//! none. [`DeadLetterEntry::decode`] decides it once: the header, else the record's own timestamp (a dead letter
//! is written at its last failure). They disagreed on a dead letter *by reference* too: the re-drive took any
//! [`header::dlq::BODY_BY_REFERENCE`] header for one, the index only one whose value is a number.
//! [`DeadLetterEntry::by_reference`] is the re-drive's rule (a dead letter that says its body is elsewhere is
//! never re-driven with its own empty body); its length is believed only when it is a number.

use bytes::Bytes;

use crate::{
    FORMAT_VERSION, MAX_DLQ_ERROR_BYTES, Original, Outgoing, READABLE_FORMAT_VERSIONS, WireError, header,
    retry::{Origin, is_retry_header},
    table::{Header, HeaderTable, first_text},
    truncate_utf8,
};

/// Every dead-letter header ([`header::dlq`]) starts with this: a re-drive drops them, and no inbound record
/// may carry one.
pub(crate) const HEADER_PREFIX: &str = "hookline-dlq-";

/// The failure metadata of one dead letter, as the consumer writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetterFailure {
    /// Where the event first was, before any retry.
    pub origin: Origin,
    pub consumer_group: String,
    /// The consumer service that dead-lettered it: a replay re-drives it to that service only.
    pub service: String,
    pub handler: String,
    pub attempts: u32,
    /// `retryable_exhausted`, `poison` or [`crate::UNAUTHENTICATED_RECORD_CLASS`].
    pub error_class: String,
    /// Truncated to [`MAX_DLQ_ERROR_BYTES`] when written.
    pub error: String,
    pub first_failure_at_ms: i64,
    pub last_failure_at_ms: i64,
    /// The writer's version.
    pub consumer_version: String,
    /// Days the service's `postgres` handler keeps dedupe rows, for a service that has one.
    pub dedupe_retention_days: Option<u32>,
    /// In a fan-out service, the destination that failed ([`header::DESTINATION`], kept by a re-drive so that the
    /// replay reaches it alone); `None` outside fan-out mode, and the header is then absent.
    pub destination: Option<String>,
}

impl DeadLetterFailure {
    /// The failure headers, in the order they are written.
    fn fields(&self) -> Vec<(&'static str, String)> {
        let mut fields = vec![
            (header::dlq::ORIGINAL_TOPIC, self.origin.topic.clone()),
            (header::dlq::ORIGINAL_PARTITION, self.origin.partition.to_string()),
            (header::dlq::ORIGINAL_OFFSET, self.origin.offset.to_string()),
            (header::dlq::CONSUMER_GROUP, self.consumer_group.clone()),
            (header::dlq::SERVICE, self.service.clone()),
            (header::dlq::HANDLER, self.handler.clone()),
            (header::dlq::ATTEMPTS, self.attempts.to_string()),
            (header::dlq::ERROR_CLASS, self.error_class.clone()),
            (header::dlq::ERROR, truncate_utf8(&self.error, MAX_DLQ_ERROR_BYTES).to_owned()),
            (header::dlq::FIRST_FAILURE_AT_MS, self.first_failure_at_ms.to_string()),
            (header::dlq::LAST_FAILURE_AT_MS, self.last_failure_at_ms.to_string()),
            (header::dlq::CONSUMER_VERSION, self.consumer_version.clone()),
            (header::dlq::FORMAT_VERSION, FORMAT_VERSION.to_owned()),
        ];
        if let Some(days) = self.dedupe_retention_days {
            fields.push((header::dlq::DEDUPE_RETENTION_DAYS, days.to_string()));
        }
        if let Some(destination) = &self.destination {
            fields.push((header::DESTINATION, destination.clone()));
        }
        fields
    }

    /// The dead letter of `original` to `topic`, carrying its body.
    pub fn encode(&self, topic: &str, original: Original<'_>) -> Outgoing {
        let fields = self.fields();
        // The destination is the failure's: a copied one (of a record written in fan-out mode) is never kept.
        original.copy_with(topic, &fields)
    }

    /// The dead letter *by reference* to `original` (whose copy the broker refused as too large), to `topic`: its
    /// key, its headers but the forwarded ones, the retry headers and the event id (carried as
    /// [`header::dlq::EVENT_ID`]), the failure headers, the body's length, and an empty body.
    pub fn encode_by_reference(&self, topic: &str, original: Original<'_>) -> Outgoing {
        let fields = self.fields();
        let body_bytes = original.body.as_ref().map_or(0, Bytes::len).to_string();
        let mut headers = HeaderTable::with_capacity(original.headers.len() + fields.len() + 2);
        headers.extend_from(original.headers, |name| {
            !is_retry_header(name)
                && !name.starts_with(header::FORWARDED_PREFIX)
                && name != header::EVENT_ID
                && name != header::DESTINATION
                && !fields.iter().any(|(field, _)| *field == name)
        });
        if let Some(Ok(event_id)) = first_text(original.headers.iter(), header::EVENT_ID) {
            headers.push_str(header::dlq::EVENT_ID, &event_id);
        }
        for (name, value) in &fields {
            headers.push_str(name, value);
        }
        headers.push_str(header::dlq::BODY_BY_REFERENCE, &body_bytes);
        Outgoing::new(topic, original.key, Some(Bytes::new()), headers)
    }

    /// Reads back the failure headers [`Self::encode`] writes: each one required, the DLQ format version one this
    /// build reads. What a consumer wrote about a failure, field for field. An entry an older writer left without
    /// some of them (no service, say) is read by [`DeadLetterEntry::decode`], which never fails.
    pub fn decode<'a>(headers: impl Iterator<Item = Header<'a>> + Clone) -> Result<Self, WireError> {
        let optional = |name: &'static str| first_text(headers.clone(), name).transpose();
        let text = |name: &'static str| optional(name)?.ok_or(WireError::MissingHeader(name));
        let number = |name: &'static str| -> Result<i64, WireError> {
            text(name)?.parse().map_err(|_| WireError::BadHeader(name))
        };
        let version = text(header::dlq::FORMAT_VERSION)?;
        if !READABLE_FORMAT_VERSIONS.contains(&version.as_str()) {
            return Err(WireError::UnsupportedVersion(version));
        }
        let retention = header::dlq::DEDUPE_RETENTION_DAYS;
        Ok(Self {
            origin: Origin {
                topic: text(header::dlq::ORIGINAL_TOPIC)?,
                partition: narrow(number(header::dlq::ORIGINAL_PARTITION)?, header::dlq::ORIGINAL_PARTITION)?,
                offset: number(header::dlq::ORIGINAL_OFFSET)?,
            },
            consumer_group: text(header::dlq::CONSUMER_GROUP)?,
            service: text(header::dlq::SERVICE)?,
            handler: text(header::dlq::HANDLER)?,
            attempts: narrow(number(header::dlq::ATTEMPTS)?, header::dlq::ATTEMPTS)?,
            error_class: text(header::dlq::ERROR_CLASS)?,
            error: text(header::dlq::ERROR)?,
            first_failure_at_ms: number(header::dlq::FIRST_FAILURE_AT_MS)?,
            last_failure_at_ms: number(header::dlq::LAST_FAILURE_AT_MS)?,
            consumer_version: text(header::dlq::CONSUMER_VERSION)?,
            dedupe_retention_days: optional(retention)?
                .map(|days| days.parse().map_err(|_| WireError::BadHeader(retention)))
                .transpose()?,
            destination: optional(header::DESTINATION)?,
        })
    }
}

/// `value` as a narrower integer, or header `name` is bad.
fn narrow<T: TryFrom<i64>>(value: i64, name: &'static str) -> Result<T, WireError> {
    T::try_from(value).map_err(|_| WireError::BadHeader(name))
}

/// One dead-letter record, read back: its stable id, the original event's metadata (when it had any) and the
/// failure metadata the consumer attached.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DeadLetterEntry {
    /// `<dlq topic>:<partition>:<offset>`: stable, derived from where the entry lives.
    pub id: String,
    pub partition: i32,
    pub offset: i64,
    pub source: Option<String>,
    /// The consumer service that dead-lettered it ([`header::dlq::SERVICE`]; for an entry written before
    /// services had names, its consumer group, which was the service's default name).
    pub service: Option<String>,
    /// The destination of a fan-out service that failed ([`header::DESTINATION`]): a replay reaches it alone.
    pub destination: Option<String>,
    pub event_id: Option<String>,
    pub event_type: Option<String>,
    pub error_class: Option<String>,
    pub error: Option<String>,
    pub attempts: Option<u32>,
    pub original_topic: Option<String>,
    pub original_partition: Option<i32>,
    pub original_offset: Option<i64>,
    pub first_failure_at_ms: Option<i64>,
    /// [`header::dlq::LAST_FAILURE_AT_MS`], else the record's own timestamp (see the module's documentation).
    pub last_failure_at_ms: Option<i64>,
    /// The body's length: the record's own, or for a dead letter by reference the length it names.
    pub body_bytes: usize,
    /// A dead letter by reference (see the module's documentation): its body is the record it names.
    #[serde(skip)]
    pub by_reference: bool,
    /// [`header::REPLAY_OF`]: the entry whose re-drive failed again into this one.
    #[serde(skip)]
    pub replay_of: Option<String>,
    /// [`header::dlq::DEDUPE_RETENTION_DAYS`], when the record carries it.
    #[serde(skip)]
    pub dedupe_retention_days: Option<i64>,
}

/// Where a dead letter was read: its topic, partition, offset and timestamp (ms, when the broker has one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub offset: i64,
    pub timestamp_ms: Option<i64>,
}

impl DeadLetterEntry {
    pub fn entry_id(topic: &str, partition: i32, offset: i64) -> String {
        format!("{topic}:{partition}:{offset}")
    }

    /// Reads what a DLQ record carries; a header that is absent or unreadable is `None`, never an error, so
    /// that a damaged entry can still be listed and inspected. `body_len`: the record's own body's length.
    pub fn decode<'a>(
        position: Position<'_>,
        body_len: usize,
        headers: impl Iterator<Item = Header<'a>> + Clone,
    ) -> Self {
        let text = |name: &'static str| first_text(headers.clone(), name).and_then(Result::ok);
        let number = |name: &'static str| text(name).and_then(|value| value.parse::<i64>().ok());
        Self {
            id: Self::entry_id(position.topic, position.partition, position.offset),
            partition: position.partition,
            offset: position.offset,
            source: text(header::SOURCE),
            service: text(header::dlq::SERVICE).or_else(|| text(header::dlq::CONSUMER_GROUP)),
            destination: text(header::DESTINATION),
            event_id: text(header::EVENT_ID).or_else(|| text(header::dlq::EVENT_ID)),
            event_type: text(header::EVENT_TYPE),
            error_class: text(header::dlq::ERROR_CLASS),
            error: text(header::dlq::ERROR),
            attempts: number(header::dlq::ATTEMPTS).and_then(|n| u32::try_from(n).ok()),
            original_topic: text(header::dlq::ORIGINAL_TOPIC),
            original_partition: number(header::dlq::ORIGINAL_PARTITION).and_then(|n| i32::try_from(n).ok()),
            original_offset: number(header::dlq::ORIGINAL_OFFSET),
            first_failure_at_ms: number(header::dlq::FIRST_FAILURE_AT_MS),
            last_failure_at_ms: number(header::dlq::LAST_FAILURE_AT_MS).or(position.timestamp_ms),
            // A dead letter by reference: the length of the body it points to.
            body_bytes: number(header::dlq::BODY_BY_REFERENCE)
                .and_then(|n| usize::try_from(n).ok())
                .unwrap_or(body_len),
            by_reference: headers
                .clone()
                .find(|h| h.name == header::dlq::BODY_BY_REFERENCE)
                .is_some_and(|h| h.value.is_some()),
            replay_of: text(header::REPLAY_OF),
            dedupe_retention_days: number(header::dlq::DEDUPE_RETENTION_DAYS),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(dedupe_retention_days: Option<u32>) -> DeadLetterFailure {
        DeadLetterFailure {
            origin: Origin { topic: "webhooks.inbound".into(), partition: 3, offset: 42 },
            consumer_group: "billing-group".into(),
            service: "billing".into(),
            handler: "http".into(),
            attempts: 4,
            error_class: "retryable_exhausted".into(),
            error: "503".into(),
            first_failure_at_ms: 1_700_000_000_000,
            last_failure_at_ms: 1_700_000_009_000,
            consumer_version: "0.1.0".into(),
            dedupe_retention_days,
            destination: dedupe_retention_days.map(|_| "ledger".to_owned()),
        }
    }

    #[test]
    fn a_failure_reads_back_as_written() {
        let mut headers = HeaderTable::new();
        headers.push(header::EVENT_ID, Some(b"evt_1"));
        for days in [None, Some(7)] {
            let written = failure(days);
            let original = Original { key: None, body: Some(Bytes::from_static(b"{}")), headers: &headers };
            let record = written.encode("webhooks.dlq", original);
            assert_eq!(DeadLetterFailure::decode(record.headers.iter()), Ok(written));
        }
    }

    #[test]
    fn a_failure_missing_a_header_or_of_an_unknown_version_is_refused() {
        let record =
            failure(None).encode("webhooks.dlq", Original { key: None, body: None, headers: &HeaderTable::new() });
        let without = |name: &str| record.headers.without(|header| header == name);
        assert_eq!(
            DeadLetterFailure::decode(without(header::dlq::SERVICE).iter()),
            Err(WireError::MissingHeader(header::dlq::SERVICE))
        );
        let mut future = without(header::dlq::FORMAT_VERSION);
        future.push(header::dlq::FORMAT_VERSION, Some(b"9"));
        assert_eq!(DeadLetterFailure::decode(future.iter()), Err(WireError::UnsupportedVersion("9".into())));
    }
}
