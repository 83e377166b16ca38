//! The wire format every service agrees on: the Kafka record a verified webhook becomes, the dead-letter
//! record, the topic roles and the Redis key layout. This module is the single source of truth; ARCHITECTURE.md
//! documents the same constants. Changing a name here is a wire-format change: bump [`FORMAT_VERSION`].
//!
//! Inbound record (topic role [`TopicRole::Inbound`]):
//! - key: the source's ordering key when it has one (version 2), otherwise the event id, so every delivery of
//!   one event (and, with an ordering key, every event of one key) lands on one partition;
//! - value: the raw request body, byte for byte as received (never re-serialized);
//! - headers: [`header`] constants below. Only the gateway writes them, and only after verification.

use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};

/// Version of the record layout described here, carried in [`header::FORMAT_VERSION`].
///
/// - `1`: key = event id; no ordering key.
/// - `2`: adds [`header::ORDERING_KEY`]; when present, the record's key is that value instead of the event id.
///   The dedupe id is always [`header::EVENT_ID`], never the key. Readers accept both versions.
pub const FORMAT_VERSION: &str = "2";

/// The version of the record MAC ([`header::MAC`]): the first field of its value, and part of what is MACed.
pub const RECORD_MAC_VERSION: &str = "v1";

/// The domain tag that starts every record MAC's input, so that no other HMAC made with the same key (none is)
/// could ever be mistaken for one.
pub const RECORD_MAC_DOMAIN: &str = "hookline-record-mac";

/// Every record format version this build reads.
pub const READABLE_FORMAT_VERSIONS: &[&str] = &["1", "2"];

pub mod header;

/// Values of [`header::ORIGIN`].
pub mod origin {
    /// Fetched from the provider's event API with our credentials (over TLS) by the reconciler, because the
    /// provider cannot redeliver it (Stripe). Keyed and deduped by the provider's event id like its webhook.
    pub const RECONCILED: &str = "reconciled";
}

/// The fate of a dead-letter entry, as recorded in the compacted status topic (topic role
/// [`TopicRole::DeadLetterStatus`]): key = the entry id ([`DeadLetterEntry::entry_id`]), value = this, as JSON.
/// The latest record of an entry is its current status; an entry with no record is new.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EntryStatusRecord {
    pub status: EntryStatus,
    /// When it was recorded, ms since the epoch.
    pub at_ms: i64,
    /// Who recorded it: `consumer:<group>` or `replayer:<operator>`.
    pub by: String,
    /// The event's id, for reading the status topic on its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_id: Option<String>,
    /// For `failed_again`: the id of the new DLQ entry the event landed in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_entry: Option<String>,
    /// Free text: a discard reason, or why a replay was a duplicate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// For `replayed`: how many times the entry has been re-driven, this time included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replays: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryStatus {
    /// The replayer is re-producing the entry to the inbound topic. Written *before* the produce, so the
    /// consumer's outcome record (which can follow within milliseconds) is always the later one.
    Replayed,
    /// The re-drive could not be produced (`note` says why); the entry is as it was before.
    ReplayFailed,
    /// A consumer processed the re-driven event (or found it already processed).
    Succeeded,
    /// The re-driven event failed again and landed in a new entry (`new_entry`).
    FailedAgain,
    /// An operator discarded the entry (`note` = reason); it stays in Kafka.
    Discarded,
}

/// Status-topic keys of re-processing fates start with this (`reprocess:<run id>:<topic>:<partition>:<offset>`,
/// and `reprocess:<run id>` for the request itself): they are not DLQ entries.
pub const REPROCESS_STATUS_KEY_PREFIX: &str = "reprocess:";

/// [`header::dlq::ERROR_CLASS`] of a record dead-lettered because its MAC ([`header::MAC`]) was missing or wrong.
/// The replayer refuses to re-drive such an entry without `force`.
pub const UNAUTHENTICATED_RECORD_CLASS: &str = "unauthenticated_record";

/// Longest error message kept in a DLQ record, in bytes.
pub const MAX_DLQ_ERROR_BYTES: usize = 2048;

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

mod dead_letter;
pub mod dedupe_layout;
mod done_marker;
mod fetched;
mod record_view;
pub mod redis_key;

pub use dead_letter::DeadLetterEntry;
pub use fetched::{FetchedRecord, OwnedHeaderTable};
pub use record_view::{HeaderTable, RecordView};

/// Milliseconds since the Unix epoch, as written into `*-at-ms` headers.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The metadata of a verified webhook, as carried in the inbound record's headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventMeta {
    pub source: String,
    pub event_id: String,
    pub event_type: Option<String>,
    pub received_at_ms: i64,
    pub content_type: Option<String>,
    pub secret_id: String,
    /// The source's ordering key for this event, when it has one ([`header::ORDERING_KEY`]).
    pub ordering_key: Option<String>,
}

impl EventMeta {
    /// The Kafka headers of the inbound record for this event.
    pub fn to_headers(&self) -> OwnedHeaders {
        let received_at = self.received_at_ms.to_string();
        let mut headers = OwnedHeaders::new_with_capacity(7)
            .insert(str_header(header::SOURCE, &self.source))
            .insert(str_header(header::EVENT_ID, &self.event_id))
            .insert(str_header(header::RECEIVED_AT_MS, &received_at))
            .insert(str_header(header::SECRET_ID, &self.secret_id))
            .insert(str_header(header::FORMAT_VERSION, FORMAT_VERSION));
        if let Some(event_type) = &self.event_type {
            headers = headers.insert(str_header(header::EVENT_TYPE, event_type));
        }
        if let Some(content_type) = &self.content_type {
            headers = headers.insert(str_header(header::CONTENT_TYPE, content_type));
        }
        if let Some(ordering_key) = &self.ordering_key {
            headers = headers.insert(str_header(header::ORDERING_KEY, ordering_key));
        }
        headers
    }

    /// The Kafka record key: the ordering key when the source has one, otherwise the event id.
    pub fn record_key(&self) -> &str {
        self.ordering_key.as_deref().unwrap_or(&self.event_id)
    }

    /// Reads the metadata back from an inbound record's headers. Fails on a record that no gateway wrote
    /// (missing source or event id, unknown format version): the consumer treats that as poison.
    pub fn from_headers<H: Headers>(headers: Option<&H>) -> Result<Self, WireError> {
        Self::from_slots(&Slots::read(headers))
    }

    fn from_slots(slots: &Slots<'_>) -> Result<Self, WireError> {
        let get = |name: &'static str| slots.text(name).transpose();
        let required = |name: &'static str| get(name)?.ok_or(WireError::MissingHeader(name));
        let version = required(header::FORMAT_VERSION)?;
        if !READABLE_FORMAT_VERSIONS.contains(&version.as_str()) {
            return Err(WireError::UnsupportedVersion(version));
        }
        let received_at = required(header::RECEIVED_AT_MS)?;
        Ok(Self {
            source: required(header::SOURCE)?,
            event_id: required(header::EVENT_ID)?,
            event_type: get(header::EVENT_TYPE)?,
            received_at_ms: received_at.parse().map_err(|_| WireError::BadHeader(header::RECEIVED_AT_MS))?,
            content_type: get(header::CONTENT_TYPE)?,
            secret_id: required(header::SECRET_ID)?,
            ordering_key: get(header::ORDERING_KEY)?,
        })
    }
}

/// The headers an inbound event is read from, found in one pass over a record's headers (each a first value of
/// its name, as [`header_str`] finds it), instead of one scan per name.
struct Slots<'a> {
    values: [Option<Option<&'a [u8]>>; SLOT_NAMES.len()],
}

const SLOT_NAMES: [&str; 14] = [
    header::FORMAT_VERSION,
    header::RECEIVED_AT_MS,
    header::SOURCE,
    header::EVENT_ID,
    header::EVENT_TYPE,
    header::CONTENT_TYPE,
    header::SECRET_ID,
    header::ORDERING_KEY,
    header::REPLAY_OF,
    header::REPLAY_COUNT,
    header::PROVIDER_EVENT_ID,
    header::ORIGIN,
    header::SERVICE,
    header::REPROCESS_ID,
];

impl<'a> Slots<'a> {
    fn read<H: Headers>(headers: Option<&'a H>) -> Self {
        let mut slots = Self { values: [None; SLOT_NAMES.len()] };
        for header in headers.into_iter().flat_map(Headers::iter) {
            // Every name of ours starts `hookline-`: the rest (forwarded `http-*` headers) is passed over at once.
            if !header.key.starts_with("hookline-") {
                continue;
            }
            if let Some(index) = SLOT_NAMES.iter().position(|name| *name == header.key) {
                slots.values[index].get_or_insert(header.value);
            }
        }
        slots
    }

    /// As [`header_str`]: `None` when absent (or null), an error when present but not UTF-8.
    fn text(&self, name: &'static str) -> Option<Result<String, WireError>> {
        let index = SLOT_NAMES.iter().position(|slot| *slot == name)?;
        let value = self.values[index]??;
        Some(std::str::from_utf8(value).map(str::to_owned).map_err(|_| WireError::BadHeader(name)))
    }
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
}

impl InboundEvent {
    pub fn from_message<M: Message>(message: &M) -> Result<Self, WireError> {
        Self::from_parts(message, message.headers())
    }

    /// From `message`'s body and position, and its headers as read once ([`RecordView`]).
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
        let slots = Slots::read(headers);
        let text = |name| slots.text(name).and_then(Result::ok);
        Ok(Self {
            meta: EventMeta::from_slots(&slots)?,
            body,
            topic: topic.to_owned(),
            partition,
            offset,
            replay_of: slots.text(header::REPLAY_OF).transpose()?,
            replay_count: text(header::REPLAY_COUNT).and_then(|n| n.parse().ok()),
            provider_event_id: text(header::PROVIDER_EVENT_ID),
            origin: text(header::ORIGIN),
            forwarded_headers: forwarded_headers(headers),
            service: text(header::SERVICE),
            reprocess_id: text(header::REPROCESS_ID),
        })
    }
}

/// The record's `http-*` headers ([`header::FORWARDED_PREFIX`]) as (lowercase name without the prefix, value).
fn forwarded_headers<H: Headers>(headers: Option<&H>) -> Vec<(String, Bytes)> {
    let Some(headers) = headers else { return Vec::new() };
    headers
        .iter()
        .filter_map(|header| {
            let name = header.key.strip_prefix(header::FORWARDED_PREFIX)?;
            Some((name.to_ascii_lowercase(), Bytes::copy_from_slice(header.value.unwrap_or_default())))
        })
        .collect()
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    #[error("record has no `{0}` header")]
    MissingHeader(&'static str),
    #[error("record header `{0}` is not valid")]
    BadHeader(&'static str),
    #[error("record format version `{0}` is not supported")]
    UnsupportedVersion(String),
}

fn str_header<'a>(key: &'a str, value: &'a str) -> Header<'a, &'a str> {
    Header { key, value: Some(value) }
}

/// The first header of that name, as UTF-8. `None` when absent; an error when present but not UTF-8.
pub fn header_str<H: Headers>(headers: Option<&H>, name: &'static str) -> Option<Result<String, WireError>> {
    let headers = headers?;
    let value = headers.iter().find(|h| h.key == name)?.value?;
    Some(std::str::from_utf8(value).map(str::to_owned).map_err(|_| WireError::BadHeader(name)))
}

#[cfg(test)]
mod tests {
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
        assert_eq!(EventMeta::from_headers(Some(&bad)), Err(WireError::BadHeader(header::SOURCE)));
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
        let headers = meta.to_headers();
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
