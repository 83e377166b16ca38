//! A record's headers read out of librdkafka once.
//!
//! Every reader of a header (`header_str`, the inbound record, the retry headers, the record MAC)
//! scans the record's headers from the first. On librdkafka's own headers each step of a scan is a call into C
//! and a UTF-8 check of the header's name, and a record's path in the consumer reads some twenty headers by name:
//! about a hundred such steps per record. [`HeaderTable`] does the calls once, in one pass, and then answers every
//! scan from a slice of borrowed names and values. It implements rdkafka's [`Headers`], so every reader takes it
//! unchanged; [`RecordView`] carries it beside its record.

use rdkafka::message::{Header, Headers, Message};

/// The headers of one record, in record order, borrowed from the record: names checked as UTF-8 once.
#[derive(Debug, Clone, Default)]
pub struct HeaderTable<'a> {
    entries: Vec<Header<'a, &'a [u8]>>,
}

impl<'a> HeaderTable<'a> {
    /// Reads every header of `headers` once.
    pub fn read<H: Headers>(headers: &'a H) -> Self {
        Self { entries: headers.iter().collect() }
    }
}

impl Headers for HeaderTable<'_> {
    fn count(&self) -> usize {
        self.entries.len()
    }

    fn try_get(&self, idx: usize) -> Option<Header<'_, &[u8]>> {
        self.entries.get(idx).map(|header| Header { key: header.key, value: header.value })
    }
}

/// A record with its headers read once ([`HeaderTable`]): readers take [`Self::headers`] where they would take the
/// record's own.
#[derive(Debug)]
pub struct RecordView<'a, M> {
    message: &'a M,
    headers: Option<HeaderTable<'a>>,
}

impl<'a, M: Message> RecordView<'a, M> {
    pub fn new(message: &'a M) -> Self {
        Self { message, headers: message.headers().map(HeaderTable::read) }
    }

    /// The record itself: its key, body and position (and the record, to copy it).
    pub fn message(&self) -> &'a M {
        self.message
    }

    /// Its headers, as read once.
    pub fn headers(&self) -> Option<&HeaderTable<'a>> {
        self.headers.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use rdkafka::{
        Timestamp,
        message::{OwnedHeaders, OwnedMessage},
    };

    use super::*;
    use crate::wire::{EventMeta, event_headers, event_meta, header, header_str};

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
            .insert(Header { key: "http-x-a", value: Some("1") })
            .insert(Header { key: "http-x-a", value: Some("2") })
            .insert(Header::<&[u8]> { key: "empty", value: None });
        OwnedMessage::new(
            Some(b"{}".to_vec()),
            Some(b"d-1".to_vec()),
            "t".into(),
            Timestamp::NotAvailable,
            3,
            7,
            Some(headers),
        )
    }

    #[test]
    fn the_view_reads_as_the_record_does() {
        let message = record();
        let view = RecordView::new(&message);
        let (ours, theirs) = (view.headers().unwrap(), message.headers().unwrap());
        assert_eq!(ours.count(), theirs.count());
        let pairs = |headers: &dyn Fn(usize) -> Option<(String, Option<Vec<u8>>)>| {
            (0..=theirs.count()).map(headers).collect::<Vec<_>>()
        };
        assert_eq!(
            pairs(&|i| ours.try_get(i).map(|h| (h.key.to_owned(), h.value.map(<[u8]>::to_vec)))),
            pairs(&|i| theirs.try_get(i).map(|h| (h.key.to_owned(), h.value.map(<[u8]>::to_vec)))),
        );
        assert_eq!(event_meta(view.headers()), event_meta(message.headers()));
        assert_eq!(header_str(view.headers(), "http-x-a"), Some(Ok("1".to_owned())), "the first of that name");
        assert_eq!(header_str(view.headers(), header::ORDERING_KEY), None);
        assert!(std::ptr::eq(view.message(), &message));
    }

    #[test]
    fn a_record_without_headers_has_none() {
        let message = OwnedMessage::new(None, None, "t".into(), Timestamp::NotAvailable, 0, 0, None);
        assert!(RecordView::new(&message).headers().is_none());
        let empty = OwnedMessage::new(None, None, "t".into(), Timestamp::NotAvailable, 0, 0, Some(OwnedHeaders::new()));
        assert_eq!(RecordView::new(&empty).headers().map(Headers::count), Some(0));
    }
}
