//! A fetched record, copied out of librdkafka once.
//!
//! `BorrowedMessage::detach` copies a record into an `OwnedMessage`: its payload into a `Vec`, and its headers
//! through librdkafka (`rd_kafka_headers_copy`: one C allocation per header, and every later read of a header by
//! name is a call into C plus a UTF-8 check of each name it passes). [`FetchedRecord`] is the consumer's owned
//! copy instead: the body as [`Bytes`] (shared, never copied again, by the event handed to a handler and by every
//! copy produced from it), the key likewise, and the headers in one table whose names were checked as UTF-8 once,
//! held in two buffers. Its headers implement rdkafka's [`Headers`], so every reader written for a record's headers
//! (the record MAC, the inbound record, the retry headers) takes them unchanged.

use std::sync::Arc;

use bytes::Bytes;
use hookline_record::HeaderTable;
use rdkafka::{
    Timestamp,
    message::{Header, Headers, Message},
};

/// A record's headers, owned: the `record` crate's one [`HeaderTable`], which readers take, here with librdkafka's
/// [`Headers`] for the readers not yet moved onto it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnedHeaderTable(HeaderTable);

impl OwnedHeaderTable {
    /// Copies every header of `headers`, in one pass, into buffers sized once.
    pub fn copy_of<H: Headers + ?Sized>(headers: &H) -> Self {
        let headers = (0..headers.count())
            .filter_map(|index| headers.try_get(index))
            .map(|header| hookline_record::Header { name: header.key, value: header.value });
        Self(HeaderTable::copy_of(headers))
    }

    /// The table itself.
    pub fn table(&self) -> &HeaderTable {
        &self.0
    }
}

impl From<HeaderTable> for OwnedHeaderTable {
    fn from(table: HeaderTable) -> Self {
        Self(table)
    }
}

impl std::ops::Deref for OwnedHeaderTable {
    type Target = HeaderTable;

    fn deref(&self) -> &HeaderTable {
        &self.0
    }
}

impl std::ops::DerefMut for OwnedHeaderTable {
    fn deref_mut(&mut self) -> &mut HeaderTable {
        &mut self.0
    }
}

impl Headers for OwnedHeaderTable {
    fn count(&self) -> usize {
        self.0.len()
    }

    fn try_get(&self, idx: usize) -> Option<Header<'_, &[u8]>> {
        self.0.get(idx).map(|header| Header { key: header.name, value: header.value })
    }
}

/// One record as fetched: its position, timestamp, key, body and headers, owned.
#[derive(Debug, Clone)]
pub struct FetchedRecord {
    topic: Arc<str>,
    partition: i32,
    offset: i64,
    timestamp: Timestamp,
    key: Option<Bytes>,
    payload: Option<Bytes>,
    headers: Option<OwnedHeaderTable>,
}

impl FetchedRecord {
    /// Copies `message` (a record still in librdkafka's buffers). `topic` is the record's topic, passed in so that
    /// the readers of one partition share one allocation of its name.
    pub fn copy_of<M: Message>(message: &M, topic: Arc<str>) -> Self {
        debug_assert_eq!(&*topic, message.topic());
        Self {
            topic,
            partition: message.partition(),
            offset: message.offset(),
            timestamp: message.timestamp(),
            key: message.key().map(Bytes::copy_from_slice),
            payload: message.payload().map(Bytes::copy_from_slice),
            headers: message.headers().map(OwnedHeaderTable::copy_of),
        }
    }

    /// A record built in place (tests, and records read back from elsewhere).
    pub fn new(
        topic: impl Into<Arc<str>>,
        partition: i32,
        offset: i64,
        timestamp: Timestamp,
        key: Option<Bytes>,
        payload: Option<Bytes>,
        headers: Option<OwnedHeaderTable>,
    ) -> Self {
        Self { topic: topic.into(), partition, offset, timestamp, key, payload, headers }
    }

    /// The body, shared: what the event handed to a handler and every copy of the record hold.
    pub fn body(&self) -> Bytes {
        self.payload.clone().unwrap_or_default()
    }

    /// The topic's name, shared.
    pub fn topic_name(&self) -> &Arc<str> {
        &self.topic
    }

    /// What its headers claim, believed by no one ([`hookline_record::Claims`]): for a record not decoded as its
    /// kind (its MAC refused, no gateway wrote it, addressed to another service).
    pub fn claims(&self) -> hookline_record::Claims<impl Iterator<Item = hookline_record::Header<'_>> + Clone> {
        hookline_record::Claims::of(self.headers.as_deref().into_iter().flat_map(HeaderTable::iter))
    }

    /// Its key, body and headers, to copy into a retry or a dead letter.
    pub fn original(&self) -> hookline_record::Original<'_> {
        static EMPTY: HeaderTable = HeaderTable::new();
        hookline_record::Original {
            key: self.key.clone(),
            body: self.payload.clone(),
            headers: self.headers.as_deref().unwrap_or(&EMPTY),
        }
    }
}

/// The accessors of rdkafka's `Message`, whose trait cannot be implemented here (its `payload_mut` is `unsafe`, and
/// the workspace forbids unsafe code): every reader of a record takes these parts.
impl FetchedRecord {
    pub fn key(&self) -> Option<&[u8]> {
        self.key.as_deref()
    }

    pub fn payload(&self) -> Option<&[u8]> {
        self.payload.as_deref()
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    pub fn partition(&self) -> i32 {
        self.partition
    }

    pub fn offset(&self) -> i64 {
        self.offset
    }

    pub fn timestamp(&self) -> Timestamp {
        self.timestamp
    }

    pub fn headers(&self) -> Option<&OwnedHeaderTable> {
        self.headers.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use rdkafka::message::{OwnedHeaders, OwnedMessage};

    use super::*;
    use crate::wire::{EventMeta, event_headers, event_meta, header_str};

    fn record() -> OwnedMessage {
        let meta = EventMeta {
            source: "github".into(),
            event_id: "d-1".into(),
            event_type: Some("push".into()),
            received_at_ms: 1_700_000_000_123,
            content_type: None,
            secret_id: "primary".into(),
            ordering_key: None,
        };
        let headers = event_headers(&meta)
            .insert(Header::<&[u8]> { key: "empty", value: None })
            .insert(Header { key: "http-x-a", value: Some("1") })
            .insert(Header::<&[u8]> { key: "zero", value: Some(b"") })
            .insert(Header { key: "http-x-a", value: Some("2") });
        OwnedMessage::new(
            Some(b"{\"a\":1}".to_vec()),
            Some(b"d-1".to_vec()),
            "t".into(),
            Timestamp::CreateTime(5),
            3,
            7,
            Some(headers),
        )
    }

    fn pairs<H: Headers>(headers: &H) -> Vec<(String, Option<Vec<u8>>)> {
        headers.iter().map(|h| (h.key.to_owned(), h.value.map(<[u8]>::to_vec))).collect()
    }

    #[test]
    fn the_copy_reads_as_the_record_does() {
        let message = record();
        let fetched = FetchedRecord::copy_of(&message, Arc::from("t"));
        assert_eq!(pairs(fetched.headers().unwrap()), pairs(message.headers().unwrap()));
        assert_eq!(fetched.headers().unwrap().count(), message.headers().unwrap().count());
        assert_eq!(fetched.headers().unwrap().try_get(99).map(|h| h.key), None);
        assert_eq!(event_meta(fetched.headers()), event_meta(message.headers()));
        assert_eq!(header_str(fetched.headers(), "http-x-a"), Some(Ok("1".to_owned())), "the first of that name");
        assert_eq!(header_str(fetched.headers(), "zero"), Some(Ok(String::new())));
        assert_eq!(header_str(fetched.headers(), "empty"), None, "a null value reads as absent, as before");
        assert_eq!(
            (fetched.key(), fetched.payload(), fetched.topic(), fetched.partition(), fetched.offset()),
            (message.key(), message.payload(), "t", 3, 7)
        );
        assert_eq!(fetched.timestamp(), Timestamp::CreateTime(5));
        assert_eq!(&fetched.body()[..], b"{\"a\":1}");
    }

    #[test]
    fn a_record_without_headers_or_body_has_none() {
        let message = OwnedMessage::new(None, None, "t".into(), Timestamp::NotAvailable, 0, 0, None);
        let fetched = FetchedRecord::copy_of(&message, Arc::from("t"));
        assert!(fetched.headers().is_none() && fetched.payload().is_none() && fetched.key().is_none());
        assert!(fetched.body().is_empty());
        let empty = OwnedMessage::new(None, None, "t".into(), Timestamp::NotAvailable, 0, 0, Some(OwnedHeaders::new()));
        assert_eq!(FetchedRecord::copy_of(&empty, Arc::from("t")).headers().map(Headers::count), Some(0));
    }
}
