//! A fetched record, copied out of librdkafka once.
//!
//! `BorrowedMessage::detach` copies a record into an `OwnedMessage`: its payload into a `Vec`, and its headers
//! through librdkafka (`rd_kafka_headers_copy`: one C allocation per header, and every later read of a header by
//! name is a call into C plus a UTF-8 check of each name it passes). [`FetchedRecord`] is the consumer's owned
//! copy instead: the body as [`Bytes`] (shared, never copied again, by the event handed to a handler and by every
//! copy produced from it), the key likewise, and the headers in one table whose names were checked as UTF-8 once,
//! held in two buffers. Its headers implement rdkafka's [`Headers`], so every reader written for a record's headers
//! (the record MAC, [`super::EventMeta::from_headers`], the retry headers) takes them unchanged.

use std::sync::Arc;

use bytes::Bytes;
use rdkafka::{
    Timestamp,
    message::{Header, Headers, Message},
};

/// A record's headers, owned: every name in one string, every value in one buffer, in record order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnedHeaderTable {
    names: String,
    values: Vec<u8>,
    entries: Vec<Entry>,
}

/// Where one header lives in the table's buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    name: (u32, u32),
    /// `None`: a null value.
    value: Option<(u32, u32)>,
}

impl OwnedHeaderTable {
    /// Copies every header of `headers`, in one pass, into buffers sized once.
    pub fn copy_of<H: Headers + ?Sized>(headers: &H) -> Self {
        let count = headers.count();
        let mut table = Self { names: String::with_capacity(count * 24), values: Vec::new(), entries: Vec::new() };
        table.entries.reserve_exact(count);
        let headers: Vec<Header<'_, &[u8]>> = (0..count).filter_map(|idx| headers.try_get(idx)).collect();
        table.values.reserve_exact(headers.iter().map(|header| header.value.map_or(0, <[u8]>::len)).sum());
        for header in headers {
            table.push(header.key, header.value);
        }
        table
    }

    /// The bytes of every name and value together (what a header costs a window), without a walk.
    pub fn byte_len(&self) -> usize {
        self.names.len() + self.values.len()
    }

    /// Appends one header.
    pub fn push(&mut self, name: &str, value: Option<&[u8]>) {
        let name_start = offset(self.names.len());
        self.names.push_str(name);
        let value = value.map(|value| {
            let start = offset(self.values.len());
            self.values.extend_from_slice(value);
            (start, offset(self.values.len()))
        });
        self.entries.push(Entry { name: (name_start, offset(self.names.len())), value });
    }
}

fn offset(len: usize) -> u32 {
    u32::try_from(len).expect("a record's headers are far below 4 GiB")
}

impl Headers for OwnedHeaderTable {
    fn count(&self) -> usize {
        self.entries.len()
    }

    fn try_get(&self, idx: usize) -> Option<Header<'_, &[u8]>> {
        let entry = self.entries.get(idx)?;
        Some(Header {
            key: self.names.get(entry.name.0 as usize..entry.name.1 as usize)?,
            value: entry.value.and_then(|(start, end)| self.values.get(start as usize..end as usize)),
        })
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
    use crate::wire::{EventMeta, header_str};

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
        let headers = meta
            .to_headers()
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
        assert_eq!(EventMeta::from_headers(fetched.headers()), EventMeta::from_headers(message.headers()));
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
