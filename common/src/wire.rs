//! Topic roles and names, and the door between the `record` crate (the bytes on Kafka: every record kind, its
//! header table and its MAC, defined once there) and librdkafka ([`kafka`]); the Redis key layout
//! ([`redis_key`], [`dedupe_layout`]). The record types are re-exported here for the services that read them.

use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use rdkafka::message::{Headers, Message, OwnedHeaders};

pub use hookline_record::{
    FORMAT_VERSION, MAX_DLQ_ERROR_BYTES, READABLE_FORMAT_VERSIONS, RECORD_MAC_DOMAIN, RECORD_MAC_VERSION,
    UNAUTHENTICATED_RECORD_CLASS, WireError,
    dead_letter::DeadLetterEntry,
    header,
    inbound::EventMeta,
    origin,
    status::{EntryStatus, EntryStatusRecord, REPROCESS_STATUS_KEY_PREFIX},
};

/// What a topic is for. Names are configuration; roles are fixed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicRole {
    /// Verified webhooks, written only by the gateway (and the replayer, re-driving DLQ entries).
    Inbound,
    /// Events that could not be processed: raw body, original headers, failure metadata.
    DeadLetter,
    /// Compacted; keyed by DLQ entry id; the fate of each entry (replayed, succeeded, discarded).
    DeadLetterStatus,
    /// Events waiting for their next handler attempt: one topic per consumer service,
    /// `<kafka.retry_topic>.<service>`, written and read by that service only.
    Retry,
}

/// Default topic names, matching `scripts/stack` and the deploy configs.
pub mod default_topic {
    pub const INBOUND: &str = "webhooks.inbound";
    pub const DEAD_LETTER: &str = "webhooks.dlq";
    pub const DEAD_LETTER_STATUS: &str = "webhooks.dlq-status";
    /// The base of every service's retry topic (`webhooks.retry.<service>`); before services had names, the
    /// one retry topic every consumer shared, still drained by an upgraded service.
    pub const RETRY: &str = "webhooks.retry";
    /// Compacted; operators' instructions to running services (route pauses: [`crate::control`]).
    pub const CONTROL: &str = "webhooks.control";
}

pub mod dedupe_layout;
mod done_marker;
mod fetched;
pub mod kafka;
pub mod redis_key;

pub use fetched::{FetchedRecord, OwnedHeaderTable};

/// Milliseconds since the Unix epoch, as written into `*-at-ms` headers.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The inbound record's headers for `meta` alone, as librdkafka headers (tests and tools that write a record by
/// hand; writers build a [`hookline_record::inbound::InboundRecord`]).
pub fn event_headers(meta: &EventMeta) -> OwnedHeaders {
    let mut table = hookline_record::HeaderTable::with_capacity(8);
    meta.encode_into(&mut table);
    kafka::owned_headers(&table)
}

/// Reads an inbound record's metadata from its librdkafka headers ([`EventMeta::decode`]).
pub fn event_meta<H: Headers>(headers: Option<&H>) -> Result<EventMeta, WireError> {
    EventMeta::decode(kafka::headers_of(headers))
}

/// Reads a dead-letter record ([`DeadLetterEntry::decode`]).
pub fn dead_letter_entry<M: Message>(message: &M) -> DeadLetterEntry {
    let position = hookline_record::dead_letter::Position {
        topic: message.topic(),
        partition: message.partition(),
        offset: message.offset(),
        timestamp_ms: message.timestamp().to_millis(),
    };
    DeadLetterEntry::decode(position, message.payload().map_or(0, <[u8]>::len), kafka::headers_of(message.headers()))
}

/// One inbound event as a consumer sees it: its metadata, raw body and where it lives in Kafka.
#[derive(Debug, Clone)]
pub struct InboundEvent {
    pub meta: EventMeta,
    pub body: Bytes,
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    /// Set when the replayer re-drove this record from a DLQ entry.
    pub replay_of: Option<String>,
    /// With `replay_of`: how many times that entry has been re-driven.
    pub replay_count: Option<u32>,
    /// The provider's own id when it is not the dedupe id (it was not signed): metadata, for searching logs by
    /// the id a provider's dashboard shows ([`header::PROVIDER_EVENT_ID`]).
    pub provider_event_id: Option<String>,
    /// [`header::ORIGIN`]: `Some("reconciled")` when the reconciler fetched the event from the provider's API;
    /// `None` for a webhook the gateway verified.
    pub origin: Option<String>,
    /// The provider's request headers the gateway carried ([`header::FORWARDED_PREFIX`], its source's
    /// `forward_headers` allowlist): lowercase name without the prefix, and value, one entry per value, in record
    /// order. Bounded by what the gateway accepted of the request's headers.
    pub forwarded_headers: Vec<(String, Bytes)>,
    /// [`header::SERVICE`]: the only consumer service that may process this record, when it is addressed to one.
    pub service: Option<String>,
    /// [`header::REPROCESS_ID`]: the re-processing run this record belongs to, if any.
    pub reprocess_id: Option<String>,
    /// The destination of a fan-out service it is for: [`header::DESTINATION`] as read (a retry, deferral or
    /// re-drive of one destination), and on a fresh record the destination its consumer assigned it. Always
    /// `None` in a first-match service, whatever the record carries.
    pub destination: Option<String>,
}

impl InboundEvent {
    pub fn from_message<M: Message>(message: &M) -> Result<Self, WireError> {
        Self::from_parts(message, message.headers())
    }

    /// From `message`'s body and position, and `headers` (its own, or a copy of them).
    pub fn from_parts<M: Message, H: Headers>(message: &M, headers: Option<&H>) -> Result<Self, WireError> {
        Self::with_body(
            (message.topic(), message.partition(), message.offset()),
            headers,
            Bytes::copy_from_slice(message.payload().unwrap_or_default()),
        )
    }

    /// From a fetched record, sharing its body rather than copying it.
    pub fn from_fetched(record: &FetchedRecord) -> Result<Self, WireError> {
        Self::with_body((record.topic(), record.partition(), record.offset()), record.headers(), record.body())
    }

    fn with_body<H: Headers>(
        (topic, partition, offset): (&str, i32, i64),
        headers: Option<&H>,
        body: Bytes,
    ) -> Result<Self, WireError> {
        let record = hookline_record::inbound::InboundRecord::decode(kafka::headers_of(headers))?;
        Ok(Self {
            meta: record.meta,
            body,
            topic: topic.to_owned(),
            partition,
            offset,
            replay_of: record.replay_of,
            replay_count: record.replay_count,
            provider_event_id: record.provider_event_id,
            origin: record.origin,
            forwarded_headers: record.forwarded_headers,
            service: record.service,
            reprocess_id: record.reprocess_id,
            destination: record.destination,
        })
    }
}

/// The first header of that name, as UTF-8. `None` when absent; an error when present but not UTF-8.
pub fn header_str<H: Headers>(headers: Option<&H>, name: &'static str) -> Option<Result<String, WireError>> {
    let headers = headers?;
    let value = headers.iter().find(|h| h.key == name)?.value?;
    Some(std::str::from_utf8(value).map(str::to_owned).map_err(|_| WireError::BadHeader(name)))
}

#[cfg(test)]
mod tests {
    use rdkafka::message::Header;

    use super::*;

    /// One pass over the headers reads every field as a lookup by name would: the first header of a name wins,
    /// a null first value is absent, a value that is not UTF-8 fails where it is required or checked.
    #[test]
    fn an_event_read_in_one_pass_reads_as_lookups_by_name() {
        use rdkafka::{Timestamp, message::OwnedMessage};
        let header = |key: &'static str, value: Option<&'static [u8]>| Header { key, value };
        let headers = OwnedHeaders::new()
            .insert(header("http-x-github-event", Some(b"push")))
            .insert(header(header::FORMAT_VERSION, Some(b"2")))
            .insert(header(header::SOURCE, Some(b"github")))
            .insert(header(header::SOURCE, Some(b"stripe")))
            .insert(header(header::EVENT_ID, Some(b"d-1")))
            .insert(header(header::RECEIVED_AT_MS, Some(b"17")))
            .insert(header(header::SECRET_ID, Some(b"primary")))
            .insert(header(header::ORDERING_KEY, None))
            .insert(header(header::ORDERING_KEY, Some(b"k")))
            .insert(header(header::PROVIDER_EVENT_ID, Some(&[0xff, 0xfe])))
            .insert(header(header::REPLAY_COUNT, Some(b"3")))
            .insert(header(header::REPROCESS_ID, Some(b"run-1")));
        let message =
            OwnedMessage::new(Some(b"{}".to_vec()), None, "t".into(), Timestamp::NotAvailable, 1, 2, Some(headers));
        let event = InboundEvent::from_message(&message).expect("an event");
        let by_name = |name| header_str(message.headers(), name).and_then(Result::ok);
        assert_eq!(event.meta.source, "github", "the first of the name");
        assert_eq!(event.meta.source, by_name(header::SOURCE).expect("source"));
        assert_eq!(event.meta.ordering_key, None, "a null first value is absent");
        assert_eq!(event.meta.ordering_key, by_name(header::ORDERING_KEY));
        assert_eq!(event.provider_event_id, None, "not UTF-8: left out where it is optional");
        assert_eq!((event.replay_count, event.reprocess_id.as_deref()), (Some(3), Some("run-1")));
        assert_eq!(event.meta.event_type, None);
        assert_eq!(event.forwarded_headers, vec![("x-github-event".to_owned(), Bytes::from_static(b"push"))]);
        let bad = OwnedHeaders::new()
            .insert(header(header::FORMAT_VERSION, Some(b"2")))
            .insert(header(header::RECEIVED_AT_MS, Some(b"17")))
            .insert(header(header::SOURCE, Some(&[0xff])));
        assert_eq!(event_meta(Some(&bad)), Err(WireError::BadHeader(header::SOURCE)));
    }

    #[test]
    fn dedupe_key_layout_is_prefix_service_source_event_id() {
        assert_eq!(
            redis_key::dedupe("hookline:dedupe", "billing", "github", "abc"),
            "hookline:dedupe:svc=billing:github:abc"
        );
        assert_eq!(redis_key::dedupe_unscoped("hookline:dedupe", "github", "abc"), "hookline:dedupe:github:abc");
        assert_eq!(
            redis_key::reprocess("hookline:dedupe", "billing", "r1", "github", "abc"),
            "hookline:dedupe:svc=billing:reprocess=r1:github:abc"
        );
    }

    #[test]
    fn headers_carry_every_field() {
        let meta = EventMeta {
            source: "github".into(),
            event_id: "d-1".into(),
            event_type: Some("push".into()),
            received_at_ms: 1_700_000_000_123,
            content_type: Some("application/json".into()),
            secret_id: "primary".into(),
            ordering_key: Some("cus_1".into()),
        };
        let headers = event_headers(&meta);
        let names: Vec<&str> = headers.iter().map(|h| h.key).collect();
        for expected in [
            header::SOURCE,
            header::EVENT_ID,
            header::EVENT_TYPE,
            header::RECEIVED_AT_MS,
            header::CONTENT_TYPE,
            header::SECRET_ID,
            header::FORMAT_VERSION,
            header::ORDERING_KEY,
        ] {
            assert!(names.contains(&expected), "missing {expected}");
        }
        assert_eq!(meta.record_key(), "cus_1");
    }
}
